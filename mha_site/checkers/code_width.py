"""Code on the site fits its column: no line of a docs code block is wider than 80 characters.

With both sidebars open, Material's content column shows about 80 characters of code at 1280 px;
a longer line hides its end (often the very shape comment the reader came for) behind a scroll bar.
Includes of ``mha/*.py`` are exempt: the pages that include the package's code are widened instead.
"""

from __future__ import annotations

import unicodedata

from mha_site.languages import ROOT, doc_pages
from mha_site.markdown import INCLUDE_LINE, fences

LIMIT = 80


def display_width(line: str) -> int:
    """Columns a line takes in a monospace font: CJK characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def too_wide(text: str, limit: int = LIMIT) -> list[tuple[int, int]]:
    """(line, columns) of each code-block line wider than ``limit`` columns, indentation removed."""
    found = []
    for fence in fences(text):
        for number, line in enumerate(fence.body.splitlines(), start=fence.line + 1):
            width = display_width(line)
            if width > limit and not INCLUDE_LINE.match(line):
                found.append((number, width))
    return found


def check() -> list[str]:
    """Every code line of the site's pages wider than the column."""
    return [
        f"{page.relative_to(ROOT)}:{line}: {width} columns of code, over {LIMIT}: break the line"
        for page in doc_pages()
        for line, width in too_wide(page.read_text(encoding="utf-8"))
    ]
