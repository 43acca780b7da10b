"""Attention across devices, on ``torch.distributed`` (多卡上的注意力).

``shard_heads`` splits the heads: each rank keeps some query heads' rows of ``W_q``, ``W_k``,
``W_v`` and the matching columns of ``W_o``, and one all-reduce joins their outputs (tensor
parallelism). ``heads_on_rank`` is the part one rank keeps, as an ordinary module, so the split
can be followed in one process.
``ring_attention`` splits the sequence: each rank holds a contiguous slice of the positions, the
keys and values travel round the ring of ranks, one neighbour to the next, and each rank merges
the partial results of its queries with [`merge`][mha.tiled.merge], so no rank ever holds the
whole sequence's keys. ``ring_schedule`` says which keys a rank holds at each step, and what it
does with them. It runs on any backend with point-to-point operations (gloo on CPU, nccl on
CUDA). PyTorch's own context-parallel API (``torch.distributed.tensor.experimental.
context_parallel``) does this inside SDPA on GPUs; in this torch build it does not run on the CPU
(its CPU flash kernel has no sharding rule).

``launch`` runs a function on ``world`` processes forked from this one, joined in a gloo group:
the tests, the chapters and ``python -m mha.parallel`` use it; ``torchrun --nproc-per-node 2 -m
mha.parallel`` runs the same example on processes that ``torchrun`` starts.

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

import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from mha.checks import _check_flag, _check_length
from mha.full import MHA
from mha.tiled import TiledAttention, merge

__all__ = [
    "HeadsAcrossRanks",
    "head_ranges",
    "heads_on_rank",
    "launch",
    "ring_attention",
    "ring_schedule",
    "shard_heads",
]

Action = Literal["whole", "causal", "skip"]


def ring_schedule(world: int, rank: int, *, is_causal: bool = False) -> list[tuple[int, Action]]:
    """What rank ``rank`` of a ring of ``world`` does at each step of ``ring_attention``.

    At step ``s`` the rank holds the keys and values of rank ``(rank - s) % world`` (its own at
    step 0; each step they move one rank on). Without the causal mask every block is attended
    whole. With it, the rank's own block gets the causal mask, an earlier rank's block is visible
    whole, and a later rank's block is skipped: its positions all come after the rank's queries.

    Args:
        world: the ranks in the ring.
        rank: this rank, ``0`` to ``world - 1``.
        is_causal: the causal mask over the whole sequence.

    Returns:
        One ``(source, action)`` per step: whose keys the rank holds, and ``"whole"``,
            ``"causal"`` or ``"skip"``.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: ``world`` is not positive or ``rank`` is not in ``0`` to ``world - 1``.

    Examples:
        >>> ring_schedule(4, 2, is_causal=True)
        [(2, 'causal'), (1, 'whole'), (0, 'whole'), (3, 'skip')]

    中文:
        ``ring_attention`` 中，``world`` 个进程组成的环里进程 ``rank`` 每一步做什么。

        在步 ``s``，这个进程手上是进程 ``(rank - s) % world`` 的键和值（步 0 是自己的；
        每一步它们往后传一个进程）。没有因果掩码时每一块都整块参与注意力。有因果掩码时，自己那一块加因果
        掩码，前面进程的块整块可见，后面进程的块跳过：那些位置全在本进程的查询之后。

        参数：
            world: 环里的进程数。
            rank: 本进程的编号，0–``world - 1``。
            is_causal: 整个序列上的因果掩码。

        返回：
            每一步一个 ``(source, action)``：手上是谁的键，以及 ``"whole"``（整块）、
                ``"causal"``（因果掩码）或 ``"skip"``（跳过）。

        异常：
            TypeError: 参数类型不对。
            ValueError: ``world`` 不是正数，或者 ``rank`` 不在 0–``world - 1`` 之间。
    """
    _check_length("world", world, positive=True)
    _check_length("rank", rank)
    _check_flag("is_causal", is_causal)
    if rank >= world:
        raise ValueError(f"rank must be in 0 to world - 1 = {world - 1}, got {rank}")
    steps: list[tuple[int, Action]] = []
    for step in range(world):
        source = (rank - step) % world
        if not is_causal:
            steps.append((source, "whole"))
        else:
            steps.append(
                (source, "causal" if source == rank else "whole" if source < rank else "skip")
            )
    return steps


def ring_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    is_causal: bool = False,
    group: dist.ProcessGroup | None = None,
    block_size: int = 64,
) -> Tensor:
    """Attention over a sequence split across the ranks of ``group``, forward and backward.

    Rank ``r`` of ``world`` ranks holds positions ``r * slice_len`` to ``(r + 1) * slice_len - 1``
    of the queries, keys and values. At each of ``world`` steps it attends from its queries over
    the keys and values it holds, as [`ring_schedule`][mha.parallel.ring_schedule] says, merges the
    result into what it has, and passes those keys and values to rank ``r + 1`` while receiving
    rank ``r - 1``'s. Without a process group (``torch.distributed`` not initialised) it is one
    rank: ordinary attention.

    Gradients flow back through a second ring: in the backward pass the keys and values go round
    again, each block carrying the gradient that the ranks it has visited found for it, and one
    more step brings every block's gradient to the rank that holds it, so ``q``, ``k`` and ``v``
    get the gradients of the whole sequence's attention (only this rank's part of them).

    Every rank must hold a slice of the same length (pad the sequence to a multiple of
    ``world``) in the same dtype, with the same heads and ``is_causal``: one
    ``all_gather_object`` of the shapes and flags checks it before the ring starts, and every rank
    raises the same ``ValueError`` if they differ (gloo would abort a rank otherwise).

    Args:
        q: this rank's queries, ``[batch_size, heads_num, slice_len, head_size]``.
        k: this rank's keys, ``[batch_size, heads_num, slice_len, head_size]``.
        v: this rank's values, ``[batch_size, heads_num, slice_len, v_size]``.
        is_causal: the causal mask over the whole sequence.
        group: the process group, or a one-dimensional ``DeviceMesh`` (its group); ``None``
            means the default group.
        block_size: the block of [`TiledAttention`][mha.tiled.TiledAttention] within a step.

    Returns:
        This rank's slice of the output, ``[batch_size, heads_num, slice_len, v_size]``, in ``q``'s
            dtype.

    Raises:
        TypeError: ``is_causal`` is not a ``bool``, or ``group`` neither a process group, a
            ``DeviceMesh`` nor ``None``.
        ValueError: the ranks pass different shapes, dtypes, devices or ``is_causal`` (the
            message names the rank and gives every rank's value), ``q``, ``k`` and ``v`` are not
            one slice's, or this process is not in ``group``.

    中文:
        序列分到 ``group`` 的各个进程上的注意力，前向和反向都有。

        ``world`` 个进程中，进程 ``r`` 持有查询、键和值的位置
        ``r * slice_len``–``(r + 1) * slice_len - 1``。共 ``world`` 步，每一步它按
        [`ring_schedule`][mha.parallel.ring_schedule] 用自己的查询对手上的键和值做注意力，把结果
        合并进已有的结果，再把这些键和值传给进程 ``r + 1``，同时接收进程 ``r - 1`` 的。
        没有进程组（``torch.distributed`` 没有初始化）时就是一个进程：普通的注意力。

        梯度经过第二个环传回：反向传播时键和值再绕环走一圈，每一块带着它经过的各个进程为它算出的梯度，
        再多走一步，每一块的梯度就回到持有它的进程，于是 ``q``、``k``、``v`` 得到的就是整条序列的
        注意力的梯度（本进程的那一部分）。

        每个进程持有的段必须一样长（把序列填充到 ``world`` 的整数倍），dtype、头数和 ``is_causal``
        也必须相同：环开始之前先用一次 ``all_gather_object`` 收集各进程的形状和选项来检查，不同时
        每个进程都抛出同样的 ``ValueError``（否则 gloo 会直接终止某个进程）。

        参数：
            q: 本进程的查询，``[batch_size, heads_num, slice_len, head_size]``。
            k: 本进程的键，``[batch_size, heads_num, slice_len, head_size]``。
            v: 本进程的值，``[batch_size, heads_num, slice_len, v_size]``。
            is_causal: 整个序列上的因果掩码。
            group: 进程组，或者一维的 ``DeviceMesh``（用它的进程组）；``None`` 表示默认进程组。
            block_size: 每一步里 [`TiledAttention`][mha.tiled.TiledAttention] 的分块大小。

        返回：
            本进程那一段的输出，``[batch_size, heads_num, slice_len, v_size]``，dtype 与 ``q``
                相同。

        异常：
            TypeError: ``is_causal`` 不是 ``bool``，或者 ``group`` 既不是进程组、``DeviceMesh``
                也不是 ``None``。
            ValueError: 各进程传入的形状、dtype、设备或 ``is_causal`` 不同（错误信息写出是哪个
                进程，并列出每个进程的值），``q``、``k``、``v`` 不是同一段的，或者本进程不在
                ``group`` 里。
    """
    _check_flag("is_causal", is_causal)
    group = _process_group(group)
    if not (dist.is_available() and dist.is_initialized()):
        _check_slices(q, k, v)
        out, _ = TiledAttention(block_size)(q, k, v, is_causal=is_causal)
        return out.to(q.dtype)
    # 各进程先确认彼此的输入一致（一次 all_gather_object）：形状不同时 gloo 会直接终止进程
    # The ranks first check that their inputs agree (one all_gather_object): with tensors of
    # other sizes gloo aborts the process
    equal = "split the sequence into equal slices (pad it to a multiple of the world size)"
    _agree(
        "ring_attention",
        group,
        dict(q=q, k=k, v=v, is_causal=is_causal, grad_mode=torch.is_grad_enabled()),
        hints=dict(q=equal, k=equal, v=equal),
    )
    _check_slices(q, k, v)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        return _RingAttention.apply(q, k, v, is_causal, group, block_size)
    out, _ = _ring_forward(q, k, v, is_causal, group, block_size)
    return out.to(q.dtype)


def _process_group(group: Any) -> dist.ProcessGroup | None:
    """``group`` as a process group: ``None`` (the default group), a ``ProcessGroup``, or a
    one-dimensional ``DeviceMesh`` (its group); when ``torch.distributed`` is initialised, this
    process must be one of its ranks."""
    if hasattr(group, "get_group") and hasattr(group, "ndim"):  # a DeviceMesh
        if group.ndim != 1:
            raise ValueError(f"group: the mesh must have one dimension, got {group.ndim}")
        group = group.get_group()
    if dist.is_available() and group is dist.GroupMember.NON_GROUP_MEMBER:
        # what new_group gives a process it leaves out
        raise ValueError(
            f"group must contain this process: global rank {dist.get_rank()} is not among the "
            "group's ranks (new_group gave it GroupMember.NON_GROUP_MEMBER)"
        )
    if group is not None and not (dist.is_available() and isinstance(group, dist.ProcessGroup)):
        raise TypeError(
            "group must be a torch.distributed.ProcessGroup, a one-dimensional DeviceMesh or "
            f"None, got {type(group).__name__} ({group!r})"
        )
    if group is not None and dist.is_initialized() and dist.get_rank(group) < 0:
        raise ValueError(
            f"group must contain this process: global rank {dist.get_rank()} is not among the "
            f"group's ranks {dist.get_process_group_ranks(group)}"
        )
    return group


def _described(value: Any) -> Any:
    """What the ranks must agree on about ``value``: a tensor's dtype, shape, device type and
    whether it requires a gradient; a plain value itself; anything else its type (and length)."""
    if isinstance(value, Tensor):
        grad = ", requires grad" if value.requires_grad else ""
        return f"{value.dtype} {list(value.shape)} on {value.device.type}{grad}"
    if value is None or isinstance(value, bool | int | float | str):
        return value
    length = f" of length {len(value)}" if hasattr(value, "__len__") else ""
    return f"{type(value).__name__}{length}"


def _agree(
    caller: str,
    group: dist.ProcessGroup | None,
    values: dict[str, Any],
    hints: dict[str, str] | None = None,
) -> None:
    """Raise the same ``ValueError`` on every rank of ``group`` when the ranks pass different
    ``values`` (as ``_described`` gives them), with ``hints[name]`` after the values: one
    ``all_gather_object``, so that no rank is left waiting in a collective that another has not
    joined, or aborted by gloo."""
    mine = {name: _described(value) for name, value in values.items()}
    every: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(every, mine, group=group)
    for name in mine:
        seen = [rank_values[name] for rank_values in every]
        odd = next((rank for rank, value in enumerate(seen) if value != seen[0]), None)
        if odd is not None:
            listed = "; ".join(f"rank {rank}: {value}" for rank, value in enumerate(seen))
            raise ValueError(
                f"{caller}: every rank of the group must pass the same {name}; rank {odd} has "
                f"{seen[odd]} where rank 0 has {seen[0]} ({listed})"
                + (f": {hints[name]}" if hints and name in hints else "")
            )


def _check_slices(q: Tensor, k: Tensor, v: Tensor) -> None:
    """``q``, ``k`` and ``v`` are one rank's slices: the same positions, heads and batch."""
    if not (
        q.dim() == k.dim() == v.dim() == 4
        and q.shape[:3] == k.shape[:3] == v.shape[:3]
        and q.size(-1) == k.size(-1)
    ):
        raise ValueError(
            "q, k, v must be [batch_size, heads_num, slice_len, head_size], [batch_size, "
            "heads_num, slice_len, head_size] and [batch_size, heads_num, slice_len, v_size]; "
            f"got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}"
        )


def _neighbours(group: dist.ProcessGroup | None) -> tuple[int, int, int, int]:
    """``world``, ``rank``, and the global ranks after and before this one in the ring."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    after = dist.get_global_rank(group, (rank + 1) % world) if group else (rank + 1) % world
    before = dist.get_global_rank(group, (rank - 1) % world) if group else (rank - 1) % world
    return world, rank, after, before


def _pass_on(
    held: list[Tensor], after: int, before: int, group: dist.ProcessGroup | None
) -> tuple[list[Tensor], list]:
    """Start sending ``held`` to ``after`` and receiving as many tensors from ``before``."""
    incoming = [torch.empty_like(t) for t in held]
    ops = [dist.P2POp(dist.isend, t, after, group) for t in held]
    ops += [dist.P2POp(dist.irecv, t, before, group) for t in incoming]
    return incoming, dist.batch_isend_irecv(ops)


def _ring_forward(
    q: Tensor, k: Tensor, v: Tensor, is_causal: bool, group, block_size: int
) -> tuple[Tensor, Tensor]:
    """This rank's output and log-sum-exp (float32 at least) over the whole sequence."""
    tiled = TiledAttention(block_size)
    world, rank, after, before = _neighbours(group)
    held = [k.contiguous(), v.contiguous()]
    out = lse = None
    for step, (_, action) in enumerate(ring_schedule(world, rank, is_causal=is_causal)):
        if step < world - 1:
            # 先把手上的键和值发给下一个进程、收上一个的，计算与通信同时进行
            # Pass what it holds on and receive the next, while it computes
            incoming, requests = _pass_on(held, after, before, group)
        if action != "skip":
            part = tiled(q, *held, is_causal=action == "causal")
            out, lse = part if out is None else merge(out, lse, *part)
        if step < world - 1:
            for request in requests:
                request.wait()
            held = incoming
    return out, lse


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
    of keys and values, in blocks of ``block_size`` keys (all in float32 at least)."""
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


def _ring_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    dout: Tensor,
    is_causal: bool,
    group,
    block_size: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """The gradients of ``q``, ``k`` and ``v`` on this rank: the keys and values go round the
    ring again, each block with the gradient the ranks it visited found for it, and one more step
    brings every block's gradient home."""
    world, rank, after, before = _neighbours(group)
    dtype = out.dtype
    q, dout = q.to(dtype), dout.to(dtype)
    delta = (dout * out).sum(dim=-1, keepdim=True)  # [batch_size, heads_num, slice_len, 1]
    dq = torch.zeros_like(q)
    # 连续的张量：gloo 只发送连续的张量，而 MHA 传来的 k、v 是 .view(...).transpose(1, 2)
    # Contiguous tensors: gloo sends only those, and MHA's k and v are .view(...).transpose(1, 2)
    held = [
        k.to(dtype).contiguous(),
        v.to(dtype).contiguous(),
        torch.zeros(k.shape, dtype=dtype, device=k.device),
        torch.zeros(v.shape, dtype=dtype, device=v.device),
    ]
    for step, (_, action) in enumerate(ring_schedule(world, rank, is_causal=is_causal)):
        if action != "skip":
            part_q, part_k, part_v = _block_grads(
                q, held[0], held[1], dout, lse, delta, action == "causal", block_size
            )
            dq += part_q
            held[2] += part_k
            held[3] += part_v
        if step < world - 1:
            incoming, requests = _pass_on(held, after, before, group)
            for request in requests:
                request.wait()
            held = incoming
    if world == 1:  # the rank holds its own block: nothing to send, to itself least of all
        return dq, held[2], held[3]
    # 最后一块的梯度再走一步，回到它的主人
    # The last block's gradients go one more step, to the rank that owns it
    (dk, dv), requests = _pass_on(held[2:], after, before, group)
    for request in requests:
        request.wait()
    return dq, dk, dv


class _RingAttention(torch.autograd.Function):
    """``ring_attention`` with its backward ring."""

    @staticmethod
    def forward(ctx: Any, q, k, v, is_causal, group, block_size):
        out, lse = _ring_forward(q, k, v, is_causal, group, block_size)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = (is_causal, group, block_size)
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx: Any, dout: Tensor):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _ring_backward(q, k, v, out, lse, dout, *ctx.options)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


