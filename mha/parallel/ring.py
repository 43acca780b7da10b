"""The sequence across ranks: ``ring_attention``, its schedule ``ring_schedule``, the kernel each
step calls (``ring_kernel``), and the layouts of a sequence over the ranks (``split_sequence``,
``join_sequence``: contiguous slices, or zigzag's two chunks a rank)."""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from mha.checks import check_flag, check_length
from mha.parallel.group import agree, as_process_group
from mha.tiled import TiledAttention

Action = Literal["whole", "causal", "skip", "front", "back"]
Layout = Literal["contiguous", "zigzag"]
LAYOUTS = ("contiguous", "zigzag")

FUSED = "aten._scaled_dot_product_flash_attention_for_cpu"
"""The fused kernel a ring step calls on the CPU: SDPA's flash kernel, which returns the
log-sum-exp with the output (and its backward takes them both)."""
FUSED_CUDA = "aten._scaled_dot_product_efficient_attention"
"""The fused kernel a ring step calls on a CUDA device: SDPA's memory-efficient kernel, which
returns the log-sum-exp when asked (``compute_log_sumexp=True``), for every floating dtype but
float64 and values of any size (the flash kernel takes 16-bit floats only)."""
TILED = "mha.tiled.TiledAttention"
"""What a ring step runs where the fused kernel does not apply."""
_FLOATING = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


def _check_layout(layout: object) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {list(LAYOUTS)}, got {layout!r}")


def ring_schedule(
    world: int, rank: int, *, is_causal: bool = False, layout: Layout = "contiguous"
) -> list[tuple[int, Action]]:
    """What rank ``rank`` of a ring of ``world`` does at each step of ``ring_attention``.

    At step ``s`` the rank holds the keys and values of rank ``(rank - s) % world`` (its own at
    step 0; each step they move one rank on). Without the causal mask every block is attended
    whole. With it, the rank's own block gets the causal mask; then, with contiguous slices, an
    earlier rank's block is visible whole and a later rank's block is skipped (its positions all
    come after the rank's queries). In the zigzag layout each rank holds two chunks, one from each
    end of the sequence (see [`split_sequence`][mha.parallel.split_sequence]): an earlier rank's
    block is seen by all the queries, but only its front chunk (``"front"``); a later rank's
    block by the back chunk of the queries only, whole (``"back"``). Either is half a block's
    work, so every rank does the same.

    Args:
        world: the ranks in the ring.
        rank: this rank, ``0`` to ``world - 1``.
        is_causal: the causal mask over the whole sequence.
        layout: ``"contiguous"`` or ``"zigzag"``.

    Returns:
        One ``(source, action)`` per step: whose keys the rank holds, and ``"whole"``,
            ``"causal"``, ``"skip"``, ``"front"`` or ``"back"``.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: ``world`` is not positive, ``rank`` is not in ``0`` to ``world - 1``, or
            ``layout`` is not one of the two.

    Examples:
        >>> ring_schedule(4, 2, is_causal=True)
        [(2, 'causal'), (1, 'whole'), (0, 'whole'), (3, 'skip')]
        >>> ring_schedule(4, 2, is_causal=True, layout="zigzag")
        [(2, 'causal'), (1, 'front'), (0, 'front'), (3, 'back')]

    中文:
        ``ring_attention`` 中，``world`` 个进程组成的环里进程 ``rank`` 每一步做什么。

        在步 ``s``，这个进程手上是进程 ``(rank - s) % world`` 的键和值（步 0 是自己的；
        每一步它们往后传一个进程）。没有因果掩码时每一块都整块参与注意力。有因果掩码时，自己那一块加因果
        掩码；之后，按连续分段时，前面进程的块整块可见，后面进程的块跳过（那些位置全在本进程的查询之后）。
        按 zigzag 布局时每个进程持有两段，序列两头各一段（见
        [`split_sequence`][mha.parallel.split_sequence]）：前面进程的块，所有查询都看得到，但只看它的
        前一段（``"front"``）；后面进程的块，只有后一段查询看得到，整块都看（``"back"``）。两种情况都是
        半块的计算量，所以每个进程的工作量相同。

        参数：
            world: 环里的进程数。
            rank: 本进程的编号，0–``world - 1``。
            is_causal: 整个序列上的因果掩码。
            layout: ``"contiguous"``（连续分段）或 ``"zigzag"``。

        返回：
            每一步一个 ``(source, action)``：手上是谁的键，以及 ``"whole"``（整块）、
                ``"causal"``（因果掩码）、``"skip"``（跳过）、``"front"``（前一段键）或
                ``"back"``（后一段查询）。

        异常：
            TypeError: 参数类型不对。
            ValueError: ``world`` 不是正数，``rank`` 不在 0–``world - 1`` 之间，或者 ``layout``
                不是这两种之一。
    """
    check_length("world", world, positive=True)
    check_length("rank", rank)
    check_flag("is_causal", is_causal)
    _check_layout(layout)
    if rank >= world:
        raise ValueError(f"rank must be in 0 to world - 1 = {world - 1}, got {rank}")
    steps: list[tuple[int, Action]] = []
    for step in range(world):
        source = (rank - step) % world
        if not is_causal:
            action: Action = "whole"
        elif source == rank:
            action = "causal"
        elif layout == "contiguous":
            action = "whole" if source < rank else "skip"
        else:
            action = "front" if source < rank else "back"
        steps.append((source, action))
    return steps


