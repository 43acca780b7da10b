"""The features of ``mha.full.MHA`` and ``mha.mla.MLA`` combined, as users combine them: each case
is one value of every dimension below, run as a batch of two prompts (prefill, then three decoding
steps) and compared with a float64 reference of the same weights, each prompt alone, recomputed
without a cache.

The dimensions: the options (``head_size`` other than ``hidden_size / heads_num``, ``scale``, a bias
on some projections, ``qk_norm`` (Qwen3's, Gemma's, OLMo 2's and Llama 4's), ``rope`` with each
scaling, ``window``, ``chunk``, ``softcap``, ``sinks``, ``gate``, ``temperature``), ``kv_heads``,
the fast and the written-out path; the dtype (float64, float32, bfloat16, float16), the last two
both as ``.to(dtype)`` and under autocast; the cache (none, ``KVCache``, preallocated ``max_len``, a
``ModelCache``, a crop of a rejected step, a reorder of the rows, a static cache, whose masks cover
its ``max_len`` slots); padding (none, left, right); grad mode (no_grad; inference_mode for the
prefill then no_grad; training with ``W_k`` frozen, its gradients compared too);
``torch.compile(fullgraph=True)`` of the decoding steps (the keys' length changes at each); and
``MLA``'s latent cache expanded and absorbed.

Where a transformers family has a case's options (Llama, Mistral, Qwen2, Qwen3, Gemma 2 with a
soft-cap, Gemma 3 with its q/k norm, gpt-oss with its sinks, OLMo 2 with its norms of the
projections, Qwen3-Next with its gate, Llama 4's layers without rotation with their temperature
and its chunked layers with their norm without a weight: ``family_of``),
the case's module is that family's layer converted with ``from_hf``, and the float64 reference is
checked against the transformers layer itself first.

``MHA_DEVICE=cuda`` runs the cases on a GPU (``make gpu-check``); the reference stays on the CPU.

``CASES`` covers every pair of values of two dimensions at least once (a pairwise covering array,
drawn greedily from a fixed seed). ``make test`` runs its first ``SAMPLE`` cases, which cover the
most pairs; the whole of it runs with ``MHA_MATRIX=all`` (``make matrix``; marked ``slow``).
Right padding with a window is no case: the window counts columns, padding among them, and
``mha.decoder.generate`` refuses it (``tests/test_seams.py``); nor with chunks, which count by
positions, a row's columns a fixed shift from them (the right padding's columns break that).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import os
import random
from dataclasses import dataclass, fields

import pytest
import torch

from mha.decoder import positions_of
from mha.full import MHA, KVCache, ModelCache, padding_mask
from mha.interop import from_hf
from mha.mla import MLA, LatentCache
from mha.rope import RotaryEmbedding

HIDDEN, HEADS, LENGTHS, STEPS = 24, 4, (6, 3), 3
DEVICE = torch.device(os.environ.get("MHA_DEVICE", "cpu"))
SCALINGS = {
    "default": None,
    "llama3": {
        "rope_type": "llama3",
        "factor": 4.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 4,
    },
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4},
    # Phi-3's: a trained context of 2, so that every call here (a prompt of 3 positions at least,
    # each row alone in the reference) is past it and turns by the long factors, whatever the
    # cache; a decoding that crosses it is tests/test_transformers.py's (its result depends on
    # where the calls split the sequence, so a reference in one call would differ)
    "longrope": {"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": 2},
}
LONGROPE_TRAINED = SCALINGS["longrope"]["original_max_position_embeddings"]


def scaling_of(rope: str, rotary_dims: int) -> dict | None:
    """``SCALINGS[rope]``, with longrope's factors drawn for the ``rotary_dims // 2`` pairs."""
    said = SCALINGS[rope]
    if rope == "longrope":  # a pair's factor grows with its wavelength, as Phi-3's do
        pairs = range(rotary_dims // 2)
        said = {**said, "short_factor": [1.0 + 0.5 * i for i in pairs]}
        said["long_factor"] = [2.0 + 2.0 * i for i in pairs]
    return said


# How far from the float64 reference each dtype may be, relative to the reference's largest
# value: a few roundings of the dtype (a wrong result is off by the size of the values).
BOUND = {"float64": 1e-10, "float32": 1e-4, "float16": 1e-2, "bfloat16": 8e-2}
# A float64 gradient through the q/k norms, which compute in float32: a few of float32's roundings
NORM_GRADIENT_BOUND = 1e-6

DIMENSIONS = {
    "module": ["mha", "mla-expanded", "mla-absorbed"],
    "kv_heads": [4, 2, 1],
    "head_size": [None, 8],
    "scale": [None, 0.3],
    "bias": ["all", "none", "qkv"],
    "qk_norm": [False, True, "gemma", "projection", "weightless"],
    "rope": [None, "default", "llama3", "yarn", "longrope"],
    "window": [None, 3],
    "chunk": [None, 2],
    "softcap": [None, 2.0],
    "sinks": [False, True],
    "gate": [False, True],
    "temperature": [None, (0.5, 2)],  # Llama 4's config takes its floor_scale as an int
    "fast": [True, False],
    "dtype": ["float64", "float32", "bfloat16", "float16"],
    "cast": ["to", "autocast"],
    "cache": ["none", "kv", "max_len", "model", "crop", "reorder", "static"],
    "padding": ["none", "left", "right"],
    "grad": ["no_grad", "inference_then_no_grad", "frozen"],
    "compile": [False, True],
}


@dataclass(frozen=True)
class Case:
    module: str
    kv_heads: int
    head_size: int | None
    scale: float | None
    bias: str
    qk_norm: bool | str
    rope: str | None
    window: int | None
    chunk: int | None
    softcap: float | None
    sinks: bool
    gate: bool
    temperature: tuple[float, float] | None
    fast: bool
    dtype: str
    cast: str
    cache: str
    padding: str
    grad: str
    compile: bool

    def __str__(self) -> str:
        return "-".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))


