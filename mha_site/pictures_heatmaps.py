"""Attention heatmaps: the weights of a real run, per head, for a short sentence.

The example is small and fixed. Each token of a sentence has an id, and each id a random vector
(seeded ``torch.randn``, scaled by 2 so that the weights are not all close to uniform); an untrained
``mha.full.MHA(24, 4)`` (seeded too) attends over them with ``need_weights=True``. The pictures show
the mechanics of the masks, not meaning: nothing was trained.

Both languages use the same ids, so both pages show the same numbers: ids 0 to 5 are the
six tokens of the first sentence ("a cat sat on the mat", 一只 / 猫 / 坐 / 在 / 垫子 / 上), ids 6
to 8 the three of the second ("it is hot", 天气 / 很 / 热), and id 9 the padding (PAD, 填充) that
fills the second sentence up to 6 positions. The words are short, so that no key label needs
turning and a picture shrunk to a phone's width still shows its smallest text at 8 px or more
(``tests/test_heatmaps.py`` checks it). Three pictures, each one small heatmap per head (rows:
queries, columns: keys):

- ``heatmap-none``: the first sentence, no mask;
- ``heatmap-causal``: the first sentence, ``is_causal=True``;
- ``heatmap-padding``: the second sentence, padded, with ``padding_mask(lengths, 6)``.

A fourth, ``heatmap-previous`` on the heads page, draws heads whose job was set by hand: the first
sentence again, each position's vector its word's (random, ``WORD_SIZE`` channels) followed by a
one-hot code of its position, so ``MHA(24, 4)`` on ``[1, 6, 24]``, with ``is_causal=True``. Head
``i`` reads only the position code: its key of position ``j`` is the code of ``j``, its query of
position ``p`` the code of ``max(p - i, 0)`` times ``STRENGTH``, so it attends to the position
``i`` back (position 0 when there is none). The heads page's snippet is the same run.

Masked cells are hatched and carry no number; every other cell prints its weight to two decimals
and names it in a ``<title>`` (a tooltip on hover). ``tests/test_heatmaps.py`` checks every cell
against a fresh run. The runs are not their pages' own (``MHA(20, 4)`` on ``[2, 3, 20]``): each
picture says which it is, under its heading (``Run.note``).
"""

from __future__ import annotations

import functools
import html

import torch

from mha.full import MHA, causal_mask, padding_mask
from mha_site import picture_style as style

SEED = 0
HIDDEN_SIZE = 24
HEADS_NUM = 4
SCALE = 2.0
VOCAB = 10  # ids 0..8 are tokens, 9 is the padding
IDS = [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 9, 9]]
LENGTHS = [6, 3]
PAD_ID = 9

TOKENS = {
    "en": ["a", "cat", "sat", "on", "the", "mat", "it", "is", "hot", "PAD"],
    "zh": ["一只", "猫", "坐", "在", "垫子", "上", "天气", "很", "热", "填充"],
}

# Which sequence of the batch each picture shows (its ids: the labels).
VARIANTS = {"none": 0, "causal": 0, "padding": 1, "previous": 0, "window": 0}
WINDOW = 3  # heatmap-window: each query sees itself and the 2 positions before it
# The hand-set heads: a word's channels, then a position's one-hot code (its own channels).
WORD_SIZE = 18
STRENGTH = 12.0  # the query's size: a score of 12 / sqrt(head_size) on the key it looks for

