"""Where each shape comment of a file is, and what the line it is on made when it ran.

``Source`` reads a file once: its functions and their simple statements (``ast``), its comments
(``mha.trace.comments``, the one ``tokenize`` reader), and which statement each shape comment is
about: a comment at the end of a statement's last line, or a comment alone on the line just above
its first line (when the statement has none of its own). ``observe`` then runs calls with the
tracer of ``mha.trace`` on every function of the file and records, each time such a statement
runs, what it assigned or returned, the sizes its names may stand for, and, for a comment that
states the shapes before ``->``, the operands' shapes before it ran.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import CodeType, ModuleType
from typing import Any

from torch import Tensor

from mha.shapecheck import grammar
from mha.trace import Comment, bound_names, comments, watch

# Methods that only look at a tensor another way: an operand written with them is evaluated to
# find its shape (``k.transpose(-2, -1)``), and nothing else is.
LAYOUT = {
    "transpose", "permute", "view", "reshape", "contiguous", "unsqueeze", "squeeze", "flatten",
    "float", "half", "double", "bfloat16", "to", "t", "expand", "expand_as", "size", "type_as",
}  # fmt: skip
MATMUL = {"matmul", "bmm", "mm"}
RESULT = "return"  # the name a return statement's value is recorded under
MISSING = "unbound"


@dataclass(frozen=True)
class Statement:
    """A simple statement of a function: ``kind`` is ``"assign"`` (``targets`` the names it
    binds: locals, or ``self.name``), ``"return"`` (of a value) or ``"other"``."""

    first_line: int
    last_line: int
    kind: str
    targets: tuple[str, ...]
    value: ast.expr | None

    @property
    def lines(self) -> range:
        return range(self.first_line, self.last_line + 1)

    def reads(self) -> list[str]:
        """The names the statement's value loads, in order, each once."""
        if self.value is None:
            return []
        names = [n.id for n in ast.walk(self.value) if isinstance(n, ast.Name)]
        return list(dict.fromkeys(names))


def _statement(node: ast.stmt) -> Statement:
    lines = (node.lineno, node.end_lineno)
    if isinstance(node, ast.Return) and node.value is not None:
        return Statement(*lines, "return", (RESULT,), node.value)
    if isinstance(node, ast.Assign | ast.AugAssign) or (
        isinstance(node, ast.AnnAssign) and node.value is not None
    ):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        bound = [bound_names(t) for t in targets]
        if None not in bound:
            names = tuple(n for names in bound for n in names)
            return Statement(*lines, "assign", names, node.value)
        return Statement(*lines, "other", (), node.value)
    return Statement(*lines, "other", (), None)


