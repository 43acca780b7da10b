"""Grouped-query attention: ``kv_heads = heads / 2`` and ``heads / 4`` against full heads, at one
length: the bytes the cache holds (counted, not timed) and the causal forward's time."""

from __future__ import annotations

from typing import TypedDict

import torch

import mha.full
from mha.bench.config import GQA_REPEATS, Config
from mha.bench.context import Context
from mha.bench.timing import round_robin


class Row(TypedDict):
    heads: int
    kv_heads: int
    seq_len: int
    cache_bytes: int
    cache_ratio_vs_full: float
    """``cache_bytes`` divided by that of ``kv_heads = heads``."""
    median_ms: float


SECTIONS = {"gqa": list[Row]}


def steps(config: Config) -> int:
    return 1


def run(context: Context) -> dict:
    c = context.config
    seq, b, d, h = c.gqa_seq_len, c.batch, c.hidden, c.heads
    kv_list = [k for k in (h, h // 2, h // 4) if k >= 1 and h % k == 0]
    models, cache_bytes = {}, {}
    x = torch.randn(b, seq, d, device=c.device, dtype=c.torch_dtype)
    with torch.inference_mode():
        for kv in kv_list:
            torch.manual_seed(0)
            model = mha.full.MHA(d, h, kv_heads=kv).to(device=c.device, dtype=c.torch_dtype)
            models[kv] = model.eval()
            cache = mha.full.KVCache()
            models[kv](x, is_causal=True, cache=cache)
            cache_bytes[kv] = sum(t.numel() * t.element_size() for t in (cache.keys, cache.values))
        med = round_robin(
            {str(kv): (lambda m=models[kv]: m(x, is_causal=True)) for kv in kv_list},
            GQA_REPEATS * c.repeats,
            c.warmup,
            c.device,
        )
    context.progress.step(f"gqa seq_len {seq}")
    rows = [
        Row(
            heads=h,
            kv_heads=kv,
            seq_len=seq,
            cache_bytes=cache_bytes[kv],
            cache_ratio_vs_full=cache_bytes[kv] / cache_bytes[h],
            median_ms=med[str(kv)] * 1e3,
        )
        for kv in kv_list
    ]
    return {"gqa": rows}


def report(results: dict) -> list[str]:
    lines = ["Grouped-query attention (causal forward)"]
    for r in results["gqa"]:
        lines.append(
            f"heads {r['heads']}, kv_heads {r['kv_heads']}: "
            f"cache {r['cache_bytes'] / 2**20:.1f} MB "
            f"({r['cache_ratio_vs_full']:.2f} of full heads), {r['median_ms']:.2f} ms"
        )
    return lines
