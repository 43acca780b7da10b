"""The performance page's plots and tables, drawn at build time from the benchmark's results file.

The single source is the file ``python -m mha.bench`` writes (``make bench``), committed at
``docs/assets/bench/results.json`` (``MHA_BENCH_RESULTS`` names another file, for development).
It holds measurements only: the implementations' labels (``mha.bench.IMPLEMENTATIONS``) and the
targets (``mha.bench.TARGETS``, evaluated against the file here) come from the benchmark package.
No number of the page is typed by hand:

- as a generator of ``mha_site/pictures.py`` (``PICTURES``), it draws the plots: time and peak
  memory against the sequence length, log scale on both axes, one line per implementation; and the
  time as a ratio of ``nn.MultiheadAttention``'s. Each point carries a ``<title>`` with its number.
- for the marker ``<!-- bench-table: NAME -->`` of a page (``mha_site/markers.py``), it writes a
  Markdown table of the file (``TABLES``), in the page's language.

A missing file, or a marker naming no table, is logged as a warning: the strict build fails.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import mha.bench
from mha.bench import IMPLEMENTATIONS, evaluate
from mha.bench.cases.forward import GEMM_SCALES
from mha.bench.config import DECODE_REPEATS, GQA_REPEATS
from mha_site import pictures_ring
from mha_site.languages import ROOT, tr
from mha_site.picture_style import FONT, SMALL, Svg

DEFAULT = ROOT / "docs" / "assets" / "bench" / "results.json"

# How each implementation is drawn, by its name in the file: (class of the line, class of the
# legend's text, light colour, dash pattern). The order of the legend and the tables, and the
# labels, are mha.bench.IMPLEMENTATIONS'.
STYLE = {
    "annotated": ("mha-s0", "mha-t0", "#1f5fa8", "6 3"),
    "pure": ("mha-s1", "mha-t1", "#a14a00", "2 2"),
    "full-fast": ("mha-s2", "mha-t2", "#17724a", ""),
    "full-math": ("mha-s3", "mha-t3", "#8a3a9a", "8 2 2 2"),
    "torch": ("mha-accent", "mha-accent", "#c2185b", "1 3"),
}
UNKNOWN_STYLE = ("mha-sn", "mha-fg", "#555555", "")
SERIES = ("torch", "pure", "full-fast")
"""The styles a plot of other series than the implementations takes, in order (``series``)."""


def series(labels: dict) -> dict:
    """``line_plot``'s ``lines`` for series other than the implementations: each key of
    ``labels`` with its label in both languages and the next style of ``SERIES``."""
    return {key: (label, STYLE[SERIES[i]]) for i, (key, label) in enumerate(labels.items())}


def results_path() -> Path:
    return Path(os.environ.get("MHA_BENCH_RESULTS") or DEFAULT)


def load() -> dict:
    """The results file as a dict (read on each call: a rebuild sees a new run)."""
    return mha.bench.load(results_path())


def impl_label(impl: str, language: str) -> str:
    for i in IMPLEMENTATIONS:
        if i.name == impl:
            return tr(language, i.en, i.zh)
    return impl


def impl_order(rows) -> list[str]:
    known = [i.name for i in IMPLEMENTATIONS]
    present = {r["impl"] for r in rows}
    return [i for i in known if i in present] + sorted(present - set(known))


def number(value: float) -> str:
    """A measured number as the page writes it: three significant digits, never an exponent."""
    if value is None:
        return "—"
    value = float(value)
    if value == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    return (
        f"{value:,.{digits}f}".replace(",", " ") if abs(value) >= 10000 else f"{value:.{digits}f}"
    )


# ---- the plots --------------------------------------------------------------------------------

WIDTH, HEIGHT = 260.0, 220.0  # the plot area; small enough to stay full size on a 390 px phone
LEFT, TOP = 58.0, 30.0


def log_ticks(low: float, high: float) -> list[float]:
    """1, 2, 5 times powers of ten within [low, high] (at most a few: labels must not overlap)."""
    ticks = []
    for exponent in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1):
        for mantissa in (1, 2, 5):
            v = mantissa * 10.0**exponent
            if low <= v <= high:
                ticks.append(v)
    if len(ticks) > 7:
        ticks = [t for t in ticks if round(t / 10 ** math.floor(math.log10(t))) == 1]
    return ticks


def tick_text(value: float) -> str:
    return f"{value:g}" if value >= 0.001 else f"{value:.0e}"


def line_plot(
    name: str,
    language: str,
    rows: list[dict],
    field: str,
    title: str,
    y_label: str,
    unit: str,
    reference: float | None = None,
    lines: dict[str, tuple[tuple[str, str], tuple[str, str, str, str]]] | None = None,
) -> str:
    """One line per implementation of ``rows[i][field]`` against ``seq_len``, log-log.

    ``lines`` draws other series than the implementations: ``rows[i]["impl"]`` names one of its
    keys, each with its label in both languages and its style (as ``STYLE``), in legend order."""
    rows = [r for r in rows if r.get(field) is not None and r[field] > 0]
    if not rows:
        raise ValueError(f"{name}: no positive {field!r} in the results file")
    xs = sorted({r["seq_len"] for r in rows})
    ys = [r[field] for r in rows] + ([reference] if reference else [])
    y_low, y_high = min(ys), max(ys)
    y_low, y_high = 10 ** math.floor(math.log10(y_low)), 10 ** math.ceil(math.log10(y_high))
    if y_high / y_low < 10:
        y_high = y_low * 10
    x_low, x_high = xs[0], xs[-1]
    if x_high == x_low:
        x_low, x_high = x_low / 2, x_high * 2

    def px(x: float) -> float:
        return LEFT + WIDTH * math.log(x / x_low) / math.log(x_high / x_low)

    def py(y: float) -> float:
        return TOP + HEIGHT * (1 - math.log(y / y_low) / math.log(y_high / y_low))

    described = tr(
        language,
        f"{title}. Log scale on both axes. Each point's number is in its tooltip; "
        "the table below the plots lists them all.",
        f"{title}。两条坐标轴都是对数刻度。每个点的数值见悬停提示，图下的表格列出全部数值。",
    )
    svg = Svg(name, title, described)
    svg.text(LEFT, 16, title, size=FONT, bold=True)
    # axes and grid
    svg.line(LEFT, TOP, LEFT, TOP + HEIGHT)
    svg.line(LEFT, TOP + HEIGHT, LEFT + WIDTH, TOP + HEIGHT)
    for x in xs:
        svg.line(px(x), TOP + HEIGHT, px(x), TOP + HEIGHT + 4)
        svg.text(px(x), TOP + HEIGHT + 16, str(x), size=SMALL, anchor="middle")
    for y in log_ticks(y_low, y_high):
        svg.line(
            LEFT - 4,
            py(y),
            LEFT + WIDTH,
            py(y),
            width=0.4 if y != reference else 1.0,
            dashed=y != reference,
        )
        svg.text(LEFT - 6, py(y) + 4, tick_text(y), size=SMALL, anchor="end")
    svg.text(
        LEFT + WIDTH / 2,
        TOP + HEIGHT + 34,
        tr(language, "sequence length L", "序列长度 L"),
        anchor="middle",
    )
    # the y label, turned, left of the tick labels
    svg.turned_text(14, TOP + HEIGHT / 2, y_label)
    # one line per implementation, points with their number as a tooltip
    legend_y = TOP + HEIGHT + 56
    order = (
        impl_order(rows) if lines is None else [n for n in lines if n in {r["impl"] for r in rows}]
    )
    for index, impl in enumerate(order):
        if lines is None:
            stroke_cls, text_cls, colour, dash = STYLE.get(impl, UNKNOWN_STYLE)
            label = impl_label(impl, language)
        else:
            stroke_cls, text_cls, colour, dash = lines[impl][1]
            label = tr(language, *lines[impl][0])
        mine = sorted((r for r in rows if r["impl"] == impl), key=lambda r: r["seq_len"])
        points = [(px(r["seq_len"]), py(r[field])) for r in mine]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        d = " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}" for i, (x, y) in enumerate(points))
        svg.parts.append(
            f'<path d="{d}" class="{stroke_cls} mha-perf-line" fill="none" stroke="{colour}"'
            f' stroke-width="2"{dash_attr} data-impl="{impl}"/>'
        )
        for r, (x, y) in zip(mine, points, strict=True):
            comma = tr(language, ", ", "，")
            tip = f"{label}{comma}L = {r['seq_len']}: {number(r[field])} {unit}".rstrip()
            svg.parts.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" class="{text_cls}" fill="{colour}"'
                f' data-impl="{impl}" data-seq-len="{r["seq_len"]}" data-value="{r[field]!r}">'
                f"<title>{tip}</title></circle>"
            )
        # the legend: two columns, a short stretch of the line then the name
        column, row = index % 2, index // 2
        lx, ly = LEFT - 40 + column * 160, legend_y + row * 20
        svg.parts.append(
            f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 26}" y2="{ly - 4}" class="{stroke_cls}"'
            f' stroke="{colour}" stroke-width="2"{dash_attr}/>'
        )
        svg.text(lx + 32, ly, label, cls=text_cls, size=SMALL, code=impl == "torch")
    return str(svg)


def peak_memory_plot(
    name: str,
    language: str,
    rows: list[dict],
    key: str,
    labels: dict,
    title: str,
    y_label: str,
) -> str:
    """The peak memory growth (MB) of ``rows`` against L, one line per value of ``rows[i][key]``
    that ``labels`` names (its label in both languages), in the order of ``labels``."""
    rows = [dict(r, impl=r[key]) for r in rows]
    lines = series(labels)
    return line_plot(name, language, rows, "peak_growth_mb", title, y_label, "MB", lines=lines)


def main_rows(rows: list[dict]) -> list[dict]:
    """The rows of the run's main dtype (a CUDA run adds rows marked with another ``dtype``)."""
    return [r for r in rows if "dtype" not in r]


