"""How big is the cache? Published configurations, the formula, and the page's cache explorer.

The chapter ``cache-size`` and its explorer (``docs/assets/cache_size.js``) show, for each model of
``MODELS``, how many bytes its attention caches per position (every layer together) and in total
for a context length, a batch size and a dtype the reader picks. The numbers here are the models'
``config.json`` on Hugging Face (each entry names its repository); the formula is
``values_per_position`` and ``cache_bytes``, and ``tests/test_cache_size.py`` checks it against the
tensors real caches of ``mha`` hold on scaled-down configurations of each kind (grouped-query
attention, a sliding window, chunked attention, multi-head latent attention). The explorer
computes the same formula in the browser from ``MODELS`` (JSON in the page, ``on_post_page``), and
the browser tests compare every cell it shows with ``rows()`` here.

Rounding is done the same way in both (``_round``: half up, in binary floating point), so the
strings agree exactly.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from mha_site.runnable import page_data_json

DATA_ID = "__mha-cache-size-models"
EXPLORER = re.compile(r'<div class="mha-cache-size"')

# Bytes per cached number, by the dtype the reader picks.
DTYPES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8": 1}


@dataclass(frozen=True)
class Model:
    """One published configuration's attention, as its ``config.json`` states it."""

    name: str
    source: str  # the Hugging Face repository whose config.json this is
    layers: int  # num_hidden_layers
    heads: int  # num_attention_heads
    kind: str  # "gqa" (keys and values per key/value head) or "mla" (a latent per position)
    kv_heads: int = 0  # num_key_value_heads (gqa)
    head_size: int = 0  # head_dim, or hidden_size / num_attention_heads (gqa)
    window: int | None = None  # sliding_window: the cache keeps window - 1 positions
    # attention_chunk_size (Llama 4): a chunked layer's cache empties at each chunk boundary, so
    # it holds chunk - 1 positions at most
    chunk: int | None = None
    kv_rank: int = 0  # kv_lora_rank (mla)
    rope_dims: int = 0  # qk_rope_head_dim (mla)
    # The layers of those that slide (or attend in chunks), where the others attend over every
    # position (Gemma's, gpt-oss's and Llama 4's layer_types); None: every layer slides when there
    # is a window
    window_layers: int | None = None
    # The layers that cache keys and values, where the others are linear attention, whose state
    # does not grow with the positions (Qwen3-Next's layer_types); None: every layer
    attention_layers: int | None = None


MODELS = [
    Model("Llama 3 8B", "meta-llama/Meta-Llama-3-8B", 32, 32, "gqa", kv_heads=8, head_size=128),
    Model("Llama 3 70B", "meta-llama/Meta-Llama-3-70B", 80, 64, "gqa", kv_heads=8, head_size=128),
    Model("Qwen2.5 7B", "Qwen/Qwen2.5-7B", 28, 28, "gqa", kv_heads=4, head_size=128),
    Model("Qwen3 8B", "Qwen/Qwen3-8B", 36, 32, "gqa", kv_heads=8, head_size=128),
    Model(
        "Mistral 7B v0.1",
        "mistralai/Mistral-7B-v0.1",
        32,
        32,
        "gqa",
        kv_heads=8,
        head_size=128,
        window=4096,
    ),
    Model("DeepSeek-V3", "deepseek-ai/DeepSeek-V3", 61, 128, "mla", kv_rank=512, rope_dims=64),
    Model(
        "Gemma 2 9B",
        "google/gemma-2-9b",
        42,
        16,
        "gqa",
        kv_heads=8,
        head_size=256,
        window=4096,
        window_layers=21,
    ),
    Model(
        "Gemma 3 27B",
        "google/gemma-3-27b-pt",
        62,
        32,
        "gqa",
        kv_heads=16,
        head_size=128,
        window=1024,
        window_layers=52,
    ),
    Model(
        "gpt-oss-20b",
        "openai/gpt-oss-20b",
        24,
        64,
        "gqa",
        kv_heads=8,
        head_size=64,
        window=128,
        window_layers=12,
    ),
    Model(
        "Qwen3-Next 80B-A3B",
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        48,
        16,
        "gqa",
        kv_heads=2,
        head_size=256,
        attention_layers=12,
    ),
    Model("SmolLM3 3B", "HuggingFaceTB/SmolLM3-3B", 36, 16, "gqa", kv_heads=4, head_size=128),
    Model(
        "Llama 4 Scout",
        "meta-llama/Llama-4-Scout-17B-16E",
        48,
        40,
        "gqa",
        kv_heads=8,
        head_size=128,
        chunk=8192,
        window_layers=36,
    ),
]


