"""The look shared by every picture of the site: the head palette and small SVG helpers.

Not a generator (not in ``mha_site.pictures.GENERATORS``): the generator modules import it.
Colours come in two forms. Each element carries a class (``mha-h2`` for head 2, ``mha-t2`` for
text in head 2's colour, ``mha-fg`` ...) that ``docs/assets/mha.css`` colours for the light and
the dark scheme, and a presentation attribute with the light colour, so the SVG also reads on its
own. Every text colour has at least 4.5:1 contrast on its background (WCAG AA).

Head ``i`` has the same colour on every picture, so a reader can follow head 2 from the projection
to the concatenation.

A picture drawn from another run than the pages' own (``PAGE_RUN``) says which, in its visible
text and its description: ``Run.note``, drawn by ``Svg`` (or by a generator that writes its own
SVG).
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import NamedTuple

from mha_site.languages import tr

# Strong colours, used for outlines and for text (light: >= 5.9:1 on white; dark: >= 7:1 on
# Material's slate background #1e2029), and opaque tints of them for filled cells.
HEADS_LIGHT = ("#1f5fa8", "#a14a00", "#17724a", "#8a3a9a")
HEADS_DARK = ("#72b3f2", "#f0a05a", "#58cf96", "#d99be6")
TINTS_LIGHT = ("#c5d7ec", "#ecd4bf", "#c2dcd0", "#e3cbe8")
TINTS_DARK = ("#34506e", "#5e4630", "#2d5a48", "#5a4663")
NEUTRAL_LIGHT, NEUTRAL_DARK = "#555555", "#aaaaaa"
NEUTRAL_TINT_LIGHT, NEUTRAL_TINT_DARK = "#e2e2e2", "#3a3d48"
ACCENT_LIGHT, ACCENT_DARK = "#c2185b", "#ff80ab"  # the axis that moves (5.9:1 and 6.9:1)

CELL = 14  # side of one element's square, in SVG units, on every picture
FONT = 13  # label size; code and shapes use the same size in the site's code font
SMALL = 11


def shape_text(shape) -> str:
    """A shape in the site's format: ``[2, 3, 4, 5]``."""
    return "[" + ", ".join(str(n) for n in shape) + "]"


def shape_spans(items, moving=()) -> list[tuple[str, str]]:
    """A shape or its dimensions' names as ``Svg.text`` spans, ``[2, 4, 3, 5]`` or
    ``[batch_size, heads_num, q_len, k_len]``, the items at the indices in ``moving`` (negative
    ones count from the end) marked as the axis that moves (``mha-move``)."""
    marked = {m % len(items) for m in moving}
    spans: list[tuple[str, str]] = [("[", "")]
    for i, item in enumerate(items):
        spans.append((str(item), "mha-move" if i in marked else ""))
        spans.append((", " if i < len(items) - 1 else "]", ""))
    return spans


class Run(NamedTuple):
    """The run a picture draws: ``MHA(hidden_size, heads_num)`` on an input ``x`` of ``x_shape``."""

    hidden_size: int
    heads_num: int
    x_shape: tuple[int, ...]

    @classmethod
    def of(cls, model, x) -> Run:
        """The run of ``model`` (any of mha's classes) on ``x``, as it was drawn."""
        return cls(model.hidden_size, model.heads_num, tuple(x.shape))

    def note(self, language: str) -> str:
        """What a picture of this run writes about it: nothing for the pages' own run; for
        another, the run in the form the pages write it, ``MHA(4, 2)`` and ``x [1, 3, 4]``."""
        if self == PAGE_RUN:
            return ""
        model, x = f"MHA({self.hidden_size}, {self.heads_num})", shape_text(self.x_shape)
        return tr(language, f"Drawn for {model} on x {x}", f"本图画的是 {model}，x 的形状为 {x}")


# The run the pages with pictures start from (the walkthrough's set-up, the masks page's model):
# batch 2, sequence 3, 4 heads of 5 channels.
PAGE_RUN = Run(hidden_size=20, heads_num=4, x_shape=(2, 3, 20))
NOTE_CLASS = "mha-run-note"  # the visible text of Run.note, in every picture that has one


