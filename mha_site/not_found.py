"""Build step: each language has its own 404 page, and the site's root keeps the default one.

MkDocs writes the theme's ``404.html`` at the root of ``site_dir`` in every build, and
mkdocs-static-i18n builds the other languages into the same ``site_dir`` after the default one:
the last language built would own the root's 404 page (a Chinese page, with the English title
Material gives it, for every reader). Here, in the build of a language other than the default,
the 404 page it writes is moved into its folder (``zh/404.html``, for hosts that serve the nearest
404 page) and the default language's page, read before the build wrote over it, goes back to the
root. The theme's ``404.html`` (``mha_site/theme/``) says it in the page's language, and the
root's in both: GitHub Pages serves the root's for every missing address.
"""

from __future__ import annotations

from pathlib import Path

from mha_site.languages import DEFAULT, building

PAGE = "404.html"
_saved: dict[str, bytes | None] = {}
"""The root's 404 page as the default build wrote it, by the language whose build is running."""


def on_pre_build(config, **kwargs):
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