def forward(results: dict, causal: bool = False) -> list[dict]:
    return [r for r in main_rows(results["forward"]) if bool(r.get("causal")) == causal]


def time_plot(language: str) -> str:
    return line_plot(
        "bench-time",
        language,
        forward(load()),
        "median_ms",
        tr(language, "Forward time against L", "前向时间随序列长度的变化"),
        tr(language, "median time (ms)", "中位时间（毫秒）"),
        "ms",
    )


def memory_plot(language: str) -> str:
    return line_plot(
        "bench-memory",
        language,
        main_rows(load()["memory"]),
        "peak_growth_mb",
        tr(language, "Peak memory growth against L", "峰值内存增长随序列长度的变化"),
        tr(language, "peak growth (MB)", "峰值增长（MB）"),
        "MB",
    )


def ratio_plot(language: str) -> str:
    rows = [r for r in forward(load()) if r["impl"] != "torch"]
    return line_plot(
        "bench-ratio",
        language,
        rows,
        "ratio_vs_torch",
        tr(
            language,
            "Forward time ÷ nn.MultiheadAttention's",
            "前向时间是 nn.MultiheadAttention 的几倍",
        ),
        tr(language, "time ratio", "时间之比"),
        "×",
        reference=1.0,
    )


PICTURES = {"bench-time": time_plot, "bench-memory": memory_plot, "bench-ratio": ratio_plot}


