"""The shape table of docs/{en,zh}/shapes.md is true, cell by cell, in both languages.

The table has one row per tensor of the forward pass:
``| Tensor | Expression | Symbolic shape | Concrete shape | Strides | Contiguous / memory |``, every
cell in code font but the last, which is words in the page's language (``yes, view`` /
``是，视图``). The checker parses it from the markdown, runs every row as ``tensor = expression`` in
order against a real ``MHA``, and compares the real shape with the concrete cell (sizes batch 2,
seq 3, heads 4, head 5, hidden 20) and with the symbolic cell, with the dimension names replaced by
numbers, for two sets of all-different sizes. The two memory columns are compared with
``mha.trace.record(MHA(20, 4), x)``: the row of ``x`` with the input itself, every later row with
the recorded step of the same order, after checking that the step is the row's operation (same
function or method, same constant arguments) and that the table's own run gives the same strides.
The page's snippet runs the table's first four columns, written as the Python list ``TABLE``; that
list must be the markdown table, cell for cell.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass

import torch

from mha.annotated import MHA
from mha.trace import Step, record
from mha_site.languages import DEFAULT, DOCS, LANGUAGES
from mha_site.markdown import fences

# The tensor column, top to bottom: every tensor of MHA.forward, the one-liner split into steps.
TENSORS = ["x", "q", "k", "v", "q", "k", "v", "q", "k", "v"]
TENSORS += ["k_t", "scores", "qk", "attn", "out", "out_t", "out_c", "concat", "y"]
EXPECTED_ROWS = len(TENSORS)

# The page's sizes (the concrete column), then another all-different set for the symbolic column.
PAGE_SIZES = {"batch_size": 2, "seq_len": 3, "heads_num": 4, "head_size": 5, "hidden_size": 20}
OTHER_SIZES = {"batch_size": 3, "seq_len": 7, "heads_num": 2, "head_size": 6, "hidden_size": 12}

# The last column, "contiguous, kind of memory", in each language's words.
MEMORY_WORDS = {
    "en": ({True: "yes", False: "no"}, {"view": "view", "copy": "copy", "new": "new"}, ", "),
    "zh": ({True: "是", False: "否"}, {"view": "视图", "copy": "复制", "new": "新张量"}, "，"),
}

# A table row whose first cell is in code font (the header and the |---| line are not).
ROW = re.compile(r"^\|\s*(`[^`|]*`)\s*\|(.*)\|\s*$")
# The snippet's copy of the table: ``TABLE = [ ... ]`` at the start of a python block.
SNIPPET_TABLE = re.compile(r"TABLE = (\[.*?^\])$", re.S | re.M)


@dataclass(frozen=True)
class Row:
    tensor: str
    expression: str
    symbolic: str
    concrete: str
    strides: str = ""
    memory: str = ""

    def shapes(self) -> tuple[str, str, str, str]:
        """The four columns the page's snippet runs (the memory columns are not in it)."""
        return (self.tensor, self.expression, self.symbolic, self.concrete)


def page(language: str) -> str:
    """The Markdown of the shapes page of ``language``."""
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
        if len(cells) != 5:
            raise ValueError(f"expected 6 cells in {line!r}")
        rows.append(Row(unquote(match.group(1)), *cells))
    return rows


def snippet_table(text: str) -> list[Row]:
    """The rows of the snippet's ``TABLE`` list, the concrete shape written as in the markdown."""
    for fence in fences(text):
        match = SNIPPET_TABLE.match(fence.body) if fence.info == "python" else None
        if match:
            rows = ast.literal_eval(match.group(1))
            break
    else:
        raise LookupError("no python block starting with TABLE = [...]")
    return [Row(t, e, s, "[" + ", ".join(map(str, c)) + "]") for t, e, s, c in rows]


def memory_cell(contiguous: bool, kind: str, language: str) -> str:
    """``(False, "view")`` -> ``no, view`` in English, ``否，视图`` in Chinese."""
    yes, kinds, separator = MEMORY_WORDS[language]
    return f"{yes[contiguous]}{separator}{kinds[kind]}"


def parse_memory(cell: str, language: str) -> tuple[bool, str]:
    """``no, view`` (or ``否，视图``) -> ``(False, "view")``; ValueError for anything else."""
    for contiguous in (True, False):
        for kind in MEMORY_WORDS[language][1]:
            if cell == memory_cell(contiguous, kind, language):
                return contiguous, kind
    raise ValueError(f"not a {language} memory cell: {cell!r}")


def parse_strides(cell: str) -> tuple[int, ...]:
    """``(60, 20, 1)`` -> ``(60, 20, 1)``; ValueError for anything else."""
    if not re.fullmatch(r"\(\d+(, \d+)*\)", cell):
        raise ValueError(f"not strides: {cell!r}")
    return tuple(int(n) for n in cell[1:-1].split(", "))


def operation(expression: str) -> tuple:
    """What an expression does, whatever its operands are called: the function or method it calls
    (``W_q`` for ``model.W_q`` and ``self.W_q``) and its constant arguments, or its operator."""
    node = ast.parse(expression, mode="eval").body
    if isinstance(node, ast.BinOp):
        return ("operator", type(node.op).__name__)
    if not isinstance(node, ast.Call):
        return ("not a call", ast.unparse(node))
    func = node.func
    if isinstance(func, ast.Attribute) and ast.unparse(func.value) in ("model", "self"):
        name = func.attr
    elif isinstance(func, ast.Attribute) and ast.unparse(func.value) not in ("torch", "math"):
        name = "." + func.attr  # a tensor method: the receiver's name does not matter
    else:
        name = ast.unparse(func)
    constants = []
    for argument in [*node.args, *(k.value for k in node.keywords)]:
        try:
            constants.append(ast.literal_eval(argument))
        except ValueError:
            constants.append(None)
    keywords = tuple(k.arg for k in node.keywords)
    return (name, tuple(constants), keywords)


