"""The full class's shapes on one sheet, from real runs: every tensor ``mha.full.MHA.forward`` and
the methods it calls assign, with its shape comment and its shape in three calls.

For the marker ``<!-- shape-sheet: full -->`` (``mha_site/markers.py``) the build runs
``mha.full.MHA`` three times under ``mha.trace``'s tracer (``trace_locals``), in configurations of
``mha_site/runs.py``: a prefill (self-attention with grouped-query attention, a padding
mask and ``is_causal``), a cross-attention call, and a decode step with a cache. Each row is one
assignment of the source, in source order: the name it binds, its code, its shape comment (which
``mha_site.checkers.shape_comments`` checks in more configurations), and the real shape in each
call, or ``—`` where the call does not run that line. Nothing in the table is typed by hand.
"""

from __future__ import annotations

import ast
import functools
import inspect
from typing import NamedTuple

import mha.full
from mha.trace import assignments, trace_locals
from mha_site.languages import tr
from mha_site.runs import Run, inputs

SIZES = dict(batch_size=3, heads_num=4, head_size=5, kv_heads=2, fast=False, need_weights=True)
"""All different in each call: batch 3, 4 query heads of 5 channels, 2 key/value heads."""
CALLS = (
    (Run("prefill", q_len=6, mask="padding", is_causal=True, **SIZES), "prefill", "预填充"),
    (Run("cross", q_len=6, src_len=7, **SIZES), "cross-attention", "交叉注意力"),
    (Run("decode", q_len=1, cached=6, is_causal=True, **SIZES), "decode step", "逐个生成一步"),
)
SHEETS = ("full",)
# The call's arguments, before it runs: name, shape in the dimension names (checked against each
# call by substituting its sizes), and how to find it in the call.
ARGUMENTS = (
    ("x", "[batch_size, q_len, hidden_size]", lambda call: call.x),
    ("context", "[batch_size, src_len, hidden_size]", lambda call: call.context),
    ("attn_mask", "[batch_size, 1, 1, k_len]", lambda call: call.options["attn_mask"]),
    (
        "cache.keys",
        "[batch_size, kv_heads, k_len - q_len, head_size]",
        lambda call: None if call.options["cache"] is None else call.options["cache"].keys,
    ),
)
SHORT = 14  # a call's arguments longer than this are shown as "…"


class _Shorten(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        shown = ", ".join(ast.unparse(a) for a in [*node.args, *node.keywords])
        if len(shown) > SHORT:
            node.args, node.keywords = [ast.Name("…")], []
        return node


def code(statement: ast.stmt) -> str:
    """The right-hand side of an assignment, ``self.`` dropped and long arguments shortened."""
    value = _Shorten().visit(statement.value)
    return ast.unparse(value).replace("self.", "")


def argument_shapes(run: Run, call) -> list[str]:
    """The shapes of the call's arguments (``ARGUMENTS``), each checked against its stated shape."""
    shapes = []
    for name, stated, find in ARGUMENTS:
        tensor = find(call)
        if tensor is None:
            shapes.append("—")
            continue
        expected = [eval(d, {}, run.dims()) for d in stated[1:-1].split(", ")]  # our constants
        if list(tensor.shape) != expected:
            raise AssertionError(f"{run.name}: {name} is {list(tensor.shape)}, not {stated}")
        shapes.append(str(list(tensor.shape)))
    return shapes


class Row(NamedTuple):
    line: int | None  # in mha/full.py; None for an argument
    where: str  # the method; "" for an argument
    name: str
    code: str
    shape: str  # the shape comment, or the argument's stated shape
    shapes: list[str]  # in each call, "—" where it does not run the line


@functools.cache
def rows() -> list[Row]:
    """The call's arguments, then each commented tensor assignment that runs in at least one
    call, in the order of the source."""
    source = inspect.getsource(mha.full)
    found, _ = assignments(source)
    tree = ast.parse(source)
    statements = {n.lineno: n for n in ast.walk(tree) if isinstance(n, ast.Assign | ast.AnnAssign)}
    methods = {
        line: name
        for name, f in vars(mha.full.MHA).items()
        if inspect.isfunction(f)
        for line in range(
            f.__code__.co_firstlineno, f.__code__.co_firstlineno + len(inspect.getsource(f))
        )
    }
    runs, arguments = [], []
    for run, _, _ in CALLS:
        call = inputs(vars(mha.full), run)
        arguments.append(argument_shapes(run, call))  # before the call: it grows the cache
        executed, error = trace_locals(mha.full.MHA, call.run)
        if error is not None:
            raise error
        runs.append(executed)
    table = [
        Row(None, "", name, "", stated, [shapes[i] for shapes in arguments])
        for i, (name, stated, _) in enumerate(ARGUMENTS)
    ]
    for a in found:
        if a.comment is None or len(a.targets) != 1:
            continue
        shapes = []
        for executed in runs:
            after = [s for line, s in executed if a.first_line <= line <= a.last_line]
            shape = after[-1].get(a.targets[0]) if after else None
            shapes.append("—" if shape is None else str(list(shape)))
        if set(shapes) == {"—"}:
            continue
        comment = "[" + ", ".join(a.comment) + "]"
        where, text = methods[a.first_line], code(statements[a.first_line])
        table.append(Row(a.first_line, where, a.target, text, comment, shapes))
    return table


def table(name: str, language: str) -> str:
    """The Markdown table of the sheet ``name`` in ``language``."""
    if name not in SHEETS:
        raise ValueError(f"no shape sheet {name!r}: the sheets are {SHEETS}")
    calls = [tr(language, en, zh) for _, en, zh in CALLS]
    head = [
        tr(language, "Method", "所在方法"),
        tr(language, "Tensor", "张量"),
        tr(language, "Code", "代码"),
        tr(language, "Shape", "形状"),
        *calls,
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    argument = tr(language, "argument", "参数")
    for _, method, target, text, comment, shapes in rows():
        cells = [f"`{method}`" if method else argument, f"`{target}`"]
        cells += [f"`{text}`" if text else "", f"`{comment}`"]
        cells += [s if s == "—" else f"`{s}`" for s in shapes]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)
