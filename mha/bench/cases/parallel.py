"""Attention beyond one device's memory: tiled attention's peak against the written-out scores
(``tiled_memory``); each rank's peak and time when the sequence (``ring_attention``, zigzag) or
the heads (``parallelize``) are split over 1, 2 and 4 processes (``parallel``); and the ways to
split a sequence against one process's SDPA (``sequence_split``): the ring zigzag, contiguous and
without its overlap, and Ulysses' all-to-all, with the bytes each rank sends.

Every measurement runs in processes forked with ``mha.parallel.launch`` (a gloo group, one thread
each, ``world = 1`` included), so one rank and four are measured the same way. A rank's peak is
the growth of its resident memory's high-water mark (``VmHWM``, reset before the call, as in
``mha.bench.memory``) during one call, after a first call of the same size, with glibc's mmap
threshold fixed so that freed tensors leave the resident memory; the median of three calls. A
sequence split's few megabytes a rank are within that measure's noise (a call that writes an
8 MB output measured 0.0 MB to 16 MB), so for it the peak is counted instead: the most bytes
that the tensors one call makes hold at once (``_TensorPeak``, a dispatch mode that sees every
ATen call's outputs and when they are freed), the received blocks and partial outputs included,
a kernel's scratch buffers inside C++ not.
The time is the median over ``Config.repeats`` calls of the slowest rank, the ranks starting
each call together. The ranks share the machine's cores: with more ranks than cores they take
turns. The inputs hold one sequence (batch 1).
"""

from __future__ import annotations

import statistics
import time
import weakref
from typing import TypedDict

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from mha.bench.config import Config
from mha.bench.context import Context
from mha.bench.memory import peak_bytes, reset_peak

SPLITS = ("ring", "ring-contiguous", "ring-no-overlap", "ulysses")
"""The ways ``sequence_split`` splits a sequence (``sdpa``: one process, the whole sequence)."""


class TiledRow(TypedDict):
    seq_len: int
    attention: str
    """``written-out`` (``softmax(q k^T) v``, the scores whole) or ``tiled-B`` (blocks of B)."""
    peak_growth_mb: float


class Row(TypedDict):
    split: str
    """``sequence`` (``ring_attention``, zigzag) or ``heads`` (``parallelize``)."""
    world: int
    seq_len: int
    peak_growth_mb: float
    """The largest rank's: for ``sequence`` the counted peak of the tensors one call makes
    (``SplitRow.tensors_mb``), for ``heads`` the growth of the high-water mark."""
    params_mb: float
    """The weights one rank holds (0 for the sequence split, which has none)."""
    median_ms: float


class SplitRow(TypedDict):
    method: str
    """``sdpa`` (one process, the whole sequence), ``ring`` (``ring_attention``, zigzag),
    ``ring-contiguous``, ``ring-no-overlap`` (zigzag, each block waited for before it is computed)
    or ``ulysses`` (``ulysses_attention``)."""
    world: int
    seq_len: int
    peak_growth_mb: float
    """The largest rank's growth of the resident high-water mark (noisy at these sizes)."""
    tensors_mb: float
    """The largest rank's peak of the bytes the tensors of one call hold at once, counted."""
    median_ms: float
    sent_mb: float
    """What one rank sends during one call (0 for one process)."""


SECTIONS = {"tiled_memory": list[TiledRow], "parallel": list[Row], "sequence_split": list[SplitRow]}


def steps(config: Config) -> int:
    lengths = len(config.parallel_seq_lens)
    split = len(config.parallel_worlds) * lengths
    # the tiled lengths; sequence (the ring) and heads per world and length; one process's SDPA
    # per length; the other three splits per world and length
    return len(config.tiled_seq_lens) + 2 * split + lengths + (len(SPLITS) - 1) * split


