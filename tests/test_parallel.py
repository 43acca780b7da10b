"""``mha.parallel`` on 2 and 4 gloo processes equals one process.

Each test runs its ranks with ``mha.parallel.launch`` (processes forked from the test's own, so
torch is not imported again, joined in a gloo group through a file store); every rank builds the
same model and inputs from one seed, keeps its part, and returns what it computed; the test
compares it with the same computation in one process.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from support import assert_close

from mha.full import MHA, KVCache
from mha.parallel import (
    example,
    head_ranges,
    heads_on_rank,
    launch,
    main,
    ring_attention,
    ring_schedule,
    shard_heads,
)
from mha.rope import RotaryEmbedding

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="no gloo backend in this torch"
)


COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "gather",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "send",
    "recv",
    "batch_isend_irecv",
)  # fmt: skip; not isend and irecv, which P2POp checks by identity


@contextlib.contextmanager
def collectives() -> Iterator[dict[str, int]]:
    """Counts the calls of ``torch.distributed``'s communication functions inside it, by name.
    (A dispatch mode such as ``CommDebugMode`` would see the operations themselves, but its first
    use costs seconds in every forked rank, and its module tracking fails on a module called twice
    inside it in this torch.)"""
    counts: dict[str, int] = {}
    saved = {name: getattr(dist, name) for name in COLLECTIVES}

    def counted(name, fn):
        def call(*args, **kwargs):
            counts[name] = counts.get(name, 0) + 1
            return fn(*args, **kwargs)

        return call

    for name, fn in saved.items():
        setattr(dist, name, counted(name, fn))
    try:
        yield counts
    finally:
        for name, fn in saved.items():
            setattr(dist, name, fn)


SHAPE = (2, 3, 12, 5)  # batch_size, heads_num, positions (divisible by 2 and 4), head_size


def whole(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(seed)
    return tuple(torch.randn(SHAPE, dtype=dtype) for _ in range(3))


def ring_rank(rank: int, world: int, is_causal: bool) -> tuple[torch.Tensor, dict]:
    q, k, v = whole(0, torch.float64)
    n = SHAPE[2] // world
    mine = slice(rank * n, (rank + 1) * n)
    with collectives() as comms:
        out = ring_attention(
            q[:, :, mine], k[:, :, mine], v[:, :, mine], is_causal=is_causal, block_size=2
        )
    return out, comms


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("is_causal", [False, True])
def test_ring_attention_equals_one_process(world, is_causal):
    ranks = launch(ring_rank, world, is_causal)
    out = torch.cat([out for out, _ in ranks], dim=2)
    q, k, v = whole(0, torch.float64)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=is_causal))
    # point to point only, one batch of sends and receives per step but the last: no rank
    # gathers the whole sequence
    assert all(comms == {"batch_isend_irecv": world - 1} for _, comms in ranks), ranks[0][1]


def test_ring_schedule_skips_the_later_ranks_under_the_causal_mask():
    assert ring_schedule(4, 0, is_causal=True) == [
        (0, "causal"),
        (3, "skip"),
        (2, "skip"),
        (1, "skip"),
    ]
    assert ring_schedule(3, 1) == [(1, "whole"), (0, "whole"), (2, "whole")]
    with pytest.raises(ValueError, match=r"rank must be in 0 to world - 1 = 1, got 2"):
        ring_schedule(2, 2)


def test_without_a_process_group_it_is_one_rank():
    q, k, v = whole(1, torch.float32)
    assert_close(
        ring_attention(q, k, v, is_causal=True),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
    )


def ring_grad_rank(rank: int, world: int, is_causal: bool) -> tuple[torch.Tensor, ...]:
    q, k, v = whole(0, torch.float64)
    torch.manual_seed(5)
    weights = torch.randn(SHAPE, dtype=torch.float64)  # the loss: a weighted sum of the output
    n = SHAPE[2] // world
    mine = slice(rank * n, (rank + 1) * n)
    q, k, v = (t[:, :, mine].clone().requires_grad_() for t in (q, k, v))
    with collectives() as comms:
        out = ring_attention(q, k, v, is_causal=is_causal, block_size=2)
        (out * weights[:, :, mine]).sum().backward()
    return q.grad, k.grad, v.grad, comms


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("is_causal", [False, True])
def test_gradients_through_ring_attention_equal_one_process(world, is_causal):
    ranks = launch(ring_grad_rank, world, is_causal)
    q, k, v = (t.requires_grad_() for t in whole(0, torch.float64))
    torch.manual_seed(5)
    weights = torch.randn(SHAPE, dtype=torch.float64)
    (F.scaled_dot_product_attention(q, k, v, is_causal=is_causal) * weights).sum().backward()
    for i, expected in enumerate((q.grad, k.grad, v.grad)):
        assert_close(torch.cat([r[i] for r in ranks], dim=2), expected, msg="qkv"[i])
    # forward world - 1 steps, backward world - 1 steps and one to bring the gradients home
    assert all(r[3] == {"batch_isend_irecv": 2 * world - 1} for r in ranks), ranks[0][3]


def test_gradients_without_a_process_group_are_one_rank_s():
    q, k, v = (t.requires_grad_() for t in whole(1, torch.float64))
    ring_attention(q, k, v, is_causal=True).sum().backward()
    got = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    for mine, expected in zip(got, (q.grad, k.grad, v.grad), strict=True):
        assert_close(mine, expected)


# ---- heads across ranks ------------------------------------------------------------------------

HIDDEN, HEADS = 32, 8


def model_of(kv_heads: int, **options) -> MHA:
    torch.manual_seed(3)
    model = MHA(HIDDEN, HEADS, kv_heads=kv_heads, **options).double().eval()
    with torch.no_grad():  # biases too, so a bias added twice would show
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(4)
    return torch.randn(2, 5, HIDDEN, dtype=torch.float64), torch.rand(2, 1, 5, 5) < 0.8


def sharded_rank(rank, world, kv_heads, options, mesh):
    model = model_of(kv_heads, **options)
    if mesh:
        from torch.distributed.device_mesh import init_device_mesh

        sharded = shard_heads(model, init_device_mesh("cpu", (world,)))
    else:
        sharded = shard_heads(model)
    x, mask = inputs()
    with torch.no_grad(), collectives() as comms:
        plain = sharded(x)
        masked = sharded(x, attn_mask=mask)
        cache = KVCache()
        prefill = sharded(x[:, :4], is_causal=True, cache=cache)
        step = sharded(x[:, 4:], is_causal=True, cache=cache)
    # training: every rank's loss is the same function of the same output
    x = x.clone().requires_grad_()
    sharded.train(), sharded(x, is_causal=True).square().sum().backward()
    local = sharded.local
    return dict(
        plain=plain,
        masked=masked,
        prefill=prefill,
        step=step,
        comms=comms,
        held=tuple(cache.keys.shape),
        x_grad=x.grad,
        grads={n: p.grad for n, p in local.named_parameters()},
    )


@pytest.mark.parametrize(
    ("world", "kv_heads", "mesh"),
    # split, or (4 ranks, 2 or 1) shared; a DeviceMesh in place of the group once
    [(2, 8, False), (2, 2, True), (4, 4, False), (4, 2, False), (4, 1, False)],
)
def test_heads_across_ranks_equal_one_process(world, kv_heads, mesh):
    options = dict(bias=True, qk_norm=True, rope=RotaryEmbedding(4))
    ranks = launch(sharded_rank, world, kv_heads, options, mesh)
    model = model_of(kv_heads, **options)
    x, mask = inputs()
    with torch.no_grad():
        expected = dict(
            plain=model(x), masked=model(x, attn_mask=mask), whole=model(x, is_causal=True)
        )
    x = x.clone().requires_grad_()
    model.train(), model(x, is_causal=True).square().sum().backward()
    full = dict(model.named_parameters())
    for rank, got in enumerate(ranks):
        assert_close(got["plain"], expected["plain"])
        assert_close(got["masked"], expected["masked"])
        assert_close(torch.cat([got["prefill"], got["step"]], dim=1), expected["whole"])
        # one all-reduce per forward (four forwards), nothing else
        assert got["comms"] == {"all_reduce": 4}, got["comms"]
        local_kv = len(head_ranges(HEADS, kv_heads, world, rank)[1])
        assert got["held"] == (2, local_kv, 5, HIDDEN // HEADS)  # this rank's kv heads only
        # the gradients: the input's whole, each weight's the rows or columns this rank holds;
        # to float32's rounding, which RMSNorm's statistics use (qk_norm) whatever the dtype, so
        # a sum taken in another order differs there
        f32 = torch.float32
        assert_close(got["x_grad"], x.grad, f32)
        part = heads_on_rank(model, rank, world)
        for name, grad in got["grads"].items():
            if name.startswith(("W_q", "W_o.weight")):
                d = HIDDEN // HEADS
                heads = head_ranges(HEADS, kv_heads, world, rank)[0]
                rows = slice(heads.start * d, heads.stop * d)
                want = full[name].grad[:, rows] if name == "W_o.weight" else full[name].grad[rows]
                assert_close(grad, want, f32, msg=name)
            elif name == "W_o.bias":  # on rank 0 only; the others hold a zero that gets one too
                assert_close(grad, full[name].grad, f32, msg=name)
            else:  # k, v rows (shared ones get only this rank's heads' part) and the norms
                assert grad.shape == dict(part.named_parameters())[name].shape


def test_the_parts_of_one_process_sum_to_the_whole():
    model = model_of(2, bias=True)
    x, mask = inputs()
    with torch.no_grad():
        parts = [heads_on_rank(model, rank, 4)(x, attn_mask=mask) for rank in range(4)]
        assert_close(sum(parts), model(x, attn_mask=mask))


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


def test_the_example_reports_each_rank_equal_to_one_process():
    lines = [line for rank in launch(example, 2) for line in rank]
    assert lines[0] == "rank 0 of 2, heads split: query heads 0-3, key/value head 0"
    assert lines[1] == "  W_q [32, 64], W_k [8, 64], W_v [8, 64], W_o [64, 32]"
    assert lines[9] == "rank 1 of 2, sequence split: positions 8-15, q, k, v [2, 8, 8, 8]"
    assert lines[10] == "  keys held: rank 1's (causal), rank 0's (whole)"
    assert max(len(line) for line in lines) <= 80  # the width of the site's code blocks
    checks = [line for line in lines if "equal to one process" in line]
    assert len(checks) == 4 and all(line.endswith("True") for line in checks), lines


def torchrun_rank(rank: int, world: int, folder: str, port: int) -> None:
    # what torchrun puts in each process's environment
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    with open(os.path.join(folder, f"{rank}.txt"), "w") as out, contextlib.redirect_stdout(out):
        main()


def test_main_prints_every_rank_once_with_or_without_torchrun(tmp_path, capsys, monkeypatch):
    expected = [line for rank in launch(example, 2) for line in rank]
    monkeypatch.delenv("RANK", raising=False)
    main()  # python -m mha.parallel: forks its 2 ranks
    assert capsys.readouterr().out.splitlines() == expected
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(torchrun_rank, args=(2, str(tmp_path), port), nprocs=2, start_method="fork")
    # rank 0 prints every rank's lines, in order; rank 1 nothing
    assert (tmp_path / "0.txt").read_text().splitlines() == expected
    assert (tmp_path / "1.txt").read_text() == ""


def frozen_rank(rank: int, world: int) -> tuple:
    model = model_of(2)
    model.W_k.requires_grad_(False)  # frozen, as when fine-tuning part of a model
    model.W_v.requires_grad_(False)
    before = torch.random.get_rng_state()
    sharded = shard_heads(model).train()
    same_rng = torch.equal(before, torch.random.get_rng_state())
    x, _ = inputs()
    sharded(x, is_causal=True).square().sum().backward()
    grads = {n: p.grad for n, p in sharded.local.named_parameters()}
    return grads, same_rng


def test_a_frozen_weight_stays_frozen_on_every_rank():
    ranks = launch(frozen_rank, 2)
    model = model_of(2)
    model.W_k.requires_grad_(False)
    model.W_v.requires_grad_(False)
    x, _ = inputs()
    model.train()(x, is_causal=True).square().sum().backward()
    for rank, (grads, same_rng) in enumerate(ranks):
        assert same_rng  # splitting does not advance the caller's random numbers
        assert grads["W_k.weight"] is None and grads["W_v.weight"] is None
        rows = slice(rank * 16, (rank + 1) * 16)  # 4 heads of 4 on each of 2 ranks
        assert_close(grads["W_q.weight"], model.W_q.weight.grad[rows])