# ---- the tables -------------------------------------------------------------------------------


def markdown_table(header: list[str], rows: list[list[str]], align: str = "right") -> str:
    bar = ":--" if align == "left" else "--:"
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join([":--"] + [bar] * (len(header) - 1)) + "|",
    ]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def yes_no(value: bool, language: str) -> str:
    return tr(language, "yes", "是") if value else tr(language, "no", "否")


def pivot(
    rows: list[dict],
    field: str,
    language: str,
    causal_column: bool = True,
    extra: tuple[str, dict[int, float]] | None = None,
) -> str:
    """Rows of (L, causal), a column per implementation; ``extra``: a last column's title and its
    value per L."""
    impls = impl_order(rows)
    keys = sorted({(r["seq_len"], bool(r.get("causal"))) for r in rows}, key=lambda k: (k[1], k[0]))
    header = ["L"] + ([tr(language, "causal", "因果")] if causal_column else [])
    header += [impl_label(i, language) for i in impls]
    header += [extra[0]] if extra else []
    body = []
    for seq_len, causal in keys:
        cells = {
            r["impl"]: r[field]
            for r in rows
            if r["seq_len"] == seq_len and bool(r.get("causal")) == causal
        }
        line = [str(seq_len)] + ([yes_no(causal, language)] if causal_column else [])
        line += [number(cells.get(i)) for i in impls]
        body.append(line + ([number(extra[1].get(seq_len))] if extra else []))
    return markdown_table(header, body)


