"""The picture of the chapter fast: drawn at build time from the page's own run of ``mha.full``.

``fast-memory``: the page's ``MHA(20, 4, dropout=0.3)`` in evaluation mode and its written-out
twin ``MHA(20, 4, fast=False)``, each called once on ``x`` ``[2, 3, 20]`` with a ``context`` of
``[2, 7, 20]`` (seed 0, the page's sizes), with every ATen operation recorded as the page's
``record`` does it (a ``TorchDispatchMode``). Drawn: each tensor the attention allocates between
the projections and ``W_o`` (a result that shares no storage with the operation's inputs; the
four ``addmm`` of ``W_q``, ``W_k``, ``W_v``, ``W_o`` are the same on both paths and left out),
its operation, its shape and its bytes as a bar on one scale for both paths; the tensors ending
in ``q_len``, ``k_len`` in the accent colour. Shapes and bytes do not depend on the values drawn,
only on the sizes and the path. The page's 7 keys are fewer than ``NAN_CHECKED_BELOW``: on the
CPU the fast path makes the NaN check's tensors too (``MHA._nans``), one number per query each,
and adds them to the kernel's output.

What each tensor is (the copy of ``q`` that ``matmul`` makes, the scores, ...) is written from
the written-out path's code, in the order it runs; a recording in another order fails the build
rather than labelling a tensor wrongly.
"""

from __future__ import annotations

import functools

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from mha_site import picture_style as style
from mha_site.languages import tr
from mha_site.picture_style import FONT, SMALL, shape_spans, shape_text

HIDDEN, HEADS, X_SHAPE, CONTEXT_LEN, DROPOUT = 20, 4, (2, 3, 20), 7, 0.3
PROJECTION = "addmm"  # a linear layer's operation: W_q, W_k, W_v and W_o, on both paths
FLASH = "_scaled_dot_product_flash_attention_for_cpu"
# What each new tensor of a path is, in the order the path makes them: (operation, en, zh).
MEANINGS = {
    "written": [
        ("clone", "q, copied for matmul", "为 matmul 复制的 q"),
        ("clone", "kᵀ, copied for matmul", "为 matmul 复制的 kᵀ"),
        ("bmm", "the scores q kᵀ", "注意力分数 q kᵀ"),
        ("div", "the scores, scaled", "缩放后的注意力分数"),
        ("_softmax", "the weights", "注意力权重"),
        ("clone", "v, copied for matmul", "为 matmul 复制的 v"),
        ("bmm", "the weighted sum of v", "v 的加权和"),
        ("clone", ".contiguous(), to merge the heads", "合并各头之前的 .contiguous()"),
    ],
    # the fast path on the CPU with fewer keys than NAN_CHECKED_BELOW: the flash kernel, and
    # around it the NaN check (MHA._nans), one number per query, added to the kernel's output
    "fast": [
        ("sum", "NaN check: each query's sum", "NaN 检查：每个查询的和"),
        ("sum", "NaN check: each key head's sum", "NaN 检查：每个键头的和"),
        ("add", "NaN check: the two sums added", "NaN 检查：两个和相加"),
        ("sub", "NaN check: sum − sum, zero or NaN", "NaN 检查：和减和，零或 NaN"),
        (f"{FLASH}.output", "the output", "输出"),
        (f"{FLASH}.logsumexp", "one per query: m + log ℓ", "每个查询一个数：m + log ℓ"),
        ("add", "the output, the NaN check added", "输出加上 NaN 检查的结果"),
    ],
}
BAR_MAX = 150  # the widest bar, for the largest tensor of both paths
BAR_H = 9
INDENT = 12
ROW = 2 * SMALL + 15
# a bar's paint: (class, fill, stroke); the q_len × k_len tensors' in the accent colour
ACCENT_BAR = ("mha-accent", style.ACCENT_LIGHT, style.ACCENT_LIGHT)
PLAIN_BAR = ("mha-n mha-sn", style.NEUTRAL_TINT_LIGHT, style.NEUTRAL_LIGHT)  # fill_of(-1)


