"""The performance page: its plots and tables are the results file's numbers, in both languages.

The results file (``docs/assets/bench/results.json``, or ``MHA_BENCH_RESULTS``) is read here on its
own, independently of ``mha_site/pictures_perf.py``, and compared with what the hook draws:

- each plotted point's tooltip names the implementation and ``L`` of a row of the file and writes
  its number to three significant digits; points lie higher for larger numbers (log scale), and
  every row of the section is plotted;
- each table the page asks for (``<!-- bench-table: NAME -->``) holds the file's numbers, row for
  row, and both languages ask for the same tables and pictures;
- the targets table holds ``mha.bench.TARGETS`` checked against the file, each named and, where
  missed, explained in the page's language;
- the built site shows the figures and the tables on the page of each language.

No timing is measured here: the numbers are the file's.
"""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from html import escape

import pytest
from support import LANGUAGES, ROOT, page_path

from mha.bench import evaluate, load
from mha_site import markers
from mha_site import pictures_perf as perf
from mha_site.languages import tr
from mha_site.markdown import CHINESE

SVG = "{http://www.w3.org/2000/svg}"
PAGE = "performance.md"
PLOTS = {  # picture -> (section of the file, field, rows kept)
    "bench-time": ("forward", "median_ms", lambda r: not r["causal"]),
    "bench-memory": ("memory", "peak_growth_mb", lambda r: True),
    "bench-ratio": (
        "forward",
        "ratio_vs_torch",
        lambda r: not r["causal"] and r["impl"] != "torch",
    ),
}


@pytest.fixture(scope="module")
def results() -> dict:
    return load(perf.results_path())


def close(written: str, value: float) -> bool:
    """``written`` is ``value`` to three significant digits (or exactly, for integers)."""
    shown = float(written.replace(" ", "").rstrip("×"))
    return abs(shown - value) <= max(abs(value) * 0.005, 0.0005) + 1e-12


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("name", PLOTS)
def test_plotted_points_are_the_files(results, name, language):
    section, field, keep = PLOTS[name]
    rows = [r for r in results[section] if keep(r) and "dtype" not in r]
    svg = ET.fromstring(perf.PICTURES[name](language))
    assert svg.find(f"{SVG}title").text.strip(), name
    points = list(svg.iter(f"{SVG}circle"))
    assert len(points) == len(rows), (name, len(points), len(rows))
    by_key = {(r["impl"], r["seq_len"]): r[field] for r in rows}
    seen = []
    for point in points:
        impl, seq_len = point.get("data-impl"), int(point.get("data-seq-len"))
        value = by_key[impl, seq_len]
        assert float(point.get("data-value")) == value, (name, impl, seq_len)
        tip = point.find(f"{SVG}title").text
        label, number = re.fullmatch(r"(.+)(?:, |，)L = (\d+): ([\d. ]+)\s*\S*", tip).group(1, 3)
        assert label == perf.impl_label(impl, language), tip
        assert re.search(f"L = {seq_len}:", tip), tip
        assert close(number, value), (tip, value)
        seen.append((value, float(point.get("cy"))))
    assert len({(i, s) for i, s in by_key}) == len(points), name
    # higher on the plot (smaller y) for a larger number
    for (v1, y1), (v2, y2) in itertools.pairwise(sorted(seen)):
        assert y2 <= y1 + 1e-6 or v1 == v2, (name, v1, y1, v2, y2)


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("name", PLOTS)
def test_plot_labels_are_in_the_page_language(name, language):
    svg = ET.fromstring(perf.PICTURES[name](language))
    words = " ".join("".join(t.itertext()) for t in svg.iter(f"{SVG}text"))
    if language == "zh":
        assert CHINESE.search(words), words
    else:
        assert not CHINESE.search(words), words
    for impl in {r for r in svg.iter(f"{SVG}path") if r.get("data-impl")}:
        assert impl.get("class"), "each line carries its colour class (light and dark scheme)"


def cells(table: str) -> list[list[str]]:
    lines = table.strip().splitlines()
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in lines[2:]]