def head_count() -> int:
    return len(HEADS_LIGHT)


def fill_of(head: int) -> tuple[str, str]:
    """(class, light colour) of a cell of ``head`` (-1: no head, a neutral grey)."""
    if head < 0:
        return "mha-n", NEUTRAL_TINT_LIGHT
    return f"mha-h{head % head_count()}", TINTS_LIGHT[head % head_count()]


def stroke_of(head: int) -> tuple[str, str]:
    if head < 0:
        return "mha-sn", NEUTRAL_LIGHT
    return f"mha-s{head % head_count()}", HEADS_LIGHT[head % head_count()]


def text_of(head: int) -> tuple[str, str]:
    if head < 0:
        return "mha-fg", "currentColor"
    return f"mha-t{head % head_count()}", HEADS_LIGHT[head % head_count()]


def text_width(text: str, per: float, per_wide: float | None = None) -> float:
    """An estimate of the width of ``text``, used only to size a picture: ``per`` for each
    character, ``per_wide`` (1.8 times ``per`` unless given) for each CJK one, which is square."""
    wide = 1.8 * per if per_wide is None else per_wide
    return sum(wide if ord(ch) > 0x2E80 else per for ch in text)


class Rect(str):
    """The markup of one ``<rect>`` (a part of an ``Svg``), with its box and its paint (class,
    fill, stroke, dashes) apart, so that ``Svg`` can draw a run of cells of one paint at once."""

    box: tuple[float, float, float, float, float]  # x, y, width, height, corner radius
    paint: str

    @classmethod
    def make(cls, x, y, w, h, rx, paint: str) -> Rect:
        rect = cls(f"<rect {geometry(x, y, w, h, rx)}{paint}/>")
        rect.box, rect.paint = (x, y, w, h, rx), paint
        return rect


def geometry(x, y, w, h, rx=0) -> str:
    corner = f' rx="{rx:g}"' if rx else ""
    return f'x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}"{corner}'


def run_markup(run: list[Rect]) -> str:
    """A run of two or more rects of one paint: a ``<g>`` with the paint, the rects inside with
    their boxes alone. The picture looks the same, pixel for pixel (compared in Chromium, both
    schemes): fill, stroke and dashes are inherited, the classes colour the group as they coloured
    each rect (``docs/assets/mha.css`` sets no opacity on them), and each rect is still filled
    and outlined before the next. Grids of cells are most of the bytes of the walkthrough's
    pictures; this halves them. (One ``<path>`` for a run would be smaller still, but it fills
    every square before outlining any, which shades the shared edges differently.)
    """
    boxes = "".join(f"<rect {geometry(*rect.box)}/>" for rect in run)
    return f"<g{run[0].paint}>{boxes}</g>"


def grouped(parts: list[str]) -> str:
    """The parts as markup, each run of consecutive ``Rect`` of one paint drawn at once."""
    out: list[str] = []
    i = 0
    while i < len(parts):
        part = parts[i]
        j = i + 1
        if isinstance(part, Rect):
            while j < len(parts) and isinstance(parts[j], Rect) and parts[j].paint == part.paint:
                j += 1
        out.append(run_markup(parts[i:j]) if j - i > 1 else part)
        i = j
    return "".join(out)


