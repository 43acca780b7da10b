"""``mha`` against transformers' own Llama attention, side by side in the same rounds.

- ``hf_decode``: one decoding step of one layer, ``from_hf(LlamaAttention)`` with its
  ``KVCache`` against the ``LlamaAttention`` it came from (eager, its rotary embedding computed
  for the step, a ``DynamicCache``), at two sizes: a small layer where a step is mostly the
  per-call cost of Python (64 wide, 4 query heads, 2 key/value heads of 16, 32 positions held),
  and the benchmark's width (``hidden`` wide, ``heads`` query heads of 64, a quarter as many
  key/value heads, 1,024 held). Each timed call runs ``DECODE_STEPS`` steps, each after a crop
  back to the same length.
- ``hf_generate``: greedy generation with ``model.generate`` of a small random
  ``LlamaForCausalLM`` (2 layers, the small layer's sizes, 10-token prompts), with its
  attention swapped for ``mha``'s (``mha.interop.swap_attention``) against the same model
  unswapped, in tokens per second of the batch.

transformers is a test and docs dependency; where it is not installed the case raises.
"""

from __future__ import annotations

import copy
from typing import TypedDict

import torch

from mha.bench.config import DECODE_REPEATS, DECODE_STEPS
from mha.bench.context import Context
from mha.bench.timing import round_robin

# (name, hidden_size, heads, kv_heads, held): the small layer, then the benchmark's width
SMALL = ("small", 64, 4, 2, 32)
PROMPT = 10
BATCHES = (1, 4)


class DecodeRow(TypedDict):
    size: str
    hidden_size: int
    heads: int
    kv_heads: int
    seq_len: int
    """The positions held before the step."""
    mha_us: float
    hf_us: float
    ratio_vs_hf: float
    """``mha_us / hf_us``: below 1, ``mha``'s step is the faster."""


class GenerateRow(TypedDict):
    batch_size: int
    steps: int
    mha_tokens_s: float
    hf_tokens_s: float
    ratio_vs_hf: float
    """Time per token, swapped over transformers' own: below 1, the swapped model is faster."""


SECTIONS = {"hf_decode": list[DecodeRow], "hf_generate": list[GenerateRow]}


def steps(config) -> int:
    return 2 + len(BATCHES)


def _layer(hidden: int, heads: int, kv_heads: int, device: str, dtype: torch.dtype):
    """A random LlamaAttention (eager), its rotary embedding and config, and mha's copy."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

    from mha.interop import from_hf

    config = LlamaConfig(
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    hf = LlamaAttention(config, layer_idx=0).to(device=device, dtype=dtype).eval()
    rotary = LlamaRotaryEmbedding(config).to(device)
    return hf, rotary, config, from_hf(hf).eval()


def decode_row(size: tuple, batch: int, device: str, dtype: torch.dtype, repeats: int, warmup: int):
    """One row of ``hf_decode``: both layers hold ``held`` positions, then time their steps."""
    from transformers.cache_utils import DynamicCache

    from mha.cache import KVCache

    name, hidden, heads, kv_heads, held = size
    hf, rotary, config, ours = _layer(hidden, heads, kv_heads, device, dtype)
    x = torch.randn(batch, held + 1, hidden, device=device, dtype=dtype)
    last, at = x[:, -1:], torch.full((1, 1), held, device=device)
    with torch.inference_mode():
        cache, theirs = KVCache(), DynamicCache(config=config)
        ours(x[:, :held], is_causal=True, cache=cache)
        prompt = torch.arange(held, device=device)[None]
        hf(x[:, :held], rotary(x[:, :held], prompt), None, past_key_values=theirs)
        ours(last, is_causal=True, cache=cache)  # one step each, so both have grown once
        hf(last, rotary(last, at), None, past_key_values=theirs)

        def mha_steps():
            for _ in range(DECODE_STEPS):
                cache.crop(held)
                ours(last, is_causal=True, cache=cache)

        def hf_steps():
            for _ in range(DECODE_STEPS):
                theirs.crop(-1)  # transformers' crop takes the positions to drop, negated
                hf(last, rotary(last, at), None, past_key_values=theirs)

        med = round_robin({"mha": mha_steps, "hf": hf_steps}, repeats, warmup, device)
    return DecodeRow(
        size=name,
        hidden_size=hidden,
        heads=heads,
        kv_heads=kv_heads,
        seq_len=held,
        mha_us=med["mha"] / DECODE_STEPS * 1e6,
        hf_us=med["hf"] / DECODE_STEPS * 1e6,
        ratio_vs_hf=med["mha"] / med["hf"],
    )


def generate_row(batch: int, steps: int, device: str, repeats: int, warmup: int) -> GenerateRow:
    """One row of ``hf_generate``: a small random Llama, swapped and not, greedy."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from mha.interop import swap_attention

    _, hidden, heads, kv_heads, _ = SMALL
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    theirs = LlamaForCausalLM(config).to(device).eval()
    ours = swap_attention(copy.deepcopy(theirs))
    prompts = torch.randint(64, (batch, PROMPT), device=device)
    options = dict(max_new_tokens=steps, min_new_tokens=steps, do_sample=False, pad_token_id=0)
    with torch.inference_mode():
        med = round_robin(
            {
                "mha": lambda: ours.generate(prompts, **options),
                "hf": lambda: theirs.generate(prompts, **options),
            },
            repeats,
            warmup,
            device,
        )
    tokens = batch * steps
    return GenerateRow(
        batch_size=batch,
        steps=steps,
        mha_tokens_s=tokens / med["mha"],
        hf_tokens_s=tokens / med["hf"],
        ratio_vs_hf=med["mha"] / med["hf"],
    )


def run(context: Context) -> dict:
    c = context.config
    wide = ("wide", c.hidden, c.heads, max(c.heads // 4, 1), 1024)
    decode = []
    for size in (SMALL, wide):
        rounds = DECODE_REPEATS * c.repeats
        decode.append(decode_row(size, c.batch, c.device, c.torch_dtype, rounds, c.warmup))
        context.progress.step(f"hf_decode {size[0]}")
    generate = []
    for batch in BATCHES:
        generate.append(generate_row(batch, c.generate_steps, c.device, c.repeats, c.warmup))
        context.progress.step(f"hf_generate batch {batch}")
    return {"hf_decode": decode, "hf_generate": generate}


def report(results: dict) -> list[str]:
    lines = [
        "One decoding step of one layer: mha (from_hf) vs transformers' LlamaAttention (eager)"
    ]
    for r in results["hf_decode"]:
        lines.append(
            f"{r['size']} ({r['hidden_size']} wide, {r['heads']}/{r['kv_heads']} heads, "
            f"{r['seq_len']} held): mha {r['mha_us']:.0f} us, transformers {r['hf_us']:.0f} us, "
            f"ratio {r['ratio_vs_hf']:.2f}"
        )
    lines.append("Generating with a small Llama: attention swapped for mha's vs transformers' own")
    for r in results["hf_generate"]:
        lines.append(
            f"batch {r['batch_size']}: swapped {r['mha_tokens_s']:.0f} tokens/s, transformers "
            f"{r['hf_tokens_s']:.0f} tokens/s, time ratio {r['ratio_vs_hf']:.2f}"
        )
    return lines
