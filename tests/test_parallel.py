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

from mha import parallel
from mha.full import MHA, KVCache
from mha.parallel import ring_attention, shard_heads
from mha.rope import RotaryEmbedding

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


# ---- heads across ranks ------------------------------------------------------------------------

HIDDEN, HEADS = 32, 8


def model_of(kv_heads: int, **options) -> MHA:
    torch.manual_seed(3)
    model = MHA(HIDDEN, HEADS, kv_heads=kv_heads, **options).double().eval()
    with torch.no_grad():  # biases too, so a bias added twice would show
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model


def sharded_main(rank, world, folder, kv_heads, options):
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{folder}/store", rank=rank, world_size=world
    )
    try:
        calls = []
        reduce = parallel._reduce
        parallel._reduce = lambda t, g: calls.append(1) or reduce(t, g)
        model = model_of(kv_heads, **options)
        sharded = shard_heads(model)
        torch.manual_seed(4)
        x = torch.randn(2, 5, HIDDEN, dtype=torch.float64)
        mask = torch.rand(2, 1, 5, 5) < 0.8
        with torch.no_grad():
            plain = sharded(x)
            masked = sharded(x, attn_mask=mask)
            cache = KVCache()
            prefill = sharded(x[:, :4], is_causal=True, cache=cache)
            step = sharded(x[:, 4:], is_causal=True, cache=cache)
        torch.save(
            dict(
                plain=plain,
                masked=masked,
                prefill=prefill,
                step=step,
                calls=len(calls),
                held=tuple(cache.keys.shape),
            ),
            os.path.join(folder, f"{rank}.pt"),
        )
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    ("world", "kv_heads"),
    [(2, 8), (2, 2), (4, 4), (4, 2), (4, 1)],  # split, or (4 ranks, 2 or 1) shared
)
def test_heads_across_ranks_equal_one_process(tmp_path, world, kv_heads):
    options = dict(bias=True, qk_norm=True, rope=RotaryEmbedding(4))
    mp.start_processes(
        sharded_main,
        args=(world, str(tmp_path), kv_heads, options),
        nprocs=world,
        start_method="fork",
    )
    model = model_of(kv_heads, **options)
    torch.manual_seed(4)
    x = torch.randn(2, 5, HIDDEN, dtype=torch.float64)
    mask = torch.rand(2, 1, 5, 5) < 0.8
    with torch.no_grad():
        expected = dict(
            plain=model(x), masked=model(x, attn_mask=mask), whole=model(x, is_causal=True)
        )
    local_kv = kv_heads // world if kv_heads % world == 0 else 1
    for rank in range(world):
        got = torch.load(tmp_path / f"{rank}.pt")
        assert_close(got["plain"], expected["plain"])
        assert_close(got["masked"], expected["masked"])
        assert_close(torch.cat([got["prefill"], got["step"]], dim=1), expected["whole"])
        assert got["calls"] == 4  # one all-reduce per forward
        assert got["held"] == (2, local_kv, 5, HIDDEN // HEADS)  # this rank's kv heads only


def test_shard_heads_refuses_what_cannot_be_split_by_name(monkeypatch):
    with pytest.raises(TypeError, match=r"model must be a mha\.full\.MHA, got Linear"):
        shard_heads(torch.nn.Linear(2, 2))
    # the world size as a process group would give it, without starting one
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 3)
    with pytest.raises(
        ValueError, match=r"heads_num \(8\) must be divisible by the world size \(3\)"
    ):
        shard_heads(MHA(32, 8))
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 4)
    # 12 heads on 4 ranks: 3 a rank; 3 key/value heads serve 4 each: neither split nor shared
    with pytest.raises(ValueError, match=r"kv_heads \(3\) can be neither split .* size \(4\)"):
        shard_heads(MHA(48, 12, kv_heads=3))