def recorded() -> tuple[torch.Tensor, list[Step]]:
    """The input and the steps of ``record(MHA(20, 4), x)`` for the page's sizes."""
    torch.manual_seed(0)
    model = MHA(PAGE_SIZES["hidden_size"], PAGE_SIZES["heads_num"])
    x = torch.randn(PAGE_SIZES["batch_size"], PAGE_SIZES["seq_len"], PAGE_SIZES["hidden_size"])
    return x, record(model, x)


def check_memory(rows: list[Row], language: str, env: dict | None = None) -> list[str]:
    """Every strides and memory cell against the recorder; ``env``, the table's own run by row."""
    x, steps = recorded()
    # The input is not a step of forward: its facts are those of the tensor given to forward.
    facts = [(x.stride(), x.is_contiguous(), "new", None)]
    facts += [(s.stride, s.contiguous, s.kind, s) for s in steps]
    problems = []
    if len(facts) != len(rows):
        problems.append(f"{len(rows)} rows, {len(facts)} recorded tensors (x and the steps)")
    for index, (row, (stride, contiguous, kind, step)) in enumerate(
        zip(rows, facts, strict=False), start=1
    ):
        where = f"row {index} ({row.tensor} = {row.expression})"
        if step is not None:
            try:
                same = operation(row.expression) == operation(step.expression)
            except SyntaxError:
                same = False
            if not same:
                problems.append(f"{where}: the recorded step is {step.expression}")
            if env is not None and tuple(env[index].stride()) != step.stride:
                problems.append(f"{where}: the table's run has strides {env[index].stride()}")
        try:
            if parse_strides(row.strides) != stride:
                problems.append(f"{where}: strides {row.strides}, recorded {stride}")
        except ValueError as error:
            problems.append(f"{where}: {error}")
        try:
            if parse_memory(row.memory, language) != (contiguous, kind):
                right = memory_cell(contiguous, kind, language)
                problems.append(f"{where}: memory {row.memory!r}, recorded {right!r}")
        except ValueError as error:
            problems.append(f"{where}: {error}")
    return problems


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
        env[index] = None  # the row's value, by row number (names are reused)
        where = f"row {index} ({row.tensor} = {row.expression})"
        if not row.tensor.isidentifier():
            problems.append(f"{where}: tensor name {row.tensor!r} is not an identifier")
            continue
        try:
            env[row.tensor] = eval(row.expression, env)
        except Exception as error:
            problems.append(f"{where}: raised {type(error).__name__}: {error}")
            continue
        env[index] = env[row.tensor]
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


def check_table(text: str, language: str = "en") -> list[str]:
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
        if sizes == PAGE_SIZES:
            problems += check_memory(rows, language, None if found else env)
    return problems


def replace_cell(text: str, number: int, column: str, replacement, language: str = "en") -> str:
    """The page with one cell of the table's row ``number`` (counted from 1) replaced; a memory
    cell is given as ``(contiguous, kind)`` and written in ``language``."""
    lines = text.splitlines(keepends=True)
    table = [i for i, line in enumerate(lines) if ROW.match(line.rstrip("\n"))]
    if not 1 <= number <= len(table):
        raise LookupError(f"row {number} not found")
    i = table[number - 1]
    row = parse_table(lines[i])[0]
    cells = {
        "tensor": row.tensor,
        "expression": row.expression,
        "symbolic": row.symbolic,
        "concrete": row.concrete,
        "strides": row.strides,
        "memory": row.memory,
    }
    if column == "memory" and not isinstance(replacement, str):
        replacement = memory_cell(*replacement, language)
    cells[column] = replacement
    code = [f"`{cells[c]}`" for c in cells if c != "memory"]
    lines[i] = "| " + " | ".join([*code, cells["memory"]]) + " |\n"
    return "".join(lines)


def normal(language: str, text: str | None = None) -> list[tuple]:
    """The table of a language, its memory cells read as ``(contiguous, kind)``: the same in every
    language."""
    return [
        (*r.shapes(), r.strides, parse_memory(r.memory, language))
        for r in parse_table(page(language) if text is None else text)
    ]


def problems(text: str, language: str) -> list[str]:
    """Every problem of the shapes page ``text`` of ``language``: the rows (one per tensor of
    ``TENSORS``), every cell against a real run, and the snippet's ``TABLE`` against the table."""
    try:
        rows = parse_table(text)
    except ValueError as error:
        return [str(error)]
    found = []
    if [r.tensor for r in rows] != TENSORS:
        found.append(f"the tensor column is {[r.tensor for r in rows]}, expected {TENSORS}")
    found += check_table(text, language)
    try:
        snippet = [r.shapes() for r in snippet_table(text)]
    except (LookupError, ValueError, SyntaxError) as error:
        found.append(f"the snippet's TABLE: {error}")
    else:
        if snippet != [r.shapes() for r in rows]:
            found.append("the snippet's TABLE is not the table (its first four columns)")
    return found


def check() -> list[str]:
    """Every problem of the shape tables, and a table that differs between languages."""
    found = []
    for language in LANGUAGES:
        found += [f"docs/{language}/shapes.md: {p}" for p in problems(page(language), language)]
    for language in LANGUAGES[1:]:
        try:
            same = normal(language) == normal(DEFAULT)
        except ValueError as error:
            found.append(f"docs/{language}/shapes.md: {error}")
        else:
            if not same:
                found.append(f"docs/{language}/shapes.md: the table differs from docs/{DEFAULT}'s")
    return found
