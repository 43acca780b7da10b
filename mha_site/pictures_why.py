"""The picture of the page why: one Transformer block, each arrow labelled by the shape it carries.

The block is the page's ``Block``: pre-norm, as in GPT-2, ``x + attn(ln_1(x))`` then
``x + mlp(ln_2(x))``, its attention ``mha.annotated.MHA(20, 4)`` and its MLP 4 times as wide
(20 -> 80 -> 20). It runs on the pages' own input, ``x`` of shape ``[2, 3, 20]`` (``PAGE_RUN``), one
sub-step at a time, and every shape the picture writes is the shape that sub-step returned: nothing
is typed by hand.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from mha_site.languages import tr
from mha_site.picture_style import CELL, FONT, PAGE_RUN, Run, Svg, shape_text

RUN = PAGE_RUN
MID = 96  # x of the main path; the shapes of its arrows are written on its left
BOX_W, BOX_H = 130, 30
ARROW = 36  # length of an arrow between two boxes
BRACKET = MID + BOX_W / 2 + 8  # x of the bracket that groups the MLP's steps
SKIP = BRACKET + 50  # x of the residual paths
RADIUS = 10  # of the circles that add


class Block(nn.Module):
    """One pre-norm Transformer block (GPT-2's layout), as the page writes it."""

    def __init__(self, d: int, h: int):
        from mha.annotated import MHA

        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = MHA(hidden_size=d, heads_num=h)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))


@functools.cache
def run() -> tuple[dict[str, tuple[int, ...]], Run, int]:
    """The shape after each sub-step of the block on the pages' input, the run, and the MLP's
    width."""
    torch.manual_seed(0)
    block = Block(RUN.hidden_size, RUN.heads_num)
    x = torch.randn(*RUN.x_shape)
    with torch.no_grad():
        normed = block.ln_1(x)
        attended = block.attn(normed)
        x1 = x + attended
        normed_2 = block.ln_2(x1)
        wide = block.mlp[0](normed_2)
        activated = block.mlp[1](wide)
        narrow = block.mlp[2](activated)
        y = x1 + narrow
    tensors = {
        "x": x,
        "ln_1": normed,
        "attn": attended,
        "x1": x1,
        "ln_2": normed_2,
        "fc": wide,
        "gelu": activated,
        "proj": narrow,
        "out": y,
    }
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    return shapes, Run.of(block.attn, x), block.mlp[0].out_features


def box(svg: Svg, y: float, label: str, heads: int = 0) -> float:
    """A step of the block as a box on the main path at ``y``, with a row of one small square
    per head under its label if ``heads``; returns its bottom."""
    height = BOX_H + (CELL + 6 if heads else 0)
    svg.rect(MID - BOX_W / 2, y, BOX_W, height, "mha-n mha-sn", "#e2e2e2", "#555555", rx=4)
    svg.text(MID, y + BOX_H / 2 + FONT * 0.35, label, anchor="middle")
    step = CELL + 4
    for i in range(heads):  # in the heads' colours, as on the other pages
        svg.cell(MID - heads * step / 2 + i * step + 2, y + BOX_H - 4, i)
    return y + height


def arrow(svg: Svg, y: float, shape, length: float = ARROW) -> float:
    """An arrow down the main path from ``y``, labelled on its left by the shape it carries;
    returns its end."""
    svg.arrow_down(MID, y, y + length)
    svg.text(MID - 8, y + length / 2 + FONT * 0.35, shape_text(shape), anchor="end", code=True)
    return y + length


def adder(svg: Svg, y: float) -> float:
    """A circle that adds the residual path to the main one, its top at ``y``; returns its
    bottom."""
    cy = y + RADIUS
    svg.parts.append(
        f'<circle cx="{MID:g}" cy="{cy:g}" r="{RADIUS:g}" class="mha-n mha-sn"'
        ' fill="#e2e2e2" stroke="#555555"/>'
    )
    svg.text(MID, cy + FONT * 0.35, "+", anchor="middle", bold=True)
    return y + 2 * RADIUS


