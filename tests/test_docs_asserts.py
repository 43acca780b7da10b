"""Every snippet a reader sees checks something: no test that asserts nothing.

A visible ```python fence of the site must contain an ``assert`` or a doctest line (``>>>``, whose
printed output Sybil compares). Hidden ``invisible-code-block`` setup and include-only fences
(``--8<--``, checked by the root conftest) are exempt.
"""

from __future__ import annotations

import re
from pathlib import Path

from sitetools import each_doc_page

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^([ \t]*)```python[ \t]*\n(.*?)^\1```", re.MULTILINE | re.DOTALL)
CHECKS = re.compile(r"^\s*assert\b|^\s*>>> ", re.MULTILINE)
INCLUDE_ONLY = re.compile(r'(?:[ \t]*--8<--[ \t]+"[^"\n]+"[ \t]*\n)+')


def snippets_without_a_check(text: str) -> list[int]:
    """Line numbers of visible python fences that assert nothing."""
    lines = []
    for match in FENCE.finditer(text):
        body = match.group(2)
        if INCLUDE_ONLY.fullmatch(body) or CHECKS.search(body):
            continue
        lines.append(text.count("\n", 0, match.start()) + 1)
    return lines


@each_doc_page
def test_every_visible_snippet_checks_something(page):
    lines = snippets_without_a_check(page.read_text(encoding="utf-8"))
    assert not lines, f"{page.relative_to(ROOT)}: snippets at lines {lines} assert nothing"


def test_checker_catches_a_snippet_that_asserts_nothing():
    text = "# P\n\n```python\nx = 1\n```\n\n```python\nassert x == 1, x\n```\n"
    assert snippets_without_a_check(text) == [3]


def test_checker_accepts_doctests_includes_and_indented_fences():
    text = (
        '```python\n>>> 1 + 1\n2\n```\n\n```python\n--8<-- "mha/pure.py:all"\n```\n\n'
        "??? success \"Solution\"\n    ```python\n    assert True, 'x'\n    ```\n"
    )
    assert snippets_without_a_check(text) == []
