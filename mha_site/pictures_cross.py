"""The picture of the chapter cross: drawn at build time from the page's own run of ``mha.full``.

``cross-weights``: the page's ``MHA(20, 4)`` on ``x`` ``[2, 3, 20]`` with a ``context`` of
``[2, 7, 20]`` (seed 0, made in the page's order), laid out as the product it is: head 0's
queries of sequence 0 (``q_len`` rows, from ``x``) on the left, its keys transposed (``k_len``
columns, from the context) on top, and where they meet its attention weights, a rectangle of
``q_len`` × ``k_len``, each printed to two decimals. Under it, the shapes of ``q``, ``k`` and
``weights`` as the run gives them. The weights are coloured with the masks heatmaps' scale
(``mha_site/pictures_heatmaps.py``), so a number reads as it does there.
"""

from __future__ import annotations

import functools
import html

import torch

from mha_site import pictures_heatmaps as heatmaps
from mha_site.languages import tr
from mha_site.picture_style import (
    CELL,
    FONT,
    SMALL,
    Svg,
    fill_of,
    shape_spans,
    shape_text,
    stroke_of,
)

HIDDEN, HEADS, X_SHAPE, CONTEXT_LEN = 20, 4, (2, 3, 20), 7
SEQUENCE, HEAD = 0, 0  # the sequence and the head drawn
SQUARE = heatmaps.SQUARE  # a weight's square, as on the masks heatmaps
LEFT = 18  # room for the query positions' labels


@functools.cache
def run() -> dict:
    """The page's run: the shapes of ``q``, ``k`` and ``weights``, and the weights of the drawn
    head and sequence, ``[q_len, k_len]``."""
    from mha.full import MHA

    with torch.random.fork_rng():  # the build's (or a test's) random state is left as it was
        torch.manual_seed(0)
        model = MHA(HIDDEN, HEADS).eval()
        x = torch.randn(*X_SHAPE)
        context = torch.randn(X_SHAPE[0], CONTEXT_LEN, HIDDEN)
    batch, q_len, _ = x.shape
    d = model.head_size
    with torch.no_grad():
        q = model.W_q(x).view(batch, q_len, HEADS, d).transpose(1, 2)
        k = model.W_k(context).view(batch, CONTEXT_LEN, HEADS, d).transpose(1, 2)
        _, weights = model(x, context, need_weights=True)
    return {
        "q": tuple(q.shape),
        "k": tuple(k.shape),
        "weights": tuple(weights.shape),
        "drawn": weights[SEQUENCE, HEAD].tolist(),
    }


