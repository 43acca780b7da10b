"""The picture of the chapter heads-split: drawn at build time from ``mha.parallel``.

``heads-split``: the page's ``MHA(20, 4, kv_heads=2)`` split over 2 ranks. The rows of ``W_q``,
``W_k``, ``W_v`` and the columns of ``W_o`` are drawn in bands, one per head, with the rank that
keeps each band as ``head_ranges`` says; each rank's shapes under it are read from the module
``heads_on_rank`` returns.
"""

from __future__ import annotations

import functools

import torch

from mha_site.languages import tr
from mha_site.picture_style import FONT, SMALL, Svg, fill_of, shape_text, stroke_of

HIDDEN, HEADS, KV_HEADS, WORLD = 20, 4, 2, 2
UNIT = 4  # one row or column of a weight, in SVG units: 8 px text on a 390 px phone


@functools.cache
def split() -> tuple[list[tuple[range, range]], list[dict[str, tuple[int, ...]]]]:
    """Each rank's heads (query, key/value) and the shapes of its weights, from real calls."""
    from mha.full import MHA
    from mha.parallel import head_ranges, heads_on_rank

    torch.manual_seed(0)
    model = MHA(HIDDEN, HEADS, kv_heads=KV_HEADS)
    ranges = [head_ranges(HEADS, KV_HEADS, WORLD, rank) for rank in range(WORLD)]
    shapes = []
    for rank in range(WORLD):
        part = heads_on_rank(model, rank, WORLD)
        shapes.append(
            {n: tuple(getattr(part, n).weight.shape) for n in ("W_q", "W_k", "W_v", "W_o")}
        )
    return ranges, shapes


def heads_split_picture(language: str) -> str:
    ranges, shapes = split()
    d = HIDDEN // HEADS
    title = tr(
        language,
        "MHA(20, 4, kv_heads=2) over 2 ranks: rank 0 keeps heads 0 and 1 (their rows of W_q, "
        "key/value head 0's rows of W_k and W_v, their columns of W_o), rank 1 the others",
        "MHA(20, 4, kv_heads=2) 分到 2 个进程：进程 0 留下头 0 和 1（它们在 W_q 里的行、键/值头 0 "
        "在 W_k 和 W_v 里的行、它们在 W_o 里的列），进程 1 留下其余的",
    )
    svg = Svg("heads-split", title)
    top, left = 8 + 2 * FONT, 64
    band, width = d * UNIT, HIDDEN * UNIT

    def bracket_left(x, y0, y1, text):
        svg.line(x, y0 + 2, x, y1 - 2, width=1.4)
        svg.text(x - 6, (y0 + y1) / 2 + 4, text, anchor="end", size=SMALL)

    def bracket_below(x0, x1, y, text):
        svg.line(x0 + 2, y, x1 - 2, y, width=1.4)
        svg.text((x0 + x1) / 2, y + 14, text, anchor="middle", size=SMALL)

    x = left
    # W_q, W_k, W_v: bands of rows, one per head; the rank that keeps them on the left
    for name, heads, kv in (
        ("W_q", HEADS, False),
        ("W_k", KV_HEADS, True),
        ("W_v", KV_HEADS, True),
    ):
        svg.text(x + width / 2, top - 8, name, anchor="middle", code=True)
        for head in range(heads):
            colour = 2 * head if kv else head  # a key/value head in its first query head's colour
            fcls, fill = fill_of(colour)
            scls, stroke = stroke_of(colour)
            svg.rect(x, top + head * band, width, band, f"{fcls} {scls}", fill, stroke)
            label = (
                tr(language, f"kv head {head}", f"键/值头 {head}")
                if kv
                else tr(language, f"head {head}", f"头 {head}")
            )
            svg.text(
                x + width / 2, top + head * band + band / 2 + 4, label, anchor="middle", size=SMALL
            )
        for rank, (query, kv_heads) in enumerate(ranges):
            kept = kv_heads if kv else query
            if x == left or kv:
                tick = x - 4
                if x == left:
                    bracket_left(
                        tick,
                        top + kept.start * band,
                        top + kept.stop * band,
                        tr(language, f"rank {rank}", f"进程 {rank}"),
                    )
                else:
                    svg.line(
                        tick,
                        top + kept.start * band + 2,
                        tick,
                        top + kept.stop * band - 2,
                        width=1.4,
                    )
                    svg.text(
                        tick - 3,
                        top + (kept.start + kept.stop) * band / 2 + 4,
                        str(rank),
                        anchor="end",
                        size=SMALL,
                    )
        x += width + 30
    # W_o: bands of columns; the rank that keeps them below
    svg.text(x + width / 2, top - 8, "W_o", anchor="middle", code=True)
    for head in range(HEADS):
        fcls, fill = fill_of(head)
        scls, stroke = stroke_of(head)
        svg.rect(x + head * band, top, band, width, f"{fcls} {scls}", fill, stroke)
        svg.text(
            x + head * band + band / 2, top + width / 2 + 4, str(head), anchor="middle", size=SMALL
        )
    for rank, (query, _) in enumerate(ranges):
        bracket_below(
            x + query.start * band,
            x + query.stop * band,
            top + width + 6,
            tr(language, f"rank {rank}", f"进程 {rank}"),
        )
    # each rank's shapes, from the module it keeps
    y = top + width + 44
    for rank, kept in enumerate(shapes):
        text = ", ".join(f"{n} {shape_text(s)}" for n, s in kept.items())
        svg.text(
            4,
            y + rank * (FONT + 8),
            tr(language, f"rank {rank}: ", f"进程 {rank}：") + text,
            code=True,
            size=SMALL,
        )
    return str(svg)


PICTURES = {"heads-split": heads_split_picture}
