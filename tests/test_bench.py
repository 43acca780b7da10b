"""`python -m mha.bench`: the structure of its results file, never its timings.

The quick run is one subprocess with tiny sizes (a few seconds on 2 loaded cores); the committed
`docs/assets/bench/results.json`, the source of the performance page, must follow the same schema
and come from a full run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "docs" / "assets" / "bench" / "results.json"
IMPLS = {"annotated", "pure", "full-fast", "full-math", "torch"}
MASKED_IMPLS = {"full-fast", "torch"}  # measured with a padding mask too
NUMBER = (int, float)

SCHEMA = {
    "machine": {
        "cpu": str,
        "cores": int,
        "threads": int,
        "torch": str,
        "python": str,
        "device": str,
        "date": str,
    },
    "config": {
        "batch": int,
        "hidden": int,
        "heads": int,
        "dtype": str,
        "repeats": int,
        "quick": bool,
    },
    "forward": {
        "impl": str,
        "seq_len": int,
        "causal": bool,
        "median_ms": NUMBER,
        "ratio_vs_torch": NUMBER,
        "gflops": NUMBER,
        "fraction_of_gemm": NUMBER,
    },
    "backward": {
        "impl": str,
        "seq_len": int,
        "causal": bool,
        "median_ms": NUMBER,
        "ratio_vs_torch": NUMBER,
    },
    "memory": {"impl": str, "seq_len": int, "peak_growth_mb": NUMBER, "ratio_vs_torch": NUMBER},
    "memory_masked": {
        "impl": str,
        "seq_len": int,
        "mask": str,
        "peak_growth_mb": NUMBER,
        "unmasked_mb": NUMBER,
        "ratio_vs_unmasked": NUMBER,
    },
    "decode": {"seq_len": int, "cache_ms": NUMBER, "recompute_ms": NUMBER, "speedup": NUMBER},
    "gqa": {
        "heads": int,
        "kv_heads": int,
        "cache_bytes": int,
        "cache_ratio_vs_full": NUMBER,
        "median_ms": NUMBER,
    },
    "targets": {
        "name": str,
        "name_zh": str,
        "value": NUMBER,
        "target": str,
        "target_zh": str,
        "met": bool,
        "why": (str, type(None)),
        "why_zh": (str, type(None)),
    },
}
LISTS = ("forward", "backward", "memory", "memory_masked", "decode", "gqa", "targets")


def _check_fields(where: str, record: dict, fields: dict) -> None:
    assert isinstance(record, dict), f"{where}: not an object: {record!r}"
    missing = set(fields) - set(record)
    assert not missing, f"{where}: missing keys {sorted(missing)} in {record!r}"
    for key, kind in fields.items():
        value = record[key]
        # bool is an int in Python: an int field must not hold True/False.
        if kind is int or kind == NUMBER:
            assert not isinstance(value, bool), f"{where}.{key} = {value!r} is a bool"
        assert isinstance(value, kind), f"{where}.{key} = {value!r}, expected {kind}"


def check_schema(res: dict) -> None:
    """Every key of the schema, with its type; impl names known; every ratio positive."""
    for section in ("machine", "config"):
        _check_fields(section, res[section], SCHEMA[section])
    assert isinstance(res["gemm_gflops"], NUMBER), res["gemm_gflops"]
    assert res["gemm_gflops"] > 0, res["gemm_gflops"]
    for section in LISTS:
        rows = res[section]
        assert isinstance(rows, list), f"{section} is not a list"
        assert rows, f"{section} is empty"
        for i, row in enumerate(rows):
            _check_fields(f"{section}[{i}]", row, SCHEMA[section])
            if "impl" in row:
                assert row["impl"] in IMPLS, f"{section}[{i}].impl = {row['impl']!r}"
            for key, value in row.items():
                if key.startswith("ratio") or key in ("speedup", "fraction_of_gemm", "gflops"):
                    assert value > 0, f"{section}[{i}].{key} = {value!r} is not positive"
            if "median_ms" in row:
                assert row["median_ms"] > 0, f"{section}[{i}] median_ms = {row['median_ms']}"
            if "why" in row:
                # A missed target says why; a met one does not need to.
                assert row["met"] or row["why"], f"targets[{i}] missed without a reason: {row}"
                assert bool(row["why"]) == bool(row["why_zh"]), f"targets[{i}]: one language {row}"
    for section in ("forward", "backward", "memory"):
        got = {r["impl"] for r in res[section] if "dtype" not in r}
        assert got == IMPLS, f"{section} measures {sorted(got)}, expected {sorted(IMPLS)}"
        for r in res[section]:
            if r["impl"] == "torch" and "dtype" not in r:
                assert r["ratio_vs_torch"] == 1.0, f"{section}: torch against itself {r}"
    causal = {r["impl"] for r in res["forward"] if r["causal"]}
    assert causal == {"full-fast", "full-math", "torch"}, causal
    masked = {r["impl"] for r in res["memory_masked"]}
    assert masked == MASKED_IMPLS, f"memory_masked measures {sorted(masked)}"
    kv = {(r["heads"], r["kv_heads"]) for r in res["gqa"]}
    heads = res["config"]["heads"]
    assert (heads, heads) in kv and (heads, heads // 4) in kv, kv
    names = " | ".join(t["name"] for t in res["targets"])
    topics = (
        "forward time",
        "GEMM rate",
        "peak memory",
        "padding mask",
        "causal",
        "decoding",
        "GQA",
    )
    for topic in topics:
        assert topic in names, f"no target about {topic!r} among: {names}"


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    done = subprocess.run(
        [sys.executable, "-m", "mha.bench", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(out.read_text(encoding="utf-8")), done.stdout


def test_quick_run_follows_the_schema(quick):
    res, _ = quick
    check_schema(res)
    assert res["config"]["quick"] is True, res["config"]


def test_quick_run_prints_the_table_and_every_target(quick):
    res, stdout = quick
    for heading in ("Forward", "Forward + backward", "Peak memory", "KV-cache", "Targets"):
        assert heading in stdout, f"no {heading!r} section in the printed table"
    for t in res["targets"]:
        state = "met" if t["met"] else "MISSED"
        assert f"[{state}] {t['name']}" in stdout, f"target not printed: {t['name']}"


def test_quick_run_measures_the_exact_gqa_saving(quick):
    # The cache sizes are counted, not timed: kv_heads = heads / 4 keeps exactly a quarter.
    res, _ = quick
    heads = res["config"]["heads"]
    quarter = next(r for r in res["gqa"] if r["kv_heads"] == heads // 4)
    assert quarter["cache_ratio_vs_full"] == 0.25, quarter


def test_committed_results_follow_the_schema_and_come_from_a_full_run():
    res = json.loads(COMMITTED.read_text(encoding="utf-8"))
    check_schema(res)
    assert res["config"]["quick"] is False, "the committed results come from a --quick run"
    cfg = res["config"]
    assert (cfg["batch"], cfg["hidden"], cfg["heads"], cfg["dtype"]) == (4, 512, 8, "float32"), cfg
    seqs = sorted({r["seq_len"] for r in res["forward"]})
    assert seqs[0] == 64 and seqs[-1] >= 2048, seqs
    assert all(s & (s - 1) == 0 for s in seqs), f"not powers of two: {seqs}"