class NewTensors(TorchDispatchMode):
    """Records each tensor an ATen operation returns that shares no storage with its inputs:
    ``(operation, shape, bytes)``, an output of several results named ``op.result``."""

    def __init__(self):
        super().__init__()
        self.tensors: list[tuple[str, tuple[int, ...], int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        inputs = {
            t.untyped_storage().data_ptr()
            for t in tree_leaves((args, kwargs))
            if isinstance(t, torch.Tensor)
        }
        name = func.overloadpacket.__name__
        returns = func._schema.returns
        results = result if isinstance(result, tuple) else (result,)
        for returned, t in zip(returns, results, strict=True):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                label = f"{name}.{returned.name}" if len(returns) > 1 else name
                self.tensors.append((label, tuple(t.shape), t.numel() * t.element_size()))
        return result


def new_tensors(call) -> list[tuple[str, tuple[int, ...], int]]:
    """The new tensors of ``call()``, no gradients recorded, projections left out."""
    with torch.no_grad(), NewTensors() as seen:
        call()
    return [t for t in seen.tensors if t[0] != PROJECTION]


@functools.cache
def run(context_len: int = CONTEXT_LEN) -> dict:
    """The page's two calls: for each path, its new tensors ``(operation, shape, bytes)``, and
    the two lengths ``q_len``, ``k_len``. (``context_len`` other than the page's: a test's.)"""
    from mha.full import MHA

    with torch.random.fork_rng():  # the build's (or a test's) random state is left as it was
        torch.manual_seed(0)
        model = MHA(HIDDEN, HEADS, dropout=DROPOUT).eval()
        x = torch.randn(*X_SHAPE)
        context = torch.randn(X_SHAPE[0], context_len, HIDDEN)
        written_out = MHA(HIDDEN, HEADS, fast=False).eval()
    written_out.load_state_dict(model.state_dict())
    paths = {
        "written": new_tensors(lambda: written_out(x, context)),
        "fast": new_tensors(lambda: model(x, context)),
    }
    for path, tensors in paths.items():
        ops, want = [t[0] for t in tensors], [m[0] for m in MEANINGS[path]]
        if ops != want:
            raise ValueError(f"fast-memory: the {path} path made {ops}, expected {want}")
    return {**paths, "lengths": (X_SHAPE[1], context_len)}


def fast_memory_picture(language: str, shown: dict | None = None) -> str:
    shown = shown or run()
    lengths = shown["lengths"]
    q_len, k_len = lengths
    largest = max(b for path in ("written", "fast") for *_, b in shown[path])

    def square(shape) -> bool:  # a tensor of q_len × k_len numbers per head
        return tuple(shape[-2:]) == lengths

    def total(path) -> int:
        return sum(b for *_, b in shown[path])

    scores_bytes = sum(b for _, s, b in shown["written"] if square(s))
    counts = {p: len(shown[p]) for p in ("written", "fast")}
    title = tr(
        language,
        f"The tensors each path allocates for one call of MHA({HIDDEN}, {HEADS}) on x "
        f"{shape_text(X_SHAPE)} and a context of {k_len} positions: written out, "
        f"{counts['written']} tensors, {total('written')} bytes, {scores_bytes} of them in "
        f"tensors of q_len × k_len = {q_len} × {k_len} per head (the scores, the scaled scores, "
        f"the weights); SDPA's flash kernel and the NaN check, {counts['fast']} tensors, "
        f"{total('fast')} bytes, none of them q_len × k_len",
        f"MHA({HIDDEN}, {HEADS}) 对 x {shape_text(X_SHAPE)} 和 {k_len} 个位置的上下文调用一次，"
        f"每条路径分配的张量：逐步计算的路径 {counts['written']} 个张量、{total('written')} 字节，"
        f"其中 {scores_bytes} 字节是每个头 q_len × k_len = {q_len} × {k_len} 的张量（注意力分数、"
        f"缩放后的注意力分数、注意力权重）；SDPA 的 flash 算子和 NaN 检查 {counts['fast']} 个"
        f"张量、{total('fast')} 字节，没有一个是 q_len × k_len",
    )
    svg = style.Svg("fast-memory", title)
    svg.text(
        4,
        4 + FONT,
        tr(language, "What each path allocates, one call", "一次调用，每条路径分配的张量"),
        bold=True,
    )
    svg.text(
        4,
        4 + FONT + 17,
        tr(
            language,
            f"between the projections and W_o; x {shape_text(X_SHAPE)}, k_len {k_len}",
            f"投影之后、W_o 之前；x {shape_text(X_SHAPE)}，k_len 为 {k_len}",
        ),
        size=SMALL,
    )
    y = 4 + FONT + 17 + 14
    headings = {
        "written": (
            "fast=False",
            tr(language, "written out", "逐步计算"),
        ),
        "fast": (
            "fast=True",
            tr(language, "fast path", "快速路径"),
        ),
    }
    for path in ("written", "fast"):
        y += FONT + 8
        code, words = headings[path]
        wide = svg.text(4, y, code, code=True, bold=True)
        summary = tr(
            language,
            f"{words}: {counts[path]} tensors, {total(path)} bytes",
            f"{words}：{counts[path]} 个张量，{total(path)} 字节",
        )
        svg.text(4 + wide + 8, y, summary, size=SMALL)
        y += 6
        for (op, shape, nbytes), (_, en, zh) in zip(shown[path], MEANINGS[path], strict=True):
            top = y + SMALL + 4
            name = op.rsplit(".", 1)[-1]  # the flash kernel's results by their names
            wide = svg.text(INDENT, top, name, code=True, size=SMALL, bold=True)
            svg.text(INDENT + wide + 6, top, tr(language, en, zh), size=SMALL)
            line = top + SMALL + 6
            moving = [-2, -1] if square(shape) else []
            svg.text(INDENT, line, shape_spans(shape, moving), code=True, size=SMALL)
            bar_x = INDENT + 12 * 0.62 * SMALL + 8  # after the widest shape, [2, 4, 3, 7]
            bar_w = BAR_MAX * nbytes / largest
            paint = ACCENT_BAR if square(shape) else PLAIN_BAR
            svg.rect(bar_x, line - BAR_H + 1, bar_w, BAR_H, *paint)
            svg.text(
                bar_x + bar_w + 5,
                line,
                tr(language, f"{nbytes} bytes", f"{nbytes} 字节"),
                size=SMALL,
            )
            y += ROW
    # what the accent marks
    y += SMALL + 12
    wide = svg.text(4, y, shape_spans(("…", "q_len", "k_len"), [-2, -1]), code=True, size=SMALL)
    written = total("written")
    legend = {
        "en": (
            f"{q_len} × {k_len} numbers per head",
            f"{scores_bytes} of {written} bytes written out, none on the fast path",
        ),
        "zh": (
            f"每个头 {q_len} × {k_len} 个数",
            f"占逐步计算 {written} 字节中的 {scores_bytes} 字节，快速路径上没有",
        ),
    }[language]
    svg.text(4 + wide + 6, y, legend[0], size=SMALL)
    svg.text(4, y + SMALL + 6, legend[1], size=SMALL)
    return str(svg)


PICTURES = {"fast-memory": fast_memory_picture}
