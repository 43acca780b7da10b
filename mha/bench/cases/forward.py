"""Forward time (``torch.inference_mode()``, eval mode) of every implementation over the lengths,
plain and causal, and the rate of a ``[b * L, d] @ [d, d]`` matrix product timed in the same
rounds (GEMM), which the achieved FLOP rate is divided by.

The causal forward: ``full-fast`` and ``full-math`` with ``is_causal=True`` against
``nn.MultiheadAttention`` with a causal ``attn_mask`` and ``is_causal=True``. FLOPs are counted as
``flops()`` says; a causal row with the same FLOPs (the kernel may skip the masked half, the count
does not). On a CUDA device it runs in float16 and bfloat16 too (rows carry a ``dtype`` key).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import TypedDict

import torch

from mha.bench.config import Config
from mha.bench.context import Context
from mha.bench.implementations import (
    IMPLEMENTATIONS,
    REFERENCE,
    build_models,
    call,
    causal_bool_mask,
    flops,
)
from mha.bench.timing import first_call_seconds, round_robin


class _Row(TypedDict):
    impl: str
    seq_len: int
    causal: bool
    median_ms: float
    ratio_vs_torch: float
    """Divided by ``nn.MultiheadAttention``'s median in the same rounds (causal: its causal one)."""
    gflops: float
    fraction_of_gemm: float
    """``gflops`` divided by the same rounds' GEMM rate."""


class Row(_Row, total=False):
    dtype: str
    """Only on rows of another dtype than the run's (CUDA's half precision)."""


class Gemm(TypedDict):
    seq_len: int
    gflops: float
    dtype: str


SECTIONS = {"forward": list[Row], "gemm": list[Gemm], "gemm_gflops": float}


def steps(config: Config) -> int:
    return len(config.seq_lens) * len(config.dtypes)


def run(context: Context) -> dict:
    forward, gemm = [], []
    for dtype in context.config.dtypes:
        rows, rates = _one_dtype(context, dtype)
        forward += rows
        gemm += rates
    main = [g["gflops"] for g in gemm if g["dtype"] == context.config.dtype]
    return {"forward": forward, "gemm": gemm, "gemm_gflops": statistics.median(main)}


def _one_dtype(context: Context, dtype_name: str) -> tuple[list[Row], list[Gemm]]:
    c = context.config
    device, dtype = c.device, getattr(torch, dtype_name)
    models = build_models(c.hidden, c.heads, device, dtype)
    rows, gemm_rows = [], []
    stopped: set[tuple[str, bool]] = set()
    for seq in c.seq_lens:
        torch.manual_seed(seq)
        x = torch.randn(c.batch, seq, c.hidden, device=device, dtype=dtype)
        a = torch.randn(c.batch * seq, c.hidden, device=device, dtype=dtype)
        w = torch.randn(c.hidden, c.hidden, device=device, dtype=dtype)
        mask = causal_bool_mask(seq, device)
        fns: dict[str, Callable[[], object]] = {}
        keys: dict[str, tuple[str, bool]] = {}
        with torch.inference_mode():
            for causal in (False, True):
                for impl in IMPLEMENTATIONS:
                    name = impl.name
                    if (causal and not impl.causal) or (name, causal) in stopped:
                        continue
                    m = models[name]

                    def f(name=name, m=m, causal=causal, x=x, mask=mask):
                        return call(name, m, x, causal, mask)

                    # One untimed call decides whether this implementation is still affordable.
                    took = first_call_seconds(f, device)
                    if took > c.max_call_s and name != REFERENCE:
                        stopped.add((name, causal))
                        context.stop(
                            "forward",
                            name,
                            after=seq,
                            took_s=took,
                            limit=c.max_call_s,
                            option="--max-call",
                            causal=causal,
                            dtype=dtype_name,
                        )
                    key = f"{name}{'/causal' if causal else ''}"
                    fns[key] = f
                    keys[key] = (name, causal)
            fns["gemm"] = lambda a=a, w=w: a @ w
            med = round_robin(fns, c.reps(seq), c.warmup, device)
        gemm_rate = 2 * c.batch * seq * c.hidden**2 / med["gemm"] / 1e9
        gemm_rows.append(Gemm(seq_len=seq, gflops=gemm_rate, dtype=dtype_name))
        fl = flops(c.batch, seq, c.hidden)
        for key, (name, causal) in keys.items():
            ref = med[f"{REFERENCE}/causal" if causal else REFERENCE]
            rate = fl / med[key] / 1e9
            row = Row(
                impl=name,
                seq_len=seq,
                causal=causal,
                median_ms=med[key] * 1e3,
                ratio_vs_torch=med[key] / ref,
                gflops=rate,
                fraction_of_gemm=rate / gemm_rate,
            )
            if dtype_name != c.dtype:
                row["dtype"] = dtype_name
            rows.append(row)
        context.progress.step(f"{dtype_name} forward seq_len {seq}")
    return rows, gemm_rows


def report(results: dict) -> list[str]:
    lines = [
        "Forward (inference mode), median ms, ratio to nn.MultiheadAttention, GEMM fraction",
        f"{'impl':<18}{'seq':>6}{'ms':>11}{'x torch':>9}{'GFLOP/s':>9}{'of GEMM':>9}",
    ]
    for r in results["forward"]:
        name = (
            r["impl"]
            + (" causal" if r["causal"] else "")
            + (f" {r['dtype']}" if "dtype" in r else "")
        )
        lines.append(
            f"{name:<18}{r['seq_len']:>6}{r['median_ms']:>11.2f}{r['ratio_vs_torch']:>9.2f}"
            f"{r['gflops']:>9.1f}{r['fraction_of_gemm']:>9.2f}"
        )
    return lines
