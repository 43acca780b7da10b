"""The pictures of the chapter ring: drawn at build time from ``mha.parallel``.

``ring-steps``: 4 ranks under the causal mask, from ``ring_schedule``: at each step, whose keys
each rank holds (the cell's colour is that rank's) and what it does with them: attends them whole,
with the causal mask, or skips them.

``ring-memory``: each rank's peak memory growth with the sequence split over 1, 2 and 4 ranks,
from the benchmark's results file (``parallel``).

``ring-time``: the time of one call against L, one process's SDPA against the ways of splitting
the sequence over 2 ranks (one core each on the benchmark's machine), from the benchmark's results
file (``sequence_split``).
"""

from __future__ import annotations

from mha_site.languages import tr
from mha_site.picture_style import FONT, SMALL, Svg, fill_of, stroke_of

WORLD = 4
CELL_W, CELL_H = 92, 40


def ring_steps_picture(language: str) -> str:
    from mha.parallel import ring_schedule

    title = tr(
        language,
        "Ring attention over 4 ranks, causal: at each step every rank holds one rank's keys and "
        "values, and passes them on to the next rank",
        "4 个进程上的环形注意力（因果）：每一步，每个进程手上是某一个进程的键和值，"
        "然后把它们传给下一个进程",
    )
    svg = Svg("ring-steps", title)
    top, left = 8 + 2 * FONT, 70
    words = {
        "whole": tr(language, "whole", "整块"),
        "causal": tr(language, "causal", "因果掩码"),
        "skip": tr(language, "skipped", "跳过"),
    }
    for step in range(WORLD):
        x = left + step * (CELL_W + 8)
        svg.text(
            x + CELL_W / 2,
            top - 8,
            tr(language, f"step {step}", f"步 {step}"),
            anchor="middle",
            bold=True,
        )
    for rank in range(WORLD):
        y = top + rank * (CELL_H + 8)
        svg.text(4, y + CELL_H / 2 + 4, tr(language, f"rank {rank}", f"进程 {rank}"))
        for step, (source, action) in enumerate(ring_schedule(WORLD, rank, is_causal=True)):
            x = left + step * (CELL_W + 8)
            fcls, fill = fill_of(source)
            scls, stroke = stroke_of(source)
            if action == "skip":
                svg.rect(x, y, CELL_W, CELL_H, scls, "none", stroke, dashed=True)
            else:
                svg.rect(x, y, CELL_W, CELL_H, f"{fcls} {scls}", fill, stroke)
            held = tr(language, f"keys of {source}", f"进程 {source} 的键")
            svg.text(x + CELL_W / 2, y + 16, held, anchor="middle", size=SMALL)
            svg.text(
                x + CELL_W / 2,
                y + 32,
                words[action],
                anchor="middle",
                size=SMALL,
                bold=action != "skip",
            )
    bottom = top + WORLD * (CELL_H + 8) + 12
    # One line in Chinese; two in English, so that the note is no wider than the grid and the
    # picture scales down to a phone's width no further than the Chinese one.
    note = tr(
        language,
        "Rank r holds positions r × L/4 to (r + 1) × L/4 - 1;\n"
        "keys of a later rank are all in its queries' future.",
        "进程 r 持有位置 r × L/4–(r + 1) × L/4 - 1；后面进程的键全在它的查询之后。",
    )
    for i, line in enumerate(note.split("\n")):
        svg.text(4, bottom + i * (SMALL + 4), line, size=SMALL)
    return str(svg)


LABELS = {1: ("1 rank", "1 个进程"), 2: ("2 ranks", "2 个进程"), 4: ("4 ranks", "4 个进程")}


def ring_memory_picture(language: str) -> str:
    from mha_site.pictures_perf import load, peak_memory_plot

    return peak_memory_plot(
        "ring-memory",
        language,
        [r for r in load()["parallel"] if r["split"] == "sequence"],
        "world",
        LABELS,
        tr(language, "Each rank's peak memory against L", "每个进程的峰值内存随 L 的变化"),
        tr(language, "peak growth a rank (MB)", "每个进程的峰值增长（MB）"),
    )


