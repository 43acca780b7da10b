"""Pictures of the forward pass: the shape flow, and one picture per transition of the walkthrough.

Everything drawn comes from one real run: ``mha.trace.record`` of ``mha.annotated.MHA(20, 4)`` on an
input of shape ``[2, 3, 20]`` (the walkthrough's sizes, ``PAGE_RUN``: were it another, each picture
would say so, ``Run.note``). Shapes and strides are the recorded ones.
The colours follow the dimensions: each step's shape is named by the recorded run (``dims_of``),
and an element's head is its index along ``heads_num``, or ``c // head_size`` for channel ``c``
along ``hidden_size`` (``heads_of``), so each cell is painted with the head its element belongs
to. A tensor of shape ``[B, N, R, C]`` is drawn as ``N`` blocks of ``R`` rows by ``C`` columns,
one square per element; the ``B`` sequences of the batch are layers stacked behind each other.
The axes a step moves are written in the accent colour.
"""

from __future__ import annotations

import functools
import re

import torch

from mha_site import picture_style as style
from mha_site.languages import tr
from mha_site.picture_style import CELL, FONT, PAGE_RUN, SMALL, Run, Svg, shape_spans, shape_text

RUN = PAGE_RUN
GAP = 10  # between blocks
LAYER = 6  # offset of each layer of the batch behind the first
LEFT = 30  # room for the row axis arrow

# Names of the dimensions, as the annotated code writes them in its shape comments.
B, S, D, H, DH = "batch_size", "seq_len", "hidden_size", "heads_num", "head_size"


@functools.cache
def run():
    """The input, the recorded forward pass, its steps by expression, the head number of every
    element of each step (``heads_of``), and the run (``Run``)."""
    from mha.annotated import MHA
    from mha.trace import dims_of, named_sizes, record

    torch.manual_seed(0)
    model = MHA(RUN.hidden_size, RUN.heads_num)
    x = torch.randn(*RUN.x_shape)
    steps = record(model, x)
    by_expression = {}
    for s in steps:
        short = s.expression.replace("self.", "")
        by_expression.setdefault(short, s)
    sizes = named_sizes(model, x)
    labels = {"x": torch.full(tuple(x.shape), -1)}  # the input belongs to no head
    for short, s in by_expression.items():
        dims = dims_of(s.shape, sizes)
        if dims is None:
            raise ValueError(f"{short}: shape {s.shape} is not named by {sizes}")
        labels[short] = heads_of(dims, sizes, mixed=s is steps[-1])
    return x, steps, by_expression, labels, Run.of(model, x)


def heads_of(dims: tuple[str, ...], sizes: dict[str, int], mixed: bool = False) -> torch.Tensor:
    """The head each element of a tensor with dimensions ``dims`` belongs to, read from where the
    heads are: along ``heads_num``, the head's index; along ``hidden_size``, channel // head_size
    (the heads side by side, as the projections lay them out); -1 (no head, drawn grey) where no
    dimension holds them, or everywhere when ``mixed``: the output projection mixes all heads
    into every channel."""
    shape = tuple(sizes[d] for d in dims)
    if mixed or not {H, D} & set(dims):
        return torch.full(shape, -1)
    axis = dims.index(H) if H in dims else dims.index(D)
    heads = torch.arange(sizes[dims[axis]])
    if dims[axis] == D:
        heads = heads // sizes[DH]
    along = [1] * len(dims)
    along[axis] = -1
    return heads.view(along).expand(shape)


def step(expression: str):
    return run()[2][expression]


@functools.cache
def numbers() -> dict[str, str]:
    """Every size and shape the titles and labels write, from the recorded run."""
    x = run()[0]
    split = step(VIEW_SPLIT).shape
    return {
        "x": shape_text(x.shape),
        "proj": shape_text(step("W_q(x)").shape),
        "split": shape_text(split),
        "heads": shape_text(step("q.transpose(1, 2)").shape),
        "kt": shape_text(step("k.transpose(-2, -1)").shape),
        "scores": shape_text(step(SCORES).shape),
        "stride_c": str(step("out.transpose(1, 2).contiguous()").stride),
        "split_args": ", ".join(map(str, split)),
        "concat_args": ", ".join(map(str, step(CONCAT).shape)),
        "d": str(x.shape[-1]),
        "n": str(x.shape[1]),
        "h": str(split[2]),
        "dh": str(split[3]),
        "dh1": str(split[3] - 1),
    }


