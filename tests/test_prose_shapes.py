"""Every concrete shape the prose of an explanation page states names its tensor, and a snippet on
the same page asserts that this very tensor has that shape.

The rule, for ``math``, ``walkthrough``, ``shapes`` and the full MHA's chapters, in both languages:

1. A *concrete shape* is a list of two or more integers in brackets or parentheses, such as
   ``[2, 4, 3, 5]``, written in the prose: running text, headings, tables, admonitions (prose is the
   page without its code blocks, hidden set-up and ``$...$`` math, where ``$[0, 1]$`` is an
   interval). A list inside a code span that holds other code (`` `x[:, 1]` ``,
   `` `q.transpose(1, 2)` ``) is code, not a shape.
2. The shape belongs to the *last tensor named before it in the same paragraph* (a table row counts
   as a paragraph): the closest code span that is a Python name, indexed or not (`` `q` ``,
   `` `out_t` ``, `` `q[0, 0]` ``). So write the name, then its shape:
   "`` `q_split` `[2, 3, 4, 5]` → `q` `[2, 4, 3, 5]` ``".
3. A python block of the page asserts exactly that pair, in one of two forms: an ``assert``
   that compares ``name.shape`` with the literal (``assert q.shape == (2, 4, 3, 5), q.shape``;
   a chain such as ``assert q.shape == k.shape == (2, 4, 3, 5)`` pairs every ``.shape`` in it;
   ``torch.Size([...])`` counts too), or a doctest ``>>> q.shape`` whose output is
   ``torch.Size([2, 4, 3, 5])``. Brackets and parentheses are the same.
4. In a transition, ``a [...] → b [...]`` (any two shapes of a paragraph with an arrow between
   them, so ``a [...] @ b [...] → c [...]`` holds two), the two names differ. A name that is
   rebound keeps its old value under a second name (the walkthrough keeps ``q_flat`` and
   ``q_split`` before ``q`` is rebound), so the pair on each side has one true shape, and a
   transition written backwards (the two shapes swapped) pairs a name with a shape no snippet
   asserts for it, and fails.

The shape table of ``shapes.md`` is checked cell by cell by ``tests/test_shape_table.py``, against a
real run; its rows are left to that test (and counted here, so the exemption cannot swallow more).
"""

from __future__ import annotations

import ast
import itertools
import re
import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = ("math", "walkthrough", "shapes")
# The chapters of the full MHA follow rules 1-3 too (their prose states few transitions).
CHAPTERS = ("full", "masks", "cross", "cache", "gqa", "fast")
LANGUAGES = ("en", "zh")

FENCE = re.compile(r"^([ \t]*)```(\w*)[^\n]*\n(.*?)^\1```[ \t]*$", re.S | re.M)
HIDDEN = re.compile(r"<!-- invisible-code-block: python\n(.*?)^-->", re.S | re.M)
MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.S)
SHAPE = re.compile(r"[\[(]\s*-?\d+(?:\s*,\s*-?\d+)+\s*[\])]")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
NAME = re.compile(r"[A-Za-z_]\w*(?:\[[^\]`]*\])*")
ARROW = "→"
# The rows of the shape table of shapes.md (tests/test_shape_table.py checks them, cell by cell).
TABLE_ROW = re.compile(r"^\|\s*`[^`|]*`\s*\|.*\|\s*$")
TABLE_ROWS = 19


class Claim(NamedTuple):
    """A concrete shape in the prose, with the tensor it belongs to (None: no name before it)."""

    name: str | None
    shape: tuple[int, ...]
    unit: int  # which paragraph
    start: int  # where in the paragraph
    end: int


def literal(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"-?\d+", text))


def normal(name: str) -> str:
    """``q[0,0]`` and ``q[0, 0]`` are the same name: compare them as Python writes them."""
    return ast.unparse(ast.parse(name, mode="eval").body)


# ---- prose ------------------------------------------------------------------------------------


def split(text: str, exempt_table: bool = False) -> tuple[str, list[str]]:
    """(prose, python blocks) of a page; other fences and hidden set-up belong to neither."""
    code = [textwrap.dedent(body) for _, info, body in FENCE.findall(text) if info == "python"]
    prose = MATH.sub("", HIDDEN.sub("", FENCE.sub("", text)))
    if exempt_table:
        prose = "\n".join("" if TABLE_ROW.match(line) else line for line in prose.splitlines())
    return prose, code


def paragraphs(prose: str) -> list[str]:
    """Blocks separated by blank lines; every table row and heading is a paragraph of its own."""
    units, current = [], []
    for line in [*prose.splitlines(), ""]:
        stripped = line.strip()
        if stripped.startswith(("|", "#")) or not stripped:
            if current:
                units.append(" ".join(current))
                current = []
            if stripped:
                units.append(stripped)
        else:
            current.append(stripped)
    return units


