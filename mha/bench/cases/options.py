"""What an option that ``scaled_dot_product_attention`` cannot express costs: the causal forward
at one length (``Config.gqa_seq_len``) with ``fast=True`` and no such option (SDPA), written out
(``fast=False``), and with each option that makes ``mha.full.MHA`` take the written-out path
although ``fast=True`` (``softcap``: Gemma 2's capped scores; ``sinks``: gpt-oss's logit per
head in the softmax), and with Llama 4's chunks (``chunk``), which keep the fused kernel, called
once on the whole chunks moved into the batch (each chunk causal on its own, no score between two
chunks computed); all holding the same weights, in the same rounds. A new such option adds its row
to ``OPTIONS``."""

from __future__ import annotations

from typing import TypedDict

import torch

import mha.full
from mha.bench.config import GQA_REPEATS, Config
from mha.bench.context import Context
from mha.bench.timing import round_robin

# (name, MHA keywords, the path it runs): the fused kernel, the written-out path, then the options
# that need the written-out path (the option's tests assert which path runs; here it is named)
OPTIONS = (
    ("sdpa", {"fast": True}, "sdpa"),
    ("written out", {"fast": False}, "written out"),
    ("softcap=50", {"fast": True, "softcap": 50.0}, "written out"),
    ("sinks", {"fast": True, "sinks": True}, "written out"),
    ("chunk=256", {"fast": True, "chunk": 256}, "sdpa per chunk"),
)


class Row(TypedDict):
    option: str
    path: str
    """``"sdpa"`` (the fused kernel), ``"sdpa per chunk"`` (the fused kernel on the chunks as a
    batch) or ``"written out"``."""
    seq_len: int
    median_ms: float
    ratio_vs_sdpa: float
    """``median_ms`` over the ``sdpa`` row's."""


SECTIONS = {"options": list[Row]}


def steps(config: Config) -> int:
    return 1


def run(context: Context) -> dict:
    c = context.config
    seq = c.gqa_seq_len
    x = torch.randn(c.batch, seq, c.hidden, device=c.device, dtype=c.torch_dtype)
    models = {}
    for name, options, _ in OPTIONS:
        torch.manual_seed(0)  # the same weights in every row
        model = mha.full.MHA(c.hidden, c.heads, **options)
        models[name] = model.to(device=c.device, dtype=c.torch_dtype).eval()
    with torch.inference_mode():
        med = round_robin(
            {name: (lambda m=m: m(x, is_causal=True)) for name, m in models.items()},
            GQA_REPEATS * c.repeats,
            c.warmup,
            c.device,
        )
    context.progress.step(f"options seq_len {seq}")
    rows = [
        Row(
            option=name,
            path=path,
            seq_len=seq,
            median_ms=med[name] * 1e3,
            ratio_vs_sdpa=med[name] / med["sdpa"],
        )
        for name, _, path in OPTIONS
    ]
    return {"options": rows}


def report(results: dict) -> list[str]:
    lines = ["Options SDPA cannot express: the causal forward, against SDPA"]
    for r in results["options"]:
        lines.append(
            f"{r['option']} ({r['path']}), seq_len {r['seq_len']}: {r['median_ms']:.2f} ms, "
            f"{r['ratio_vs_sdpa']:.2f}x SDPA's"
        )
    return lines
