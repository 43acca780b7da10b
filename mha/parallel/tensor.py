"""The heads across ranks with PyTorch's own tensor parallelism: ``parallelize`` hands an ``MHA``
(or a decoder block) to ``torch.distributed.tensor.parallel.parallelize_module``, with the plan
Megatron-LM's layout gives: ``W_q``, ``W_k``, ``W_v`` split by output rows (``ColwiseParallel``),
``W_o`` by input columns (``RowwiseParallel``), and in a block the MLP the same way; with
``sequence_parallel`` the norms and the residual stream hold each rank's slice of the positions
(``SequenceParallel``), gathered before the attention and the MLP, and reduce-scattered after.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from mha.checks import check_flag
from mha.full import MHA
from mha.parallel.heads import check_norm_per_head


def _blocks() -> tuple[type, ...]:
    """The blocks of ``mha.decoder`` whose layout the block plan knows: ``norm_1``, ``attn``,
    ``norm_2``, ``mlp``."""
    from mha.decoder import Block, LlamaBlock

    return Block, LlamaBlock


def _mesh(mesh: Any, module: nn.Module) -> Any:
    """``mesh``, a one-dimensional ``DeviceMesh``; ``None``: one over the default group, on the
    device type of ``module``'s weights."""
    if mesh is None:
        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError(
                "mesh: parallelize needs a process group (torch.distributed.init_process_group, "
                "or mha.parallel.launch) or a DeviceMesh, got None without one"
            )
        device = next(module.parameters()).device.type
        return init_device_mesh(device, (dist.get_world_size(),))
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(
            f"mesh must be a torch.distributed.device_mesh.DeviceMesh or None, got "
            f"{type(mesh).__name__} ({mesh!r})"
        )
    if mesh.ndim != 1:
        raise ValueError(
            f"mesh must have one dimension, the tensor-parallel one (mesh['tp'] of a 2-D "
            f"mesh), got {mesh.ndim} dimensions {mesh.mesh_dim_names or ''}"
        )
    return mesh


def _check_heads(attn: MHA, world: int) -> None:
    """``attn``'s heads split evenly over ``world`` ranks, key/value heads included."""
    if attn.heads_num % world:
        raise ValueError(
            f"heads_num ({attn.heads_num}) must be divisible by the tensor-parallel size ({world})"
        )
    if attn.kv_heads % world:
        raise ValueError(
            f"kv_heads ({attn.kv_heads}) must be divisible by the tensor-parallel size ({world}) "
            "to train: each rank computes its own key/value heads, as Megatron-LM requires "
            "(num_query_groups divisible by the tensor-parallel size); copying a key/value head "
            "to several ranks is what vLLM does, for inference only. mha.parallel.shard_heads "
            "copies them and sums their gradients over the ranks that hold them"
        )


def _attention_plan(prefix: str, attn: MHA) -> dict[str, Any]:
    """``attn``'s projections split by heads, and its per-head norms replicated over the heads
    each rank holds (their gradients summed over the ranks by DTensor)."""
    plan: dict[str, Any] = {f"{prefix}{n}": ColwiseParallel() for n in ("W_q", "W_k", "W_v")}
    plan[f"{prefix}W_o"] = RowwiseParallel()
    if attn.q_norm is not None:
        # 每个头都做的 RMSNorm 作用在 [batch_size, heads, seq_len, head_size] 上：第 1 维（头）
        # 分在各进程上，权重复制
        # The per-head RMSNorm runs on [batch_size, heads, seq_len, head_size]: dim 1 (the heads)
        # is split over the ranks, the weight replicated
        for norm in ("q_norm", "k_norm"):
            plan[f"{prefix}{norm}"] = SequenceParallel(sequence_dim=1, use_local_output=True)
    return plan


