"""The picture of the chapter cache: drawn at build time from the page's own run of ``KVCache``.

``cache-grows``: the page's ``MHA(20, 4)`` on ``x`` ``[2, 7, 20]`` (seed 0, made in the page's
order), decoded as the page decodes it: a prefill of positions 0–2 with a ``KVCache``, then one
position per call. One band per call: a row per query of the call, a column per key the cache
holds after it (the keys it held before in grey, the ones the call appended in head 0's colour,
those the causal mask hides dashed), and the shapes ``cache.keys`` and ``weights`` have after
that call, read from the run.
"""

from __future__ import annotations

import functools

import torch

from mha_site.languages import tr
from mha_site.picture_style import FONT, SMALL, Svg, fill_of, shape_spans, shape_text, stroke_of

HIDDEN, HEADS, X_SHAPE, PREFILL = 20, 4, (2, 7, 20), 3
UNIT = 16  # one query-key cell
BAND_GAP = 10


@functools.cache
def run() -> list[dict]:
    """The page's prefill and decoding steps. Each call: ``queries`` (their positions), ``held``
    (the cache's length before the call), ``allowed`` (``[q_len][k_len]``, the causal mask the
    call applies: may the query see the key), ``keys`` and ``weights`` (their shapes after it)."""
    from mha.full import MHA, KVCache, causal_mask

    with torch.random.fork_rng():  # the build's (or a test's) random state is left as it was
        torch.manual_seed(0)
        model = MHA(HIDDEN, HEADS).eval()
        x = torch.randn(*X_SHAPE)
    cache = KVCache()
    calls = []
    starts = [0, PREFILL, *range(PREFILL + 1, X_SHAPE[1])]
    with torch.no_grad():
        for start, end in zip(starts, [*starts[1:], X_SHAPE[1]], strict=True):
            held = len(cache)
            _, weights = model(x[:, start:end], is_causal=True, cache=cache, need_weights=True)
            calls.append(
                {
                    "queries": list(range(start, end)),
                    "held": held,
                    "allowed": causal_mask(end - start, len(cache)).tolist(),
                    "keys": tuple(cache.keys.shape),
                    "weights": tuple(weights.shape),
                }
            )
    return calls


def cache_grows_picture(language: str) -> str:
    calls = run()
    first, last = calls[0], calls[-1]
    steps = len(calls) - 1
    prefill, model = len(first["queries"]), f"MHA({HIDDEN}, {HEADS})"
    grows = shape_text(first["keys"]), shape_text(last["keys"])
    title = tr(
        language,
        f"A KVCache while {model} decodes: a prefill of {prefill} positions, then {steps} steps "
        f"of one query each; every call appends its keys, so cache.keys grows from {grows[0]} to "
        f"{grows[1]}",
        f"{model} 逐个生成时的 KVCache：先预填充 {prefill} 个位置，再解码 {steps} 步，"
        f"每步一个查询；每次调用都追加它的键，cache.keys 从 {grows[0]} 增长到 {grows[1]}",
    )
    svg = Svg("cache-grows", title)
    svg.text(
        4,
        4 + FONT,
        tr(
            language,
            f"Prefill of {prefill}, then {steps} steps of one query",
            f"预填充 {prefill} 个位置，再解码 {steps} 步，每步一个查询",
        ),
        bold=True,
    )
    svg.text(
        4,
        4 + FONT + 17,
        tr(
            language,
            "rows: the call's queries s, columns: the cache's keys t",
            "行：这次调用的查询 s，列：缓存里的键 t",
        ),
        size=SMALL,
    )
    label_right = 56  # the calls' names end here; the query positions follow
    grid = label_right + 16
    top = 4 + FONT + 17 + 10 + SMALL
    k_len = len(last["allowed"][0])
    for t in range(k_len):
        svg.text(grid + t * UNIT + UNIT / 2, top - 4, str(t), anchor="middle", size=SMALL)
    shapes_x = grid + k_len * UNIT + 8
    y = top
    for index, call in enumerate(calls):
        rows = len(call["queries"])
        band = max(rows * UNIT, 2 * SMALL + 12)
        grid_y = y + (band - rows * UNIT) / 2
        name = tr(language, "prefill", "预填充") if index == 0 else tr(language, "step", "解码")
        svg.text(label_right, y + band / 2 + 4, name, anchor="end", bold=index == 0)
        for r, (s, seen) in enumerate(zip(call["queries"], call["allowed"], strict=True)):
            row_y = grid_y + r * UNIT
            svg.text(grid - 4, row_y + UNIT / 2 + 4, str(s), anchor="end", size=SMALL)
            for t, allowed in enumerate(seen):
                head = 0 if t >= call["held"] else -1  # appended by this call, or held before
                fcls, fill = fill_of(head)
                scls, stroke = stroke_of(head)
                x = grid + t * UNIT
                if allowed:
                    svg.rect(x, row_y, UNIT, UNIT, f"{fcls} {scls}", fill, stroke)
                else:  # hidden by the causal mask
                    inner = UNIT - 2
                    svg.rect(x + 1, row_y + 1, inner, inner, scls, "none", stroke, dashed=True)
        middle = y + band / 2
        svg.text(
            shapes_x,
            middle - 3,
            [("cache.keys ", ""), *shape_spans(call["keys"], [2])],
            code=True,
            size=SMALL,
        )
        svg.text(
            shapes_x,
            middle + SMALL + 1,
            [("weights ", ""), *shape_spans(call["weights"], [3])],
            code=True,
            size=SMALL,
        )
        y += band + BAND_GAP
    # the legend, then what the dimensions are
    y += 4
    x = 4
    for head, dashed, words in (
        (-1, False, ("already held", "调用前已在缓存里")),
        (0, False, ("appended by the call", "这次调用追加的")),
        (-1, True, ("masked", "被掩码屏蔽")),
    ):
        fcls, fill = fill_of(head)
        scls, stroke = stroke_of(head)
        if dashed:
            svg.rect(x + 1, y + 1, 10, 10, scls, "none", stroke, dashed=True)
        else:
            svg.rect(x, y, 12, 12, f"{fcls} {scls}", fill, stroke)
        x += 16 + svg.text(x + 16, y + 10, tr(language, *words), size=SMALL) + 12
    y += 12 + 10 + SMALL
    for name, dims, moving in (
        ("cache.keys", ("batch_size", "kv_heads", "len", "head_size"), [2]),
        ("weights", ("batch_size", "heads_num", "q_len", "k_len"), [3]),
    ):
        svg.text(4, y, [(f"{name}: ", ""), *shape_spans(dims, moving)], code=True, size=SMALL)
        y += SMALL + 7
    return str(svg)


PICTURES = {"cache-grows": cache_grows_picture}