# MLA has none of MHA's options: a case of it leaves them at these values
MHA_ONLY = {
    "kv_heads": 4,
    "head_size": None,
    "scale": None,
    "bias": "all",
    "qk_norm": False,
    "rope": "default",
    "window": None,
    "chunk": None,
    "softcap": None,
    "sinks": False,
    "gate": False,
    "temperature": None,
    "fast": True,
}


def valid(case: dict) -> bool:
    """The combinations that exist: autocast casts to a lower precision only; MLA has its own
    options (none of MHA's but the dtype, cache, padding, grad and compile ones); right padding
    with a window or chunks is refused (see the module's docstring); a layer has a window or
    chunks, not both; a crop past a window needs rollback, which the case gives."""
    if case.get("cast") == "autocast" and case.get("dtype") in ("float64", "float32"):
        return False
    if case.get("module", "mha") != "mha":
        if any(case.get(k, v) != v for k, v in MHA_ONLY.items()):
            return False
    if case.get("padding") == "right" and (case.get("window"), case.get("chunk")) != (None, None):
        return False
    if case.get("window") is not None and case.get("chunk") is not None:
        return False
    if case.get("cache") == "static" and case.get("module", "mha") != "mha":
        return False  # MLA's latent cache has no static mode (tests/test_static_cache.py)
    return True


def pairwise(dimensions: dict, seed: int = 0, tries: int = 60) -> list[Case]:
    """A list of valid cases in which every valid pair of values of two dimensions appears; each
    case is the best of ``tries`` random ones at covering pairs not covered yet."""
    rng = random.Random(seed)
    names = list(dimensions)
    uncovered = {
        ((a, x), (b, y))
        for a, b in itertools.combinations(names, 2)
        for x in dimensions[a]
        for y in dimensions[b]
        if valid({a: x, b: y})
    }

    def draw(fixed: dict) -> dict:
        """Random values but ``fixed``, mended to a valid case where the rules allow."""
        case = {n: rng.choice(dimensions[n]) for n in names} | fixed
        if case["module"] != "mha":
            case |= {k: v for k, v in MHA_ONLY.items() if k not in fixed}
        if case["dtype"] in ("float64", "float32") and "cast" not in fixed:
            case["cast"] = "to"
        for banded in ("window", "chunk"):  # mended as far as the fixed values allow
            if case["padding"] == "right" and case[banded] is not None:
                case[banded if banded not in fixed else "padding"] = (
                    None if banded not in fixed else "left"
                )
        if case["window"] is not None and case["chunk"] is not None:
            case["chunk" if "chunk" not in fixed else "window"] = None
        return case

    def covers(case: dict) -> set:
        return {
            ((a, case[a]), (b, case[b])) for a, b in itertools.combinations(names, 2)
        } & uncovered

    cases = []
    while uncovered:
        # Seed each case with one uncovered pair, so that every pair gets covered
        (a, x), (b, y) = min(uncovered, key=repr)
        candidates = [c for c in (draw({a: x, b: y}) for _ in range(tries)) if valid(c)]
        if not candidates:  # the pair fits no other values drawn: drop it
            uncovered.discard(((a, x), (b, y)))
            continue
        best = max(candidates, key=lambda c: len(covers(c)))
        uncovered -= covers(best)
        cases.append(Case(**best))
    return cases


