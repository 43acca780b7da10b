"""What the site tests need to know about the site: its languages, its pages and their URLs."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from mha_site.languages import LANGUAGES, mkdocs_config

ROOT = Path(__file__).resolve().parents[1]


def url_prefix() -> str:
    """The path the site lives under, from ``site_url`` (GitHub Pages serves a project at
    ``/<repo>/``, and so do ``mkdocs serve`` and the browser tests): ``/mha/``."""
    path = urlsplit(mkdocs_config().get("site_url") or "").path
    return "/" + path.strip("/") + "/" if path.strip("/") else "/"


def nav_pages() -> list[str]:
    """The Markdown pages listed in mkdocs.yml's nav, in order (``index.md``, ``math.md``, ...)."""
    config = mkdocs_config()

    def walk(items):
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            if isinstance(value, list):
                yield from walk(value)
            else:
                yield value

    return list(walk(config["nav"]))


def page_path(lang: str, page: str) -> str:
    """The URL path of a page relative to the site root: ``zh/math/``, ``""`` for the en home."""
    prefix = "" if lang == LANGUAGES[0] else f"{lang}/"
    slug = "" if page == "index.md" else page.removesuffix(".md") + "/"
    return prefix + slug


def doc_pages() -> list[Path]:
    """Every Markdown source page of the site, both languages: ``docs/en/index.md``, ..."""
    return sorted((ROOT / "docs").rglob("*.md"))


def each_doc_page(test):
    """Parametrize ``test`` over ``doc_pages()``, each named by its path (``docs/zh/math.md``)."""
    pages = doc_pages()
    return pytest.mark.parametrize("page", pages, ids=[str(p.relative_to(ROOT)) for p in pages])(
        test
    )