def gemm_shape(results: dict) -> str:
    """The reference GEMMs' shapes, from the file: ``[m, 512] @ [512, 512], m = 2L, 4L, 8L``."""
    c = results["config"]
    scales = [f"{s * c['batch']:g}L" for s in GEMM_SCALES]
    return f"[m, {c['hidden']}] @ [{c['hidden']}, {c['hidden']}], m = {', '.join(scales)}"


def table_forward_gemm(results: dict, language: str) -> str:
    """The GEMM fractions, and the reference GEMM rate each length was divided by (the median over
    the shapes the title names)."""
    dtype = results["config"]["dtype"]
    rates = {g["seq_len"]: g["gflops"] for g in results.get("gemm", []) if g["dtype"] == dtype}
    shape = gemm_shape(results)
    title = tr(
        language,
        f"reference GEMM, GFLOP/s (median of {shape})",
        f"参照 GEMM，GFLOP/s（{shape} 的中位数）",
    )
    return pivot(main_rows(results["forward"]), "fraction_of_gemm", language, extra=(title, rates))


# The configuration the machine table shows, in this order (the file may record more).
CONFIG_SHOWN = (
    "batch",
    "hidden",
    "heads",
    "dtype",
    "repeats",
    "quick",
    "seq_lens",
    "memory_seq_lens",
    "warmup",
    "repeats_backward",
    "repeats_by_seq",
)


def table_machine(results: dict, language: str) -> str:
    m, c = results["machine"], results["config"]
    names = {
        "cpu": ("CPU", "CPU"),
        "cores": ("cores", "核数"),
        "threads": ("torch threads", "torch 线程数"),
        "torch": ("torch", "torch"),
        "python": ("Python", "Python"),
        "device": ("device", "设备"),
        "date": ("date", "日期"),
        "batch": ("batch size", "批大小"),
        "hidden": ("hidden size", "隐藏层维度"),
        "heads": ("heads", "头数"),
        "dtype": ("dtype", "dtype"),
        "repeats": ("repeats per point", "每个点重复次数"),
        "quick": ("short run (--quick)", "快速版（--quick）"),
        "seq_lens": ("sequence lengths timed", "计时的序列长度"),
        "memory_seq_lens": ("sequence lengths of the memory table", "内存表的序列长度"),
        "warmup": ("warm-up calls", "预热次数"),
        "repeats_backward": ("repeats per point, backward", "反向每个点重复次数"),
        "repeats_by_seq": ("forward rounds by sequence length", "前向各序列长度的轮数"),
    }
    note = tr(
        language,
        f"forward rounds per length (backward scaled alike); decoding {DECODE_REPEATS}x and GQA "
        f"{GQA_REPEATS}x the base",
        f"前向轮数按序列长度定（反向按同样比例）；逐个生成是基数的 {DECODE_REPEATS} 倍，"
        f"GQA 是 {GQA_REPEATS} 倍",
    )

    def shown(v) -> str:
        if isinstance(v, bool):
            return yes_no(v, language)
        if isinstance(v, dict):  # repeats by sequence length: "64: 56, 128: 56, ..."
            return ", ".join(f"{k}: {n}" for k, n in v.items())
        return f"`{v}`" if isinstance(v, str) else str(v)

    shown_items = [*m.items(), *((k, c[k]) for k in CONFIG_SHOWN)]
    rows = [[tr(language, *names.get(k, (k, k))), shown(v)] for k, v in shown_items]
    rows.append([tr(language, "how the repeats scale", "重复次数的定法"), note])
    rows.append(
        [
            tr(
                language,
                "reference GEMM rate, same run (median over the lengths)",
                "同一次运行测得的参照 GEMM 速率（各长度的中位数）",
            ),
            f"{number(results['gemm_gflops'])} GFLOP/s",
        ]
    )
    return markdown_table(
        [tr(language, "what", "项目"), tr(language, "value", "数值")], rows, "left"
    )