# The seed: one whose cases take four of the thirteen families (no seed of the first 1,400 takes
# more: a family fixes several options at once, and each option added thins the cases that fit
# one; the others are left to tests/test_transformers.py, which draws every family), one of them
# among the first SAMPLE
CASES = pairwise(DIMENSIONS, seed=1001)
SAMPLE = 12


# ---- One case, run ---------------------------------------------------------------------------


def family_of(case: Case) -> tuple[str, bool] | None:
    """The transformers family whose attention layer has ``case``'s options, and whether its
    ``attention_bias`` is on; ``None`` when no family has them (another scale, no rope, MLA)."""
    if case.module != "mha" or case.scale is not None:
        return None
    gemma = case.bias != "qkv"  # Gemma's configs: a bias on all four projections or on none
    if case.chunk is not None or case.qk_norm == "weightless":
        # Llama 4's rotating layers: in chunks, with their q/k norm without a weight; no window,
        # cap, sinks, gate or temperature, and its biases as Gemma's
        others = (case.softcap, case.sinks, case.gate, case.temperature)
        plain = gemma and others == (None, False, False, None) and case.rope is not None
        llama4 = plain and case.chunk is not None and case.qk_norm == "weightless"
        return ("llama4_chunked", case.bias == "all") if llama4 else None
    if case.temperature is not None or case.rope is None:
        # Llama 4's layers without rotation tune their temperature; without q/k norm, window, a
        # cap, sinks or gate, and its biases as Gemma's
        others = (case.qk_norm, case.window, case.softcap, case.sinks, case.gate)
        plain = gemma and others == (False, None, None, False, False)
        llama4 = plain and case.temperature is not None and case.rope is None
        return ("llama4", case.bias == "all") if llama4 else None
    if case.gate:  # Qwen3-Next's gate, with its (1 + w) q/k norm, no window, its biases as Gemma's
        plain = gemma and case.window is None and not case.sinks and case.softcap is None
        return ("qwen3_next", case.bias == "all") if plain and case.qk_norm == "gemma" else None
    if case.sinks:  # gpt-oss's sinks, without a q/k norm or a cap; its biases as Gemma's
        plain = gemma and not case.qk_norm and case.softcap is None
        return ("gpt_oss", case.bias == "all") if plain else None
    if case.qk_norm == "projection":  # OLMo 2's norms of the projections: no window, no cap
        plain = gemma and case.window is None and case.softcap is None
        return ("olmo2", case.bias == "all") if plain else None
    if case.softcap is not None:  # Gemma 2's soft-cap, without a q/k norm
        return ("gemma2", case.bias == "all") if gemma and not case.qk_norm else None
    if case.qk_norm == "gemma":  # Gemma 3's (1 + weight) norm
        return ("gemma3", case.bias == "all") if gemma else None
    if case.bias == "qkv":  # Qwen2's biases, and no q/k norm
        return None if case.qk_norm else ("qwen2", False)
    if case.qk_norm:
        return "qwen3", case.bias == "all"
    if case.window is not None:  # Mistral: no bias
        return ("mistral", False) if case.bias == "none" else None
    return "llama", case.bias == "all"


def from_transformers(case: Case):
    """The transformers layer of ``case``'s family (float64, random weights), its rotary
    embedding, and the layer converted by ``from_hf``; ``None`` without transformers."""
    family = family_of(case)
    try:
        import test_transformers as hf  # its builders: a layer from a config, and its call
    except (Exception, pytest.skip.Exception):  # no transformers, or no site packages (the GPU
        # machine's bare Python): the case runs with MHA's own weights
        return None
    if family is None:
        return None
    module, _, rotary = hf.build(
        family[0],
        heads=HEADS,
        kv_heads=case.kv_heads,
        head_dim=case.head_size,
        rope=case.rope,
        window=case.chunk if family[0] == "llama4_chunked" else case.window,  # its chunk size
        dtype=torch.float64,
        seed=0,
        bias=family[1],
        softcap=case.softcap,  # Gemma 2's (the others have none)
        query_scalar=case.head_size or HIDDEN // HEADS,  # Gemma's: the default scale
        partial=1.0,  # Qwen3-Next's share of a head that rotates: the whole, as the case's rope
        temperature=case.temperature,  # Llama 4's (the others have none)
        trained=LONGROPE_TRAINED,  # longrope's (the other scalings keep theirs)
    )
    model = from_hf(module)
    model.fast = case.fast
    return module, rotary, model, hf


