"""The shape table of docs/{en,zh}/shapes.md is true, cell by cell, in both languages.

The table has one row per tensor of the forward pass, every cell in code font:
``| Tensor | Expression | Symbolic shape | Concrete shape |``. The checker parses it from the
markdown, runs every row as ``tensor = expression`` in order against a real ``MHA``, and compares
the real shape with the concrete cell (sizes batch 2, seq 3, heads 4, head 5, hidden 20) and with
the symbolic cell, with the dimension names replaced by numbers, for two sets of all-different
sizes. The page's snippet runs the same table, written as the Python list ``TABLE``; that list
must be the markdown table, cell for cell. The mutation tests feed the checkers altered copies of
the page and show that each kind of edited cell is caught.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from mha.annotated import MHA

DOCS = Path(__file__).resolve().parent.parent / "docs"
LANGUAGES = ("en", "zh")
# The tensor column, top to bottom: every tensor of MHA.forward, the one-liner split into steps.
TENSORS = ["x", "q", "k", "v", "q", "k", "v", "q", "k", "v"]
TENSORS += ["k_t", "scores", "qk", "attn", "out", "out_t", "out_c", "concat", "y"]
EXPECTED_ROWS = len(TENSORS)

# The page's sizes (the concrete column), then another all-different set for the symbolic column.
PAGE_SIZES = {"batch_size": 2, "seq_len": 3, "heads_num": 4, "head_size": 5, "hidden_size": 20}
OTHER_SIZES = {"batch_size": 3, "seq_len": 7, "heads_num": 2, "head_size": 6, "hidden_size": 12}

# A table row whose first cell is in code font (the header and the |---| line are not).
ROW = re.compile(r"^\|\s*(`[^`|]*`)\s*\|(.*)\|\s*$")
# The snippet's copy of the table: ``TABLE = [ ... ]`` at the start of a python block.
SNIPPET_TABLE = re.compile(r"^```python\nTABLE = (\[.*?^\])$", re.S | re.M)


@dataclass(frozen=True)
class Row:
    tensor: str
    expression: str
    symbolic: str
    concrete: str


def page(language: str) -> str:
    return (DOCS / language / "shapes.md").read_text(encoding="utf-8")


def unquote(cell: str) -> str:
    cell = cell.strip()
    if len(cell) >= 2 and cell[0] == cell[-1] == "`":
        return cell[1:-1]
    return cell


def parse_table(text: str) -> list[Row]:
    """The rows of the shape table: markdown table lines whose first cell is code."""
    rows = []
    for line in text.splitlines():
        match = ROW.match(line)
        if not match:
            continue
        cells = [unquote(c) for c in match.group(2).split("|")]
        assert len(cells) == 3, f"expected 4 cells in {line!r}"
        rows.append(Row(unquote(match.group(1)), *cells))
    return rows


def snippet_table(text: str) -> list[Row]:
    """The rows of the snippet's ``TABLE`` list, the concrete shape written as in the markdown."""
    match = SNIPPET_TABLE.search(text)
    if not match:
        raise AssertionError("no python block starting with TABLE = [...]")
    rows = ast.literal_eval(match.group(1))
    return [Row(t, e, s, "[" + ", ".join(map(str, c)) + "]") for t, e, s, c in rows]


def parse_shape(cell: str) -> list[str]:
    """``[batch_size, seq_len]`` or ``[2, 3]`` -> its items as strings."""
    if not (cell.startswith("[") and cell.endswith("]")):
        raise ValueError(f"not a shape: {cell!r}")
    return [item.strip() for item in cell[1:-1].split(",")]


def run_rows(rows: list[Row], sizes: dict[str, int]) -> tuple[list[str], dict]:
    """Run the rows in order; return the problems found and the final namespace."""
    torch.manual_seed(0)
    model = MHA(sizes["hidden_size"], sizes["heads_num"])
    env: dict = {"torch": torch, "math": math, "model": model, **sizes}
    problems = []
    for index, row in enumerate(rows, start=1):
        where = f"row {index} ({row.tensor} = {row.expression})"
        if not row.tensor.isidentifier():
            problems.append(f"{where}: tensor name {row.tensor!r} is not an identifier")
            continue
        try:
            env[row.tensor] = eval(row.expression, env)
        except Exception as error:
            problems.append(f"{where}: raised {type(error).__name__}: {error}")
            continue
        real = list(env[row.tensor].shape)
        try:
            symbolic = [sizes[name] for name in parse_shape(row.symbolic)]
        except (KeyError, ValueError) as error:
            problems.append(f"{where}: bad symbolic cell {row.symbolic!r} ({error})")
        else:
            if symbolic != real:
                problems.append(f"{where}: symbolic {row.symbolic} = {symbolic}, real {real}")
        if sizes == PAGE_SIZES:
            try:
                concrete = [int(n) for n in parse_shape(row.concrete)]
            except ValueError as error:
                problems.append(f"{where}: bad concrete cell {row.concrete!r} ({error})")
            else:
                if concrete != real:
                    problems.append(f"{where}: concrete {row.concrete}, real {real}")
    return problems, env