def cross_weights_picture(language: str) -> str:
    shapes = run()
    drawn = shapes["drawn"]
    q_len, k_len = len(drawn), len(drawn[0])
    head_size = shapes["q"][-1]
    title = tr(
        language,
        f"Cross-attention weights of head {HEAD} for sequence {SEQUENCE}: {q_len} queries from x "
        f"(rows) against {k_len} keys from the context (columns), a {q_len} × {k_len} rectangle "
        f"where q and the transposed k meet; weights {shape_text(shapes['weights'])}",
        f"序列 {SEQUENCE}、头 {HEAD} 的交叉注意力权重：来自 x 的 {q_len} 个查询（行）"
        f"对来自上下文的 {k_len} 个键（列），q 与转置后的 k 相乘，得到 {q_len} × {k_len} 的长方形；"
        f"weights 的形状为 {shape_text(shapes['weights'])}",
    )
    svg = Svg("cross-weights", title)
    svg.text(
        4,
        4 + FONT,
        tr(
            language,
            f"Head {HEAD} of sequence {SEQUENCE}: {q_len} queries × {k_len} keys",
            f"序列 {SEQUENCE}、头 {HEAD}：{q_len} 个查询 × {k_len} 个键",
        ),
        bold=True,
    )
    svg.text(
        4,
        4 + FONT + 17,
        tr(
            language,
            "rows: queries s (from x), columns: keys t (from context)",
            "行：查询 s（来自 x），列：键 t（来自上下文）",
        ),
        size=SMALL,
    )
    q_left = LEFT
    grid_left = q_left + head_size * CELL + 10
    k_top = 4 + FONT + 17 + 10 + SMALL
    grid_top = k_top + head_size * CELL + 8
    fcls, fill = fill_of(HEAD)
    scls, stroke = stroke_of(HEAD)
    # the keys, transposed: head_size rows, one column per key position t
    for t in range(k_len):
        x = grid_left + t * SQUARE
        svg.text(x + SQUARE / 2, k_top - 5, str(t), anchor="middle", size=SMALL)
        for c in range(head_size):
            svg.rect(x, k_top + c * CELL, SQUARE, CELL, f"{fcls} {scls}", fill, stroke)
    svg.text(grid_left - 8, k_top + head_size * CELL / 2, "kᵀ", anchor="end", bold=True)
    svg.text(
        grid_left - 8,
        k_top + head_size * CELL / 2 + SMALL + 5,
        tr(language, "from context", "来自上下文"),
        anchor="end",
        size=SMALL,
    )
    # the queries: one row per query position s, head_size columns
    for s in range(q_len):
        y = grid_top + s * SQUARE
        svg.text(4, y + SQUARE / 2 + 4, str(s), size=SMALL)
        for c in range(head_size):
            svg.rect(q_left + c * CELL, y, CELL, SQUARE, f"{fcls} {scls}", fill, stroke)
    below = grid_top + q_len * SQUARE + 6 + FONT
    svg.text(q_left + head_size * CELL / 2, below, "q", anchor="middle", code=True, bold=True)
    svg.text(
        q_left + head_size * CELL / 2,
        below + SMALL + 4,
        tr(language, "from x", "来自 x"),
        anchor="middle",
        size=SMALL,
    )
    # where they meet: the weights, one row per query and one column per key
    cells = []
    for s, row in enumerate(drawn):
        for t, w in enumerate(row):
            x, y = grid_left + t * SQUARE, grid_top + s * SQUARE
            shown = f"{w:.2f}"
            tip = tr(language, f"query {s}, key {t}: {shown}", f"查询 {s}，键 {t}：{shown}")
            rect_style, text_style = heatmaps.cell_style(w)
            cells.append(
                f'<g class="cell" data-q="{s}" data-k="{t}"><title>{html.escape(tip)}</title>'
                f'<rect x="{x:g}" y="{y:g}" width="{SQUARE}" height="{SQUARE}" '
                f'style="{rect_style}"/><text x="{x + SQUARE / 2:g}" y="{y + SQUARE / 2 + 3.5:g}" '
                f'font-size="{heatmaps.NUMBER_FONT}" text-anchor="middle" style="{text_style}">'
                f"{shown}</text></g>"
            )
    css = heatmaps.STYLE % {"hatch": "mha-hatch-cross", "variant": "cross"}
    svg.markup(f'<style>{css}</style><g class="mha-heat mha-heat-cross">{"".join(cells)}</g>')
    grid_right = grid_left + k_len * SQUARE
    svg.grow(grid_right, grid_top + q_len * SQUARE)
    svg.text(
        (grid_left + grid_right) / 2,
        below,
        "weights",
        anchor="middle",
        code=True,
        bold=True,
    )
    svg.text(
        (grid_left + grid_right) / 2,
        below + SMALL + 4,
        tr(language, f"{q_len} × {k_len}, each row sums to 1", f"{q_len} × {k_len}，每行之和为 1"),
        anchor="middle",
        size=SMALL,
    )
    # the shapes, as the run gives them; the two lengths in the accent colour
    y = below + SMALL + 4 + 26
    for name, dims in (
        ("q", ("batch_size", "heads_num", "q_len", "head_size")),
        ("k", ("batch_size", "heads_num", "k_len", "head_size")),
        ("weights", ("batch_size", "heads_num", "q_len", "k_len")),
    ):
        svg.text(4, y, f"{name} {shape_text(shapes[name])}", code=True, bold=True)
        lengths = [i for i, dim in enumerate(dims) if dim in ("q_len", "k_len")]
        svg.text(4, y + SMALL + 5, shape_spans(dims, lengths), code=True, size=SMALL)
        y += 2 * SMALL + 18
    return str(svg)


PICTURES = {"cross-weights": cross_weights_picture}