class Svg:
    """An SVG picture built element by element; ``str()`` gives the markup.

    ``name`` makes its ids unique on the page (several pictures share one HTML document).
    Numbers are written as short as they are (``:g``); attributes at their default value
    (``rx="0"``, ``text-anchor="start"``) are left out. ``note`` (``Run.note``) is written above
    the drawing, which moves down to make room (or where ``note_at`` puts it), and joins the
    description. ``classes`` are the root's besides ``mha-picture`` (for a picture's own style).
    """

    def __init__(
        self, name: str, title: str, description: str = "", note: str = "", classes: str = ""
    ):
        self.name, self.title, self.description, self.note = name, title, description, note
        self.classes = classes
        self.parts: list[str] = []
        self.width = self.height = 0.0
        self.note_drawn = False

    def grow(self, x: float, y: float) -> None:
        self.width, self.height = max(self.width, x), max(self.height, y)

    def markup(self, markup: str) -> None:
        """Markup that the methods here do not draw (a style sheet, a pattern, a group with its
        own tooltip and colours), as it is: the caller grows the picture to what it reaches."""
        self.parts.append(markup)

    def note_at(self, x, y, size: float = FONT) -> None:
        """Write the note (if any) at baseline ``y`` rather than above the drawing: a picture with
        a heading of its own puts it under that."""
        if self.note:
            self.text(x, y, self.note, cls=f"mha-fg {NOTE_CLASS}", size=size)
        self.note_drawn = True

    def rect(self, x, y, w, h, cls="", fill="none", stroke="none", dashed=False, rx=0) -> None:
        dash = ' stroke-dasharray="3 2"' if dashed else ""
        self.parts.append(
            Rect.make(x, y, w, h, rx, f' class="{cls}" fill="{fill}" stroke="{stroke}"{dash}')
        )
        self.grow(x + w, y + h)

    def cell(self, x, y, head: int, size: float = CELL, back: bool = False) -> None:
        fcls, fill = fill_of(head)
        scls, stroke = stroke_of(head)
        extra = " mha-back" if back else ""
        self.rect(x, y, size, size, f"{fcls} {scls}{extra}", fill, stroke)

    def line(self, x1, y1, x2, y2, cls="mha-sfg", width=1.0, dashed=False) -> None:
        dash = ' stroke-dasharray="3 2"' if dashed else ""
        self.parts.append(
            f'<line x1="{x1:g}" y1="{y1:g}" x2="{x2:g}" y2="{y2:g}" class="{cls}"'
            f' stroke="currentColor" stroke-width="{width:g}"{dash}/>'
        )
        self.grow(max(x1, x2), max(y1, y2))

    def path(self, d: str, cls="mha-sfg", fill="none", width=1.0) -> None:
        self.parts.append(
            f'<path d="{d}" class="{cls}" fill="{fill}" stroke="currentColor"'
            f' stroke-width="{width:g}"/>'
        )

    def arrow_down(self, x, y1, y2, cls="mha-sfg") -> None:
        self.line(x, y1, x, y2 - 1, cls, 1.2)
        self.path(f"M{x - 4:g},{y2 - 6:g} L{x:g},{y2:g} L{x + 4:g},{y2 - 6:g}", cls, width=1.2)

    def arrow_right(self, x1, x2, y, cls="mha-sfg") -> None:
        self.line(x1, y, x2 - 1, y, cls, 1.2)
        self.path(f"M{x2 - 6:g},{y - 4:g} L{x2:g},{y:g} L{x2 - 6:g},{y + 4:g}", cls, width=1.2)

    def text(
        self,
        x,
        y,
        spans,
        cls="mha-fg",
        size: float = FONT,
        anchor="start",
        code=False,
        bold=False,
        width_per_char: float | None = None,
    ) -> float:
        """A label at baseline ``y``; ``spans`` is a string or a list of (text, class) pairs
        (class ``""``: the label's own, ``"mha-move"``: the axis that moves). Returns its estimated
        width, used only to size the picture."""
        if isinstance(spans, str):
            spans = [(spans, "")]
        # The site's code font comes from mha.css (class mha-code); standalone, a monospace one.
        family = ' font-family="monospace"' if code else ""
        weight = ' font-weight="bold"' if bold else ""
        code_cls = " mha-code" if code else ""
        inner = "".join(
            f'<tspan class="{c}">{escape(t)}</tspan>' if c else escape(t) for t, c in spans
        )
        fill = "currentColor"
        align = f' text-anchor="{anchor}"' if anchor != "start" else ""
        self.parts.append(
            f'<text x="{x:g}" y="{y:g}" class="{cls}{code_cls}" font-size="{size:g}"'
            f'{align} fill="{fill}"{family}{weight}>{inner}</text>'
        )
        content = "".join(t for t, _ in spans)
        per = width_per_char or (0.62 * size if code else 0.56 * size)
        wide = text_width(content, per)
        left = {"start": x, "middle": x - wide / 2, "end": x - wide}[anchor]
        self.grow(left + wide, y + size * 0.3)
        return wide

    def turned_text(self, x, y, label: str, size: float = FONT) -> None:
        """A label turned a quarter left, centred on ``(x, y)``: a plot's y axis label."""
        self.parts.append(
            f'<text x="{x:g}" y="{y:g}" class="mha-fg" font-size="{size:g}"'
            f' text-anchor="middle" fill="currentColor"'
            f' transform="rotate(-90 {x:g} {y:g})">{escape(label)}</text>'
        )

    def __str__(self) -> str:
        body, width, height = grouped(self.parts), self.width, self.height
        if self.note and not self.note_drawn:
            line = Svg(self.name, "", note=self.note)
            line.note_at(4, 4 + FONT)
            shift = FONT + 12
            body = f'{line.parts[0]}<g transform="translate(0 {shift})">{body}</g>'
            width, height = max(width, line.width), height + shift
        width, height = round(width + 8), round(height + 8)
        tid = f"mha-pic-{self.name}-title"
        did = f"mha-pic-{self.name}-desc"
        labelled = f'aria-labelledby="{tid}"'
        desc = ""
        description = " ".join(part for part in (self.note, self.description) if part)
        if description:
            labelled += f' aria-describedby="{did}"'
            desc = f'<desc id="{did}">{escape(description)}</desc>'
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}"'
            f' width="{width}" height="{height}" role="img" {labelled}'
            f' class="{" ".join(["mha-picture", *self.classes.split()])}">'
            f'<title id="{tid}">{escape(self.title)}</title>{desc}' + body + "</svg>"
        )


