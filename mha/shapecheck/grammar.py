"""What a shape comment says: its grammar, read conservatively, and the sizes its names stand for.

A *shape* is a bracketed list of dimensions, ``[batch_size, seq_len, hidden_size]`` (the design
post's style) or, with at least one comma, ``(B, nh, T, hs)`` (nanoGPT's); ``[]`` or ``()`` is a
0-d tensor. A dimension is a name, a whole number, or their sums, differences, products and
quotients with parentheses (``kv_heads * head_size``, ``C // nh``, ``heads_num * (nope_dims +
rope_dims)``); a leading ``...`` (or ``…``) states only the trailing dimensions. Each shape is
parsed as a Python list or tuple (``ast``), so nothing else is a dimension.

A *spec* is one shape (the tensor the line makes), a transition ``a -> b`` (``→`` too: the shape
before, then after; a longer chain's middle shapes are intermediate), or products ``x @ y -> z``
(``x``, ``@`` or ``×`` between the operands of a matrix product).

A comment holds a spec in one of two ways, and in no other:

- it *starts* with one (``# [batch_size, seq_len, hidden_size]``, ``# (B, nh, T, hs)``, also in
  backticks), whatever prose follows it;
- after the word *shape* (``shape``, ``shaped``, ``shapes``, ``形状``), a few characters on, in
  backticks: ``# This gives a tensor of shape `[seq_len, batch_size, heads, d_k]` `` (labml's
  style); alternatives joined by ``or`` (``或``) are each allowed.

So prose with brackets is not a shape: ``# W_q(x) multiplies x by [W_q_0, W_q_1]`` does not start
with one, ``# (see above)`` and ``# (the eos ids, the pad id)`` do not parse, and a bare
``shape [a, b]`` in a sentence is not in backticks. A comment that starts with ``[`` but does not
parse (``# [batch_size=2]``) is *unreadable*: reported as not checked, never as right or wrong.
"""

from __future__ import annotations

import ast
import functools
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction

ELLIPSIS = "..."
"""A leading dimension that stands for whatever leading dimensions the tensor has."""


def _exact_division(a: int | Fraction, b: int | Fraction) -> int | Fraction:
    quotient = Fraction(a) / Fraction(b)
    return int(quotient) if quotient.denominator == 1 else quotient


OPERATORS: dict[type, Callable] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: _exact_division,
}
"""The arithmetic a dimension may use: ``+ - * // /`` (``/`` gives a fraction unless exact)."""


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> ast.expr | None:
    """``text`` parsed as a Python expression (once: a run judges each comment many times)."""
    try:
        return ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None


def dimension(text: str, operators: Mapping[type, Callable] = OPERATORS) -> ast.expr | None:
    """``text`` as an expression of names and whole numbers joined by ``operators``, with
    parentheses (``heads_num * (nope_dims + rope_dims)``); ``None`` for anything else."""
    tree = _parsed(text)
    return tree if tree is not None and _is_dimension(tree, operators) else None


def _is_dimension(tree: ast.expr, operators: Mapping[type, Callable]) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and type(node.op) in operators:
            continue
        if type(node) in operators or isinstance(node, ast.Name | ast.Load):
            continue
        if isinstance(node, ast.Constant) and type(node.value) is int:
            continue
        return False
    return True


def evaluate(
    text: str, names: Mapping[str, int], operators: Mapping[type, Callable] = OPERATORS
) -> tuple[int | Fraction | None, list[str]]:
    """The size a dimension states (``kv_heads * head_size``) and the names it uses that
    ``names`` does not know; ``(None, [text])`` when ``text`` is not a dimension."""
    tree = dimension(text, operators)
    if tree is None:
        return None, [text]
    unknown = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in names]
    if unknown:
        return None, unknown

    def value(node: ast.expr) -> int | Fraction:
        if isinstance(node, ast.BinOp):
            return operators[type(node.op)](value(node.left), value(node.right))
        return names[node.id] if isinstance(node, ast.Name) else node.value

    try:
        return value(tree), []
    except ZeroDivisionError:
        return None, [text]