def _fixed_mmap_threshold() -> None:
    """Every allocation of 128 KiB or more gets pages of its own, returned when freed (glibc's
    ``mallopt(M_MMAP_THRESHOLD)``, which also stops glibc raising the threshold after a free),
    and the heap's free memory is given back (``malloc_trim``): otherwise freed tensors stay in
    the heap, and the high-water mark depends on what an earlier call happened to free. Not
    glibc: left as it is."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD
        libc.malloc_trim(0)  # and what earlier calls freed into the heap leaves it now
    except (OSError, AttributeError):
        pass


def _peak_growth(call, tries: int = 3) -> int:
    """The median of ``tries`` measurements: a single one is sometimes off, by what else the
    process does (the process group's buffers) or by memory an earlier call left mapped."""
    _fixed_mmap_threshold()
    call()  # the same size first: one-off set-up (buffers, thread pools) is not counted
    growths = []
    for _ in range(tries):
        base = reset_peak()
        out = call()
        growths.append(peak_bytes() - base)
        del out
    return statistics.median(growths)


def _tiled_rank(rank: int, world: int, c: Config, seq: int, attention: str) -> int:
    from mha.tiled import TiledAttention

    head = c.hidden // c.heads
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, c.heads, seq, head, dtype=c.torch_dtype)
    with torch.inference_mode():
        if attention == "written-out":
            return _peak_growth(
                lambda: torch.softmax(q @ k.transpose(-2, -1) * head**-0.5, dim=-1) @ v
            )
        tiled = TiledAttention(int(attention.split("-")[1]))
        return _peak_growth(lambda: tiled(q, k, v)[0])


class _TensorPeak(TorchDispatchMode):
    """The most bytes that the tensors the calls inside it make hold at once: every ATen call's
    CPU outputs on a storage none of its inputs holds (views and in-place results are not new),
    by storage, until the last tensor on a storage is freed."""

    def __init__(self) -> None:
        super().__init__()
        self.owners: dict[int, int] = {}
        self.live = self.peak = 0

    def _freed(self, key: int, nbytes: int) -> None:
        self.owners[key] -= 1
        if not self.owners[key]:
            del self.owners[key]
            self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = tree_flatten((args, kwargs))[0]
        # a view, an in-place result or a no-op copy holds an input's storage: nothing new
        held = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                storage = t.untyped_storage()
                key, nbytes = storage.data_ptr(), storage.nbytes()
                if key in held and key not in self.owners:
                    continue
                if key not in self.owners:
                    self.owners[key] = 0
                    self.live += nbytes
                    self.peak = max(self.peak, self.live)
                self.owners[key] += 1
                weakref.finalize(t, self._freed, key, nbytes)
        return out


def _tensor_peak(call) -> int:
    """The bytes ``_TensorPeak`` counts during one ``call()`` (its output included)."""
    with _TensorPeak() as peak:
        out = call()
        del out
    return peak.peak


def _timed(call, repeats: int) -> float:
    call()  # warm-up
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        call()
        dist.barrier()  # the slowest rank's time
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _sent(method: str, world: int, q, k, v) -> int:
    """The bytes one rank sends in one call: the ring ``world - 1`` blocks of keys and values;
    Ulysses' two all-to-alls ``(world - 1) / world`` of its queries, keys, values and output."""
    size = sum(t.numel() * t.element_size() for t in (k, v))
    if method.startswith("ring"):
        return (world - 1) * size
    size += 2 * q.numel() * q.element_size()  # the queries, and the output (v_size = head_size)
    return size * (world - 1) // world


def _sequence_rank(rank: int, world: int, c: Config, seq: int, method: str) -> tuple:
    """One rank's peak, sent bytes and time for ``method`` on a sequence of ``seq`` positions."""
    from mha.parallel import ring_attention, split_sequence, ulysses_attention

    head = c.hidden // c.heads
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, c.heads, seq, head, dtype=c.torch_dtype)
    layout = "contiguous" if method in ("ulysses", "ring-contiguous", "sdpa") else "zigzag"
    q, k, v = (split_sequence(t, world, dim=2, layout=layout)[rank].clone() for t in (q, k, v))
    if method == "sdpa":

        def call():
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    elif method == "ulysses":

        def call():
            return ulysses_attention(q, k, v, is_causal=True)

    else:
        overlap = method != "ring-no-overlap"

        def call():
            return ring_attention(q, k, v, is_causal=True, layout=layout, overlap=overlap)

    with torch.inference_mode():
        seconds = _timed(call, c.repeats)  # first: the memory's allocator setting slows calls
        counted = _tensor_peak(call)
        return _peak_growth(call), counted, _sent(method, world, q, k, v), seconds


def _heads_rank(rank: int, world: int, c: Config, seq: int) -> tuple[int, int, float]:
    from torch.distributed.tensor import DTensor

    from mha.full import MHA
    from mha.parallel import parallelize

    torch.manual_seed(0)
    model = parallelize(MHA(c.hidden, c.heads).to(c.torch_dtype).eval())
    params = sum(
        (p.to_local() if isinstance(p, DTensor) else p).numel() * p.element_size()
        for p in model.parameters()
    )
    x = torch.randn(1, seq, c.hidden, dtype=c.torch_dtype)

    def call():
        return model(x, is_causal=True) * 1  # waits for the all-reduce

    with torch.no_grad():  # DTensor's dispatch under inference_mode is not this code's subject
        seconds = _timed(call, c.repeats)
        return _peak_growth(call), params, seconds


