"""Generating with the decoder of the chapter *Use it in a model* (``mha.decoder.Decoder``: 2
blocks 64 wide, 4 query heads and 2 key/value heads, 43 characters, untrained: the time does not
depend on the weights) from prompts of 10 positions, greedy, ``generate_steps`` new positions:
with its ``ModelCache`` (``mha.decoder.generate``) against running the whole sequence so far at
each step. In tokens (positions) per second of the batch, 1 prompt and 8."""

from __future__ import annotations

from typing import TypedDict

import torch

from mha.bench.context import Context
from mha.bench.timing import round_robin
from mha.decoder import Decoder, generate

PROMPT = 10
BATCHES = (1, 8)


class Row(TypedDict):
    batch_size: int
    steps: int
    cached_tokens_s: float
    recompute_tokens_s: float
    speedup: float
    """``cached_tokens_s / recompute_tokens_s``."""


SECTIONS = {"generate": list[Row]}


def steps(config) -> int:
    return len(BATCHES)


def recompute(model: Decoder, prompts: torch.Tensor, steps: int) -> torch.Tensor:
    """Greedy generation without a cache: each step runs the model on the whole sequence."""
    seq = prompts
    with torch.no_grad():
        for _ in range(steps):
            seq = torch.cat([seq, model(seq)[:, -1:].argmax(-1)], dim=1)
    return seq[:, prompts.size(1) :]


def run(context: Context) -> dict:
    c = context.config
    torch.manual_seed(0)
    model = Decoder(43, 64, 4, kv_heads=2, num_layers=2, max_len=PROMPT + c.generate_steps)
    model = model.to(c.device).eval()
    rows = []
    for batch in BATCHES:
        prompts = torch.randint(43, (batch, PROMPT), device=c.device)
        listed = prompts.tolist()
        med = round_robin(
            {
                "cached": lambda listed=listed: generate(model, listed, c.generate_steps),
                "recompute": lambda p=prompts: recompute(model, p, c.generate_steps),
            },
            c.repeats,
            c.warmup,
            c.device,
        )
        tokens = batch * c.generate_steps
        rows.append(
            Row(
                batch_size=batch,
                steps=c.generate_steps,
                cached_tokens_s=tokens / med["cached"],
                recompute_tokens_s=tokens / med["recompute"],
                speedup=med["recompute"] / med["cached"],
            )
        )
        context.progress.step(f"generate batch {batch}")
    return {"generate": rows}


def report(results: dict) -> list[str]:
    lines = ["Generating with the chapter's decoder: the cache vs the whole sequence each step"]
    for r in results["generate"]:
        lines.append(
            f"batch {r['batch_size']}, {r['steps']} steps: cached {r['cached_tokens_s']:.0f} "
            f"tokens/s, recomputing {r['recompute_tokens_s']:.0f} tokens/s, "
            f"speed-up {r['speedup']:.1f}x"
        )
    return lines