def table_speedup(rows: list[dict], times: dict[str, tuple[str, str]], language: str) -> str:
    """Per L (``rows[i]["seq_len"]``): the two times of ``times`` (a field of the rows: its
    column's title in both languages), then ``rows[i]["speedup"]``."""
    header = [
        "L",
        *(tr(language, *label) for label in times.values()),
        tr(language, "speed-up", "加速倍数"),
    ]
    body = [
        [str(r["seq_len"]), *(number(r[field]) for field in times), number(r["speedup"]) + "×"]
        for r in rows
    ]
    return markdown_table(header, body)


def table_decode(results: dict, language: str) -> str:
    times = {
        "cache_ms": ("a step with the cache (ms)", "用缓存的一步（毫秒）"),
        "sdpa_ms": ("its kernel alone (ms)", "其中注意力算子单独（毫秒）"),
        "projections_ms": ("its projections alone (ms)", "其中四个投影单独（毫秒）"),
        "recompute_ms": ("recomputing (ms)", "整段重算（毫秒）"),
    }
    return table_speedup(results["decode"], times, language)


def table_generate(results: dict, language: str) -> str:
    header = [
        tr(language, "prompts", "提示数"),
        tr(language, "new positions each", "每个提示续写的字符数"),
        tr(language, "with the cache (tokens/s)", "用缓存（字符/秒）"),
        tr(language, "recomputing (tokens/s)", "整段重算（字符/秒）"),
        tr(language, "speed-up", "加速倍数"),
    ]
    rows = [
        [
            str(r["batch_size"]),
            str(r["steps"]),
            number(r["cached_tokens_s"]),
            number(r["recompute_tokens_s"]),
            number(r["speedup"]) + "×",
        ]
        for r in results["generate"]
    ]
    return markdown_table(header, rows)


def table_hf_decode(results: dict, language: str) -> str:
    header = [
        tr(language, "width, heads/kv_heads", "宽度，头数/kv_heads"),
        tr(language, "positions held", "缓存里的位置数"),
        tr(language, "mha (µs)", "mha（微秒）"),
        tr(language, "transformers (µs)", "transformers（微秒）"),
        tr(language, "mha ÷ transformers", "mha ÷ transformers"),
    ]
    rows = [
        [
            f"{r['hidden_size']}, {r['heads']}/{r['kv_heads']}",
            str(r["seq_len"]),
            number(r["mha_us"]),
            number(r["hf_us"]),
            f"{r['ratio_vs_hf']:.2f}",
        ]
        for r in results["hf_decode"]
    ]
    return markdown_table(header, rows)


def table_hf_generate(results: dict, language: str) -> str:
    header = [
        tr(language, "prompts", "提示数"),
        tr(language, "new tokens each", "每个提示续写的位置数"),
        tr(language, "swapped (tokens/s)", "换上 mha（位置/秒）"),
        tr(language, "transformers (tokens/s)", "transformers（位置/秒）"),
        tr(language, "time ÷ transformers'", "用时 ÷ transformers 的"),
    ]
    rows = [
        [
            str(r["batch_size"]),
            str(r["steps"]),
            number(r["mha_tokens_s"]),
            number(r["hf_tokens_s"]),
            f"{r['ratio_vs_hf']:.2f}",
        ]
        for r in results["hf_generate"]
    ]
    return markdown_table(header, rows)


def table_gqa(results: dict, language: str) -> str:
    header = [
        tr(language, "heads", "头数"),
        "kv_heads",
        tr(language, "cache (bytes)", "缓存（字节）"),
        tr(language, "cache ÷ full heads'", "缓存占全头数时的比例"),
        tr(language, "median time (ms)", "中位时间（毫秒）"),
    ]
    rows = [
        [
            str(r["heads"]),
            str(r["kv_heads"]),
            str(r["cache_bytes"]),
            number(r["cache_ratio_vs_full"]),
            number(r["median_ms"]),
        ]
        for r in results["gqa"]
    ]
    return markdown_table(header, rows)