def build(case: Case) -> torch.nn.Module:
    """The float64 module of ``case``, its weights seeded and scaled up (attention far from
    uniform)."""
    torch.manual_seed(0)
    if case.module == "mha":
        rope = None
        if case.rope is not None:
            dims = case.head_size or HIDDEN // HEADS
            rope = RotaryEmbedding(dims, scaling=scaling_of(case.rope, dims))
        bias = {"all": True, "none": False, "qkv": ("W_q", "W_k", "W_v")}[case.bias]
        model = MHA(
            HIDDEN,
            HEADS,
            kv_heads=case.kv_heads,
            bias=bias,
            fast=case.fast,
            head_size=case.head_size,
            scale=case.scale,
            qk_norm=case.qk_norm,
            rope=rope,
            window=case.window,
            chunk=case.chunk,
            softcap=case.softcap,
            sinks=case.sinks,
            gate=case.gate,
            temperature=case.temperature,
        )
    else:
        model = MLA(HIDDEN, HEADS, kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4,
                    v_head_dim=5)  # fmt: skip
    model = model.double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.0)
        if getattr(model, "sink_logits", None) is not None:  # drawn, not left at 0
            model.sink_logits.normal_()
    return model


def inputs() -> list[torch.Tensor]:
    """Each prompt's positions, then its three new ones: float64 ``[length + STEPS, HIDDEN]``."""
    generator = torch.Generator().manual_seed(1)
    return [
        torch.randn(n + STEPS, HIDDEN, dtype=torch.float64, generator=generator) for n in LENGTHS
    ]


def call(model, case: Case, x, mask, positions, cache):
    options = dict(is_causal=True, attn_mask=mask, cache=cache)
    if case.module != "mha":
        options["absorb"] = case.module == "mla-absorbed"
    if case.module != "mha" or (case.rope, case.temperature, case.chunk) != (None, None, None):
        # what the rotation and the temperature take, and what chunks count by (a left-padded
        # row's from its first position)
        options["positions"] = positions
    return model(x, **options)


class Batch:
    """The two prompts as one padded batch, growing by one position per row per step: its
    inputs, key mask and positions, and which column holds each row's position ``i``."""

    def __init__(self, rows: list[torch.Tensor], padding: str):
        self.rows, self.padding = rows, padding
        lengths = [len(r) - STEPS for r in rows]
        if padding == "none":
            lengths = [min(lengths)] * len(rows)
        self.lengths = lengths
        self.width = max(lengths)

    def prompt(self):
        """The prefill: ``x [2, width, HIDDEN]``, ``mask [2, 1, 1, width]``, ``positions``."""
        x = torch.zeros(len(self.rows), self.width, HIDDEN, dtype=torch.float64)
        for b, (row, n) in enumerate(zip(self.rows, self.lengths, strict=True)):
            at = slice(self.width - n, self.width) if self.padding == "left" else slice(0, n)
            x[b, at] = row[:n]
        lengths = torch.tensor(self.lengths)
        mask = padding_mask(lengths, self.width, left=self.padding == "left")
        return x, mask, positions_of(mask)

    def column(self, b: int, i: int) -> int:
        """The prefill's column of row ``b``'s position ``i``."""
        return self.width - self.lengths[b] + i if self.padding == "left" else i

    def step(self, s: int, mask):
        """Decoding step ``s``: every row's next position, and the mask grown by a real column."""
        x = torch.stack([row[n + s] for row, n in zip(self.rows, self.lengths, strict=True)])
        grown = torch.cat([mask, torch.ones(len(self.rows), 1, 1, 1, dtype=torch.bool)], dim=-1)
        return x[:, None], grown, positions_of(grown)[:, -1:]


