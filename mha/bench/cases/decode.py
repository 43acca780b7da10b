"""Decoding one position with a ``KVCache`` holding ``L - 1`` positions, against recomputing the
causal forward over all ``L`` positions (``full-fast``). Each timed call runs ``DECODE_STEPS``
steps in a row, as a decoding loop does; each appends the ``L``-th position after
``KVCache.crop`` rewinds the cache to ``L - 1``. In the same rounds, as ``parts`` does for the
forward: a step's SDPA kernel alone (one query against the ``L`` keys and values the cache holds)
and its four projections alone (of one position), so a row says how much of a step is the
kernels' and how much is ``mha``'s own (checks, the cache's bookkeeping, head split and merge)."""

from __future__ import annotations

from typing import TypedDict

import torch
import torch.nn.functional as F

import mha.full
from mha.bench.config import DECODE_REPEATS, DECODE_STEPS, Config
from mha.bench.context import Context
from mha.bench.implementations import build_models
from mha.bench.timing import round_robin


class Row(TypedDict):
    seq_len: int
    cache_ms: float
    recompute_ms: float
    speedup: float
    """``recompute_ms / cache_ms``."""
    sdpa_ms: float
    """A step's attention kernel alone, per step."""
    projections_ms: float
    """A step's four projections of one position alone, per step."""
    other_ms: float
    """The step less the kernel and the projections: what ``mha`` adds, and what the kernels lose
    inside a step against alone (below 0 within the noise)."""
    speedup_of_kernels: float
    """``recompute_ms / (sdpa_ms + projections_ms)``: the speed-up if a step cost only its
    kernels."""


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
            q = torch.randn(c.batch, m.heads_num, 1, m.head_size, device=c.device, dtype=x.dtype)
            keys, values = cache.keys, cache.values  # [batch, heads, L, head_size], as a step reads
            merged = torch.randn_like(last)  # the heads merged, what W_o projects

            def kernel(q=q, keys=keys, values=values):
                for _ in range(DECODE_STEPS):
                    F.scaled_dot_product_attention(q, keys, values)

            def projections(last=last, merged=merged):
                for _ in range(DECODE_STEPS):
                    m.W_q(last), m.W_k(last), m.W_v(last), m.W_o(merged)

            def decoding(cache=cache, last=last, held=seq - 1):
                for _ in range(DECODE_STEPS):
                    cache.crop(held)  # back to L - 1 positions: each step appends the L-th
                    m(last, is_causal=True, cache=cache)

            med = round_robin(
                {
                    "cache": decoding,
                    "recompute": lambda x=x: m(x, is_causal=True),
                    "sdpa": kernel,
                    "projections": projections,
                },
                DECODE_REPEATS * c.repeats,
                c.warmup,
                c.device,
            )
        step, sdpa, projected = (med[k] / DECODE_STEPS for k in ("cache", "sdpa", "projections"))
        rows.append(
            Row(
                seq_len=seq,
                cache_ms=step * 1e3,
                recompute_ms=med["recompute"] * 1e3,
                speedup=med["recompute"] / step,
                sdpa_ms=sdpa * 1e3,
                projections_ms=projected * 1e3,
                other_ms=(step - sdpa - projected) * 1e3,
                speedup_of_kernels=med["recompute"] / (sdpa + projected),
            )
        )
        context.progress.step(f"decode seq_len {seq}")
    return {"decode": rows}


def rest_of_step(other_ms: float) -> tuple[str, str]:
    """A step less its kernel and its projections, in words (English, 中文): a time only where it
    is one; below 0 the parts timed alone exceed the step, which is noise.

    >>> rest_of_step(0.25)[0]
    'the rest 0.25 ms'
    >>> rest_of_step(-0.5)[0].endswith("timed alone exceed the step by 0.50 ms)")
    True
    """
    if other_ms >= 0:
        return f"the rest {other_ms:.2f} ms", f"其余 {other_ms:.2f} ms"
    return (
        "the rest within the noise (the kernel and the projections timed alone exceed the step "
        f"by {-other_ms:.2f} ms)",
        f"其余部分在噪声之内（单独计时的算子和投影加起来比一步多 {-other_ms:.2f} ms）",
    )


def report(results: dict) -> list[str]:
    rounds = DECODE_REPEATS * results["config"]["repeats"]
    lines = [
        "KV-cache decoding of one position vs recomputing the causal forward "
        f"(medians of {rounds} interleaved rounds; a round's cached call is {DECODE_STEPS} steps "
        "in a row, the time per step)"
    ]
    for r in results["decode"]:
        line = (
            f"seq_len {r['seq_len']}: cache {r['cache_ms']:.2f} ms (kernel {r['sdpa_ms']:.2f}, "
            f"projections {r['projections_ms']:.2f}, {rest_of_step(r['other_ms'])[0]}), recompute "
            f"{r['recompute_ms']:.2f} ms, speed-up {r['speedup']:.1f}x "
            f"({r['speedup_of_kernels']:.1f}x if a step cost only its kernels)"
        )
        if r["speedup"] < 1:
            line += (
                " (at this length a step's fixed per-call cost is as large as the whole "
                "causal forward)"
            )
        lines.append(line)
    return lines
