"""Record a real forward pass, step by step: the one source of every shape the site draws.

[`record`][mha.trace.record] runs ``model.forward`` once under ``sys.settrace`` and, for every
statement that assigns a tensor, evaluates each tensor-valued sub-expression in the order Python
evaluates it (``out.transpose(1, 2)``, then ``.contiguous()``, then ``.view(...)``), with the
locals the statement saw. Each becomes a [`Step`][mha.trace.Step]: its expression, shape,
strides, contiguity, and whether it is a view of an operand, a copy, or newly computed. The
pictures of the walkthrough, the shape explorer and its test and the shapes table all read these
steps, so none of them can disagree with the code.

The same module reads a class's shape comments (a trailing ``# [batch_size, seq_len, ...]``, found
with ``tokenize``) and its assignments (``ast``), and runs a call with a tracer on every method of
the class (``trace_locals``): the shape-comment checker (``mha_site.checkers.shape_comments``) is
built on these. One ``sys.settrace`` engine (``watch``) serves both ``record`` and
``trace_locals``. Those helpers are for the project's own checker, not part of the documented API
(``__all__``).

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
import tokenize
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

        参数：
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

        参数：
            shape: 某一步的形状。
            sizes: 维度名及其大小，例如
                ``{"batch_size": 2, "seq_len": 3, "heads_num": 4, "head_size": 5}``。

        返回：
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


@dataclass(frozen=True)
class Comment:
    """One ``#`` comment of a source: its line, the column of its ``#``, its text (``#``
    included) and whether it is alone on its line (no code before it)."""

    line: int
    column: int
    text: str
    alone: bool


def comments(source: str) -> list[Comment]:
    """Every comment of ``source``, in order, read with ``tokenize`` (so a ``#`` inside a string
    is not one): the one reader of comments that the shape-comment checkers build on."""
    found = []
    lines = iter(source.splitlines(keepends=True))
    for token in tokenize.generate_tokens(lambda: next(lines, "")):
        if token.type == tokenize.COMMENT:
            (line, column), before = token.start, token.line[: token.start[1]]
            found.append(Comment(line, column, token.string, alone=not before.strip()))
    return found


def shape_comments(source: str) -> dict[int, tuple[str, ...]]:
    """Line number -> dimensions, for every shape comment in ``source``: a comment that starts
    with ``[`` (``# [batch_size, seq_len, hidden_size]``), its dimensions separated by commas
    (``# []``: a 0-d tensor, no dimensions).

    Read with ``tokenize``, so a ``# [`` inside a string is not a comment.
    """
    found = {}
    for comment in comments(source):
        text = comment.text[1:].lstrip()
        if text.startswith("[") and "]" in text:
            inside = text[1 : text.index("]")]
            # "[]" is a 0-d tensor (a count kept on the device): no dimensions
            found[comment.line] = (
                tuple(d.strip() for d in inside.split(",")) if inside.strip() else ()
            )
    return found


@dataclass(frozen=True)
class Assignment:
    """One statement of a method that binds local names, with its shape comment if it has one.

    ``targets``: the names it binds (``("q",)``, ``("q_len", "k_len")``); ``first_line`` and
    ``last_line``: its lines in the file; ``comment``: the dimensions of the shape comment at the
    end of its last line, or ``None``.
    """

    targets: tuple[str, ...]
    first_line: int
    last_line: int
    comment: tuple[str, ...] | None

    @property
    def target(self) -> str:
        return ", ".join(self.targets)

    @property
    def lines(self) -> range:
        return range(self.first_line, self.last_line + 1)


def bound_names(target: ast.expr) -> tuple[str, ...] | None:
    """The names a target binds: locals (``q`` or ``q_len, k_len``) or one attribute of ``self``
    (``self._keys``, a cache's buffer); ``None`` for anything else."""
    if isinstance(target, ast.Name):
        return (target.id,)
    if (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
    ):
        return (f"self.{target.attr}",)
    if isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts):
        return tuple(e.id for e in target.elts)
    return None


def _assignments_in(
    functions: list[ast.FunctionDef], comments: dict[int, tuple[str, ...]], offset: int = 0
) -> list[tuple[Assignment, ast.stmt]]:
    """The assignments of ``functions`` (their lines in the source plus ``offset``), each with
    its statement, in the order of their lines."""
    found = []
    for function in functions:
        for node in ast.walk(function):
            if not isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound = [bound_names(target) for target in targets]  # a = b = ...: each target's names
            if None in bound:
                continue  # a subscript, or self.a.b = ...: no name to record a shape under
            names = tuple(name for names in bound for name in names)
            comment = comments.get(node.end_lineno)
            lines = (node.lineno + offset, node.end_lineno + offset)
            found.append((Assignment(names, *lines, comment), node))
    return sorted(found, key=lambda pair: pair[0].first_line)


def assignments(
    source: str, class_name: str = "MHA"
) -> tuple[list[Assignment], dict[int, tuple[str, ...]]]:
    """The assignments of the methods of ``class_name`` that ``forward`` may run (all of them but
    ``__init__``) in module ``source``, each with its shape comment; and the shape comments inside
    those methods that are on no such assignment (line -> dimensions)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            methods = [
                item
                for item in node.body
                if isinstance(item, ast.FunctionDef) and item.name != "__init__"
            ]
            break
    else:
        raise LookupError(f"no class {class_name} in source")
    comments = shape_comments(source)
    found = [a for a, _ in _assignments_in(methods, comments)]
    ends = {a.last_line for a in found}
    stray = {
        line: dims
        for line, dims in comments.items()
        if any(m.lineno <= line <= m.end_lineno for m in methods) and line not in ends
    }
    return found, stray


def watch(
    codes: set,
    call: Any,
    before: Any = None,
    after: Any = None,
    *,
    returned: Any = None,
    raised: Any = None,
) -> Any:
    """Run ``call()`` with a line tracer on every frame whose code is one of ``codes``.

    ``before(frame, line, previous)`` is called as each line starts (the frame's locals are those
    the line sees; ``previous`` is the frame's line before it, ``None`` at its start or after a
    line that raised); ``after(frame, line)`` once a line has run (at the frame's next line or its
    return, with the locals the line left; never for a line that raised);
    ``returned(frame, line, value)`` when the frame returns ``value`` from ``line`` (not when an
    exception leaves it); ``raised(frame, line)`` when an exception reaches the frame at ``line``
    (raised there or by a call it makes). Each frame keeps its own previous line, so ``forward``
    calling ``_weights`` pairs each of them with its own locals. The tracer that was set before is
    set again at the end; what ``call`` raises is raised.
    """

    def frame_tracer():
        previous: list[int | None] = [None]

        def local_trace(frame, event, arg):
            if event in ("line", "return"):
                line = previous[0]
                if line is not None and after is not None:
                    after(frame, line)
                if event == "line" and before is not None:
                    before(frame, frame.f_lineno, line)
                if event == "return" and line is not None and returned is not None:
                    returned(frame, line, arg)
                previous[0] = frame.f_lineno if event == "line" else None
            elif event == "exception":
                if raised is not None:
                    raised(frame, frame.f_lineno)
                previous[0] = None  # the line did not complete: its assignment never happened
            return local_trace

        return local_trace

    def global_trace(frame, event, arg):
        return frame_tracer() if frame.f_code in codes else None

    old = sys.gettrace()
    sys.settrace(global_trace)
    try:
        return call()
    finally:
        sys.settrace(old)


def trace_locals(
    cls: type, call: Any
) -> tuple[list[tuple[int, dict[str, tuple[int, ...]]]], Exception | None]:
    """Run ``call()``; after each line a method of ``cls`` runs, the shapes of its tensor locals.

    Returns ``(line, {name: shape})`` for every line run, in order, in every frame of ``cls``'s
    methods (``forward`` and what it calls: ``_weights``, ``_mask``, ...), and the exception
    ``call`` raised, if any (the lines before it are kept).
    """
    codes = {f.__code__ for f in vars(cls).values() if inspect.isfunction(f)}
    executed: list[tuple[int, dict[str, tuple[int, ...]]]] = []

    def after(frame, line):
        tensors = {n: tuple(v.shape) for n, v in frame.f_locals.items() if isinstance(v, Tensor)}
        held = getattr(frame.f_locals.get("self"), "__dict__", {})  # self._keys and the like
        tensors |= {f"self.{n}": tuple(v.shape) for n, v in held.items() if isinstance(v, Tensor)}
        executed.append((line, tensors))

    try:
        watch(codes, call, after=after)
    except Exception as error:  # a crash is the caller's to report, with the lines that ran
        return executed, error
    return executed, None


def named_sizes(model: torch.nn.Module, x: Tensor) -> dict[str, int]:
    """The sizes of a run of the annotated (or pure) ``MHA`` on ``x``, by the names its shape
    comments use: ``batch_size``, ``seq_len``, ``heads_num``, ``head_size``, ``hidden_size``."""
    return {
        "batch_size": x.size(0),
        "seq_len": x.size(1),
        "heads_num": model.heads_num,
        "head_size": model.head_size,
        "hidden_size": model.hidden_size,
    }


def _statements(function) -> dict[int, tuple[Assignment, ast.expr]]:
    """The plain ``name = ...`` assignments of ``function`` and the values they assign, by their
    first line in its file."""
    lines, first = inspect.getsourcelines(function)
    source = textwrap.dedent("".join(lines))
    tree = ast.parse(source)
    found = _assignments_in(tree.body[:1], shape_comments(source), offset=first - 1)
    return {
        a.first_line: (a, node.value)
        for a, node in found
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }


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
    for attribute in node._fields:
        value = getattr(node, attribute, None)
        if isinstance(value, ast.AST):
            value = _rebuild(value, names, top=False)
        elif isinstance(value, list):
            value = [_rebuild(v, names, top=False) if isinstance(v, ast.AST) else v for v in value]
        fields[attribute] = value
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

        参数：
            model: ``mha`` 的某个模块（注释版、纯享版或完整版），或任何 ``forward`` 把张量
                赋给普通变量名的模块。
            *args: ``forward`` 的位置参数。
            **kwargs: ``forward`` 的关键字参数。

        返回：
            各个步骤，按 Python 求值的顺序排列。
    """
    forward = type(model).forward
    code = forward.__code__
    statements = _statements(forward)
    module_globals = forward.__globals__
    steps: list[Step] = []

    def record_statement(statement: Assignment, assigned: ast.expr, local: dict) -> None:
        scope = dict(local)
        nodes = _tensor_nodes(assigned)
        if assigned not in nodes:  # `k = cache.keys`, `s = x if c else y`: the value itself
            nodes.append(assigned)
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
            last = node is assigned
            steps.append(
                Step(
                    target=statement.target if last else "",
                    expression=ast.unparse(node),
                    shape=tuple(value.shape),
                    stride=tuple(value.stride()),
                    contiguous=value.is_contiguous(),
                    kind=kind,
                    line=statement.first_line,
                    comment=(statement.comment or ()) if last else (),
                )
            )

    def before(frame, line, previous):
        statement, assigned = statements.get(line, (None, None))
        # A statement over several lines may report its first line again: record it once.
        if statement is not None and previous not in statement.lines:
            record_statement(statement, assigned, frame.f_locals)

    with torch.no_grad():
        watch({code}, lambda: model(*args, **kwargs), before=before)
    return steps
