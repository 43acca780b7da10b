"""`python -m mha.bench`: the layout of its results file, never its timings.

The quick run is one subprocess with tiny sizes (seconds on 2 idle cores), started in an empty
folder without ``--out``: it writes there, not into the docs tree. The committed
`docs/assets/bench/results.json`, the source of the performance page, must follow the same layout
and come from a full run. The layout itself is ``mha.bench.results.LAYOUT``, checked by
``problems()``; the tests here add what a type cannot say.
"""

from __future__ import annotations

import re
import statistics
import types
from pathlib import Path

import pytest

from mha.bench import IMPLEMENTATIONS, TARGETS, evaluate, load
from mha.bench.cases import CASES, run
from mha.bench.cases.forward import GEMM_SCALES, gemm_rows, reference_rate
from mha.bench.cases.memory import MASKED
from mha.bench.cases.parts import rest
from mha.bench.config import QUICK
from mha.bench.context import Context
from mha.bench.results import DEFAULT_OUT, problems
from mha.bench.targets import SAVING, causal_saving
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
    checked = evaluate(res)
    # Every target is listed: checked, or (a short run) not checked at a length not measured.
    assert [t.target for t in checked] == list(TARGETS), [t.name[0] for t in checked]
    for t in checked:
        # A missed target says why, in both languages; a met one or one not checked does not.
        if t.met is False:
            assert t.why and all(t.why), f"{t.name[0]} missed without a reason"
        else:
            assert t.why is None, f"{t.name[0]} ({t.state}) has a reason"
    assert {(r["comparison"], r["threads"]) for r in res["rounding"]} >= {("decode", 1)}
    assert [r["head_size"] for r in res["rounding_scale"]] == list(range(1, 129))
    for g in res["gemm"]:
        # the reference is the median over the shapes, never one shape's rate
        assert len(g["rows"]) == len(g["rates"]) >= 3, g
        assert g["gflops"] == statistics.median(g["rates"]), g


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
        assert f"[{t.status[0]}] {t.name[0]}" in stdout, f"target not printed: {t.name[0]}"


def test_quick_run_leaves_targets_at_lengths_it_did_not_measure_unchecked(quick):
    """A target set for a length the quick run did not measure is "not checked (length not
    measured)", in the printed report and in ``evaluate``: no value, no miss, no reason."""
    res, stdout, _ = quick
    measured = {r["seq_len"] for r in res["forward"]}
    checked = evaluate(res)
    unmeasured = [t for t in checked if t.target.row.seq_len not in (None, *measured)]
    assert unmeasured, "the quick run measures every target's length: nothing to check here"
    for t in unmeasured:
        assert (t.state, t.met, t.value, t.why) == ("not checked", None, None, None), t
        assert t.status[0].startswith("not checked (length not measured"), t.status
        assert f"[{t.status[0]}] {t.name[0]} (target {t.asked[0]})" in stdout, t.name[0]
        if "{seq_len}" in t.target.name[0]:  # named by the length it is set for
            assert f"seq_len {t.target.row.seq_len}" in t.name[0], t.name[0]
    # nothing missed is a target of another length: a miss has a row of its own length
    for line in stdout.splitlines():
        assert "not measured in this run; checked at" not in line, line


def test_quick_report_writes_no_negative_rest_and_no_saving_at_a_share_of_one(quick):
    _, stdout, _ = quick
    assert not re.search(r"the rest -\d", stdout), "a negative time printed as the rest"
    for share in re.findall(r"\(([\d.]+) of its non-causal time: the kernel skips", stdout):
        assert float(share) < SAVING, f"a saving claimed at {share} of the non-causal time"


def causal_results(causal_ms: float, plain_ms: float) -> dict:
    """A synthetic results file: full-fast and torch at one length, causal and not."""
    rows = [
        {"impl": impl, "seq_len": 2048, "causal": causal, "median_ms": ms, "ratio_vs_torch": 1.0}
        for impl, causal, ms in (
            ("full-fast", True, causal_ms),
            ("full-fast", False, plain_ms),
            ("torch", True, 10.0),
            ("torch", False, 10.0),
        )
    ]
    return {"forward": rows}


CAUSAL = next(t for t in TARGETS if t.row.causal)


@pytest.mark.parametrize(
    "causal_ms, plain_ms, says",
    [
        (5.5, 10.0, "the kernel skips the blocks above the diagonal"),
        (10.0, 10.0, "no saving measured"),  # a share of 1.00: the same time
        (9.95, 10.0, "no saving measured"),  # 0.995: below 1, yet within the noise
        (10.5, 10.0, "no saving measured"),
        (13.0, 10.0, "slower than without the mask"),
    ],
)
def test_causal_reason_claims_a_saving_only_beyond_the_noise(causal_ms, plain_ms, says):
    results = causal_results(causal_ms, plain_ms)
    row = CAUSAL.row.find(results)
    why = CAUSAL.reason(results, row, CAUSAL)
    assert f"{causal_ms / plain_ms:.2f} of its non-causal time: {says}" in why[0], why[0]
    assert all(why), "both languages"
    for share in (0.0, 0.5, SAVING - 1e-9):
        assert causal_saving(share)[0].startswith("the kernel skips"), share
    for share in (SAVING, 0.95, 0.999, 1.0, 1 / SAVING):
        assert causal_saving(share)[0].startswith("no saving measured"), share


def test_a_target_is_never_checked_at_another_length():
    """At a length the run did not measure, the target is not checked: not missed at the
    longest length measured."""
    decode = next(t for t in TARGETS if t.row.section == "decode")
    results = {"decode": [{"seq_len": 16, "speedup": 0.9}, {"seq_len": 32, "speedup": 0.9}]}
    (t,) = evaluate(results, [decode])
    assert (t.state, t.value, t.why, t.measured) == ("not checked", None, None, (16, 32)), t
    assert "seq_len 1024" in t.name[0] and "seq_len 1024" in t.status[0], t
    assert all(t.status) and "16, 32" in t.status[1], t.status
    results["decode"].append({"seq_len": 1024, "speedup": 140.0})
    (t,) = evaluate(results, [decode])
    assert (t.state, t.value) == ("met", 140.0), t


def test_parts_rest_below_zero_is_noise_not_a_time():
    assert "within the noise" in rest(-8.5)[0] and "-8.5" not in rest(-8.5)[0], rest(-8.5)
    assert rest(2.0)[0].endswith("2.0 ms"), rest(2.0)
    assert all(rest(-1.0)) and all(rest(1.0)), "both languages"


def test_gemm_reference_is_the_median_over_shapes():
    """One shape's dip (149 GFLOP/s against 207-213 for the others) moves the reference not at
    all: no fraction above 1 from a dip."""
    assert gemm_rows(4, 2048) == [4096, 8192, 16384]
    assert len(set(gemm_rows(4, 1024))) == len(GEMM_SCALES) >= 3
    assert reference_rate([210.0, 149.0, 207.0]) == 207.0
    assert reference_rate([149.0, 212.0, 208.0]) == 208.0
    # the forward case times each shape in the same rounds and keeps the median
    res = load(COMMITTED)
    for g in res["gemm"]:
        m = res["config"]["batch"] * g["seq_len"]
        assert g["rows"] == gemm_rows(res["config"]["batch"], g["seq_len"]), g
        assert m in g["rows"], g  # the projections' own shape is one of them
        assert g["gflops"] == statistics.median(g["rates"]), g


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
