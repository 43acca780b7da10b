"""The pictures of the chapter tiled: drawn at build time from real runs of ``mha.tiled``.

``tiled-running``: the page's own run (seed 0, ``q`` ``[1, 2, 5, 8]``, ``k`` and ``v``
``[1, 2, 12, 8]``, blocks of 4): query 0 of head 0, its 12 scores in their three blocks, and
after each block the running maximum ``m`` and the running sum ``ℓ``, read from
``TiledAttention(4)`` run over the keys up to that block (its log-sum-exp is ``m + log ℓ``).

``tiled-memory``: the peak memory of one call, written-out scores against tiled blocks, from the
benchmark's results file (``tiled_memory``).
"""

from __future__ import annotations

import functools
import math

import torch

from mha_site.languages import tr
from mha_site.picture_style import FONT, SMALL, Svg, fill_of, stroke_of, text_of

BLOCK = 4
CELL_W, CELL_H, GAP = 34, 24, 8


def page_run() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``q``, ``k``, ``v`` as the page makes them."""
    torch.manual_seed(0)
    q = torch.randn(1, 2, 5, 8)
    k = torch.randn(1, 2, 12, 8)
    v = torch.randn(1, 2, 12, 8)
    return q, k, v


@functools.cache
def running() -> tuple[list[float], list[tuple[float, float]]]:
    """Query 0 of head 0: its scores, and ``(m, ℓ)`` after each block, from real runs."""
    from mha.tiled import TiledAttention

    q, k, v = page_run()
    scores = (q[0, 0, 0] @ k[0, 0].T * 8**-0.5).tolist()
    states = []
    for end in range(BLOCK, k.size(2) + 1, BLOCK):
        _, lse = TiledAttention(BLOCK)(q, k[:, :, :end], v[:, :, :end])
        m = max(scores[:end])
        states.append((m, math.exp(float(lse[0, 0, 0]) - m)))
    return scores, states


def tiled_running_picture(language: str) -> str:
    scores, states = running()
    title = tr(
        language,
        "One query's 12 scores in blocks of 4: after each block, the largest score so far m and "
        "the sum ℓ of exp(score - m)",
        "一个查询的 12 个分数，每块 4 个：每处理完一块，目前最大的分数 m，"
        "以及 exp(分数 - m) 之和 ℓ",
    )
    svg = Svg("tiled-running", title)
    left, top = 56, 8 + FONT  # room for the row labels, and no more: 8 px text on a phone
    svg.text(4, top + CELL_H - 8, tr(language, "scores", "分数"), bold=True)
    for j, s in enumerate(scores):
        block = j // BLOCK
        x = left + j * CELL_W + block * GAP
        fcls, fill = fill_of(block)
        scls, stroke = stroke_of(block)
        svg.rect(x, top, CELL_W - 2, CELL_H, f"{fcls} {scls}", fill, stroke)
        svg.text(x + CELL_W / 2 - 1, top + CELL_H - 8, f"{s:.2f}", anchor="middle", size=SMALL)
        svg.text(x + CELL_W / 2 - 1, top - 3, str(j), anchor="middle", size=SMALL)
    rows = top + CELL_H + 22
    svg.text(4, rows, tr(language, "block", "块"), size=SMALL)
    svg.text(4, rows + 20, "m", code=True)
    svg.text(4, rows + 40, "ℓ", code=True)
    previous = None
    for block, (m, total) in enumerate(states):
        centre = left + block * (BLOCK * CELL_W + GAP) + BLOCK * CELL_W / 2
        tcls, _ = text_of(block)
        svg.text(centre, rows, str(block), anchor="middle", size=SMALL, cls=tcls)
        svg.text(centre, rows + 20, f"{m:.2f}", anchor="middle", code=True)
        svg.text(centre, rows + 40, f"{total:.2f}", anchor="middle", code=True)
        if previous is not None and m > previous:
            grew = tr(language, "m grew: ℓ times", "m 变大：ℓ 乘以")
            svg.text(
                centre,
                rows + 58,
                f"{grew} exp({previous:.2f} - {m:.2f})",
                anchor="middle",
                size=SMALL,
            )
        previous = m
    m, total = states[-1]
    svg.text(
        4,
        rows + 80,
        f"lse = m + log ℓ = {m + math.log(total):.4f} = logsumexp(scores)",
        code=True,
        size=SMALL,
    )
    return str(svg)


LABELS = {
    "written-out": ("written-out scores", "不分块"),
    "tiled-256": ("tiled, blocks of 256", "分块，每块 256"),
    "tiled-64": ("tiled, blocks of 64", "分块，每块 64"),
}


def tiled_memory_picture(language: str) -> str:
    from mha_site.pictures_perf import load, peak_memory_plot

    return peak_memory_plot(
        "tiled-memory",
        language,
        load()["tiled_memory"],
        "attention",
        LABELS,
        tr(language, "Peak memory of one call against L", "一次调用的峰值内存随 L 的变化"),
        tr(language, "peak growth (MB)", "峰值增长（MB）"),
    )


PICTURES = {"tiled-running": tiled_running_picture, "tiled-memory": tiled_memory_picture}
