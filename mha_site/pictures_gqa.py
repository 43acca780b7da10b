"""The picture of the chapter gqa: drawn at build time from the page's own run of ``mha.full``.

``gqa-groups``: the page's ``MHA(20, 4, kv_heads=2)`` on ``x`` ``[6, 3, 20]`` (seed 0, made in
the page's order). Top, the query heads of ``q``; under each, the key it reads, a head of
``k_rep`` (``k`` repeated as the module repeats it, ``_repeat_kv``); at the bottom, the key/value
heads of ``k``, each joined to the query heads of its group. Each key box prints the first two
numbers of that head's key of position 0 in sequence 0, so the heads of a group show the same
numbers: they read one tensor. Which key/value head each query head reads comes from the module's
own repeat of tagged heads, as on the page.
"""

from __future__ import annotations

import functools

import torch

from mha_site.languages import tr
from mha_site.picture_style import FONT, SMALL, Svg, fill_of, shape_text, stroke_of, text_of

HIDDEN, HEADS, KV_HEADS, X_SHAPE = 20, 4, 2, (6, 3, 20)
BOX_W, BOX_H, GAP = 80, 34, 8
SHOWN = 2  # channels of each key printed
NUMBER_FONT = 10  # two signed numbers fit a box


@functools.cache
def run() -> dict:
    """The page's run: the shapes of ``q``, ``k`` and ``k_rep``, the key/value head each query
    head reads, and the first ``SHOWN`` numbers of the key of position 0 in sequence 0, per head of
    ``k`` and of ``k_rep``."""
    from mha.full import MHA

    with torch.random.fork_rng():  # the build's (or a test's) random state is left as it was
        torch.manual_seed(0)
        model = MHA(HIDDEN, HEADS, kv_heads=KV_HEADS).eval()
        x = torch.randn(*X_SHAPE)
    batch, seq_len, _ = x.shape
    d = model.head_size
    with torch.no_grad():
        q = model.W_q(x).view(batch, seq_len, HEADS, d).transpose(1, 2)
        k = model.W_k(x).view(batch, seq_len, KV_HEADS, d).transpose(1, 2)
        k_rep = model._repeat_kv(k)  # the module's own repeat: [batch, heads_num, seq, d]
    tags = torch.arange(KV_HEADS).view(1, KV_HEADS, 1, 1)
    return {
        "q": tuple(q.shape),
        "k": tuple(k.shape),
        "k_rep": tuple(k_rep.shape),
        "reads": model._repeat_kv(tags).flatten().tolist(),  # kv head per query head
        "k_numbers": k[0, :, 0, :SHOWN].tolist(),
        "k_rep_numbers": k_rep[0, :, 0, :SHOWN].tolist(),
    }


def numbers(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def gqa_groups_picture(language: str) -> str:
    shown = run()
    reads = shown["reads"]
    heads, kv_heads = len(reads), len(shown["k_numbers"])
    groups = [[i for i, j in enumerate(reads) if j == kv] for kv in range(kv_heads)]
    said = "; ".join(
        tr(
            language,
            f"query heads {', '.join(map(str, g))} read key/value head {kv}",
            f"查询头 {'、'.join(map(str, g))} 读键/值头 {kv}",
        )
        for kv, g in enumerate(groups)
    )
    title = tr(
        language,
        f"Grouped-query attention, MHA({HIDDEN}, {heads}, kv_heads={kv_heads}): {said}; the query "
        "heads of a group read the same key numbers",
        f"分组查询注意力 MHA({HIDDEN}, {heads}, kv_heads={kv_heads})：{said}；同一组的查询头读到的"
        "键逐个数相同",
    )
    svg = Svg("gqa-groups", title)
    svg.text(
        4,
        4 + FONT,
        tr(
            language,
            f"{heads} query heads share {kv_heads} key/value heads",
            f"{heads} 个查询头共用 {kv_heads} 个键/值头",
        ),
        bold=True,
    )

    def box_x(i: int) -> float:
        return 4 + i * (BOX_W + GAP)

    def box(x, y, w, colour, label, value=None, label_colour=None):
        fcls, fill = fill_of(colour)
        scls, stroke = stroke_of(colour)
        svg.rect(x, y, w, BOX_H, f"{fcls} {scls}", fill, stroke, rx=3)
        tcls, _ = text_of(-1 if label_colour is None else label_colour)
        if value is None:
            svg.text(x + w / 2, y + BOX_H / 2 + 4, label, anchor="middle", size=SMALL, cls=tcls)
            return
        svg.text(x + w / 2, y + 14, label, anchor="middle", size=SMALL)
        svg.text(x + w / 2, y + 28, value, anchor="middle", size=NUMBER_FONT, code=True)

    def row_label(y, name, shape, words):
        wide = svg.text(4, y, f"{name} {shape_text(shape)}", code=True, size=SMALL, bold=True)
        svg.text(4 + wide + 6, y, words, size=SMALL)

    # the query heads
    y = 4 + FONT + 22
    row_label(y, "q", shown["q"], tr(language, "query heads", "查询头"))
    y += 8
    for i in range(heads):
        box(box_x(i), y, BOX_W, i, tr(language, f"head {i}", f"头 {i}"), label_colour=i)
    # under each, the key it reads: k_rep's head i, a copy of its key/value head
    y += BOX_H + 8 + SMALL
    row_label(y, "k_rep", shown["k_rep"], tr(language, "the key each reads", "各自读到的键"))
    y += 8
    for i in range(heads):
        box(
            box_x(i),
            y,
            BOX_W,
            2 * reads[i],  # a key/value head in its first query head's colour, as on heads-split
            tr(language, f"kv head {reads[i]}", f"键/值头 {reads[i]}"),
            numbers(shown["k_rep_numbers"][i]),
        )
    # the key/value heads of k, each under its group
    copies_bottom = y + BOX_H
    y = copies_bottom + 30
    for kv, group in enumerate(groups):
        left, right = box_x(group[0]), box_x(group[-1]) + BOX_W
        for i in group:
            svg.line(box_x(i) + BOX_W / 2, copies_bottom, (left + right) / 2, y, width=1.2)
        box(
            left,
            y,
            right - left,
            2 * kv,
            tr(language, f"kv head {kv}", f"键/值头 {kv}"),
            numbers(shown["k_numbers"][kv]),
        )
    y += BOX_H + 8 + SMALL
    words = tr(language, "key/value heads (v the same)", "键/值头（v 也一样）")
    row_label(y, "k", shown["k"], words)
    y += SMALL + 10
    svg.text(
        4,
        y,
        tr(
            language,
            f"key numbers: sequence 0, position 0, channels 0–{SHOWN - 1}",
            f"键的数字：序列 0、位置 0，通道 0–{SHOWN - 1}",
        ),
        size=SMALL,
    )
    return str(svg)


PICTURES = {"gqa-groups": gqa_groups_picture}
