"""Forward + backward time of every implementation over the lengths (train mode off, autograd on:
``nn.MultiheadAttention`` takes its Python path here)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict

import torch

from mha.bench.config import Config
from mha.bench.context import Context
from mha.bench.implementations import IMPLEMENTATIONS, REFERENCE, build_models, call
from mha.bench.timing import first_call_seconds, round_robin


class Row(TypedDict):
    impl: str
    seq_len: int
    causal: bool
    median_ms: float
    ratio_vs_torch: float


SECTIONS = {"backward": list[Row]}
SLOW_FACTOR = 3
"""A first call may take this many times ``Config.max_call_s`` before the implementation stops."""


def steps(config: Config) -> int:
    return len(config.seq_lens)


def run(context: Context) -> dict:
    c = context.config
    device = c.device
    models = build_models(c.hidden, c.heads, device, c.torch_dtype)
    rows = []
    stopped: set[str] = set()
    measured: dict[str, int] = {}
    for seq in c.seq_lens:
        torch.manual_seed(seq)
        x = torch.randn(c.batch, seq, c.hidden, device=device, dtype=c.torch_dtype)
        fns: dict[str, Callable[[], object]] = {}
        for impl in IMPLEMENTATIONS:
            name = impl.name
            if name in stopped:
                continue
            m = models[name]
            params = list(m.parameters())

            def f(name=name, m=m, params=params, x=x):
                for p in params:
                    p.grad = None
                xi = x.detach().requires_grad_(True)
                call(name, m, xi, False, None).sum().backward()

            if impl.scores and seq > c.max_backward_math_seq:
                stopped.add(name)
                context.stop(
                    "backward",
                    name,
                    after=measured.get(name, 0),
                    took_s=None,
                    limit=c.max_backward_math_seq,
                    option="--max-backward-math-seq",
                )
                continue
            took = first_call_seconds(f, device)
            limit = c.max_call_s * SLOW_FACTOR
            if took > limit and name != REFERENCE:
                stopped.add(name)
                context.stop(
                    "backward", name, after=seq, took_s=took, limit=limit, option="--max-call"
                )
            fns[name] = f
            measured[name] = seq
        med = round_robin(fns, c.reps(seq, c.repeats_backward), 1, device)
        for name, t in med.items():
            rows.append(
                Row(
                    impl=name,
                    seq_len=seq,
                    causal=False,
                    median_ms=t * 1e3,
                    ratio_vs_torch=t / med[REFERENCE],
                )
            )
        context.progress.step(f"backward seq_len {seq}")
    return {"backward": rows}


def report(results: dict) -> list[str]:
    lines = ["Forward + backward, median ms, ratio to nn.MultiheadAttention"]
    for r in results["backward"]:
        lines.append(
            f"{r['impl']:<18}{r['seq_len']:>6}{r['median_ms']:>11.2f}{r['ratio_vs_torch']:>9.2f}"
        )
    return lines
