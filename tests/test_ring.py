"""The sequence across ranks as the systems run it: ``ring_attention``'s fused kernel, zigzag
layout, grouped-query keys and overlapped transfers, and ``ulysses_attention``; on 2 and 4 gloo
ranks, each equal to one process, forward and backward; and the steps a rank on a CUDA device
runs, under ``FakeTensorMode`` (shapes and the kernels' schemas, without a GPU).

One launch per world size runs every check (forking and the first calls cost more than the
checks). Each rank records what it ran: the attention kernels (a dispatch mode sees each ATen
call, with its shapes) and the transfers (``batch_isend_irecv``, each op's bytes and tag), in
order, so a test reads which kernel a step called, how much work each rank did, how many bytes a
step sent, and that the next block was sent before this one was computed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from support import assert_close, refused
from torch.utils._python_dispatch import TorchDispatchMode

from mha.parallel import (
    join_sequence,
    launch,
    ring_attention,
    ring_kernel,
    ring_schedule,
    split_sequence,
    ulysses_attention,
)
from mha.rope import RotaryEmbedding

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="no gloo backend in this torch"
)

# batch_size, heads_num, kv_heads, seq_len (divisible by 2 * 4), head_size
B, H, KV, L, D = 2, 4, 2, 16, 5
FLASH = "aten::_scaled_dot_product_flash_attention_for_cpu"
FLASH_BACKWARD = FLASH + "_backward"


def argument(args: tuple, kwargs: dict, index: int, name: str, default=None):
    return args[index] if len(args) > index else kwargs.get(name, default)


EFFICIENT = "aten::_scaled_dot_product_efficient_attention"
# each fused kernel's arguments: where its queries are, and its is_causal (the keys follow q)
KERNELS = {
    FLASH: (0, 4),
    FLASH_BACKWARD: (1, 7),
    EFFICIENT: (0, 6),
    EFFICIENT + "_backward": (1, 11),
}


class Recorder(TorchDispatchMode):
    """The fused attention kernels called inside it, as ``(name, q's shape, k's shape,
    is_causal)``, and the transfers, one ``("send", tag, bytes)`` a batch of sends, in the order
    they were issued."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name, kwargs = func.name(), kwargs or {}
        if name in KERNELS:
            at, causal_at = KERNELS[name]
            q, k = args[at], args[at + 1]
            causal = argument(args, kwargs, causal_at, "is_causal", False)
            self.events.append((name, tuple(q.shape), tuple(k.shape), causal))
        return func(*args, **kwargs)


@contextlib.contextmanager
def recorded() -> Iterator[Recorder]:
    recorder = Recorder()
    original = dist.batch_isend_irecv

    def batch(ops):
        sends = [op for op in ops if op.op.__name__ == "isend"]
        nbytes = sum(op.tensor.numel() * op.tensor.element_size() for op in sends)
        recorder.events.append(("send", sends[0].tag, nbytes))
        return original(ops)

    dist.batch_isend_irecv = batch
    try:
        with recorder:
            yield recorder
    finally:
        dist.batch_isend_irecv = original


def sequence(v_size: int = D, kv: int = KV) -> tuple[torch.Tensor, ...]:
    """q, k, v and the loss's weights, ``[B, heads, L, size]``, float64, of one seed."""
    torch.manual_seed(0)
    q = torch.randn(B, H, L, D, dtype=torch.float64)
    k = torch.randn(B, kv, L, D, dtype=torch.float64)
    v = torch.randn(B, kv, L, v_size, dtype=torch.float64)
    return q, k, v, torch.randn(B, H, L, v_size, dtype=torch.float64)


def rotary() -> RotaryEmbedding:
    return RotaryEmbedding(4)


def trained_part(attention, rank, world, split, tensors, **kwargs) -> dict:
    """This rank's part (as ``split`` lays the sequence out) of the output and of q, k, v's
    gradients, and what it recorded."""
    *qkv, weights = (split_sequence(t, world, dim=2, layout=split)[rank] for t in tensors)
    parts = [t.clone().requires_grad_() for t in qkv]
    with recorded() as recorder:
        out = attention(*parts, is_causal=True, **kwargs)
        (out * weights).sum().backward()
    return dict(out=out.detach(), grads=[t.grad for t in parts], events=recorder.events)


