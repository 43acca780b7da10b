"""Build step: each language has its own 404 page, and the site's root keeps the default one.

MkDocs writes the theme's ``404.html`` at the root of ``site_dir`` in every build, and
mkdocs-static-i18n builds the other languages into the same ``site_dir`` after the default one:
the last language built would own the root's 404 page (a Chinese page, with the English title
Material gives it, for every reader). Here, in the build of a language other than the default,
the 404 page it writes is moved into its folder (``zh/404.html``, for hosts that serve the nearest
404 page) and the default language's page, read before the build wrote over it, goes back to the
root. The theme's ``404.html`` (``mha_site/theme/``) says it in the page's language, and the
root's in both: GitHub Pages serves the root's for every missing address.

A missing address has no twin in the other language, so each 404 page's language switch goes to
each language's home page. The i18n plugin points the switch at the twins of each page as it
renders it, and leaves it there: without this step ``zh/404.html`` switched to the last page built
(``/mha/window/``). Its links before any page, the homes, are kept at the start of each build.
"""

from __future__ import annotations

import copy
from pathlib import Path

from mha_site.languages import DEFAULT, building

PAGE = "404.html"
_saved: dict[str, bytes | None] = {}
"""The root's 404 page as the default build wrote it, by the language whose build is running."""
_homes: list[dict] = []
"""The language switch as the i18n plugin sets it up for this build: each language's home page."""


def on_pre_build(config, **kwargs):
    _homes[:] = copy.deepcopy(config.extra.get("alternate") or [])
    language = building(config)
    if language != DEFAULT:
        root = Path(config.site_dir) / PAGE
        _saved[language] = root.read_bytes() if root.is_file() else None


def on_post_build(config, **kwargs):
    language = building(config)
    if language == DEFAULT or language not in _saved:
        return
    kept = _saved.pop(language)
    root = Path(config.site_dir) / PAGE
    if root.is_file():
        (Path(config.site_dir) / language).mkdir(parents=True, exist_ok=True)
        root.replace(Path(config.site_dir) / language / PAGE)
    if kept is not None:
        root.write_bytes(kept)


def on_template_context(context, template_name, config, **kwargs):
    # The plugin sets the item at each build and the attribute at each page: the two are apart on
    # MkDocs' LegacyConfig, and the templates read the attribute (``config.extra.alternate``).
    if template_name == PAGE and _homes:
        config.extra.alternate = copy.deepcopy(_homes)
    return context
