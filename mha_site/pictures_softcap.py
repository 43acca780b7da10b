"""The picture of the chapter softcap: the run's scores before and after Gemma 2's soft-cap.

The run is the page's: ``MHA(20, 4, softcap=CAP)`` on ``x`` of shape ``[2, 3, 20]`` (seed 0). Its
scaled scores ``z``, ``[2, 4, 3, 3]``, are computed as the page computes them, and each is drawn
at ``(z, tanh(z / CAP) * CAP)``, in its head's colour, on the curve ``tanh(z / CAP) * CAP``
between the cap lines at ``-CAP`` and ``+CAP``; the line ``y = z`` is what no cap would give.
"""

from __future__ import annotations

import functools
import math

import torch

from mha_site.languages import tr
from mha_site.picture_style import HEADS_LIGHT, PAGE_RUN, SMALL, Svg

CAP = 0.5  # the page's softcap: of the size of these random scores, so the curve bends
WIDTH, HEIGHT = 240.0, 200.0  # the plot area
LEFT, TOP = 52.0, 44.0


@functools.cache
def run() -> tuple[torch.Tensor, torch.Tensor]:
    """The page's scaled scores ``z`` and their capped values, ``[2, 4, 3, 3]`` each."""
    from mha.full import MHA

    torch.manual_seed(0)
    x = torch.randn(*PAGE_RUN.x_shape)
    model = MHA(PAGE_RUN.hidden_size, PAGE_RUN.heads_num, softcap=CAP)
    b, length, heads, size = x.size(0), x.size(1), model.heads_num, model.head_size
    with torch.no_grad():
        q = model.W_q(x).view(b, length, heads, size).transpose(1, 2)
        k = model.W_k(x).view(b, length, heads, size).transpose(1, 2)
        z = q @ k.transpose(-2, -1) / math.sqrt(size)  # [batch_size, heads_num, q_len, k_len]
    return z, torch.tanh(z / CAP) * CAP


def softcap_curve(language: str) -> str:
    z, capped = run()
    reach = math.ceil(float(z.abs().max()) / CAP) * CAP  # the x axis: -reach .. reach
    title = tr(
        language,
        f"The run's {z.numel()} scores, each capped at ±{CAP:g}",
        f"这次运行的 {z.numel()} 个分数，各自加上 ±{CAP:g} 的软上限",
    )
    description = tr(
        language,
        f"Each scaled score z of MHA(20, 4, softcap={CAP:g}) drawn at z across and "
        f"tanh(z / {CAP:g}) · {CAP:g} up, one colour per head, on that curve; the dashed "
        f"lines are the cap at ±{CAP:g}, the dotted one y = z, no cap.",
        f"MHA(20, 4, softcap={CAP:g}) 缩放后的每个分数 z 画在横坐标 z、纵坐标 "
        f"tanh(z / {CAP:g}) · {CAP:g} 处，每个头一种颜色，都落在这条曲线上；"
        f"虚线是 ±{CAP:g} 的上限，点线是 y = z，即不加上限。",
    )
    svg = Svg("softcap-curve", title, description)
    svg.text(4, 16, title, bold=True)

    def px(v: float) -> float:
        return LEFT + WIDTH * (v + reach) / (2 * reach)

    def py(v: float) -> float:
        return TOP + HEIGHT * (1 - (v + reach) / (2 * reach))

    # axes through 0, ticks at multiples of the cap
    svg.line(px(-reach), py(0), px(reach), py(0), width=0.6)
    svg.line(px(0), py(-reach), px(0), py(reach), width=0.6)
    steps = round(reach / CAP)
    for n in range(-steps, steps + 1):
        v = n * CAP
        svg.line(px(v), TOP + HEIGHT, px(v), TOP + HEIGHT + 4)
        svg.text(px(v), TOP + HEIGHT + 16, f"{v:g}", size=SMALL, anchor="middle")
        svg.line(LEFT - 4, py(v), LEFT, py(v))
        svg.text(LEFT - 6, py(v) + 4, f"{v:g}", size=SMALL, anchor="end")
    svg.rect(LEFT, TOP, WIDTH, HEIGHT, cls="mha-sn", stroke="#555555")
    svg.text(
        LEFT + WIDTH / 2,
        TOP + HEIGHT + 34,
        tr(language, "score z, before the cap", "加上限之前的分数 z"),
        anchor="middle",
    )
    svg.turned_text(12, TOP + HEIGHT / 2, tr(language, "after the cap", "加上限之后"))
    # no cap (y = z), then the cap lines, then the curve
    svg.parts.append(
        f'<path d="M{px(-reach):.1f},{py(-reach):.1f} L{px(reach):.1f},{py(reach):.1f}"'
        ' class="mha-sfg" fill="none" stroke="currentColor" stroke-width="1"'
        ' stroke-dasharray="1 3"/>'
    )
    for sign in (-1, 1):
        svg.parts.append(
            f'<path d="M{px(-reach):.1f},{py(sign * CAP):.1f} L{px(reach):.1f},'
            f'{py(sign * CAP):.1f}" class="mha-accent" fill="none" stroke="#c2185b"'
            ' stroke-width="1.2" stroke-dasharray="5 3"/>'
        )
    svg.text(
        px(-reach) + 4,
        py(CAP) - 5,
        tr(language, f"cap +{CAP:g}", f"上限 +{CAP:g}"),
        cls="mha-accent",
        size=SMALL,
    )
    svg.text(
        px(reach) - 4,
        py(-CAP) + 14,
        tr(language, f"cap −{CAP:g}", f"上限 −{CAP:g}"),
        cls="mha-accent",
        size=SMALL,
        anchor="end",
    )
    svg.text(
        px(reach * 0.8) - 6,
        py(reach * 0.8),
        tr(language, "no cap", "不加上限"),
        size=SMALL,
        anchor="end",
    )
    samples = [-reach + 2 * reach * n / 80 for n in range(81)]
    d = " ".join(
        f"{'M' if n == 0 else 'L'}{px(v):.1f},{py(math.tanh(v / CAP) * CAP):.1f}"
        for n, v in enumerate(samples)
    )
    svg.parts.append(
        f'<path d="{d}" class="mha-sfg" fill="none" stroke="currentColor" stroke-width="1.5"/>'
    )
    # the run's scores, one colour per head
    for head in range(z.size(1)):
        for raw, out in zip(z[:, head].flatten(), capped[:, head].flatten(), strict=True):
            svg.parts.append(
                f'<circle cx="{px(float(raw)):.1f}" cy="{py(float(out)):.1f}" r="3"'
                f' class="mha-t{head}" fill="{HEADS_LIGHT[head]}"/>'
            )
    # the legend: the heads' colours
    legend_y = TOP + HEIGHT + 56
    for head in range(z.size(1)):
        lx = LEFT - 30 + head * 66
        svg.parts.append(
            f'<circle cx="{lx:g}" cy="{legend_y - 4:g}" r="3" class="mha-t{head}"'
            f' fill="{HEADS_LIGHT[head]}"/>'
        )
        svg.text(lx + 8, legend_y, tr(language, f"head {head}", f"头 {head}"), size=SMALL)
    return str(svg)


PICTURES = {"softcap-curve": softcap_curve}