def block_plan(block: nn.Module, *, sequence_parallel: bool = False) -> dict[str, Any]:
    """The tensor-parallel plan of a decoder block of ``mha.decoder`` (``Block`` or
    ``LlamaBlock``), as ``parallelize_module`` takes it.

    The attention is split by heads (``W_q``, ``W_k``, ``W_v``: ``ColwiseParallel``; ``W_o``:
    ``RowwiseParallel``), the MLP by its hidden units (the first layer, or ``gate`` and ``up``,
    by rows; the last by columns). With ``sequence_parallel`` the block's input and output and
    its two norms hold this rank's slice of the positions (``SequenceParallel``): the slices are
    gathered (all-gather) before the attention and the MLP, whose outputs are reduce-scattered
    into slices again, where plain tensor parallelism all-reduces them whole.

    Args:
        block: a ``mha.decoder.Block`` or ``mha.decoder.LlamaBlock``.
        sequence_parallel: the norms and the residual stream split by positions.

    Returns:
        The plan: module names to ``ParallelStyle``.

    Raises:
        TypeError: ``block`` is not a block of ``mha.decoder``, or ``sequence_parallel`` not a
            ``bool``.

    中文:
        ``mha.decoder`` 里解码器块（``Block`` 或 ``LlamaBlock``）的张量并行方案，
        ``parallelize_module`` 直接能用。

        注意力按头拆分（``W_q``、``W_k``、``W_v`` 用 ``ColwiseParallel``；``W_o`` 用
        ``RowwiseParallel``），MLP 按隐藏单元拆分（第一层，或者 ``gate`` 和 ``up``，按行；最后一层
        按列）。``sequence_parallel`` 为真时，块的输入、输出和两个归一化层只持有本进程那一段位置
        （``SequenceParallel``）：进入注意力和 MLP 之前把各段收集起来（all-gather），它们的输出再
        reduce-scatter 成一段一段；不做序列并行时，这两处是对整个张量的 all-reduce。

        参数：
            block: ``mha.decoder.Block`` 或 ``mha.decoder.LlamaBlock``。
            sequence_parallel: 归一化层和残差流按位置拆分。

        返回：
            方案：模块名到 ``ParallelStyle`` 的字典。

        异常：
            TypeError: ``block`` 不是 ``mha.decoder`` 的块，或者 ``sequence_parallel`` 不是
                ``bool``。
    """
    if not isinstance(block, _blocks()):
        raise TypeError(
            f"block must be a mha.decoder.Block or LlamaBlock, got {type(block).__name__}"
        )
    check_flag("sequence_parallel", sequence_parallel)
    if isinstance(block, _blocks()[0]):
        up, down = ["mlp.0"], "mlp.2"  # Linear, GELU, Linear, Dropout
    else:
        up, down = ["mlp.gate", "mlp.up"], "mlp.down"  # SwiGLU
    plan = _attention_plan("attn.", block.attn)
    if not sequence_parallel:
        plan.update({name: ColwiseParallel() for name in up})
        plan[down] = RowwiseParallel()
        return plan
    # 序列并行：残差流是 [batch_size, seq_len / world, hidden_size] 的一段；进入注意力前
    # all-gather，W_o 和 MLP 的最后一层 reduce-scatter 回一段
    # Sequence parallelism: the residual stream is a slice [batch_size, seq_len / world,
    # hidden_size]; all-gathered before the attention, reduce-scattered back by W_o and by the
    # MLP's last layer
    plan.update(
        {
            "norm_1": SequenceParallel(),
            "attn": PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            ),
            "attn.W_o": RowwiseParallel(output_layouts=Shard(1)),
            "norm_2": SequenceParallel(),
            # 一次 all-gather 给 MLP 的各个输入层（SwiGLU 的 gate 和 up 读同一个输入）
            # One all-gather for the MLP's input layers (SwiGLU's gate and up read one input)
            "mlp": PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            ),
            **{name: ColwiseParallel() for name in up},
            down: RowwiseParallel(output_layouts=Shard(1)),
        }
    )
    return plan