@dataclass(frozen=True)
class Plot:
    """A framed plot area of a picture: ``x`` from ``x_range[0]`` to ``x_range[1]`` across,
    ``y`` likewise up, placed at ``(left, top)`` with ``width`` by ``height`` pixels."""

    left: float
    top: float
    width: float
    height: float
    x_range: tuple[float, float]
    y_range: tuple[float, float]

    def px(self, x: float) -> float:
        low, high = self.x_range
        return self.left + self.width * (x - low) / (high - low)

    def py(self, y: float) -> float:
        low, high = self.y_range
        return self.top + self.height * (1 - (y - low) / (high - low))

    def frame(self, svg: Svg, x_ticks, y_ticks, x_label: str, y_label: str) -> None:
        """The frame, its ticks with their values, and the two axes' labels."""
        svg.rect(self.left, self.top, self.width, self.height, cls="mha-sn", stroke="#555555")
        bottom = self.top + self.height
        for x in x_ticks:
            svg.line(self.px(x), bottom, self.px(x), bottom + 4)
            svg.text(self.px(x), bottom + 16, f"{x:g}", size=SMALL, anchor="middle")
        for y in y_ticks:
            svg.line(self.left - 4, self.py(y), self.left, self.py(y))
            svg.text(self.left - 6, self.py(y) + 4, f"{y:g}", size=SMALL, anchor="end")
        svg.text(self.left + self.width / 2, bottom + 34, x_label, anchor="middle")
        svg.turned_text(12, self.top + self.height / 2, y_label)

    def curve(self, svg: Svg, xs, ys, width: float = 1.6, cls: str = "mha-sfg") -> None:
        """A line through the points ``(xs[n], ys[n])``."""
        d = " ".join(
            f"{'M' if n == 0 else 'L'}{self.px(x):.1f},{self.py(y):.1f}"
            for n, (x, y) in enumerate(zip(xs, ys, strict=True))
        )
        svg.path(d, cls=cls, width=width)
