"""The command line: ``python -m mha.bench [--quick] [--out FILE] ...`` (``--help`` lists all)."""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import torch

from mha.bench import cases
from mha.bench.config import FULL, QUICK, Config
from mha.bench.context import Context
from mha.bench.report import report
from mha.bench.results import DEFAULT_OUT, load, machine, now, save
from mha.bench.timing import Progress


def _lengths(text: str) -> tuple[int, ...]:
    return tuple(int(s) for s in text.split(",") if s.strip())


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mha.bench",
        description="Time, peak memory and FLOP rate of each MHA implementation, side by side "
        "with nn.MultiheadAttention.",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes, few repeats (seconds)")
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"JSON file (default {DEFAULT_OUT})"
    )
    p.add_argument("--seq", type=_lengths, help="comma-separated lengths (64,...,4096)")
    p.add_argument("--mem-seq", type=_lengths, help="lengths for memory (default: --seq, if given)")
    p.add_argument("--repeats", type=int, help="timed rounds per configuration")
    p.add_argument("--max-call", type=float, help="stop an implementation after a call > this (s)")
    p.add_argument("--max-backward-math-seq", type=int)
    p.add_argument("--max-memory-math-seq", type=int)
    p.add_argument("--batch", type=int)
    p.add_argument("--hidden", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--into",
        type=Path,
        help="measure only --case (with the sizes and lengths of this results file) and replace "
        "that case's sections in it",
    )
    p.add_argument("--case", choices=sorted(CASE_NAMES), help="the case --into measures")
    p.add_argument(
        "--memory-into", type=Path, help="the same as --into FILE --case memory: the peak memory"
    )
    return p


CASE_NAMES = {case.__name__.rsplit(".", 1)[1]: case for case in cases.CASES}
"""Each case by its module's name."""


def config(args: argparse.Namespace, p: argparse.ArgumentParser) -> Config:
    """The preset, with what the command line gives."""
    preset = QUICK if args.quick else FULL
    given = {
        "seq_lens": args.seq,
        "memory_seq_lens": args.mem_seq if args.mem_seq is not None else args.seq,
        "repeats": args.repeats,
        "max_call_s": args.max_call,
        "max_backward_math_seq": args.max_backward_math_seq,
        "max_memory_math_seq": args.max_memory_math_seq,
        "batch": args.batch,
        "hidden": args.hidden,
        "heads": args.heads,
    }
    c = dataclasses.replace(
        preset, device=args.device, **{k: v for k, v in given.items() if v is not None}
    )
    for name in ("seq_lens", "memory_seq_lens"):
        if not getattr(c, name) or min(getattr(c, name)) < 2:
            p.error(f"{name} needs lengths >= 2, got {list(getattr(c, name))}")
    return c


def measure(c: Config, progress_bar: bool) -> dict:
    """A whole run: every case, in one process, so the ratios compare like with like."""
    started = time.perf_counter()
    results = {"machine": machine(c.device), "config": c.record()}
    progress = Progress(sum(case.steps(c) for case in cases.CASES), progress_bar)
    context = Context(c, progress)
    results |= cases.run(context)
    progress.close()
    results |= {"stops": context.stops, "failures": context.failures, "remeasured": []}
    results["seconds"] = time.perf_counter() - started
    return results


def remeasure(path: Path, name: str, device: str, progress_bar: bool) -> dict:
    """Measure one case again into an existing results file, with its sizes and lengths, and
    record it: memory does not depend on the machine's load as time does, and a case that
    compares its own measurements side by side (as ``generate`` does) stands on its own."""
    case = CASE_NAMES[name]
    results = load(path)
    c = Config.from_record(results["config"], device)
    progress = Progress(case.steps(c), progress_bar)
    context = Context(c, progress)
    results |= cases.run(context, [case])
    progress.close()
    keep = [s for s in results["stops"] if s["case"] != name]
    results["stops"] = keep + context.stops
    results["failures"] = [f for f in results["failures"] if f["case"] != name]
    results["failures"] += context.failures
    # An earlier re-measurement of these sections no longer stands: the file says the last one
    earlier = [r for r in results["remeasured"] if r["sections"] != list(case.SECTIONS)]
    results["remeasured"] = [*earlier, {"sections": list(case.SECTIONS), "date": now()}]
    save(results, path)
    return results


def main(argv: list[str] | None = None) -> dict:
    p = parser()
    args = p.parse_args(argv)
    if args.memory_into:
        args.into, args.case = args.memory_into, "memory"
    if args.into:
        if args.case is None:
            p.error("--into needs --case")
        results = remeasure(args.into, args.case, args.device, not args.no_progress)
        print(report(results))
        return results
    results = measure(config(args, p), not args.no_progress)
    out = save(results, args.out)
    print(report(results))
    print(f"\nwritten to {out} in {results['seconds']:.0f} s")
    return results


if __name__ == "__main__":
    main()