def draw_tensor(svg, x, y, name, expression, dims, moving=(), language="en", stride=False):
    """One tensor at (x, y): blocks of cells, then its name and shape, then its dimensions.
    Returns the y below it."""
    _, _, by_expression, labels, _ = run()
    heads = labels[expression]
    shape = tuple(heads.shape) if expression == "x" else by_expression[expression].shape
    if len(shape) == 3:
        grid = heads.unsqueeze(1)  # one block
    else:
        grid = heads
    layers, blocks, rows, cols = grid.shape
    block_w = cols * CELL
    top = y + (layers - 1) * LAYER
    if len(shape) == 4:
        top += 16  # block labels
    if 1 in moving and len(shape) == 4:
        top += 12  # the arrow over the blocks
    # The batch: layers behind the first, drawn first.
    for layer in reversed(range(layers)):
        dx, dy = layer * LAYER, -layer * LAYER
        for n in range(blocks):
            bx = x + LEFT + n * (block_w + GAP) + dx
            for r in range(rows):
                for c in range(cols):
                    svg.cell(bx + c * CELL, top + dy + r * CELL, int(grid[layer, n, r, c]))
    right = x + LEFT + blocks * (block_w + GAP) - GAP + (layers - 1) * LAYER
    # Block labels: heads in their colour, positions in the text colour.
    if len(shape) == 4:
        for n in range(blocks):
            bx = x + LEFT + n * (block_w + GAP) + block_w / 2
            if dims[1] == H:
                label, head = tr(language, f"head {n}", f"头 {n}"), n
            else:
                label, head = tr(language, f"pos. {n}", f"位置 {n}"), -1
            cls, _ = style.text_of(head)
            svg.text(
                bx, top - (layers - 1) * LAYER - 5, label, cls=cls, size=SMALL, anchor="middle"
            )
    bottom = top + rows * CELL
    # The axes that move, in the accent colour, with the sizes they carry.
    rank = len(shape)
    for axis in moving:
        axis = axis % rank
        if rank == 4 and axis == 1:
            ay = top - (layers - 1) * LAYER - 22
            svg.arrow_right(x + LEFT, right - (layers - 1) * LAYER, ay, cls="mha-accent")
        elif axis == rank - 2:
            ax = x + LEFT - 8
            svg.arrow_down(ax, top, bottom, cls="mha-accent")
        elif axis == rank - 1:
            svg.arrow_right(x + LEFT, x + LEFT + block_w, bottom + 6, cls="mha-accent")
    y = bottom + 12 + 14
    svg.text(x + LEFT, y, [(name, ""), ("  ", ""), (shape_text(shape), "")], code=True, bold=True)
    y += 16
    svg.text(x + LEFT, y, shape_spans(dims, moving), code=True, size=SMALL)
    if stride:
        y += 15
        strides = by_expression[expression].stride
        word = tr(language, "stride", "步长")
        contiguous = by_expression[expression].contiguous
        state = (
            tr(language, "contiguous", "连续")
            if contiguous
            else tr(language, "not contiguous", "不连续")
        )
        svg.text(
            x + LEFT, y, f"{word} {tuple(strides)}{tr(language, ', ', '，')}{state}", size=SMALL
        )
    return y + 12


def operation(svg, x, y, code, note, language="en"):
    """The step between two tensors: an arrow, the code, and what it does. Returns the y below."""
    svg.arrow_down(x + LEFT + 6, y, y + 30)
    svg.text(x + LEFT + 18, y + 13, code, code=True, size=SMALL)
    svg.text(x + LEFT + 18, y + 27, note, size=SMALL)
    return y + 42


def words(language: str) -> dict[str, str]:
    return {
        "view": tr(language, "view: same memory, no copy", "视图：同一块内存，不复制"),
        "copy": tr(language, "copy: new memory, same values", "复制：新的一块内存，数值不变"),
    }


def transition(name, language, title, parts):
    """A picture made of tensors and the operations between them, top to bottom.

    ``parts``: ("tensor", name, expression, dims, moving[, stride]) or ("op", code, note)."""
    svg = Svg(name, title.format(**numbers()), note=run()[4].note(language))
    y = 4.0
    for part in parts:
        if part[0] == "tensor":
            _, label, expression, dims, moving, *rest = part
            y = draw_tensor(svg, 4, y, label, expression, dims, moving, language, bool(rest))
        else:
            code, note = (t.format(**numbers()) for t in part[1:])
            y = operation(svg, 4, y, code, note, language)
    return str(svg)


