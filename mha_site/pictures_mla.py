"""The pictures of the chapter mla: drawn at build time from a real run of ``mha.mla.MLA``.

``mla-cache``: what one position costs in the cache, one cell per number, for the chapter's
module (4 heads, keys of 6 + 4, values of 5, a latent of 8 and a rotary key part of 4): the keys
and values that expanded attention builds for every head, and what ``LatentCache`` holds. The
counts come from the tensors of a real run: the expanded keys and values of the cached latents,
and the cache's own tensors.
"""

from __future__ import annotations

import functools

import torch

from mha_site.languages import tr
from mha_site.picture_style import CELL, FONT, SMALL, Svg, stroke_of

SIZES = dict(kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5)
HEADS = 4
GAP = 6


def outlined(svg: Svg, x: float, y: float, head: int) -> None:
    """A cell drawn as a dashed outline in ``head``'s colour (-1: neutral)."""
    cls, stroke = stroke_of(head)
    svg.rect(x, y, CELL, CELL, cls, "none", stroke, dashed=True)


@functools.cache
def run() -> dict[str, tuple[int, ...]]:
    """The shapes of one position's numbers: per head, the expanded key and value; in the cache,
    the latent and the rotary key part. From a real prefill of 3 positions."""
    from mha.mla import MLA, LatentCache

    with torch.random.fork_rng():
        torch.manual_seed(0)
        m = MLA(32, HEADS, q_lora_rank=10, **SIZES).eval()
        x = torch.randn(1, 3, 32)
    cache = LatentCache()
    with torch.no_grad():
        m(x, is_causal=True, cache=cache)
        kv = m.W_ukv(cache.latent).view(1, 3, HEADS, -1)  # [1, len, heads, nope + v]
    key = SIZES["qk_nope_head_dim"] + cache.rope_keys.size(-1)  # the rotary part joins each key
    value = kv.size(-1) - SIZES["qk_nope_head_dim"]
    return {
        "key": (kv.size(2), key),
        "value": (kv.size(2), value),
        "latent": (cache.latent.size(-1),),
        "rope": (cache.rope_keys.size(-1),),
    }


def mla_cache_picture(language: str) -> str:
    shapes = run()
    heads, key = shapes["key"]
    _, value = shapes["value"]
    latent, rope = shapes["latent"][0], shapes["rope"][0]
    expanded = heads * (key + value)
    cached = latent + rope
    title = tr(
        language,
        f"One position: {expanded} numbers of keys and values for {heads} heads, expanded, "
        f"against {cached} in MLA's cache (a latent of {latent} and a rotary key part of {rope})",
        f"一个位置：展开后 {heads} 个头的键和值共 {expanded} 个数，MLA 的缓存里只有 {cached} 个"
        f"（潜在向量 {latent} 个，旋转键 {rope} 个）",
    )
    svg = Svg("mla-cache", title)
    y = 4 + FONT
    svg.text(
        4,
        y,
        tr(
            language,
            f"expanded: each head's key ({key}) and value ({value}), {expanded} numbers",
            f"展开：每个头的键（{key}）和值（{value}），共 {expanded} 个数",
        ),
        bold=True,
    )
    y += 8
    per_row = 2  # two heads a row, so the picture stays narrow enough for a phone
    for head in range(heads):
        x = 4 + (head % per_row) * ((key + value) * CELL + GAP)
        if head and head % per_row == 0:
            y += CELL + GAP
        for i in range(key + value):
            if i < key:
                svg.cell(x, y, head)
            else:
                outlined(svg, x, y, head)
            x += CELL
    svg.text(
        4,
        y + CELL + 4 + SMALL,
        tr(language, "key: filled, value: dashed", "键：实心格，值：虚线格"),
        size=SMALL,
    )
    y += CELL + 2 * SMALL + 16
    svg.text(
        4,
        y,
        tr(
            language,
            f"MLA's cache: the latent ({latent}) and the rotary key ({rope}), {cached} numbers",
            f"MLA 的缓存：潜在向量（{latent}）和旋转键（{rope}），共 {cached} 个数",
        ),
        bold=True,
    )
    y += 8
    x = 4
    for i in range(cached):
        if i < latent:
            svg.cell(x, y, -1)
        else:
            outlined(svg, x, y, -1)
        x += CELL
    svg.text(
        4,
        y + CELL + 4 + SMALL,
        tr(
            language,
            "latent: filled, rotary key: dashed; shared by every head",
            "潜在向量：实心格，旋转键：虚线格；所有头共用",
        ),
        size=SMALL,
    )
    return str(svg)


PICTURES = {"mla-cache": mla_cache_picture}
