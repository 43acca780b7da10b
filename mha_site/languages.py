"""The site's languages, in one place: which ones, which one a page or a build is in, and a label
in each.

The list comes from mkdocs.yml (the i18n plugin's ``languages``), the default first: add a language
there and every step of the build, every checker and every test sees it.

>>> LANGUAGES
('en', 'zh')
>>> tr("zh", "head", "头"), tr("en", "head", "头")
('头', 'head')
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
"""The pages' sources: a folder per language, ``docs/en``, ``docs/zh``."""


@functools.cache
def mkdocs_config() -> dict:
    """mkdocs.yml as data (read once)."""
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def _i18n_languages() -> tuple[str, ...]:
    for plugin in mkdocs_config()["plugins"]:
        if isinstance(plugin, dict) and "i18n" in plugin:
            entries = plugin["i18n"]["languages"]
            default = [e["locale"] for e in entries if e.get("default")]
            return tuple(default + [e["locale"] for e in entries if not e.get("default")])
    raise LookupError("mkdocs.yml does not configure the i18n plugin's languages")


LANGUAGES: tuple[str, ...] = _i18n_languages()
"""Every language of the site, the default first: ``("en", "zh")``."""
DEFAULT = LANGUAGES[0]
"""The default language, built at the site's root."""


def doc_pages() -> list[Path]:
    """Every Markdown source page of the site, both languages, sorted: ``docs/en/api.md``, ..."""
    return sorted(DOCS.rglob("*.md"))


def nav_pages(nav: list | None = None) -> list[str]:
    """The Markdown pages of mkdocs.yml's nav (or of ``nav``, a nav as mkdocs.yml writes it), in
    order: ``["index.md", "math.md", ...]``."""
    found: list[str] = []
    for entry in mkdocs_config()["nav"] if nav is None else nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        found.extend(nav_pages(value) if isinstance(value, list) else [value])
    return found


def _language_and_path(page) -> tuple[str, str]:
    first, _, rest = page.file.src_uri.partition("/")
    return (first, rest) if first in LANGUAGES and rest else (DEFAULT, page.file.src_uri)


def page_language(page) -> str:
    """The language of a MkDocs page: the folder of its source (``zh/annotated.md`` is ``"zh"``)."""
    return _language_and_path(page)[0]


def page_path(page) -> str:
    """A MkDocs page's path within its language's folder: ``zh/masks.md`` is ``masks.md``."""
    return _language_and_path(page)[1]


def building(config) -> str:
    """The language the i18n plugin is building now (the default before its first build)."""
    i18n = config.plugins.get("i18n")
    language = getattr(i18n, "current_language", None) or getattr(i18n, "default_language", None)
    return language if language in LANGUAGES else DEFAULT


def check(language: str) -> str:
    """``language`` itself, or a ValueError naming the languages there are."""
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}, got {language!r}")
    return language


def tr(language: str, en: str, zh: str) -> str:
    """The text in ``language``: ``zh`` on a Chinese page, ``en`` on any other."""
    return zh if language == "zh" else en