def names_in(dims: tuple[str, ...]) -> set[str]:
    """The names a comment's dimensions use (``kv_heads * head_size`` uses two)."""
    trees = (dimension(d) for d in dims if d != ELLIPSIS)
    return {n.id for t in trees if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}


def stated(
    dims: tuple[str, ...], names: Mapping[str, int], operators: Mapping[type, Callable] = OPERATORS
) -> tuple[tuple[int | Fraction, ...] | None, list[str]]:
    """The sizes ``dims`` state (a leading ``...`` left out), or ``None`` and the unknown names."""
    values = []
    unknown: list[str] = []
    for d in dims[1:] if trailing(dims) else dims:
        value, missing = evaluate(d, names, operators)
        values.append(value)
        unknown += [m for m in missing if m not in unknown]
    return (None, unknown) if unknown else (tuple(values), [])


def trailing(dims: tuple[str, ...]) -> bool:
    """Whether ``dims`` starts with ``...``: it states the trailing dimensions only."""
    return bool(dims) and dims[0] == ELLIPSIS


def agrees(dims: tuple[str, ...], values: tuple, real: tuple[int, ...]) -> bool:
    """Whether the sizes ``values`` that ``dims`` state are the shape ``real``: all of it, or with
    a leading ``...`` its last ``len(values)`` dimensions."""
    if trailing(dims):
        return len(real) >= len(values) and tuple(real[len(real) - len(values) :]) == values
    return tuple(real) == values


# ---- Reading a comment --------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """One bracketed shape of a comment: its dimensions as written (``("...", "k_len")`` for
    ``[..., k_len]``), where it is in the comment (``start``, ``end``), and its opening bracket."""

    dims: tuple[str, ...]
    start: int
    end: int
    opening: str

    @property
    def trailing(self) -> bool:
        return trailing(self.dims)

    def written(self, dims: tuple[str, ...]) -> str:
        """``dims`` in this shape's brackets: ``[a, b]`` or ``(a, b)``."""
        closing = "]" if self.opening == "[" else ")"
        inside = ", ".join(dims) + ("," if self.opening == "(" and len(dims) == 1 else "")
        return f"{self.opening}{inside}{closing}"


@dataclass(frozen=True)
class Spec:
    """What one comment states: ``groups`` of shapes separated by ``->`` (the shapes of a group
    joined by ``x``/``@``), and ``alternatives`` the result may be instead (``` `a` or `b` ```)."""

    groups: tuple[tuple[Shape, ...], ...]
    alternatives: tuple[Shape, ...]
    start: int
    end: int

    @property
    def result(self) -> Shape:
        """The shape of the tensor the line makes: the last one."""
        return self.groups[-1][0]

    @property
    def operands(self) -> tuple[Shape, ...]:
        """The shapes before ``->`` (one: the operand; several: a matrix product's operands)."""
        return self.groups[0] if len(self.groups) > 1 else ()

    @property
    def middle(self) -> tuple[Shape, ...]:
        """The intermediate shapes of a longer chain ``a -> b -> c``."""
        return tuple(s for group in self.groups[1:-1] for s in group)

    def shapes(self) -> tuple[Shape, ...]:
        return tuple(s for group in self.groups for s in group) + self.alternatives


UNREADABLE = "unreadable"
"""What ``read`` returns for a comment that starts like a shape (``[``) but is none."""

_CLOSING = {"[": "]", "(": ")", "{": "}"}
_ARROWS = ("->", "→")
_PRODUCTS = ("@", "×", "x")
# The word "shape" (or 形状), then a few characters, then a backtick: labml's prose form.
_SHAPE_WORD = re.compile(r"(?:\bshape[sd]?\b[^`\n]{0,16}?|形状[^`\n]{0,4}?)`", re.IGNORECASE)
_OR = re.compile(r"\s*(?:\bor\b|或者?)\s*`")


