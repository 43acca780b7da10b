"""Decoding one position with multi-head latent attention (``mha.mla.MLA``), against plain and
grouped-query attention (``mha.full.MHA``) of the same width and heads, each with its cache
holding ``L - 1`` positions; and MLA decoded expanded against absorbed (``absorb=True``).

The MLA module keeps DeepSeek-V3's proportions at this width: with ``head_size = hidden / heads``
(64 in the full run), ``kv_lora_rank`` is 4 head sizes, ``qk_rope_head_dim`` half of one,
``qk_nope_head_dim`` and ``v_head_dim`` one each (V3: 512, 64, 128, 128 for heads of 128), and no
query bottleneck. Grouped-query attention uses a quarter of the heads for keys and values. Each
row also gives the bytes the cache holds per position, read from its tensors, over the formula of
the chapter *How big is the cache?* (``cache_vs_formula``: 1 when they agree).
"""

from __future__ import annotations

from typing import TypedDict

import torch

from mha.bench.config import DECODE_REPEATS, Config
from mha.bench.context import Context
from mha.bench.timing import round_robin
from mha.full import MHA, KVCache
from mha.mla import MLA, LatentCache

ATTENTIONS = ("mha", "gqa", "mla-expanded", "mla-absorbed")


class Row(TypedDict):
    seq_len: int
    attention: str
    """One of ``ATTENTIONS``."""
    step_ms: float
    cache_bytes_per_position: float
    cache_vs_formula: float
    """The bytes per position read from the cache's tensors over the formula's: 1.0 when equal."""


class AbsorbRow(TypedDict):
    seq_len: int
    expanded_ms: float
    absorbed_ms: float
    speedup: float
    """``expanded_ms / absorbed_ms``: above 1 where absorbing wins."""
    cache_vs_formula: float
    """MLA's cache bytes per position over the formula's (the same in both modes)."""


SECTIONS = {"mla": list[Row], "mla_absorb": list[AbsorbRow]}


def steps(config: Config) -> int:
    return len(config.mla_seq_lens)


def sizes(config: Config) -> dict[str, int]:
    """The MLA module's sizes at this width (DeepSeek-V3's proportions, see the docstring)."""
    head = config.hidden // config.heads
    return dict(
        kv_lora_rank=4 * head, qk_rope_head_dim=head // 2, qk_nope_head_dim=head, v_head_dim=head
    )


def formula_bytes(impl: str, config: Config, kv_heads: int, element: int) -> int:
    """Bytes per position and layer, as the chapter's formula says."""
    if impl.startswith("mla"):
        s = sizes(config)
        return (s["kv_lora_rank"] + s["qk_rope_head_dim"]) * element
    return 2 * kv_heads * (config.hidden // config.heads) * element


def run(context: Context) -> dict:
    c = context.config
    torch.manual_seed(0)
    kv = {"mha": c.heads, "gqa": max(1, c.heads // 4)}
    models = {
        "mha": MHA(c.hidden, c.heads),
        "gqa": MHA(c.hidden, c.heads, kv_heads=kv["gqa"]),
        "mla": MLA(c.hidden, c.heads, **sizes(c)),
    }
    models = {k: m.to(c.device, c.torch_dtype).eval() for k, m in models.items()}
    element = torch.empty((), dtype=c.torch_dtype).element_size()
    rows, absorb_rows = [], []
    for seq in c.mla_seq_lens:
        torch.manual_seed(seq)
        x = torch.randn(c.batch, seq, c.hidden, device=c.device, dtype=c.torch_dtype)
        calls, caches = {}, {}
        with torch.inference_mode():
            for impl in ATTENTIONS:
                model = models["mla" if impl.startswith("mla") else impl]
                cache = LatentCache() if impl.startswith("mla") else KVCache()
                options = {"absorb": True} if impl == "mla-absorbed" else {}
                model(x[:, :-1], is_causal=True, cache=cache, **options)  # L - 1 positions
                model(x[:, -1:], is_causal=True, cache=cache, **options)  # the buffer grown

                def step(model=model, cache=cache, options=options, held=seq - 1, last=x[:, -1:]):
                    cache.crop(held)  # each timed step appends the L-th position
                    return model(last, is_causal=True, cache=cache, **options)

                calls[impl], caches[impl] = step, cache
            med = round_robin(calls, DECODE_REPEATS * c.repeats, c.warmup, c.device)
        for impl in ATTENTIONS:
            cache = caches[impl]
            held = sum(t.numel() * t.element_size() for t in (cache.keys, cache.values))
            per_position = held / len(cache) / c.batch
            expected = formula_bytes(impl, c, kv.get(impl, 0), element)
            rows.append(
                Row(
                    seq_len=seq,
                    attention=impl,
                    step_ms=med[impl] * 1e3,
                    cache_bytes_per_position=per_position,
                    cache_vs_formula=per_position / expected,
                )
            )
        absorb_rows.append(
            AbsorbRow(
                seq_len=seq,
                expanded_ms=med["mla-expanded"] * 1e3,
                absorbed_ms=med["mla-absorbed"] * 1e3,
                speedup=med["mla-expanded"] / med["mla-absorbed"],
                cache_vs_formula=rows[-1]["cache_vs_formula"],
            )
        )
        context.progress.step(f"mla seq_len {seq}")
    return {"mla": rows, "mla_absorb": absorb_rows}


def report(results: dict) -> list[str]:
    lines = ["Decoding one position: MLA against MHA and GQA; MLA absorbed against expanded"]
    for r in results["mla"]:
        lines.append(
            f"seq_len {r['seq_len']} {r['attention']}: {r['step_ms']:.2f} ms, cache "
            f"{r['cache_bytes_per_position']:.0f} bytes per position ({r['cache_vs_formula']:.2f} "
            "of the formula)"
        )
    wins = [r["seq_len"] for r in results["mla_absorb"] if r["speedup"] >= 1]
    lines.append(
        "absorbed decoding wins from seq_len " + (str(wins[0]) if wins else "(none measured)")
    )
    return lines
