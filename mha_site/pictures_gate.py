"""The pictures of the chapter gate: how much of each head's output its gate lets through.

``gate-sweep``: the same run, the bias of every gate row set to each of ``SWEEP`` in turn: the
mean gate factor ``sigmoid(gate)``, and how much of the heads' contribution reaches the output,
``|out - W_o.bias| / |open - W_o.bias|`` with ``open`` the layer at a bias of 40 (every factor 1).

``gate-values``: the page's run, ``MHA(20, 4, gate=True)`` on ``x`` of shape ``[2, 3, 20]``,
causal; for sequence 0, each head and position, the ``head_size`` = 5 values of
``sigmoid(gate)`` that multiply the head's output there, one bar each (a full bar keeps the
channel whole, an empty one shuts it).
"""

from __future__ import annotations

import functools

import torch

from mha_site.languages import tr
from mha_site.picture_style import FONT, PAGE_RUN, SMALL, Plot, Svg, fill_of, stroke_of

LABEL = 52.0  # the heads' labels, left of the cells
BAR_W, GAP = 10.0, 3.0  # one channel's bar, and the space between two
HEIGHT = 30.0  # a bar of 1
COLUMN = 5 * (BAR_W + GAP) + 24  # one position: its 5 bars and a margin
ROW = HEIGHT + 14


@functools.cache
def run() -> torch.Tensor:
    """``sigmoid(gate)`` of the page's run, ``[batch_size, seq_len, heads_num, head_size]``:
    ``W_q``'s gate rows of each head, on ``x``."""
    from mha.full import MHA

    torch.manual_seed(0)
    x = torch.randn(*PAGE_RUN.x_shape)
    model = MHA(PAGE_RUN.hidden_size, PAGE_RUN.heads_num, gate=True)
    heads, size = model.heads_num, model.head_size
    with torch.no_grad():
        qg = model.W_q(x).view(x.size(0), x.size(1), heads, 2 * size)
    return torch.sigmoid(qg[..., size:])


def gate_values_picture(language: str) -> str:
    gates = run()[0]  # sequence 0: [seq_len, heads_num, head_size]
    positions, heads, size = gates.shape
    title = tr(
        language,
        "What each head's gate lets through, sequence 0",
        "每个头的门控放过多少：序列 0",
    )
    description = tr(
        language,
        "For MHA(20, 4, gate=True) on x of shape [2, 3, 20], sequence 0: for each head and "
        "position, the 5 values of sigmoid(gate) that multiply the head's 5 output channels, "
        "one bar each; a full bar keeps the channel, an empty one shuts it.",
        "MHA(20, 4, gate=True) 在形状为 [2, 3, 20] 的 x 上，序列 0：每个头、每个位置的 5 个 "
        "sigmoid(gate) 值，分别乘在这个头输出的 5 个通道上，每个值一根柱子；满格就是通道原样保留，"
        "空格就是关掉。",
    )
    svg = Svg("gate-values", title, description)
    svg.text(4, 16, title, bold=True)
    top = 28.0 + FONT
    for t in range(positions):
        x0 = LABEL + 8 + t * COLUMN
        svg.text(x0, top, tr(language, f"position {t}", f"位置 {t}"), size=SMALL)
    top += 8
    for i in range(heads):
        y = top + i * ROW
        svg.text(4, y + HEIGHT / 2 + 4, tr(language, f"head {i}", f"头 {i}"), size=SMALL)
        fcls, fill = fill_of(i)
        scls, stroke = stroke_of(i)
        for t in range(positions):
            x0 = LABEL + 8 + t * COLUMN
            for c in range(size):
                value = float(gates[t, i, c])
                left = x0 + c * (BAR_W + GAP)
                svg.rect(left, y, BAR_W, HEIGHT, cls="mha-sn", stroke="#555555")
                h = HEIGHT * value
                svg.rect(
                    left, y + HEIGHT - h, BAR_W, h, cls=f"{fcls} {scls}", fill=fill, stroke=stroke
                )
    bottom = top + heads * ROW + FONT
    low, high = float(gates.min()), float(gates.max())
    svg.text(
        4,
        bottom,
        tr(
            language,
            f"a full bar: 1, the channel kept whole; here from {low:.2f} to {high:.2f}",
            f"满格为 1，通道原样保留；这里从 {low:.2f} 到 {high:.2f}",
        ),
        size=SMALL,
    )
    return str(svg)


SWEEP = [n / 2 for n in range(-16, 17)]  # the gate rows' bias, -8 .. +8


@functools.cache
def sweep() -> tuple[list[float], list[float]]:
    """(the mean gate factor, the share of the open layer's contribution passed) for each bias of
    ``SWEEP``, on the page's run."""
    from mha.full import MHA

    torch.manual_seed(0)
    x = torch.randn(*PAGE_RUN.x_shape)
    model = MHA(PAGE_RUN.hidden_size, PAGE_RUN.heads_num, gate=True)
    heads, size = model.heads_num, model.head_size
    gate_rows = torch.arange(2 * heads * size).view(heads, 2 * size)[:, size:].flatten()

    def at(bias: float) -> tuple[float, torch.Tensor]:
        model.W_q.bias[gate_rows] = bias
        qg = model.W_q(x).view(x.size(0), x.size(1), heads, 2 * size)
        factor = float(torch.sigmoid(qg[..., size:]).mean())
        return factor, model(x, is_causal=True) - model.W_o.bias

    with torch.no_grad():
        _, opened = at(40.0)
        runs = [at(bias) for bias in SWEEP]
    factors = [factor for factor, _ in runs]
    passed = [float(out.norm() / opened.norm()) for _, out in runs]
    return factors, passed


def gate_sweep_picture(language: str) -> str:
    _, passed = sweep()
    title = tr(
        language, "The gate as a dial: its bias from shut to open", "门控像一个旋钮：偏置从关到开"
    )
    description = tr(
        language,
        "MHA(20, 4, gate=True) on x of shape [2, 3, 20], causal, run once per bias of its gate "
        "rows from -8 to +8: the size of the heads' contribution to the output against the "
        "layer's with every gate open (0 shut, 1 open).",
        "MHA(20, 4, gate=True) 在形状为 [2, 3, 20] 的 x 上做因果计算，门控行的偏置取 -8–+8 的每个值"
        "各运行一次：各头对输出的贡献相对于门控全开时的大小（0 为关，1 为开）。",
    )
    svg = Svg("gate-sweep", title, description)
    svg.text(4, 16, title, bold=True)
    plot = Plot(48.0, 40.0, 260.0, 150.0, (-8.0, 8.0), (0.0, 1.0))
    plot.frame(
        svg,
        range(-8, 9, 2),
        (0, 0.5, 1),
        tr(language, "the gate rows' bias", "门控行的偏置"),
        tr(language, "heads' output passed", "各头输出通过的份额"),
    )
    plot.curve(svg, SWEEP, passed)
    return str(svg)


PICTURES = {"gate-values": gate_values_picture, "gate-sweep": gate_sweep_picture}
