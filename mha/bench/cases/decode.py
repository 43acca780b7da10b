"""Decoding one position with a ``KVCache`` holding ``L - 1`` positions, against recomputing the
causal forward over all ``L`` positions (``full-fast``). Each timed step appends the ``L``-th
position; ``KVCache.crop`` rewinds the cache to ``L - 1`` before the next."""

from __future__ import annotations

from typing import TypedDict

import torch

import mha.full
from mha.bench.config import DECODE_REPEATS, Config
from mha.bench.context import Context
from mha.bench.implementations import build_models
from mha.bench.timing import round_robin


class Row(TypedDict):
    seq_len: int
    cache_ms: float
    recompute_ms: float
    speedup: float
    """``recompute_ms / cache_ms``."""


SECTIONS = {"decode": list[Row]}


def steps(config: Config) -> int:
    return len(config.decode_seq_lens)


def run(context: Context) -> dict:
    c = context.config
    m = build_models(c.hidden, c.heads, c.device, c.torch_dtype)["full-fast"]
    rows = []
    for seq in c.decode_seq_lens:
        torch.manual_seed(seq)
        x = torch.randn(c.batch, seq, c.hidden, device=c.device, dtype=c.torch_dtype)
        with torch.inference_mode():
            cache = mha.full.KVCache()
            m(x[:, :-1], is_causal=True, cache=cache)  # prefill: L - 1 positions
            m(x[:, -1:], is_causal=True, cache=cache)  # one step, so the buffer has grown
            last = x[:, -1:]

            def step(cache=cache, last=last, held=seq - 1):
                cache.crop(held)  # back to L - 1 positions: each timed step appends the L-th
                return m(last, is_causal=True, cache=cache)

            med = round_robin(
                {"cache": step, "recompute": lambda x=x: m(x, is_causal=True)},
                DECODE_REPEATS * c.repeats,
                c.warmup,
                c.device,
            )
        rows.append(
            Row(
                seq_len=seq,
                cache_ms=med["cache"] * 1e3,
                recompute_ms=med["recompute"] * 1e3,
                speedup=med["recompute"] / med["cache"],
            )
        )
        context.progress.step(f"decode seq_len {seq}")
    return {"decode": rows}


def report(results: dict) -> list[str]:
    rounds = DECODE_REPEATS * results["config"]["repeats"]
    lines = [
        "KV-cache decoding of one position vs recomputing the causal forward "
        f"(medians of {rounds} interleaved rounds)"
    ]
    for r in results["decode"]:
        line = (
            f"seq_len {r['seq_len']}: cache {r['cache_ms']:.2f} ms, recompute "
            f"{r['recompute_ms']:.2f} ms, speed-up {r['speedup']:.1f}x"
        )
        if r["speedup"] < 1:
            line += (
                " (at this length a step's fixed per-call cost is as large as the whole "
                "causal forward)"
            )
        lines.append(line)
    return lines
