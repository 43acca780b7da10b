"""Every snippet a reader sees checks something: no test that asserts nothing.

A visible ```python fence of the site must contain an ``assert`` or a doctest line (``>>>``, whose
printed output Sybil compares). Hidden ``invisible-code-block`` setup and include-only fences
(``--8<--``, checked by the root conftest) are exempt. No ``assert``, hidden or visible, may be
about literals only (``assert 10 // 3 == 3`` proves Python, not the page), and none may check a
shape, size or stride with ``!=`` (any wrong number passes it: assert the true value).
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

from sitetools import each_doc_page

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^([ \t]*)```python[ \t]*\n(.*?)^\1```", re.MULTILINE | re.DOTALL)
CHECKS = re.compile(r"^\s*assert\b|^\s*>>> ", re.MULTILINE)
INCLUDE_ONLY = re.compile(r'(?:[ \t]*--8<--[ \t]+"[^"\n]+"[ \t]*\n)+')
HIDDEN = re.compile(r"<!-- invisible-code-block: python\n(.*?)^-->", re.MULTILINE | re.DOTALL)
PROMPT = re.compile(r"^\s*(?:>>>|\.\.\.) ?(.*)$")
SHAPE_WORDS = ("shape", "size", "stride", "Size")


def snippets_without_a_check(text: str) -> list[int]:
    """Line numbers of visible python fences that assert nothing."""
    lines = []
    for match in FENCE.finditer(text):
        body = match.group(2)
        if INCLUDE_ONLY.fullmatch(body) or CHECKS.search(body):
            continue
        lines.append(text.count("\n", 0, match.start()) + 1)
    return lines


def python_of(body: str) -> str:
    """A fence's Python: the doctest statements when it is written doctest-style, else its body."""
    if not re.search(r"^\s*>>> ", body, re.MULTILINE):
        return body
    return "\n".join(m[1] for line in body.splitlines() if (m := PROMPT.match(line)))


def weak_asserts(text: str) -> list[str]:
    """The asserts of a page's python (fences and hidden set-up) that prove nothing about it."""
    bodies = [m.group(2) for m in FENCE.finditer(text)] + HIDDEN.findall(text)
    weak = []
    for body in bodies:
        if INCLUDE_ONLY.fullmatch(body):
            continue
        for node in ast.walk(ast.parse(python_of(textwrap.dedent(body)))):
            if not isinstance(node, ast.Assert):
                continue
            test = node.test
            source = ast.unparse(test)
            if not any(isinstance(n, ast.Name | ast.Attribute | ast.Call) for n in ast.walk(test)):
                weak.append(f"literals only: assert {source}")
            elif any(
                isinstance(n, ast.Compare)
                and any(isinstance(op, ast.NotEq) for op in n.ops)
                and any(w in ast.unparse(n) for w in SHAPE_WORDS)
                for n in ast.walk(test)
            ):
                weak.append(f"shape checked with !=: assert {source}")
    return weak


@each_doc_page
def test_no_assert_is_about_literals_or_checks_a_shape_with_not_equal(page):
    weak = weak_asserts(page.read_text(encoding="utf-8"))
    assert not weak, f"{page.relative_to(ROOT)}: {weak}"


def test_weak_assert_checker_catches_literals_and_not_equal_shapes():
    text = (
        "```python\nassert 10 // 3 == 3, 'floor'\nassert q.shape != (2, 4, 3, 5), q.shape\n"
        "assert q.shape == (2, 3, 4, 5), q.shape\n```\n\n"
        "<!-- invisible-code-block: python\nassert 2 + 2 == 4\n-->\n\n"
        "```python\n>>> assert 1 < 2\n```\n"
    )
    assert weak_asserts(text) == [
        "literals only: assert 10 // 3 == 3",
        "shape checked with !=: assert q.shape != (2, 4, 3, 5)",
        "literals only: assert 1 < 2",
        "literals only: assert 2 + 2 == 4",
    ]


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
