"""Every shape comment in ``mha/annotated.py``, ``mha/full.py``, ``mha/mla.py`` and ``mha/tiled.py``
is true: read them, run, compare.

A shape comment is a trailing ``# [batch_size, seq_len, ...]`` on an assignment line of a method of
the class ``MHA`` (``MLA`` in ``mla.py``). ``mha.trace`` reads them from the source text (``ast``
for the statements, ``tokenize`` for the comments) and runs ``forward`` under its tracer, which
records, in every frame of the class's methods (``forward`` and what it calls: ``_weights``,
``_mask``, ...), the real shape of the variable each statement assigns; this checker compares the
two with the dimension names replaced by numbers. A dimension is a name, a number, or their sums
and products with parentheses (``kv_heads * head_size``, ``heads_num * (nope_dims + rope_dims)``);
a leading ``...`` (``[..., q_len, k_len]``) states only the trailing dimensions, for a mask whose
leading ones are whatever the caller's mask has. Every tensor a method assigns must have a
comment.

Sizes are all different within a run (batch 2, seq 3, heads 4, head 5, hidden 20 for the annotated
class), so a swapped pair of dimensions cannot pass by accident. ``full.py`` runs in several
configurations (``RUNS``: self- and cross-attention, a prefilled cache, grouped-query attention,
both paths, ``need_weights``, masks with a fully masked row, ``is_causal``, today's options),
``mla.py`` in both query paths and both decoding modes (``MLA_RUNS``), ``tiled.py`` with and
without the causal mask (``TILED_RUNS``), so a comment that only
holds in one of them is caught, a comment that no configuration checks is a failure, and so is a
name that equals another name in every run that checks it (``lookalike_gaps``).

``check()`` runs all of it on the package's files; the functions below it take any source, so the
tests can feed altered copies and show that each fault is caught.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor

import mha.annotated
import mha.full
import mha.mla
import mha.tiled
from mha.rope import RotaryEmbedding
from mha.trace import Assignment, assignments, named_sizes, trace_locals
from mha_site.languages import ROOT

ELLIPSIS = "..."

SIZE_SETS = [(2, 3, 4, 5), (3, 5, 2, 7)]
"""(batch_size, seq_len, heads_num, head_size) of the annotated runs: all different in each."""

Executed = list[tuple[int, dict[str, tuple[int, ...]]]]


@dataclass
class Report:
    """One run's comparison: comments checked, mismatches, and missing or misplaced comments."""

    checked: int = 0
    mismatches: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # missing or misplaced comments
    # first_line of each assignment -> "checked", "not a tensor", "not run" in this run, or
    # "failed" (a tensor whose comment is missing or cannot be read: reported as a problem)
    status: dict[int, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.checked > 0 and not self.mismatches and not self.problems


def read_comments(source: str, class_name: str = "MHA") -> tuple[list[Assignment], list[str]]:
    """The assignments of the class's methods with their comments, and a message for each shape
    comment inside the methods that is on no assignment."""
    found, stray = assignments(source, class_name)
    return found, [
        f"line {line}: shape comment {list(dims)} is not on an assignment in {class_name}"
        for line, dims in stray.items()
    ]


def _dimension(dimension: str) -> ast.expr | None:
    """A dimension as an expression of names and whole numbers joined by ``*`` and ``+``, with
    parentheses (``heads_num * (nope_dims + rope_dims)``); ``None`` for anything else."""
    try:
        tree = ast.parse(dimension, mode="eval").body
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult | ast.Add):
            continue
        if isinstance(node, ast.Mult | ast.Add | ast.Name | ast.Load):
            continue
        if isinstance(node, ast.Constant) and type(node.value) is int:
            continue
        return None
    return tree


def evaluate(dimension: str, names: dict[str, int]) -> tuple[int | None, list[str]]:
    """The size a comment's dimension states (``kv_heads * head_size``), and unknown names."""
    tree = _dimension(dimension)
    if tree is None:
        return None, [dimension]
    unknown = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in names]
    if unknown:
        return None, unknown

    def value(node: ast.expr) -> int:
        if isinstance(node, ast.BinOp):
            left, right = value(node.left), value(node.right)
            return left * right if isinstance(node.op, ast.Mult) else left + right
        return names[node.id] if isinstance(node, ast.Name) else node.value

    return value(tree), []


