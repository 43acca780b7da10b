"""mha: multi-head attention, explained line by line in 中文 and English, every shape verified.

- [`mha.annotated`][mha.annotated] -- the design post's ``MHA``, every line commented and
  every shape checked.
- [`mha.pure`][mha.pure] -- the same class, minimal (纯享版).
- [`mha.interop`][mha.interop] -- conversion to and from ``torch.nn.MultiheadAttention``, and
  from transformers' attention of the Llama family's layout (Llama, Mistral, Mixtral, Qwen,
  Gemma, Gemma 2 and 3, Granite, GLM-4) and DeepSeek's, the weights copied exactly; and a whole
  transformers model's attention swapped for mha's and back.
- [`mha.hf`][mha.hf] -- the layer that takes transformers' call in a swapped model, its cache
  kept in step with transformers'.
- [`mha.full`][mha.full] -- the full version (完整版): masks, cross-attention, a KV cache,
  grouped-query attention, dropout and a fast path, each proven equal to PyTorch's own; and the
  options of today's open models (head size, scale, per-projection bias, q/k norm, rotary
  embeddings, a sliding window), proven equal to transformers' own.
- [`mha.rope`][mha.rope] -- rotary position embeddings: both layouts, partial rotation, the
  llama3 and YaRN scalings.
- [`mha.mla`][mha.mla] -- DeepSeek-V2/V3's multi-head latent attention: a cache of latents,
  decoding expanded or with the up-projections absorbed, proven equal to transformers' own.
- [`mha.tiled`][mha.tiled] -- attention one block of keys at a time with an online softmax
  (FlashAttention's idea in plain PyTorch), and the rule that merges two partial results.
- [`mha.parallel`][mha.parallel] -- attention across devices on ``torch.distributed``: the
  heads split across ranks (tensor parallelism) and the sequence (ring attention).
- [`mha.decoder`][mha.decoder] -- decoder-only language models on the full version (GPT-2
  style, and a Llama that loads transformers' Llama, Mistral and Qwen models), and batched
  generation and beam search with its cache, through a documented model interface.
- [`mha.masks`][mha.masks], [`mha.cache`][mha.cache], [`mha.norm`][mha.norm] -- the masks, the
  KV cache and RMSNorm that the full version and MLA share (``mha.full`` re-exports them).
- [`mha.checks`][mha.checks] -- the argument checks they share.

``import mha`` imports these fourteen; ``mha.trace``, ``mha.shapecheck`` and ``mha.bench`` are
imported by name:

- ``mha.trace`` -- records a real forward pass: the one source of the site's drawn shapes.
- ``mha.shapecheck`` -- checks the shape comments of any module against a run of it
  (``python -m mha.shapecheck model.py::MHA``, ``--fix``, ``pytest --shapecheck``): the engine
  of the site's own shape-comment checker.
- ``mha.bench`` -- the benchmark (``python -m mha.bench``), a package split by concern: time,
  memory and FLOP rate, side by side with ``nn.MultiheadAttention``; its targets are checked
  against the measurements wherever they are shown.
"""

# ``import mha`` then ``mha.full``: the public modules are attributes of the package.
from mha import (
    annotated,
    cache,
    checks,
    decoder,
    full,
    hf,
    interop,
    masks,
    mla,
    norm,
    parallel,
    pure,
    rope,
    tiled,
)

__all__ = [
    "annotated",
    "cache",
    "checks",
    "decoder",
    "full",
    "hf",
    "interop",
    "masks",
    "mla",
    "norm",
    "parallel",
    "pure",
    "rope",
    "tiled",
]

__version__ = "0.1.0"
