"""Attention across devices, on ``torch.distributed`` (多卡上的注意力).

``shard_heads`` splits the heads: each rank keeps some query heads' rows of ``W_q``, ``W_k``,
``W_v`` and the matching columns of ``W_o``, and one all-reduce joins their outputs (tensor
parallelism).
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
import torch.nn as nn
from torch import Tensor

from mha.full import MHA, _check_flag
from mha.tiled import TiledAttention, merge

__all__ = ["HeadsAcrossRanks", "ring_attention", "shard_heads"]


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


def _reduce(t: Tensor, group: dist.ProcessGroup | None) -> Tensor:
    """The sum over the ranks of ``group``, differentiable (the one collective of a forward)."""
    from torch.distributed.nn.functional import all_reduce

    return all_reduce(t, group=group or dist.group.WORLD)


class HeadsAcrossRanks(nn.Module):
    """A [`mha.full.MHA`][mha.full.MHA] whose heads are split across the ranks of a process group.

    Made by [`shard_heads`][mha.parallel.shard_heads]. ``local`` is an ordinary ``MHA`` with this
    rank's query heads (and the key/value heads they use); its output, the part of ``W_o``'s
    product that these heads give, is summed over the ranks by one all-reduce, so every rank
    returns the whole module's output.

    Args:
        local: this rank's ``MHA``.
        group: the process group (``None``: the default one).

    中文:
        头分到进程组各个进程上的 [`mha.full.MHA`][mha.full.MHA]。

        由 [`shard_heads`][mha.parallel.shard_heads] 构造。``local`` 是一个普通的 ``MHA``，只有
        本进程的查询头（以及它们用到的键/值头）；它的输出是这些头对 ``W_o`` 乘积的贡献，一次
        all-reduce 在各进程间求和，所以每个进程返回的都是整个模块的输出。

        参数:
            local: 本进程的 ``MHA``。
            group: 进程组（``None``：默认进程组）。
    """

    def __init__(self, local: MHA, group: dist.ProcessGroup | None) -> None:
        super().__init__()
        self.local = local
        self.group = group

    def forward(self, *args: object, **kwargs: object) -> Tensor | tuple[Tensor, Tensor]:
        """``local``'s forward (the same arguments as ``MHA.forward``; a cache holds this rank's
        key/value heads), then the sum over the ranks.

        Args:
            *args: what ``MHA.forward`` takes.
            **kwargs: its keywords.

        Returns:
            The whole module's output on every rank; with ``need_weights``, also this rank's
                heads' weights.

        中文:
            先调用 ``local`` 的前向计算（参数与 ``MHA.forward`` 相同；缓存里存的是本进程的
            键/值头），再在各进程间求和。

            参数:
                *args: ``MHA.forward`` 的参数。
                **kwargs: 它的关键字参数。

            返回:
                每个进程上都是整个模块的输出；``need_weights`` 为真时再返回本进程各头的注意力权重。
        """
        out = self.local(*args, **kwargs)
        if isinstance(out, tuple):
            return _reduce(out[0], self.group), out[1]
        return _reduce(out, self.group)


def shard_heads(model: MHA, group: dist.ProcessGroup | None = None) -> HeadsAcrossRanks:
    """Split ``model``'s heads across the ranks of ``group`` (tensor parallelism).

    Each of ``world`` ranks keeps ``heads_num / world`` query heads: their rows of ``W_q`` and
    columns of ``W_o``. Key/value heads are split too when ``world`` divides ``kv_heads``;
    when there are fewer key/value heads than ranks, each rank keeps a copy of the one its query
    heads share (as inference servers do). ``W_o``'s bias stays on rank 0 only, so the sum adds it
    once. Every option of ``model`` carries over.

    Args:
        model: the module to split, the same on every rank.
        group: the process group; ``None`` means the default group.

    Returns:
        A [`HeadsAcrossRanks`][mha.parallel.HeadsAcrossRanks]: called like ``model``, it gives
            ``model``'s output on every rank with one all-reduce.

    Raises:
        TypeError: ``model`` is not a ``mha.full.MHA``.
        ValueError: ``heads_num`` is not divisible by the world size, or the key/value heads can
            be neither split nor shared (the message names ``heads_num``, ``kv_heads`` and the
            world size).

    中文:
        把 ``model`` 的头分到 ``group`` 的各个进程上（张量并行）。

        ``world`` 个进程各留 ``heads_num / world`` 个查询头：它们在 ``W_q`` 里的行和在 ``W_o``
        里的列。``world`` 整除 ``kv_heads`` 时键/值头也分开；键/值头比进程少时，每个进程各复制一份
        它的查询头共用的那个（推理服务就是这样做的）。``W_o`` 的偏置只留在第 0 个进程上，求和时只加
        一次。``model`` 的其他选项全部保留。

        参数:
            model: 要拆分的模块，每个进程上都相同。
            group: 进程组；``None`` 表示默认进程组。

        返回:
            一个 [`HeadsAcrossRanks`][mha.parallel.HeadsAcrossRanks]：调用方式与 ``model`` 相同，
                每个进程上都得到 ``model`` 的输出，只用一次 all-reduce。

        引发:
            TypeError: ``model`` 不是 ``mha.full.MHA``。
            ValueError: ``heads_num`` 不能被进程数整除，或者键/值头既不能拆分也不能共用（错误信息
                会写出 ``heads_num``、``kv_heads`` 和进程数）。
    """
    if not isinstance(model, MHA):
        raise TypeError(f"model must be a mha.full.MHA, got {type(model).__name__}")
    world = dist.get_world_size(group) if dist.is_initialized() else 1
    rank = dist.get_rank(group) if dist.is_initialized() else 0
    heads, kv_heads, d = model.heads_num, model.kv_heads, model.head_size
    if heads % world:
        raise ValueError(f"heads_num ({heads}) must be divisible by the world size ({world})")
    local_heads, groups = heads // world, heads // kv_heads
    first_q = rank * local_heads
    if kv_heads % world == 0:
        local_kv, first_kv = kv_heads // world, rank * (kv_heads // world)
    elif groups % local_heads == 0:  # fewer key/value heads than ranks: this rank's heads share one
        local_kv, first_kv = 1, first_q // groups
    else:
        raise ValueError(
            f"kv_heads ({kv_heads}) can be neither split over the world size ({world}) nor "
            f"shared: each rank's heads_num / world = {local_heads} query heads must use one "
            f"key/value head (heads_num ({heads}) / kv_heads = {groups} must be a multiple of "
            f"{local_heads})"
        )
    biased = tuple(n for n in ("W_q", "W_k", "W_v", "W_o") if getattr(model, n).bias is not None)
    local = MHA(
        model.hidden_size,
        local_heads,
        kv_heads=local_kv,
        head_size=d,
        dropout=model.dropout,
        bias=biased,
        fast=model.fast,
        context_size=model.context_size,
        scale=model.scale,
        qk_norm=model.q_norm is not None,
        norm_eps=model.q_norm.eps if model.q_norm is not None else 1e-6,
        rope=model.rope,
        window=model.window,
    ).to(device=model.W_q.weight.device, dtype=model.W_q.weight.dtype)
    rows_q = slice(first_q * d, (first_q + local_heads) * d)
    rows_kv = slice(first_kv * d, (first_kv + local_kv) * d)
    with torch.no_grad():
        for name, rows in (("W_q", rows_q), ("W_k", rows_kv), ("W_v", rows_kv)):
            getattr(local, name).weight.copy_(getattr(model, name).weight[rows])
            if name in biased:
                getattr(local, name).bias.copy_(getattr(model, name).bias[rows])
        local.W_o.weight.copy_(model.W_o.weight[:, rows_q])
        if "W_o" in biased:
            local.W_o.bias.copy_(model.W_o.bias if rank == 0 else torch.zeros_like(model.W_o.bias))
        if model.q_norm is not None:
            local.q_norm.weight.copy_(model.q_norm.weight)
            local.k_norm.weight.copy_(model.k_norm.weight)
    return HeadsAcrossRanks(local.train(model.training), group)
