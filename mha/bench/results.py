"""The results file: measurements only, its layout written once.

The file holds what a run measured and how it ran: the machine, the configuration, each case's
sections (their row types live with their case, ``SECTIONS``), the implementations a case stopped
(``stops``) and the measurements that failed (``failures``), and the sections a later
``--into`` re-measured (``remeasured``). No targets and no sentences: the targets are
evaluated against these numbers by ``mha.bench.targets``, where and when they are shown (the
printed report, the site's performance page), and the report writes the sentences.

:func:`problems` checks a file against the layout: every key, every type, every implementation
name.
"""

from __future__ import annotations

import json
import os
import platform
import types
import typing
from datetime import datetime, timezone
from pathlib import Path
from typing import TypedDict

import torch

from mha.bench.cases import CASES
from mha.bench.context import Failure, Stop
from mha.bench.implementations import NAMES

DEFAULT_OUT = Path("bench-results.json")
"""Where ``python -m mha.bench`` writes without ``--out``: the current folder (``make bench``
writes the site's ``docs/assets/bench/results.json``)."""


class Machine(TypedDict):
    cpu: str
    cores: int
    threads: int
    torch: str
    python: str
    device: str
    date: str
    """When the run started, UTC, ``2026-11-30T01:39:13Z``."""


class Remeasured(TypedDict):
    """Sections measured again later (``--into``), on the same machine and sizes."""

    sections: list[str]
    date: str


class ConfigRecord(TypedDict):
    """``Config.record()``: the checked part (a file may hold more of the configuration)."""

    batch: int
    hidden: int
    heads: int
    dtype: str
    repeats: int
    quick: bool
    seq_lens: list[int]
    memory_seq_lens: list[int]


LAYOUT: dict[str, object] = {
    "machine": Machine,
    "config": ConfigRecord,
    **{section: kind for case in CASES for section, kind in case.SECTIONS.items()},
    "stops": list[Stop],
    "failures": list[Failure],
    "remeasured": list[Remeasured],
    "seconds": float,
}
"""Every key of a results file, with its type."""


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def machine(device: str) -> Machine:
    """This machine, as the results file describes it."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return Machine(
        cpu=cpu,
        cores=os.cpu_count() or 1,
        threads=torch.get_num_threads(),
        torch=torch.__version__,
        python=platform.python_version(),
        device=f"cuda ({torch.cuda.get_device_name()})" if device.startswith("cuda") else "cpu",
        date=now(),
    )


def load(path: str | os.PathLike) -> dict:
    """A results file, as the dict :data:`LAYOUT` describes."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def save(results: dict, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return path


def _problems(where: str, value: object, kind: object) -> list[str]:
    """What in ``value`` does not have the type ``kind`` (a class, ``X | None``, ``list[X]`` or a
    ``TypedDict``)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if any(not _problems(where, value, k) for k in args):
            return []
        return [f"{where} = {value!r}: not {kind}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: not a list"]
        return [p for i, v in enumerate(value) for p in _problems(f"{where}[{i}]", v, args[0])]
    if typing.is_typeddict(kind):
        if not isinstance(value, dict):
            return [f"{where}: not an object: {value!r}"]
        missing = kind.__required_keys__ - set(value)
        if missing:
            return [f"{where}: missing keys {sorted(missing)} in {value!r}"]
        hints = typing.get_type_hints(kind)
        return [
            p for k in hints if k in value for p in _problems(f"{where}.{k}", value[k], hints[k])
        ]
    if kind is float:
        kind = (int, float)  # JSON writes a whole float as an int
    # bool is an int in Python: a number must not be True/False.
    if isinstance(value, bool) and kind is not bool:
        return [f"{where} = {value!r} is a bool"]
    return [] if isinstance(value, kind) else [f"{where} = {value!r}: not {kind}"]


def problems(results: dict) -> list[str]:
    """What is wrong with a results file: keys missing or unknown, values of the wrong type,
    implementations of unknown names, ratios and times that are not positive.

    >>> problems({"config": {}, "remeasured": [], "notes": []})[:3]
    ['no machine', "config: missing keys ['batch', ...] in {}", 'no forward']
    >>> problems({"notes": []})[-1]
    "unknown key 'notes'"
    """
    found = []
    for key, kind in LAYOUT.items():
        if key not in results:
            found.append(f"no {key}")
        else:
            found += _problems(key, results[key], kind)
    found += [f"unknown key {key!r}" for key in results if key not in LAYOUT]
    for key, rows in results.items():
        if not isinstance(rows, list):
            continue
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                continue
            if "impl" in row and row["impl"] not in NAMES:
                found.append(f"{key}[{i}].impl = {row['impl']!r}: not one of {NAMES}")
            for field, value in row.items():
                positive = field.startswith("ratio") or field.endswith(
                    ("_ms", "gflops", "_of_gemm")
                )
                if (positive or field == "speedup") and field != "other_ms" and not value > 0:
                    found.append(f"{key}[{i}].{field} = {value!r} is not positive")
    return found
