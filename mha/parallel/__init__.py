"""Attention across devices, on ``torch.distributed`` (多卡上的注意力).

``parallelize`` splits the heads with PyTorch's own tensor parallelism (DTensor,
``parallelize_module``): each rank keeps some query heads' rows of ``W_q``, ``W_k``, ``W_v`` and
the matching columns of ``W_o``, and one all-reduce joins their outputs; on a decoder block,
``sequence_parallel`` splits the norms and the residual stream by positions too (``block_plan``).
``shard_heads`` writes the same split out on plain modules, and copies key/value heads when there
are fewer than ranks; ``heads_on_rank`` is the part one rank keeps, as an ordinary module, so
the split can be followed in one process.
``ring_attention`` splits the sequence: each rank holds its part of the positions (contiguous,
or zigzag's two chunks, one from each end, which balance the causal mask's work; see
``split_sequence``), the keys and values travel round the ring of ranks with their ``kv_heads``
heads, one neighbour to the next, sent before each step computes, and each rank merges the
partial results of its queries with [`merge`][mha.tiled.merge] from the log-sum-exp that the fused
kernel returns (``ring_kernel``: SDPA's flash kernel on the CPU, its memory-efficient one on CUDA),
so no rank ever holds the whole sequence's keys.
``ring_schedule`` says which keys a rank holds at each step, and what it does with them.
``ulysses_attention`` splits it the other way, DeepSpeed-Ulysses': an all-to-all trades positions
for heads, each rank attends whole heads over the whole sequence, and a second all-to-all trades
them back. Both run on any backend with point-to-point operations and all-to-all (gloo on CPU,
nccl on CUDA). PyTorch's own context-parallel API (``torch.distributed.tensor.experimental.
context_parallel``) does the ring inside SDPA on GPUs; in this torch build it does not run on
the CPU (its CPU flash kernel has no sharding rule).

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

from typing import TYPE_CHECKING

from mha.parallel.example import example as example  # python -m mha.parallel's
from mha.parallel.example import main as main
from mha.parallel.group import launch
from mha.parallel.heads import HeadsAcrossRanks, head_ranges, heads_on_rank, shard_heads
from mha.parallel.ring import (
    join_sequence,
    ring_attention,
    ring_kernel,
    ring_schedule,
    split_sequence,
)
from mha.parallel.ulysses import ulysses_attention

if TYPE_CHECKING:  # imported on first use (below): DTensor's import takes a second
    from mha.parallel.tensor import block_plan, parallelize

__all__ = [
    "HeadsAcrossRanks",
    "block_plan",
    "head_ranges",
    "heads_on_rank",
    "join_sequence",
    "launch",
    "parallelize",
    "ring_attention",
    "ring_kernel",
    "ring_schedule",
    "shard_heads",
    "split_sequence",
    "ulysses_attention",
]

# 文档、pickle 和 repr 都用 mha.parallel 这个名字：API 页面和读者在这里找到它们
# Documented, pickled and printed as mha.parallel's: where the API page and readers look for them
for _name in __all__:
    if _name in globals():
        globals()[_name].__module__ = __name__
del _name

# 用到时才导入：DTensor 的导入要一秒左右；在父进程里导入一次，launch fork 出的进程就不必再导入
# Imported on first use: DTensor's import takes about a second; imported once in the parent,
# the processes launch forks need not import it again
_LATER = {"block_plan": "mha.parallel.tensor", "parallelize": "mha.parallel.tensor"}


def __getattr__(name: str):
    if name not in _LATER:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    found = getattr(importlib.import_module(_LATER[name]), name)
    found.__module__ = __name__
    globals()[name] = found
    return found
