"""The pictures of the chapter rope: drawn at build time from real runs of ``mha.rope``.

``rope-turns``: where ``RotaryEmbedding(8).rotate`` puts the vector ``(1, 0)`` of each of the four
pairs of a head at positions 0 to 5: pair ``i`` turns by ``10000 ** (-2i / 8)`` radians per
position, so pair 0 goes round quickly and pair 3 barely moves. Under each pair, its angle per
position, the angle it has reached at position 5 and the positions a full turn takes, all read
from the drawn points: the slow pairs' lines overlap in six positions, and the numbers say why.
"""

from __future__ import annotations

import functools
import itertools
import math

import torch

from mha_site.languages import tr
from mha_site.picture_style import FONT, SMALL, Svg, stroke_of

ROTARY_DIMS = 8  # four pairs: dims (0, 4), (1, 5), (2, 6), (3, 7) in the half layout
POSITIONS = range(6)
RADIUS = 42
GAP = 16  # beside each circle, for its labels
PER_ROW = 2  # two pairs a row: the picture stays narrow enough for a phone


@functools.cache
def turns() -> dict[int, list[tuple[float, float]]]:
    """Pair -> the point ``(a, b)`` the unit vector ``(1, 0)`` of that pair becomes at each of
    ``POSITIONS``: a real run of ``RotaryEmbedding(8).rotate``."""
    from mha.rope import RotaryEmbedding

    rope = RotaryEmbedding(ROTARY_DIMS)
    half = ROTARY_DIMS // 2
    points: dict[int, list[tuple[float, float]]] = {}
    for pair in range(half):
        t = torch.zeros(1, 1, len(POSITIONS), ROTARY_DIMS, dtype=torch.float64)
        t[..., pair] = 1.0  # the pair's first dim; its second is pair + half
        out = rope.rotate(t, *rope(torch.tensor(list(POSITIONS))))[0, 0]
        points[pair] = [(float(row[pair]), float(row[pair + half])) for row in out]
    return points


def turned(points: list[tuple[float, float]]) -> float:
    """The angle the points have turned through from the first to the last, in radians: the sum
    of the angles between neighbours (each under half a turn), so that a pair that has gone past
    half a turn is not read back as a negative angle."""
    total = 0.0
    for (a0, b0), (a1, b1) in itertools.pairwise(points):
        total += math.atan2(a0 * b1 - b0 * a1, a0 * a1 + b0 * b1)
    return total


def number(value: float) -> str:
    """At most three significant digits, and no exponent: 6.28, 62.8, 628, 6283."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def rope_turns_picture(language: str) -> str:
    drawn = turns()
    last = len(POSITIONS) - 1
    slowest = drawn[max(drawn)]
    title = tr(
        language,
        "RoPE turns each pair of a head by its own angle per position: pair 0 by 1 radian, "
        f"pair 3 by 0.001, so that pair 3 needs {number(2 * math.pi / turned(slowest[:2]))} "
        "positions to go round once",
        "RoPE 让一个头的每对维度每个位置各转一个角度：对 0 转 1 弧度，对 3 只转 0.001 弧度，"
        f"要 {number(2 * math.pi / turned(slowest[:2]))} 个位置才转满一圈",
    )
    svg = Svg("rope-turns", title)
    panel_w, panel_h = 2 * RADIUS + 2 * GAP + 56, 4 * FONT + 2 * RADIUS + 3 * SMALL + 36
    for pair, points in drawn.items():
        row, column = divmod(pair, PER_ROW)
        cx = 4 + panel_w / 2 + column * panel_w
        top = 4 + FONT + row * panel_h
        centre_y = top + 2 * FONT + 8 + RADIUS
        head = pair % 4
        svg.text(cx, top, tr(language, f"pair {pair}", f"对 {pair}"), anchor="middle", bold=True)
        dims = f"dims {pair}, {pair + ROTARY_DIMS // 2}"
        dims_zh = f"第 {pair}、{pair + ROTARY_DIMS // 2} 维"
        svg.text(cx, top + FONT + 4, tr(language, dims, dims_zh), anchor="middle", size=SMALL)
        svg.path(
            f"M{cx - RADIUS:g},{centre_y:g} a{RADIUS},{RADIUS} 0 1,0 {2 * RADIUS},0 "
            f"a{RADIUS},{RADIUS} 0 1,0 {-2 * RADIUS},0",
            "mha-sfg",
            width=0.8,
        )
        cls, _ = stroke_of(head)
        for position, (a, b) in enumerate(points):
            # b up: the SVG's y grows downwards
            px, py = cx + a * RADIUS, centre_y - b * RADIUS
            svg.line(cx, centre_y, px, py, cls, width=1.4 if position == 0 else 1.0)
            lx, ly = cx + a * (RADIUS + 10), centre_y - b * (RADIUS + 10)
            if pair == 0:  # far apart: each position its label
                svg.text(
                    lx,
                    ly + SMALL * 0.35,
                    str(position),
                    anchor="start" if a >= -0.2 else "end",
                    size=SMALL,
                )
        if pair > 0:  # the positions lie close together: one label for all
            a, b = points[-1]
            lx, ly = cx + a * (RADIUS + 6), centre_y - b * (RADIUS + 6) - 4
            svg.text(lx, ly, f"0–{last}", size=SMALL)
        per = turned(points[:2])
        lines = (
            tr(language, f"{number(per)} rad / position", f"每个位置 {number(per)} 弧度"),
            tr(
                language,
                f"at position {last}: {number(turned(points))} rad",
                f"位置 {last}：{number(turned(points))} 弧度",
            ),
            tr(
                language,
                f"a full turn: {number(2 * math.pi / per)} positions",
                f"转满一圈：{number(2 * math.pi / per)} 个位置",
            ),
        )
        for i, line in enumerate(lines):
            y = centre_y + RADIUS + 18 + SMALL + i * (SMALL + 5)
            svg.text(cx, y, line, anchor="middle", size=SMALL)
    return str(svg)


PICTURES = {"rope-turns": rope_turns_picture}
