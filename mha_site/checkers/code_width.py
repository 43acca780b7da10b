"""Code on the site fits its column: no line of a docs code block is wider than 80 characters.

With both sidebars open, Material's content column shows about 80 characters of code at 1280 px;
a longer line hides its end (often the very shape comment the reader came for) behind a scroll bar.
Includes of ``mha/*.py`` are exempt: the pages that include the package's code are widened instead.

Text that a snippet holds is not code, and is shown as it is: the output lines of a doctest block
(what the code printed, which doctest compares), and the lines a triple-quoted string continues
onto in a python block (a file the snippet writes, such as the design post's class as a reader
pastes it). Their first line, which holds code, is measured. A page with such long lines hides its
sidebars, as the pages that include the package's code do.
"""

from __future__ import annotations

import io
import textwrap
import tokenize
import unicodedata

from mha_site.languages import ROOT, doc_pages
from mha_site.markdown import INCLUDE_LINE, fences

LIMIT = 80
PROMPTS = (">>>", "...")


def display_width(line: str) -> int:
    """Columns a line takes in a monospace font: CJK characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def text_lines(language: str, body: str) -> set[int]:
    """The indices (from 0) of the lines of a block's ``body`` that are text, not code: a python
    doctest block's output lines; a python block's lines inside a string after its first line.

    >>> sorted(text_lines("python", ">>> print('a')\\na\\n>>> 1\\n1\\n"))
    [1, 3]
    >>> sorted(text_lines("python", "f = '''\\nlong text\\n'''\\nx = 1\\n"))
    [1, 2]
    """
    if language != "python":
        return set()
    lines = body.splitlines()
    stripped = [line.strip() for line in lines]
    if any(line.startswith(">>> ") or line == ">>>" for line in stripped):
        return {i for i, line in enumerate(stripped) if line and not line.startswith(PROMPTS)}
    found: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(textwrap.dedent(body)).readline):
            if token.type == tokenize.STRING and token.end[0] > token.start[0]:
                found.update(range(token.start[0], token.end[0]))  # rows from 1: the lines after
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # a block that does not tokenize: every line is measured
    return found


def too_wide(text: str, limit: int = LIMIT) -> list[tuple[int, int]]:
    """(line, columns) of each code-block line wider than ``limit`` columns, indentation removed."""
    found = []
    for fence in fences(text):
        exempt = text_lines(fence.language, fence.body)
        for offset, line in enumerate(fence.body.splitlines()):
            width = display_width(line)
            if width > limit and offset not in exempt and not INCLUDE_LINE.match(line):
                found.append((fence.line + 1 + offset, width))
    return found


def check() -> list[str]:
    """Every code line of the site's pages wider than the column."""
    return [
        f"{page.relative_to(ROOT)}:{line}: {width} columns of code, over {LIMIT}: break the line"
        for page in doc_pages()
        for line, width in too_wide(page.read_text(encoding="utf-8"))
    ]
