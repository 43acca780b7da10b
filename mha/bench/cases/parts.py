"""Where ``full-fast``'s forward time goes, at the long lengths (``Config.parts_from`` on): the
whole call, the SDPA kernel alone and the four projections alone, in the same rounds as the
reference GEMMs (``forward.gemm_rows``: the median over three shapes)."""

from __future__ import annotations

from typing import TypedDict

import torch
import torch.nn.functional as F

from mha.bench.cases.forward import gemm_rows, reference_rate
from mha.bench.config import Config
from mha.bench.context import Context
from mha.bench.implementations import build_models
from mha.bench.timing import round_robin


class Row(TypedDict):
    seq_len: int
    full_fast_ms: float
    sdpa_ms: float
    projections_ms: float
    other_ms: float
    """The whole call less the kernel and the projections (below 0 within the noise)."""
    sdpa_fraction_of_gemm: float
    projections_fraction_of_gemm: float


SECTIONS = {"parts": list[Row]}


def rest(other_ms: float) -> tuple[str, str]:
    """The whole call less the kernel and the projections, in words (English, 中文): a time only
    where it is one; below 0 the parts timed alone exceed the call, which is noise.

    >>> rest(1.25)[0]
    'the rest (head split/merge copies, checks) 1.2 ms'
    >>> rest(-8.5)[0]
    'the rest within the noise (kernel and projections timed alone exceed the call by 8.5 ms)'
    """
    if other_ms >= 0:
        return (
            f"the rest (head split/merge copies, checks) {other_ms:.1f} ms",
            f"其余（拆分、合并各头时的复制和输入检查）{other_ms:.1f} ms",
        )
    return (
        f"the rest within the noise (kernel and projections timed alone exceed the call by "
        f"{-other_ms:.1f} ms)",
        f"其余部分在噪声之内（单独计时的算子和投影加起来比整次调用多 {-other_ms:.1f} ms）",
    )


def lengths(config: Config) -> list[int]:
    return [s for s in config.seq_lens if s >= config.parts_from]


def steps(config: Config) -> int:
    return len(lengths(config))


def run(context: Context) -> dict:
    c = context.config
    device, dtype = c.device, c.torch_dtype
    m = build_models(c.hidden, c.heads, device, dtype)["full-fast"]
    rows = []
    for seq in lengths(c):
        b, d, h = c.batch, c.hidden, c.heads
        x = torch.randn(b, seq, d, device=device, dtype=dtype)
        q, k, v = (torch.randn(b, h, seq, d // h, device=device, dtype=dtype) for _ in range(3))
        rows_m = gemm_rows(b, seq)
        gemm_in = [torch.randn(n, d, device=device, dtype=dtype) for n in rows_m]
        w = torch.randn(d, d, device=device, dtype=dtype)
        with torch.inference_mode():
            fns = {
                "full-fast": lambda x=x: m(x),
                "sdpa": lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v),
                "projections": lambda x=x: (m.W_q(x), m.W_k(x), m.W_v(x), m.W_o(x)),
            }
            for i, a in enumerate(gemm_in):
                fns[f"gemm {i}"] = lambda a=a, w=w: a @ w
            med = round_robin(fns, c.reps(seq), c.warmup, device)
        gemm_rate = reference_rate(
            [2 * n * d**2 / med[f"gemm {i}"] / 1e9 for i, n in enumerate(rows_m)]
        )
        sdpa_rate = 2 * 2 * b * seq**2 * d / med["sdpa"] / 1e9
        projections_rate = 4 * 2 * b * seq * d**2 / med["projections"] / 1e9
        rows.append(
            Row(
                seq_len=seq,
                full_fast_ms=med["full-fast"] * 1e3,
                sdpa_ms=med["sdpa"] * 1e3,
                projections_ms=med["projections"] * 1e3,
                other_ms=(med["full-fast"] - med["sdpa"] - med["projections"]) * 1e3,
                sdpa_fraction_of_gemm=sdpa_rate / gemm_rate,
                projections_fraction_of_gemm=projections_rate / gemm_rate,
            )
        )
        context.progress.step(f"parts seq_len {seq}")
    return {"parts": rows}


def report(results: dict) -> list[str]:
    lines = ["Where full-fast's forward time goes: the SDPA kernel and the projections alone, ms"]
    for r in results["parts"]:
        lines.append(
            f"seq_len {r['seq_len']}: whole {r['full_fast_ms']:.1f}, kernel {r['sdpa_ms']:.1f} "
            f"({r['sdpa_fraction_of_gemm']:.2f} of GEMM), projections {r['projections_ms']:.1f} "
            f"({r['projections_fraction_of_gemm']:.2f} of GEMM), {rest(r['other_ms'])[0]}"
        )
    return lines
