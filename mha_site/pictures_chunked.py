"""The pictures of the chapter chunked: what each query sees, and what each cache holds.

Both draw the page's run: ``MHA(24, 4)`` on ``x`` of shape ``[1, 12, 24]`` (seeded), causal, three
ways: plain, with a sliding window of 4 (``window=4``) and in chunks of 4 (``chunk=4``).

- ``chunk-masks``: for each of the three, which keys each of the 12 queries sees, read off the
  attention weights of the run (``need_weights=True``: a key is seen where head 0 gives it a
  weight above 0), one 12 × 12 grid each, side by side;
- ``chunk-cache``: the positions each module's ``KVCache`` holds after each decoding step, the 12
  positions fed one by one: the causal cache grows, the window's stops at ``window - 1`` = 3, the
  chunk's climbs to ``chunk - 1`` = 3 and empties at each chunk boundary (a sawtooth).

The page computes the same and asserts that these pictures draw it (``seen``, ``held``).
"""

from __future__ import annotations

import functools

import torch

from mha_site.languages import tr
from mha_site.picture_style import FONT, SMALL, Svg, fill_of, stroke_of, text_of

SEED = 0
HIDDEN_SIZE, HEADS_NUM, LENGTH = 24, 4, 12
SIZE = 4  # the window's and the chunk's
KINDS = ("causal", "window", "chunk")  # the three modules, in the pictures' order
OPTIONS = {"causal": {}, "window": {"window": SIZE}, "chunk": {"chunk": SIZE}}
COLOURS = {"causal": 2, "window": 0, "chunk": 1}  # a head's colour each

CELL_SIDE = 10.0  # one query/key cell of a mask
GRID = LENGTH * CELL_SIDE
GAP = 22.0  # between two grids
LEFT = 24.0  # the queries' numbers, left of the first grid

STEP_W = 26.0  # one decoding step on the cache picture
UNIT = 10.0  # one position held, upwards
AXIS = 30.0  # the held counts, left of the plot


@functools.cache
def run() -> dict[str, tuple[torch.Tensor, list[int]]]:
    """For each kind: which keys each query sees (``[12, 12]`` booleans, head 0 of the weights of
    a forward over ``x``), and the positions its cache holds after each of 12 decoding steps."""
    from mha.full import MHA, KVCache

    torch.manual_seed(SEED)
    x = torch.randn(1, LENGTH, HIDDEN_SIZE)
    plain = MHA(HIDDEN_SIZE, HEADS_NUM).eval()
    found = {}
    for kind in KINDS:
        model = MHA(HIDDEN_SIZE, HEADS_NUM, **OPTIONS[kind]).eval()
        model.load_state_dict(plain.state_dict())
        cache, held = KVCache(), []
        with torch.no_grad():
            _, weights = model(x, is_causal=True, need_weights=True)
            for i in range(LENGTH):
                model(x[:, i : i + 1], is_causal=True, cache=cache)
                held.append(cache.keys.size(2))
        found[kind] = (weights[0, 0] > 0, held)
    return found


def seen(kind: str) -> torch.Tensor:
    """Which keys (columns) each query (rows) sees, as the mask picture draws it."""
    return run()[kind][0]


def held(kind: str) -> list[int]:
    """The positions the cache holds after each step, as the cache picture draws it."""
    return list(run()[kind][1])


def name_of(kind: str, language: str) -> str:
    return {
        "causal": tr(language, "causal", "因果"),
        "window": tr(language, f"window {SIZE}", f"窗口 {SIZE}"),
        "chunk": tr(language, f"chunks of {SIZE}", f"每块 {SIZE} 个"),
    }[kind]


