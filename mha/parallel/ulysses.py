"""The sequence across ranks the other way: DeepSpeed-Ulysses' all-to-all, ``ulysses_attention``.

Each rank holds a contiguous slice of the positions with every head. One all-to-all trades
positions for heads: afterwards each rank holds ``heads_num / world`` heads over the whole
sequence, attends over them with SDPA as one process would, and a second all-to-all trades them
back.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from mha.checks import check_flag
from mha.parallel.group import agree, as_process_group
from mha.parallel.ring import check_slices


class _AllToAll(torch.autograd.Function):
    """``all_to_all_single`` of ``[world, ...]``: chunk ``i`` goes to rank ``i``, and chunk ``i``
    of the result came from rank ``i``. Its backward is the same exchange of the gradient."""

    @staticmethod
    def forward(ctx: Any, t: Tensor, group: dist.ProcessGroup | None) -> Tensor:
        ctx.group = group
        t = t.contiguous()  # and so the result: empty_like keeps a view's strides
        out = torch.empty_like(t)
        dist.all_to_all_single(out, t, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        grad = grad.contiguous()
        out = torch.empty_like(grad)
        dist.all_to_all_single(out, grad, group=ctx.group)
        return out, None


def _positions_to_heads(t: Tensor, world: int, group) -> Tensor:
    """``[batch_size, heads, slice_len, d]`` of this rank's positions, every head ->
    ``[batch_size, heads / world, world * slice_len, d]``: this rank's heads, every position."""
    b, h, n, d = t.shape
    t = t.view(b, world, h // world, n, d).transpose(0, 1)  # [world, batch_size, h / world, n, d]
    t = _AllToAll.apply(t, group)  # chunk i: rank i's positions of this rank's heads
    return t.permute(1, 2, 0, 3, 4).reshape(b, h // world, world * n, d)


def _heads_to_positions(t: Tensor, world: int, group) -> Tensor:
    """The inverse: ``[batch_size, heads / world, seq_len, d]`` -> ``[batch_size, heads,
    seq_len / world, d]``."""
    b, h, length, d = t.shape
    n = length // world
    t = t.view(b, h, world, n, d).permute(2, 0, 1, 3, 4)  # [world, batch_size, h, n, d]
    t = _AllToAll.apply(t, group)  # chunk i: rank i's heads at this rank's positions
    return t.transpose(0, 1).reshape(b, world * h, n, d)


def ulysses_attention(
    q: Tensor, k: Tensor, v: Tensor, *, is_causal: bool = False, group: Any = None
) -> Tensor:
    """Attention over a sequence split across the ranks of ``group``, by DeepSpeed-Ulysses'
    all-to-all, forward and backward.

    Rank ``r`` of ``world`` holds positions ``r * slice_len`` to ``(r + 1) * slice_len - 1`` of
    the queries, keys and values, every head. An all-to-all sends each rank ``heads_num / world``
    of the heads at these positions and receives its own heads at every rank's positions, so it
    holds ``[batch_size, heads_num / world, seq_len, head_size]``: whole heads over the whole
    sequence, which SDPA attends as one process does (the causal mask included, grouped-query
    attention with ``kv_heads / world`` key/value heads). A second all-to-all brings the output
    back to this rank's positions, every head. Two all-to-alls of ``q``, ``k``, ``v`` and the
    output, each ``(world - 1) / world`` of the rank's part: the volume does not grow with
    ``world``, where a ring sends ``world - 1`` blocks of keys and values; but the heads bound
    ``world`` (``kv_heads`` must divide by it), and each rank holds a whole sequence's scores for
    its heads, in blocks as the fused kernel computes them. Without a process group it is one
    rank: ordinary attention.

    Args:
        q: this rank's queries, ``[batch_size, heads_num, slice_len, head_size]``.
        k: this rank's keys, ``[batch_size, kv_heads, slice_len, head_size]``.
        v: this rank's values, ``[batch_size, kv_heads, slice_len, v_size]``.
        is_causal: the causal mask over the whole sequence.
        group: the process group, or a one-dimensional ``DeviceMesh`` (its group); ``None``
            means the default group.

    Returns:
        This rank's slice of the output, ``[batch_size, heads_num, slice_len, v_size]``.

    Raises:
        TypeError: ``is_causal`` is not a ``bool``, or ``group`` neither a process group, a
            ``DeviceMesh`` nor ``None``.
        ValueError: the ranks pass different shapes, dtypes or ``is_causal`` (the message names
            the rank), ``q``, ``k`` and ``v`` are not one slice's, the world size divides neither
            ``heads_num`` nor ``kv_heads`` (DeepSpeed-Ulysses' condition: the heads are what it
            splits), or this process is not in ``group``.

    中文:
        序列分到 ``group`` 的各个进程上的注意力，用 DeepSpeed-Ulysses 的 all-to-all，前向和反向
        都有。

        ``world`` 个进程中，进程 ``r`` 持有查询、键和值的位置
        ``r * slice_len``–``(r + 1) * slice_len - 1``，所有的头。一次 all-to-all 把这些位置上的头
        分给各个进程，每个进程 ``heads_num / world`` 个，同时收回自己那几个头在所有进程的位置上的
        值，于是它持有 ``[batch_size, heads_num / world, seq_len, head_size]``：完整的头、完整的
        序列，SDPA 像单进程一样对它做注意力（因果掩码照用，分组查询注意力时有
        ``kv_heads / world`` 个键/值头）。第二次 all-to-all 把输出换回本进程的位置、所有的头。两次
        all-to-all 传的是 ``q``、``k``、``v`` 和输出，每次是本进程那部分的 ``(world - 1) / world``：
        通信量不随 ``world`` 增长，而环形注意力要传 ``world - 1`` 块键和值；但头数限制了
        ``world``（``kv_heads`` 必须能被它整除），而且每个进程要为自己的头算整条序列的分数（融合
        算子分块计算）。没有进程组时就是一个进程：普通的注意力。

        参数：
            q: 本进程的查询，``[batch_size, heads_num, slice_len, head_size]``。
            k: 本进程的键，``[batch_size, kv_heads, slice_len, head_size]``。
            v: 本进程的值，``[batch_size, kv_heads, slice_len, v_size]``。
            is_causal: 整个序列上的因果掩码。
            group: 进程组，或者一维的 ``DeviceMesh``（用它的进程组）；``None`` 表示默认进程组。

        返回：
            本进程那一段的输出，``[batch_size, heads_num, slice_len, v_size]``。

        异常：
            TypeError: ``is_causal`` 不是 ``bool``，或者 ``group`` 既不是进程组、``DeviceMesh``
                也不是 ``None``。
            ValueError: 各进程传入的形状、dtype 或 ``is_causal`` 不同（错误信息写出是哪个进程），
                ``q``、``k``、``v`` 不是同一段的，进程数不能整除 ``heads_num`` 或 ``kv_heads``
                （DeepSpeed-Ulysses 的条件：它拆的就是头），或者本进程不在 ``group`` 里。
    """
    check_flag("is_causal", is_causal)
    group = as_process_group(group)
    check_slices(q, k, v, "contiguous")
    gqa = k.size(1) != q.size(1)
    if not (dist.is_available() and dist.is_initialized()):
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=gqa)
    world = dist.get_world_size(group)
    agree(
        "ulysses_attention",
        group,
        dict(q=q, k=k, v=v, is_causal=is_causal, grad_mode=torch.is_grad_enabled()),
    )
    for name, heads in (("heads_num", q.size(1)), ("kv_heads", k.size(1))):
        if heads % world:
            raise ValueError(
                f"ulysses_attention: {name} ({heads}) must be divisible by the world size "
                f"({world}): the all-to-all gives each rank {name} / world whole heads "
                "(ring_attention splits the sequence without that condition)"
            )
    # 位置换头：本进程的 heads / world 个头，整条序列
    # Positions for heads: this rank's heads / world heads, the whole sequence
    q, k, v = (_positions_to_heads(t, world, group) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=gqa)
    return _heads_to_positions(out, world, group)  # [batch_size, heads_num, slice_len, v_size]
