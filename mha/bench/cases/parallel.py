"""Attention beyond one device's memory: tiled attention's peak against the written-out scores
(``tiled_memory``), and each rank's peak and time when the sequence (``ring_attention``) or the
heads (``shard_heads``) are split over 1, 2 and 4 processes (``parallel``).

Every measurement runs in processes forked with ``mha.parallel.launch`` (a gloo group, one thread
each, ``world = 1`` included), so one rank and four are measured the same way. A rank's peak is
the growth of its resident memory's high-water mark (``VmHWM``, reset before the call, as in
``mha.bench.memory``) during one call, after a first call of the same size, with glibc's mmap
threshold fixed so that freed tensors leave the resident memory; the median of three calls.
The time is the median over ``Config.repeats`` calls of the slowest rank, the ranks starting
each call together. The ranks share the machine's cores: with more ranks than cores they take
turns. The inputs hold one sequence (batch 1).
"""

from __future__ import annotations

import statistics
import time
from typing import TypedDict

import torch
import torch.distributed as dist

from mha.bench.config import Config
from mha.bench.context import Context
from mha.bench.memory import peak_bytes, reset_peak

RING_BLOCK = 256
"""The block of ``TiledAttention`` within each ring step."""


class TiledRow(TypedDict):
    seq_len: int
    attention: str
    """``written-out`` (``softmax(q k^T) v``, the scores whole) or ``tiled-B`` (blocks of B)."""
    peak_growth_mb: float


class Row(TypedDict):
    split: str
    """``sequence`` (``ring_attention``) or ``heads`` (``shard_heads``)."""
    world: int
    seq_len: int
    peak_growth_mb: float
    """The largest rank's."""
    params_mb: float
    """The weights one rank holds (0 for the sequence split, which has none)."""
    median_ms: float


SECTIONS = {"tiled_memory": list[TiledRow], "parallel": list[Row]}


def steps(config: Config) -> int:
    return len(config.tiled_seq_lens) + 2 * len(config.parallel_worlds) * len(
        config.parallel_seq_lens
    )


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


def _split_rank(rank: int, world: int, c: Config, seq: int, split: str) -> tuple[int, int, float]:
    from mha.full import MHA
    from mha.parallel import ring_attention, shard_heads

    torch.manual_seed(0)
    with torch.inference_mode():
        if split == "sequence":
            head, n = c.hidden // c.heads, seq // world
            q, k, v = torch.randn(3, 1, c.heads, n, head, dtype=c.torch_dtype)

            def call():
                return ring_attention(q, k, v, is_causal=True, block_size=RING_BLOCK)

            params = 0
        else:
            sharded = shard_heads(MHA(c.hidden, c.heads).to(c.torch_dtype).eval())
            params = sum(p.numel() * p.element_size() for p in sharded.parameters())
            x = torch.randn(1, seq, c.hidden, dtype=c.torch_dtype)

            def call():
                return sharded(x, is_causal=True)

        seconds = _timed(call, c.repeats)  # first: the memory's allocator setting slows calls
        return _peak_growth(call), params, seconds


def run(context: Context) -> dict:
    from mha.parallel import launch

    c = context.config
    tiled_rows, rows = [], []
    for seq in c.tiled_seq_lens:
        for attention in ("written-out", *(f"tiled-{b}" for b in c.tiled_blocks)):
            (growth,) = launch(_tiled_rank, 1, c, seq, attention)
            tiled_rows.append(
                TiledRow(seq_len=seq, attention=attention, peak_growth_mb=growth / 2**20)
            )
        context.progress.step(f"tiled memory seq_len {seq}")
    for split in ("sequence", "heads"):
        for world in c.parallel_worlds:
            for seq in c.parallel_seq_lens:
                ranks = launch(_split_rank, world, c, seq, split)
                rows.append(
                    Row(
                        split=split,
                        world=world,
                        seq_len=seq,
                        peak_growth_mb=max(g for g, _, _ in ranks) / 2**20,
                        params_mb=max(p for _, p, _ in ranks) / 2**20,
                        median_ms=max(t for _, _, t in ranks) * 1e3,
                    )
                )
                context.progress.step(f"{split} split over {world} seq_len {seq}")
    return {"tiled_memory": tiled_rows, "parallel": rows}


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
    return lines