def table_options(results: dict, language: str) -> str:
    """The causal forward with each option SDPA cannot express, against SDPA's."""
    header = [
        tr(language, "options", "选项"),
        tr(language, "path", "路径"),
        "L",
        tr(language, "median time (ms)", "中位时间（毫秒）"),
        tr(language, "÷ SDPA's", "是 SDPA 的几倍"),
    ]
    paths = {
        "sdpa": ("SDPA", "SDPA"),
        "sdpa per chunk": ("SDPA per chunk", "SDPA，逐块"),
        "written out": ("written out", "逐步计算的路径"),
    }
    rows = [
        [
            f"`{r['option']}`",
            tr(language, *paths[r["path"]]),
            str(r["seq_len"]),
            number(r["median_ms"]),
            number(r["ratio_vs_sdpa"]),
        ]
        for r in results["options"]
    ]
    return markdown_table(header, rows)


def table_memory_masked(results: dict, language: str) -> str:
    """Peak memory growth with and without a ``[batch, 1, 1, L]`` padding mask, per L."""
    impls = impl_order(results["memory_masked"])
    header = ["L"]
    for impl in impls:
        label = impl_label(impl, language)
        header += [
            tr(language, f"{label} without (MB)", f"{label} 不带掩码（MB）"),
            tr(language, f"{label} padding mask (MB)", f"{label} 带填充掩码（MB）"),
            tr(language, f"{label} ratio", f"{label} 之比"),
        ]
    rows = []
    for seq in sorted({r["seq_len"] for r in results["memory_masked"]}):
        row = [str(seq)]
        for impl in impls:
            r = next(
                (r for r in results["memory_masked"] if (r["impl"], r["seq_len"]) == (impl, seq)),
                None,
            )
            row += (
                ["—"] * 3
                if r is None
                else [
                    number(r["unmasked_mb"]),
                    number(r["peak_growth_mb"]),
                    number(r["ratio_vs_unmasked"]),
                ]
            )
        rows.append(row)
    return markdown_table(header, rows)


def table_targets(results: dict, language: str) -> str:
    """The targets (``mha.bench.TARGETS``) checked against the file, as a table in the page's
    language, then the reason of each missed one as a list (a column of long reasons would make
    each row a screen tall on a phone)."""
    header = [
        tr(language, "target", "目标"),
        tr(language, "measured", "测得"),
        tr(language, "asked", "要求"),
        tr(language, "met", "达到"),
    ]
    checked = evaluate(results)

    def state(t) -> str:
        if t.met is None:  # a short run that did not measure the length
            return tr(language, *t.status)
        return tr(language, "✔ yes", "✔ 是") if t.met else tr(language, "✘ no", "✘ 否")

    rows = [
        [
            tr(language, *t.name),
            # a missed target shows enough digits to see the miss (0.8496, not 0.850, for >= 0.85)
            number(t.value) if t.met else "—" if t.met is None else f"{t.value:.4g}",
            f"`{tr(language, *t.asked)}`",
            state(t),
        ]
        for t in checked
    ]
    missed = [t for t in checked if t.met is False]
    if not missed:
        return markdown_table(header, rows, "left")
    reasons = [
        f"- **{tr(language, *t.name)}**{tr(language, ': ', '：')}{tr(language, *t.why)}"
        for t in missed
    ]
    intro = tr(language, "Why the missed targets were missed:", "未达到的目标，原因如下：")
    return markdown_table(header, rows, "left") + "\n\n" + intro + "\n\n" + "\n".join(reasons)


# The attentions of the MLA table, by their names in the file (mha.bench.cases.mla.ATTENTIONS):
# the English page shows the names, the Chinese page the terms its prose uses for them.
MLA_LABELS = {
    "mha": ("mha", "普通注意力"),
    "gqa": ("gqa", "分组查询注意力"),
    "mla-expanded": ("mla-expanded", "MLA 展开"),
    "mla-absorbed": ("mla-absorbed", "MLA 吸收"),
}