TEXT = {
    "en": {
        "head": "head {i}",
        "axes": "rows: queries, columns: keys",
        "none": "No mask: “a cat sat on the mat”",
        "causal": "Causal mask (is_causal=True): “a cat sat on the mat”",
        "padding": "Padding mask: “it is hot”, padded to 6 positions",
        "previous": "Hand-set heads, causal mask: head i looks i positions back",
        "window": "Sliding window of 3 (window=3, is_causal=True): “a cat sat on the mat”",
        "title": "Attention weights of the 4 heads of mha.full.MHA({model}), {what}. Rows are "
        "queries, columns are keys; each row sums to 1; masked cells are hatched and weigh 0.",
        "cell": "head {i}, query “{q}”, key “{k}”: {w}",
        "masked": "head {i}, query “{q}”, key “{k}”: masked, weight 0",
        "legend": "weight",
        "legend_masked": "masked (weight 0)",
        "what": {
            "none": "no mask, for “a cat sat on the mat”",
            "causal": "causal mask, for “a cat sat on the mat”",
            "padding": "padding mask, for “it is hot” padded to 6 positions",
            "previous": "set by hand, not trained: in head i, position p attends to position "
            "p − i (to position 0 when p < i), causal mask, for “a cat sat on the mat”",
            "window": "sliding window of 3 positions with the causal mask, for “a cat sat on "
            "the mat”",
        },
    },
    "zh": {
        "head": "头 {i}",
        "axes": "行：查询，列：键",
        "none": "不加掩码：“一只猫坐在垫子上”",
        "causal": "因果掩码（is_causal=True）：“一只猫坐在垫子上”",
        "padding": "填充掩码：“天气很热”填充到 6 个位置",
        "previous": "手工设定的头，因果掩码：头 i 往前看 i 个位置",
        "window": "3 个位置的滑动窗口（window=3，is_causal=True）：“一只猫坐在垫子上”",
        "title": "mha.full.MHA({model}) 的 4 个头的注意力权重，{what}。行是查询，列是键；"
        "每行之和为 1；被掩码屏蔽的格子画了斜线，权重为 0。",
        "cell": "头 {i}，查询“{q}”，键“{k}”：{w}",
        "masked": "头 {i}，查询“{q}”，键“{k}”：被屏蔽，权重为 0",
        "legend": "注意力权重",
        "legend_masked": "被屏蔽（权重为 0）",
        "what": {
            "none": "不加掩码，句子是“一只猫坐在垫子上”",
            "causal": "因果掩码，句子是“一只猫坐在垫子上”",
            "padding": "填充掩码，句子是“天气很热”，填充到 6 个位置",
            "previous": "权重是手工设定的，没有训练：在头 i 里，位置 p 关注位置 p − i（p < i 时"
            "关注位置 0），加因果掩码，句子是“一只猫坐在垫子上”",
            "window": "3 个位置的滑动窗口加因果掩码，句子是“一只猫坐在垫子上”",
        },
    },
}

# ---- the run ----------------------------------------------------------------------------------


@functools.cache
def setup() -> tuple[MHA, torch.Tensor]:
    """The model and its input ``x``, ``[batch_size, seq_len, hidden_size]``: both sentences."""
    with torch.random.fork_rng():  # the build's (or a test's) random state is left as it was
        torch.manual_seed(SEED)
        table = SCALE * torch.randn(VOCAB, HIDDEN_SIZE)  # one vector per token id
        model = MHA(HIDDEN_SIZE, HEADS_NUM).eval()
    return model, table[torch.tensor(IDS)]


@functools.cache
def setup_previous() -> tuple[MHA, torch.Tensor]:
    """The hand-set heads and their input ``x``, ``[1, seq_len, WORD_SIZE + seq_len]``."""
    n = len(IDS[0])
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        words = torch.randn(1, n, WORD_SIZE)  # what each word is: random
        model = MHA(WORD_SIZE + n, HEADS_NUM, bias=False).eval()
    x = torch.cat([words, torch.eye(n).unsqueeze(0)], dim=-1)  # then position p's one-hot code
    d = model.head_size
    with torch.no_grad():
        model.W_q.weight.zero_()
        model.W_k.weight.zero_()
        for i in range(HEADS_NUM):
            rows = slice(i * d, (i + 1) * d)
            model.W_k.weight[rows, WORD_SIZE:] = torch.eye(n)  # key of j: the code of j
            back = [max(p - i, 0) for p in range(n)]  # the position query p looks for
            model.W_q.weight[rows, WORD_SIZE:] = STRENGTH * torch.eye(n)[back].T
    return model, x


def setup_of(variant: str) -> tuple[MHA, torch.Tensor]:
    """The model and the input that ``variant`` draws."""
    return setup_previous() if variant == "previous" else setup()


