"""The heads across ranks, written out: ``shard_heads`` (one all-reduce), ``heads_on_rank`` (one
rank's part as an ordinary module) and ``head_ranges`` (which heads a rank keeps)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
from torch import Tensor

from mha.checks import check_length
from mha.full import MHA
from mha.parallel.group import agree, as_process_group


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
            if not p.requires_grad or name.startswith(("W_q.", "W_o.")) or name == "sink_logits":
                continue  # this rank's query heads only (their sinks too); W_o's bias on rank 0
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
            agree(
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


def check_norm_per_head(model: MHA) -> None:
    """A norm of q and k over the whole projection (OLMo 2's) cannot be split by heads: each
    rank would normalise its own heads by their own statistics, not by all heads'."""
    if model.qk_norm == "projection":
        raise ValueError(
            "qk_norm='projection' normalises q and k over all heads at once (OLMo 2's): split "
            "by heads, each rank would compute its statistics over its own heads only. Split "
            "the heads of a model with a per-head norm (qk_norm True or 'gemma') or none"
        )


def heads_on_rank(model: MHA, rank: int, world: int) -> MHA:
    """The part of ``model`` that rank ``rank`` of ``world`` keeps, as an ordinary ``MHA``.

    Its heads are [`head_ranges`][mha.parallel.head_ranges]'s: their rows of ``W_q``, ``W_k``,
    ``W_v`` (and biases; with ``gate``, each head's rows of ``W_q`` are its query's and its
    gate's), their columns of ``W_o`` and their ``sink_logits``. ``W_o``'s bias stays on rank 0
    only (the other ranks' parts have none), so the sum over the ranks adds it once. What is not
    split by heads is copied whole: ``q_norm`` and ``k_norm``, and a key/value head shared by
    several ranks (``kv_heads < world``). Every option of ``model`` carries over, and so does each
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
        ValueError: as [`head_ranges`][mha.parallel.head_ranges], ``rank`` is not in ``0`` to
            ``world - 1``, or ``model`` normalises q and k over the whole projection
            (``qk_norm="projection"``, whose statistics span every head).

    中文:
        ``world`` 个进程中，进程 ``rank`` 留下的那部分 ``model``，是一个普通的 ``MHA``。

        它的头就是 [`head_ranges`][mha.parallel.head_ranges] 给出的：这些头在 ``W_q``、``W_k``、
        ``W_v`` 里的行（以及偏置；有 ``gate`` 时，每个头在 ``W_q`` 里的行包括它的查询和门控）、
        在 ``W_o`` 里的列，以及它们的 ``sink_logits``。``W_o`` 的偏置只留在进程 0 上（其他进程的
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
            ValueError: 与 [`head_ranges`][mha.parallel.head_ranges] 相同，``rank`` 不在
                0–``world - 1`` 之间，或者 ``model`` 对整个投影做 q/k 归一化
                （``qk_norm="projection"``，统计量跨越所有头）。
    """
    if not isinstance(model, MHA):
        raise TypeError(f"model must be a mha.full.MHA, got {type(model).__name__}")
    check_length("world", world, positive=True)
    check_length("rank", rank)
    if rank >= world:
        raise ValueError(f"rank must be in 0 to world - 1 = {world - 1}, got {rank}")
    check_norm_per_head(model)
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
    # Qwen3-Next 的门控：W_q 每个头有 2 * head_size 行（查询再门控），按头切时一起带走
    # Qwen3-Next's gate: W_q has 2 * head_size rows a head (its query, then its gate), which go
    # together with the head
    per_head = 2 * d if model.gate else d
    rows_q = slice(heads.start * per_head, heads.stop * per_head)
    rows_o = slice(heads.start * d, heads.stop * d)
    rows_kv = slice(kv.start * d, kv.stop * d)
    with torch.no_grad():
        for name, rows in (("W_q", rows_q), ("W_k", rows_kv), ("W_v", rows_kv)):
            getattr(local, name).weight.copy_(getattr(model, name).weight[rows])
            if name in biased:
                getattr(local, name).bias.copy_(getattr(model, name).bias[rows])
        local.W_o.weight.copy_(model.W_o.weight[:, rows_o])
        if "W_o" in biased:
            local.W_o.bias.copy_(model.W_o.bias)
        if model.q_norm is not None:
            local.q_norm.weight.copy_(model.q_norm.weight)
            local.k_norm.weight.copy_(model.k_norm.weight)
        if model.sink_logits is not None:  # gpt-oss's sinks: one logit per query head
            local.sink_logits.copy_(model.sink_logits[heads.start : heads.stop])
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
    group = as_process_group(group)
    world = dist.get_world_size(group) if dist.is_initialized() else 1
    rank = dist.get_rank(group) if dist.is_initialized() else 0
    return HeadsAcrossRanks(heads_on_rank(model, rank, world), group, kv_heads=model.kv_heads)