def header(table: str) -> list[str]:
    return [c.strip() for c in table.strip().splitlines()[0].strip("|").split(" | ")]


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize(
    "name, section, field",
    [
        ("forward", "forward", "median_ms"),
        ("forward-ratio", "forward", "ratio_vs_torch"),
        ("forward-gemm", "forward", "fraction_of_gemm"),
        ("backward", "backward", "median_ms"),
        ("memory", "memory", "peak_growth_mb"),
    ],
)
def test_pivot_tables_are_the_files(results, name, section, field, language):
    table = perf.table(name, language)
    head = header(table)
    # the GEMM table ends with the reference rate each length was divided by
    extra = 1 if name == "forward-gemm" else 0
    rows = [r for r in results[section] if "dtype" not in r]  # the run's main dtype
    impls = perf.impl_order(rows)
    columns = slice(len(head) - extra - len(impls), len(head) - extra)
    assert head[columns] == [perf.impl_label(i, language) for i in impls], head
    causal_column = len(head) == len(impls) + 2 + extra
    expected = {(r["seq_len"], bool(r.get("causal")), r["impl"]): r[field] for r in rows}
    dtype = results["config"]["dtype"]
    rates = {g["seq_len"]: g["gflops"] for g in results["gemm"] if g["dtype"] == dtype}
    found = 0
    for row in cells(table):
        seq_len = int(row[0])
        causal = causal_column and row[1] in ("yes", "是")
        for impl, cell in zip(impls, row[columns], strict=True):
            key = (seq_len, causal, impl)
            if cell == "—":
                assert key not in expected, key
            else:
                assert close(cell, expected[key]), (key, cell, expected[key])
                found += 1
        if extra:
            assert close(row[-1], rates[seq_len]), (row, rates)
    assert found == len(expected), (name, found, len(expected))


@pytest.mark.parametrize("language", LANGUAGES)
def test_row_tables_are_the_files(results, language):
    decode = cells(perf.table("decode", language))
    assert len(decode) == len(results["decode"]), decode
    for row, r in zip(decode, results["decode"], strict=True):
        assert int(row[0]) == r["seq_len"], row
        keys = ("cache_ms", "sdpa_ms", "projections_ms", "recompute_ms", "speedup")
        for cell, key in zip(row[1:], keys, strict=True):
            assert close(cell, r[key]), (row, r)
    gqa = cells(perf.table("gqa", language))
    assert len(gqa) == len(results["gqa"]), gqa
    for row, r in zip(gqa, results["gqa"], strict=True):
        assert [int(c) for c in row[:3]] == [r["heads"], r["kv_heads"], r["cache_bytes"]], row
        assert close(row[3], r["cache_ratio_vs_full"]) and close(row[4], r["median_ms"]), row
    # The page's language: the zh page names each target and says why it was missed in Chinese.
    checked = evaluate(results)
    table, _, reasons = perf.table("targets", language).partition("\n\n")
    targets = cells(table)
    assert len(targets) == len(checked), targets
    for row, t in zip(targets, checked, strict=True):
        name = tr(language, *t.name)
        assert row[0] == name.replace("|", "\\|") and close(row[1], t.value), (row, t)
        assert bool(CHINESE.search(name)) == (language == "zh"), name
        assert row[2] == f"`{tr(language, *t.asked)}`", (row, t)
        assert row[3].startswith("✔" if t.met else "✘"), (row, t)
        if t.met is False:  # the value shown misses the bound too (0.8496, not 0.850, for >= 0.85)
            shown = float(row[1])
            assert not t.target.met(shown), (row, t)
    listed = re.findall(r"^- \*\*(.+?)\*\*[:：] ?(.*)$", reasons, re.M)
    missed = [t for t in checked if t.met is False]
    assert listed == [(tr(language, *t.name), tr(language, *t.why)) for t in missed]
    masked = cells(perf.table("memory-masked", language))
    seqs = sorted({r["seq_len"] for r in results["memory_masked"]})
    assert [int(row[0]) for row in masked] == seqs, masked
    for r in results["memory_masked"]:
        row = masked[seqs.index(r["seq_len"])]
        at = 1 + 3 * perf.impl_order(results["memory_masked"]).index(r["impl"])
        shown = row[at : at + 3]
        assert all(
            close(c, r[k])
            for c, k in zip(
                shown, ("unmasked_mb", "peak_growth_mb", "ratio_vs_unmasked"), strict=True
            )
        ), (row, r)
    machine = " ".join(" ".join(row) for row in cells(perf.table("machine", language)))
    for key in ("cpu", "torch", "cores", "threads"):
        assert str(results["machine"][key]) in machine, (key, machine)
    assert perf.number(results["gemm_gflops"]) in machine, machine


def page_text(language: str) -> str:
    return (ROOT / "docs" / language / PAGE).read_text(encoding="utf-8")


def test_both_languages_ask_for_the_same_tables_and_pictures():
    tables = {lang: markers.named("bench-table", page_text(lang)) for lang in LANGUAGES}
    shown = {lang: markers.named("picture", page_text(lang)) for lang in LANGUAGES}
    assert tables["en"] == tables["zh"], tables
    here = [name for name in perf.TABLES if name not in perf.ELSEWHERE]
    assert sorted(tables["en"]) == sorted(here), tables["en"]
    assert shown["en"] == shown["zh"] and sorted(shown["en"]) == sorted(PLOTS), shown