VIEW_SPLIT = "q.view(q.size(0), q.size(1), heads_num, head_size)"
SCORES = "torch.matmul(q, k.transpose(-2, -1))"
SCALED = "torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(head_size)"
CONCAT = "out.transpose(1, 2).contiguous().view(out.size(0), out.size(2), hidden_size)"


def project(language):
    title = tr(
        language,
        "Projection: x {x} becomes q {proj}; its {d} channels are the {h} heads' "
        "queries side by side, {dh} channels each, one colour per head.",
        "投影：x {x} 变成 q {proj}；q 的 {d} 个通道是 {h} 个头的查询依次排开，每个头 {dh} 个通道，"
        "每个头一种颜色。",
    )
    return transition(
        "project",
        language,
        title,
        [
            ("tensor", "x", "x", (B, S, D), ()),
            (
                "op",
                "q = W_q(x)",
                tr(language, "nn.Linear({d}, {d}); k, v alike", "nn.Linear({d}, {d})；k、v 相同"),
            ),
            ("tensor", "q", "W_q(x)", (B, S, D), ()),
        ],
    )


def split_heads(language):
    title = tr(
        language,
        "Split into heads: q_flat {proj} viewed as q {split}. The last "
        "dimension, {d} channels, becomes {h} heads of {dh} channels; "
        "head i is channels {dh}i to {dh}i + {dh1}.",
        "按头拆分：q_flat {proj} 用 view 变成 q {split}。最后一维的 {d} 个通道拆成 {h} 个头，"
        "每个头 {dh} 个通道；头 i 是通道 {dh}i–{dh}i + {dh1}。",
    )
    return transition(
        "split-heads",
        language,
        title,
        [
            ("tensor", "q_flat", "W_q(x)", (B, S, D), (2,)),
            ("op", "q = q_flat.view({split_args})", words(language)["view"]),
            ("tensor", "q", VIEW_SPLIT, (B, S, H, DH), (2, 3)),
        ],
    )


def transpose_heads(language):
    title = tr(
        language,
        "Heads to the front: q {split} transposed to {heads}. Dimensions 1 and 2 swap: "
        "instead of one block per position, one block per head, holding that head's {n} positions.",
        "把头换到前面：q {split} 转置成 {heads}。维度 1 和维度 2 互换：原来每个位置一块，"
        "现在每个头一块，块里是这个头的 {n} 个位置。",
    )
    return transition(
        "transpose-heads",
        language,
        title,
        [
            ("tensor", "q_split", VIEW_SPLIT, (B, S, H, DH), (1, 2)),
            ("op", "q = q_split.transpose(1, 2)", words(language)["view"]),
            ("tensor", "q", "q.transpose(1, 2)", (B, H, S, DH), (1, 2), "stride"),
        ],
    )


def transpose_keys(language):
    title = tr(
        language,
        "Transpose the keys: k {heads} becomes k_t {kt}. In each head's block, "
        "the rows (positions) become the columns.",
        "转置键：k {heads} 变成 k_t {kt}。每个头的块里，行（位置）变成了列。",
    )
    return transition(
        "transpose-keys",
        language,
        title,
        [
            ("tensor", "k", "k.transpose(1, 2)", (B, H, S, DH), (2, 3)),
            ("op", "k_t = k.transpose(-2, -1)", words(language)["view"]),
            ("tensor", "k_t", "k.transpose(-2, -1)", (B, H, DH, S), (2, 3)),
        ],
    )


def scores(language):
    title = tr(
        language,
        "Scores: q {heads} times k_t {kt} gives scores {scores}: one {n} × {n} "
        "matrix product per sequence and head; head i only meets head i.",
        "注意力分数：q {heads} 乘 k_t {kt} 得到 scores {scores}：每条序列、每个头各做一次"
        "矩阵乘法，得到 {n} × {n} 的矩阵；头 i 只和头 i 相乘。",
    )
    return transition(
        "scores",
        language,
        title,
        [
            ("tensor", "q", "q.transpose(1, 2)", (B, H, S, DH), (3,)),
            ("op", "@", tr(language, "matrix product per head", "每个头各做一次矩阵乘法")),
            ("tensor", "k_t", "k.transpose(-2, -1)", (B, H, DH, S), (2,)),
            (
                "op",
                "scores = torch.matmul(q, k_t)",
                tr(language, "head_size {dh} summed away", "对 head_size 的 {dh} 个通道求和"),
            ),
            ("tensor", "scores", SCORES, (B, H, S, S), (2, 3)),
        ],
    )