def run(context: Context) -> dict:
    import torch.distributed.tensor.parallel  # imported once here, not in each rank

    from mha.parallel import launch

    _tensor_peak(lambda: torch.zeros(1) + 1)  # the dispatch mode's first use, once, here

    c = context.config
    tiled_rows, rows, split_rows = [], [], []
    for seq in c.tiled_seq_lens:
        for attention in ("written-out", *(f"tiled-{b}" for b in c.tiled_blocks)):
            (growth,) = launch(_tiled_rank, 1, c, seq, attention)
            tiled_rows.append(
                TiledRow(seq_len=seq, attention=attention, peak_growth_mb=growth / 2**20)
            )
        context.progress.step(f"tiled memory seq_len {seq}")
    for seq in c.parallel_seq_lens:
        ((growth, counted, _, seconds),) = launch(_sequence_rank, 1, c, seq, "sdpa")
        split_rows.append(
            SplitRow(
                method="sdpa",
                world=1,
                seq_len=seq,
                peak_growth_mb=growth / 2**20,
                tensors_mb=counted / 2**20,
                median_ms=seconds * 1e3,
                sent_mb=0.0,
            )
        )
        context.progress.step(f"one process's SDPA seq_len {seq}")
    for method in SPLITS:
        for world in c.parallel_worlds:
            for seq in c.parallel_seq_lens:
                ranks = launch(_sequence_rank, world, c, seq, method)
                split_rows.append(
                    SplitRow(
                        method=method,
                        world=world,
                        seq_len=seq,
                        peak_growth_mb=max(r[0] for r in ranks) / 2**20,
                        tensors_mb=max(r[1] for r in ranks) / 2**20,
                        median_ms=max(r[3] for r in ranks) * 1e3,
                        sent_mb=max(r[2] for r in ranks) / 2**20,
                    )
                )
                if method == "ring":  # the chapter's table: the ring as it is run
                    rows.append(
                        Row(
                            split="sequence",
                            world=world,
                            seq_len=seq,
                            peak_growth_mb=split_rows[-1]["tensors_mb"],
                            params_mb=0.0,
                            median_ms=split_rows[-1]["median_ms"],
                        )
                    )
                    context.progress.step(f"sequence split over {world} seq_len {seq}")
                else:
                    context.progress.step(f"{method} over {world} seq_len {seq}")
    for world in c.parallel_worlds:
        for seq in c.parallel_seq_lens:
            ranks = launch(_heads_rank, world, c, seq)
            rows.append(
                Row(
                    split="heads",
                    world=world,
                    seq_len=seq,
                    peak_growth_mb=max(g for g, _, _ in ranks) / 2**20,
                    params_mb=max(p for _, p, _ in ranks) / 2**20,
                    median_ms=max(t for _, _, t in ranks) * 1e3,
                )
            )
            context.progress.step(f"heads split over {world} seq_len {seq}")
    return {"tiled_memory": tiled_rows, "parallel": rows, "sequence_split": split_rows}


def report(results: dict) -> list[str]:
    lines = ["Tiled attention: peak memory growth of one call (MB)"]
    for r in results["tiled_memory"]:
        lines.append(f"seq_len {r['seq_len']} {r['attention']}: {r['peak_growth_mb']:.1f} MB")
    lines.append(
        "Split over ranks, sharing the machine's cores: each rank's peak growth, weights, time"
    )
    for r in results["parallel"]:
        lines.append(
            f"{r['split']} over {r['world']}, seq_len {r['seq_len']}: "
            f"{r['peak_growth_mb']:.1f} MB a rank, weights {r['params_mb']:.2f} MB a rank, "
            f"{r['median_ms']:.1f} ms"
        )
    lines.append("A sequence split, against one process's SDPA: each rank's peak, time, bytes sent")
    for r in results["sequence_split"]:
        lines.append(
            f"{r['method']} over {r['world']}, seq_len {r['seq_len']}: "
            f"{r['tensors_mb']:.1f} MB a rank (counted), {r['median_ms']:.1f} ms, "
            f"{r['sent_mb']:.2f} MB sent"
        )
    return lines