def chunk_masks_picture(language: str) -> str:
    title = tr(
        language,
        f"What each of {LENGTH} queries sees",
        f"{LENGTH} 个查询各自看得到哪些键",
    )
    description = tr(
        language,
        f"For MHA(24, 4) on x of shape [1, {LENGTH}, 24], causal: which keys (columns) each "
        f"query (rows) gets a weight on, plain, with window={SIZE} and with chunk={SIZE}. The "
        f"causal mask is a triangle; the window a band {SIZE} wide; the chunks triangles of "
        f"{SIZE} on the diagonal, so query {SIZE} sees only itself.",
        f"MHA(24, 4) 在形状为 [1, {LENGTH}, 24] 的 x 上做因果注意力："
        f"每个查询（行）给哪些键（列）分配了权重，依次是不加限制、window={SIZE} 和 chunk={SIZE}。"
        f"因果掩码是一个三角形；窗口是宽 {SIZE} 的一条带子；"
        f"分块是对角线上一个个边长 {SIZE} 的小三角形，所以查询 {SIZE} 只看得到它自己。",
    )
    svg = Svg("chunk-masks", title, description)
    svg.text(4, 16, title, bold=True)
    top = 44.0
    for n, kind in enumerate(KINDS):
        left = LEFT + n * (GRID + GAP)
        svg.text(left, top - 8, name_of(kind, language))
        fcls, fill = fill_of(COLOURS[kind])
        scls, stroke = stroke_of(COLOURS[kind])
        mask = seen(kind)
        for s in range(LENGTH):
            for t in range(LENGTH):
                x0, y0 = left + t * CELL_SIDE, top + s * CELL_SIDE
                if mask[s, t]:
                    svg.rect(x0, y0, CELL_SIDE, CELL_SIDE, f"{fcls} {scls}", fill, stroke)
                else:
                    svg.rect(x0, y0, CELL_SIDE, CELL_SIDE, "mha-sn", stroke="#555555")
        for edge in range(SIZE, LENGTH, SIZE):  # the chunks' boundaries, on every grid
            at = edge * CELL_SIDE
            svg.line(left + at, top, left + at, top + GRID, dashed=True)
            svg.line(left, top + at, left + GRID, top + at, dashed=True)
        for t in (0, SIZE, 2 * SIZE, LENGTH - 1):
            svg.text(
                left + (t + 0.5) * CELL_SIDE, top + GRID + 13, str(t), size=SMALL, anchor="middle"
            )
    for s in (0, SIZE, 2 * SIZE, LENGTH - 1):
        svg.text(LEFT - 5, top + (s + 0.5) * CELL_SIDE + 4, str(s), size=SMALL, anchor="end")
    bottom = top + GRID + 13 + FONT + 6
    svg.text(
        4,
        bottom,
        tr(
            language,
            "rows: queries; columns: keys; filled: seen",
            "行是查询，列是键；填色的格子：看得到",
        ),
        size=SMALL,
    )
    svg.text(
        4,
        bottom + SMALL + 6,
        tr(
            language,
            f"dashed: the chunks' boundaries, every {SIZE} positions",
            f"虚线：块的边界，每 {SIZE} 个位置一条",
        ),
        size=SMALL,
    )
    return str(svg)


def chunk_cache_picture(language: str) -> str:
    title = tr(
        language,
        "Positions each cache holds after each step",
        "每一步之后，各缓存里留着几个位置",
    )
    description = tr(
        language,
        f"The {LENGTH} positions of x fed one by one into MHA(24, 4) with a KVCache: after each "
        "step, the causal cache holds every position so far; the window's stops at "
        f"window - 1 = {SIZE - 1}; the chunk's climbs to chunk - 1 = {SIZE - 1} and empties at "
        f"each chunk boundary, a sawtooth.",
        f"把 x 的 {LENGTH} 个位置逐个送进带 KVCache 的 MHA(24, 4)："
        "每一步之后，因果注意力的缓存留着到目前为止的所有位置；"
        f"窗口的缓存长到 window - 1 = {SIZE - 1} 就不再增长；"
        f"分块的缓存涨到 chunk - 1 = {SIZE - 1}，每到块的边界就清空，画出来像锯齿。",
    )
    svg = Svg("chunk-cache", title, description)
    svg.text(4, 16, title, bold=True)
    top = 40.0
    height = LENGTH * UNIT
    base = top + height  # the line of 0 held
    left = AXIS + 6
    for count in (0, SIZE - 1, 2 * SIZE, LENGTH):
        y = base - count * UNIT
        svg.line(left, y, left + LENGTH * STEP_W, y, cls="mha-sn", width=0.6, dashed=count > 0)
        svg.text(left - 5, y + 4, str(count), size=SMALL, anchor="end")
    for kind in KINDS:
        counts = held(kind)
        scls, stroke = stroke_of(COLOURS[kind])
        tcls, colour = text_of(COLOURS[kind])
        points = [(left + (i + 0.5) * STEP_W, base - c * UNIT) for i, c in enumerate(counts)]
        path = " ".join(f"{'M' if i == 0 else 'L'}{x:g},{y:g}" for i, (x, y) in enumerate(points))
        svg.markup(
            f'<path d="{path}" class="{scls}" fill="none" stroke="{stroke}" stroke-width="1.6"/>'
        )
        for x, y in points:
            svg.markup(f'<circle cx="{x:g}" cy="{y:g}" r="2.6" class="{tcls}" fill="{colour}"/>')
        end_x, end_y = points[-1]
        label_y = end_y + 4 if kind == "causal" else end_y - 6
        svg.text(end_x + 8, label_y, name_of(kind, language), cls=tcls, size=SMALL)
    for i in (0, SIZE - 1, 2 * SIZE - 1, LENGTH - 1):
        svg.text(left + (i + 0.5) * STEP_W, base + 14, str(i), size=SMALL, anchor="middle")
    svg.text(
        left,
        base + 14 + SMALL + 6,
        tr(language, "the step's position (one per step)", "这一步的位置（每步一个）"),
        size=SMALL,
    )
    svg.text(
        4,
        top - 8,
        tr(language, "positions held", "留着的位置数"),
        size=SMALL,
    )
    return str(svg)


PICTURES = {"chunk-masks": chunk_masks_picture, "chunk-cache": chunk_cache_picture}
