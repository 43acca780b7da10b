"""``mha.parallel.ring_attention`` on 2 and 4 gloo processes equals attention in one process.

Each test forks ``world`` processes (forked from the test's own, so torch is not imported again),
which join a gloo group through a file store, build the same whole sequence from one seed, keep
their slice of it, run ``ring_attention`` and save their slice of the output; the test joins the
slices and compares them with ``scaled_dot_product_attention`` over the whole sequence.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from support import assert_close

from mha.parallel import ring_attention

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="no gloo backend in this torch"
)

SHAPE = (2, 3, 12, 5)  # batch_size, heads_num, positions (divisible by 2 and 4), head_size


def whole(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(seed)
    return tuple(torch.randn(SHAPE, dtype=dtype) for _ in range(3))


def rank_main(rank: int, world: int, folder: str, is_causal: bool, dtype: torch.dtype) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{folder}/store", rank=rank, world_size=world
    )
    try:
        q, k, v = whole(0, dtype)
        n = SHAPE[2] // world
        mine = slice(rank * n, (rank + 1) * n)
        out = ring_attention(
            q[:, :, mine], k[:, :, mine], v[:, :, mine], is_causal=is_causal, block_size=2
        )
        torch.save(out, os.path.join(folder, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("is_causal", [False, True])
def test_ring_attention_equals_one_process(tmp_path, world, is_causal):
    dtype = torch.float64
    mp.start_processes(
        rank_main,
        args=(world, str(tmp_path), is_causal, dtype),
        nprocs=world,
        start_method="fork",
    )
    out = torch.cat([torch.load(tmp_path / f"{r}.pt") for r in range(world)], dim=2)
    q, k, v = whole(0, dtype)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=is_causal))


def test_without_a_process_group_it_is_one_rank():
    q, k, v = whole(1, torch.float32)
    assert_close(
        ring_attention(q, k, v, is_causal=True),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
    )
