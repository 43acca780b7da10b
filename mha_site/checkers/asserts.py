"""Every snippet a reader sees checks something: no test that asserts nothing.

A visible python fence of the site must contain an ``assert`` or a doctest line (``>>>``, whose
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

from mha_site.languages import ROOT, doc_pages
from mha_site.markdown import INCLUDE_ONLY, Fence, fences, hidden_blocks

CHECKS = re.compile(r"^\s*assert\b|^\s*>>> ", re.MULTILINE)
PROMPT = re.compile(r"^\s*(?:>>>|\.\.\.) ?(.*)$")
SHAPE_WORDS = ("shape", "size", "stride", "Size")


def python_fences(text: str) -> list[Fence]:
    """The python fences of a page that Sybil runs (info string exactly ``python``)."""
    return [fence for fence in fences(text) if fence.info == "python"]


def snippets_without_a_check(text: str) -> list[int]:
    """Line numbers of visible python fences that assert nothing."""
    return [
        fence.line
        for fence in python_fences(text)
        if not (INCLUDE_ONLY.fullmatch(fence.body) or CHECKS.search(fence.body))
    ]


def python_of(body: str) -> str:
    """A fence's Python: the doctest statements when it is written doctest-style, else its body."""
    if not re.search(r"^\s*>>> ", body, re.MULTILINE):
        return body
    return "\n".join(m[1] for line in body.splitlines() if (m := PROMPT.match(line)))


def weak_in(block: Fence) -> list[str]:
    """The asserts of one python block that prove nothing about the page."""
    if INCLUDE_ONLY.fullmatch(block.body):
        return []
    weak = []
    for node in ast.walk(ast.parse(python_of(textwrap.dedent(block.body)))):
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


def python_blocks(text: str) -> list[Fence]:
    """The python of a page: its python fences, then its hidden set-up."""
    hidden = [block for block in hidden_blocks(text) if block.language == "python"]
    return [*python_fences(text), *hidden]


def weak_asserts(text: str) -> list[str]:
    """The asserts of a page's python (fences, then hidden set-up) that prove nothing about it."""
    return [weak for block in python_blocks(text) for weak in weak_in(block)]


def page_problems(page: Path) -> list[str]:
    """The snippets of ``page`` that check nothing, and its weak asserts, one line each."""
    text = page.read_text(encoding="utf-8")
    where = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
    found = [
        f"{where}:{line}: this python snippet asserts nothing: assert what it shows, or show it "
        "as doctest output (>>>)"
        for line in snippets_without_a_check(text)
    ]
    found += [
        f"{where}:{block.line}: {weak}: assert what the page shows"
        for block in python_blocks(text)
        for weak in weak_in(block)
    ]
    return found


def check() -> list[str]:
    """Every snippet of the site's pages that checks nothing, and every weak assert."""
    return [problem for page in doc_pages() for problem in page_problems(page)]
