"""Record a real forward pass, step by step: the one source of every shape the site draws.

[`record`][mha.trace.record] runs ``model.forward`` once under ``sys.settrace`` and, for every
statement that assigns a tensor, evaluates each tensor-valued sub-expression in the order Python
evaluates it (``out.transpose(1, 2)``, then ``.contiguous()``, then ``.view(...)``), with the
locals the statement saw. Each becomes a [`Step`][mha.trace.Step]: its expression, shape,
strides, contiguity, and whether it is a view of an operand, a copy, or newly computed. The
pictures of the walkthrough, the shape explorer's test and the shapes table all read these steps,
so none of them can disagree with the code.

Examples:
    >>> import torch
    >>> from mha.annotated import MHA
    >>> from mha.trace import record
    >>> _ = torch.manual_seed(0)
    >>> steps = record(MHA(20, 4), torch.randn(2, 3, 20))
    >>> [(s.expression, s.shape) for s in steps][3]
    ('q.view(q.size(0), q.size(1), self.heads_num, self.head_size)', (2, 3, 4, 5))
    >>> steps[-3].expression, steps[-3].kind, steps[-3].contiguous
    ('out.transpose(1, 2).contiguous()', 'copy', True)
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = ["Step", "dims_of", "record"]

# Methods that move data without computing anything new: a new storage from one of them is a copy.
_COPYING = {"contiguous", "reshape", "clone", "repeat_interleave", "expand"}


@dataclass(frozen=True)
class Step:
    """One tensor the forward pass made.

    Args:
        target: the variable the statement assigns (``"q"``), for its last step; ``""`` for a
            step inside a statement (``out.transpose(1, 2)`` in the concatenating line).
        expression: the source of the (sub-)expression, as Python writes it.
        shape: its shape.
        stride: its strides, in elements.
        contiguous: ``Tensor.is_contiguous()``.
        kind: ``"view"`` (shares storage with a tensor operand: no data moved), ``"copy"`` (a
            new storage filled by a layout operation such as ``contiguous``), or ``"new"``
            (computed: a matmul, a projection, a softmax ...).
        line: the line of the statement in the model's source file.
        comment: the statement's trailing shape comment, as dimension names
            (``("batch_size", "seq_len", "hidden_size")``), for its last step; ``()`` otherwise.

    中文:
        前向计算产生的一个张量。

        参数:
            target: 这条语句赋值的变量名（``"q"``），只记在语句的最后一步上；语句内部的中间步骤
                （比如拼接那一行里的 ``out.transpose(1, 2)``）为 ``""``。
            expression: 这个（子）表达式的源码，按 Python 的写法。
            shape: 它的形状。
            stride: 它的步长，以元素为单位。
            contiguous: ``Tensor.is_contiguous()`` 的结果。
            kind: ``"view"``（与某个张量操作数共用存储，没有搬数据）、``"copy"``（``contiguous``
                这类改布局的操作新开了一块存储）或 ``"new"``（算出来的：矩阵乘法、投影、softmax
                等）。
            line: 这条语句在模型源文件里的行号。
            comment: 语句行尾的形状注释，拆成维度名
                （``("batch_size", "seq_len", "hidden_size")``），只记在最后一步上；其余为 ``()``。
    """

    target: str
    expression: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    contiguous: bool
    kind: str
    line: int
    comment: tuple[str, ...]


def dims_of(shape: tuple[int, ...], sizes: dict[str, int]) -> tuple[str, ...] | None:
    """Name each dimension of ``shape`` by the size it equals, when every size is different.

    Args:
        shape: a step's shape.
        sizes: dimension names and their sizes, such as
            ``{"batch_size": 2, "seq_len": 3, "heads_num": 4, "head_size": 5, "hidden_size": 20}``.

    Returns:
        The names, or ``None`` when a size of ``shape`` matches no name or two names share a size.

    Examples:
        >>> dims_of((2, 4, 3, 5), {"batch_size": 2, "seq_len": 3, "heads_num": 4, "head_size": 5})
        ('batch_size', 'heads_num', 'seq_len', 'head_size')

    中文:
        当各个尺寸互不相同时，按数值给 ``shape`` 的每一维找到对应的名字。

        参数:
            shape: 某一步的形状。
            sizes: 维度名及其大小，例如
                ``{"batch_size": 2, "seq_len": 3, "heads_num": 4, "head_size": 5}``。

        返回:
            各维的名字；``shape`` 中某个大小对不上任何名字，或者两个名字大小相同时，返回 ``None``。
    """
    by_size: dict[int, str] = {}
    for name, size in sizes.items():
        if size in by_size:
            return None
        by_size[size] = name
    if any(n not in by_size for n in shape):
        return None
    return tuple(by_size[n] for n in shape)


class _Statement:
    """An assignment of ``forward``: its target, its value's AST and its shape comment."""

    def __init__(self, target: str, value: ast.expr, lines: range, comment: tuple[str, ...]):
        self.target, self.value, self.lines, self.comment = target, value, lines, comment
        self.line = lines.start


def _statements(function) -> dict[int, _Statement]:
    """The single-name assignments of ``function``, by their first line in its file."""
    lines, first = inspect.getsourcelines(function)
    source = textwrap.dedent("".join(lines))
    tree = ast.parse(source)
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                text = lines[node.end_lineno - 1]
                comment = ()
                if "# [" in text:
                    inside = text.split("# [", 1)[1].split("]", 1)[0]
                    comment = tuple(d.strip() for d in inside.split(","))
                span = range(first + node.lineno - 1, first + node.end_lineno)
                found[span.start] = _Statement(target.id, node.value, span, comment)
    return found


