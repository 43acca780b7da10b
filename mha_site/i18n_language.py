"""Build step: give mkdocstrings the language that mkdocs-static-i18n is building.

mkdocstrings reads ``theme.language`` in its ``on_config``, before the i18n plugin (priority -100)
switches it, so the zh API page would say "Parameters:". Running at priority 50, this hook copies
the i18n plugin's current language into the theme first, and the zh page says 参数 / 返回 / 引发.
"""

from __future__ import annotations

from mkdocs.plugins import event_priority

from mha_site.languages import building


@event_priority(50)
def on_config(config, **kwargs):
    if config.plugins.get("i18n") is not None:
        config.theme["language"] = building(config)
    return config
