"""The picture of the chapter sinks: the share of each query's weight that the sink takes.

The run is the page's: ``MHA(20, 4, sinks=True)`` on ``x`` of shape ``[2, 3, 20]`` (seed 0), its
``sink_logits`` drawn from ``torch.randn(4)`` right after ``x``, causal. The sink's share of a
query's weight is what its row of weights lacks to sum to 1, ``1 - weights.sum(-1)``,
``[2, 4, 3]``: one bar per sequence, head and query position.
"""

from __future__ import annotations

import functools

import torch

from mha_site.languages import tr
from mha_site.picture_style import FONT, SMALL, Svg, fill_of, stroke_of

LABEL = 52.0  # the heads' labels, left of the bars
COLUMN = 92.0  # one query position: its bar and its number
BAR = 54.0  # a share of 1
ROW = 22.0


@functools.cache
def run() -> tuple[torch.Tensor, torch.Tensor]:
    """The drawn sink logits, ``[4]``, and the sink's share of each query's weight,
    ``[batch_size, heads_num, q_len]``, of the page's run."""
    from mha.full import MHA
    from mha_site.picture_style import PAGE_RUN

    torch.manual_seed(0)
    x = torch.randn(*PAGE_RUN.x_shape)
    model = MHA(PAGE_RUN.hidden_size, PAGE_RUN.heads_num, sinks=True)
    with torch.no_grad():
        model.sink_logits.copy_(torch.randn(PAGE_RUN.heads_num))
        _, weights = model(x, is_causal=True, need_weights=True)
    return model.sink_logits.detach().clone(), 1 - weights.sum(dim=-1)


def sink_share(language: str) -> str:
    logits, share = run()
    batch, heads, q_len = share.shape
    title = tr(
        language,
        "The sink's share of each query's weight",
        "汇点项从每个查询的权重里分走的份额",
    )
    description = tr(
        language,
        "For each sequence, head and query position of MHA(20, 4, sinks=True) under the causal "
        "mask: 1 minus the sum of the query's weights, which the sink took. Head i's sink "
        "logit is written beside it.",
        "MHA(20, 4, sinks=True) 在因果掩码下，每个序列、每个头、每个查询位置的权重之和与 1 "
        "的差，也就是汇点项分走的份额。每个头旁边写着它的汇点 logit。",
    )
    svg = Svg("sink-share", title, description)
    svg.text(4, 16, title, bold=True)
    y = 28.0
    for b in range(batch):
        y += ROW
        svg.text(4, y, tr(language, f"sequence {b}", f"序列 {b}"), bold=True, size=SMALL)
        y += SMALL + 6  # the query positions' line below it, clear of the sequence's label
        for s in range(q_len):
            x0 = LABEL + 8 + s * COLUMN
            label = tr(language, f"query {s}", f"查询 {s}")
            svg.text(x0, y, label, size=SMALL)
        y += 6
        for i in range(heads):
            top = y + i * ROW
            svg.text(4, top + 12, tr(language, f"head {i}", f"头 {i}"), size=SMALL)
            if b == 0:
                svg.text(
                    LABEL + 8 + q_len * COLUMN,
                    top + 12,
                    f"logit {float(logits[i]):+.2f}",
                    size=SMALL,
                    code=True,
                )
            fcls, fill = fill_of(i)
            scls, stroke = stroke_of(i)
            for s in range(q_len):
                x0 = LABEL + 8 + s * COLUMN
                value = float(share[b, i, s])
                svg.rect(x0, top + 2, BAR, 14, cls="mha-sn", stroke="#555555")
                svg.rect(
                    x0, top + 2, BAR * value, 14, cls=f"{fcls} {scls}", fill=fill, stroke=stroke
                )
                svg.text(x0 + BAR + 4, top + 13, f"{value:.2f}", size=SMALL)
        y += heads * ROW + 6
    svg.text(
        4,
        y + FONT,
        tr(language, "a bar's full width: all of the weight", "整条的宽度：全部权重"),
        size=SMALL,
    )
    return str(svg)


PICTURES = {"sink-share": sink_share}
