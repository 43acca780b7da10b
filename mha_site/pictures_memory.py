"""Memory-layout pictures: what ``view``, ``transpose`` and ``contiguous`` do to memory.

A small run keeps the numbers readable: ``mha.annotated.MHA(4, 2)`` (2 heads of 2 channels) on one
sequence of 3 positions, ``x`` of shape ``[1, 3, 4]`` (``RUN``), recorded by ``mha.trace.record``;
each picture says so above its drawing (``Run.note``), since its page runs a larger one. The
pictures number the elements: ``torch.arange(12)`` laid out with the recorded shape of ``q``
(and of ``out``, the result of ``attn @ v``), then put through the same ``view``, ``transpose``
and ``contiguous`` as ``forward``; the generator checks that every shape and stride equals the
recorded one. Each strip is the tensor's storage in memory order (``untyped_storage``), each grid
the tensor in index order, each formula its strides, and each "read in order" line ``flatten()``:
nothing is typed by hand.
"""

from __future__ import annotations

import functools
import itertools

import torch

from mha_site import picture_style as style
from mha_site.languages import tr
from mha_site.picture_style import FONT, SMALL, Run, Svg, shape_text

RUN = Run(hidden_size=4, heads_num=2, x_shape=(1, 3, 4))
BOX_W, BOX_H = 26, 22  # one element of a strip or a grid
LETTERS = {3: ("b", "s", "c"), "split": ("b", "s", "i", "c"), "heads": ("b", "i", "s", "c")}


def memory(t: torch.Tensor) -> torch.Tensor:
    """The whole storage under ``t``, in memory order."""
    return torch.empty(0, dtype=t.dtype).set_(t.untyped_storage())


