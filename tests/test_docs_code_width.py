"""Code on the site fits its column: no line of a docs code block is wider than 80 characters.

With both sidebars open, Material's content column shows about 80 characters of code at 1280 px;
a longer line hides its end (often the very shape comment the reader came for) behind a scroll bar.
Includes of ``mha/*.py`` are exempt: the pages that include the package's code are widened instead.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from sitetools import each_doc_page

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 80
FENCE = re.compile(r"^([ \t]*)(```|~~~)[^\n]*\n(.*?)^\1\2[ \t]*$", re.MULTILINE | re.DOTALL)


def display_width(line: str) -> int:
    """Columns a line takes in a monospace font: CJK characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def too_wide(text: str, limit: int = LIMIT) -> list[tuple[int, int]]:
    """(line, columns) of each code-block line wider than ``limit`` columns, indentation removed."""
    found = []
    for match in FENCE.finditer(text):
        indent = len(match.group(1))
        first = text.count("\n", 0, match.start(3)) + 1
        for offset, line in enumerate(match.group(3).splitlines()):
            width = display_width(line[indent:])
            if width > limit and "--8<--" not in line:
                found.append((first + offset, width))
    return found


@each_doc_page
def test_code_lines_fit_the_column(page):
    wide = too_wide(page.read_text(encoding="utf-8"))
    assert not wide, f"{page.relative_to(ROOT)}: (line, width) over {LIMIT}: {wide}"


def test_checker_measures_lines_inside_fences_only():
    text = (
        "x" * 90
        + "\n\n```python\n"
        + "y" * 81
        + "\nok\n```\n\n    ```text\n    "
        + "z" * 80
        + "\n    ```\n"
    )
    assert too_wide(text) == [(4, 81)]


def test_chinese_characters_count_twice():
    assert too_wide("```python\n# " + "注" * 39 + "\n```\n") == []
    assert too_wide("```python\n# " + "注" * 40 + "\n```\n") == [(2, 82)]