def test_no_number_is_typed_in_the_prose():
    """Outside code, markers and anchors, the page writes no measured number (digits with a
    decimal point or a unit such as ms, MB, ×)."""
    for language in LANGUAGES:
        prose = re.sub(
            r"```.*?```|`[^`]*`|<!--.*?-->|\{ #[\w-]+ \}", "", page_text(language), flags=re.S
        )
        measured = re.findall(r"\d+\.\d+|\d+\s*(?:ms|MB|GB|毫秒|×|x\b)", prose)
        assert not measured, (language, measured)


def test_built_pages_show_the_figures_and_tables(built_site, results):
    for language in LANGUAGES:
        html = (built_site / page_path(language, PAGE) / "index.html").read_text(encoding="utf-8")
        figures = re.findall(r'<figure class="mha-figure" data-picture="(bench-[\w-]+)">', html)
        assert figures == markers.named("picture", page_text(language)), (language, figures)
        assert "bench-table:" not in html, f"{language}: a table marker was not replaced"
        shown = len(perf.TABLES) - len(perf.ELSEWHERE)
        # and the tables the page's own Markdown writes (the zh page sets some comparisons as one)
        written = len(re.findall(r"^\|[-:| ]+\|$", page_text(language), re.M))
        assert html.count("<table>") == shown + written, (language, html.count("<table>"))
        for t in evaluate(results):
            name = tr(language, *t.name)
            if not t.met:  # in the table and in the list of reasons
                assert html.count(escape(name)) == 2, (language, name)
        assert results["machine"]["cpu"] in html, language


def test_tables_shown_elsewhere_are_on_their_page_in_both_languages():
    """The rounding tables stand on the pages that state a bound for them, once each."""
    for name, page in perf.ELSEWHERE.items():
        for language in LANGUAGES:
            text = (ROOT / "docs" / language / page).read_text(encoding="utf-8")
            assert markers.named("bench-table", text).count(name) == 1, (name, language, page)


@pytest.mark.parametrize("language", LANGUAGES)
def test_rounding_tables_are_the_files_and_name_the_machine(results, language):
    machine = results["machine"]
    for name, comparisons in (
        ("rounding-cache", perf.ROUNDING_CACHE),
        ("rounding-fast", perf.ROUNDING_FAST),
    ):
        rows = [r for r in results["rounding"] if r["comparison"] in comparisons]
        shown = cells(perf.table(name, language))
        assert len(shown) == len(rows) >= len(comparisons), (name, shown)
        for row, r in zip(shown, rows, strict=True):
            assert row[0] == tr(language, *comparisons[r["comparison"]]), row
            assert machine["cpu"] in row[1] and r["kernels"] in row[1], row
            assert [int(row[2]), int(row[3])] == [r["threads"], r["inputs"]], row
            assert float(row[4].split()[0]) == float(f"{r['largest']:.1e}"), (row, r)
    scale = cells(perf.table("rounding-scale", language))
    off = [r["head_size"] for r in results["rounding_scale"] if r["ulps"]]
    if off:
        assert [int(q) for q in scale[0][0].split(", ")] == off, scale
    assert int(scale[-1][1]) == len(results["rounding_scale"]) - len(off), scale
    assert all(machine["cpu"] in row[-1] for row in scale), scale


def test_targets_table_says_not_checked_where_the_length_was_not_measured(results):
    """A short run's file: the targets set for lengths it did not measure are not checked, with
    no value and no reason, never missed at another length."""
    short = {
        **results,
        "forward": [r for r in results["forward"] if r["seq_len"] <= 512],
        "parts": [],
    }
    checked = evaluate(short)
    later = [t for t in checked if t.target.row.section == "forward"]
    assert later and all(t.state == "not checked" for t in later), later
    for language in LANGUAGES:
        table, _, reasons = perf.table_targets(short, language).partition("\n\n")
        rows = {row[0]: row for row in cells(table)}
        for t in later:
            row = rows[tr(language, *t.name).replace("|", "\\|")]
            assert row[1] == "—" and row[3] == tr(language, *t.status), row
            assert tr(language, *t.name) not in reasons, "a target not checked has no reason"


def test_gemm_table_names_the_reference_shapes(results):
    for language in LANGUAGES:
        title = header(perf.table("forward-gemm", language))[-1]
        hidden = results["config"]["hidden"]
        assert f"[m, {hidden}] @ [{hidden}, {hidden}]" in title, title
        assert "m = 2L, 4L, 8L" in title, title  # half, once and twice batch 4 times L