def compare(
    found: list[Assignment],
    executed: Executed,
    names: dict[str, int],
    report: Report,
    *,
    report_not_run: bool = True,
) -> Report:
    """Compare each assignment's comment with the shapes ``executed`` recorded after it."""
    for a in found:
        after = [shapes for line, shapes in executed if a.first_line <= line <= a.last_line]
        if not after:
            report.status[a.first_line] = "not run"
            if report_not_run:
                report.problems.append(f"line {a.first_line}: `{a.target} = ...` never ran")
            continue
        tensors = {n: after[-1][n] for n in a.targets if n in after[-1]}
        if not tensors:
            report.status[a.first_line] = "not a tensor"
            continue  # not a tensor: no shape to state
        report.status[a.first_line] = "failed"  # until the comparison below is made
        if a.comment is None:
            report.problems.append(f"line {a.first_line}: tensor `{a.target}` has no shape comment")
            continue
        if len(a.targets) != 1:
            report.problems.append(
                f"line {a.last_line}: one shape comment for {len(a.targets)} names `{a.target}`"
            )
            continue
        real = tensors[a.targets[0]]
        trailing = a.comment[0] == ELLIPSIS
        dims = a.comment[1:] if trailing else a.comment
        evaluated = [evaluate(d, names) for d in dims]
        unknown = [u for _, us in evaluated for u in us]
        if unknown:
            report.problems.append(f"line {a.last_line}: unknown dimension names {unknown}")
            continue
        report.checked += 1
        report.status[a.first_line] = "checked"
        stated = tuple(v for v, _ in evaluated)
        compared = real[len(real) - len(stated) :] if trailing else real
        if compared != stated or len(real) < len(stated):
            shown = ([ELLIPSIS] if trailing else []) + [str(s) for s in stated]
            report.mismatches.append(
                f"line {a.last_line}: `{a.target}` commented [{', '.join(a.comment)}] = "
                f"[{', '.join(shown)}], real shape {list(real)}"
            )
    return report


# ---- The annotated file: one configuration, two size sets ---------------------------------------


def check_shape_comments(
    source: str, cls: type, sizes: tuple[int, int, int, int] = SIZE_SETS[0]
) -> Report:
    """Compare every shape comment of the annotated ``MHA`` in ``source`` with a run of ``cls``.

    ``cls`` is the class to run: the package's own, or the ``MHA`` of ``source`` executed (a
    mutated copy of the code). The real class with a mutated source only changes the comments
    (line numbers must stay the same).
    """
    batch_size, seq_len, heads_num, head_size = sizes
    found, stray = read_comments(source)
    torch.manual_seed(0)
    model = cls(heads_num * head_size, heads_num)
    x = torch.randn(batch_size, seq_len, heads_num * head_size)
    executed, error = trace_locals(cls, lambda: model(x))
    report = Report(problems=list(stray))
    if error is not None:
        report.problems.insert(0, f"forward raised {type(error).__name__}: {error}")
    if not executed and error is None:
        report.problems.append("the tracer saw no line of forward")
    return compare(found, executed, named_sizes(model, x), report)


# ---- The full file: one checker, many configurations --------------------------------------------


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
    qk_norm: bool = False
    rotary_dims: int | None = None
    positions: str | None = None
    window: int | None = None
    bias: bool | tuple[str, ...] = True
    norm_eps: float = 1e-6
    max_len: int | None = None  # the cache's max_len

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
        )

    def call(self, namespace: dict) -> Call:
        return inputs(namespace, self)

    @property
    def held(self) -> int:
        """The cached positions the call attends over (a window keeps ``window - 1``)."""
        return self.cached if self.window is None else min(self.cached, self.window - 1)

    def dims(self) -> dict[str, int]:
        src_len = self.q_len if self.src_len is None else self.src_len
        hidden_size = (
            self.heads_num * self.head_size if self.hidden_size is None else self.hidden_size
        )
        return {
            "batch_size": self.batch_size,
            "q_len": self.q_len,
            "src_len": src_len,
            "k_len": src_len + self.held,
            "heads_num": self.heads_num,
            "kv_heads": self.heads_num if self.kv_heads is None else self.kv_heads,
            "head_size": self.head_size,
            "hidden_size": hidden_size,
            "context_size": hidden_size if self.context_size is None else self.context_size,
            "rotary_dims": self.head_size if self.rotary_dims is None else self.rotary_dims,
            "held": self.held,
        }

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
        if self.window is not None and self.cached:
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
        "cross/today/math/qk_norm/scale/float-2d",
        **TODAY,
        src_len=7,
        qk_norm=True,
        scale=0.3,
        fast=False,
        mask="float-2d",
    ),
]