def reference(model, case: Case, batch: Batch) -> list[torch.Tensor]:
    """Each row alone, its prompt and new positions in one call, float64, no cache. With a
    temperature, the row keeps the columns it has in the batch, its padding masked: the factor
    counts the index in the cache, padding included, as Llama 4 does
    (tests/test_hf_boundary.py)."""
    out = []
    for b, (row, n) in enumerate(zip(batch.rows, batch.lengths, strict=True)):
        columns = list(range(n + STEPS))
        if case.temperature:
            columns = [batch.column(b, i) for i in range(n)]
            columns += [batch.width + s for s in range(STEPS)]
        real = torch.zeros(columns[-1] + 1, dtype=torch.bool)
        real[columns] = True
        x = row.new_zeros(1, len(real), HIDDEN)
        x[0, columns] = row[: n + STEPS]
        mask = None if real.all() else real[None, None, None]
        positions = (real.cumsum(0) - 1).clamp(min=0)  # each column's position in the row
        out.append(call(model, case, x, mask, positions, None)[0, columns])
    return out


def run(case: Case) -> None:
    converted = from_transformers(case)
    model64 = build(case) if converted is None else converted[2]
    batch = Batch(inputs(), case.padding)
    with torch.no_grad():
        expected = reference(model64, case, batch)
    if converted is not None:  # the reference is transformers' own layer's output
        module, rotary, _, hf = converted
        with torch.no_grad():
            for row, n, ours in zip(batch.rows, batch.lengths, expected, strict=True):
                at = torch.arange(n + STEPS)[None]
                mask = hf.additive_mask(at, at, case.window, torch.float64, chunk=case.chunk)
                theirs = hf.hf_call(module, rotary, row[: n + STEPS][None], at, mask)[0]
                error = (theirs - ours).abs().max().item()
                # (Llama 4's chunked layer rotates in float32: float32's rounding)
                bound = 1e-5 if family_of(case)[0] in hf.ROTATES_IN_FLOAT32 else 1e-10
                assert error < bound, f"{case}: the reference is {error:.3g} off transformers"
    dtype = getattr(torch, case.dtype)
    low = case.cast == "to" or case.dtype in ("float64", "float32")
    model = copy.deepcopy(model64).to(DEVICE, dtype if low else torch.float32)
    as_input = dtype if low else torch.float32
    if case.grad == "frozen":
        model.train()  # no dropout: training mode changes nothing here but the path checks
        frozen = model.W_k if case.module == "mha" else model.W_dkv
        frozen.weight.requires_grad_(False)
    if case.compile:  # compiled code is kept per function, MHA.forward: a fresh start per case
        torch._dynamo.reset()
    attend = torch.compile(model, fullgraph=True, backend="eager") if case.compile else model
    cache = make_cache(case, batch)
    held = cache.layers[0] if isinstance(cache, ModelCache) else cache

    def forward(x, mask, positions, phase):
        x, mask, positions = x.to(DEVICE, as_input), mask.to(DEVICE), positions.to(DEVICE)
        if case.cache == "static":  # the mask covers the buffer's slots; those not written are
            # masked by the cache itself
            mask = torch.nn.functional.pad(mask, (0, held.max_len - mask.size(-1)), value=True)
        context = contextlib.nullcontext() if low else torch.autocast(DEVICE.type, dtype=dtype)
        if case.grad == "frozen":
            grad = torch.enable_grad()
        elif case.grad == "inference_then_no_grad" and phase == "prefill":
            grad = torch.inference_mode()
        else:
            grad = torch.no_grad()
        with grad, context:
            return call(attend if phase == "decode" else model, case, x, mask, positions, held)

    x, mask, positions = batch.prompt()
    got = []  # (row, position, output)
    out = forward(x, mask, positions, "prefill")
    for b, n in enumerate(batch.lengths):
        got += [(b, i, out[b, batch.column(b, i)]) for i in range(n)]
    order = [0, 1]
    if case.cache == "reorder":  # the rows swapped: the cache follows, and so does the batch
        order = [1, 0]
        cache.reorder(torch.tensor(order, device=DEVICE))
        mask = mask[order]
        batch.rows, batch.lengths = (
            [batch.rows[i] for i in order],
            [batch.lengths[i] for i in order],
        )
    for s in range(STEPS):
        x, grown, at = batch.step(s, mask)
        if case.cache == "none":  # no cache: the whole sequence again, the new column last
            full_x = torch.cat([prefix_of(batch, s), x], dim=1)
            out = forward(full_x, grown, positions_of(grown), "decode")[:, -1:]
        else:
            if case.cache == "crop" and s == 1:  # a rejected draft step, then cropped away
                forward(torch.randn_like(x), grown, at, "decode")
                cache.crop(len(held) - 1)
            out = forward(x, grown, at, "decode")
        mask = grown
        for b, n in enumerate(batch.lengths):
            got.append((order[b], n + s, out[b, 0]))
    scale = max(e.abs().max().item() for e in expected)
    worst = max((o.double().cpu() - expected[b][i]).abs().max().item() / scale for b, i, o in got)
    assert worst < BOUND[case.dtype], f"{case}: {worst:.3g} off the float64 reference"
    if case.grad == "frozen":
        check_gradients(case, model, model64, Batch(inputs(), case.padding), got)


