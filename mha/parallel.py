"""Attention across devices, on ``torch.distributed`` (多卡上的注意力).

``ring_attention`` splits the sequence: each rank holds a contiguous slice of the positions, the
keys and values travel round the ring of ranks, one neighbour to the next, and each rank merges
the partial results of its queries with [`merge`][mha.tiled.merge], so no rank ever holds the
whole sequence's keys. It runs on any backend with point-to-point operations (gloo on CPU, nccl
on CUDA). PyTorch's own context-parallel API (``torch.distributed.tensor.experimental.
context_parallel``) does this inside SDPA on GPUs; in this torch build it does not run on the CPU
(its CPU flash kernel has no sharding rule).

Shape comments use these names: ``batch_size``, ``heads_num``, ``head_size``, ``v_size``, and
``slice_len``, the positions each rank holds (the sequence's length over the world size).

Examples:
    >>> import torch
    >>> from mha.parallel import ring_attention
    >>> q = k = v = torch.randn(1, 2, 3, 4)
    >>> ring_attention(q, k, v).shape  # without a process group: one rank, the whole sequence
    torch.Size([1, 2, 3, 4])
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from mha.full import _check_flag
from mha.tiled import TiledAttention, merge

__all__ = ["ring_attention"]


def ring_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    is_causal: bool = False,
    group: dist.ProcessGroup | None = None,
    block_size: int = 64,
) -> Tensor:
    """Attention over a sequence split across the ranks of ``group``, forward only.

    Rank ``r`` of ``world`` ranks holds positions ``r * slice_len .. (r + 1) * slice_len - 1`` of
    the queries, keys and values. At each of ``world`` steps it attends from its queries over the
    keys and values it holds, merges the result into what it has, and passes those keys and values
    to rank ``r + 1`` while receiving rank ``r - 1``'s. Under the causal mask a block of keys from
    a later rank is skipped (none of its positions is visible), the rank's own block gets the
    causal mask, and earlier ranks' blocks are visible whole. Without a process group
    (``torch.distributed`` not initialised) it is one rank: ordinary attention.

    Args:
        q: this rank's queries, ``[batch_size, heads_num, slice_len, head_size]``.
        k: this rank's keys, ``[batch_size, heads_num, slice_len, head_size]``.
        v: this rank's values, ``[batch_size, heads_num, slice_len, v_size]``.
        is_causal: the causal mask over the whole sequence.
        group: the process group; ``None`` means the default group.
        block_size: the block of [`TiledAttention`][mha.tiled.TiledAttention] within a step.

    Returns:
        This rank's slice of the output, ``[batch_size, heads_num, slice_len, v_size]``, in ``q``'s
            dtype.

    Raises:
        TypeError: ``is_causal`` is not a ``bool``.

    中文:
        序列分到 ``group`` 的各个进程上的注意力，只有前向计算。

        ``world`` 个进程中的第 ``r`` 个持有查询、键和值的位置 ``r * slice_len`` 到
        ``(r + 1) * slice_len - 1``。共 ``world`` 步，每一步它用自己的查询对手上的键和值做注意力，
        把结果合并进已有的结果，再把这些键和值传给第 ``r + 1`` 个进程，同时接收第 ``r - 1``
        个进程的。在因果掩码下，来自后面进程的一块键整块跳过（一个位置都看不到），自己那一块加因果掩码，前面
        进程的整块可见。没有进程组（``torch.distributed`` 没有初始化）时就是一个进程：普通的注意力。

        参数:
            q: 本进程的查询，``[batch_size, heads_num, slice_len, head_size]``。
            k: 本进程的键，``[batch_size, heads_num, slice_len, head_size]``。
            v: 本进程的值，``[batch_size, heads_num, slice_len, v_size]``。
            is_causal: 整个序列上的因果掩码。
            group: 进程组；``None`` 表示默认进程组。
            block_size: 每一步里 [`TiledAttention`][mha.tiled.TiledAttention] 的分块大小。

        返回:
            本进程那一段的输出，``[batch_size, heads_num, slice_len, v_size]``，dtype 与 ``q``
                相同。

        引发:
            TypeError: ``is_causal`` 不是 ``bool``。
    """
    _check_flag("is_causal", is_causal)
    tiled = TiledAttention(block_size)
    if not (dist.is_available() and dist.is_initialized()):
        out, _ = tiled(q, k, v, is_causal=is_causal)
        return out.to(q.dtype)
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    after = dist.get_global_rank(group, (rank + 1) % world) if group else (rank + 1) % world
    before = dist.get_global_rank(group, (rank - 1) % world) if group else (rank - 1) % world
    held_k, held_v = k.contiguous(), v.contiguous()
    out = lse = None
    for step in range(world):
        source = (rank - step) % world  # whose positions this rank holds at this step
        if step < world - 1:
            # 先把手上的键和值发给下一个进程、收上一个的，计算与通信同时进行
            # Pass what it holds on and receive the next, while it computes
            next_k, next_v = torch.empty_like(held_k), torch.empty_like(held_v)
            requests = dist.batch_isend_irecv(
                [
                    dist.P2POp(dist.isend, held_k, after, group),
                    dist.P2POp(dist.isend, held_v, after, group),
                    dist.P2POp(dist.irecv, next_k, before, group),
                    dist.P2POp(dist.irecv, next_v, before, group),
                ]
            )
        if not is_causal or source <= rank:
            # 后面进程的键一个都看不到：跳过；自己那一块加因果掩码；前面进程的整块可见
            # A later rank's keys are all invisible: skipped; its own block is causal; an
            # earlier rank's is visible whole
            part = tiled(q, held_k, held_v, is_causal=is_causal and source == rank)
            out, lse = part if out is None else merge(out, lse, *part)
        if step < world - 1:
            for request in requests:
                request.wait()
            held_k, held_v = next_k, next_v
    return out.to(q.dtype)