@functools.cache
def run() -> dict:
    """The small run's recorded steps and the numbered tensors that follow them."""
    from mha.annotated import MHA
    from mha.trace import record

    torch.manual_seed(0)
    model = MHA(RUN.hidden_size, RUN.heads_num)
    x = torch.randn(*RUN.x_shape)
    steps = {s.expression.replace("self.", ""): s for s in reversed(record(model, x))}
    projected = steps["W_q(x)"]
    count = 1
    for n in projected.shape:
        count *= n
    q = torch.arange(count).view(projected.shape)
    q4 = q.view(q.size(0), q.size(1), model.heads_num, model.head_size)
    qh = q4.transpose(1, 2)
    out = torch.arange(count).view(steps["torch.matmul(attn, v)"].shape)
    out_t = out.transpose(1, 2)
    out_c = out_t.contiguous()
    tensors = {
        "W_q(x)": q,
        "q.view(q.size(0), q.size(1), heads_num, head_size)": q4,
        "q.transpose(1, 2)": qh,
        "torch.matmul(attn, v)": out,
        "out.transpose(1, 2)": out_t,
        "out.transpose(1, 2).contiguous()": out_c,
    }
    for expression, t in tensors.items():
        s = steps[expression]
        if (tuple(t.shape), tuple(t.stride())) != (s.shape, s.stride):
            raise ValueError(
                f"{expression}: drawn {tuple(t.shape)} {t.stride()}, run {s.shape} {s.stride}"
            )
    # The head of each element: channel // head_size of q; dimension 1 of out.
    q_heads = (torch.arange(model.hidden_size) // model.head_size).expand(q.shape)
    out_heads = torch.arange(model.heads_num).view(1, -1, 1, 1).expand(out.shape)
    return {
        "q": q,
        "q4": q4,
        "qh": qh,
        "out": out,
        "out_t": out_t,
        "out_c": out_c,
        "q_heads": q_heads.contiguous(),
        "out_heads": out_heads.contiguous(),
        "dh": model.head_size,
        "run": Run.of(model, x),
    }


def head_of(t: torch.Tensor, heads_in_memory: torch.Tensor):
    """The head of each storage offset, for a tensor numbered by its offsets."""
    return lambda value: int(heads_in_memory.flatten()[value])


def strip(svg, x, y, values, head, label, order=None, label_below=False) -> float:
    """The storage as a row of boxes, offsets under it; ``order``: arrows over it from each offset
    to the next one read. Returns the y below it."""
    if label and not label_below:
        svg.text(x, y + 12, label, size=SMALL)
        y += 18
    if order is not None:
        lift = max(abs(b - a) for a, b in itertools.pairwise(order.tolist()))
        y += arc_lift(lift) / 2 + 4
        arcs(svg, x, y, order)
    for k, value in enumerate(values.tolist()):
        bx = x + k * BOX_W
        svg.cell(bx, y, head(value), size=BOX_W)
        svg.text(bx + BOX_W / 2, y + 17, str(value), size=SMALL + 1, anchor="middle", code=True)
        svg.text(bx + BOX_W / 2, y + BOX_W + 12, str(k), size=9, anchor="middle", cls="mha-fg")
    svg.text(x + len(values) * BOX_W + 6, y + BOX_W + 12, tr_cache["offset"], size=9)
    y += BOX_W + 18
    if label and label_below:
        svg.text(x, y + 8, label, size=SMALL)
        y += 16
    return y


def arc_lift(distance: int) -> float:
    return 8 + 4 * distance


def arcs(svg, x, y, order) -> None:
    """Arrows over a strip at ``y``, from each offset to the next one read."""
    order = order.tolist()
    for a, b in itertools.pairwise(order):
        xa, xb = x + a * BOX_W + BOX_W / 2, x + b * BOX_W + BOX_W / 2
        lift = arc_lift(abs(b - a))
        mid = (xa + xb) / 2
        svg.path(f"M{xa:g},{y:g} Q{mid:g},{y - lift:g} {xb:g},{y:g}", cls="mha-accent", width=1.1)
        svg.path(
            f"M{xb - 3:g},{y - 5:g} L{xb:g},{y:g} L{xb + 3:g},{y - 5:g}",
            cls="mha-accent",
            width=1.1,
        )


def grid(svg, x, y, t, head, name, letters, language) -> float:
    """The tensor in index order (one sequence): blocks along dimension 1 for a 4-D tensor, with
    its name, shape, strides and the offset formula. Returns the y below it."""
    rank = t.dim()
    g = t[0].unsqueeze(0) if rank == 3 else t[0]
    blocks, rows, cols = g.shape
    for n in range(blocks):
        bx = x + n * (cols * BOX_H + 8)
        for r in range(rows):
            for c in range(cols):
                value = int(g[n, r, c])
                cx, cy = bx + c * BOX_H, y + r * BOX_H
                svg.cell(cx, cy, head(value), size=BOX_H)
                svg.text(
                    cx + BOX_H / 2, cy + 15, str(value), size=SMALL, anchor="middle", code=True
                )
    right = x + blocks * (cols * BOX_H + 8) + 6
    strides = t.stride()
    terms = " + ".join(
        f"{s}·{letter}" if s != 1 else letter for s, letter in zip(strides, letters, strict=True)
    )
    index = ", ".join(letters)
    svg.text(
        right,
        y + 12,
        [(name, ""), ("  ", ""), (shape_text(t.shape), "")],
        code=True,
        bold=True,
        size=SMALL + 1,
    )
    word = tr(language, "stride", "步长")
    state = (
        tr(language, "contiguous", "连续")
        if t.is_contiguous()
        else tr(language, "not contiguous", "不连续")
    )
    svg.text(right, y + 28, f"{word} {tuple(strides)}{tr(language, ', ', '，')}{state}", size=SMALL)
    offset = tr_cache["offset"]
    below = y + max(rows * BOX_H, 32) + 14
    svg.text(x, below, f"{name}[{index}] → {offset} {terms}", code=True, size=SMALL)
    return below + 14


def order_line(svg, x, y, t, language) -> float:
    values = " ".join(str(v) for v in t.flatten().tolist())
    svg.text(
        x, y + 12, tr(language, "read in index order: ", "按行优先顺序读：") + values, size=SMALL
    )
    return y + 22


tr_cache: dict[str, str] = {}


def begin(language):
    tr_cache["offset"] = tr(language, "offset", "偏移")


def view_picture(language):
    begin(language)
    r = run()
    q, q4 = r["q"], r["q4"]
    head = head_of(q, r["q_heads"])
    title = tr(
        language,
        f"view: q {shape_text(q.shape)} and q.view(...) {shape_text(q4.shape)} read the same "
        f"{q.numel()} numbers in the same memory, in the same order; only the strides change, "
        f"from {q.stride()} to {q4.stride()}.",
        f"view：q {shape_text(q.shape)} 和 q.view(...) {shape_text(q4.shape)} "
        f"读的是同一块内存里的同样 {q.numel()} 个数，顺序也相同；"
        f"变的只是步长，从 {q.stride()} 变成 {q4.stride()}。",
    )
    svg = Svg("memory-view", title, note=r["run"].note(language))
    x = 4
    label = tr(language, "memory of q (one block, shared by both)", "q 的内存（同一块，两者共用）")
    y = strip(svg, x, 4, memory(q), head, label, order=q4.flatten())
    y += 8
    y = grid(svg, x, y, q, head, "q", LETTERS[3], language)
    y = grid(svg, x, y, q4, head, "q4", LETTERS["split"], language)
    y = order_line(svg, x, y, q4, language)
    return str(svg)


def transpose_picture(language):
    begin(language)
    r = run()
    q4, qh = r["q4"], r["qh"]
    head = head_of(q4, r["q_heads"])
    title = tr(
        language,
        f"transpose: qh = q4.transpose(1, 2), {shape_text(qh.shape)}, reads the memory of q4 "
        f"{shape_text(q4.shape)} with its strides swapped, {qh.stride()}: head 0's elements first, "
        "jumping over head 1's; no number moves.",
        f"transpose：qh = q4.transpose(1, 2)，形状 {shape_text(qh.shape)}，"
        f"用互换后的步长 {qh.stride()} 读 q4 {shape_text(q4.shape)} 的内存："
        "先读头 0 的元素，跳过头 1 的；没有任何数被搬动。",
    )
    svg = Svg("memory-transpose", title, note=r["run"].note(language))
    x = 4
    label = tr(
        language,
        "memory of q4 and qh (one block): arrows follow qh",
        "q4 和 qh 的内存（同一块）：箭头按 qh 的顺序",
    )
    y = strip(svg, x, 4, memory(qh), head, label, order=qh.flatten())
    y += 8
    y = grid(svg, x, y, q4, head, "q4", LETTERS["split"], language)
    y = grid(svg, x, y, qh, head, "qh", LETTERS["heads"], language)
    y = order_line(svg, x, y, qh, language)
    return str(svg)


def contiguous_picture(language):
    begin(language)
    r = run()
    out, out_t, out_c = r["out"], r["out_t"], r["out_c"]
    old = head_of(out, r["out_heads"])
    title = tr(
        language,
        f"contiguous: out_t = out.transpose(1, 2), {shape_text(out_t.shape)}, "
        f"strides {out_t.stride()}, is copied into new memory in its index order; the copy out_c "
        f"has strides {out_c.stride()}, so each position's heads now lie side by side.",
        f"contiguous：out_t = out.transpose(1, 2)，形状 {shape_text(out_t.shape)}，"
        f"步长 {out_t.stride()}，按行优先的顺序复制到一块新内存；复制得到的 out_c "
        f"步长为 {out_c.stride()}，每个位置的各个头在内存里挨在一起。",
    )
    svg = Svg("memory-contiguous", title, note=r["run"].note(language))
    x = 4
    label = tr(
        language,
        "memory of out and out_t (one block): arrows follow out_t",
        "out 和 out_t 的内存（同一块）：箭头按 out_t 的顺序",
    )
    y = strip(svg, x, 4, memory(out_t), old, label, order=out_t.flatten())
    old_bottom = y - 2
    copy_label = tr(
        language,
        "memory of out_c = out_t.contiguous(): a copy, read in order",
        "out_c = out_t.contiguous() 的内存：复制出的新内存，按顺序读",
    )
    y += 36
    new_top = y
    y = strip(svg, x, y, memory(out_c), old, copy_label, label_below=True)
    # Where each number of the old memory went in the copy.
    for k, value in enumerate(memory(out_c).tolist()):
        x_old = x + value * BOX_W + BOX_W / 2
        x_new = x + k * BOX_W + BOX_W / 2
        svg.line(x_old, old_bottom, x_new, new_top, cls="mha-sfg", width=0.7)
    y += 8
    y = grid(svg, x, y, out_t, old, "out_t", LETTERS["split"], language)
    y = grid(svg, x, y, out_c, old, "out_c", LETTERS["split"], language)
    y = order_line(svg, x, y, out_c, language)
    return str(svg)


PICTURES = {
    "memory-view": view_picture,
    "memory-transpose": transpose_picture,
    "memory-contiguous": contiguous_picture,
}

_ = (style, FONT)
