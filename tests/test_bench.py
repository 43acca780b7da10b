"""`python -m mha.bench`: the layout of its results file, never its timings.

The quick run is one subprocess with tiny sizes (seconds on 2 idle cores), started in an empty
folder without ``--out``: it writes there, not into the docs tree. The committed
`docs/assets/bench/results.json`, the source of the performance page, must follow the same layout
and come from a full run. The layout itself is ``mha.bench.results.LAYOUT``, checked by
``problems()``; the tests here add what a type cannot say.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from mha.bench import IMPLEMENTATIONS, TARGETS, evaluate, load
from mha.bench.cases import CASES, run
from mha.bench.cases.memory import MASKED
from mha.bench.config import QUICK
from mha.bench.context import Context
from mha.bench.results import DEFAULT_OUT, problems
from mha.bench.timing import Progress

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "docs" / "assets" / "bench" / "results.json"
NAMES = {i.name for i in IMPLEMENTATIONS}


def check_layout(res: dict) -> None:
    """The layout, every case's sections filled, and what the numbers must say whatever the
    machine: every implementation measured, ``torch`` against itself 1, every target checked."""
    found = problems(res)
    assert not found, "\n".join(found)
    for case in CASES:
        for section in case.SECTIONS:
            assert res[section] or not isinstance(res[section], list), f"{section} is empty"
    for section in ("forward", "backward", "memory"):
        got = {r["impl"] for r in res[section] if "dtype" not in r}
        assert got == NAMES, f"{section} measures {sorted(got)}, expected {sorted(NAMES)}"
        for r in res[section]:
            if r["impl"] == "torch" and "dtype" not in r:
                assert r["ratio_vs_torch"] == 1.0, f"{section}: torch against itself {r}"
    causal = {r["impl"] for r in res["forward"] if r["causal"]}
    assert causal == {i.name for i in IMPLEMENTATIONS if i.causal}, causal
    masked = {r["impl"] for r in res["memory_masked"]}
    assert masked == set(MASKED), f"memory_masked measures {sorted(masked)}"
    kv = {(r["heads"], r["kv_heads"]) for r in res["gqa"]}
    heads = res["config"]["heads"]
    assert (heads, heads) in kv and (heads, heads // 4) in kv, kv
    for target in TARGETS:
        row, _ = target.row.find(res)
        assert row is not None, f"no row for the target {target.name[0]!r}"
    for t in evaluate(res):
        # A missed target says why, in both languages; a met one does not need to.
        assert t.met or (t.why and all(t.why)), f"{t.name[0]} missed without a reason"


@pytest.fixture(scope="module")
def quick(quick_bench) -> tuple[dict, str, Path]:
    """``python -m mha.bench --quick`` in a folder of its own (started with the session:
    ``tests/conftest.py``)."""
    returncode, out, err, folder = quick_bench
    assert returncode == 0, err[-2000:]
    return load(folder / DEFAULT_OUT), out, folder


def test_quick_run_writes_into_the_current_folder_by_default(quick):
    _, _, folder = quick
    assert [p.name for p in folder.iterdir()] == [DEFAULT_OUT.name]


def test_quick_run_follows_the_layout(quick):
    res, _, _ = quick
    check_layout(res)
    assert res["config"]["quick"] is True, res["config"]


def test_quick_run_prints_the_table_and_every_target(quick):
    res, stdout, _ = quick
    for heading in ("Forward", "Forward + backward", "Peak memory", "KV-cache", "Targets"):
        assert heading in stdout, f"no {heading!r} section in the printed table"
    for t in evaluate(res):
        state = "met" if t.met else "MISSED"
        assert f"[{state}] {t.name[0]}" in stdout, f"target not printed: {t.name[0]}"


def test_quick_run_measures_the_exact_gqa_saving(quick):
    # The cache sizes are counted, not timed: kv_heads = heads / 4 keeps exactly a quarter.
    res, _, _ = quick
    heads = res["config"]["heads"]
    quarter = next(r for r in res["gqa"] if r["kv_heads"] == heads // 4)
    assert quarter["cache_ratio_vs_full"] == 0.25, quarter


def test_committed_results_follow_the_layout_and_come_from_a_full_run():
    res = load(COMMITTED)
    check_layout(res)
    assert res["config"]["quick"] is False, "the committed results come from a --quick run"
    cfg = res["config"]
    assert (cfg["batch"], cfg["hidden"], cfg["heads"], cfg["dtype"]) == (4, 512, 8, "float32"), cfg
    seqs = sorted({r["seq_len"] for r in res["forward"]})
    assert seqs[0] == 64 and seqs[-1] >= 2048, seqs
    assert all(s & (s - 1) == 0 for s in seqs), f"not powers of two: {seqs}"


def test_layout_check_catches_planted_faults():
    res = load(COMMITTED)
    assert not problems(res)
    planted = {
        "a target stored in the file": {**res, "targets": []},
        "a section missing": {k: v for k, v in res.items() if k != "decode"},
        "an unknown implementation": {**res, "memory": [{**res["memory"][0], "impl": "flash"}]},
        "a bool for a number": {**res, "gqa": [{**res["gqa"][0], "cache_bytes": True}]},
        "a key missing in a row": {**res, "parts": [{"seq_len": 1024}]},
        "a ratio of zero": {**res, "backward": [{**res["backward"][0], "ratio_vs_torch": 0.0}]},
    }
    for fault, broken in planted.items():
        assert problems(broken), f"not caught: {fault}"


def test_a_case_must_take_the_steps_it_declares():
    def one_step(context):
        context.progress.step("once")
        return {"x": []}

    wrong = types.SimpleNamespace(
        __name__="wrong", SECTIONS={"x": list}, steps=lambda config: 2, run=one_step
    )
    context = Context(QUICK, Progress(2, enabled=False))
    with pytest.raises(RuntimeError, match="declared 2 progress steps, took 1"):
        run(context, [wrong])


def test_every_case_declares_its_sections_steps_and_report():
    for case in CASES:
        assert case.SECTIONS and callable(case.steps), case.__name__
        assert callable(case.run) and callable(case.report), case.__name__
        assert case.steps(QUICK) >= 1, case.__name__
