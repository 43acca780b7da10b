"""Timing: interleaved rounds, the device's synchronisation, the first call, and progress.

Every timed case calls :func:`round_robin`: the functions compared run in the same rounds, so a
change in the machine's load reaches them all alike, and the median of each is kept.

>>> times = round_robin({"a": lambda: None, "b": lambda: None}, repeats=3, warmup=1, device="cpu")
>>> sorted(times)
['a', 'b']
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import torch


def sync(device: str) -> None:
    """Wait for the device's queued work (a CUDA call returns before it ran)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def round_robin(
    fns: dict[str, Callable[[], object]], repeats: int, warmup: int, device: str
) -> dict[str, float]:
    """Median seconds per call of each function, run interleaved: every round calls each once."""
    for _ in range(warmup):
        for f in fns.values():
            f()
            sync(device)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(repeats):
        # Rotate the starting point so no function always runs right after the same one.
        names = list(fns)
        names = names[r % len(names) :] + names[: r % len(names)]
        for k in names:
            sync(device)
            t0 = time.perf_counter()
            fns[k]()
            sync(device)
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def first_call_seconds(f: Callable[[], object], device: str) -> float:
    """Seconds of one call, timed alone before the rounds: it decides whether an implementation
    is still affordable at this length."""
    sync(device)
    t0 = time.perf_counter()
    f()
    sync(device)
    return time.perf_counter() - t0


class Progress:
    """A plain-text progress bar on stderr (one line, redrawn). Each case declares its steps
    (``steps(config)``), so ``total`` is their sum, never counted by hand."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done, self.enabled = total, 0, enabled
        self.start = time.perf_counter()

    def step(self, label: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        width = 30
        filled = round(width * min(self.done, self.total) / max(self.total, 1))
        elapsed = time.perf_counter() - self.start
        bar = "#" * filled + "-" * (width - filled)
        line = f"\r[{bar}] {self.done}/{self.total} {elapsed:6.0f}s {label[:40]:<40}"
        sys.stderr.write(line)
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()
