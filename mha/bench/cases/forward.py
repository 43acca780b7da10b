"""Forward time (``torch.inference_mode()``, eval mode) of every implementation over the lengths,
plain and causal, and the reference GEMM rate the achieved FLOP rate is divided by: the median of
the rates of ``[m, d] @ [d, d]`` matrix products for each ``m`` of :func:`gemm_rows` (half, once
and twice the ``b * L`` rows the projections multiply), timed in the same rounds. A median over
shapes, so that one shape's dip (a matrix library's blocking, a thread count) cannot make a
fraction above 1 at one length.

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
    """``gflops`` divided by the same rounds' reference GEMM rate (``Gemm.gflops``)."""


class Row(_Row, total=False):
    dtype: str
    """Only on rows of another dtype than the run's (CUDA's half precision)."""


class Gemm(TypedDict):
    seq_len: int
    gflops: float
    """The reference: the median of ``rates``."""
    dtype: str
    rows: list[int]
    """``m`` of each ``[m, hidden] @ [hidden, hidden]`` product timed (:func:`gemm_rows`)."""
    rates: list[float]
    """Each product's GFLOP/s, in the order of ``rows``."""


GEMM_SCALES = (0.5, 1, 2)
"""The GEMMs' rows, as multiples of the ``batch * L`` rows of the projections."""


def gemm_rows(batch: int, seq: int) -> list[int]:
    """The rows ``m`` of the reference GEMMs at length ``seq``.

    >>> gemm_rows(4, 2048)
    [4096, 8192, 16384]
    """
    return [max(1, round(scale * batch * seq)) for scale in GEMM_SCALES]


def reference_rate(rates: list[float]) -> float:
    """The reference GEMM rate: the median over the shapes, so a single dip moves it not at all.

    >>> reference_rate([210.0, 149.0, 207.0])
    207.0
    """
    return statistics.median(rates)


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
    rows, gemm_out = [], []
    stopped: set[tuple[str, bool]] = set()
    for seq in c.seq_lens:
        torch.manual_seed(seq)
        x = torch.randn(c.batch, seq, c.hidden, device=device, dtype=dtype)
        rows_m = gemm_rows(c.batch, seq)
        gemm_in = [torch.randn(m, c.hidden, device=device, dtype=dtype) for m in rows_m]
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
            for i, a in enumerate(gemm_in):
                fns[f"gemm {i}"] = lambda a=a, w=w: a @ w
            med = round_robin(fns, c.reps(seq), c.warmup, device)
        rates = [2 * m * c.hidden**2 / med[f"gemm {i}"] / 1e9 for i, m in enumerate(rows_m)]
        gemm_rate = reference_rate(rates)
        gemm_out.append(
            Gemm(seq_len=seq, gflops=gemm_rate, dtype=dtype_name, rows=rows_m, rates=rates)
        )
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
    return rows, gemm_out


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
    hidden = results["config"]["hidden"]
    lines.append(
        f"Reference GEMM: the median rate of [m, {hidden}] @ [{hidden}, {hidden}] for the m listed"
    )
    for g in results["gemm"]:
        pairs = zip(g["rows"], g["rates"], strict=True)
        each = ", ".join(f"m {m}: {rate:.1f}" for m, rate in pairs)
        lines.append(f"seq_len {g['seq_len']} {g['dtype']}: {g['gflops']:.1f} GFLOP/s ({each})")
    return lines
