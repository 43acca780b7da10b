"""The text report printed at the end of a run: the machine, each case's table, the targets and
the notes (the run's stops and failures, and how it counted, in sentences)."""

from __future__ import annotations

from mha.bench.cases import CASES
from mha.bench.config import FULL, Config
from mha.bench.targets import evaluate

FLOPS_NOTE = (
    "FLOPs: 4 projections 4*2*b*L*d^2 plus 2 attention products 2*2*b*L^2*d; causal rows are "
    "counted with the same FLOPs although the kernel may skip the masked half"
)
WHY_LIMIT = {
    "--max-backward-math-seq": "the L x L scores and their gradient would need several GB per "
    "call on this machine",
}
"""Why a length limit exists, by the option that sets it."""


def _case_name(stop: dict) -> str:
    if stop["case"] == "forward":
        return f"{stop['dtype']} forward{' causal' if stop['causal'] else ''}"
    return {"backward": "forward+backward"}.get(stop["case"], stop["case"])


def notes(results: dict) -> list[str]:
    """The run's notes as sentences, from the data the file keeps."""
    found = []
    if results["machine"]["device"] == "cpu":
        found.append("float16/bfloat16 rows are measured on a CUDA device only; this run is on CPU")
    for s in results["stops"]:
        what, option = _case_name(s), s["option"]
        if s["took_s"] is None:
            why = f"{WHY_LIMIT[option]}: " if option in WHY_LIMIT else ""
            found.append(
                f"{what}: {s['impl']} not measured beyond seq_len {s['limit']:g} ({why}{option})"
            )
        else:
            found.append(
                f"{what}: {s['impl']} stopped after seq_len {s['after_seq_len']} (one call took "
                f"{s['took_s']:.1f} s > {s['limit']:g} s, {option}); longer lengths not measured"
            )
    for f in results["failures"]:
        found.append(
            f"{f['case']}: {f['impl']} ({f['mask']} mask) at seq_len {f['seq_len']} failed: "
            f"{f['error']}"
        )
        if (f["impl"], f["mask"]) == ("torch", "none"):
            found.append(
                f"{f['case']}: no nn.MultiheadAttention figure at seq_len {f['seq_len']}; "
                "row left out"
            )
    config = Config.from_record(results["config"], device="cpu")
    if config.reduced:
        found.append(
            f"reduced run: timed over seq_len {list(config.seq_lens)}, memory over "
            f"{list(config.memory_seq_lens)}, {config.repeats} repeats (the full run: "
            f"{FULL.seq_lens[0]}..{FULL.seq_lens[-1]} for both, {FULL.repeats} repeats)"
        )
    found.append(FLOPS_NOTE)
    for r in results["remeasured"]:
        found.append(
            f"{', '.join(r['sections'])} re-measured on {r['date']} (--into), on the same "
            f"machine and sizes; the other sections are from the run of "
            f"{results['machine']['date']}"
        )
    return found


def report(results: dict) -> str:
    m, c = results["machine"], results["config"]
    lines = [
        f"{m['cpu']}, {m['cores']} cores, {m['threads']} threads, torch {m['torch']}, "
        f"{m['device']}; batch {c['batch']}, hidden {c['hidden']}, heads {c['heads']}, "
        f"{c['dtype']}; same-run GEMM {results['gemm_gflops']:.1f} GFLOP/s (median over lengths)"
    ]
    for case in CASES:
        lines += ["", *case.report(results)]
    lines += ["", "Targets"]
    for t in evaluate(results):
        if t.met is None:
            lines.append(f"[{t.status[0]}] {t.name[0]} (target {t.asked[0]})")
            continue
        lines.append(f"[{t.status[0]}] {t.name[0]}: {t.value:.3g} (target {t.asked[0]})")
        if t.why:
            lines.append(f"         why: {t.why[0]}")
    lines += ["", "Notes", *(f"- {n}" for n in notes(results))]
    return "\n".join(lines)
