"""The example of ``python -m mha.parallel`` and ``torchrun --nproc-per-node 2 -m mha.parallel``."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from mha.full import MHA
from mha.parallel.group import launch
from mha.parallel.heads import head_ranges, shard_heads
from mha.parallel.ring import ring_attention, ring_schedule


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
