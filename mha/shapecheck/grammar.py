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
parse (``# [batch_size=2]``) is *unreadable*: reported as not understood, never as right or wrong.
What else *looks like* a shape (``# x: (B, T, d)``, ``# b t d_ff``, ``# (B, T, 3C)``) is defined
once, by ``not_understood``, which says why each such comment is not read: the checker lists
them, so none is skipped in silence.
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


def _group(text: str, at: int) -> int | None:
    """The end (after its closing bracket) of the bracketed group at ``text[at]``, or ``None``."""
    depth = 0
    for end in range(at, len(text)):
        if text[end] in _CLOSING:
            depth += 1
        elif text[end] in _CLOSING.values():
            depth -= 1
            if depth == 0:
                return end + 1
    return None


def _shape_at(text: str, at: int) -> Shape | None:
    """The shape that starts at ``text[at]`` (``[`` or ``(``), or ``None``."""
    opening = text[at] if at < len(text) else ""
    if opening not in "[(" or not opening:
        return None
    end = _group(text, at)
    if end is None:
        return None
    written = text[at:end]
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
    return Shape(tuple(dims), at, end, opening)


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


# ---- What looks like a shape --------------------------------------------------------------------

# A dimension as people write one, read or not: a name, a number, both run together (``3C``),
# joined by operators, in parentheses; or ``...``.
_ATOM = re.compile(r"\d+|\d*[A-Za-z_][A-Za-z0-9_]*")
_OPERATOR = re.compile(r"\s*(?://|[-+*/])\s*")
_RUN_TOGETHER = re.compile(r"(?<![A-Za-z0-9_])(\d+)([A-Za-z_][A-Za-z0-9_]*)")
# Before a shape: names and a colon (``x:``, ``q, k:``, ``shape:``, ``形状：``); a count (``2 x``)
_LABEL = re.compile(r"(?:[A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*|形状)\s*[:：]\s*")
_COUNT = re.compile(r"\d+\s*[x×*]\s*(?=[\[(])")
# Words of a sentence, never dimensions written bare: "# see above", "# no cover"
_PROSE = set(
    "a an the of to is are be was and or not no nor in on at by for with from into as if it its "
    "this that these those see each per one all any todo fixme xxx note".split()
)
_MAX_WORDS = 8


def _dimension_like(text: str) -> bool:
    """Whether ``text`` is written as a dimension, read or not: ``B``, ``3C``, ``3*C``,
    ``(b*t)``, ``heads_num * (nope + rope)``, ``...``."""
    text = text.strip()
    if text in (ELLIPSIS, "…"):
        return True
    flat = text.replace("(", " ").replace(")", " ").strip()
    return bool(flat) and all(_ATOM.fullmatch(p) for p in _OPERATOR.split(flat))


def _terse(word: str) -> bool:
    """Whether ``word`` is written as a dimension's name, not an English word: one or two
    characters (``B``, ``nh``, ``3C``), with an underscore or a digit (``d_ff``, ``h1``), in
    capitals (``BT``), or a product (``b*t``); a number alone is not."""
    if word.isdigit():
        return False
    return (
        len(word) <= 2
        or "_" in word
        or "*" in word
        or word.isupper()
        or (any(c.isdigit() for c in word))
    )


def _items(inside: str) -> list[str]:
    """``inside`` (a group's text between its brackets) split at its commas of depth 0."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(inside):
        depth += (c in "[(") - (c in "])")
        if c == "," and depth == 0:
            items.append(inside[start:i])
            start = i + 1
    return [*items, inside[start:]]


def _words(text: str) -> list[str] | None:
    """``text`` as units separated by spaces, a bracketed group being one unit; ``None`` when a
    group is not closed."""
    units, at = [], 0
    while (at := _skip_spaces(text, at)) < len(text):
        end = at
        while end < len(text) and text[end] not in " \t":
            if text[end] in "[(":  # a group, alone or glued to a word (``windows[i]``)
                end = _group(text, end)
                if end is None:
                    return None
            else:
                end += 1
        units.append(text[at:end])
        at = end
    return units


def _dims(units: list[str]) -> list[str]:
    """``units`` without their separators: arrows, and ``x`` (``×``) between every two
    dimensions (``B x T x C``; in ``x y z``, ``x`` is a name)."""
    units = [u for u in units if u not in ("->", "→")]
    odd = units[1::2]
    if len(units) >= 3 and len(units) % 2 and all(u in ("x", "×") for u in odd):
        return units[::2]
    return units


def _flat(units: list[str]) -> list[str] | None:
    """The dimension-like words of ``units`` (a bracketed unit's own words in it, separators
    left out), or ``None`` when one is not dimension-like."""
    found = []
    for unit in _dims(units):
        if unit[:1] in "[(" and not _dimension_like(unit):
            inner = _words(unit[1:-1])  # einops' (h d): terse words only, not "(see above)"
            words = None if inner is None else _flat(inner)
            if words is None or not all(map(_terse, words)):
                return None
            found += words
        elif _dimension_like(unit):
            found.append(unit)
        else:
            return None
    return found


def _bare(units: list[str]) -> bool:
    """Whether ``units`` are dimensions written without a bracketed list (einops' way:
    ``b t d_ff``, ``B x T x 3C``, ``(b*t) d_ff``): two to eight, each dimension-like, more than
    half of them terse, none a word of prose."""
    words = _flat(units)
    return (
        words is not None
        and 2 <= len(words) <= _MAX_WORDS
        and not any(w.lower() in _PROSE for w in words)
        and 2 * sum(map(_terse, words)) > len(words)
    )


def _run_together(text: str) -> list[str]:
    """Each number run into a name in ``text``, said as it should be: ``3C`` (write ``3 * C``)."""
    return [f"{m.group(0)} is no dimension (write {m.group(1)} * {m.group(2)})"
            for m in _RUN_TOGETHER.finditer(text)]  # fmt: skip


def _why_unread(rest: str) -> list[str] | None:
    """Why ``rest`` (a comment's text after its label and count) looks like a shape and is not
    read; ``None`` when it does not look like one."""
    end = _group(rest, 0) if rest.startswith(("[", "(")) else None
    if end is not None:
        items = _items(rest[1 : end - 1])
        last = items[-1]
        if (
            len(items) >= 2
            and all(map(_dimension_like, items[:-1]))
            and (_dimension_like(last) or not last.strip())
        ):
            return _run_together(rest[:end])
    units = _words(rest)
    if units is None or not _bare(units):
        return None
    sides = [[]]
    for unit in units:
        if unit in ("->", "→"):
            sides.append([])
        else:
            sides[-1].append(unit[1:-1] if unit[:1] in "[(" and _dimension_like(unit) else unit)
    written = " -> ".join(f"[{', '.join(_dims(side))}]" for side in sides)
    written = _RUN_TOGETHER.sub(r"\1 * \2", written)
    return [f"its dimensions are not a bracketed list (write {written})"]


def not_understood(comment: str) -> str | None:
    """Why ``comment`` (a ``#`` comment's text) looks like a shape but is not read as one;
    ``None`` for a comment the grammar reads (``read`` gives a ``Spec``) and for one that does
    not look like a shape. The one definition of *looks like a shape*: after the ``#``, an
    optional backtick, label (``x:``, ``q, k:``, ``shape:``, ``形状：``) and count (``2 x``),

    - a comment that starts with ``[`` (``# [batch_size=2]``);
    - a bracketed group of two or more dimension-like items separated by commas, read or not
      (``(B, T, 3C)``), whatever prose follows it;
    - or nothing but two to eight dimension-like words separated by spaces or ``x``, a
      bracketed group being one word (``b t d_ff``, ``B x T x 3C``, ``(b*t) d_ff``), at least
      one of them terse (one or two characters, an underscore or a digit, capitals, or
      arithmetic) and none a word of prose (``the``, ``see``, ``no`` ...).

    A dimension-like item is a name, a number, or both run together (``3C``), joined by ``+ -
    * / //`` with parentheses, or ``...``. So ``# the causal mask``, ``# (see above)``, ``# (the
    eos ids, the pad id)`` and ``# 中文注释`` do not look like shapes, and a shape inside a
    sentence (``# multiplies x by [W_0, W_1]``) does not either.

    中文:
        ``comment`` 看起来像形状、却没能读懂的原因；语法能读懂的注释（``read`` 返回 ``Spec``）和
        看起来不像形状的注释返回 ``None``。“看起来像形状”只在这里定义：``#`` 之后，可以先有一个
        反引号、一个标签（``x:``、``q, k:``、``shape:``、``形状：``）和一个个数（``2 x``），然后

        - 以 ``[`` 开头（``# [batch_size=2]``）；
        - 或者是用逗号隔开的两个以上像维度的项，放在括号里，不论读不读得懂（``(B, T, 3C)``），
          后面跟什么文字都算；
        - 或者整条注释只有两到八个用空格或 ``x`` 隔开的像维度的词，一对括号算一个词
          （``b t d_ff``、``B x T x 3C``、``(b*t) d_ff``），其中至少一个写得简短（一两个字符、
          含下划线或数字、全大写，或是算式），而且没有一个是英文句子里的虚词（``the``、
          ``see``、``no`` 等）。

        像维度的项是名字、整数或两者连写（``3C``），可以用 ``+ - * / //`` 和括号组合，也可以是
        ``...``。所以 ``# the causal mask``、``# (see above)``、``# (the eos ids, the pad id)``
        和 ``# 中文注释`` 都不像形状，句子中间的形状（``# multiplies x by [W_0, W_1]``）也不算。
    """
    spec = read(comment)
    if isinstance(spec, Spec):
        return None
    if spec == UNREADABLE:
        return (
            "its brackets hold no shape (a dimension is a name, a whole number or arithmetic "
            "of them)"
        )
    rest = (comment[1:] if comment.startswith("#") else comment).strip().strip("`").strip()
    reasons = []
    label = _LABEL.match(rest)
    if label is not None:
        reasons.append(f"it starts with {label.group(0).strip()!r}, not with its shape")
        rest = rest[label.end() :].lstrip("`")
    count = _COUNT.match(rest)
    if count is not None:
        reasons.append(f"it starts with the count {count.group(0).strip()!r}, not with its shape")
        rest = rest[count.end() :]
    why = _why_unread(rest)
    if why is None:
        return None
    reasons += why
    return "; ".join(reasons) or "its shape does not parse (a list or tuple of dimensions)"


def looks_like_shape(comment: str) -> bool:
    """Whether ``comment`` states a shape, read (``read`` gives a ``Spec``) or not (see
    ``not_understood``).

    中文:
        ``comment`` 是否写了一个形状：读得懂（``read`` 返回 ``Spec``）或读不懂（见
        ``not_understood``）。
    """
    return isinstance(read(comment), Spec) or not_understood(comment) is not None
