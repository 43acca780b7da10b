"""The sequence across ranks: ``ring_attention`` and its schedule, ``ring_schedule``."""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import Tensor

from mha.checks import _check_flag, _check_length
from mha.parallel.group import _agree, _process_group
from mha.tiled import TiledAttention, merge

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