def _chunks(length: int, world: int, layout: str) -> list[list[slice]]:
    """Each rank's slices of a sequence of ``length`` positions."""
    parts = world if layout == "contiguous" else 2 * world
    if length % parts:
        needs = "world" if layout == "contiguous" else "2 * world"
        raise ValueError(
            f"the sequence's length ({length}) must be divisible by {needs} = {parts} for the "
            f"{layout} layout over {world} ranks: pad it to a multiple of {parts}"
        )
    n = length // parts
    chunk = [slice(i * n, (i + 1) * n) for i in range(parts)]
    if layout == "contiguous":
        return [[c] for c in chunk]
    return [[chunk[r], chunk[parts - 1 - r]] for r in range(world)]


def split_sequence(
    t: Tensor, world: int, *, dim: int, layout: Layout = "contiguous"
) -> list[Tensor]:
    """Each rank's part of a sequence, for ``ring_attention``'s ``layout``.

    ``"contiguous"``: rank ``r`` holds positions ``r * L / world`` to ``(r + 1) * L / world - 1``.
    ``"zigzag"`` (ring-flash-attention's and Megatron-LM's name; *head-tail* in PyTorch's context
    parallelism): the sequence is cut into ``2 * world`` chunks and rank ``r`` holds chunks ``r``
    and ``2 * world - 1 - r``, one from each end, so that under the causal mask every rank
    attends over as many keys. Split the positions the same way for rotary embeddings:
    ``split_sequence(torch.arange(L), world, dim=0, layout=...)[rank]``.

    Args:
        t: the whole sequence (queries, keys, values, an input or the positions).
        world: the ranks.
        dim: the sequence's dimension of ``t``.
        layout: ``"contiguous"`` or ``"zigzag"``.

    Returns:
        ``world`` tensors, rank ``r``'s part at ``r`` (views of ``t`` for ``"contiguous"``).

    Raises:
        TypeError: ``world`` or ``dim`` is not an ``int``.
        ValueError: ``layout`` is not one of the two, or the length is not divisible by
            ``world`` (``2 * world`` for ``"zigzag"``).

    Examples:
        >>> split_sequence(torch.arange(8), 2, dim=0, layout="zigzag")
        [tensor([0, 1, 6, 7]), tensor([2, 3, 4, 5])]

    中文:
        按 ``ring_attention`` 的 ``layout``，给出每个进程持有的那部分序列。

        ``"contiguous"``：进程 ``r`` 持有位置
        ``r * L / world``–``(r + 1) * L / world - 1``。``"zigzag"``（ring-flash-attention 和
        Megatron-LM 的叫法；PyTorch 的上下文并行里叫 head-tail）：把序列切成 ``2 * world`` 段，进程
        ``r`` 持有段 ``r`` 和段 ``2 * world - 1 - r``，两头各一段，这样在因果掩码下每个进程要看的键
        一样多。旋转位置编码的位置也这样拆：
        ``split_sequence(torch.arange(L), world, dim=0, layout=...)[rank]``。

        参数：
            t: 整条序列（查询、键、值、输入或位置）。
            world: 进程数。
            dim: ``t`` 里序列所在的维。
            layout: ``"contiguous"`` 或 ``"zigzag"``。

        返回：
            ``world`` 个张量，第 ``r`` 个是进程 ``r`` 的那部分（``"contiguous"`` 时是 ``t`` 的
                视图）。

        异常：
            TypeError: ``world`` 或 ``dim`` 不是 ``int``。
            ValueError: ``layout`` 不是这两种之一，或者长度不能被 ``world`` 整除（``"zigzag"`` 时是
                ``2 * world``）。
    """
    check_length("world", world, positive=True)
    _check_layout(layout)
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"dim must be an int, got {type(dim).__name__} ({dim!r})")
    parts = _chunks(t.size(dim), world, layout)
    if layout == "contiguous":
        return [t.narrow(dim, s.start, s.stop - s.start) for (s,) in parts]
    return [
        torch.cat([t.narrow(dim, s.start, s.stop - s.start) for s in rank], dim) for rank in parts
    ]


