"""The configurations the site runs ``mha.full.MHA``, ``mha.mla.MLA`` and ``mha.tiled`` in.

Each ``Run`` is one set of options and one call (sizes, mask, cache, positions); ``inputs`` builds
its module and arguments, from the package's classes or from those of a mutated copy of a file.
Two consumers read them: the shape sheet on the full version's page (``mha_site/shape_sheet.py``,
a build step) runs ``RUNS``' site configuration and shows every shape, and the shape-comment
checker (``mha_site/checkers/shape_comments.py``) runs every configuration and checks each
comment. They live here, below both, so that no build step imports a checker.

Examples:
    >>> RUNS[0].name, RUNS[0].dims()["head_size"]
    ('self/fast', 5)
    >>> inputs(vars(mha.full), RUNS[0]).x.shape  # [batch_size, q_len, hidden_size]
    torch.Size([2, 3, 20])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

import mha.full
from mha.rope import RotaryEmbedding


@dataclass(frozen=True)
class Run:
    """One configuration of ``mha.full.MHA`` and its call."""

    name: str
    batch_size: int
    q_len: int
    heads_num: int
    head_size: int
    kv_heads: int | None = None  # None: heads_num
    src_len: int | None = None  # cross-attention: the context's length; None: self-attention
    cached: int = 0  # positions already in the cache (0: no cache)
    context_cached: bool = False  # cross-attention whose cache holds the context's keys already
    context_size: int | None = None  # the context's width; None: hidden_size
    fast: bool = True
    need_weights: bool = False
    mask: str | None = None  # see `mask_for`
    is_causal: bool = False
    dropout: float = 0.0  # with dropout > 0 the run is in training mode
    # The options of today's models: hidden_size None is heads_num * head_size (else head_size
    # is passed explicitly); rotary_dims None is no rope; positions "batch" passes them
    # [batch_size, q_len]; a window drops the cache's oldest positions before the call.
    hidden_size: int | None = None
    scale: float | None = None
    qk_norm: bool | str = False
    rotary_dims: int | None = None
    positions: str | None = None
    window: int | None = None
    chunk: int | None = None  # Llama 4's chunked attention: the cache keeps the chunk in progress
    bias: bool | tuple[str, ...] = True
    norm_eps: float = 1e-6
    max_len: int | None = None  # the cache's max_len
    static: bool = False  # a static cache (max_len slots, all attended, masked): k_len is max_len
    softcap: float | None = None  # Gemma 2's cap of the scores (the written-out path runs)
    sinks: bool = False  # gpt-oss's logit per head in the softmax (the written-out path runs)
    gate: bool = False  # Qwen3-Next's sigmoid gate on each head's output (W_q computes it)
    temperature: tuple[float, float] | None = None  # Llama 4's query scale by position

    class_name: ClassVar[str] = "MHA"

    def options(self) -> mha.full.Options:
        """The options of ``mha.full.MHA`` this run builds it with (its sizes, ``dims()``)."""
        dims = self.dims()
        return mha.full.Options(
            dims["hidden_size"],
            self.heads_num,
            kv_heads=self.kv_heads,
            dropout=self.dropout,
            bias=self.bias,
            fast=self.fast,
            context_size=self.context_size,
            head_size=None if self.hidden_size is None else self.head_size,
            scale=self.scale,
            qk_norm=self.qk_norm,
            norm_eps=self.norm_eps,
            rope=None if self.rotary_dims is None else RotaryEmbedding(self.rotary_dims),
            window=self.window,
            chunk=self.chunk,
            softcap=self.softcap,
            sinks=self.sinks,
            gate=self.gate,
            temperature=self.temperature,
        )

    def call(self, namespace: dict) -> Call:
        return inputs(namespace, self)

    @property
    def held(self) -> int:
        """The cached positions the call attends over (a window keeps ``window - 1``; chunks the
        one in progress, or ``chunk - 1`` when counted by each row's positions)."""
        if self.static or (self.window is None and self.chunk is None):  # nothing dropped
            return self.cached
        if self.window is not None:
            return min(self.cached, self.window - 1)
        if self.positions == "batch":
            return min(self.cached, self.chunk - 1)
        return self.cached % self.chunk

    def dims(self) -> dict[str, int]:
        src_len = self.q_len if self.src_len is None else self.src_len
        hidden_size = (
            self.heads_num * self.head_size if self.hidden_size is None else self.hidden_size
        )
        return {
            "batch_size": self.batch_size,
            "q_len": self.q_len,
            "src_len": src_len,
            "k_len": self.max_len if self.static else src_len + self.held,
            "heads_num": self.heads_num,
            "kv_heads": self.heads_num if self.kv_heads is None else self.kv_heads,
            "head_size": self.head_size,
            "hidden_size": hidden_size,
            "context_size": hidden_size if self.context_size is None else self.context_size,
            "rotary_dims": self.head_size if self.rotary_dims is None else self.rotary_dims,
            "held": self.held,
        } | self.chunks()

    def chunks(self) -> dict[str, int]:
        """With chunks, their size and the whole chunks of the call's ``q_len`` positions."""
        if self.chunk is None:
            return {}
        whole = self.q_len // self.chunk
        return {"chunk": self.chunk} | ({"n_chunks": whole} if whole else {})

    def free_dims(self) -> dict[str, int]:
        """The sizes this run sets freely, and the products the comments use: all must differ.

        ``src_len`` is ``q_len`` in self-attention, ``k_len`` is ``src_len`` without a cache,
        and ``kv_heads`` is ``heads_num`` without grouped-query attention: other runs tell those
        apart.
        """
        dims = self.dims()
        free = {n: dims[n] for n in ("batch_size", "q_len", "heads_num", "head_size")}
        free["hidden_size"] = dims["hidden_size"]
        free["1"] = 1  # a literal dimension ([..., q_len, 1])
        if self.src_len is not None:
            free["src_len"] = dims["src_len"]
        if self.context_size is not None:
            free["context_size"] = dims["context_size"]
        if self.cached:
            free["k_len"] = dims["k_len"]
        if self.hidden_size is not None:
            free["heads_num * head_size"] = dims["heads_num"] * dims["head_size"]
        if self.rotary_dims is not None:
            free["rotary_dims"] = self.rotary_dims
        free.update(self.chunks())
        if (self.window or self.chunk) is not None and self.cached and not self.static:
            free["held"] = self.held
        if dims["kv_heads"] != dims["heads_num"]:
            free["kv_heads"] = dims["kv_heads"]
            free["kv_heads * head_size"] = dims["kv_heads"] * dims["head_size"]
        return free


def mask_for(kind: str | None, dims: dict[str, int]) -> Tensor | None:
    """The ``attn_mask`` of a run; each kind but ``None`` has a query that sees no key."""
    b, heads, q, k = dims["batch_size"], dims["heads_num"], dims["q_len"], dims["k_len"]
    if kind is None:
        return None
    if kind == "padding":  # [batch_size, 1, 1, k_len]; the last sequence is all padding
        lengths = torch.tensor([k] * (b - 1) + [0])
        return mha.full.padding_mask(lengths, k)
    if kind == "bool-4d":  # [batch_size, heads_num, q_len, k_len]
        mask = torch.rand(b, heads, q, k) < 0.5
        mask[:, :, :, -1] = True
        mask[0, 1, 2] = False
        return mask
    if kind == "bool-2d":  # [q_len, k_len]
        mask = torch.ones(q, k, dtype=torch.bool)
        mask[1] = False
        return mask
    if kind == "float-2d":  # [q_len, k_len], added to the scores
        mask = torch.randn(q, k)
        mask[0] = float("-inf")
        return mask
    raise ValueError(kind)


# Two size sets: the site's sizes (no grouped-query attention), and one with kv_heads 2, where
# batch_size moves to 6 so that it differs from kv_heads. src_len 7 for cross-attention; a cache of
# 4 before 3 new positions gives k_len 7.
SITE = dict(batch_size=2, q_len=3, heads_num=4, head_size=5)
GQA = dict(batch_size=6, q_len=3, heads_num=4, head_size=5, kv_heads=2)
# Today's models: a head_size that is not hidden_size / heads_num, 6 of its 9 dims rotated.
TODAY = dict(batch_size=5, q_len=3, heads_num=4, head_size=9, kv_heads=2, hidden_size=11)

RUNS = [
    Run("self/fast", **SITE),
    Run("self/math", **SITE, fast=False),
    Run("self/gqa/fast/causal", **GQA, is_causal=True),
    Run("self/gqa/fast/bool-2d", **GQA, mask="bool-2d"),
    Run("self/math/bool-2d/dropout", **SITE, fast=False, mask="bool-2d", dropout=0.5),
    Run("cross/fast/padding", **SITE, src_len=7, mask="padding"),
    Run("cross/gqa/math/weights/bool-4d", **GQA, src_len=7, need_weights=True, mask="bool-4d"),
    Run("cross/fast/float-2d", **SITE, src_len=7, mask="float-2d"),
    Run("cross/gqa/math/float-2d", **GQA, src_len=7, fast=False, mask="float-2d"),
    Run("cross/fast/causal", **SITE, src_len=7, is_causal=True),
    Run("cache/gqa/fast/causal", **GQA, cached=4, is_causal=True),
    Run(
        "cache/math/weights/float-2d/causal",
        **SITE,
        cached=4,
        need_weights=True,
        mask="float-2d",
        is_causal=True,
    ),
    Run("cache/gqa/fast/padding/causal", **GQA, cached=4, mask="padding", is_causal=True),
    Run("cache/gqa/math/padding", **GQA, cached=4, fast=False, mask="padding"),
    Run(
        "cross/math/context_size/padding",
        **SITE,
        src_len=7,
        context_size=9,
        fast=False,
        mask="padding",
    ),
    Run(
        "cross/gqa/fast/context_size/context-cached/causal",
        **GQA,
        src_len=7,
        context_size=9,
        context_cached=True,
        is_causal=True,
    ),
    Run(
        "today/fast/rope/qk_norm/scale/cache/causal",
        **TODAY,
        rotary_dims=6,
        qk_norm=True,
        scale=0.3,
        cached=4,
        is_causal=True,
        bias=("W_q", "W_k", "W_v"),
        norm_eps=1e-5,
    ),
    Run(
        "today/math/rope/positions/window/cache/qk_norm/padding/causal",
        **TODAY,
        rotary_dims=6,
        qk_norm=True,
        scale=0.3,
        fast=False,
        positions="batch",
        window=8,
        cached=8,
        mask="padding",
        is_causal=True,
        max_len=7,  # the 7 held and 3 new positions are more: only the kept ones are written
    ),
    Run(
        "today/fast/rope/window/static-cache/padding/causal",
        **TODAY,
        rotary_dims=6,
        window=3,
        cached=4,
        mask="padding",
        is_causal=True,
        max_len=10,  # the slots: 4 held, 3 written by the call, 3 free
        static=True,
    ),
    Run(
        "today/fast/softcap/gemma-norm/rope/window/cache/padding/causal",
        **TODAY,
        rotary_dims=6,
        qk_norm="gemma",
        softcap=2.0,  # fast, yet the scores are capped: the written-out path runs
        window=9,
        cached=7,
        mask="padding",
        is_causal=True,
    ),
    Run("cross/fast/softcap/float-2d", **SITE, src_len=7, softcap=2.0, mask="float-2d"),
    Run(
        "today/fast/sinks/rope/window/cache/padding/causal",
        **TODAY,
        rotary_dims=6,
        sinks=True,  # fast, yet the sinks join the softmax: the written-out path runs
        window=9,
        cached=7,
        mask="padding",
        is_causal=True,
    ),
    Run("cross/fast/sinks/bool-2d", **SITE, src_len=7, sinks=True, mask="bool-2d"),
    Run(
        "today/fast/projection-norm/rope/cache/causal",
        **TODAY,
        rotary_dims=6,
        qk_norm="projection",  # OLMo 2's: over the whole projection, before the split
        cached=7,
        is_causal=True,
    ),
    Run(
        "cross/gqa/math/projection-norm/float-2d",
        **GQA,
        src_len=7,
        qk_norm="projection",
        fast=False,
        mask="float-2d",
    ),
    Run(
        "today/fast/gate/qk_norm/rope/cache/causal",
        **TODAY,
        rotary_dims=6,
        gate=True,  # the gate multiplies the output after attention: the fused kernel runs
        qk_norm=True,
        cached=5,
        is_causal=True,
    ),
    Run("cross/math/gate/bool-2d", **SITE, src_len=7, gate=True, fast=False, mask="bool-2d"),
    Run(
        "today/fast/temperature/cache/padding/causal",
        **TODAY,
        temperature=(0.5, 2.0),  # Llama 4's NoPE layers: no rope, the queries scaled by position
        cached=5,
        mask="padding",
        is_causal=True,
    ),
    Run(
        "today/fast/temperature/rope/causal",
        **TODAY,
        rotary_dims=6,
        temperature=(0.5, 2.0),
        is_causal=True,
    ),
    Run(
        "today/math/temperature/static-cache/padding/causal",
        **TODAY,
        temperature=(0.5, 2.0),
        fast=False,
        cached=4,
        mask="padding",
        is_causal=True,
        max_len=10,
        static=True,
    ),
    Run(
        "today/fast/chunk/weightless-norm/rope/cache/padding/causal",
        **TODAY,
        rotary_dims=6,
        qk_norm="weightless",  # Llama 4's: no weight, after the rotation
        chunk=8,  # 15 cached, 7 of them held (chunk 1's); the call's 3 cross into chunk 2
        cached=15,
        mask="padding",
        is_causal=True,
    ),
    Run(
        "today/fast/chunk/blocks/causal",
        **{**TODAY, "q_len": 26},  # 8 whole chunks of 3, each its own causal call, and 2 left
        rotary_dims=6,
        chunk=3,
        is_causal=True,
    ),
    Run(
        "today/math/chunk/positions/cache/causal",
        **TODAY,
        rotary_dims=6,
        chunk=8,
        positions="batch",  # chunks counted by each row's positions: chunk - 1 held
        cached=12,
        fast=False,
        is_causal=True,
    ),
    Run(
        "today/fast/chunk/positions/static-cache/padding/causal",
        **TODAY,
        rotary_dims=6,
        chunk=7,
        positions="batch",
        cached=5,
        mask="padding",
        is_causal=True,
        max_len=10,
        static=True,
    ),
    Run(
        "cross/gqa/fast/weightless-norm/bool-2d",
        **GQA,
        src_len=7,
        qk_norm="weightless",
        mask="bool-2d",
    ),
    Run(
        "cross/today/math/qk_norm/scale/float-2d",
        **TODAY,
        src_len=7,
        qk_norm=True,
        scale=0.3,
        fast=False,
        mask="float-2d",
    ),
]


@dataclass
class Call:
    """A run's model and its arguments: ``model(x, context, **options)``."""

    model: torch.nn.Module
    x: Tensor
    context: Tensor | None
    options: dict

    def run(self):
        args = (self.x,) if self.context is None else (self.x, self.context)
        return self.model(*args, **self.options)


def inputs(namespace: dict, run: Run) -> Call:
    """``namespace['MHA']`` built as ``run`` says, and the arguments of its call."""
    dims = run.dims()
    torch.manual_seed(0)
    # The class of the namespace (a mutated copy of the file, maybe): built from the run's
    # options as keywords, not from_options, which would check them against its own Options
    model = namespace["MHA"](**vars(run.options())).train(run.dropout > 0)
    x = torch.randn(run.batch_size, run.q_len, dims["hidden_size"])
    context = None
    if run.src_len is not None:
        context = torch.randn(run.batch_size, run.src_len, dims["context_size"])
    cache = None
    if run.context_cached:  # a first call, without the tracer, puts the context's keys in it
        cache = namespace["KVCache"]()
        model(x, context, cache=cache)
    if run.cached:  # a prefill, without the tracer: [batch_size, kv_heads, cached, head_size]
        cache = namespace["KVCache"](run.max_len, static=run.static)
        shape = (run.batch_size, dims["kv_heads"], run.cached, run.head_size)
        if run.static:
            cache.append_static(torch.randn(shape), torch.randn(shape))
        elif run.window is None:
            cache.append(torch.randn(shape), torch.randn(shape))
            if run.chunk is not None:  # as a chunked call leaves it
                cache.keep_last(run.held)
        else:  # as a windowed call leaves it: the window - 1 latest held
            cache.append_windowed(torch.randn(shape), torch.randn(shape), run.window - 1)
            cache.keep_last(run.window - 1)
    # A mask covers every position, those a window's cache dropped too (a static cache's slots)
    seen = dims["k_len"] if run.static else dims["src_len"] + run.cached
    mask = mask_for(run.mask, {**dims, "k_len": seen})
    options = dict(
        attn_mask=mask, is_causal=run.is_causal, cache=cache, need_weights=run.need_weights
    )
    if run.positions == "batch":  # each row its own positions, after the cache's
        start = torch.arange(run.batch_size)[:, None]
        options["positions"] = start + torch.arange(run.cached, run.cached + run.q_len)
    return Call(model, x, context, options)


@dataclass(frozen=True)
class MlaRun:
    """One configuration of ``mha.mla.MLA`` and its call, after a prefill of ``cached``
    positions (made without the tracer)."""

    name: str
    q_rank: int | None  # None: one query projection W_q
    absorb: bool
    mask: str | None = None  # see `mask_for`
    is_causal: bool = False
    positions: str | None = None  # "batch": [batch_size, q_len], after the cache's
    batch_size: int = 2
    q_len: int = 3
    heads_num: int = 4
    nope_dims: int = 5
    rope_dims: int = 6
    v_dims: int = 7
    kv_rank: int = 8
    hidden_size: int = 16
    cached: int = 10
    class_name: ClassVar[str] = "MLA"

    def dims(self) -> dict[str, int]:
        names = ("batch_size", "q_len", "heads_num", "nope_dims", "rope_dims", "v_dims")
        dims = {n: getattr(self, n) for n in names}
        dims.update(kv_rank=self.kv_rank, hidden_size=self.hidden_size)
        dims.update(q_rank=self.q_rank or 9, k_len=self.q_len + self.cached)
        return dims

    def call(self, namespace: dict) -> Call:
        torch.manual_seed(0)
        model = namespace["MLA"](
            self.hidden_size,
            self.heads_num,
            q_lora_rank=self.q_rank,
            kv_lora_rank=self.kv_rank,
            qk_nope_head_dim=self.nope_dims,
            qk_rope_head_dim=self.rope_dims,
            v_head_dim=self.v_dims,
        )
        cache = namespace["LatentCache"]()
        model(torch.randn(self.batch_size, self.cached, self.hidden_size), cache=cache)
        options = dict(
            attn_mask=mask_for(self.mask, {**self.dims(), "heads_num": self.heads_num}),
            is_causal=self.is_causal,
            cache=cache,
            absorb=self.absorb,
        )
        if self.positions == "batch":
            start = torch.arange(self.batch_size)[:, None]
            options["positions"] = start + torch.arange(self.cached, self.cached + self.q_len)
        x = torch.randn(self.batch_size, self.q_len, self.hidden_size)
        return Call(model, x, None, options)


# Sizes all different (and from the sums and products the comments use); a cache of 10 positions
# before 3 new ones gives k_len 13. Both query paths, both modes, each kind of mask.
MLA_RUNS = [
    MlaRun("mla/bottleneck/expanded/causal", q_rank=9, absorb=False, is_causal=True),
    MlaRun(
        "mla/bottleneck/absorbed/padding/causal",
        q_rank=9,
        absorb=True,
        mask="padding",
        is_causal=True,
    ),
    MlaRun("mla/direct/expanded/float-2d", q_rank=None, absorb=False, mask="float-2d"),
    MlaRun(
        "mla/direct/absorbed/positions/bool-2d",
        q_rank=None,
        absorb=True,
        mask="bool-2d",
        positions="batch",
    ),
    MlaRun("mla/direct/absorbed/no-mask", q_rank=None, absorb=True),
]


@dataclass(frozen=True)
class TiledRun:
    """One call of ``mha.tiled.TiledAttention`` (its keys a whole number of blocks, so every
    block has ``block`` keys)."""

    name: str
    is_causal: bool
    class_name: ClassVar[str] = "TiledAttention"

    def dims(self) -> dict[str, int]:
        return dict(batch_size=2, heads_num=4, q_len=5, k_len=9, head_size=6, v_size=7, block=3)

    def call(self, namespace: dict) -> Call:
        d = self.dims()
        torch.manual_seed(0)
        q = torch.randn(d["batch_size"], d["heads_num"], d["q_len"], d["head_size"])
        k = torch.randn(d["batch_size"], d["heads_num"], d["k_len"], d["head_size"])
        v = torch.randn(d["batch_size"], d["heads_num"], d["k_len"], d["v_size"])
        model = namespace["TiledAttention"](d["block"])
        return Call(model, q, None, dict(k=k, v=v, is_causal=self.is_causal))


TILED_RUNS = [TiledRun("tiled/causal", True), TiledRun("tiled/plain", False)]


@dataclass(frozen=True)
class CacheRun:
    """One call of a ``mha.cache.KVCache`` method, from a state built before the tracer starts:
    ``append`` that concatenates (autograd sees the cache), ``append`` that first moves what a
    sliding window kept to the front of the buffer, and ``reorder``."""

    name: str
    method: str
    class_name: ClassVar[str] = "KVCache"

    def dims(self) -> dict[str, int]:
        # held 4 of 11 written (a window's keep_last(4) dropped 7: the offset), 6 new; a static
        # cache's 13 slots
        return dict(
            batch_size=2, kv_heads=3, head_size=5, held=4, new_len=6, capacity=11, offset=7,
            new_batch_size=8, max_len=13,
        )  # fmt: skip

    def call(self, namespace: dict) -> Call:
        d = self.dims()
        torch.manual_seed(0)

        def kv(length: int, grad: bool = False) -> Tensor:
            shape = (d["batch_size"], d["kv_heads"], length, d["head_size"])
            return torch.randn(shape, requires_grad=grad)

        if self.method.startswith("static"):  # the first write: the buffer allocated, then
            # written in place, or (queries that require grad) out of place
            cache = namespace["KVCache"](d["max_len"], static=True)
            grad = self.method == "static-grad"
            keys, values = kv(d["new_len"], grad=grad), kv(d["new_len"], grad=grad)
            return Call(cache.append_static, keys, values, dict(queries=keys))
        # Preallocated (max_len = capacity) but for "cat": the buffer keeps its length throughout
        cache = namespace["KVCache"](None if self.method == "cat" else d["capacity"])
        if self.method == "cat":  # 4 held, then 6 new whose queries require grad
            cache.append(kv(d["held"]), kv(d["held"]))
            keys, values = kv(d["new_len"], grad=True), kv(d["new_len"], grad=True)
            return Call(cache.append, keys, values, dict(queries=keys))
        cache.append(kv(d["capacity"]), kv(d["capacity"]))  # the buffer full: 11 positions
        cache.keep_last(d["held"])  # a window keeps the 4 latest: 7 dropped from the front
        if self.method == "move":  # 7 + 4 + 6 > 11: the 4 held move to the front first
            return Call(cache.append, kv(d["new_len"]), kv(d["new_len"]), {})
        index = torch.arange(d["new_batch_size"]) % d["batch_size"]  # [new_batch_size]
        return Call(cache.reorder, index, None, {})


CACHE_RUNS = [
    CacheRun("cache/cat", "cat"),
    CacheRun("cache/move", "move"),
    CacheRun("cache/reorder", "reorder"),
    CacheRun("cache/static", "static"),
    CacheRun("cache/static-grad", "static-grad"),
]