def prefix_of(batch: Batch, s: int):
    """For the uncached run: the padded prompt and the first ``s`` new positions of each row."""
    x, _, _ = batch.prompt()
    news = [batch.step(t, torch.ones(2, 1, 1, 1, dtype=torch.bool))[0] for t in range(s)]
    return torch.cat([x, *news], dim=1)


def make_cache(case: Case, batch: Batch):
    total = batch.width + STEPS + 1  # the crop's rejected step too
    cls = KVCache if case.module == "mha" else LatentCache
    if case.cache == "none":
        return None
    if case.cache == "kv" or case.cache == "reorder":
        return cls()
    if case.cache == "max_len":
        # a window's cache keeps window - 1: a short buffer takes the prompt, longer than it
        return cls(total if (case.window or case.chunk) is None else case.window or case.chunk)
    if case.cache == "crop":
        return cls(rollback=1) if case.module == "mha" else cls()
    if case.cache == "static":
        return KVCache(total, static=True)
    return ModelCache(1, max_len=total) if case.module == "mha" else cls(total)


def check_gradients(case, model, model64, batch, got):
    """The trainable weights' gradients of the summed real outputs equal the reference's."""
    sum(o.float().sum() for _, _, o in got).backward()
    reference_model = copy.deepcopy(model64).train()
    frozen = "W_k" if case.module == "mha" else "W_dkv"
    getattr(reference_model, frozen).weight.requires_grad_(False)
    sum(out.sum() for out in reference(reference_model, case, batch)).backward()
    theirs = dict(reference_model.named_parameters())
    assert getattr(model, frozen).weight.grad is None
    # Relative to the largest gradient: some are zero by construction (W_k's bias adds the same
    # q·b to every score of a query, which the softmax ignores)
    scale = max(p.grad.abs().max().item() for p in theirs.values() if p.grad is not None)
    bound = 20 * BOUND[case.dtype]
    if case.qk_norm and case.dtype == "float64":
        # The q/k norms compute in float32 (as transformers' do, whatever the input's dtype): the
        # batch's backward and the reference's, summed in another order, differ by float32's
        # rounding there (measured up to 1.4e-8)
        bound = NORM_GRADIENT_BOUND
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        error = (p.grad.double().cpu() - theirs[name].grad).abs().max().item() / scale
        assert error < bound, f"{case}: {name}'s gradient {error:.3g} off"


@pytest.mark.parametrize("case", CASES[:SAMPLE], ids=str)
def test_a_sample_of_the_combinations_equals_the_float64_reference(case):
    run(case)


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("MHA_MATRIX") != "all", reason="the whole matrix: MHA_MATRIX=all (make matrix)"
)
@pytest.mark.parametrize("case", CASES[SAMPLE:], ids=str)
def test_every_pair_of_features_equals_the_float64_reference(case):
    run(case)


def test_the_cases_cover_every_pair_of_values():
    covered = {
        ((a, getattr(c, a)), (b, getattr(c, b)))
        for c in CASES
        for a, b in itertools.combinations(DIMENSIONS, 2)
    }
    for a, b in itertools.combinations(DIMENSIONS, 2):
        for x, y in itertools.product(DIMENSIONS[a], DIMENSIONS[b]):
            if valid({a: x, b: y}):
                assert ((a, x), (b, y)) in covered, (a, x, b, y)
    assert all(valid({n: getattr(c, n) for n in DIMENSIONS}) for c in CASES)


def test_every_family_checks_the_reference_against_transformers_in_some_case():
    families = {family_of(c)[0] for c in CASES if family_of(c) is not None}
    assert families == {"gpt_oss", "olmo2", "qwen2", "qwen3"}, families
    assert any(family_of(c) is not None for c in CASES[:SAMPLE])
