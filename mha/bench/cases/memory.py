"""Peak memory growth of one forward per implementation and length, each in a fresh process
(``mha.bench.memory``), without a mask (``memory``) and, for ``MASKED``, with a
``[batch, 1, 1, L]`` padding mask (``memory_masked``): the fast path must not blow a small mask up
to ``[L, L]``."""

from __future__ import annotations

from typing import TypedDict

from mha.bench.config import Config
from mha.bench.context import Context
from mha.bench.implementations import BY_NAME, IMPLEMENTATIONS, REFERENCE
from mha.bench.memory import Request, result, start

MASKED = ("full-fast", "torch")
"""Measured with a padding mask too."""


class Row(TypedDict):
    impl: str
    seq_len: int
    peak_growth_mb: float
    ratio_vs_torch: float


class MaskedRow(TypedDict):
    impl: str
    seq_len: int
    mask: str
    peak_growth_mb: float
    unmasked_mb: float
    ratio_vs_unmasked: float


SECTIONS = {"memory": list[Row], "memory_masked": list[MaskedRow]}


def configurations(config: Config, seq: int) -> list[tuple[str, str]]:
    """(implementation, mask) measured at ``seq``: those that write the ``L x L`` scores out stop
    beyond ``Config.max_memory_math_seq``."""
    every = [(i.name, "none") for i in IMPLEMENTATIONS] + [(n, "padding") for n in MASKED]
    too_long = seq > config.max_memory_math_seq
    return [(n, mask) for n, mask in every if not (too_long and BY_NAME[n].scores)]


def steps(config: Config) -> int:
    return sum(len(configurations(config, seq)) for seq in config.memory_seq_lens)


def run(context: Context) -> dict:
    c = context.config
    rows, masked = [], []
    for seq in c.memory_seq_lens:
        running = {}
        for name, mask in configurations(c, seq):
            request = Request(name, seq, c.batch, c.hidden, c.heads, c.device, c.dtype, mask)
            running[name, mask] = start(request)
            # The quick run starts them all at once (its inputs are tiny; the peak is per
            # process, so running side by side does not change it); the full run one after
            # another, as the long ones need GBs each.
            if not c.memory_side_by_side:
                running[name, mask].wait()
        growth = {}
        for (name, mask), process in running.items():
            answer = result(process)
            context.progress.step(f"memory {name} ({mask} mask) seq_len {seq}")
            if isinstance(answer, str):
                context.failures.append(
                    {"case": "memory", "impl": name, "seq_len": seq, "mask": mask, "error": answer}
                )
            else:
                growth[name, mask] = answer
        if not growth.get((REFERENCE, "none")):
            continue  # no figure to divide by: the length is left out (the failure says why)
        reference = growth[REFERENCE, "none"]
        for (name, mask), g in growth.items():
            if mask == "none":
                rows.append(
                    Row(
                        impl=name,
                        seq_len=seq,
                        peak_growth_mb=g / 2**20,
                        ratio_vs_torch=g / reference,
                    )
                )
        for name in MASKED:
            plain = growth.get((name, "none"))
            if (name, "padding") in growth and plain:
                g = growth[name, "padding"]
                masked.append(
                    MaskedRow(
                        impl=name,
                        seq_len=seq,
                        mask="padding",
                        peak_growth_mb=g / 2**20,
                        unmasked_mb=plain / 2**20,
                        ratio_vs_unmasked=g / plain,
                    )
                )
    limit = c.max_memory_math_seq
    if any(seq > limit for seq in c.memory_seq_lens):
        for impl in IMPLEMENTATIONS:
            if impl.scores:
                measured = [s for s in c.memory_seq_lens if s <= limit]
                after = max(measured, default=0)
                context.stop(
                    "memory",
                    impl.name,
                    after=after,
                    took_s=None,
                    limit=limit,
                    option="--max-memory-math-seq",
                )
    return {"memory": rows, "memory_masked": masked}


def report(results: dict) -> list[str]:
    lines = [
        "Peak memory growth of one forward (fresh process), MB, ratio to nn.MultiheadAttention"
    ]
    for r in results["memory"]:
        lines.append(
            f"{r['impl']:<18}{r['seq_len']:>6}{r['peak_growth_mb']:>11.1f}{r['ratio_vs_torch']:>9.3f}"
        )
    lines += ["", "Peak memory growth with a [batch, 1, 1, L] padding mask, MB, ratio to without"]
    for r in results["memory_masked"]:
        lines.append(
            f"{r['impl']:<18}{r['seq_len']:>6}{r['peak_growth_mb']:>11.1f}"
            f"{r['ratio_vs_unmasked']:>9.3f}"
        )
    return lines