def table_mla(results: dict, language: str) -> str:
    """One decoding step (ms) per length and attention, then the cache's bytes per position."""
    names = list(dict.fromkeys(r["attention"] for r in results["mla"]))
    header = ["L", *(tr(language, *MLA_LABELS.get(n, (n, n))) for n in names)]
    by = {(r["seq_len"], r["attention"]): r for r in results["mla"]}
    seqs = sorted({r["seq_len"] for r in results["mla"]})
    rows = [[str(q)] + [number(by[q, n]["step_ms"]) for n in names] for q in seqs]
    last = seqs[-1]
    rows.append(
        [tr(language, "cache bytes per position", "缓存每个位置的字节数")]
        + [f"{by[last, n]['cache_bytes_per_position']:.0f}" for n in names]
    )
    return markdown_table(header, rows)


def table_mla_absorb(results: dict, language: str) -> str:
    times = {
        "expanded_ms": ("expanded (ms)", "展开（毫秒）"),
        "absorbed_ms": ("absorbed (ms)", "吸收（毫秒）"),
    }
    return table_speedup(results["mla_absorb"], times, language)


def table_tiled_memory(results: dict, language: str) -> str:
    """The peak growth (MB) of one call per length, written out and tiled."""
    rows = results["tiled_memory"]
    names = list(dict.fromkeys(r["attention"] for r in rows))
    by = {(r["seq_len"], r["attention"]): r["peak_growth_mb"] for r in rows}
    labels = {"written-out": ("written out (MB)", "不分块（MB）")}
    header = ["L"] + [
        tr(
            language,
            *labels.get(n, (f"blocks of {n.split('-')[1]} (MB)", f"每块 {n.split('-')[1]}（MB）")),
        )
        for n in names
    ]
    seqs = sorted({r["seq_len"] for r in rows})
    return markdown_table(header, [[str(q)] + [number(by[q, n]) for n in names] for q in seqs])


def table_parallel(split: str, results: dict, language: str) -> str:
    """Each rank's peak growth (the weights it holds, for the heads) and the time, per ranks and
    length."""
    rows = [r for r in results["parallel"] if r["split"] == split]
    # The heads' split runs the fast path, whose CPU kernel keeps scratch buffers that the
    # high-water mark sees unevenly: its peak is in the results file, not on the page.
    memory = (
        (tr(language, "weights a rank (MB)", "每个进程的权重（MB）"), "params_mb")
        if split == "heads"
        else (tr(language, "peak growth a rank (MB)", "每个进程的峰值增长（MB）"), "peak_growth_mb")
    )
    header = [
        tr(language, "ranks", "进程数"),
        "L",
        memory[0],
        tr(language, "time (ms)", "用时（毫秒）"),
    ]
    body = [
        [str(r["world"]), str(r["seq_len"]), number(r[memory[1]]), number(r["median_ms"])]
        for r in rows
    ]
    return markdown_table(header, body)


# ---- float32 rounding, as one machine rounded it (the case mha.bench.cases.rounding) -----------


def measured_on(results: dict, language: str) -> str:
    """The machine of the rounding rows: its CPU, the kernels ATen picked there, torch."""
    m = results["machine"]
    kernels = results["rounding"][0]["kernels"]
    return tr(
        language,
        f"{m['cpu']} ({kernels} kernels), torch {m['torch']}",
        f"{m['cpu']}（{kernels} 算子），torch {m['torch']}",
    )