def _simple(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The simple statements of ``body`` and of the blocks inside it, not of nested functions."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        blocks = [getattr(node, name, []) for name in ("body", "orelse", "finalbody")]
        blocks += [h.body for h in getattr(node, "handlers", [])]
        blocks += [c.body for c in getattr(node, "cases", [])]
        if any(blocks):
            for block in blocks:
                yield from _simple(block)
        else:
            yield node


def _first_line(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The line a function's code object starts on: its first decorator's, or its ``def``'s."""
    return min([function.lineno] + [d.lineno for d in function.decorator_list])


@dataclass(frozen=True)
class Attached:
    """A shape comment and the statement it is about (``None``, and ``why``, when it is on
    none); ``spec`` is ``grammar.UNREADABLE`` for a comment that looks like a shape but is not
    read (``grammar.not_understood``), and ``why`` then says why."""

    comment: Comment
    spec: grammar.Spec | str
    statement: Statement | None
    why: str = ""


@dataclass
class Source:
    """A file's functions, statements and shape comments (see the module)."""

    text: str
    tree: ast.Module
    functions: dict[tuple[str, int], ast.FunctionDef | ast.AsyncFunctionDef]
    statements: dict[int, Statement]
    attached: list[Attached]

    @classmethod
    def read(cls, text: str) -> Source:
        tree = ast.parse(text)
        functions = {
            (node.name, _first_line(node)): node
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        statements = {}
        for function in functions.values():
            for node in _simple(function.body):
                statements[node.lineno] = _statement(node)
        ends = {s.last_line: s for s in sorted(statements.values(), key=lambda s: s.first_line)}
        specs = [(c, grammar.read(c.text)) for c in comments(text)]
        unread = {c.line: grammar.not_understood(c.text) for c, spec in specs if spec is None}
        specs = [(c, s or grammar.UNREADABLE) for c, s in specs if s or unread.get(c.line)]
        trailing = {c.line for c, _ in specs if not c.alone}
        attached = []
        for comment, spec in specs:
            if spec == grammar.UNREADABLE:
                why = grammar.not_understood(comment.text)
                attached.append(Attached(comment, spec, None, why))
                continue
            if not comment.alone:
                statement = ends.get(comment.line)
                why = "" if statement else "not at the end of an assignment or a return"
            else:
                statement = statements.get(comment.line + 1)
                why = "" if statement else "not just above an assignment or a return"
                if statement is not None and statement.last_line in trailing:
                    statement, why = None, "the statement below has a shape comment of its own"
            if statement is not None and statement.kind == "other":
                statement, why = None, "not on an assignment to a name, or a return"
            attached.append(Attached(comment, spec, statement, why))
        return cls(text, tree, functions, statements, attached)

    def function_at(self, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The innermost function whose lines hold ``line``."""
        holding = [
            f for f in self.functions.values() if _first_line(f) <= line <= f.end_lineno
        ]  # fmt: skip
        return max(holding, key=_first_line, default=None)

    def vocabulary(self) -> list[str]:
        """Every dimension the file's shape comments write, in order, each once."""
        dims = [
            d
            for a in self.attached
            if isinstance(a.spec, grammar.Spec)
            for shape in a.spec.shapes()
            for d in shape.dims
            if d != grammar.ELLIPSIS
        ]
        return list(dict.fromkeys(dims))


def _index(node: ast.expr) -> int | None:
    """The whole number ``node`` writes (``2``, ``-1``), or ``None``."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _index(node.operand)
        return None if inner is None else -inner
    is_int = isinstance(node, ast.Constant) and type(node.value) is int
    return node.value if is_int else None


def _shape_of(node: ast.expr) -> str | None:
    """The parameter whose whole shape ``node`` takes (``x.shape``, ``x.size()``), or ``None``."""
    if isinstance(node, ast.Call) and not node.args and not node.keywords:
        node = node.func
        if not (isinstance(node, ast.Attribute) and node.attr == "size"):
            return None
    elif not (isinstance(node, ast.Attribute) and node.attr == "shape"):
        return None
    return node.value.id if isinstance(node.value, ast.Name) else None


def dimension_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, tuple]:
    """The locals of ``function`` that hold one dimension of one of its parameters, as
    ``(parameter, index)``: ``B, T, C = x.shape`` (or ``x.size()``), ``T = x.size(1)``, ``C =
    x.shape[-1]``."""
    parameters = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    found: dict[str, tuple] = {}
    for node in _simple(function.body):
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target, value = node.targets[0], node.value
        whole = _shape_of(value)
        if isinstance(target, ast.Tuple | ast.List) and whole in parameters:
            for i, element in enumerate(target.elts):
                if isinstance(element, ast.Name):
                    found[element.id] = (whole, i)
            continue
        if not isinstance(target, ast.Name):
            continue
        if isinstance(value, ast.Subscript) and _shape_of(value.value) in parameters:
            index = _index(value.slice)
            if index is not None:
                found[target.id] = (_shape_of(value.value), index)
        elif (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "size"
            and isinstance(value.func.value, ast.Name)
            and value.func.value.id in parameters
            and len(value.args) == 1
            and _index(value.args[0]) is not None
        ):
            found[target.id] = (value.func.value.id, _index(value.args[0]))
    return found


def code_objects(module: ModuleType, path: str) -> set[CodeType]:
    """The code of every function and method defined in the file ``path`` of ``module``, nested
    ones included."""
    found: set[CodeType] = set()
    seen: set[int] = set()

    def add_code(code: CodeType) -> None:
        if code.co_filename == path and code not in found:
            found.add(code)
            for constant in code.co_consts:
                if isinstance(constant, CodeType):
                    add_code(constant)

    def add(obj: Any) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, staticmethod | classmethod):
            obj = obj.__func__
        if isinstance(obj, property):
            for accessor in (obj.fget, obj.fset, obj.fdel):
                if accessor is not None:
                    add(accessor)
        elif inspect.isfunction(obj):
            add_code(obj.__code__)
        elif inspect.isclass(obj):
            for member in vars(obj).values():
                add(member)

    for obj in vars(module).values():
        add(obj)
    return found


# ---- A run ---------------------------------------------------------------------------------------


@dataclass
class Execution:
    """One time a statement ran: what its targets held after it (a shape, or the type of a value
    that is no tensor), the sizes of that moment by name (the frame's whole-number locals, its
    ``self``'s attributes, its callers' in the file), and the shapes of its operands before it."""

    values: dict[str, tuple[int, ...] | str]
    sizes: dict[str, int]
    reads: dict[str, tuple[int, ...]] = field(default_factory=dict)
    operands: tuple[tuple[int, ...] | str, ...] = ()
    order: int = 0  # when it ran, among the executions of the run


@dataclass
class Observed:
    """What the calls did: the executions of each watched statement (by its first line), the
    functions that ran (by name and first line), and the exception that ended a call, if any."""

    executions: dict[int, list[Execution]] = field(default_factory=dict)
    reached: set[tuple[str, int]] = field(default_factory=set)
    error: BaseException | None = None


def _whole(values: dict[str, Any]) -> dict[str, int]:
    return {
        n: v for n, v in values.items() if isinstance(v, int) and not isinstance(v, bool)
    }  # fmt: skip


def _described(value: Any) -> tuple[int, ...] | str:
    return tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__


def operand_nodes(value: ast.expr, count: int) -> list[ast.expr] | str:
    """The operands of the first matrix product in ``value`` with ``count`` of them (``a @ b``,
    ``torch.matmul(a, b)``, ``a.matmul(b)``, ``torch.einsum("...", a, b)``), or why none."""
    for node in ast.walk(value):
        found: list[ast.expr] | None = None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            found = [node.left, node.right]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in MATMUL:
                method = isinstance(func, ast.Attribute) and len(node.args) == 1
                found = [func.value, *node.args] if method else list(node.args)
            elif name == "einsum":
                found = list(node.args[1:])
        if found is not None and len(found) == count:
            unsafe = [f for f in found if not _layout_only(f)]
            if unsafe:
                return f"the operand {ast.unparse(unsafe[0])} is computed, not evaluated here"
            return found
    return f"the line has no matrix product of {count} operands"


def _layout_only(node: ast.expr) -> bool:
    """Whether ``node`` only names a tensor or looks at it another way (``k.transpose(-2, -1)``,
    ``self.bias[:, :T]``), so evaluating it again changes nothing."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            if not (isinstance(n.func, ast.Attribute) and n.func.attr in LAYOUT):
                return False
        elif not isinstance(
            n,
            ast.Name | ast.Attribute | ast.Subscript | ast.Slice | ast.Constant | ast.Tuple
            | ast.UnaryOp | ast.BinOp | ast.Load | ast.operator | ast.unaryop | ast.keyword,
        ):  # fmt: skip
            return False
    return True


class Observer:
    """Runs calls with the tracer on ``codes`` (the functions of the file ``path``) and records
    the executions of the statements ``source``'s shape comments are on (``observed``)."""

    def __init__(self, source: Source, codes: set[CodeType], path: str):
        self.source = source
        self.path = path
        self.codes = {c for c in codes if (c.co_name, c.co_firstlineno) in source.functions}
        self.observed = Observed()
        self.watched: dict[int, Statement] = {}
        self.operands: dict[int, list[ast.expr] | str] = {}
        self.wants_reads: set[int] = set()
        for a in source.attached:
            if a.statement is None or not isinstance(a.spec, grammar.Spec):
                continue
            s = a.statement
            self.watched[s.first_line] = s
            count = len(a.spec.operands)
            if count == 1:
                self.wants_reads.add(s.first_line)
            elif count > 1:
                self.operands[s.first_line] = operand_nodes(s.value, count)
        self.by_line = {line: s for s in self.watched.values() for line in s.lines}
        self.begun: dict[Any, tuple[Statement, dict, tuple]] = {}
        self.pending: dict[Any, tuple[Statement, Execution]] = {}
        self.count = 0

    def run(self, call: Callable[[], Any]) -> Any:
        """``call()`` under the tracer: what it returns, or ``None`` if it raised (the exception
        is kept in ``observed.error``)."""
        try:
            return watch(
                self.codes,
                call,
                self._before,
                self._after,
                returned=self._returned,
                raised=self._raised,
            )
        except Exception as error:
            self.observed.error = error
            return None
        finally:
            for frame in list(self.pending):
                self._finish(frame)
            self.begun.clear()

    def _sizes(self, frame) -> dict[str, int]:
        chain = []  # the callers of the file's functions (through nn.Module.__call__ too)
        caller = frame.f_back
        while caller is not None:
            if caller.f_code in self.codes:
                chain.append(caller)
            caller = caller.f_back
        sizes: dict[str, int] = {}
        for f in [*reversed(chain), frame]:
            held = getattr(f.f_locals.get("self"), "__dict__", {})
            sizes |= _whole(held) | _whole(f.f_locals)
        return sizes

    def _finish(self, frame) -> None:
        statement, execution = self.pending.pop(frame)
        execution.order, self.count = self.count, self.count + 1
        self.observed.executions.setdefault(statement.first_line, []).append(execution)

    def _start(self, frame, statement: Statement) -> None:
        local = frame.f_locals
        reads = {}
        if statement.first_line in self.wants_reads:
            reads = {
                n: tuple(local[n].shape)
                for n in statement.reads()
                if isinstance(local.get(n), Tensor)
            }
        found: tuple = ()
        nodes = self.operands.get(statement.first_line)
        if isinstance(nodes, str):
            found = (nodes,)
        elif nodes is not None:
            shapes = []
            for node in nodes:
                try:
                    tree = ast.Expression(node)
                    value = eval(compile(tree, self.path, "eval"), frame.f_globals, dict(local))
                    shapes.append(_described(value))
                except Exception as error:
                    shapes.append(f"{ast.unparse(node)} raised {type(error).__name__}")
            found = tuple(shapes)
        self.begun[frame] = (statement, reads, found)

    def _execution(self, frame, values: dict) -> Execution:
        _, reads, found = self.begun.get(frame, (None, {}, ()))
        return Execution(values, self._sizes(frame), reads, found)

    def _before(self, frame, line, previous):
        if previous is None:
            self.observed.reached.add((frame.f_code.co_name, frame.f_code.co_firstlineno))
        statement = self.watched.get(line)
        if statement is not None and (previous is None or previous not in statement.lines):
            self._start(frame, statement)

    def _after(self, frame, line):
        statement = self.by_line.get(line)
        if frame in self.pending and self.pending[frame][0] is not statement:
            self._finish(frame)
        if statement is None or statement.kind != "assign":
            return
        local = frame.f_locals
        values = {}
        for target in statement.targets:
            if target.startswith("self."):
                value = getattr(local.get("self"), target[5:], MISSING)
            else:
                value = local.get(target, MISSING)
            values[target] = MISSING if value is MISSING else _described(value)
        self.pending[frame] = (statement, self._execution(frame, values))

    def _returned(self, frame, line, value):
        if frame in self.pending:
            self._finish(frame)
        statement = self.by_line.get(line)
        if statement is not None and statement.kind == "return":
            self.pending[frame] = (statement, self._execution(frame, {RESULT: _described(value)}))
            self._finish(frame)
        self.begun.pop(frame, None)

    def _raised(self, frame, line):
        if frame in self.pending and line in self.pending[frame][0].lines:
            del self.pending[frame]  # the statement did not complete
