"""The home page's reading guide ("How to read it", 怎么读) lists every page of the menu, in the
menu's order (mkdocs.yml's nav), one table row each, marked core, optional or reference, with what
the page gives. A page added to the nav and not to the guide, or listed out of order, fails."""

from __future__ import annotations

import re

import pytest

from mha_site.languages import DOCS, LANGUAGES, nav_pages

KINDS = {"en": ("core", "optional", "reference"), "zh": ("核心", "选读", "查阅")}
ROW = re.compile(
    r"^\| \[[^\]]+\]\((?P<page>[\w-]+\.md)\) \| (?P<kind>[^|]+?) \| (?P<gives>[^|]+?) \|$"
)


def guide(language: str) -> str:
    """The how-to-read section of the home page in ``language``."""
    text = (DOCS / language / "index.md").read_text(encoding="utf-8")
    start = text.index("{ #how-to-read }")
    end = text.index("\n## ", start)
    return text[start:end]


def rows(section: str) -> list[re.Match]:
    return [row for line in section.splitlines() if (row := ROW.match(line))]


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_guide_lists_every_nav_page_in_menu_order(language):
    listed = [row["page"] for row in rows(guide(language))]
    expected = [page for page in nav_pages() if page != "index.md"]
    assert listed == expected, (listed, expected)


@pytest.mark.parametrize("language", LANGUAGES)
def test_each_row_says_its_kind_and_what_the_page_gives(language):
    for row in rows(guide(language)):
        assert row["kind"] in KINDS[language], row[0]
        assert len(row["gives"]) >= 6, row[0]  # a few words, or a few characters in Chinese


def test_a_page_missing_or_out_of_order_fails():
    section = guide("en")
    found = [row["page"] for row in rows(section)]
    missing = [row["page"] for row in rows(section.replace("| [Sliding window](window.md) |", "|"))]
    assert "window.md" in found and "window.md" not in missing
    lines = section.splitlines()
    i = next(n for n, line in enumerate(lines) if "(why.md)" in line)
    lines[i], lines[i + 1] = lines[i + 1], lines[i]
    swapped = [row["page"] for row in rows("\n".join(lines))]
    assert swapped != found and sorted(swapped) == sorted(found)
