"""The picture of the chapter nope: Llama 4's temperature factor against the query's position.

``temperature-factor``: ``MHA(20, 4, temperature=(ATTN_SCALE, FLOOR_SCALE))``, Llama 4's published
values, on one sequence ``x`` of ``[1, N, 20]`` whose rows claim the positions ``POSITIONS`` (a few
before the first step, then the last position before each step and the first at it, up to
``2 ** 20``). The factor drawn at each position is the one the layer applied: the queries it
handed the kernel divided by those of the same layer without temperature (a least-squares ratio
over the heads' channels), on a log axis of ``position + 1``.
"""

from __future__ import annotations

import functools
import math
from unittest import mock

import torch

from mha_site.languages import tr
from mha_site.picture_style import ACCENT_LIGHT, FONT, SMALL, Run, Svg

ATTN_SCALE, FLOOR_SCALE = 0.1, 8192  # Llama 4's (transformers' Llama4TextConfig defaults)
STEPS = 128  # up to 128 * 8192 = 2 ** 20 positions
# position + 1: a few before the first step, then each step's last position and its first
POSITIONS = [0, 9, 99, 999] + [
    p for k in range(1, STEPS + 1) for p in (k * FLOOR_SCALE - 2, k * FLOOR_SCALE - 1)
]
WIDTH, HEIGHT = 280.0, 170.0  # the plot area
LEFT, TOP = 48.0, 66.0
LOW, HIGH = 1.0, 1.5  # the y axis


@functools.cache
def run() -> tuple[Run, torch.Tensor, torch.Tensor]:
    """The run, the positions ``[N]`` and the factor the layer applied at each, ``[N]``."""
    from mha.full import MHA

    torch.manual_seed(0)
    positions = torch.tensor(POSITIONS)
    x = torch.randn(1, len(POSITIONS), 20)
    tuned = MHA(20, 4, temperature=(ATTN_SCALE, FLOOR_SCALE)).eval()
    plain = MHA(20, 4).eval()
    plain.load_state_dict(tuned.state_dict())
    queries = []
    for model in (tuned, plain):
        with (
            torch.no_grad(),
            mock.patch.object(model, "_attend_fast", wraps=model._attend_fast) as kernel,
        ):
            model(x, is_causal=True, positions=positions if model is tuned else None)
        queries.append(kernel.call_args.args[0].double())  # [1, heads_num, N, head_size]
    q_tuned, q_plain = queries
    factor = (q_tuned * q_plain).sum((0, 1, 3)) / (q_plain * q_plain).sum((0, 1, 3))  # [N]
    return Run.of(tuned, x), positions, factor


def temperature_factor(language: str) -> str:
    drawn, positions, factor = run()
    title = tr(
        language,
        "Llama 4's temperature: each query's factor by its position",
        "Llama 4 的温度调节：每个查询按位置乘的因子",
    )
    description = tr(
        language,
        f"The factor MHA(20, 4, temperature=({ATTN_SCALE:g}, {FLOOR_SCALE})) applied to the "
        f"query at each of {len(POSITIONS)} positions up to {POSITIONS[-1]:,}, against "
        f"position + 1 on a log axis: 1 up to position {FLOOR_SCALE - 2}, then one step every "
        f"{FLOOR_SCALE} positions, {float(factor[-1]):.3f} at the last.",
        f"MHA(20, 4, temperature=({ATTN_SCALE:g}, {FLOOR_SCALE})) 在 {len(POSITIONS)} 个位置上"
        f"（最远到 {POSITIONS[-1]:,}）乘在查询上的因子，横轴是位置 + 1，取对数刻度：位置 "
        f"{FLOOR_SCALE - 2} 之前都是 1，之后每 {FLOOR_SCALE} 个位置升一级，最后一个位置是 "
        f"{float(factor[-1]):.3f}。",
    )
    svg = Svg("temperature-factor", title, description, note=drawn.note(language))
    svg.text(4, 16, title, bold=True)
    svg.text(
        4,
        34,
        f"attn_scale = {ATTN_SCALE:g}, floor_scale = {FLOOR_SCALE}",
        size=SMALL,
        code=True,
    )
    decades = math.log10(2**20)

    def px(position: float) -> float:  # the x axis: position + 1, log
        return LEFT + WIDTH * math.log10(position + 1) / decades

    def py(value: float) -> float:
        return TOP + HEIGHT * (HIGH - value) / (HIGH - LOW)

    svg.rect(LEFT, TOP, WIDTH, HEIGHT, cls="mha-sn", stroke="#555555")
    for n, label in enumerate(["1", "10", "100", "1k", "10k", "100k", "1M"]):
        x = px(10**n - 1)
        svg.line(x, TOP + HEIGHT, x, TOP + HEIGHT + 4)
        svg.text(x, TOP + HEIGHT + 16, label, size=SMALL, anchor="middle")
    for n in range(6):
        value = LOW + n * (HIGH - LOW) / 5
        svg.line(LEFT - 4, py(value), LEFT, py(value))
        svg.text(LEFT - 6, py(value) + 4, f"{value:.1f}", size=SMALL, anchor="end")
    svg.text(
        LEFT + WIDTH / 2,
        TOP + HEIGHT + 34,
        tr(language, "position + 1 (log scale)", "位置 + 1（对数刻度）"),
        anchor="middle",
    )
    svg.turned_text(12, TOP + HEIGHT / 2, tr(language, "factor", "因子"))
    # the first step's position, dashed
    first = px(FLOOR_SCALE - 1)
    svg.parts.append(
        f'<path d="M{first:.1f},{TOP:.1f} L{first:.1f},{TOP + HEIGHT:.1f}" class="mha-accent"'
        f' fill="none" stroke="{ACCENT_LIGHT}" stroke-width="1" stroke-dasharray="4 3"/>'
    )
    svg.text(
        first - 4,
        TOP + 16,
        tr(language, f"position {FLOOR_SCALE - 1}:", f"位置 {FLOOR_SCALE - 1}："),
        cls="mha-accent",
        size=SMALL,
        anchor="end",
    )
    svg.text(
        first - 4,
        TOP + 30,
        tr(language, "the first step", "第一级"),
        cls="mha-accent",
        size=SMALL,
        anchor="end",
    )
    # the run's factors, joined in order: flat between two steps, up at each
    d = " ".join(
        f"{'M' if n == 0 else 'L'}{px(int(p)):.1f},{py(float(f)):.1f}"
        for n, (p, f) in enumerate(zip(positions, factor, strict=True))
    )
    svg.parts.append(
        f'<path d="{d}" class="mha-sfg" fill="none" stroke="currentColor" stroke-width="1.8"/>'
    )
    # the factor at the first step, and at the last position
    step = float(factor[POSITIONS.index(FLOOR_SCALE - 1)])
    svg.text(first - 4, py(step) + 4, f"{step:.3f}", size=SMALL, anchor="end")
    last = float(factor[-1])
    svg.text(px(int(positions[-1])) - 8, py(last) + 8, f"{last:.3f}", size=SMALL, anchor="end")
    svg.text(
        LEFT + 6,
        py(1.0) - 8,
        tr(language, "1: the query as it is", "1：查询不变"),
        size=SMALL,
    )
    svg.grow(LEFT + WIDTH + 8, TOP + HEIGHT + 34 + FONT)
    return str(svg)


PICTURES = {"temperature-factor": temperature_factor}