class _SumOverRanks(torch.autograd.Function):
    """Forward: the sum over the ranks (the one all-reduce of a forward). Backward: the gradient
    as it is, since every rank's loss sees the same sum."""

    @staticmethod
    def forward(ctx: Any, t: Tensor, group: dist.ProcessGroup | None) -> Tensor:
        out = t.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad, None


class _FromEveryRank(torch.autograd.Function):
    """Forward: the input as it is. Backward: the sum over the ranks of its gradient, since every
    rank's heads read the whole input."""

    @staticmethod
    def forward(ctx: Any, t: Tensor, group: dist.ProcessGroup | None) -> Tensor:
        ctx.group = group
        return t.view_as(t)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        grad = grad.clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class HeadsAcrossRanks(nn.Module):
    """A [`mha.full.MHA`][mha.full.MHA] whose heads are split across the ranks of a process group.

    Made by [`shard_heads`][mha.parallel.shard_heads]. ``local`` is an ordinary ``MHA`` with this
    rank's query heads (and the key/value heads they use); its output, the part of ``W_o``'s
    product that these heads give, is summed over the ranks by one all-reduce, so every rank
    returns the whole module's output. Before it, one ``all_gather_object`` checks that the ranks
    pass the same shapes, dtypes and options (a ``ValueError`` on every rank if not).

    One optimizer step on every rank equals one step of the whole module. The gradient of the
    output reaches each rank's heads as it is; ``W_o``'s bias is on rank 0 only, so it is
    trained once; a parameter several ranks hold (``q_norm``, ``k_norm``, and a key/value head
    shared by ranks when ``kv_heads < world``) gets from a gradient hook the sum of the ranks'
    parts, one all-reduce each in the backward pass; and the gradient of an input that requires
    one is summed over the ranks (one more all-reduce).

    Args:
        local: this rank's ``MHA``.
        group: the process group (``None``: the default one).
        kv_heads: the whole module's key/value heads (``None``: ``local.kv_heads * world``,
            split); fewer than the ranks means each is shared.

    中文:
        头分到进程组各个进程上的 [`mha.full.MHA`][mha.full.MHA]。

        由 [`shard_heads`][mha.parallel.shard_heads] 构造。``local`` 是一个普通的 ``MHA``，只有
        本进程的查询头（以及它们用到的键/值头）；它的输出是这些头对 ``W_o`` 乘积的贡献，一次
        all-reduce 在各进程间求和，所以每个进程返回的都是整个模块的输出。在这之前先做一次
        ``all_gather_object``，确认各进程传入的形状、dtype 和选项相同（不同时每个进程都抛出
        ``ValueError``）。

        每个进程各走一步优化器，等于整个模块走一步。输出的梯度原样传到各进程的头；``W_o`` 的偏置
        只在进程 0 上，所以只训练一次；几个进程都持有的参数（``q_norm``、``k_norm``，以及
        ``kv_heads < world`` 时几个进程共用的键/值头）由梯度钩子把各进程的那份加起来，反向传播里
        每个参数一次 all-reduce；需要梯度的输入，其梯度在各进程间求和（再一次 all-reduce）。

        参数：
            local: 本进程的 ``MHA``。
            group: 进程组（``None``：默认进程组）。
            kv_heads: 整个模块的键/值头数（``None``：``local.kv_heads * world``，即拆分）；比进程数
                少时每个键/值头由几个进程共用。
    """

    def __init__(
        self, local: MHA, group: dist.ProcessGroup | None, *, kv_heads: int | None = None
    ) -> None:
        super().__init__()
        self.local = local
        self.group = group
        world = dist.get_world_size(group) if dist.is_initialized() else 1
        if world > 1:
            self._sum_replicated_gradients(world, kv_heads)

    def _sum_replicated_gradients(self, world: int, kv_heads: int | None) -> None:
        """Hooks that sum, over the ranks that hold a parameter, the gradient each rank's heads
        give it: every rank holds the norms; a key/value head shared by ranks is held by those."""
        local, group = self.local, self.group
        kv_heads = local.kv_heads * world if kv_heads is None else kv_heads
        if kv_heads % world:  # fewer key/value heads than ranks: each is shared
            _, kv = head_ranges(local.heads_num * world, kv_heads, world, dist.get_rank(group))
            d = local.head_size
            rows = slice(kv.start * d, kv.stop * d)
        for name, p in local.named_parameters():
            if not p.requires_grad or name.startswith(("W_q.", "W_o.")):
                continue  # this rank's query heads only; W_o's bias on rank 0 only
            if name.startswith(("W_k.", "W_v.")):
                if kv_heads % world == 0:
                    continue  # split: this rank's key/value heads only
                p.register_hook(_summed_rows(group, rows, kv_heads * local.head_size))
            else:  # held whole by every rank: q_norm, k_norm
                p.register_hook(_summed(group))

    def forward(
        self, x: Tensor, context: Tensor | None = None, **kwargs: Any
    ) -> Tensor | tuple[Tensor, Tensor]:
        """``local``'s forward (the same arguments as ``MHA.forward``; a cache holds this rank's
        key/value heads), then the sum over the ranks.

        Args:
            x: the queries' input, as ``MHA.forward`` takes it.
            context: the keys' and values' input for cross-attention, as ``MHA.forward`` takes it.
            **kwargs: ``MHA.forward``'s keywords.

        Returns:
            The whole module's output on every rank; with ``need_weights``, also this rank's
                heads' weights.

        中文:
            先调用 ``local`` 的前向计算（参数与 ``MHA.forward`` 相同；缓存里存的是本进程的
            键/值头），再在各进程间求和。

            参数：
                x: 查询的输入，与 ``MHA.forward`` 相同。
                context: 交叉注意力里键和值的输入，与 ``MHA.forward`` 相同。
                **kwargs: ``MHA.forward`` 的关键字参数。

            返回：
                每个进程上都是整个模块的输出；``need_weights`` 为真时再返回本进程各头的注意力权重。
        """
        if dist.is_initialized() and dist.get_world_size(self.group) > 1:
            _agree(
                "HeadsAcrossRanks",
                self.group,
                dict(x=x, context=context, **kwargs, grad_mode=torch.is_grad_enabled()),
            )
        if x.requires_grad:
            x = _FromEveryRank.apply(x, self.group)
        if context is not None and context.requires_grad:
            context = _FromEveryRank.apply(context, self.group)
        out = self.local(x, context, **kwargs)
        if isinstance(out, tuple):
            return _SumOverRanks.apply(out[0], self.group), out[1]
        return _SumOverRanks.apply(out, self.group)