def rank_checks(rank: int, world: int) -> dict:
    got = {}
    for layout in ("contiguous", "zigzag"):
        got[layout] = trained_part(ring_attention, rank, world, layout, sequence(), layout=layout)
    # values of another size: TiledAttention, not the fused kernel
    got["tiled"] = trained_part(ring_attention, rank, world, "contiguous", sequence(v_size=3))
    got["no_overlap"] = trained_part(
        ring_attention, rank, world, "zigzag", sequence(), layout="zigzag", overlap=False
    )
    # rotary positions: this rank's, split as the sequence is
    q, k, v, _ = sequence()
    rope = rotary()
    positions = split_sequence(torch.arange(L), world, dim=0, layout="zigzag")[rank]
    cos, sin = rope(positions)
    mine = [split_sequence(t, world, dim=2, layout="zigzag")[rank] for t in (q, k, v)]
    with torch.no_grad():
        got["rope"] = ring_attention(
            rope.rotate(mine[0], cos, sin), rope.rotate(mine[1], cos, sin), mine[2],
            is_causal=True, layout="zigzag",
        )  # fmt: skip
    kv = KV if world == 2 else H  # Ulysses splits the key/value heads too
    got["ulysses"] = trained_part(ulysses_attention, rank, world, "contiguous", sequence(kv=kv))
    got["ulysses_refused"] = refused(
        lambda: ulysses_attention(*(t[:, :, :4] for t in sequence(kv=1)[:3]))
    )
    return got


def expected_of(tensors: tuple[torch.Tensor, ...]) -> dict:
    """One process's output and gradients; under a Recorder, whose first use (a second of
    imports and set-up) the forked ranks then inherit instead of each paying it."""
    *qkv, weights = (t.clone().requires_grad_() for t in tensors)
    with Recorder():
        out = F.scaled_dot_product_attention(*qkv, is_causal=True, enable_gqa=True)
        (out * weights).sum().backward()
    return dict(out=out.detach(), grads=[t.grad for t in qkv])


@pytest.fixture(scope="module")
def expected() -> dict:
    q, k, v, _ = sequence()
    rope = rotary()
    cos, sin = rope(torch.arange(L))
    with torch.no_grad():
        rotated = F.scaled_dot_product_attention(
            rope.rotate(q, cos, sin), rope.rotate(k, cos, sin), v, is_causal=True, enable_gqa=True
        )
    return dict(
        fused=expected_of(sequence()),
        tiled=expected_of(sequence(v_size=3)),
        ulysses={kv: expected_of(sequence(kv=kv)) for kv in (KV, H)},
        rope=rotated,
    )


@pytest.fixture(scope="module")
def ranks(expected) -> dict[int, list[dict]]:
    return {world: launch(rank_checks, world) for world in (2, 4)}