@functools.cache
def run() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The weights and the mask of each variant, for the sequence it shows.

    Returns ``{variant: (weights, allowed)}``, ``weights`` of shape ``[heads_num, q_len, k_len]``
    and ``allowed`` (``True`` = the query may attend to the key) of shape ``[q_len, k_len]``.
    """
    model, x = setup()
    seq_len = x.size(1)
    pad = padding_mask(torch.tensor(LENGTHS), seq_len)  # [batch_size, 1, 1, seq_len]
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    runs = {
        "none": ({}, torch.ones(seq_len, seq_len, dtype=torch.bool)),
        "causal": ({"is_causal": True}, causal),
        "padding": ({"attn_mask": pad}, pad[VARIANTS["padding"], 0, 0].expand(seq_len, -1)),
    }
    out = {}
    with torch.no_grad():
        for name, (kwargs, allowed) in runs.items():
            _, weights = model(x, need_weights=True, **kwargs)  # [batch, heads, q_len, k_len]
            out[name] = (weights[VARIANTS[name]], allowed)
        # The same weights with a sliding window: causal, and nothing older than WINDOW - 1 back
        with torch.random.fork_rng():  # its own initial weights are replaced at once
            windowed = MHA(HIDDEN_SIZE, HEADS_NUM, window=WINDOW).eval()
        windowed.load_state_dict(model.state_dict())
        _, weights = windowed(x, is_causal=True, need_weights=True)
        out["window"] = (weights[0], causal_mask(seq_len, seq_len, window=WINDOW))
        model, x = setup_previous()
        _, weights = model(x, is_causal=True, need_weights=True)
        out["previous"] = (weights[0], causal)
    return out


def tokens(variant: str, language: str) -> list[str]:
    """The labels of the positions of the sequence that ``variant`` shows."""
    return [TOKENS[language][i] for i in IDS[VARIANTS[variant]]]


# ---- colours ----------------------------------------------------------------------------------


# The sequential scale, per scheme: weight 0 is the page's background, weight 1 the strongest
# blue. Cells are painted with explicit colours, and each number is black or white, whichever
# contrasts more with its cell (at least 4.5:1 everywhere, tests/test_heatmaps.py checks it).
SCHEMES = {
    # Material's background: white (default), hsl(225, 15%, 14%) (slate)
    "light": {"zero": (255, 255, 255), "one": (31, 84, 170)},
    "dark": {"zero": (30, 33, 41), "one": (150, 190, 255)},
}
BLACK, WHITE = (0, 0, 0), (255, 255, 255)


def mix(one: tuple, zero: tuple, w: float) -> tuple[int, int, int]:
    return tuple(round(a * w + b * (1 - w)) for a, b in zip(one, zero, strict=True))


def luminance(rgb: tuple) -> float:
    def linear(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: tuple, b: tuple) -> float:
    dark, light = sorted((luminance(a), luminance(b)))
    return (light + 0.05) / (dark + 0.05)


def cell_colours(w: float, scheme: str) -> tuple[tuple, tuple]:
    """The fill of a cell of weight ``w`` and the colour of its number, in ``scheme``."""
    fill = mix(SCHEMES[scheme]["one"], SCHEMES[scheme]["zero"], w)
    text = max((BLACK, WHITE), key=lambda c: contrast(c, fill))
    return fill, text


def hex_colour(rgb: tuple) -> str:
    return "#{:02x}{:02x}{:02x}".format(*rgb)


# ---- drawing ----------------------------------------------------------------------------------

# A weight's square: larger than picture_style.CELL, it holds the weight to two decimals. The
# squares, the labels and the gaps are as small as reads well, so that a picture shrunk to a
# phone's width still shows its smallest text (the weights) at 8 px (tests/test_heatmaps.py).
SQUARE = 28
FONT = style.SMALL  # the labels'
HEADING_FONT = 13  # the heading's and the heads' labels
NUMBER_FONT = 10  # the weights'
GAP = 24
PANEL_COLUMNS = 2


def text_width(text: str, size: float = FONT) -> float:
    """The layout's estimate of the width of a label: 0.62 of its size a Latin character, a CJK
    one square."""
    return style.text_width(text, 0.62 * size, size)


def esc(text: str) -> str:
    return html.escape(text, quote=True)


STYLE = """
.mha-heat text { fill: var(--md-default-fg-color, #000); }
.mha-heat .heading, .mha-heat .head-label { font-weight: 700; }
.mha-heat .axes, .mha-heat .legend-label { fill: var(--md-default-fg-color--light, #555); }
.mha-heat .cell rect { fill: var(--l); stroke: var(--md-default-fg-color--lightest, #ccc); }
.mha-heat .cell text { fill: var(--lt); }
.mha-heat-%(variant)s .cell.masked rect { fill: url(#%(hatch)s); }
.mha-heat .hatch { stroke: var(--md-default-fg-color--light, #888); stroke-width: 1.2; }
[data-md-color-scheme="slate"] .mha-heat .cell rect { fill: var(--d); }
[data-md-color-scheme="slate"] .mha-heat .cell text { fill: var(--dt); }
[data-md-color-scheme="slate"] .mha-heat-%(variant)s .cell.masked rect { fill: url(#%(hatch)s); }
"""


def cell_style(w: float) -> tuple[str, str]:
    (fill_l, text_l), (fill_d, text_d) = cell_colours(w, "light"), cell_colours(w, "dark")
    rect = f"--l:{hex_colour(fill_l)};--d:{hex_colour(fill_d)}"
    text = f"--lt:{hex_colour(text_l)};--dt:{hex_colour(text_d)}"
    return rect, text


def heading_lines(heading: str) -> list[str]:
    """A heading on two lines, after its colon: on one it would be wider than the heatmaps."""
    for colon in (": ", "："):
        if colon in heading:
            first, rest = heading.split(colon, 1)
            return [first + colon.strip(), rest]
    return [heading]


def draw(variant: str, language: str) -> str:
    """The SVG of one variant: one heatmap per head, two heads per row."""
    words = TEXT[language]
    weights, allowed = run()[variant]
    labels = tokens(variant, language)
    n = len(labels)
    hatch = f"mha-hatch-{variant}"

    longest = max(text_width(t) for t in labels)
    row_label = longest + 8
    rotate = longest > SQUARE - 4
    column_label = (longest * 0.72 + 12) if rotate else 18
    # a rotated key label reaches past its cell to the right: keep room for the last one
    overhang = max(0.0, longest * 0.72 + 3 - SQUARE / 2) if rotate else 0
    panel_w = row_label + n * SQUARE + overhang
    panel_h = 20 + column_label + n * SQUARE
    drawn = style.Run.of(*setup_of(variant))
    note = drawn.note(language)
    heading = heading_lines(words[variant])
    axes_y = 16 + 18 * len(heading)
    top = axes_y + 10 + (18 if note else 0)  # the heading, the axes line and the note
    rows = -(-HEADS_NUM // PANEL_COLUMNS)
    legend_h = 46
    legend_top = top + rows * panel_h + (rows - 1) * GAP / 2
    # what the drawing reaches, right and down (Svg adds a margin of 8)
    right = max(
        PANEL_COLUMNS * panel_w + (PANEL_COLUMNS - 1) * GAP,
        *(text_width(line, HEADING_FONT) for line in heading),
        text_width(note),
    )
    bottom = legend_top + legend_h - 8

    css = {"hatch": hatch, "variant": variant}
    model = f"{drawn.hidden_size}, {drawn.heads_num}"
    title = words["title"].format(model=model, what=words["what"][variant])
    svg = style.Svg(f"heatmap-{variant}", title, note=note, classes=f"mha-heat mha-heat-{variant}")
    svg.grow(right, bottom)
    svg.markup(
        f"<style>{STYLE % css}</style>"
        f'<defs><pattern id="{hatch}" width="6" height="6" patternUnits="userSpaceOnUse" '
        f'patternTransform="rotate(45)"><line class="hatch" x1="0" y1="0" x2="0" y2="6"/>'
        f"</pattern></defs>"
        + "".join(
            f'<text class="heading" x="4" y="{16 + 18 * k}" font-size="{HEADING_FONT}">'
            f"{esc(line)}</text>"
            for k, line in enumerate(heading)
        )
        + f'<text class="axes" x="4" y="{axes_y}" font-size="{FONT}">{esc(words["axes"])}</text>'
    )
    svg.note_at(4, axes_y + 18, FONT)  # under the heading and the axes
    size = f'font-size="{FONT}"'  # the labels' (each text names its size: no style sheet does)
    out = []
    for head in range(HEADS_NUM):
        px = 4 + (head % PANEL_COLUMNS) * (panel_w + GAP)
        py = top + (head // PANEL_COLUMNS) * (panel_h + GAP / 2)
        gx, gy = px + row_label, py + 20 + column_label
        out.append(f'<g class="head" data-head="{head}">')
        # head i in its colour of every picture (mha_site/picture_style.py): label and frame
        text_class, text_colour = style.text_of(head)
        stroke_class, stroke_colour = style.stroke_of(head)
        out.append(
            f'<text class="head-label {text_class}" x="{gx:.1f}" y="{py + 13:.1f}" '
            f'font-size="{HEADING_FONT}" '
            f'fill="{text_colour}">{esc(words["head"].format(i=head))}</text>'
        )
        out.append(
            f'<rect class="frame {stroke_class}" x="{gx - 1.5:.1f}" y="{gy - 1.5:.1f}" '
            f'width="{n * SQUARE + 3}" height="{n * SQUARE + 3}" fill="none" '
            f'stroke="{stroke_colour}" stroke-width="2"/>'
        )
        for j, label in enumerate(labels):  # keys, along the top
            cx = gx + j * SQUARE + SQUARE / 2
            if rotate:
                out.append(
                    f'<text class="key" data-k="{j}" x="{cx + 3:.1f}" y="{gy - 5:.1f}" {size} '
                    f'transform="rotate(-45 {cx + 3:.1f} {gy - 5:.1f})">{esc(label)}</text>'
                )
            else:
                out.append(
                    f'<text class="key" data-k="{j}" x="{cx:.1f}" y="{gy - 6:.1f}" {size} '
                    f'text-anchor="middle">{esc(label)}</text>'
                )
        for i, label in enumerate(labels):  # queries, down the left side
            out.append(
                f'<text class="query" data-q="{i}" x="{gx - 6:.1f}" {size} '
                f'y="{gy + i * SQUARE + SQUARE / 2 + 4:.1f}" text-anchor="end">{esc(label)}</text>'
            )
        for i in range(n):
            for j in range(n):
                x, y = gx + j * SQUARE, gy + i * SQUARE
                keys = f'data-head="{head}" data-q="{i}" data-k="{j}"'
                if not allowed[i, j]:
                    tip = words["masked"].format(i=head, q=labels[i], k=labels[j])
                    out.append(
                        f'<g class="cell masked" {keys}><title>{esc(tip)}</title>'
                        f'<rect x="{x:.1f}" y="{y:.1f}" width="{SQUARE}" height="{SQUARE}"/></g>'
                    )
                    continue
                w = float(weights[head, i, j])
                shown = f"{w:.2f}"
                tip = words["cell"].format(i=head, q=labels[i], k=labels[j], w=shown)
                rect_style, text_style = cell_style(w)
                out.append(
                    f'<g class="cell" {keys}><title>{esc(tip)}</title>'
                    f'<rect x="{x:.1f}" y="{y:.1f}" width="{SQUARE}" height="{SQUARE}" '
                    f'style="{rect_style}"/>'
                    f'<text x="{x + SQUARE / 2:.1f}" y="{y + SQUARE / 2 + 3.5:.1f}" '
                    f'font-size="{NUMBER_FONT}" '
                    f'text-anchor="middle" style="{text_style}">{shown}</text></g>'
                )
        out.append("</g>")

    # The legend: the scale from 0 to 1, and a masked cell.
    ly = legend_top + 12
    out.append('<g class="legend">')
    out.append(
        f'<text class="legend-label" x="4" y="{ly + 12:.1f}" {size}>{esc(words["legend"])}</text>'
    )
    lx = 8 + text_width(words["legend"])
    steps = 10
    for s in range(steps + 1):
        w = s / steps
        rect_style, _ = cell_style(w)
        out.append(
            f'<g class="cell"><rect x="{lx + s * 16:.1f}" y="{ly:.1f}" width="16" height="16" '
            f'style="{rect_style}"/></g>'
        )
    for w, s in (("0", 0), ("0.5", steps // 2), ("1", steps)):
        out.append(
            f'<text class="legend-label" x="{lx + s * 16 + 8:.1f}" y="{ly + 30:.1f}" {size} '
            f'text-anchor="middle">{w}</text>'
        )
    mx = lx + (steps + 1) * 16 + 24
    out.append(
        f'<g class="cell masked"><rect x="{mx:.1f}" y="{ly:.1f}" width="16" height="16"/></g>'
    )
    out.append(
        f'<text class="legend-label" x="{mx + 22:.1f}" y="{ly + 12:.1f}" {size}>'
        f"{esc(words['legend_masked'])}</text>"
    )
    out.append("</g>")
    svg.markup("".join(out))
    return str(svg)


PICTURES = {f"heatmap-{variant}": functools.partial(draw, variant) for variant in VARIANTS}