FULL_NAMES = tuple(RUNS[0].dims())
"""Every dimension name the full file's comments may use."""


def run_full(namespace: dict, run: Run | MlaRun) -> tuple[Executed, Exception | None]:
    """Build ``namespace[run.class_name]`` as ``run`` says and trace one call of it."""
    return trace_locals(namespace[run.class_name], run.call(namespace).run)


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
        cache = namespace["KVCache"](run.max_len)
        shape = (run.batch_size, dims["kv_heads"], run.cached, run.head_size)
        if run.window is None:
            cache.append(torch.randn(shape), torch.randn(shape))
        else:  # as a windowed call leaves it: the window - 1 latest held
            cache.append_windowed(torch.randn(shape), torch.randn(shape), run.window - 1)
            cache.keep_last(run.window - 1)
    # A mask covers every position, those a window's cache dropped too
    mask = mask_for(run.mask, {**dims, "k_len": dims["src_len"] + run.cached})
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


@dataclass
class FullReport:
    """The runs' reports, and the comments no run checked."""

    runs: dict[str, Report]
    never_ran: list[str]
    never_checked: list[str]
    stray: list[str]

    @property
    def mismatches(self) -> list[str]:
        return [f"[{name}] {m}" for name, r in self.runs.items() for m in r.mismatches]

    @property
    def problems(self) -> list[str]:
        return [f"[{name}] {p}" for name, r in self.runs.items() for p in r.problems]

    @property
    def failures(self) -> list[str]:
        return self.mismatches + self.problems + self.never_ran + self.never_checked + self.stray


def check_full(source: str, namespace: dict, runs: list[Run] | list[MlaRun] = RUNS) -> FullReport:
    """Check every shape comment of the runs' class's methods in ``source`` over ``runs``
    (``mha.full.MHA`` over ``RUNS``, ``mha.mla.MLA`` over ``MLA_RUNS``).

    ``namespace`` holds the classes to run: the package module's, or those of ``source``
    executed (a mutated copy).
    """
    found, stray = read_comments(source, runs[0].class_name)
    reports = {}
    for run in runs:
        executed, error = run_full(namespace, run)
        report = Report()
        if error is not None:
            report.problems.append(f"forward raised {type(error).__name__}: {error}")
        reports[run.name] = compare(found, executed, run.dims(), report, report_not_run=False)
    statuses = {a.first_line: {r.status[a.first_line] for r in reports.values()} for a in found}
    never_ran = [
        f"line {a.first_line}: `{a.target} = ...` never ran in any configuration"
        for a in found
        if statuses[a.first_line] == {"not run"}
    ]
    never_checked = [
        f"line {a.last_line}: the comment on `{a.target} = ...` was checked in no configuration"
        for a in found
        if a.comment is not None
        and statuses[a.first_line] <= {"not run", "not a tensor"}
        and statuses[a.first_line] != {"not run"}
    ]
    return FullReport(reports, never_ran, never_checked, stray)


def names_in(comment: tuple[str, ...]) -> set[str]:
    """The dimension names a comment uses (``kv_heads * head_size`` uses two)."""
    trees = (_dimension(d) for d in comment if d != ELLIPSIS)
    return {n.id for t in trees if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}


# Names equal by construction inside a block: `forward` refuses context= with rotary embeddings,
# so under `if self.rope is not None:` the keys come from x, and src_len is q_len; so they do in
# the block of a sliding window's long call, which is self-attention only.
SAME_IN_BLOCK = {
    "self.rope is not None": {frozenset({"q_len", "src_len"})},
    "context is None and self.window is not None and cache.overflows(k.size(2))": {
        frozenset({"q_len", "src_len"})
    },
}