def table_rounding(comparisons: dict[str, tuple[str, str]], results: dict, language: str) -> str:
    """The largest difference of each comparison over random inputs, per thread count, on the
    machine of the file: a measurement of one machine, which the pages never assert."""
    header = [
        tr(language, "comparison", "比较"),
        tr(language, "measured on", "测量的机器"),
        tr(language, "threads", "线程数"),
        tr(language, "random inputs", "随机输入数"),
        tr(language, "largest difference", "最大差值"),
        tr(language, "median of each input's largest", "各输入最大差值的中位数"),
    ]
    eps = 2.0**-23  # float32's unit in the last place at 1.0
    body = [
        [
            tr(language, *comparisons[r["comparison"]]),
            measured_on(results, language),
            str(r["threads"]),
            str(r["inputs"]),
            f"{r['largest']:.1e} ({r['largest'] / eps:.1f} ulp)",
            f"{r['median']:.1e} ({r['median'] / eps:.1f} ulp)",
        ]
        for r in results["rounding"]
        if r["comparison"] in comparisons
    ]
    return markdown_table(header, body)


ROUNDING_CACHE = {"decode": ("cache, then one causal forward", "缓存逐步解码 与 一次因果前向")}
ROUNDING_FAST = {
    "self": ("self-attention", "自注意力"),
    "causal": ("causal", "因果"),
    "cross": ("cross-attention", "交叉注意力"),
}


def table_rounding_scale(results: dict, language: str) -> str:
    """The head sizes whose two float32 scales differ on the file's machine, and the others."""
    rows = results["rounding_scale"]
    header = [
        "head_size",
        tr(language, "how many", "个数"),
        tr(language, "torch.sqrt − math.sqrt", "torch.sqrt − math.sqrt"),
        tr(language, "attention with each, same bits", "用两者算出的注意力逐位相同"),
        tr(language, "measured on", "测量的机器"),
    ]
    off = [r for r in rows if r["ulps"]]
    same = [r for r in rows if not r["ulps"]]
    sizes = f"{rows[0]['head_size']}–{rows[-1]['head_size']}"

    def alike(group: list[dict]) -> str:
        n = sum(r["same_bits"] for r in group)
        return tr(language, f"{n} of {len(group)}", f"{len(group)} 个中 {n} 个")

    body = []
    if off:
        most = max(abs(r["ulps"]) for r in off)
        body.append(
            [
                ", ".join(str(r["head_size"]) for r in off),
                str(len(off)),
                tr(language, f"up to {most} ulp", f"至多 {most} 个 ulp"),
                alike(off),
                measured_on(results, language),
            ]
        )
    body.append(
        [
            tr(language, f"the others of {sizes}", f"{sizes} 中其余的"),
            str(len(same)),
            "0",
            alike(same),
            measured_on(results, language),
        ]
    )
    return markdown_table(header, body)


ELSEWHERE = {
    "rounding-cache": "cache.md",
    "rounding-fast": "fast.md",
    "rounding-scale": "pitfalls.md",
    "sequence-split": "ring.md",
}
"""The tables shown on other pages than the performance page, with their page."""

TABLES = {
    "machine": table_machine,
    "forward": lambda r, lang: pivot(main_rows(r["forward"]), "median_ms", lang),
    "forward-ratio": lambda r, lang: pivot(main_rows(r["forward"]), "ratio_vs_torch", lang),
    "forward-gemm": table_forward_gemm,
    "backward": lambda r, lang: pivot(main_rows(r["backward"]), "median_ms", lang),
    "memory": lambda r, lang: pivot(
        main_rows(r["memory"]), "peak_growth_mb", lang, causal_column=False
    ),
    "memory-masked": table_memory_masked,
    "decode": table_decode,
    "generate": table_generate,
    "hf-decode": table_hf_decode,
    "hf-generate": table_hf_generate,
    "mla": table_mla,
    "mla-absorb": table_mla_absorb,
    "gqa": table_gqa,
    "options": table_options,
    "tiled-memory": table_tiled_memory,
    "parallel-sequence": lambda r, lang: table_parallel("sequence", r, lang),
    "parallel-heads": lambda r, lang: table_parallel("heads", r, lang),
    "sequence-split": lambda r, lang: pictures_ring.table_sequence_split(r, lang),
    "targets": table_targets,
    "rounding-cache": lambda r, lang: table_rounding(ROUNDING_CACHE, r, lang),
    "rounding-fast": lambda r, lang: table_rounding(ROUNDING_FAST, r, lang),
    "rounding-scale": table_rounding_scale,
}


def table(name: str, language: str) -> str:
    return TABLES[name](load(), language)