def join_sequence(parts: list[Tensor], *, dim: int, layout: Layout = "contiguous") -> Tensor:
    """The whole sequence from each rank's part: the inverse of
    [`split_sequence`][mha.parallel.split_sequence].

    Args:
        parts: rank ``r``'s part at ``r``.
        dim: the sequence's dimension.
        layout: ``"contiguous"`` or ``"zigzag"``.

    Returns:
        The sequence in its order.

    Raises:
        ValueError: ``layout`` is not one of the two, or a zigzag part has an odd length.

    Examples:
        >>> parts = split_sequence(torch.arange(8), 2, dim=0, layout="zigzag")
        >>> join_sequence(parts, dim=0, layout="zigzag")
        tensor([0, 1, 2, 3, 4, 5, 6, 7])

    中文:
        由各进程的那部分拼回整条序列：[`split_sequence`][mha.parallel.split_sequence] 的逆操作。

        参数：
            parts: 第 ``r`` 个是进程 ``r`` 的那部分。
            dim: 序列所在的维。
            layout: ``"contiguous"`` 或 ``"zigzag"``。

        返回：
            按原来顺序排好的序列。

        异常：
            ValueError: ``layout`` 不是这两种之一，或者 zigzag 的某一部分长度是奇数。
    """
    _check_layout(layout)
    if layout == "contiguous":
        return torch.cat(parts, dim=dim)
    if any(p.size(dim) % 2 for p in parts):
        raise ValueError(
            f"join_sequence: each zigzag part holds two chunks of one length, got lengths "
            f"{[p.size(dim) for p in parts]}"
        )
    fronts = [p.narrow(dim, 0, p.size(dim) // 2) for p in parts]
    backs = [p.narrow(dim, p.size(dim) // 2, p.size(dim) // 2) for p in parts]
    return torch.cat(fronts + backs[::-1], dim=dim)


def ring_kernel(q: Tensor, k: Tensor, v: Tensor) -> str:
    """The kernel each step of ``ring_attention`` calls on these blocks.

    A fused kernel that returns the output with its log-sum-exp (what
    [`merge`][mha.tiled.merge] needs to join the steps), its backward taking both, as PyTorch's
    context parallelism calls them. On the CPU, for queries, keys and values of one head size in a
    floating dtype: the flash kernel
    ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu``, which reads the ``kv_heads``
    key/value heads as they are. On a CUDA device, in float32, bfloat16 or float16 with head and
    value sizes that are multiples of 8 (the kernel's alignment): the memory-efficient kernel
    ``torch.ops.aten._scaled_dot_product_efficient_attention``, which takes values of another size
    but not fewer key/value heads (the step repeats them on the rank; they still travel with
    ``kv_heads``). Otherwise [`TiledAttention`][mha.tiled.TiledAttention].

    Args:
        q: the queries, ``[batch_size, heads_num, q_len, head_size]``.
        k: the keys, ``[batch_size, kv_heads, k_len, head_size]``.
        v: the values, ``[batch_size, kv_heads, k_len, v_size]``.

    Returns:
        ``"aten._scaled_dot_product_flash_attention_for_cpu"``,
            ``"aten._scaled_dot_product_efficient_attention"`` or ``"mha.tiled.TiledAttention"``.

    Examples:
        >>> q = torch.randn(1, 2, 3, 4)
        >>> ring_kernel(q, q, q)
        'aten._scaled_dot_product_flash_attention_for_cpu'
        >>> # 值的维度不同
        >>> ring_kernel(q, q, torch.randn(1, 2, 3, 5))  # values of another size
        'mha.tiled.TiledAttention'

    中文:
        ``ring_attention`` 每一步对这些块调用的算子。

        用的是融合算子：它在输出之外还返回 log-sum-exp（[`merge`][mha.tiled.merge] 合并各步时要
        用），反向算子也接收这两者，PyTorch 的上下文并行调用的就是它们。在 CPU 上，查询、键和值
        每个头的维度相同、dtype 是浮点时，用 flash 算子
        ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu``，它直接读 ``kv_heads`` 个
        键/值头。在 CUDA 设备上，dtype 是 float32、bfloat16 或 float16，头和值的维度都是 8 的倍数
        （算子的对齐要求）时，用 memory-efficient 算子
        ``torch.ops.aten._scaled_dot_product_efficient_attention``：它接受维度不同的值，但不接受
        更少的键/值头（这一步在本进程上把它们重复出来；在环上传递的仍然是 ``kv_heads`` 个）。
        其余情况用 [`TiledAttention`][mha.tiled.TiledAttention]。

        参数：
            q: 查询，``[batch_size, heads_num, q_len, head_size]``。
            k: 键，``[batch_size, kv_heads, k_len, head_size]``。
            v: 值，``[batch_size, kv_heads, k_len, v_size]``。

        返回：
            ``"aten._scaled_dot_product_flash_attention_for_cpu"``、
                ``"aten._scaled_dot_product_efficient_attention"`` 或
                ``"mha.tiled.TiledAttention"``。
    """
    devices = {t.device.type for t in (q, k, v)}
    head_size, v_size = q.size(-1), v.size(-1)
    if devices == {"cpu"} and q.dtype in _FLOATING and head_size == k.size(-1) == v_size:
        return FUSED
    aligned = head_size % 8 == 0 and v_size % 8 == 0 and head_size == k.size(-1)
    if devices == {"cuda"} and q.dtype in _FLOATING[1:] and aligned:
        return FUSED_CUDA
    return TILED


def _accumulated(dtype: torch.dtype) -> torch.dtype:
    """The dtype a ring joins its steps in: float32 at least."""
    return torch.promote_types(dtype, torch.float32)


def _repeat_heads(t: Tensor, heads: int) -> Tensor:
    """``t``'s key/value heads repeated for ``heads`` query heads (grouped-query attention)."""
    return t if t.size(1) == heads else t.repeat_interleave(heads // t.size(1), dim=1)


def _attend(
    q: Tensor, k: Tensor, v: Tensor, causal: bool, block_size: int
) -> tuple[Tensor, Tensor]:
    """One step's attention and log-sum-exp, in float32 at least: the fused kernel where it
    applies (on the CPU key/value heads as they are, on CUDA repeated), else TiledAttention
    (key/value heads repeated)."""
    dtype = _accumulated(q.dtype)
    kernel = ring_kernel(q, k, v)
    if kernel == FUSED:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
        return out.to(dtype), lse.to(dtype)
    heads = q.size(1)
    k, v = _repeat_heads(k, heads), _repeat_heads(v, heads)
    if kernel == FUSED_CUDA:
        out, lse = _efficient(q, k, v, causal)
        return out.to(dtype), lse.to(dtype)
    out, lse = TiledAttention(block_size)(q, k, v, is_causal=causal)
    return out.to(dtype), lse.to(dtype)


def _efficient(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> tuple[Tensor, Tensor]:
    """The memory-efficient kernel's output and log-sum-exp (``[batch_size, heads_num, q_len]``:
    the kernel pads its rows to a multiple of 32 on CUDA, cut here)."""
    out, lse, _, _ = torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, None, True, 0.0, causal
    )
    return out, lse.narrow(-1, 0, q.size(2))


def _efficient_backward(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, causal: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """The memory-efficient kernel's gradients of ``q``, ``k`` and ``v`` (as many heads as
    ``q``), from the whole sequence's ``out`` and ``lse``: the log-sum-exp laid out as the
    forward gives it (rows padded to a multiple of 32, a new contiguous tensor: PyTorch's context
    parallelism makes it contiguous too, the others may be views), no dropout, so its random
    state is never read."""
    rows = q.size(2)
    padded = F.pad(lse.float(), (0, -(-rows // 32) * 32 - rows))
    no_state = torch.zeros((), dtype=torch.int64, device=q.device)
    dq, dk, dv, _ = torch.ops.aten._scaled_dot_product_efficient_attention_backward(
        dout.to(q.dtype),
        q,
        k,
        v,
        None,
        out.to(q.dtype),
        padded,
        no_state,
        no_state,
        0.0,
        [True, True, True, False],
        causal,
    )
    return dq, dk, dv


def _block_grads(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dout: Tensor,
    lse: Tensor,
    delta: Tensor,
    causal: bool,
    block_size: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """The gradients of this rank's part of the loss with respect to ``q`` and to one held block
    of keys and values (as many heads as ``q``), in blocks of ``block_size`` keys: TiledAttention's
    backward, from the whole sequence's ``lse`` and ``delta`` (float32 at least)."""
    scale = q.size(-1) ** -0.5
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None]
    q_len, k_len = q.size(2), k.size(2)
    for start in range(0, k_len, block_size):
        end = min(start + block_size, k_len)
        scores = q @ k[:, :, start:end].transpose(-2, -1) * scale
        if causal:
            seen = torch.arange(q_len, device=q.device)[:, None] + (k_len - q_len)
            visible = torch.arange(start, end, device=q.device) <= seen
            scores = scores.masked_fill(~visible, -math.inf)
        # 前向计算的注意力权重，由分数和整条序列的 lse 重新算出
        # The forward's weights, recomputed from the scores and the whole sequence's lse
        p = torch.exp(scores - safe)
        dv[:, :, start:end] = p.transpose(-2, -1) @ dout
        ds = p * (dout @ v[:, :, start:end].transpose(-2, -1) - delta)
        dq += ds @ k[:, :, start:end] * scale
        dk[:, :, start:end] = ds.transpose(-2, -1) @ q * scale
    return dq, dk, dv


def _attend_backward(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    causal: bool,
    block_size: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """One step's gradients of ``q`` and of the held keys and values (their ``kv_heads`` heads),
    from the whole sequence's ``out`` and ``lse``: the fused kernel's backward where the forward
    ran it, else TiledAttention's, in float32 at least."""
    dtype = _accumulated(q.dtype)
    kernel = ring_kernel(q, k, v)
    if kernel == FUSED:
        grads = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dout.to(q.dtype), q, k, v, out.to(q.dtype), lse, 0.0, causal
        )
        return tuple(g.to(dtype) for g in grads)
    heads, kv_heads = q.size(1), k.size(1)
    if kernel == FUSED_CUDA:
        k, v = _repeat_heads(k, heads), _repeat_heads(v, heads)
        dq, dk, dv = (g.to(dtype) for g in _efficient_backward(dout, q, k, v, out, lse, causal))
    else:
        q, dout = q.to(dtype), dout.to(dtype)
        k, v = _repeat_heads(k.to(dtype), heads), _repeat_heads(v.to(dtype), heads)
        delta = (dout * out).sum(dim=-1, keepdim=True)  # [batch_size, heads_num, q_len, 1]
        dq, dk, dv = _block_grads(q, k, v, dout, lse, delta, causal, block_size)
    if kv_heads != heads:  # each key/value head's gradient: the sum over the heads that share it
        dk = dk.unflatten(1, (kv_heads, heads // kv_heads)).sum(2)
        dv = dv.unflatten(1, (kv_heads, heads // kv_heads)).sum(2)
    return dq, dk, dv


def ring_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    is_causal: bool = False,
    group: dist.ProcessGroup | None = None,
    layout: Layout = "contiguous",
    overlap: bool = True,
    block_size: int = 64,
) -> Tensor:
    """Attention over a sequence split across the ranks of ``group``, forward and backward.

    Rank ``r`` holds its part of the queries, keys and values, as
    [`split_sequence`][mha.parallel.split_sequence] gives it for ``layout``: contiguous slices,
    or zigzag's two chunks, one from each end, which balance the work under the causal mask. At
    each of ``world`` steps it attends from its queries over the keys and values it holds, as
    [`ring_schedule`][mha.parallel.ring_schedule] says, with the kernel
    [`ring_kernel`][mha.parallel.ring_kernel] names (a fused kernel that returns the
    log-sum-exp: SDPA's flash kernel on the CPU, its memory-efficient one on CUDA), merges the
    result into what it has with [`merge`][mha.tiled.merge], and passes those keys and values to
    rank ``r + 1`` while receiving rank ``r - 1``'s: the transfer starts before the step
    computes, so the two overlap (``overlap=False`` waits for it first, to measure what the
    overlap saves). Keys and values travel with their own heads: ``kv_heads`` of them under
    grouped-query attention, not ``heads_num``. Without a process group (``torch.distributed``
    not initialised) it is one rank: ordinary attention.

    Gradients flow back through a second ring: in the backward pass the keys and values go round
    again, sent on before each step computes, and each block's gradient follows one step behind,
    carrying what the ranks it has visited found for it, its transfer overlapping the next step;
    a last step brings every block's gradient to the rank that holds it, so ``q``, ``k`` and ``v``
    get the gradients of the whole sequence's attention (this rank's part of them).

    Every rank must hold a part of the same length (pad the sequence to a multiple of ``world``,
    ``2 * world`` for zigzag) in the same dtype, with the same heads, ``is_causal`` and
    ``layout``: one ``all_gather_object`` of the shapes and flags checks it before the ring
    starts, and every rank raises the same ``ValueError`` if they differ (gloo would abort a rank
    otherwise).

    Args:
        q: this rank's queries, ``[batch_size, heads_num, slice_len, head_size]``.
        k: this rank's keys, ``[batch_size, kv_heads, slice_len, head_size]``; ``kv_heads``
            divides ``heads_num``.
        v: this rank's values, ``[batch_size, kv_heads, slice_len, v_size]``.
        is_causal: the causal mask over the whole sequence.
        group: the process group, or a one-dimensional ``DeviceMesh`` (its group); ``None``
            means the default group.
        layout: ``"contiguous"`` or ``"zigzag"``, how the ranks' parts lie in the sequence.
        overlap: send the next block before computing on this one.
        block_size: the block of [`TiledAttention`][mha.tiled.TiledAttention], where a step runs
            it instead of the fused kernel.

    Returns:
        This rank's part of the output, ``[batch_size, heads_num, slice_len, v_size]``, in
            ``q``'s dtype.

    Raises:
        TypeError: ``is_causal`` or ``overlap`` is not a ``bool``, or ``group`` neither a
            process group, a ``DeviceMesh`` nor ``None``.
        ValueError: the ranks pass different shapes, dtypes, devices, ``is_causal`` or ``layout``
            (the message names the rank and gives every rank's value), ``q``, ``k`` and ``v`` are
            not one part's, ``layout`` is not one of the two, a zigzag part has an odd length, or
            this process is not in ``group``.

    中文:
        序列分到 ``group`` 的各个进程上的注意力，前向和反向都有。

        进程 ``r`` 持有查询、键和值中自己的那部分，就是
        [`split_sequence`][mha.parallel.split_sequence] 按 ``layout`` 给出的：连续的一段，或者
        zigzag 的两段（序列两头各一段，在因果掩码下让各进程的工作量相同）。共 ``world`` 步，每一步
        它按 [`ring_schedule`][mha.parallel.ring_schedule] 用自己的查询对手上的键和值做注意力，用的
        是 [`ring_kernel`][mha.parallel.ring_kernel] 给出的算子（同时返回 log-sum-exp 的融合算子：
        CPU 上是 SDPA 的 flash 算子，CUDA 上是它的 memory-efficient 算子），用
        [`merge`][mha.tiled.merge] 把结果合并进已有的结果，再把这些键和值
        传给进程 ``r + 1``，同时接收进程 ``r - 1`` 的：传输在这一步计算之前就开始，两者同时进行
        （``overlap=False`` 则先等传输完成，用来测量重叠省下了多少）。键和值带着自己的头数传递：
        分组查询注意力下是 ``kv_heads`` 个，而不是 ``heads_num`` 个。没有进程组
        （``torch.distributed`` 没有初始化）时就是一个进程：普通的注意力。

        梯度经过第二个环传回：反向传播时键和值再绕环走一圈，每一步计算之前先发出去；每一块的梯度晚
        一步跟在后面，带着它经过的各个进程为它算出的梯度，传输与下一步的计算同时进行；最后再走一步，
        每一块的梯度就回到持有它的进程，于是 ``q``、``k``、``v`` 得到的就是整条序列的注意力的梯度
        （本进程的那一部分）。

        每个进程持有的部分必须一样长（把序列填充到 ``world`` 的整数倍，zigzag 时是 ``2 * world``
        的整数倍），dtype、头数、``is_causal`` 和 ``layout`` 也必须相同：环开始之前先用一次
        ``all_gather_object`` 收集各进程的形状和选项来检查，不同时每个进程都抛出同样的
        ``ValueError``（否则 gloo 会直接终止某个进程）。

        参数：
            q: 本进程的查询，``[batch_size, heads_num, slice_len, head_size]``。
            k: 本进程的键，``[batch_size, kv_heads, slice_len, head_size]``；``kv_heads`` 整除
                ``heads_num``。
            v: 本进程的值，``[batch_size, kv_heads, slice_len, v_size]``。
            is_causal: 整个序列上的因果掩码。
            group: 进程组，或者一维的 ``DeviceMesh``（用它的进程组）；``None`` 表示默认进程组。
            layout: ``"contiguous"`` 或 ``"zigzag"``，各进程的部分在序列里怎样排布。
            overlap: 在对这一块计算之前先把下一块发出去。
            block_size: 某一步不用融合算子、改用 [`TiledAttention`][mha.tiled.TiledAttention] 时
                的分块大小。

        返回：
            本进程那部分的输出，``[batch_size, heads_num, slice_len, v_size]``，dtype 与 ``q``
                相同。

        异常：
            TypeError: ``is_causal`` 或 ``overlap`` 不是 ``bool``，或者 ``group`` 既不是进程组、
                ``DeviceMesh`` 也不是 ``None``。
            ValueError: 各进程传入的形状、dtype、设备、``is_causal`` 或 ``layout`` 不同（错误信息
                写出是哪个进程，并列出每个进程的值），``q``、``k``、``v`` 不是同一部分的，
                ``layout`` 不是这两种之一，zigzag 的某一部分长度是奇数，或者本进程不在
                ``group`` 里。
    """
    check_flag("is_causal", is_causal)
    check_flag("overlap", overlap)
    _check_layout(layout)
    group = as_process_group(group)
    if not (dist.is_available() and dist.is_initialized()):
        check_slices(q, k, v, layout)
        out, _ = _attend(q, k, v, is_causal, block_size)
        return out.to(q.dtype)
    # 各进程先确认彼此的输入一致（一次 all_gather_object）：形状不同时 gloo 会直接终止进程
    # The ranks first check that their inputs agree (one all_gather_object): with tensors of
    # other sizes gloo aborts the process
    equal = "split the sequence into equal slices (pad it to a multiple of the world size)"
    agree(
        "ring_attention",
        group,
        dict(q=q, k=k, v=v, is_causal=is_causal, layout=layout, grad_mode=torch.is_grad_enabled()),
        hints=dict(q=equal, k=equal, v=equal),
    )
    check_slices(q, k, v, layout)
    options = (is_causal, layout, overlap, group, block_size)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        return _RingAttention.apply(q, k, v, *options)
    out, _ = _ring_forward(q, k, v, *options)
    return out.to(q.dtype)


def check_slices(q: Tensor, k: Tensor, v: Tensor, layout: str) -> None:
    """``q``, ``k`` and ``v`` are one rank's parts: the same positions and batch, key/value heads
    that divide the query heads; two chunks of one length for zigzag."""
    if not (
        q.dim() == k.dim() == v.dim() == 4
        and q.size(0) == k.size(0) == v.size(0)
        and q.size(2) == k.size(2) == v.size(2)
        and k.size(1) == v.size(1)
        and q.size(1) % k.size(1) == 0
        and q.size(-1) == k.size(-1)
    ):
        raise ValueError(
            "q, k, v must be [batch_size, heads_num, slice_len, head_size], [batch_size, "
            "kv_heads, slice_len, head_size] and [batch_size, kv_heads, slice_len, v_size], "
            f"kv_heads dividing heads_num; got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}"
        )
    if layout == "zigzag" and q.size(2) % 2:
        raise ValueError(
            f"layout 'zigzag': a rank's part is two chunks of one length, so slice_len must be "
            f"even, got {q.size(2)} (split the sequence with split_sequence)"
        )


def _neighbours(group: dist.ProcessGroup | None) -> tuple[int, int, int, int]:
    """``world``, ``rank``, and the global ranks after and before this one in the ring."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    after = dist.get_global_rank(group, (rank + 1) % world) if group else (rank + 1) % world
    before = dist.get_global_rank(group, (rank - 1) % world) if group else (rank - 1) % world
    return world, rank, after, before


def _pass_on(
    held: list[Tensor], after: int, before: int, group: dist.ProcessGroup | None, tag: int = 0
) -> tuple[list[Tensor], list]:
    """Start sending ``held`` to ``after`` and receiving as many tensors from ``before``; the
    keys and values travel with ``tag`` 0, their gradients with 1."""
    held = [t.contiguous() for t in held]  # gloo sends only contiguous tensors
    incoming = [torch.empty_like(t) for t in held]
    ops = [dist.P2POp(dist.isend, t, after, group, tag) for t in held]
    ops += [dist.P2POp(dist.irecv, t, before, group, tag) for t in incoming]
    return incoming, dist.batch_isend_irecv(ops)


def _wait(requests: list) -> None:
    for request in requests:
        request.wait()


def _seen(action: str, q: Tensor, k: Tensor) -> tuple[tuple[int, int], tuple[int, int]]:
    """The queries a step is for and the held keys they see, each as ``(start, length)`` along
    the sequence: all of both, but for zigzag's ``"front"`` (every query, the front chunk of the
    keys) and ``"back"`` (the back chunk of the queries, every key)."""
    q_len, k_len = q.size(2), k.size(2)
    if action == "front":
        return (0, q_len), (0, k_len // 2)
    if action == "back":
        return (q_len // 2, q_len - q_len // 2), (0, k_len)
    return (0, q_len), (0, k_len)


def _part(t: Tensor, span: tuple[int, int]) -> Tensor:
    """The positions ``span`` (``(start, length)``) of ``t``, a view along the sequence."""
    return t.narrow(2, *span)


def _merge_into(out: Tensor, lse: Tensor, part_out: Tensor, part_lse: Tensor) -> None:
    """[`merge`][mha.tiled.merge] written into ``out`` and ``lse`` (views of the rows a step
    is for), so that a step allocates only its part's weighted copy, not a whole new output."""
    joined = torch.logaddexp(lse, part_lse)  # [batch_size, heads_num, rows]
    safe = torch.where(torch.isinf(joined), torch.zeros_like(joined), joined)
    out.mul_(torch.exp(lse - safe)[..., None])
    out.add_(part_out * torch.exp(part_lse - safe)[..., None])
    lse.copy_(joined)


def _step_forward(
    q: Tensor, k: Tensor, v: Tensor, action: str, block_size: int
) -> tuple[slice, Tensor, Tensor] | None:
    """What one step adds: the rows of the queries it is for, and their attention and lse over
    the part of the held block they see (``None`` for a skipped block)."""
    if action == "skip":
        return None
    rows, keys = _seen(action, q, k)
    out, lse = _attend(
        _part(q, rows), _part(k, keys), _part(v, keys), action == "causal", block_size
    )
    return rows, out, lse


def _ring_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    is_causal: bool,
    layout: str,
    overlap: bool,
    group,
    block_size: int,
) -> tuple[Tensor, Tensor]:
    """This rank's output and log-sum-exp (float32 at least) over the whole sequence."""
    world, rank, after, before = _neighbours(group)
    held = [k.contiguous(), v.contiguous()]
    out = lse = None
    for step, (_, action) in enumerate(
        ring_schedule(world, rank, is_causal=is_causal, layout=layout)
    ):
        if step < world - 1:
            # 先把手上的键和值发给下一个进程、收上一个的，计算与通信同时进行
            # Pass what it holds on and receive the next, while it computes
            incoming, requests = _pass_on(held, after, before, group)
            if not overlap:  # wait for the transfer before computing
                _wait(requests)
                requests = []
        part = _step_forward(q, *held, action, block_size)
        if part is not None:
            rows, part_out, part_lse = part
            if out is None:  # step 0: the own block, whole or causal, every row
                out, lse = part_out, part_lse
            else:  # zigzag's "back": the back chunk's rows only
                _merge_into(_part(out, rows), _part(lse, rows), part_out, part_lse)
        if step < world - 1:
            _wait(requests)
            held = incoming
    return out, lse


def _step_backward(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    action: str,
    block_size: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """One step's gradients of ``q`` and of the held block, zeros where the step saw nothing."""
    if action == "skip":
        return tuple(torch.zeros(t.shape, dtype=out.dtype, device=t.device) for t in (q, k, v))
    rows, keys = _seen(action, q, k)
    part = _attend_backward(
        _part(dout, rows),
        _part(q, rows),
        _part(k, keys),
        _part(v, keys),
        _part(out, rows),
        _part(lse, rows),
        action == "causal",
        block_size,
    )
    spans = ((rows, q.size(2)), (keys, k.size(2)), (keys, k.size(2)))
    return tuple(_widened(g, span, length) for g, (span, length) in zip(part, spans, strict=True))


def _widened(t: Tensor, span: tuple[int, int], length: int) -> Tensor:
    """``t``, the positions ``span`` of a sequence of ``length``, with zeros at the others."""
    start, size = span
    return F.pad(t, (0, 0, start, length - start - size))


def _ring_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    dout: Tensor,
    is_causal: bool,
    layout: str,
    overlap: bool,
    group,
    block_size: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """The gradients of ``q``, ``k`` and ``v`` on this rank: the keys and values go round the
    ring again, sent on before each step computes; each block's gradient follows one step behind
    (its transfer overlapping the next step), and a last step brings every block's gradient home."""
    world, rank, after, before = _neighbours(group)
    dq = None
    # 连续的张量：gloo 只发送连续的张量，而 MHA 传来的 k、v 是 .view(...).transpose(1, 2)
    # Contiguous tensors: gloo sends only those, and MHA's k and v are .view(...).transpose(1, 2)
    held = [k.contiguous(), v.contiguous()]
    grads = grad_requests = None
    for step, (_, action) in enumerate(
        ring_schedule(world, rank, is_causal=is_causal, layout=layout)
    ):
        if step < world - 1:
            incoming, requests = _pass_on(held, after, before, group)
            if not overlap:  # wait for the transfer before computing
                _wait(requests)
                requests = []
        part_q, part_k, part_v = _step_backward(dout, q, *held, out, lse, action, block_size)
        dq = part_q if dq is None else dq + part_q
        if grad_requests is not None:  # what the ranks before found for this block
            _wait(grad_requests)
            part_k, part_v = grads[0] + part_k, grads[1] + part_v
        if step < world - 1:
            _wait(requests)
            held = incoming
        if world == 1:  # the rank holds its own block: nothing to send, to itself least of all
            return dq, part_k, part_v
        # 这一块的梯度传给下一个进程，与下一步的计算同时进行；最后一次就回到它的主人
        # This block's gradient goes on to the next rank while the next step computes; the last
        # time, to the rank that owns it
        grads, grad_requests = _pass_on([part_k, part_v], after, before, group, tag=1)
    _wait(grad_requests)
    return dq, grads[0], grads[1]


class _RingAttention(torch.autograd.Function):
    """``ring_attention`` with its backward ring."""

    @staticmethod
    def forward(ctx: Any, q, k, v, is_causal, layout, overlap, group, block_size):
        out, lse = _ring_forward(q, k, v, is_causal, layout, overlap, group, block_size)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = (is_causal, layout, overlap, group, block_size)
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx: Any, dout: Tensor):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _ring_backward(q, k, v, out, lse, dout, *ctx.options)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None, None
