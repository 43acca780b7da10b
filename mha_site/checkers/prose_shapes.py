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

The shape table of ``shapes.md`` is checked cell by cell by ``mha_site/checkers/shape_table.py``,
against a real run; its rows are left to that checker (and counted by the tests, so the exemption
cannot swallow more).
"""

from __future__ import annotations

import ast
import itertools
import re
import textwrap
from typing import NamedTuple

from mha_site.checkers import shape_table
from mha_site.languages import DEFAULT, DOCS, LANGUAGES
from mha_site.markdown import Hidden, code_blocks

PAGES = ("math", "walkthrough", "shapes")
# The chapters of the full MHA follow rules 1-3 too (their prose states few transitions).
CHAPTERS = ("full", "masks", "cross", "cache", "gqa", "fast")

MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.S)
SHAPE = re.compile(r"[\[(]\s*-?\d+(?:\s*,\s*-?\d+)+\s*[\])]")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
NAME = re.compile(r"[A-Za-z_]\w*(?:\[[^\]`]*\])*")
ARROW = "→"
# The rows of the shape table of shapes.md (the shape_table checker checks them, cell by cell).
TABLE_ROW = shape_table.ROW
TABLE_ROWS = shape_table.EXPECTED_ROWS


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
    blocks = code_blocks(text)
    code = [
        textwrap.dedent(block.body)
        for block in blocks
        if not isinstance(block, Hidden) and block.language == "python"
    ]
    pieces, at = [], 0
    for block in blocks:  # a code block ends a paragraph, as a blank line does
        pieces += [text[at : block.start], "\n"]
        at = block.end
    prose = MATH.sub("", "".join([*pieces, text[at:]]))
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
    """The Markdown of the page ``name`` of ``language``."""
    return (DOCS / language / f"{name}.md").read_text(encoding="utf-8")


def check() -> list[str]:
    """Every prose shape of the pages that breaks the rule, and pages whose languages state
    different shapes of different tensors."""
    found = []
    for name in PAGES + CHAPTERS:
        said = {}
        for language in LANGUAGES:
            text = page(language, name)
            where = f"docs/{language}/{name}.md"
            found += [f"{where}: {p}" for p in problems(text, exempt_table=name == "shapes")]
            said[language] = [claim[:2] for claim in claims(split(text)[0])]
        for language in LANGUAGES[1:]:
            if said[language] != said[DEFAULT]:
                found.append(f"docs/{language}/{name}.md: {drift(said[DEFAULT], said[language])}")
    return found


def drift(default: list, other: list) -> str:
    """Where the (tensor, shape) claims of a page and of its twin first part, in words."""
    for n, (a, b) in enumerate(zip(default, other, strict=False), start=1):
        if a != b:
            return f"shape claim {n} is `{b[0]}` {list(b[1])}, in {DEFAULT} `{a[0]}` {list(a[1])}"
    return f"{len(other)} shape claims, {len(default)} in {DEFAULT}"
