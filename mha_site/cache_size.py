"""How big is the cache? Published configurations, the formula, and the page's cache explorer.

The chapter ``cache-size`` and its explorer (``docs/assets/cache_size.js``) show, for each model of
``MODELS``, how many bytes its attention caches per position (every layer together) and in total
for a context length, a batch size and a dtype the reader picks. The numbers here are the models'
``config.json`` on Hugging Face (each entry names its repository); the formula is
``values_per_position`` and ``cache_bytes``, and ``tests/test_cache_size.py`` checks it against the
tensors real caches of ``mha`` hold on scaled-down configurations of each kind (grouped-query
attention, a sliding window, multi-head latent attention). The explorer computes the same formula
in the browser from ``MODELS`` (JSON in the page, ``on_post_page``), and the browser tests compare
every cell it shows with ``rows()`` here.

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
    kv_rank: int = 0  # kv_lora_rank (mla)
    rope_dims: int = 0  # qk_rope_head_dim (mla)


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
]


def values_per_position(model: Model) -> int:
    """The numbers one position adds to the cache, every layer together: a key and a value per
    key/value head (grouped-query attention), or one latent and one rotary key part (MLA)."""
    if model.kind == "mla":
        return model.layers * (model.kv_rank + model.rope_dims)
    return model.layers * 2 * model.kv_heads * model.head_size


def held_positions(model: Model, context: int) -> int:
    """The positions the cache holds after a step at ``context`` positions: all of them, or the
    ``window - 1`` latest under a sliding window (one more during the step)."""
    return context if model.window is None else min(context, model.window - 1)


def cache_bytes(model: Model, context: int, batch_size: int, dtype: str) -> int:
    """The bytes the cache holds after a step: per position, times positions held, times batch."""
    per_position = values_per_position(model) * DTYPES[dtype]
    return per_position * held_positions(model, context) * batch_size


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
                str(held_positions(model, context)),
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