def residual(svg: Svg, y_from: float, y_to: float, shape, language: str) -> None:
    """The residual path: from the main path at ``y_from`` to the right, down, and back into the
    circle centred at ``y_to``, labelled with the shape it carries."""
    svg.path(
        f"M{MID:g},{y_from:g} H{SKIP:g} V{y_to:g} H{MID + RADIUS + 1:g}", cls="mha-sfg", width=1.2
    )
    end = MID + RADIUS + 1
    svg.path(f"M{end + 6:g},{y_to - 4:g} L{end:g},{y_to:g} L{end + 6:g},{y_to + 4:g}", width=1.2)
    svg.parts.append(
        f'<circle cx="{MID:g}" cy="{y_from:g}" r="2.5" class="mha-fg" fill="currentColor"/>'
    )
    middle = (y_from + y_to) / 2
    svg.text(SKIP + 6, middle - 2, shape_text(shape), code=True)
    svg.text(SKIP + 6, middle + FONT + 2, tr(language, "residual", "残差"))


def transformer_block_picture(language: str) -> str:
    shapes, drawn, width = run()
    d = drawn.hidden_size
    title = tr(
        language,
        f"One pre-norm Transformer block, as in GPT-2, on x {shape_text(shapes['x'])}: "
        f"x + MHA(LayerNorm(x)), then x + MLP(LayerNorm(x)). Every arrow carries "
        f"{shape_text(shapes['x'])} except inside the MLP, which widens each position to "
        f"{width} channels, {shape_text(shapes['fc'])}, and back.",
        "一个前置归一化（pre-norm）的 Transformer 块（GPT-2 的结构），"
        f"输入 x {shape_text(shapes['x'])}：先 x + MHA(LayerNorm(x))，再 x + MLP(LayerNorm(x))。"
        "除 MLP 内部外，每个箭头上都是 "
        f"{shape_text(shapes['x'])}；MLP 先把每个位置加宽到 {width} 个通道，即 "
        f"{shape_text(shapes['fc'])}，再变回来。",
    )
    svg = Svg("transformer-block", title, note=drawn.note(language))
    y = 4.0
    svg.text(MID, y + FONT, tr(language, "input x", "输入 x"), anchor="middle", bold=True)
    y += FONT + 6
    # Attention sub-layer: x + MHA(LN(x)).
    branch_1 = y + 10
    y = arrow(svg, y, shapes["x"], ARROW + 16)
    y = box(svg, y, "LayerNorm")
    y = arrow(svg, y, shapes["ln_1"])
    heads = drawn.heads_num
    y = box(svg, y, tr(language, f"MHA, {heads} heads", f"MHA，{heads} 个头"), heads)
    y = arrow(svg, y, shapes["attn"])
    top = y
    y = adder(svg, y)
    residual(svg, branch_1, top + RADIUS, shapes["x"], language)
    # MLP sub-layer: x + MLP(LN(x)).
    branch_2 = y + 10
    y = arrow(svg, y, shapes["x1"], ARROW + 16)
    y = box(svg, y, "LayerNorm")
    y = arrow(svg, y, shapes["ln_2"])
    mlp_top = y
    y = box(svg, y, f"Linear {d} → {width}")
    y = arrow(svg, y, shapes["fc"])
    y = box(svg, y, "GELU")
    y = arrow(svg, y, shapes["gelu"])
    y = box(svg, y, f"Linear {width} → {d}")
    edge = MID + BOX_W / 2 + 2
    svg.path(f"M{edge:g},{mlp_top:g} H{BRACKET:g} V{y:g} H{edge:g}", width=1.2)
    svg.text(BRACKET + 5, (mlp_top + y) / 2 + FONT * 0.35, "MLP", bold=True)
    y = arrow(svg, y, shapes["proj"])
    top = y
    y = adder(svg, y)
    residual(svg, branch_2, top + RADIUS, shapes["x1"], language)
    y = arrow(svg, y, shapes["out"])
    svg.text(MID, y + FONT + 4, tr(language, "output", "输出"), anchor="middle", bold=True)
    return str(svg)


PICTURES = {"transformer-block": transformer_block_picture}