# The ways of the results' sequence_split rows, as the picture and the table name them
METHODS = {
    "sdpa": ("one process, SDPA", "单进程，SDPA"),
    "ring": ("zigzag ring", "zigzag 环"),
    "ring-contiguous": ("contiguous ring", "连续分段的环"),
    "ring-no-overlap": ("ring, no overlap", "环，不重叠"),
    "ulysses": ("Ulysses", "Ulysses"),
}


def method_label(method: str, world: int, language: str) -> str:
    """``zigzag ring, 2 ranks``; one process's SDPA is named alone."""
    name = tr(language, *METHODS[method])
    if method == "sdpa":
        return name
    return name + tr(language, ", ", "，") + tr(language, *LABELS[world])


# The series of ring-time: (method, world) of the results' sequence_split rows, and the benchmark
# plots' style it takes (colours whose contrast the picture tests check)
TIMES = {
    ("sdpa", 1): "torch",
    ("ring", 2): "full-fast",
    ("ring-contiguous", 2): "full-math",
    ("ring-no-overlap", 2): "pure",
    ("ulysses", 2): "annotated",
}


def table_sequence_split(results: dict, language: str) -> str:
    """Each way of splitting the sequence over 1, 2 and 4 ranks: one call's median time per
    length, against one process's SDPA at the longest, and the bytes a rank sends there."""
    from mha_site.pictures_perf import markdown_table, number

    rows = results["sequence_split"]
    lengths = sorted({r["seq_len"] for r in rows})
    longest = lengths[-1]
    at = {(r["method"], r["world"], r["seq_len"]): r for r in rows}
    sdpa = at["sdpa", 1, longest]["median_ms"]
    header = [
        tr(language, "way", "做法"),
        *(tr(language, f"L = {n} (ms)", f"L = {n}（毫秒）") for n in lengths),
        tr(language, f"÷ SDPA's at {longest}", f"{longest} 时是 SDPA 的几倍"),
        tr(language, f"sent a rank at {longest} (MB)", f"{longest} 时每个进程发出（MB）"),
    ]
    keys = [("sdpa", 1)] + [
        (m, w)
        for m in METHODS
        if m != "sdpa"
        for w in sorted(LABELS)
        # one rank: the ring's own cost on one process (the other ways' is the same kernel)
        if (m, w, longest) in at and (w > 1 or m == "ring")
    ]
    body = [
        [
            method_label(m, w, language),
            *(number(at[m, w, n]["median_ms"]) for n in lengths),
            number(at[m, w, longest]["median_ms"] / sdpa),
            number(at[m, w, longest]["sent_mb"]),
        ]
        for m, w in keys
    ]
    return markdown_table(header, body)


def ring_time_picture(language: str) -> str:
    from mha_site.pictures_perf import STYLE, line_plot, load

    def key(method: str, world: int) -> str:
        return f"{method}-{world}"

    rows = [
        dict(r, impl=key(r["method"], r["world"]))
        for r in load()["sequence_split"]
        if (r["method"], r["world"]) in TIMES
    ]
    lines = {
        key(*k): ((method_label(*k, "en"), method_label(*k, "zh")), STYLE[style])
        for k, style in TIMES.items()
    }
    return line_plot(
        "ring-time",
        language,
        rows,
        "median_ms",
        tr(
            language,
            "One call's time against L, one process or 2 ranks",
            "一次调用的用时随 L 的变化：单进程与 2 个进程",
        ),
        tr(language, "median time (ms)", "中位时间（毫秒）"),
        "ms",
        lines=lines,
    )


PICTURES = {
    "ring-steps": ring_steps_picture,
    "ring-memory": ring_memory_picture,
    "ring-time": ring_time_picture,
}