def _summed(group: dist.ProcessGroup | None) -> Callable[[Tensor], Tensor]:
    """A gradient hook: the gradient summed over the ranks of ``group``."""

    def hook(grad: Tensor) -> Tensor:
        grad = grad.clone()
        dist.all_reduce(grad, group=group)
        return grad

    return hook


def _summed_rows(group: dist.ProcessGroup | None, rows: slice, total: int) -> Callable:
    """A gradient hook for rows that several ranks hold (a shared key/value head): each rank
    writes its rows' gradient into zeros for all ``total`` rows, one all-reduce sums them, and
    each rank takes its rows back, summed over the ranks that hold them."""

    def hook(grad: Tensor) -> Tensor:
        every = grad.new_zeros((total, *grad.shape[1:]))
        every[rows] = grad
        dist.all_reduce(every, group=group)
        return every[rows]

    return hook


def head_ranges(heads_num: int, kv_heads: int, world: int, rank: int) -> tuple[range, range]:
    """The query heads and the key/value heads rank ``rank`` of ``world`` keeps.

    Each rank keeps ``heads_num / world`` query heads, in order. Key/value heads are split the
    same way when ``world`` divides ``kv_heads``; when there are fewer than ranks, each rank keeps
    the one its query heads share (replicated, as inference servers do).

    Args:
        heads_num: the query heads.
        kv_heads: the key/value heads.
        world: the ranks.
        rank: this rank.

    Returns:
        ``(query_heads, kv_heads)``, two ranges of head indices.

    Raises:
        ValueError: ``heads_num`` is not divisible by ``world``, or the key/value heads can be
            neither split nor shared (the message names ``heads_num``, ``kv_heads`` and the world
            size).

    Examples:
        >>> # 4 个进程：每个进程 2 个查询头；2 个键/值头，每 2 个进程共用一个
        >>> head_ranges(8, 2, 4, 3)  # 4 ranks: 2 query heads each; 2 kv heads, one per 2 ranks
        (range(6, 8), range(1, 2))

    中文:
        ``world`` 个进程中，进程 ``rank`` 留下的查询头和键/值头。

        每个进程按顺序留 ``heads_num / world`` 个查询头。``world`` 整除 ``kv_heads`` 时键/值头同样
        分开；键/值头比进程少时，每个进程留下它的查询头共用的那一个（复制，推理服务就是这样做的）。

        参数：
            heads_num: 查询头数。
            kv_heads: 键/值头数。
            world: 进程数。
            rank: 本进程的编号。

        返回：
            ``(query_heads, kv_heads)``，两个头编号的 range。

        异常：
            ValueError: ``heads_num`` 不能被 ``world`` 整除，或者键/值头既不能拆分也不能共用（错误
                信息会写出 ``heads_num``、``kv_heads`` 和进程数）。
    """
    if heads_num % world:
        raise ValueError(f"heads_num ({heads_num}) must be divisible by the world size ({world})")
    local, groups = heads_num // world, heads_num // kv_heads
    first_q = rank * local
    if kv_heads % world == 0:
        first_kv, local_kv = rank * (kv_heads // world), kv_heads // world
    elif groups % local == 0:  # fewer key/value heads than ranks: this rank's heads share one
        first_kv, local_kv = first_q // groups, 1
    else:
        raise ValueError(
            f"kv_heads ({kv_heads}) can be neither split over the world size ({world}) nor "
            f"shared: each rank's heads_num / world = {local} query heads must use one "
            f"key/value head (heads_num ({heads_num}) / kv_heads = {groups} must be a multiple of "
            f"{local})"
        )
    return range(first_q, first_q + local), range(first_kv, first_kv + local_kv)


def heads_on_rank(model: MHA, rank: int, world: int) -> MHA:
    """The part of ``model`` that rank ``rank`` of ``world`` keeps, as an ordinary ``MHA``.

    Its heads are [`head_ranges`][mha.parallel.head_ranges]'s: their rows of ``W_q``, ``W_k``,
    ``W_v`` (and biases) and their columns of ``W_o``. ``W_o``'s bias stays on rank 0 only (the
    other ranks' parts have none), so the sum over the ranks adds it once. What is not split by
    heads is copied whole: ``q_norm`` and ``k_norm``, and a key/value head shared by several ranks
    (``kv_heads < world``). Every option of ``model`` carries over, and so does each
    parameter's ``requires_grad`` (a frozen weight stays frozen). The sum of the
    ``world`` parts' outputs is ``model``'s output: what the all-reduce of
    [`shard_heads`][mha.parallel.shard_heads] computes.

    Args:
        model: the module to split.
        rank: the rank, ``0`` to ``world - 1``.
        world: the ranks.

    Returns:
        A new ``MHA`` with ``heads_num / world`` heads, in ``model``'s dtype, device and
            training mode.

    Raises:
        TypeError: ``model`` is not a ``mha.full.MHA``, or ``rank`` or ``world`` not an ``int``.
        ValueError: as [`head_ranges`][mha.parallel.head_ranges], or ``rank`` is not in ``0`` to
            ``world - 1``.

    中文:
        ``world`` 个进程中，进程 ``rank`` 留下的那部分 ``model``，是一个普通的 ``MHA``。

        它的头就是 [`head_ranges`][mha.parallel.head_ranges] 给出的：这些头在 ``W_q``、``W_k``、
        ``W_v`` 里的行（以及偏置）和在 ``W_o`` 里的列。``W_o`` 的偏置只留在进程 0 上（其他进程的
        那部分没有这个偏置），这样各进程求和时只加一次。不按头拆分的参数整个复制：``q_norm`` 和
        ``k_norm``，以及几个进程共用的键/值头（``kv_heads < world``）。``model`` 的其他选项
        全部保留，每个参数的 ``requires_grad`` 也保留（冻结的权重仍然冻结）。``world`` 个部分的
        输出之和就是
        ``model`` 的输出：[`shard_heads`][mha.parallel.shard_heads] 的 all-reduce 算的正是这个和。

        参数：
            model: 要拆分的模块。
            rank: 进程编号，0–``world - 1``。
            world: 进程数。

        返回：
            一个新的 ``MHA``，有 ``heads_num / world`` 个头，dtype、设备和训练模式与 ``model``
                相同。

        异常：
            TypeError: ``model`` 不是 ``mha.full.MHA``，或者 ``rank``、``world`` 不是 ``int``。
            ValueError: 与 [`head_ranges`][mha.parallel.head_ranges] 相同，或者 ``rank`` 不在
                0–``world - 1`` 之间。
    """
    if not isinstance(model, MHA):
        raise TypeError(f"model must be a mha.full.MHA, got {type(model).__name__}")
    _check_length("world", world, positive=True)
    _check_length("rank", rank)
    if rank >= world:
        raise ValueError(f"rank must be in 0 to world - 1 = {world - 1}, got {rank}")
    heads, kv = head_ranges(model.heads_num, model.kv_heads, world, rank)
    d = model.head_size
    # W_o 的偏置只留在进程 0 上：其他进程一个都不留，求和时只加一次，训练时也只更新一次
    # W_o's bias on rank 0 only: the others keep none, so the sum adds it once and a training
    # step updates it once
    biased = tuple(
        n
        for n in ("W_q", "W_k", "W_v", "W_o")
        if getattr(model, n).bias is not None and (n != "W_o" or rank == 0)
    )
    # 新模块的初始权重马上会被覆盖：不要因此推进调用者的随机数状态
    # The new module's initial weights are overwritten at once: do not advance the caller's RNG
    with torch.random.fork_rng(devices=[]):
        # 其余选项原样照搬（MHA.options 是它们唯一的声明），只改本进程的头数和偏置
        # Every other option carried as it is (MHA.options declares them once): only this
        # rank's head counts and biases change
        options = replace(model.options, heads_num=len(heads), kv_heads=len(kv), bias=biased)
        local = MHA.from_options(options).to(model.W_q.weight.device, model.W_q.weight.dtype)
    rows_q = slice(heads.start * d, heads.stop * d)
    rows_kv = slice(kv.start * d, kv.stop * d)
    with torch.no_grad():
        for name, rows in (("W_q", rows_q), ("W_k", rows_kv), ("W_v", rows_kv)):
            getattr(local, name).weight.copy_(getattr(model, name).weight[rows])
            if name in biased:
                getattr(local, name).bias.copy_(getattr(model, name).bias[rows])
        local.W_o.weight.copy_(model.W_o.weight[:, rows_q])
        if "W_o" in biased:
            local.W_o.bias.copy_(model.W_o.bias)
        if model.q_norm is not None:
            local.q_norm.weight.copy_(model.q_norm.weight)
            local.k_norm.weight.copy_(model.k_norm.weight)
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    for name, p in local.named_parameters():  # the same names: a frozen weight stays frozen
        p.requires_grad_(name not in frozen)
    return local.train(model.training)


def shard_heads(model: MHA, group: Any = None) -> HeadsAcrossRanks:
    """Split ``model``'s heads across the ranks of ``group`` (tensor parallelism).

    Each rank keeps [`heads_on_rank`][mha.parallel.heads_on_rank]: ``heads_num / world`` query
    heads' rows of ``W_q`` and columns of ``W_o``, and the key/value heads they use, split when
    ``world`` divides ``kv_heads`` and replicated when there are fewer than ranks.

    Trained, one optimizer step on every rank equals one step of ``model``: see
    [`HeadsAcrossRanks`][mha.parallel.HeadsAcrossRanks] for the gradients it sums.

    Args:
        model: the module to split, the same on every rank.
        group: a process group, or a one-dimensional ``DeviceMesh`` (its group is used);
            ``None`` means the default group.

    Returns:
        A [`HeadsAcrossRanks`][mha.parallel.HeadsAcrossRanks]: called like ``model``, it gives
            ``model``'s output on every rank with one all-reduce.

    Raises:
        TypeError: ``model`` is not a ``mha.full.MHA``, or ``group`` neither a process group, a
            ``DeviceMesh`` nor ``None``.
        ValueError: ``heads_num`` is not divisible by the world size, the key/value heads can be
            neither split nor shared (the message names ``heads_num``, ``kv_heads`` and the world
            size), the mesh has more than one dimension, or this process is not in ``group``.

    中文:
        把 ``model`` 的头分到 ``group`` 的各个进程上（张量并行）。

        每个进程留下 [`heads_on_rank`][mha.parallel.heads_on_rank]：``heads_num / world`` 个查询头
        在 ``W_q`` 里的行和在 ``W_o`` 里的列，以及它们用到的键/值头：``world`` 整除 ``kv_heads``
        时拆分，键/值头比进程少时复制。

        训练时，每个进程各走一步优化器，等于 ``model`` 走一步：要加起来的梯度见
        [`HeadsAcrossRanks`][mha.parallel.HeadsAcrossRanks]。

        参数：
            model: 要拆分的模块，每个进程上都相同。
            group: 进程组，或者一维的 ``DeviceMesh``（用它的进程组）；``None`` 表示默认进程组。

        返回：
            一个 [`HeadsAcrossRanks`][mha.parallel.HeadsAcrossRanks]：调用方式与 ``model`` 相同，
                每个进程上都得到 ``model`` 的输出，只用一次 all-reduce。

        异常：
            TypeError: ``model`` 不是 ``mha.full.MHA``，或者 ``group`` 既不是进程组、``DeviceMesh``
                也不是 ``None``。
            ValueError: ``heads_num`` 不能被进程数整除，键/值头既不能拆分也不能共用（错误信息会写出
                ``heads_num``、``kv_heads`` 和进程数），mesh 不止一维，或者本进程不在 ``group`` 里。
    """
    group = _process_group(group)
    world = dist.get_world_size(group) if dist.is_initialized() else 1
    rank = dist.get_rank(group) if dist.is_initialized() else 0
    return HeadsAcrossRanks(heads_on_rank(model, rank, world), group, kv_heads=model.kv_heads)


def _launched(rank: int, fn: Callable, world: int, folder: str, args: tuple) -> None:
    torch.set_num_threads(1)  # the ranks share the machine's cores
    dist.init_process_group(
        "gloo", init_method=f"file://{folder}/store", rank=rank, world_size=world
    )
    try:
        torch.save(fn(rank, world, *args), os.path.join(folder, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


def launch(fn: Callable[..., Any], world: int, *args: Any) -> list[Any]:
    """Run ``fn(rank, world, *args)`` on ``world`` processes joined in a gloo process group.

    The processes are forked from this one (no new interpreter, no ``torchrun``), each limited to
    one thread, and join the group through a file in a temporary folder. What ``fn`` returns is
    saved with ``torch.save`` and read back here.

    Args:
        fn: called in each process as ``fn(rank, world, *args)``, after the group is initialised.
        world: the processes.
        *args: passed on to ``fn``.

    Returns:
        What ``fn`` returned on each rank, in rank order.

    Raises:
        RuntimeError: this platform cannot fork processes (Windows); use ``torchrun``.

    中文:
        在 ``world`` 个加入同一个 gloo 进程组的进程里运行 ``fn(rank, world, *args)``。

        这些进程从当前进程 fork 出来（不启动新的解释器，也不用 ``torchrun``），各自只用一个线程，
        通过临时文件夹里的一个文件加入进程组。``fn`` 的返回值用 ``torch.save`` 保存，再在这里读回。

        参数：
            fn: 进程组初始化之后，在每个进程里以 ``fn(rank, world, *args)`` 调用。
            world: 进程数。
            *args: 传给 ``fn`` 的参数。

        返回：
            各进程上 ``fn`` 的返回值，按进程编号排列。

        异常：
            RuntimeError: 这个平台不能 fork 进程（Windows）；请用 ``torchrun``。
    """
    _check_length("world", world, positive=True)
    if "fork" not in mp.get_all_start_methods():
        raise RuntimeError("launch forks processes, which this platform cannot do: use torchrun")
    with tempfile.TemporaryDirectory() as folder:
        mp.start_processes(
            _launched, args=(fn, world, folder, args), nprocs=world, start_method="fork"
        )
        return [
            torch.load(os.path.join(folder, f"{rank}.pt"), weights_only=False)
            for rank in range(world)
        ]


def example(rank: int, world: int) -> list[str]:
    """The example of ``python -m mha.parallel``, on one rank: its shapes and the checks.

    Both ways of splitting one ``MHA(64, 8, kv_heads=2)`` and one sequence of 16 positions,
    each compared with the same computation in one process.

    Args:
        rank: this rank.
        world: the ranks.

    Returns:
        The lines this rank reports.

    中文:
        ``python -m mha.parallel`` 的示例在一个进程上的部分：它的形状和检查结果。

        一个 ``MHA(64, 8, kv_heads=2)`` 和一条 16 个位置的序列的两种拆法，都和单个进程里的同一
        计算比较。

        参数：
            rank: 本进程的编号。
            world: 进程数。

        返回：
            本进程要报告的几行文字。
    """
    on_cuda = dist.get_backend() == "nccl"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank))) if on_cuda else "cpu"
    torch.manual_seed(0)  # the same model and input on every rank
    model = MHA(64, 8, kv_heads=2).to(device).eval()
    x = torch.randn(2, 16, 64, device=device)
    sharded = shard_heads(model)
    local = sharded.local
    with torch.no_grad():
        out, expected = sharded(x, is_causal=True), model(x, is_causal=True)
    shapes = ", ".join(
        f"{name} {list(getattr(local, name).weight.shape)}" for name in ("W_q", "W_k", "W_v", "W_o")
    )
    query, kv = head_ranges(8, 2, world, rank)
    lines = [
        f"rank {rank} of {world}, heads split: query heads {query.start}-{query.stop - 1}, "
        + (
            f"key/value head {kv.start}"
            if len(kv) == 1
            else f"key/value heads {kv.start}-{kv.stop - 1}"
        ),
        f"  {shapes}",
        f"  output {list(out.shape)}, equal to one process: "
        f"{torch.allclose(out, expected, atol=1e-5)}",
    ]
    q, k, v = torch.randn(3, 2, 8, 16, 8, device=device)  # [batch_size, heads_num, 16, head_size]
    n = 16 // world
    mine = slice(rank * n, (rank + 1) * n)
    with torch.no_grad():
        part = ring_attention(q[:, :, mine], k[:, :, mine], v[:, :, mine], is_causal=True)
        whole = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    steps = ", ".join(f"rank {s}'s ({a})" for s, a in ring_schedule(world, rank, is_causal=True))
    lines += [
        f"rank {rank} of {world}, sequence split: positions {mine.start}-{mine.stop - 1}, "
        f"q, k, v {list(q[:, :, mine].shape)}",
        f"  keys held: {steps}",
        f"  output {list(part.shape)}, equal to one process: "
        f"{torch.allclose(part, whole[:, :, mine], atol=1e-5)}",
    ]
    return lines


def main() -> None:
    """``torchrun --nproc-per-node 2 -m mha.parallel``, or ``python -m mha.parallel`` (which
    forks 2 gloo processes itself): each rank's shapes and the checks against one process.

    中文:
        ``torchrun --nproc-per-node 2 -m mha.parallel``，或者 ``python -m mha.parallel``（自己 fork
        出 2 个 gloo 进程）：打印每个进程的形状以及与单进程结果的比较。
    """
    if "RANK" not in os.environ:  # not started by torchrun
        for lines in launch(example, 2):
            print("\n".join(lines))
        return
    torch.set_num_threads(1)
    # nccl 要每个进程一块 GPU，并且在建进程组之前选好自己那块；GPU 不够时用 gloo
    # nccl needs a GPU for each rank, each rank's set before the group starts; gloo otherwise
    ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    on_gpus = torch.cuda.is_available() and torch.cuda.device_count() >= ranks_here
    if on_gpus:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if on_gpus else "gloo")
    try:
        lines = example(dist.get_rank(), dist.get_world_size())
        every: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(every, lines)  # printed by rank 0, in order, not interleaved
        if dist.get_rank() == 0:
            print("\n".join(line for rank_lines in every for line in rank_lines))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
