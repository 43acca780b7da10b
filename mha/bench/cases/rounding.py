"""Float32 rounding as one machine rounds it: the figures the pages *KV cache*, *The fast path* and
*Pitfalls* show as measured, never assert. Not a timing: how far apart two computations of the same
function land, at 1 thread and at the run's thread count (the math library's summation order
depends on both, and on the CPU).

- ``rounding``: the largest absolute difference over ``inputs`` random inputs of the pages' sizes
  (batch 2, 4 heads of 5, ``mha.full.MHA(20, 4)``) between decoding with a ``KVCache`` (a prefill
  of 3, then 4 steps of one) and one causal forward over the 7 positions (``decode``), and between
  the fast path and the written-out path (``self``, ``causal``, ``cross`` with a context of 7);
- ``rounding_scale``: for each head size 1..128, how many float32 units in the last place (ulps)
  ``torch.sqrt`` of a float32 scalar lands from the correctly rounded ``math.sqrt``, and whether
  attention scaled by each gives the same bits on a random input (the two scales of the design
  post's class and of ``mha.annotated.MHA``).

The pages assert bounds that hold on any machine (``< 1e-6``, ``<= 1`` ulp); this file's figures
are what one machine did.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import TypedDict

import torch

import mha.full
from mha.bench.config import Config
from mha.bench.context import Context

BATCH, HEADS, HEAD = 2, 4, 5
"""The pages' sizes: ``hidden_size`` 20."""
HEAD_SIZES = range(1, 129)
COMPARISONS = ("decode", "self", "causal", "cross")


class Row(TypedDict):
    comparison: str
    """``decode`` (a cache against one causal forward), or the fast path against the written-out
    path: ``self``, ``causal``, ``cross``."""
    threads: int
    """``torch.get_num_threads()`` while it ran."""
    kernels: str
    """The CPU kernels ATen dispatched to (``torch.backends.cpu.get_cpu_capability()``:
    ``AVX512``, ``AVX2`` ...), which round differently."""
    inputs: int
    largest: float
    """The largest absolute difference over the inputs."""
    median: float
    """The median over the inputs of each one's largest absolute difference."""


class Scale(TypedDict):
    head_size: int
    ulps: int
    """``torch.sqrt(torch.tensor(head_size, dtype=float32))`` minus ``math.sqrt(head_size)``
    rounded to float32, in float32 ulps."""
    same_bits: bool
    """Attention scaled by each of the two gave the same bits (2 heads, a random input)."""


SECTIONS = {"rounding": list[Row], "rounding_scale": list[Scale]}


def threads(config: Config) -> tuple[int, ...]:
    """1 thread, and the run's own thread count if it is another."""
    return tuple(dict.fromkeys((1, torch.get_num_threads())))


def steps(config: Config) -> int:
    return len(threads(config)) + 1


def _differences(seed: int) -> dict[str, float]:
    """Each comparison's largest absolute difference on one random input."""
    torch.manual_seed(seed)
    hidden = HEADS * HEAD
    fast = mha.full.MHA(hidden, HEADS).eval()
    written_out = mha.full.MHA(hidden, HEADS, fast=False).eval()
    written_out.load_state_dict(fast.state_dict())
    x = torch.randn(BATCH, 7, hidden)
    context = torch.randn(BATCH, 7, hidden)
    cache = mha.full.KVCache()
    outputs = [fast(x[:, :3], is_causal=True, cache=cache)]
    outputs += [fast(x[:, s : s + 1], is_causal=True, cache=cache) for s in range(3, 7)]
    found = {"decode": (torch.cat(outputs, 1) - fast(x, is_causal=True)).abs().max().item()}
    q = x[:, :3]
    calls: dict[str, Callable[[mha.full.MHA], torch.Tensor]] = {
        "self": lambda m: m(q),
        "causal": lambda m: m(q, is_causal=True),
        "cross": lambda m: m(q, context),
    }
    for name, f in calls.items():
        found[name] = (f(fast) - f(written_out)).abs().max().item()
    return found


def _scale(head_size: int) -> Scale:
    ours = torch.tensor(math.sqrt(head_size), dtype=torch.float32)
    post = torch.sqrt(torch.tensor(head_size, dtype=torch.float32))
    ulp = torch.nextafter(ours, torch.tensor(math.inf)) - ours
    torch.manual_seed(head_size)
    q, k, v = torch.randn(3, 1, 2, 3, head_size).unbind(0)
    scores = torch.matmul(q, k.transpose(-2, -1))
    by_ours = torch.matmul(torch.softmax(scores / math.sqrt(head_size), dim=-1), v)
    by_post = torch.matmul(torch.softmax(scores / post, dim=-1), v)
    return Scale(
        head_size=head_size,
        ulps=round(((post - ours) / ulp).item()),
        same_bits=torch.equal(by_ours, by_post),
    )


def run(context: Context) -> dict:
    inputs = 3 if context.config.quick else 20
    rows, before = [], torch.get_num_threads()
    try:
        with torch.inference_mode():
            for n in threads(context.config):
                torch.set_num_threads(n)
                found = [_differences(seed) for seed in range(inputs)]
                for name in COMPARISONS:
                    each = [f[name] for f in found]
                    rows.append(
                        Row(
                            comparison=name,
                            threads=n,
                            kernels=torch.backends.cpu.get_cpu_capability(),
                            inputs=inputs,
                            largest=max(each),
                            median=statistics.median(each),
                        )
                    )
                context.progress.step(f"rounding, {n} thread{'s' if n > 1 else ''}")
            scales = [_scale(d) for d in HEAD_SIZES]
            context.progress.step("rounding of the scale")
    finally:
        torch.set_num_threads(before)
    return {"rounding": rows, "rounding_scale": scales}


def report(results: dict) -> list[str]:
    lines = ["Float32 rounding: largest absolute difference over random inputs (not a timing)"]
    for r in results["rounding"]:
        lines.append(
            f"{r['comparison']:<8} {r['threads']} thread(s), {r['inputs']} inputs: largest "
            f"{r['largest']:.1e}, median {r['median']:.1e}"
        )
    off = [s["head_size"] for s in results["rounding_scale"] if s["ulps"]]
    lines.append(
        f"torch.sqrt of a float32 head size off the correctly rounded scale for {len(off)} of "
        f"{len(results['rounding_scale'])} head sizes: {off}"
    )
    return lines