def cached_layers(model: Model) -> int:
    """The layers whose cache grows with the positions: every layer, or its attention layers."""
    return model.layers if model.attention_layers is None else model.attention_layers


def sliding_layers(model: Model) -> int:
    """The cached layers under the sliding window (or in chunks): none, all, or those the config
    says."""
    if model.window is None and model.chunk is None:
        return 0
    return cached_layers(model) if model.window_layers is None else model.window_layers


def values_per_layer(model: Model) -> int:
    """The numbers one position adds to one layer's cache: a key and a value per key/value head
    (grouped-query attention), or one latent and one rotary key part (MLA)."""
    if model.kind == "mla":
        return model.kv_rank + model.rope_dims
    return 2 * model.kv_heads * model.head_size


def values_per_position(model: Model) -> int:
    """The numbers one position adds to the cache, every cached layer together (while it is
    within every window)."""
    return cached_layers(model) * values_per_layer(model)


def held_positions(model: Model, context: int, sliding: bool = True) -> int:
    """The most positions a layer's cache holds after a step, up to ``context`` positions: all of
    them, or, for a layer under the sliding window, the ``window - 1`` latest (one more during the
    step); a chunked layer's cache empties at each chunk boundary, holding ``context % chunk``
    after the step at ``context``, and ``chunk - 1`` at most."""
    if not sliding:
        return context
    if model.window is not None:
        return min(context, model.window - 1)
    if model.chunk is not None:
        return min(context, model.chunk - 1)
    return context


def held_text(model: Model, context: int) -> str:
    """The explorer's "held" cell: the positions each layer holds, ``sliding / full`` where some
    layers slide (or attend in chunks) and the others do not."""
    held = str(held_positions(model, context))
    if 0 < sliding_layers(model) < cached_layers(model):
        return f"{held} / {context}"
    return held


def cache_bytes(model: Model, context: int, batch_size: int, dtype: str) -> int:
    """The bytes the cache holds after a step (at most, with chunks): each cached layer's
    positions held, times the bytes of a position in a layer, times the batch."""
    slide = sliding_layers(model)
    positions = slide * held_positions(model, context)
    positions += (cached_layers(model) - slide) * context
    return values_per_layer(model) * DTYPES[dtype] * positions * batch_size


def _round(value: float, places: int) -> float:
    """``value`` rounded half up to ``places`` decimals, as ``cache_size.js`` rounds."""
    scale = 10**places
    return math.floor(value * scale + 0.5) / scale


def rows(context: int, batch_size: int, dtype: str) -> list[list[str]]:
    """What the explorer shows for each model: name, KiB per position, positions held, GiB in
    all."""
    found = []
    for model in MODELS:
        per_position = values_per_position(model) * DTYPES[dtype] / 1024
        total = cache_bytes(model, context, batch_size, dtype) / 2**30
        found.append(
            [
                model.name,
                f"{_round(per_position, 1):.1f}",
                held_text(model, context),
                f"{_round(total, 2):.2f}",
            ]
        )
    return found


def on_post_page(output: str, page, config, **kwargs) -> str:
    # After the search plugin has indexed page.content: the data are not searchable text.
    if not EXPLORER.search(output):
        return output
    data = {"dtypes": DTYPES, "models": [asdict(m) for m in MODELS]}
    script = f'<script type="application/json" id="{DATA_ID}">{page_data_json(data)}</script>'
    return output.replace("</head>", script + "</head>", 1)