def claims(prose: str) -> list[Claim]:
    """Every concrete shape of the prose, bound to the last name before it in its paragraph."""
    found = []
    for unit_number, unit in enumerate(paragraphs(prose)):
        spans = [(m.start(), m.end(), m.group(1).strip()) for m in CODE_SPAN.finditer(unit)]
        names = [(start, code) for start, _, code in spans if NAME.fullmatch(code)]
        shapes = [(start, end, code) for start, end, code in spans if SHAPE.fullmatch(code)]
        plain = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), unit)  # text outside code spans
        shapes += [(m.start(), m.end(), m.group(0)) for m in SHAPE.finditer(plain)]
        for start, end, text in sorted(shapes):
            before = [name for at, name in names if at < start]
            name = normal(before[-1]) if before else None
            found.append(Claim(name, literal(text), unit_number, start, end))
    return found


def transitions(prose: str) -> list[tuple[Claim, Claim]]:
    """Pairs of claims of a paragraph with an arrow between them: ``a [..] → b [..]``."""
    units = paragraphs(prose)
    listed = claims(prose)
    return [
        (first, second)
        for i, first in enumerate(listed)
        for second in listed[i + 1 :]
        if first.unit == second.unit and ARROW in units[first.unit][first.end : second.start]
    ]


# ---- code -------------------------------------------------------------------------------------


def shape_literal(node: ast.expr) -> tuple[int, ...] | None:
    """``(2, 3)``, ``[2, 3]`` or ``torch.Size([2, 3])`` as a tuple; anything else: None."""
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.Size" and node.args:
        node = node.args[0]
    if isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) >= 2:
        try:
            values = [ast.literal_eval(e) for e in node.elts]
        except ValueError:
            return None
        if all(type(v) is int for v in values):
            return tuple(values)
    return None


def shape_of(node: ast.expr) -> str | None:
    """The tensor of ``tensor.shape`` or ``tuple(tensor.shape)``, written as Python writes it."""
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "tuple" and len(node.args) == 1:
        node = node.args[0]
    if isinstance(node, ast.Attribute) and node.attr == "shape":
        return ast.unparse(node.value)
    return None


def asserted_in_block(block: str) -> set[tuple[str, tuple[int, ...]]]:
    """(tensor, shape) pairs that one python block asserts, as code or as doctest."""
    pairs = set()
    if re.search(r"^\s*>>> ", block, re.M):
        lines = block.splitlines()
        for line, output in itertools.pairwise(lines):
            m = re.fullmatch(r"\s*>>> (.+)\.shape\s*", line)
            out = re.fullmatch(r"\s*torch\.Size\((\[[^\]]*\])\)\s*", output)
            if m and out:
                pairs.add((normal(m.group(1)), literal(out.group(1))))
        return pairs
    for node in ast.walk(ast.parse(block)):
        if not isinstance(node, ast.Assert) or not isinstance(node.test, ast.Compare):
            continue
        compare = node.test
        if not all(isinstance(op, ast.Eq) for op in compare.ops):
            continue
        operands = [compare.left, *compare.comparators]
        shapes = {s for s in map(shape_literal, operands) if s is not None}
        for tensor in filter(None, map(shape_of, operands)):
            pairs.update((tensor, s) for s in shapes)
    return pairs


def asserted(blocks: list[str]) -> set[tuple[str, tuple[int, ...]]]:
    return set().union(*map(asserted_in_block, blocks)) if blocks else set()


# ---- the check --------------------------------------------------------------------------------


def problems(text: str, exempt_table: bool = False) -> list[str]:
    """Every prose shape that breaks the rule; empty when each is named and asserted."""
    prose, blocks = split(text, exempt_table)
    known = asserted(blocks)
    found = []
    for claim in claims(prose):
        shape = list(claim.shape)
        if claim.name is None:
            found.append(f"{shape}: no tensor named before it in its paragraph")
        elif (claim.name, claim.shape) not in known:
            found.append(
                f"`{claim.name}` {shape}: no snippet asserts {claim.name}.shape == {shape}"
            )
    for first, second in transitions(prose):
        if first.name is not None and first.name == second.name:
            found.append(f"`{first.name}` {list(first.shape)} → {list(second.shape)}: one name")
    return found


