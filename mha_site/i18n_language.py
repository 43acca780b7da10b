"""Build step: mkdocstrings and Python-Markdown get the language that the i18n plugin builds.

mkdocstrings reads ``theme.language`` in its ``on_config``, before the i18n plugin (priority -100)
switches it, so the zh API page would say "Parameters:". Running at priority 50, this hook copies
the i18n plugin's current language into the theme first, and the zh page says 参数 / 返回 / 异常.

The ``¶`` after every heading (``toc: permalink: true``) has the tooltip of the toc extension's
``permalink_title``, "Permanent link", in every language: the i18n plugin cannot give a language
its own ``markdown_extensions``. Each build sets it here, in its language, before any page (or
mkdocstrings' own Markdown) is rendered.
"""

from __future__ import annotations

from mkdocs.plugins import event_priority

from mha_site.languages import building, tr

PERMALINK_TITLE = ("Permanent link", "链接到此标题")
"""A heading's ¶ tooltip: Python-Markdown's default in English; in Chinese, as Sphinx says it."""


@event_priority(50)
def on_config(config, **kwargs):
    if config.plugins.get("i18n") is not None:
        config.theme["language"] = building(config)
    toc = config.mdx_configs.get("toc")
    if toc is not None and toc.get("permalink"):
        toc["permalink_title"] = tr(building(config), *PERMALINK_TITLE)
    return config
