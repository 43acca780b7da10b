"""``mha.parallel`` on 2 and 4 gloo processes equals one process.

Each test runs its ranks with ``mha.parallel.launch`` (processes forked from the test's own, so
torch is not imported again, joined in a gloo group through a file store); every rank builds the
same model and inputs from one seed, keeps its part, and returns what it computed; the test
compares it with the same computation in one process.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from support import assert_close, refused

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
    "all_gather_object",
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
    # gathers the whole sequence; one gather of what the ranks must agree on (shapes, flags)
    expected = {"all_gather_object": 1, "batch_isend_irecv": world - 1}
    assert all(comms == expected for _, comms in ranks), ranks[0][1]


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


def test_heads_on_rank_refuses_a_norm_of_the_whole_projection_by_name():
    # OLMo 2's statistics span every head: a rank's part alone would normalise otherwise
    with pytest.raises(ValueError, match=r"^qk_norm='projection' normalises q and k over all"):
        heads_on_rank(MHA(16, 4, qk_norm="projection"), 0, 2)
    assert heads_on_rank(MHA(16, 4, qk_norm=True), 0, 2).q_norm.weight.shape == (4,)


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
    # forward world - 1 steps; backward the keys and values world - 1 steps, their gradients
    # world (the last one home), in batches of their own so that they overlap the next step
    expected = {"all_gather_object": 1, "batch_isend_irecv": 3 * world - 2}
    assert all(r[3] == expected for r in ranks), ranks[0][3]


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
        # one all-reduce per forward (four forwards), and one gather of the shapes and flags
        # the ranks must agree on; nothing else
        assert got["comms"] == {"all_gather_object": 4, "all_reduce": 4}, got["comms"]
        local_kv = len(head_ranges(HEADS, kv_heads, world, rank)[1])
        assert got["held"] == (2, local_kv, 5, HIDDEN // HEADS)  # this rank's kv heads only
        # the gradients: the input's whole, each weight's the rows or columns this rank holds
        # (shared key/value rows and the norms summed over the ranks that hold them); to
        # float32's rounding, which RMSNorm's statistics use (qk_norm) whatever the dtype, so a
        # sum taken in another order differs there
        f32 = torch.float32
        assert_close(got["x_grad"], x.grad, f32)
        d = HIDDEN // HEADS
        heads, kv = head_ranges(HEADS, kv_heads, world, rank)
        rows = {"W_q": slice(heads.start * d, heads.stop * d), "W_o": slice(None)}
        rows["W_k"] = rows["W_v"] = slice(kv.start * d, kv.stop * d)
        expected_names = {n for n in full if rank == 0 or n != "W_o.bias"}  # bias on rank 0
        assert set(got["grads"]) == expected_names
        for name, grad in got["grads"].items():
            want = full[name].grad
            if name == "W_o.weight":
                want = want[:, rows["W_q"]]
            elif name.split(".")[0] in rows:
                want = want[rows[name.split(".")[0]]]
            assert_close(grad, want, f32, msg=name)


def test_the_parts_of_one_process_sum_to_the_whole():
    model = model_of(2, bias=True)
    x, mask = inputs()
    with torch.no_grad():
        parts = [heads_on_rank(model, rank, 4)(x, attn_mask=mask) for rank in range(4)]
        assert_close(sum(parts), model(x, attn_mask=mask))


def test_gated_heads_and_their_sinks_go_with_them_and_the_parts_sum_to_the_whole():
    # Qwen3-Next's gate: W_q's rows of a head are its query's and its gate's; gpt-oss's sinks:
    # one logit per query head, drawn (not left at 0, where any split would agree)
    model = model_of(2, bias=True, gate=True, sinks=True)
    torch.nn.init.normal_(model.sink_logits)
    x, mask = inputs()
    with torch.no_grad():
        parts = [heads_on_rank(model, rank, 4) for rank in range(4)]
        assert [p.sink_logits.tolist() for p in parts] == [
            model.sink_logits[2 * r : 2 * r + 2].tolist() for r in range(4)
        ]
        got = sum(p(x, attn_mask=mask) for p in parts)
        assert_close(got, model(x, attn_mask=mask))


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


# ---- training through the split: one SGD step ----------------------------------------------


def sgd_step(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """One SGD step on a fixed weighted sum of the output, then the output again."""
    torch.manual_seed(6)
    weights = torch.randn(x.shape, dtype=x.dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    (model(x, is_causal=True) * weights).sum().backward()
    optimizer.step()
    with torch.no_grad():
        return model(x, is_causal=True)


def sgd_rank(rank: int, world: int, kv_heads: int, options: dict) -> torch.Tensor:
    return sgd_step(shard_heads(model_of(kv_heads, **options)).train(), inputs()[0])


@pytest.mark.parametrize(
    ("world", "kv_heads"),
    # split; shared by 2 ranks each; shared by all 4
    [(2, 8), (4, 2), (4, 1)],
)
def test_one_sgd_step_through_shard_heads_equals_one_process(world, kv_heads):
    # W_o's bias (on one rank only), the norms (on every rank) and shared key/value rows: each
    # trained as one process trains it
    options = dict(bias=True, qk_norm=True, rope=RotaryEmbedding(4))
    ranks = launch(sgd_rank, world, kv_heads, options)
    expected = sgd_step(model_of(kv_heads, **options).train(), inputs()[0])
    changed = (expected - model_of(kv_heads, **options)(inputs()[0], is_causal=True)).abs().max()
    assert changed > 1e-2  # the step moved the output: the comparison below means something
    for rank, got in enumerate(ranks):
        # float32's rounding: RMSNorm's statistics are float32 whatever the dtype
        assert_close(got, expected, torch.float32, msg=f"rank {rank}")


def bias_rank(rank: int, world: int) -> tuple:
    local = shard_heads(model_of(2, bias=True)).local
    return local.W_o.bias is None, sorted(n for n, _ in local.named_parameters())


def test_only_rank_0_keeps_w_o_s_bias():
    ranks = launch(bias_rank, 2)
    assert ranks[0][0] is False and ranks[1][0] is True
    assert "W_o.bias" in ranks[0][1] and "W_o.bias" not in ranks[1][1]
    parts = [heads_on_rank(model_of(2, bias=True), rank, 2) for rank in range(2)]
    assert torch.equal(parts[0].W_o.bias, model_of(2, bias=True).W_o.bias)
    assert parts[1].W_o.bias is None


# ---- the ring on other layouts and on one rank -----------------------------------------------


def ring_layout_rank(rank: int, world: int) -> tuple[torch.Tensor, ...]:
    """Slices in MHA's layout: [batch_size, slice_len, heads_num, head_size] made contiguous,
    then transposed, as ``.view(...).transpose(1, 2)`` leaves them (not contiguous)."""
    q, k, v = whole(0, torch.float64)
    n = SHAPE[2] // world
    mine = slice(rank * n, (rank + 1) * n)
    parts = [t[:, :, mine].transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v)]
    views = [t.transpose(1, 2) for t in parts]
    assert not any(t.is_contiguous() for t in views)
    out = ring_attention(*views, is_causal=True, block_size=2)
    out.square().sum().backward()
    return out.detach(), *(t.grad.transpose(1, 2) for t in parts)


@pytest.mark.parametrize("world", [1, 2])
def test_ring_backward_takes_non_contiguous_keys_and_values(world):
    ranks = launch(ring_layout_rank, world)
    q, k, v = (t.requires_grad_() for t in whole(0, torch.float64))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.square().sum().backward()
    for i, expected in enumerate((out.detach(), q.grad, k.grad, v.grad)):
        assert_close(torch.cat([r[i] for r in ranks], dim=2), expected, msg="out q k v".split()[i])


def one_rank(rank: int, world: int) -> tuple:
    q, k, v = (t.requires_grad_() for t in whole(0, torch.float64))
    with collectives() as comms:
        out = ring_attention(q, k, v, is_causal=True, block_size=5)
        out.sum().backward()
    return out.detach(), q.grad, k.grad, v.grad, comms


def test_ring_attention_trains_on_a_group_of_one_rank():
    (got,) = launch(one_rank, 1)
    q, k, v = (t.requires_grad_() for t in whole(0, torch.float64))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.sum().backward()
    for mine, expected in zip(got[:4], (out.detach(), q.grad, k.grad, v.grad), strict=True):
        assert_close(mine, expected)
    assert "batch_isend_irecv" not in got[4], got[4]  # nothing to send to itself


# ---- inputs the ranks disagree on --------------------------------------------------------------


def disagreeing_ring_rank(rank: int, world: int, case: str) -> str:
    q, k, v = whole(0, torch.float64)
    is_causal = True
    if case == "uneven":  # 10 positions over 4 ranks: 3, 3, 2, 2
        bounds = [0, 3, 6, 8, 10]
        mine = slice(bounds[rank], bounds[rank + 1])
    else:
        n = SHAPE[2] // world
        mine = slice(rank * n, (rank + 1) * n)
    q, k, v = (t[:, :, mine] for t in (q, k, v))
    if case == "dtype" and rank == 1:
        q, k, v = q.float(), k.float(), v.float()
    if case == "heads" and rank == 1:
        q, k, v = q[:, :2], k[:, :2], v[:, :2]
    if case == "is_causal" and rank == 3:
        is_causal = False
    return refused(lambda: ring_attention(q, k, v, is_causal=is_causal))


@pytest.mark.parametrize(
    ("case", "named"),
    [
        ("uneven", r"same q; rank 2 has \S+ \[2, 3, 2, 5\] .*rank 0 has \S+ \[2, 3, 3, 5\]"),
        ("dtype", r"same q; rank 1 has torch.float32 \[2, 3, 3, 5\] .*rank 0 has torch.float64"),
        ("heads", r"same q; rank 1 has \S+ \[2, 2, 3, 5\] .*rank 0 has \S+ \[2, 3, 3, 5\]"),
        ("is_causal", r"is_causal.*rank 3 has False.*rank 0 has True"),
    ],
)
def test_ranks_that_disagree_are_refused_on_every_rank_by_name(case, named):
    messages = launch(disagreeing_ring_rank, 4, case)
    for rank, message in enumerate(messages):  # every rank raises, none is left waiting
        assert message.startswith("ValueError: ring_attention: "), (rank, message)
        assert re.search(named, message), message
        assert all(f"rank {r}: " in message for r in range(4)), message  # every rank's value


def outside_rank(rank: int, world: int) -> str:
    pair = dist.new_group([0, 1])  # every rank creates it; rank 2 is not in it
    q, k, v = whole(0, torch.float64)
    message = "" if rank < 2 else refused(lambda: ring_attention(q, k, v, group=pair))
    # no rank leaves while the others still connect the new group (gloo: "Connection closed by
    # peer" on a loaded machine)
    dist.barrier()
    return message


def test_a_rank_outside_the_group_is_told_so():
    message = launch(outside_rank, 3)[2]
    assert message == (
        "ValueError: group must contain this process: global rank 2 is not among the "
        "group's ranks (new_group gave it GroupMember.NON_GROUP_MEMBER)"
    )


def test_a_group_that_is_not_one_is_refused_by_name():
    q, k, v = whole(0, torch.float64)
    message = refused(lambda: ring_attention(q, k, v, group="x"))
    assert message.startswith("TypeError: group must be a torch.distributed.ProcessGroup")
    assert message.endswith("got str ('x')")
    assert refused(lambda: shard_heads(model_of(8), group="x")) == message


def disagreeing_heads_rank(rank: int, world: int, case: str) -> str:
    sharded = shard_heads(model_of(8))
    x, _ = inputs()
    is_causal = case == "is_causal" and rank == 1
    if case == "length" and rank == 1:
        x = x[:, :4]
    if case == "dtype" and rank == 1:
        sharded, x = sharded.float(), x.float()
    with torch.no_grad():
        return refused(lambda: sharded(x, is_causal=is_causal))


@pytest.mark.parametrize(
    ("case", "named"),
    [
        ("length", r"same x; rank 1 has torch.float64 \[2, 4, 32\] .*rank 0 has .*\[2, 5, 32\]"),
        ("dtype", r"same x; rank 1 has torch.float32 \[2, 5, 32\] .*rank 0 has torch.float64"),
        ("is_causal", r"is_causal.*rank 1 has True.*rank 0 has False"),
    ],
)
def test_shard_heads_refuses_inputs_the_ranks_disagree_on(case, named):
    messages = launch(disagreeing_heads_rank, 2, case)
    for message in messages:
        assert message.startswith("ValueError: HeadsAcrossRanks: "), message
        assert re.search(named, message), message


# ---- torchrun on GPUs ------------------------------------------------------------------------


class Started(Exception):
    """Stops ``main`` once it has started its process group."""


@pytest.mark.parametrize(("gpus", "backend"), [(2, "nccl"), (1, "gloo"), (0, "gloo")])
def test_under_torchrun_each_rank_takes_its_own_gpu_first(monkeypatch, gpus, backend):
    # rank 1 of 2 on this machine, as torchrun starts it; no GPU needed: torch.cuda is mocked
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("device", device)))

    def started(backend, *args, **kwargs):
        calls.append(("group", backend))
        raise Started

    monkeypatch.setattr(dist, "init_process_group", started)
    with pytest.raises(Started):
        main()
    # nccl with a GPU for each rank, its own set first; gloo when the GPUs are fewer than ranks
    assert calls == ([("device", 1)] if backend == "nccl" else []) + [("group", backend)]