def _tensor_nodes(node: ast.expr) -> list[ast.expr]:
    """Calls, operations and subscripts of ``node``, children before parents (evaluation order)."""
    out: list[ast.expr] = []

    def visit(n: ast.AST) -> None:
        for child in ast.iter_child_nodes(n):
            visit(child)
        if isinstance(n, ast.Call | ast.BinOp | ast.UnaryOp):
            out.append(n)

    visit(node)
    return out


def _operands(node: ast.expr) -> list[ast.expr]:
    """The expressions whose tensors ``node`` works on: a method's object, and the arguments."""
    if isinstance(node, ast.Call):
        found = list(node.args)
        if isinstance(node.func, ast.Attribute):
            found.insert(0, node.func.value)
        return found
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    return []


def _rebuild(node: ast.AST, names: dict[int, str], top: bool = True) -> ast.AST:
    """A copy of ``node`` in which every sub-expression already evaluated (not ``node`` itself)
    is read from the scope name ``names`` gives it."""
    if not top and id(node) in names:
        return ast.copy_location(ast.Name(id=names[id(node)], ctx=ast.Load()), node)
    fields = {}
    for field in node._fields:
        value = getattr(node, field, None)
        if isinstance(value, ast.AST):
            value = _rebuild(value, names, top=False)
        elif isinstance(value, list):
            value = [_rebuild(v, names, top=False) if isinstance(v, ast.AST) else v for v in value]
        fields[field] = value
    rebuilt = type(node)(**fields)
    return ast.copy_location(rebuilt, node) if hasattr(node, "lineno") else rebuilt


def _storage(t: Tensor) -> int:
    return t.untyped_storage().data_ptr()


def record(model: torch.nn.Module, *args: Any, **kwargs: Any) -> list[Step]:
    """Run ``model(*args, **kwargs)`` once and return every tensor its ``forward`` made, in order.

    Args:
        model: an ``mha`` module (annotated, pure or full) or any module whose ``forward`` assigns
            its tensors to plain names.
        *args: ``forward``'s positional arguments.
        **kwargs: ``forward``'s keyword arguments.

    Returns:
        The steps, in the order Python evaluated them.

    中文:
        运行一次 ``model(*args, **kwargs)``，按顺序返回它的 ``forward`` 产生的每个张量。

        参数:
            model: ``mha`` 的某个模块（注释版、纯享版或完整版），或任何 ``forward`` 把张量
                赋给普通变量名的模块。
            *args: ``forward`` 的位置参数。
            **kwargs: ``forward`` 的关键字参数。

        返回:
            各个步骤，按 Python 求值的顺序排列。
    """
    forward = type(model).forward
    code = forward.__code__
    statements = _statements(forward)
    module_globals = forward.__globals__
    steps: list[Step] = []

    def record_statement(statement: _Statement, local: dict) -> None:
        scope = dict(local)
        nodes = _tensor_nodes(statement.value)
        if statement.value not in nodes:  # `k = cache.keys`, `s = x if c else y`: the value itself
            nodes.append(statement.value)
        names: dict[int, str] = {}  # id of an evaluated node -> the scope name holding its value

        def evaluate(node: ast.expr) -> Any:
            # Each evaluated sub-expression is read back from the scope, not computed again, so a
            # view of it is recognised as a view (same storage).
            if id(node) in names:
                return scope[names[id(node)]]
            tree = ast.Expression(_rebuild(node, names))
            ast.fix_missing_locations(tree)
            return eval(compile(tree, "<trace>", "eval"), module_globals, scope)

        for node in nodes:
            try:
                value = evaluate(node)
            except Exception:  # a sub-expression that only works in context: skip it
                continue
            names[id(node)] = f"__mha_trace_{len(names)}"
            scope[names[id(node)]] = value
            if not isinstance(value, Tensor):
                continue
            inputs = []
            for operand in _operands(node):
                try:
                    o = evaluate(operand)
                except Exception:
                    continue
                if isinstance(o, Tensor):
                    inputs.append(o)
            if any(_storage(value) == _storage(i) for i in inputs):
                kind = "view"
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _COPYING
            ):
                kind = "copy"
            else:
                kind = "new"
            last = node is statement.value
            steps.append(
                Step(
                    target=statement.target if last else "",
                    expression=ast.unparse(node),
                    shape=tuple(value.shape),
                    stride=tuple(value.stride()),
                    contiguous=value.is_contiguous(),
                    kind=kind,
                    line=statement.line,
                    comment=statement.comment if last else (),
                )
            )

    previous = [0]

    def local_trace(frame, event, arg):
        if event == "line":
            statement = statements.get(frame.f_lineno)
            # A statement over several lines may report its first line again: record it once.
            if statement is not None and previous[0] not in statement.lines:
                record_statement(statement, frame.f_locals)
            previous[0] = frame.f_lineno
        return local_trace

    def global_trace(frame, event, arg):
        return local_trace if frame.f_code is code else None

    old = sys.gettrace()
    sys.settrace(global_trace)
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        sys.settrace(old)
    return steps