def scale_softmax(language):
    title = tr(
        language,
        "Scale and softmax: scores {scores}, divided by the square root of {dh}, then softmax over "
        "the last dimension (the keys); the shape stays {scores}.",
        "缩放和 softmax：scores {scores} 除以 {dh} 的平方根，再在最后一维（键）上做 softmax；"
        "形状始终是 {scores}。",
    )
    return transition(
        "scale-softmax",
        language,
        title,
        [
            ("tensor", "scores", SCORES, (B, H, S, S), ()),
            ("op", "qk = scores / math.sqrt({dh})", tr(language, "shape unchanged", "形状不变")),
            ("tensor", "qk", SCALED, (B, H, S, S), ()),
            (
                "op",
                "attn = torch.softmax(qk, dim=-1)",
                tr(language, "each row sums to 1", "每一行之和为 1"),
            ),
            ("tensor", "attn", "torch.softmax(qk, dim=-1)", (B, H, S, S), (3,)),
        ],
    )


def weighted_sum(language):
    title = tr(
        language,
        "Weighted sum: attn {scores} times v {heads} gives out {heads}, one "
        "{dh}-channel answer per head and position.",
        "加权求和：attn {scores} 乘 v {heads} 得到 out {heads}，每个头、每个位置各得到一个 "
        "{dh} 通道的结果。",
    )
    return transition(
        "weighted-sum",
        language,
        title,
        [
            ("tensor", "attn", "torch.softmax(qk, dim=-1)", (B, H, S, S), (3,)),
            ("op", "@", tr(language, "matrix product per head", "每个头各做一次矩阵乘法")),
            ("tensor", "v", "v.transpose(1, 2)", (B, H, S, DH), (2,)),
            (
                "op",
                "out = torch.matmul(attn, v)",
                tr(language, "the {n} keys summed away", "对 {n} 个键加权求和"),
            ),
            ("tensor", "out", "torch.matmul(attn, v)", (B, H, S, DH), ()),
        ],
    )


def transpose_back(language):
    title = tr(
        language,
        "Heads back: out {heads} transposed to out_t {split}: one block per position "
        "again, the {h} heads side by side in it.",
        "把头换回去：out {heads} 转置成 out_t {split}：又变回每个位置一块，块里 {h} 个头依次排开。",
    )
    return transition(
        "transpose-back",
        language,
        title,
        [
            ("tensor", "out", "torch.matmul(attn, v)", (B, H, S, DH), (1, 2), "stride"),
            ("op", "out_t = out.transpose(1, 2)", words(language)["view"]),
            ("tensor", "out_t", "out.transpose(1, 2)", (B, S, H, DH), (1, 2), "stride"),
        ],
    )


def contiguous(language):
    title = tr(
        language,
        "Contiguous: out_t {split} copied into out_c {split}: the same shape and values, "
        "new memory in row-major order, strides {stride_c}.",
        "变成连续：out_t {split} 复制成 out_c {split}：形状和数值不变，新的一块内存按行优先顺序"
        "排列，步长为 {stride_c}。",
    )
    return transition(
        "contiguous",
        language,
        title,
        [
            ("tensor", "out_t", "out.transpose(1, 2)", (B, S, H, DH), (), "stride"),
            ("op", "out_c = out_t.contiguous()", words(language)["copy"]),
            ("tensor", "out_c", "out.transpose(1, 2).contiguous()", (B, S, H, DH), (), "stride"),
        ],
    )


def merge_heads(language):
    title = tr(
        language,
        "Merge the heads: out_c {split} viewed as concat {proj}: per position, the {h} "
        "heads' {dh} channels side by side, head i in channels {dh}i to {dh}i + {dh1}.",
        "合并各头：out_c {split} 用 view 变成 concat {proj}："
        "每个位置上，{h} 个头的 {dh} 个通道依次拼接，"
        "头 i 占通道 {dh}i–{dh}i + {dh1}。",
    )
    return transition(
        "merge-heads",
        language,
        title,
        [
            ("tensor", "out_c", "out.transpose(1, 2).contiguous()", (B, S, H, DH), (2, 3)),
            ("op", "concat = out_c.view({concat_args})", words(language)["view"]),
            ("tensor", "concat", CONCAT, (B, S, D), (2,)),
        ],
    )


def output_projection(language):
    title = tr(
        language,
        "Output projection: concat {proj} becomes y {proj}; W_o is a full {d} × {d} matrix, "
        "so every output channel mixes all {h} heads (drawn grey).",
        "输出投影：concat {proj} 变成 y {proj}；W_o 是完整的 {d} × {d} 矩阵，每个输出通道都混合了"
        "全部 {h} 个头（画成灰色）。",
    )
    return transition(
        "output-projection",
        language,
        title,
        [
            ("tensor", "concat", CONCAT, (B, S, D), ()),
            (
                "op",
                "y = W_o(concat)",
                tr(language, "every channel mixes all heads", "每个通道混合全部的头"),
            ),
            ("tensor", "y", "W_o(out)", (B, S, D), ()),
        ],
    )