def joined(ranks: list[dict], case: str, layout: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    out = join_sequence([r[case]["out"] for r in ranks], dim=2, layout=layout)
    grads = [
        join_sequence([r[case]["grads"][i] for r in ranks], dim=2, layout=layout) for i in range(3)
    ]
    return out, grads


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize(
    ("case", "layout", "reference"),
    [
        ("contiguous", "contiguous", "fused"),
        ("zigzag", "zigzag", "fused"),
        ("no_overlap", "zigzag", "fused"),
        ("tiled", "contiguous", "tiled"),
    ],
)
def test_the_ring_equals_one_process_forward_and_backward(
    ranks, expected, world, case, layout, reference
):
    out, grads = joined(ranks[world], case, layout)
    assert_close(out, expected[reference]["out"], msg=case)
    for name, got, want in zip("qkv", grads, expected[reference]["grads"], strict=True):
        assert_close(got, want, msg=f"{case} d{name}")


def kernels(events: list[tuple]) -> list[tuple]:
    return [e for e in events if e[0] != "send"]


@pytest.mark.parametrize("world", [2, 4])
def test_each_ring_step_calls_the_fused_kernel_that_returns_the_lse(ranks, world):
    for got in ranks[world]:
        names = {e[0] for e in kernels(got["zigzag"]["events"])}
        assert names == {FLASH, FLASH_BACKWARD}
        # every step but a skipped one: one forward call, one backward call
        assert len(kernels(got["zigzag"]["events"])) == 2 * world
        assert kernels(got["tiled"]["events"]) == []  # values of another size: TiledAttention
    q, k, v, _ = sequence()
    assert ring_kernel(q, k, v) == "aten._scaled_dot_product_flash_attention_for_cpu"
    assert ring_kernel(q, k, sequence(v_size=3)[2]) == "mha.tiled.TiledAttention"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_on_cuda_each_ring_step_calls_the_memory_efficient_kernel_by_its_schema(dtype):
    """What a rank on a CUDA device runs, checked without a GPU: under ``FakeTensorMode`` a
    tensor on ``"cuda"`` carries its shape, dtype and device but no numbers, and each kernel's
    meta function checks the arguments against the operator's schema (``make gpu-check`` runs
    the numbers on a GPU, ``tests/test_cuda.py``)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from mha.parallel import ring

    world, rank, n = 4, 1, 8  # rank 1 of 4, a part of 8 positions
    with FakeTensorMode():
        q = torch.empty(B, H, n, 16, dtype=dtype, device="cuda")
        k = torch.empty(B, KV, n, 16, dtype=dtype, device="cuda")
        v = torch.empty(B, KV, n, 24, dtype=dtype, device="cuda")  # values of another size
        assert ring_kernel(q, k, v) == "aten._scaled_dot_product_efficient_attention"
        unaligned = torch.empty(B, KV, n, 12, dtype=dtype, device="cuda")
        assert ring_kernel(q, k, unaligned) == "mha.tiled.TiledAttention"
        assert ring_kernel(q.double(), k.double(), v.double()) == "mha.tiled.TiledAttention"
        # what the ring has joined so far, float32 as it accumulates
        out = torch.empty(B, H, n, 24, device="cuda")
        lse = torch.empty(B, H, n, device="cuda")
        actions = set()
        for layout in ("contiguous", "zigzag"):
            for _, action in ring_schedule(world, rank, is_causal=True, layout=layout):
                actions.add(action)
                with Recorder() as kernels:
                    part = ring._step_forward(q, k, v, action, 64)
                    grads = ring._step_backward(out, q, k, v, out, lse, action, 64)
                for grad, t in zip(grads, (q, k, v), strict=True):
                    assert (grad.shape, grad.dtype, grad.device.type) == (
                        t.shape, torch.float32, "cuda"
                    ), action  # fmt: skip
                if action == "skip":
                    assert part is None and kernels.events == []
                    continue
                (start, rows), step_out, step_lse = part
                assert (start, rows) == ((n // 2, n // 2) if action == "back" else (0, n))
                assert step_out.shape == (B, H, rows, 24) and step_out.dtype == torch.float32
                assert step_lse.shape == (B, H, rows) and step_lse.dtype == torch.float32
                keys = n // 2 if action == "front" else n
                # the held block has KV heads; the kernel is given them repeated to H
                call = ((B, H, rows, 16), (B, H, keys, 16), action == "causal")
                assert kernels.events == [(EFFICIENT, *call), (EFFICIENT + "_backward", *call)]
    assert actions == {"causal", "whole", "skip", "front", "back"}


def pairs_attended(events: list[tuple]) -> int:
    """The (query, key) pairs the forward's kernel calls computed: q_len * k_len, or the lower
    triangle's q_len * (q_len + 1) / 2 under the causal mask."""
    forward = [e for e in events if e[0] == FLASH]
    return sum(q[2] * (q[2] + 1) // 2 if causal else q[2] * k[2] for _, q, k, causal in forward)


@pytest.mark.parametrize("world", [2, 4])
def test_zigzag_gives_every_rank_the_same_work_where_contiguous_slices_do_not(ranks, world):
    zigzag = [pairs_attended(r["zigzag"]["events"]) for r in ranks[world]]
    contiguous = [pairs_attended(r["contiguous"]["events"]) for r in ranks[world]]
    n, c = L // world, L // (2 * world)  # a rank's positions; a zigzag chunk's
    # the own block's triangle, then r whole blocks before it
    assert contiguous == [n * (n + 1) // 2 + r * n * n for r in range(world)]
    # the own two chunks' triangle, then half a block at each of the world - 1 other steps
    assert zigzag == [2 * c * (2 * c + 1) // 2 + (world - 1) * 2 * c * c] * world
    assert sum(zigzag) == sum(contiguous) == L * (L + 1) // 2  # the pairs the mask leaves
    # what ring_schedule says: steps of half a block ('front', 'back') balance it
    actions = [a for _, a in ring_schedule(world, 0, is_causal=True, layout="zigzag")]
    assert actions == ["causal"] + ["back"] * (world - 1)


@pytest.mark.parametrize("world", [2, 4])
def test_keys_and_values_travel_with_their_kv_heads_and_gradients_one_step_behind(ranks, world):
    n = L // world
    block = B * KV * n * (D + D) * 8  # k and v of a rank's part: KV heads, float64
    for got in ranks[world]:
        sends = [e for e in got["zigzag"]["events"] if e[0] == "send"]
        # k and v: world - 1 hops forward, and again backward; dk and dv: world hops, the last
        # one home; each hop a block of KV heads (with heads_num heads, H / KV = 2 times more)
        assert [nbytes for _, tag, nbytes in sends if tag == 0] == [block] * 2 * (world - 1)
        assert [nbytes for _, tag, nbytes in sends if tag == 1] == [block] * world


@pytest.mark.parametrize("world", [2, 4])
def test_the_next_block_is_sent_before_this_one_is_computed(ranks, world):
    for got in ranks[world]:
        events = [(e[0], e[1]) if e[0] == "send" else e[0] for e in got["zigzag"]["events"]]
        last = max(i for i, e in enumerate(events) if e == FLASH)
        forward, backward = events[: last + 1], events[last + 1 :]
        # send, compute, send, compute, ...: each step's transfer starts before its kernel
        assert forward == [("send", 0), FLASH] * (world - 1) + [FLASH]
        # the keys and values on before the step's kernel, its gradients after it
        step = [("send", 0), FLASH_BACKWARD, ("send", 1)]
        assert backward == step * (world - 1) + [FLASH_BACKWARD, ("send", 1)]


@pytest.mark.parametrize("world", [2, 4])
def test_rotary_positions_are_the_global_ones_split_as_the_sequence(ranks, expected, world):
    out = join_sequence([r["rope"] for r in ranks[world]], dim=2, layout="zigzag")
    assert_close(out, expected["rope"])
    assert split_sequence(torch.arange(16), 4, dim=0, layout="zigzag")[1].tolist() == [
        2, 3, 12, 13,
    ]  # fmt: skip


@pytest.mark.parametrize("world", [2, 4])
def test_ulysses_equals_one_process_with_whole_heads_per_rank(ranks, expected, world):
    kv = KV if world == 2 else H
    out, grads = joined(ranks[world], "ulysses", "contiguous")
    assert_close(out, expected["ulysses"][kv]["out"])
    for got, want in zip(grads, expected["ulysses"][kv]["grads"], strict=True):
        assert_close(got, want)
    for got in ranks[world]:
        # after the all-to-all: heads_num / world heads over the whole sequence
        forward = [e for e in got["ulysses"]["events"] if e[0] == FLASH]
        kv_heads = (KV if world == 2 else H) // world
        assert forward == [(FLASH, (B, H // world, L, D), (B, kv_heads, L, D), True)]
        assert got["ulysses"]["out"].shape == (B, H, L // world, D)
        assert got["ulysses_refused"].startswith(
            f"ValueError: ulysses_attention: kv_heads (1) must be divisible by the world size "
            f"({world})"
        )


def test_split_sequence_and_join_sequence_are_inverses_and_refuse_what_does_not_divide():
    t = torch.arange(2 * 12).view(2, 12)
    for layout in ("contiguous", "zigzag"):
        parts = split_sequence(t, 3, dim=1, layout=layout)
        assert [p.shape for p in parts] == [(2, 4)] * 3
        assert torch.equal(join_sequence(parts, dim=1, layout=layout), t)
    assert refused(lambda: split_sequence(t, 5, dim=1)) == (
        "ValueError: the sequence's length (12) must be divisible by world = 5 for the "
        "contiguous layout over 5 ranks: pad it to a multiple of 5"
    )
    assert refused(lambda: split_sequence(t, 4, dim=1, layout="zigzag")).startswith(
        "ValueError: the sequence's length (12) must be divisible by 2 * world = 8"
    )
    assert refused(lambda: split_sequence(t, 2, dim=1, layout="striped")) == (
        "ValueError: layout must be one of ['contiguous', 'zigzag'], got 'striped'"
    )
