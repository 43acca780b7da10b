"""The pictures of the chapter sinks: the share of each query's weight that the sink takes.

``sink-sweep``: the same run, one query (sequence 0, head 0, query 2, which sees 3 keys), its
head's sink logit set to each of ``SWEEP`` and the module run again: the share against the logit,
with the point where it is one half, the log-sum-exp of the query's scores.

``sink-share``:
The run is the page's: ``MHA(20, 4, sinks=True)`` on ``x`` of shape ``[2, 3, 20]`` (seed 0), its
``sink_logits`` drawn from ``torch.randn(4)`` right after ``x``, causal. The sink's share of a
query's weight is what its row of weights lacks to sum to 1, ``1 - weights.sum(-1)``,
``[2, 4, 3]``: one bar per sequence, head and query position.
"""

from __future__ import annotations

import functools
import math

import torch

from mha_site.languages import tr
from mha_site.picture_style import FONT, SMALL, Plot, Svg, fill_of, stroke_of

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


SWEEP = [n / 4 for n in range(-20, 21)]  # sink logits -5 .. +5


@functools.cache
def sweep() -> list[float]:
    """The sink's share of query 2's weight (sequence 0, head 0) for each logit of ``SWEEP``."""
    from mha.full import MHA
    from mha_site.picture_style import PAGE_RUN

    torch.manual_seed(0)
    x = torch.randn(*PAGE_RUN.x_shape)
    model = MHA(PAGE_RUN.hidden_size, PAGE_RUN.heads_num, sinks=True)
    shares = []
    with torch.no_grad():
        for logit in SWEEP:
            model.sink_logits.fill_(logit)
            _, weights = model(x, is_causal=True, need_weights=True)
            shares.append(1 - float(weights[0, 0, 2].sum()))
    return shares


def sink_sweep(language: str) -> str:
    shares = sweep()
    middle = SWEEP.index(0.0)  # at logit 0: share = 1 / (1 + e^lse), so lse follows
    lse = math.log((1 - shares[middle]) / shares[middle])
    title = tr(
        language,
        "One query's sink share as its head's sink logit grows",
        "汇点 logit 变大时，一个查询被汇点分走的份额",
    )
    description = tr(
        language,
        f"Sequence 0, head 0, query 2 (3 keys) of MHA(20, 4, sinks=True), causal, run once per "
        f"sink logit from -5 to +5: the share 1 minus the sum of its weights. It is one half "
        f"where the logit equals the log-sum-exp of the query's scores, {lse:.2f}.",
        f"MHA(20, 4, sinks=True) 在因果掩码下序列 0、头 0、查询 2（3 个键），汇点 logit 取 "
        f"-5–+5 的每个值各运行一次：份额是 1 减去它的权重之和。logit 等于这个查询分数的 "
        f"log-sum-exp（{lse:.2f}）时，份额正好一半。",
    )
    svg = Svg("sink-sweep", title, description)
    svg.text(4, 16, title, bold=True)
    plot = Plot(48.0, 40.0, 260.0, 150.0, (-5.0, 5.0), (0.0, 1.0))
    plot.frame(
        svg,
        range(-5, 6),
        (0, 0.5, 1),
        tr(language, "the head's sink logit", "这个头的汇点 logit"),
        tr(language, "sink's share", "汇点的份额"),
    )
    svg.line(plot.px(lse), plot.top, plot.px(lse), plot.py(0), cls="mha-accent", dashed=True)
    svg.line(plot.px(-5), plot.py(0.5), plot.px(5), plot.py(0.5), dashed=True)
    svg.text(
        plot.px(lse) - 4,
        plot.top + 14,
        tr(language, f"log-sum-exp of the scores: {lse:.2f}", f"分数的 log-sum-exp：{lse:.2f}"),
        cls="mha-accent",
        size=SMALL,
        anchor="end",
    )
    plot.curve(svg, SWEEP, shares)
    return str(svg)


PICTURES = {"sink-share": sink_share, "sink-sweep": sink_sweep}
