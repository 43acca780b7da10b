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

from mha.parallel.example import example as example  # python -m mha.parallel's
from mha.parallel.example import main as main
from mha.parallel.group import launch
from mha.parallel.heads import HeadsAcrossRanks, head_ranges, heads_on_rank, shard_heads
from mha.parallel.ring import ring_attention, ring_schedule

__all__ = [
    "HeadsAcrossRanks",
    "head_ranges",
    "heads_on_rank",
    "launch",
    "ring_attention",
    "ring_schedule",
    "shard_heads",
]

# 文档、pickle 和 repr 都用 mha.parallel 这个名字：API 页面和读者在这里找到它们
# Documented, pickled and printed as mha.parallel's: where the API page and readers look for them
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
