"""Every concrete shape the prose of an explanation page states also appears in a snippet on it.

A concrete shape is a bracketed or parenthesised list of two or more integers, such as
``[2, 4, 3, 5]`` or ``(60, 20, 1)``. Wherever such a literal appears outside the code blocks of
``math``, ``walkthrough`` or ``shapes`` (in running text, a table, a heading or an admonition), the
same numbers, in the same order, must appear in one of the page's ``python`` blocks, where Sybil
runs them as an assertion or as doctest output. Brackets and parentheses count as the same:
``[2, 3, 20]`` in prose is matched by ``(2, 3, 20)`` in an assert or ``torch.Size([2, 3, 20])``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = ("math", "walkthrough", "shapes")
LANGUAGES = ("en", "zh")

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
HIDDEN = re.compile(r"<!-- invisible-code-block: python\n(.*?)^-->", re.S | re.M)
SHAPE = re.compile(r"[\[(]\s*-?\d+(?:\s*,\s*-?\d+)+\s*[\])]")


def shapes_in(text: str) -> set[tuple[int, ...]]:
    return {tuple(int(n) for n in re.findall(r"-?\d+", m)) for m in SHAPE.findall(text)}


def split(text: str) -> tuple[str, str]:
    """(prose, python code) of a page; other fences and hidden setup belong to neither."""
    code = [body for info, body in FENCE.findall(text) if info == "python"]
    prose = HIDDEN.sub("", FENCE.sub("", text))
    return prose, "\n".join(code)


def unchecked_shapes(text: str) -> set[tuple[int, ...]]:
    prose, code = split(text)
    return shapes_in(prose) - shapes_in(code)


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("name", PAGES)
def test_every_shape_in_prose_is_asserted_on_the_page(language, name):
    text = (DOCS / language / f"{name}.md").read_text(encoding="utf-8")
    assert unchecked_shapes(text) == set()


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("name", PAGES)
def test_the_pages_state_shapes_at_all(language, name):
    """Guard against a checker that passes because it finds nothing."""
    prose, code = split((DOCS / language / f"{name}.md").read_text(encoding="utf-8"))
    assert shapes_in(code)
    if name != "math":
        assert len(shapes_in(prose)) >= 5


def test_a_shape_added_to_prose_is_caught():
    text = (DOCS / "en" / "walkthrough.md").read_text(encoding="utf-8")
    assert unchecked_shapes(text + "\nSo the result is `[2, 3, 4, 7]`.\n") == {(2, 3, 4, 7)}


def test_a_shape_only_in_a_text_block_does_not_count():
    page = "The shape is `[4, 2]`.\n\n```text\n(4, 2)\n```\n"
    assert unchecked_shapes(page) == {(4, 2)}
    page += "\n```python\nassert t.shape == (4, 2), t.shape\n```\n"
    assert unchecked_shapes(page) == set()


def test_a_swapped_shape_is_caught():
    page = "After the transpose: `[2, 4, 3, 5]`.\n\n```python\nassert s == (2, 3, 4, 5), s\n```\n"
    assert unchecked_shapes(page) == {(2, 4, 3, 5)}