def page(language: str, name: str) -> str:
    return (DOCS / language / f"{name}.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("name", PAGES + CHAPTERS)
def test_every_shape_in_prose_names_its_tensor_and_is_asserted(language, name):
    assert problems(page(language, name), exempt_table=name == "shapes") == []


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("name", PAGES)
def test_the_checker_finds_claims_and_asserts_on_every_page(language, name):
    """Guard against a checker that passes because it finds nothing."""
    prose, blocks = split(page(language, name), exempt_table=name == "shapes")
    minimum = {"math": 3, "walkthrough": 25, "shapes": 1}[name]
    assert len(claims(prose)) >= minimum
    assert len(asserted(blocks)) >= minimum


@pytest.mark.parametrize("language", LANGUAGES)
def test_only_the_shape_table_is_exempt(language):
    text = page(language, "shapes")
    rows = [line for line in text.splitlines() if TABLE_ROW.match(line)]
    assert len(rows) == TABLE_ROWS
    assert problems(text) != [], "without the exemption, the table rows are claims too"


@pytest.mark.parametrize("name", PAGES + CHAPTERS)
def test_both_languages_state_the_same_shapes_of_the_same_tensors(name):
    en, zh = (claims(split(page(language, name))[0]) for language in LANGUAGES)
    assert [c[:2] for c in zh] == [c[:2] for c in en]


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("name", PAGES)
def test_every_transition_written_backwards_is_caught(language, name):
    text = page(language, name)
    prose, _ = split(text)
    units = paragraphs(prose)
    code = "\n\n".join(f"```python\n{block}```" for block in split(text)[1])
    assert problems("\n\n".join(units) + "\n\n" + code, exempt_table=name == "shapes") == []
    swapped = 0
    for first, second in transitions(prose):
        if first.shape == second.shape:
            continue  # nothing to swap: the step keeps the shape
        unit = units[first.unit]
        a, b = unit[first.start : first.end], unit[second.start : second.end]
        backwards = (
            unit[: first.start] + b + unit[first.end : second.start] + a + unit[second.end :]
        )
        edited = "\n\n".join(backwards if i == first.unit else u for i, u in enumerate(units))
        assert problems(edited + "\n\n" + code, exempt_table=name == "shapes") != [], backwards
        swapped += 1
    assert swapped >= {"math": 0, "walkthrough": 10, "shapes": 0}[name]


def test_a_transition_written_backwards_fails():
    right = "Here `q_split` `[2, 3, 4, 5]` → `q` `[2, 4, 3, 5]`.\n"
    code = (
        "\n```python\nq_split = q\nq = q.transpose(1, 2)\n"
        "assert q_split.shape == (2, 3, 4, 5), q_split.shape\n"
        "assert q.shape == (2, 4, 3, 5), q.shape\n```\n"
    )
    assert problems(right + code) == []
    wrong = "Here `q_split` `[2, 4, 3, 5]` → `q` `[2, 3, 4, 5]`.\n"
    assert problems(wrong + code) == [
        "`q_split` [2, 4, 3, 5]: no snippet asserts q_split.shape == [2, 4, 3, 5]",
        "`q` [2, 3, 4, 5]: no snippet asserts q.shape == [2, 3, 4, 5]",
    ]


def test_a_transition_under_one_name_fails():
    # Both shapes were true of `q` at some point, so only distinct names make the order checkable.
    page_text = (
        "Here `q` `[2, 3, 4, 5]` → `q` `[2, 4, 3, 5]`.\n\n```python\n"
        "assert q.shape == (2, 3, 4, 5), q.shape\nq = q.transpose(1, 2)\n"
        "assert q.shape == (2, 4, 3, 5), q.shape\n```\n"
    )
    assert problems(page_text) == ["`q` [2, 3, 4, 5] → [2, 4, 3, 5]: one name"]


def test_a_shape_added_to_prose_is_caught():
    text = page("en", "walkthrough")
    assert problems(text + "\nSo the result is `[2, 3, 4, 7]`.\n") == [
        "[2, 3, 4, 7]: no tensor named before it in its paragraph"
    ]
    assert problems(text + "\nSo `out_c` is `[2, 3, 4, 7]`.\n") == [
        "`out_c` [2, 3, 4, 7]: no snippet asserts out_c.shape == [2, 3, 4, 7]"
    ]


def test_a_shape_asserted_for_another_tensor_does_not_count():
    page_text = (
        "`k_t` has the shape `[2, 4, 3, 5]`.\n\n```python\nassert q.shape == (2, 4, 3, 5)\n```\n"
    )
    assert problems(page_text) == [
        "`k_t` [2, 4, 3, 5]: no snippet asserts k_t.shape == [2, 4, 3, 5]"
    ]


def test_a_shape_only_in_a_text_block_does_not_count():
    page_text = "`t` has the shape `[4, 2]`.\n\n```text\n(4, 2)\n```\n"
    assert problems(page_text) == ["`t` [4, 2]: no snippet asserts t.shape == [4, 2]"]
    page_text += "\n```python\nassert t.shape == (4, 2), t.shape\n```\n"
    assert problems(page_text) == []


def test_doctest_output_and_torch_size_count():
    page_text = (
        "`t` is `(4, 2)` and `u[0]` is `[3, 5]`.\n\n"
        "```python\n>>> t.shape\ntorch.Size([4, 2])\n```\n\n"
        "```python\nassert u[0].shape == torch.Size([3, 5]), u.shape\n```\n"
    )
    assert problems(page_text) == []


def test_lists_in_other_code_spans_and_in_math_are_not_shapes():
    page_text = "`x[:, 1]`, `q.transpose(1, 2)` and `q[0, 0]` are code; $[0, 1]$ is math.\n"
    assert claims(split(page_text)[0]) == []


def test_a_name_binds_only_within_its_paragraph():
    page_text = "`q` is ready.\n\nThe result is `[2, 3]`.\n"
    assert [c.name for c in claims(split(page_text)[0])] == [None]