def parallelize(
    module: nn.Module, mesh: Any = None, *, sequence_parallel: bool = False
) -> nn.Module:
    """Split ``module``'s heads over the ranks of ``mesh`` with PyTorch's tensor parallelism.

    ``module`` is an ``MHA``, or a decoder block of ``mha.decoder`` (its attention and its MLP
    split, as [`block_plan`][mha.parallel.block_plan] says). ``parallelize_module`` turns the
    weights into DTensors: ``W_q.weight`` holds this rank's rows, ``[heads_num / world *
    head_size, hidden_size]``, and ``W_o.weight`` its columns; ``W_o``'s bias is replicated and
    added once, after the all-reduce. The attention's ``heads_num`` and ``kv_heads`` become this
    rank's counts, since its forward reshapes with them. The forward, a ``KVCache`` (of this
    rank's key/value heads) and training work as on one process: the gradients of what several
    ranks hold (``W_o``'s bias, the per-head norms of ``qk_norm``) are summed by DTensor.

    ``heads_on_rank`` shows the same split on one process, as ordinary modules.

    Args:
        module: an ``MHA``, or a ``mha.decoder.Block`` or ``LlamaBlock``; changed in place.
        mesh: a one-dimensional ``DeviceMesh`` (a 2-D mesh's tensor-parallel dimension,
            ``mesh["tp"]``); ``None``: the default process group, on the device type of
            ``module``'s weights.
        sequence_parallel: for a block: its norms and residual stream split by positions (the
            input is then this rank's slice of the positions, ``[batch_size, seq_len / world,
            hidden_size]``, and so is the output).

    Returns:
        ``module``, parallelized.

    Raises:
        TypeError: ``module`` is neither an ``MHA`` nor a block, ``mesh`` not a ``DeviceMesh``,
            or ``sequence_parallel`` not a ``bool``.
        ValueError: ``heads_num`` or ``kv_heads`` is not divisible by the mesh's size (Megatron-LM
            refuses fewer key/value heads than ranks for training; vLLM copies them for
            inference; ``shard_heads`` copies them), the mesh has more than one dimension, there
            is neither a mesh nor a process group, ``module`` is parallelized already,
            ``sequence_parallel`` is asked of an ``MHA`` alone (no norms to split), or its q/k
            norm spans the whole projection (``qk_norm="projection"``).

    中文:
        用 PyTorch 自己的张量并行，把 ``module`` 的头分到 ``mesh`` 的各个进程上。

        ``module`` 是一个 ``MHA``，或者 ``mha.decoder`` 里的一个解码器块（注意力和 MLP 都拆分，
        见 [`block_plan`][mha.parallel.block_plan]）。``parallelize_module`` 把权重换成
        DTensor：``W_q.weight`` 存本进程的行，``[heads_num / world * head_size,
        hidden_size]``，``W_o.weight`` 存本进程的列；``W_o`` 的偏置复制到各进程，在 all-reduce
        之后只加一次。注意力的 ``heads_num`` 和 ``kv_heads`` 改成本进程的头数，因为前向计算按它们
        变形。前向计算、``KVCache``（存本进程的键/值头）和训练都与单进程相同：几个进程都持有的参数
        （``W_o`` 的偏置、``qk_norm`` 里各个头共用的归一化）的梯度由 DTensor 在各进程间求和。

        ``heads_on_rank`` 在单个进程里用普通模块展示同样的拆分。

        参数：
            module: 一个 ``MHA``，或者 ``mha.decoder.Block``、``LlamaBlock``；原地修改。
            mesh: 一维的 ``DeviceMesh``（二维 mesh 的张量并行那一维，``mesh["tp"]``）；``None``
                表示默认进程组，设备类型与 ``module`` 的权重相同。
            sequence_parallel: 只对块：归一化层和残差流按位置拆分（输入于是只是本进程那一段位置，
                ``[batch_size, seq_len / world, hidden_size]``，输出也是）。

        返回：
            并行化之后的 ``module``。

        异常：
            TypeError: ``module`` 既不是 ``MHA`` 也不是块，``mesh`` 不是 ``DeviceMesh``，或者
                ``sequence_parallel`` 不是 ``bool``。
            ValueError: ``heads_num`` 或 ``kv_heads`` 不能被 mesh 的大小整除（训练时 Megatron-LM
                不接受键/值头比进程少；vLLM 只在推理时复制键/值头；``shard_heads`` 会复制），mesh
                不止一维，既没有 mesh 也没有进程组，``module`` 已经并行化过，对单独的
                ``MHA`` 要求 ``sequence_parallel``（没有归一化层可拆），或者它的 q/k 归一化跨越
                整个投影（``qk_norm="projection"``）。
    """
    check_flag("sequence_parallel", sequence_parallel)
    if isinstance(module, MHA):
        attn = module
        if sequence_parallel:
            raise ValueError(
                "sequence_parallel: an MHA alone has no norms to split by positions; "
                "parallelize the decoder block around it (mha.decoder.Block or LlamaBlock)"
            )
    elif isinstance(module, _blocks()):
        attn = module.attn
    else:
        raise TypeError(
            f"module must be a mha.full.MHA or a mha.decoder.Block or LlamaBlock, got "
            f"{type(module).__name__}"
        )
    if isinstance(attn.W_q.weight, DTensor):
        raise ValueError("module is parallelized already: its W_q.weight is a DTensor")
    check_norm_per_head(attn)
    mesh = _mesh(mesh, module)
    world = mesh.size()
    _check_heads(attn, world)
    plan = (
        _attention_plan("", attn)
        if module is attn
        else block_plan(module, sequence_parallel=sequence_parallel)
    )
    parallelize_module(module, mesh, plan)
    # 前向计算按头数变形：改成本进程的头数
    # The forward reshapes with the head counts: this rank's
    attn.heads_num //= world
    attn.kv_heads //= world
    return module