# ---- the shape flow of the whole forward pass ----------------------------------------------

KINDS = {
    "view": ("view", "视图"),
    "copy": ("copy", "复制"),
    "new": ("computed", "计算"),
}


def short(expression: str, previous: str) -> str:
    """The expression as the flow writes it: ``self.`` and ``torch.`` dropped, a ``view``'s
    arguments elided, and a chain continued from the step before written from its dot."""
    text = expression.replace("self.", "").replace("torch.", "")
    prev = previous.replace("self.", "").replace("torch.", "")
    text = re.sub(r"\.view\([^()]*(\([^()]*\)[^()]*)*\)", ".view(…)", text)
    prev = re.sub(r"\.view\([^()]*(\([^()]*\)[^()]*)*\)", ".view(…)", prev)
    if prev and text.startswith(prev) and text != prev:
        rest = text[len(prev) :]
        return "  " + rest if rest.startswith(".") else "…" + rest
    if prev and prev in text and len(text) > 30:
        return text.replace(prev, "…")
    return text


def flow(language):
    x, steps, _, _, drawn = run()
    d, h = numbers()["d"], numbers()["h"]
    title = tr(
        language,
        f"The forward pass of MHA({d}, {h}) on x {shape_text(x.shape)}, every step recorded by "
        "mha.trace.record: the expression, the shape it gives, and whether it is a view of "
        "the same memory, a copy, or computed.",
        f"MHA({d}, {h}) 在 x {shape_text(x.shape)} 上的前向计算，每一步都由 mha.trace.record 记录："
        "表达式、得到的形状，以及它是同一块内存上的视图、复制，还是计算得到的新张量。",
    )
    svg = Svg("forward-flow", title, note=drawn.note(language))
    size = SMALL + 1  # no smaller: the picture is shrunk to a phone's width, this stays 8 px
    row = 24
    cx_expr, cx_shape, cx_kind = 58, 292, 400
    y = 16
    headers = (
        tr(language, "step", "步骤"),
        tr(language, "shape", "形状"),
        tr(language, "memory", "内存"),
    )
    for cx, label in zip((cx_expr, cx_shape, cx_kind), headers, strict=True):
        svg.text(cx, y, label, bold=True, size=size)
    y += 8
    svg.line(4, y, cx_kind + 116, y, width=0.6)
    rows = [("", "x", tuple(x.shape), None)]
    previous = ""
    for s in steps:
        rows.append((s.target, short(s.expression, previous), s.shape, s))
        previous = s.expression
    for target, text, shape, s in rows:
        y += row
        if s is not None and s.kind == "copy":
            svg.rect(2, y - 16, cx_kind + 118, row - 2, "mha-copyrow", "none", "#c2185b", rx=3)
        if target:
            svg.text(50, y, f"{target} =" if s is not None else target, code=True, anchor="end")
        svg.text(cx_expr, y, text, code=True, size=size)
        svg.text(cx_shape, y, shape_text(shape), code=True, size=size)
        if s is None:
            kind = tr(language, "input", "输入")
        else:
            kind = KINDS[s.kind][1 if language == "zh" else 0]
            if not s.contiguous:
                kind += tr(language, ", not contig.", "，不连续")
        cls = "mha-accent" if s is not None and s.kind == "copy" else "mha-fg"
        svg.text(cx_kind, y, kind, cls=cls, size=size, bold=cls == "mha-accent")
    y += 22
    legend = tr(
        language,
        "view: no data moves; copy: new memory (contiguous); computed: a new result",
        "视图：数据不动；复制：新的一块内存（连续）；计算：新结果",
    )
    svg.text(4, y, legend, size=size)
    return str(svg)


PICTURES = {
    "forward-flow": flow,
    "project": project,
    "split-heads": split_heads,
    "transpose-heads": transpose_heads,
    "transpose-keys": transpose_keys,
    "scores": scores,
    "scale-softmax": scale_softmax,
    "weighted-sum": weighted_sum,
    "transpose-back": transpose_back,
    "contiguous": contiguous,
    "merge-heads": merge_heads,
    "output-projection": output_projection,
}

_ = FONT  # the default label size, kept with the other sizes in picture_style
