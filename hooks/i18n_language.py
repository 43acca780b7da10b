"""MkDocs hook: give mkdocstrings the language that mkdocs-static-i18n is building.

mkdocstrings reads ``theme.language`` in its ``on_config``, before the i18n plugin (priority -100)
switches it, so the zh API page would say "Parameters:". Running at priority 50, this hook copies
the i18n plugin's current language into the theme first, and the zh page says 参数 / 返回 / 引发.
"""

from __future__ import annotations

from mkdocs.plugins import event_priority


@event_priority(50)
def on_config(config, **kwargs):
    i18n = config.plugins.get("i18n")
    language = getattr(i18n, "current_language", None)
    if language:
        config.theme["language"] = language
    return config