def check_table(text: str) -> list[str]:
    """Every problem with the page's shape table; empty when every cell is true."""
    rows = parse_table(text)
    problems = []
    if len(rows) != EXPECTED_ROWS:
        problems.append(f"{len(rows)} rows, expected {EXPECTED_ROWS}")
    for sizes in (PAGE_SIZES, OTHER_SIZES):
        found, env = run_rows(rows, sizes)
        problems += found
        if not found and rows:
            first, last = env[rows[0].tensor], env[rows[-1].tensor]
            if not torch.equal(last, env["model"](first)):
                problems.append(f"the last row is not model(first row) for sizes {sizes}")
    return problems


@pytest.mark.parametrize("language", LANGUAGES)
def test_shape_table_has_one_row_per_tensor(language):
    rows = parse_table(page(language))
    assert [r.tensor for r in rows] == TENSORS


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_cell_of_the_shape_table_matches_a_real_run(language):
    assert check_table(page(language)) == []


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_snippet_runs_the_table_of_the_page(language):
    text = page(language)
    assert snippet_table(text) == parse_table(text)


def test_a_cell_edited_only_in_the_snippet_is_caught():
    text = page("en")
    edited = text.replace('"q.transpose(1, 2)",\n', '"q.transpose(1, 3)",\n', 1)
    assert edited != text
    assert snippet_table(edited) != parse_table(edited)


def test_shape_tables_are_identical_across_languages():
    assert parse_table(page("en")) == parse_table(page("zh"))


@pytest.mark.parametrize("language", LANGUAGES)
def test_shape_table_runs_the_whole_forward_pass(language):
    rows = parse_table(page(language))
    _, env = run_rows(rows, PAGE_SIZES)
    assert rows[0].tensor == "x" and rows[-1].tensor == "y"
    assert torch.equal(env["y"], env["model"](env["x"]))


# (row number from 1, column, replacement): one edit per kind of cell, each plausible-looking.
MUTATIONS = [
    (8, "concrete", "[2, 3, 4, 5]"),  # the transpose forgotten
    (5, "symbolic", "[batch_size, heads_num, seq_len, head_size]"),  # the design's wrong comment
    (11, "symbolic", "[batch_size, heads_num, seq_len, head_size]"),  # k_t not transposed
    (12, "concrete", "[2, 4, 3, 5]"),
    (18, "expression", "out_c.view(out_t.size(0), out_t.size(2), hidden_size)"),  # size(2) after
    (8, "expression", "q"),  # step dropped, shapes kept
    (15, "tensor", "attn"),  # result stored under the wrong name
    (19, "concrete", "[2, 20]"),
]


def mutate(text: str, number: int, column: str, replacement: str) -> str:
    """The page with one cell of the table's row ``number`` (counted from 1) replaced."""
    lines = text.splitlines(keepends=True)
    table = [i for i, line in enumerate(lines) if ROW.match(line.rstrip("\n"))]
    if not 1 <= number <= len(table):
        raise AssertionError(f"row {number} not found")
    i = table[number - 1]
    row = parse_table(lines[i])[0]
    cells = {
        "tensor": row.tensor,
        "expression": row.expression,
        "symbolic": row.symbolic,
        "concrete": row.concrete,
    }
    cells[column] = replacement
    lines[i] = "| " + " | ".join(f"`{cells[c]}`" for c in cells) + " |\n"
    return "".join(lines)


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize(("number", "column", "replacement"), MUTATIONS)
def test_an_edited_cell_is_caught(language, number, column, replacement):
    text = page(language)
    edited = mutate(text, number, column, replacement)
    assert edited != text
    assert check_table(edited) != []


def test_mutate_without_change_keeps_the_table_valid():
    text = page("en")
    row = parse_table(text)[7]
    assert check_table(mutate(text, 8, "concrete", row.concrete)) == []


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_deleted_row_is_caught(language):
    text = page(language)
    line = next(x for x in text.splitlines(keepends=True) if x.startswith("| `out_c` |"))
    assert check_table(text.replace(line, "")) != []