def _shape_at(text: str, at: int) -> Shape | None:
    """The shape that starts at ``text[at]`` (``[`` or ``(``), or ``None``."""
    opening = text[at] if at < len(text) else ""
    if opening not in "[(" or not opening:
        return None
    depth = 0
    for end in range(at, len(text)):
        if text[end] in _CLOSING:
            depth += 1
        elif text[end] in _CLOSING.values():
            depth -= 1
            if depth == 0:
                break
    else:
        return None
    written = text[at : end + 1]
    source = written.replace("…", ELLIPSIS)
    try:
        tree = ast.parse(source, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(tree, ast.List if opening == "[" else ast.Tuple):
        return None  # "(T)" is not a tuple: prose in parentheses, such as "(optional)"
    dims = []
    for i, element in enumerate(tree.elts):
        if isinstance(element, ast.Constant) and element.value is Ellipsis and i == 0:
            dims.append(ELLIPSIS)
        elif _is_dimension(element, OPERATORS):
            dims.append(ast.get_source_segment(source, element))
        else:
            return None
    return Shape(tuple(dims), at, end + 1, opening)


def _skip_spaces(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t":
        at += 1
    return at


def _spec_at(text: str, at: int) -> Spec | None:
    """The spec that starts at ``text[at]``, or ``None``."""
    groups: list[tuple[Shape, ...]] = []
    group: list[Shape] = []
    start = at
    while True:
        shape = _shape_at(text, at)
        if shape is None:
            return None
        group.append(shape)
        at = shape.end
        after = _skip_spaces(text, at)
        product = next((p for p in _PRODUCTS if text.startswith(p, after)), None)
        # "x" is a product only before a shape: "[a] x [b]", not "[a] xs"
        if product == "x" and not text.startswith(("[", "("), _skip_spaces(text, after + 1)):
            product = None
        if product is not None:
            at = _skip_spaces(text, after + len(product))
            continue
        groups.append(tuple(group))
        group = []
        arrow = next((a for a in _ARROWS if text.startswith(a, after)), None)
        if arrow is None:
            break
        at = _skip_spaces(text, after + len(arrow))
    if len(groups[-1]) != 1:
        return None  # "a x b" without "-> c": no result stated
    return Spec(tuple(groups), (), start, at)


def read(comment: str) -> Spec | str | None:
    """The spec of ``comment`` (a ``#`` comment's text), ``UNREADABLE`` for one that starts with
    ``[`` but is no shape, or ``None`` for a comment that states no shape (see the module)."""
    body = comment[1:] if comment.startswith("#") else comment
    offset = len(comment) - len(body)
    at = _skip_spaces(body, 0)
    quoted = body.startswith("`", at)
    if body.startswith(("[", "("), at + quoted):
        spec = _spec_at(body, at + quoted)
        if spec is not None and (not quoted or body.startswith("`", spec.end)):
            return _shifted(spec, offset)
        return UNREADABLE if body[at + quoted] == "[" else None
    word = _SHAPE_WORD.search(body)
    if word is None:
        return None
    spec = _spec_at(body, word.end())
    if spec is None or not body.startswith("`", spec.end):
        return None
    alternatives = []
    end = spec.end + 1
    while (joined := _OR.match(body, end)) is not None:
        other = _spec_at(body, joined.end())
        if other is None or len(other.groups) != 1 or not body.startswith("`", other.end):
            break
        alternatives.append(other.result)
        end = other.end + 1
    return _shifted(Spec(spec.groups, tuple(alternatives), spec.start, spec.end), offset)


def _shifted(spec: Spec, offset: int) -> Spec:
    """``spec`` with its positions counted from the start of the comment (its ``#``)."""

    def move(shape: Shape) -> Shape:
        return Shape(shape.dims, shape.start + offset, shape.end + offset, shape.opening)

    groups = tuple(tuple(move(s) for s in group) for group in spec.groups)
    alternatives = tuple(move(s) for s in spec.alternatives)
    return Spec(groups, alternatives, spec.start + offset, spec.end + offset)
