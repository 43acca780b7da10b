"""The chapter "How big is the cache?": its formula against real caches, its explorer against the
formula, in a real browser, both languages.

``mha_site.cache_size`` holds the published configurations and the formula; the page's snippet
checks the formula against the bytes real caches of ``mha`` hold (grouped-query attention, a
sliding window, chunks, MLA). Here the formula is checked once more against caches built from the
configurations' own numbers scaled down, and the browser types seeded random values (and the
edges of Mistral's window) into the built page and compares every cell of its table with
``rows()``.
"""

from __future__ import annotations

import random
import re

import pytest
import torch
from support import LANGUAGES, ROOT, Tab, page_path, page_tabs, screenshot

from mha.full import MHA, KVCache
from mha.mla import MLA, LatentCache
from mha_site import cache_size
from mha_site.cache_size import (
    DTYPES,
    MODELS,
    Model,
    cache_bytes,
    cached_layers,
    rows,
    sliding_layers,
)


def scaled(model: Model) -> Model:
    """The model with its layers and widths divided down, its kind and window kept, and one of
    its two layers sliding (or caching) where only some of them do."""
    if model.kind == "mla":
        return Model(model.name, "-", 2, 4, "mla", kv_rank=model.kv_rank // 64, rope_dims=2)
    heads, kv_heads = 4, 4 * model.kv_heads // model.heads or 1
    some = 0 < sliding_layers(model) < cached_layers(model)
    return Model(
        model.name,
        "-",
        2,
        heads,
        "gqa",
        kv_heads=kv_heads,
        head_size=4,
        window=model.window and 5,
        chunk=model.chunk and 5,
        window_layers=1 if some else None,
        attention_layers=None if model.attention_layers is None else 1,
    )


@pytest.mark.parametrize("model", MODELS, ids=[m.name for m in MODELS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_formula_counts_what_real_caches_hold(model, dtype):
    small = scaled(model)
    name = {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype]
    torch.manual_seed(0)
    x = torch.randn(3, 9, 16, dtype=dtype)
    held = 0  # the most each layer held after a step, all layers together
    for i in range(cached_layers(small)):  # the layers of linear attention hold no positions
        if small.kind == "mla":
            layer, cache = (
                MLA(
                    16,
                    small.heads,
                    kv_lora_rank=small.kv_rank,
                    qk_nope_head_dim=4,
                    qk_rope_head_dim=small.rope_dims,
                    v_head_dim=3,
                ),
                LatentCache(),
            )
        else:
            limits = dict(window=small.window, chunk=small.chunk)
            if i >= sliding_layers(small):
                limits = {}
            layer = MHA(16, small.heads, kv_heads=small.kv_heads, **limits)
            cache = KVCache()
        layer = layer.to(dtype)
        most = 0  # a chunked layer's cache empties at each chunk boundary: its most, not its last
        with torch.no_grad():
            layer(x[:, :4], is_causal=True, cache=cache)  # a prefill, then steps
            for i in range(4, 9):
                most = max(
                    most, sum(t.numel() * t.element_size() for t in (cache.keys, cache.values))
                )
                layer(x[:, i : i + 1], is_causal=True, cache=cache)
        most = max(most, sum(t.numel() * t.element_size() for t in (cache.keys, cache.values)))
        held += most
    assert held == cache_bytes(small, 9, 3, name)


def test_rows_round_half_up_and_name_every_model():
    shown = rows(32768, 1, "bfloat16")
    assert [r[0] for r in shown] == [m.name for m in MODELS]
    by_name = {r[0]: r for r in shown}
    assert by_name["Llama 3 8B"] == ["Llama 3 8B", "128.0", "32768", "4.00"]
    assert by_name["Mistral 7B v0.1"] == ["Mistral 7B v0.1", "128.0", "4095", "0.50"]
    # 68.625 KiB: not a tie at one place
    assert by_name["DeepSeek-V3"] == ["DeepSeek-V3", "68.6", "32768", "2.14"]
    # 21 of 42 layers slide: 21 * (4095 + 32768) positions of 8 KiB
    assert by_name["Gemma 2 9B"] == ["Gemma 2 9B", "336.0", "4095 / 32768", "5.91"]
    # 12 of 48 layers cache keys and values
    assert by_name["Qwen3-Next 80B-A3B"][1:] == ["24.0", "32768", "0.75"]
    # 36 of 48 layers in chunks of 8192: 36 * 8191 + 12 * 32768 positions of 4 KiB
    assert by_name["Llama 4 Scout"][1:] == ["192.0", "8191 / 32768", "2.62"]


# --- In a browser --------------------------------------------------------------------------------


def cases() -> list[tuple[int, int, str]]:
    """(context, batch_size, dtype): Mistral's and gpt-oss's window edges, 1, then seeded
    random ones."""
    fixed = [(32768, 1, "bfloat16"), (4095, 2, "float16"), (4096, 3, "float32"), (1, 1, "float8")]
    fixed += [(127, 1, "bfloat16"), (128, 2, "float32")]  # gpt-oss's window
    fixed += [(8191, 1, "bfloat16"), (8192, 1, "bfloat16")]  # Llama 4 Scout's chunk
    rng = random.Random(18)
    drawn = [
        (rng.randint(1, 200_000), rng.randint(1, 64), rng.choice(sorted(DTYPES))) for _ in range(6)
    ]
    return fixed + drawn


pages = page_tabs("cache-size.md")  # the page in each language, a tab each


def shown(page) -> list[list[str]]:
    return page.eval_on_selector_all(
        "#cache-table tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )


@pytest.mark.browser
@pytest.mark.page("cache-size.md")
@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_explorer_shows_the_formulas_numbers(pages, lang):
    page = pages(lang)
    for context, batch, dtype in cases():
        page.fill("#cache-context", str(context))
        page.fill("#cache-batch", str(batch))
        page.select_option("#cache-dtype", dtype)
        assert shown(page) == rows(context, batch, dtype), (context, batch, dtype)


@pytest.mark.browser
@pytest.mark.page("cache-size.md")
def test_a_value_that_is_not_a_positive_int_is_refused_by_name(pages):
    page = pages("en")
    page.fill("#cache-batch", "0")
    assert page.locator("#cache-status").inner_text() == "batch_size must be a positive int, got 0"
    assert page.locator("#cache-batch").get_attribute("aria-invalid") == "true"
    assert page.locator("#cache-table").is_hidden()
    page.fill("#cache-batch", "1")
    assert page.locator("#cache-table").is_visible()


def test_the_explorer_block_is_the_same_in_both_languages_but_its_words():
    blocks = {}
    for lang in LANGUAGES:
        text = (ROOT / "docs" / lang / "cache-size.md").read_text(encoding="utf-8")
        block = re.search(r'<div class="mha-cache-size".*?</table>\n</div>', text, re.S)
        assert block, lang
        blocks[lang] = re.findall(r'(?:id|name|for|value)="[^"]*"', block[0])
    assert blocks["en"] == blocks["zh"]
    assert 'id="cache-explorer"' in blocks["en"]


@pytest.mark.browser
@pytest.mark.page("cache-size.md")
@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_explorer_fits_a_phone(browser, site_url, lang):
    context = browser.new_context(viewport={"width": 390, "height": 800}, color_scheme="dark")
    try:
        tab = Tab(context, site_url, search=False)
        tab.page.goto(site_url + page_path(lang, "cache-size.md") + "#explorer", wait_until="load")
        box = tab.page.locator("#cache-explorer")
        overflow = tab.page.evaluate(
            """() => [...document.querySelectorAll('#cache-explorer, #cache-explorer *')]
                .filter(e => e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0)
                .map(e => e.tagName + '.' + e.className)"""
        )
        assert overflow == [], f"{lang}: wider than its box at 390 px: {overflow}"
        screenshot(box, f"cache-explorer-{lang}-dark-390.png")
        tab.assert_clean()
    finally:
        context.close()


def test_the_build_step_puts_the_models_in_a_page_with_the_explorer():
    html = '<html><head></head><body><div class="mha-cache-size" id="x"></div></body></html>'
    out = cache_size.on_post_page(html, None, None)
    assert f'id="{cache_size.DATA_ID}"' in out and '"DeepSeek-V3"' in out
    assert cache_size.on_post_page("<html><head></head></html>", None, None).count("<script") == 0