def same_by_construction(source: str) -> dict[int, set[frozenset[str]]]:
    """Line -> the pairs of names equal by construction there (``SAME_IN_BLOCK``)."""
    same: dict[int, set[frozenset[str]]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and ast.unparse(node.test) in SAME_IN_BLOCK:
            for line in range(node.body[0].lineno, node.body[-1].end_lineno + 1):
                same.setdefault(line, set()).update(SAME_IN_BLOCK[ast.unparse(node.test)])
    return same


def lookalike_gaps(
    report: FullReport, found: list[Assignment], runs: list[Run], source: str = ""
) -> list[str]:
    """Each name of a comment that equals another name in every run that checked the comment.

    Such a comment could name the other one and still pass: ``src_len`` checked only in
    self-attention without a cache passes as ``q_len`` or ``k_len`` as well. A pair equal by
    construction where the comment is (``SAME_IN_BLOCK``, read from ``source``) is no gap.
    """
    dims = {r.name: r.dims() for r in runs}
    same = same_by_construction(source) if source else {}
    gaps = []
    for a in found:
        if a.comment is None:
            continue
        checked_in = [
            dims[name] for name, r in report.runs.items() if r.status[a.first_line] == "checked"
        ]
        if not checked_in:  # reported as never checked; "always" over no run says nothing
            continue
        for name in sorted(names_in(a.comment)):
            for other in runs[0].dims():
                if frozenset({name, other}) in same.get(a.last_line, set()):
                    continue
                if other != name and all(d[name] == d[other] for d in checked_in):
                    gaps.append(f"line {a.last_line}: `{a.target}`: {name} is always {other}")
    return gaps


# ---- The checker --------------------------------------------------------------------------------

_LINE = re.compile(r"^(?:\[(?P<run>[^\]]+)\] )?line (?P<line>\d+): (?P<what>.*)$", re.DOTALL)


def located(path: str, message: str) -> str:
    """``[run] line N: what`` as ``path:N: [run] what``; a message without a line as
    ``path: message``."""
    match = _LINE.match(message)
    if not match:
        return f"{path}: {message}"
    run = f"[{match['run']}] " if match["run"] else ""
    return f"{path}:{match['line']}: {run}{match['what']}"


def _path(module) -> str:
    return Path(module.__file__).resolve().relative_to(ROOT).as_posix()


def check() -> list[str]:
    """Every shape comment of ``mha/annotated.py`` (two size sets), ``mha/full.py`` (every
    configuration of ``RUNS``) and ``mha/mla.py`` (``MLA_RUNS``) against a real run; one line per
    problem, ``file:line: what``."""
    found = []
    annotated, path = inspect.getsource(mha.annotated), _path(mha.annotated)
    for sizes in SIZE_SETS:
        report = check_shape_comments(annotated, mha.annotated.MHA, sizes)
        found += [located(path, m) for m in report.problems + report.mismatches]
        if report.checked == 0:
            found.append(f"{path}: no shape comment was checked at sizes {sizes}")
    full, path = inspect.getsource(mha.full), _path(mha.full)
    report = check_full(full, vars(mha.full))
    found += [located(path, m) for m in report.failures]
    assigned, _ = assignments(full)
    found += [located(path, m) for m in lookalike_gaps(report, assigned, RUNS, full)]
    tiled, path = inspect.getsource(mha.tiled), _path(mha.tiled)
    report = check_full(tiled, vars(mha.tiled), TILED_RUNS)
    found += [located(path, m) for m in report.failures]
    assigned, _ = assignments(tiled, "TiledAttention")
    found += [located(path, m) for m in lookalike_gaps(report, assigned, TILED_RUNS, tiled)]
    mla, path = inspect.getsource(mha.mla), _path(mha.mla)
    report = check_full(mla, vars(mha.mla), MLA_RUNS)
    found += [located(path, m) for m in report.failures]
    assigned, _ = assignments(mla, "MLA")
    found += [located(path, m) for m in lookalike_gaps(report, assigned, MLA_RUNS, mla)]
    return list(dict.fromkeys(found))  # the two annotated runs may say the same thing twice
