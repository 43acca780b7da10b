"""Every shape comment in ``mha/annotated.py`` and ``mha/full.py`` is true: read them, run, compare.

A shape comment is a trailing ``# [batch_size, seq_len, ...]`` on an assignment line of a method of
the class ``MHA``. The checker below parses them from source text (``ast`` for the statements,
``tokenize`` for the comments), runs ``forward`` under ``sys.settrace`` to record, in every frame of
the class's methods (``forward`` and what it calls: ``_weights``, ``_mask``, ...), the real shape of
the variable each statement assigns, and compares the two with the dimension names replaced by
numbers. A dimension is a name, a product of names (``kv_heads * head_size``) or a number; a leading
``...`` (``[..., q_len, k_len]``) states only the trailing dimensions, for a mask whose leading ones
are whatever the caller's mask has. Every tensor a method assigns must have a comment.

Sizes are all different within a run (batch 2, seq 3, heads 4, head 5, hidden 20 for the annotated
class), so a swapped pair of dimensions cannot pass by accident. ``full.py`` runs in several
configurations (self- and cross-attention, a prefilled cache, grouped-query attention, both paths,
``need_weights``, masks with a fully masked row, ``is_causal``), so a comment that only holds in one
of them is caught, and a comment that no configuration checks is a failure. The mutation tests
feed the checker altered copies of the source (or of the configurations) and show that it then
fails: it is not a checker that passes whatever the comments say.
"""

from __future__ import annotations

import ast
import inspect
import io
import re
import sys
import tokenize
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch
from helpers import DESIGN_FILENAME, DESIGN_SOURCE, design_sizes, exec_module_source
from torch import Tensor

import mha.annotated
import mha.full

SHAPE_COMMENT = re.compile(r"#\s*\[([^\]]*)\]")
DIMENSION = re.compile(r"\w+(?:\s*\*\s*\w+)*")
ELLIPSIS = "..."

# (batch_size, seq_len, heads_num, head_size): every dimension different within a set.
SIZE_SETS = [(2, 3, 4, 5), (3, 5, 2, 7)]

# q, k, v; their three views; their three transposes; qk, attn, out (x3): one comment each.
EXPECTED_COMMENTS = 14


@dataclass(frozen=True)
class Assignment:
    """One assignment statement of a method, with its shape comment if it has one."""

    targets: tuple[str, ...]
    first_line: int
    last_line: int
    comment: tuple[str, ...] | None

    @property
    def target(self) -> str:
        return ", ".join(self.targets)


@dataclass
class Report:
    checked: int = 0
    mismatches: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # missing or misplaced comments
    # first_line of each assignment -> "checked", "not a tensor", "not run" in this run, or
    # "failed" (a tensor whose comment is missing or cannot be read: reported as a problem)
    status: dict[int, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.checked > 0 and not self.mismatches and not self.problems


def shape_comments(source: str) -> dict[int, tuple[str, ...]]:
    """Line number -> dimensions, for every ``# [a, b, ...]`` comment in ``source``."""
    found = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and (match := SHAPE_COMMENT.match(tok.string)):
            found[tok.start[0]] = tuple(d.strip() for d in match.group(1).split(","))
    return found


def methods_of(source: str, class_name: str = "MHA") -> list[ast.FunctionDef]:
    """The methods of ``class_name`` that ``forward`` may run: all of them but ``__init__``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return [
                item
                for item in node.body
                if isinstance(item, ast.FunctionDef) and item.name != "__init__"
            ]
    raise LookupError(f"no class {class_name} in source")


def forward_of(source: str, class_name: str = "MHA") -> ast.FunctionDef:
    for method in methods_of(source, class_name):
        if method.name == "forward":
            return method
    raise LookupError(f"no {class_name}.forward in source")


def _names(target: ast.expr) -> tuple[str, ...] | None:
    """The local names a target binds (``q`` or ``q_len, k_len``); ``None`` for ``self.x``."""
    if isinstance(target, ast.Name):
        return (target.id,)
    if isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts):
        return tuple(e.id for e in target.elts)
    return None


def assignments(source: str, class_name: str = "MHA") -> tuple[list[Assignment], list[str]]:
    """The assignments of the class's methods with their comments, and comments elsewhere."""
    methods = methods_of(source, class_name)
    comments = shape_comments(source)
    result, used = [], set()
    for method in methods:
        for node in ast.walk(method):
            if not isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if len(targets) != 1:
                raise NotImplementedError(f"line {node.lineno}: only `name = ...` is supported")
            names = _names(targets[0])
            if names is None:
                continue  # self.x = ...: not a local, no shape to record
            used.add(node.end_lineno)
            comment = comments.get(node.end_lineno)
            result.append(Assignment(names, node.lineno, node.end_lineno, comment))
    stray = [
        f"line {line}: shape comment {list(dims)} is not on an assignment in {class_name}"
        for line, dims in comments.items()
        if any(m.lineno <= line <= m.end_lineno for m in methods) and line not in used
    ]
    return sorted(result, key=lambda a: a.first_line), stray


# ---- Running the class under a tracer ---------------------------------------------------------


def trace_calls(
    cls: type, call: Callable[[], object]
) -> tuple[list[tuple[int, dict]], Exception | None]:
    """Run ``call()``; for each line executed in a method of ``cls``, the tensor shapes after it.

    Also returns the exception ``call`` raised, if any (the lines before it are kept).

    At each ``line`` or ``return`` event of a frame of one of ``cls``'s methods, the frame's locals
    reflect the line it executed before; that line's number is paired with a snapshot of the tensor
    locals' shapes. Each frame keeps its own previous line, so ``forward`` calling ``_weights``
    pairs each of them with its own locals.
    """
    codes = {f.__code__ for f in vars(cls).values() if inspect.isfunction(f)}
    executed: list[tuple[int, dict]] = []

    def tracer_for_one_frame():
        previous_line: list[int | None] = [None]

        def local_trace(frame, event, arg):
            if event in ("line", "return"):
                if previous_line[0] is not None:
                    shapes = {
                        n: tuple(v.shape)
                        for n, v in frame.f_locals.items()
                        if isinstance(v, Tensor)
                    }
                    executed.append((previous_line[0], shapes))
                previous_line[0] = frame.f_lineno if event == "line" else None
            elif event == "exception":
                previous_line[0] = None  # the line did not complete: its assignment never happened
            return local_trace

        return local_trace

    def global_trace(frame, event, arg):
        return tracer_for_one_frame() if frame.f_code in codes else None

    old = sys.gettrace()
    sys.settrace(global_trace)
    try:
        call()
    except Exception as error:  # a crash is reported by the caller, with the lines that ran
        return executed, error
    finally:
        sys.settrace(old)
    return executed, None


def record_shapes(
    cls: type, sizes: tuple[int, int, int, int]
) -> tuple[list[tuple[int, dict]], Exception | None]:
    """Run the annotated ``cls.forward`` at ``sizes``, traced by ``trace_calls``."""
    batch_size, seq_len, heads_num, head_size = sizes
    torch.manual_seed(0)
    model = cls(heads_num * head_size, heads_num)
    x = torch.randn(batch_size, seq_len, heads_num * head_size)
    executed, error = trace_calls(cls, lambda: model(x))
    assert executed or error, "the tracer saw no line of forward"
    return executed, error


def evaluate(dimension: str, names: dict[str, int]) -> tuple[int | None, list[str]]:
    """The size a comment's dimension states (``kv_heads * head_size``), and unknown names."""
    if not DIMENSION.fullmatch(dimension):
        return None, [dimension]
    value, unknown = 1, []
    for factor in (f.strip() for f in dimension.split("*")):
        if factor.isdigit():
            value *= int(factor)
        elif factor in names:
            value *= names[factor]
        else:
            unknown.append(factor)
    return (None if unknown else value), unknown


def compare(
    found: list[Assignment],
    executed: list[tuple[int, dict]],
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


def check_shape_comments(
    source: str,
    cls: type | None = None,
    sizes: tuple[int, int, int, int] = SIZE_SETS[0],
    filename: str = "<source>",
) -> Report:
    """Compare every shape comment of the annotated ``MHA`` in ``source`` with a real run.

    ``cls`` is the class to run; by default ``source`` itself is executed to get ``MHA``, so a
    mutated copy of the code can be checked too. Passing the real class with a mutated source only
    changes the comments (line numbers must stay the same).
    """
    if cls is None:
        cls = exec_module_source(source, filename)["MHA"]
    found, stray = assignments(source)
    executed, error = record_shapes(cls, sizes)
    report = Report(problems=list(stray))
    if error is not None:
        report.problems.insert(0, f"forward raised {type(error).__name__}: {error}")
    return compare(found, executed, design_sizes(*sizes), report)


ANNOTATED_SOURCE = inspect.getsource(mha.annotated)


def mutate_line(source: str, contains: str, old: str, new: str) -> str:
    """Replace ``old`` by ``new`` on the first line containing ``contains`` (exactly once)."""
    lines = source.splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if contains in line)
    assert lines[index].count(old) == 1, lines[index]
    lines[index] = lines[index].replace(old, new)
    return "".join(lines)


# ---- The annotated file -------------------------------------------------------------------------


@pytest.mark.parametrize("sizes", SIZE_SETS, ids=lambda s: "b{}-s{}-h{}-d{}".format(*s))
def test_every_shape_comment_matches_the_real_shape(sizes):
    report = check_shape_comments(ANNOTATED_SOURCE, mha.annotated.MHA, sizes)
    assert report.mismatches == []
    assert report.problems == []
    assert report.checked == EXPECTED_COMMENTS


def test_every_tensor_assignment_in_forward_has_a_shape_comment():
    found, stray = assignments(ANNOTATED_SOURCE)
    assert [a.target for a in found if a.comment is None] == []
    assert stray == []
    assert len(found) == EXPECTED_COMMENTS


def test_view_comment_states_seq_len_before_heads_num():
    found, _ = assignments(ANNOTATED_SOURCE)
    views = [a for a in found if ".view(" in ANNOTATED_SOURCE.splitlines()[a.first_line - 1]]
    assert [a.target for a in views] == ["q", "k", "v", "out"]
    for a in views[:3]:
        assert a.comment == ("batch_size", "seq_len", "heads_num", "head_size")


def test_checker_runs_the_same_class_the_package_exports():
    # Executing the file's source gives the same shapes as importing it: the checker's default
    # path (exec) and the real module agree.
    report = check_shape_comments(ANNOTATED_SOURCE, None, SIZE_SETS[1], mha.annotated.__file__)
    assert report.ok, report
    assert report.checked == EXPECTED_COMMENTS


# ---- Mutations of the annotated file: the checker must fail -----------------------------------

VIEW_LINE = "q = q.view("
REAL_VIEW = "# [batch_size, seq_len, heads_num, head_size]"
DESIGN_VIEW = "# [batch_size, heads_num, seq_len, head_size]"


def test_design_posts_view_comment_is_reported_as_wrong():
    mutated = mutate_line(ANNOTATED_SOURCE, VIEW_LINE, REAL_VIEW, DESIGN_VIEW)
    report = check_shape_comments(mutated, mha.annotated.MHA)
    assert len(report.mismatches) == 1, report
    assert (
        "`q` commented [batch_size, heads_num, seq_len, head_size] = [2, 4, 3, 5]"
        in (report.mismatches[0])
    )
    assert "real shape [2, 3, 4, 5]" in report.mismatches[0]


def test_swapped_dimensions_in_the_scores_comment_are_reported():
    mutated = mutate_line(
        ANNOTATED_SOURCE,
        "attn = torch.softmax(",
        "# [batch_size, heads_num, seq_len, seq_len]",
        "# [heads_num, batch_size, seq_len, seq_len]",
    )
    report = check_shape_comments(mutated, mha.annotated.MHA)
    assert [m.split(":")[1].split(" commented")[0] for m in report.mismatches] == [" `attn`"]


def test_wrong_last_dimension_in_the_output_comment_is_reported():
    mutated = mutate_line(
        ANNOTATED_SOURCE,
        "out = self.W_o(out)",
        "# [batch_size, seq_len, hidden_size]",
        "# [batch_size, seq_len, head_size]",
    )
    report = check_shape_comments(mutated, mha.annotated.MHA)
    assert len(report.mismatches) == 1
    assert "real shape [2, 3, 20]" in report.mismatches[0]


def test_a_removed_shape_comment_is_reported_as_missing():
    mutated = mutate_line(
        ANNOTATED_SOURCE, "k = self.W_k(x)", "  # [batch_size, seq_len, hidden_size]", ""
    )
    report = check_shape_comments(mutated, mha.annotated.MHA)
    assert report.problems == [
        f"line {_line_of('k = self.W_k(x)')}: tensor `k` has no shape comment"
    ]
    assert report.checked == EXPECTED_COMMENTS - 1


def test_an_unknown_dimension_name_is_reported():
    mutated = mutate_line(ANNOTATED_SOURCE, "v = self.W_v(x)", "batch_size", "batch")
    report = check_shape_comments(mutated, mha.annotated.MHA)
    assert report.problems == [
        f"line {_line_of('v = self.W_v(x)')}: unknown dimension names ['batch']"
    ]


def test_the_full_versions_names_are_unknown_in_the_annotated_file():
    mutated = mutate_line(ANNOTATED_SOURCE, "q = self.W_q(x)", "seq_len", "q_len")
    report = check_shape_comments(mutated, mha.annotated.MHA)
    assert report.problems == [
        f"line {_line_of('q = self.W_q(x)')}: unknown dimension names ['q_len']"
    ]


def test_swapping_heads_num_and_head_size_in_the_code_is_reported():
    # Mutate the code, not the comments: split into [head_size, heads_num] instead of
    # [heads_num, head_size]. It still runs and still returns [batch_size, seq_len, hidden_size],
    # so only the intermediate shapes show the bug -- and the checker, executing the mutated
    # source itself, reports every one of them.
    mutated = ANNOTATED_SOURCE
    for name in "qkv":
        mutated = mutated.replace(
            f"{name}.size(1), self.heads_num, self.head_size)",
            f"{name}.size(1), self.head_size, self.heads_num)",
            1,
        )
    assert mutated.count("self.head_size, self.heads_num)") == 3
    report = check_shape_comments(mutated, None, filename="<mutated annotated.py>")
    assert report.problems == []
    wrong = [m.split("`")[1] for m in report.mismatches]
    assert wrong == ["q", "k", "v", "q", "k", "v", "qk", "attn", "out"], report.mismatches


def test_a_forward_that_crashes_is_reported_with_the_lines_that_never_ran():
    # Make the three head transposes no-ops: the scores get the wrong shape and the final
    # .view raises. The checker reports the crash and every assignment it never reached.
    mutated = ANNOTATED_SOURCE
    for name in "qkv":
        mutated = mutated.replace(
            f"{name} = {name}.transpose(1, 2)", f"{name} = {name}.transpose(1, 1)"
        )
    report = check_shape_comments(mutated, None, filename="<mutated annotated.py>")
    assert [m.split("`")[1] for m in report.mismatches] == ["q", "k", "v", "qk", "attn", "out"]
    assert report.problems[0].startswith("forward raised RuntimeError: shape '[2, 4, 20]'")
    assert [p.split("`")[1] for p in report.problems[1:]] == ["out = ...", "out = ..."]


def test_checker_finds_exactly_the_design_posts_three_wrong_view_comments():
    report = check_shape_comments(DESIGN_SOURCE, None, filename=DESIGN_FILENAME)
    assert report.problems == []
    assert report.checked == EXPECTED_COMMENTS
    assert [m.split("`")[1] for m in report.mismatches] == ["q", "k", "v"]
    assert all("[batch_size, heads_num, seq_len, head_size]" in m for m in report.mismatches)


def test_equal_sizes_would_hide_the_design_posts_wrong_comment():
    # Why the sizes must all differ: with seq_len == heads_num the wrong comment "passes".
    report = check_shape_comments(DESIGN_SOURCE, None, sizes=(2, 4, 4, 5), filename=DESIGN_FILENAME)
    assert report.mismatches == []


def _line_of(text: str, source: str = ANNOTATED_SOURCE) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


# ---- The full file: one checker, many configurations ------------------------------------------


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
    fast: bool = True
    need_weights: bool = False
    mask: str | None = None  # see `mask_for`
    is_causal: bool = False
    dropout: float = 0.0  # with dropout > 0 the run is in training mode

    def dims(self) -> dict[str, int]:
        src_len = self.q_len if self.src_len is None else self.src_len
        return {
            "batch_size": self.batch_size,
            "q_len": self.q_len,
            "src_len": src_len,
            "k_len": src_len + self.cached,
            "heads_num": self.heads_num,
            "kv_heads": self.heads_num if self.kv_heads is None else self.kv_heads,
            "head_size": self.head_size,
            "hidden_size": self.heads_num * self.head_size,
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
        if self.cached:
            free["k_len"] = dims["k_len"]
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
]


def run_full(namespace: dict, run: Run) -> tuple[list[tuple[int, dict]], Exception | None]:
    """Build ``namespace['MHA']`` as ``run`` says and trace one call of it."""
    dims = run.dims()
    torch.manual_seed(0)
    cls = namespace["MHA"]
    model = cls(
        dims["hidden_size"],
        run.heads_num,
        kv_heads=run.kv_heads,
        dropout=run.dropout,
        fast=run.fast,
    ).train(run.dropout > 0)
    x = torch.randn(run.batch_size, run.q_len, dims["hidden_size"])
    context = None if run.src_len is None else torch.randn(run.batch_size, run.src_len, x.size(2))
    cache = None
    if run.cached:  # a prefill, without the tracer: [batch_size, kv_heads, cached, head_size]
        cache = namespace["KVCache"]()
        shape = (run.batch_size, dims["kv_heads"], run.cached, run.head_size)
        cache.append(torch.randn(shape), torch.randn(shape))
    mask = mask_for(run.mask, dims)

    def call():
        return model(
            x,
            context,
            attn_mask=mask,
            is_causal=run.is_causal,
            cache=cache,
            need_weights=run.need_weights,
        )

    return trace_calls(cls, call)


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


def check_full(
    source: str, namespace: dict | None = None, runs: list[Run] = RUNS, filename: str = "<source>"
) -> FullReport:
    """Check every shape comment of ``mha.full.MHA``'s methods in ``source`` over ``runs``.

    ``namespace`` holds the ``MHA`` and ``KVCache`` to run; by default ``source`` is executed, so a
    mutated copy can be checked.
    """
    if namespace is None:
        namespace = exec_module_source(source, filename)
    found, stray = assignments(source)
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


FULL_SOURCE = inspect.getsource(mha.full)
FULL_NAMESPACE = vars(mha.full)


def _full_line(text: str, source: str = FULL_SOURCE) -> int:
    return _line_of(text, source)


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.name)
def test_sizes_differ_within_each_configuration(run):
    free = run.free_dims()
    values = list(free.values())
    assert len(set(values)) == len(values), free


def test_the_configurations_cover_what_the_class_can_do():
    # The cases the shape comments must hold in, each present at least once.
    def some(predicate):
        return any(predicate(r) for r in RUNS)

    assert some(lambda r: r.src_len is None and not r.cached)  # self-attention
    assert some(lambda r: r.src_len is not None and r.src_len != r.q_len)  # cross-attention
    assert some(lambda r: r.cached)  # a prefilled cache: k_len != src_len
    assert some(lambda r: r.kv_heads is not None and r.kv_heads < r.heads_num)  # GQA
    assert some(lambda r: r.fast and not r.need_weights) and some(lambda r: not r.fast)  # paths
    assert some(lambda r: r.need_weights)
    assert some(lambda r: r.is_causal) and some(lambda r: r.is_causal and r.mask)
    assert {r.mask for r in RUNS} >= {"padding", "bool-4d", "bool-2d", "float-2d"}
    assert some(lambda r: r.dropout > 0)


def test_every_mask_has_a_query_that_sees_no_key():
    dims = RUNS[0].dims() | {"k_len": 7}
    for kind in ("padding", "bool-4d", "bool-2d", "float-2d"):
        mask = mask_for(kind, dims)
        allowed = mask if mask.dtype == torch.bool else mask != float("-inf")
        assert not allowed.any(dim=-1).all(), kind


def test_every_shape_comment_in_full_holds_in_every_configuration():
    report = check_full(FULL_SOURCE, FULL_NAMESPACE)
    assert report.mismatches == []
    assert report.problems == []


def test_every_assignment_in_full_runs_and_every_comment_is_checked_somewhere():
    report = check_full(FULL_SOURCE, FULL_NAMESPACE)
    assert report.never_ran == []
    assert report.never_checked == []
    assert report.stray == []


FULL_NAMES = tuple(RUNS[0].dims())


def names_in(comment: tuple[str, ...]) -> set[str]:
    """The dimension names a comment uses (``kv_heads * head_size`` uses two)."""
    factors = (f.strip() for d in comment if d != ELLIPSIS for f in d.split("*"))
    return {f for f in factors if not f.isdigit()}


def lookalike_gaps(report: FullReport, found: list[Assignment], runs: list[Run]) -> list[str]:
    """Each name of a comment that equals another name in every run that checked the comment.

    Such a comment could name the other one and still pass: ``src_len`` checked only in
    self-attention without a cache passes as ``q_len`` or ``k_len`` as well.
    """
    dims = {r.name: r.dims() for r in runs}
    gaps = []
    for a in found:
        if a.comment is None:
            continue
        checked_in = [
            dims[name] for name, r in report.runs.items() if r.status[a.first_line] == "checked"
        ]
        for name in sorted(names_in(a.comment)):
            for other in FULL_NAMES:
                if other != name and all(d[name] == d[other] for d in checked_in):
                    gaps.append(f"line {a.last_line}: `{a.target}`: {name} is always {other}")
    return gaps


def test_every_name_in_a_comment_is_told_apart_from_every_other_name_somewhere():
    # Self-attention has src_len == q_len, no cache src_len == k_len, no GQA kv_heads ==
    # heads_num: each comment must also be checked in a run where the names it uses differ.
    report = check_full(FULL_SOURCE, FULL_NAMESPACE)
    found, _ = assignments(FULL_SOURCE)
    assert lookalike_gaps(report, found, RUNS) == []


def test_the_full_checker_traces_the_methods_forward_calls():
    report = check_full(FULL_SOURCE, FULL_NAMESPACE)
    found, _ = assignments(FULL_SOURCE)
    checked = {
        a.target
        for a in found
        if any(r.status.get(a.first_line) == "checked" for r in report.runs.values())
    }
    assert {"qk", "attn", "allowed", "keeps"} <= checked  # assigned in _weights only
    assert {"source", "q", "k", "v", "mask", "weights", "out"} <= checked  # forward
    assert len(found) > 20, len(found)


def test_checker_runs_the_same_full_class_the_package_exports():
    # Executing full.py's source gives the same report as the imported module.
    ran = check_full(FULL_SOURCE, None, filename=mha.full.__file__)
    imported = check_full(FULL_SOURCE, FULL_NAMESPACE)
    assert ran.failures == imported.failures
    assert {n: r.checked for n, r in ran.runs.items()} == {
        n: r.checked for n, r in imported.runs.items()
    }


# ---- Mutations of the full file: the checker must fail ----------------------------------------


def runs_reporting(messages: list[str], line: int) -> list[str]:
    """The runs (sorted) whose ``[run] line N: ...`` messages are about ``line``."""
    return sorted(m[1:].split("]")[0] for m in messages if f"] line {line}:" in m)


def runs_where(predicate: Callable[[Run], bool]) -> list[str]:
    return sorted(r.name for r in RUNS if predicate(r))


def differ(run: Run, a: str, b: str) -> bool:
    dims = run.dims()
    return dims[a] != dims[b]


def is_math(run: Run) -> bool:
    return not run.fast or run.need_weights


def test_full_swapped_q_len_and_k_len_in_the_scores_comment_is_reported_where_they_differ():
    text = "qk = torch.matmul(q.to(dtype)"
    mutated = mutate_line(
        FULL_SOURCE,
        text,
        "# [batch_size, heads_num, q_len, k_len]",
        "# [batch_size, heads_num, k_len, q_len]",
    )
    report = check_full(mutated, FULL_NAMESPACE)
    line = _full_line(text)
    # Only the written-out path computes qk; where q_len == k_len the swap passes.
    expected = runs_where(lambda r: is_math(r) and differ(r, "q_len", "k_len"))
    assert len(expected) >= 3, expected
    assert runs_reporting(report.mismatches, line) == expected
    assert (
        f"[cross/gqa/math/weights/bool-4d] line {line}: `qk` commented "
        "[batch_size, heads_num, k_len, q_len] = [6, 4, 7, 3], real shape [6, 4, 3, 7]"
    ) in report.mismatches


def test_full_heads_num_for_kv_heads_is_reported_under_grouped_query_attention_only():
    text = "k = k.view("
    mutated = mutate_line(
        FULL_SOURCE,
        text,
        "# [batch_size, kv_heads, src_len, head_size]",
        "# [batch_size, heads_num, src_len, head_size]",
    )
    report = check_full(mutated, FULL_NAMESPACE)
    expected = runs_where(lambda r: differ(r, "kv_heads", "heads_num"))
    assert runs_reporting(report.mismatches, _full_line(text)) == expected
    assert expected == runs_where(lambda r: r.kv_heads is not None)


def test_full_wrong_product_in_a_projection_comment_is_reported():
    text = "v = self.W_v(source)"
    mutated = mutate_line(FULL_SOURCE, text, "kv_heads * head_size", "heads_num * head_size")
    report = check_full(mutated, FULL_NAMESPACE)
    line = _full_line(text)
    assert runs_reporting(report.mismatches, line) == runs_where(lambda r: r.kv_heads is not None)
    assert (
        f"[self/gqa/fast/causal] line {line}: `v` commented "
        "[batch_size, src_len, heads_num * head_size] = [6, 3, 20], real shape [6, 3, 10]"
    ) in report.mismatches


def test_full_src_len_for_k_len_is_reported_only_in_the_configurations_with_a_cache():
    # A comment that holds in most configurations: without a cache, src_len == k_len.
    for text, kind in (
        ("qk = qk.masked_fill(~mask", bool),
        ("qk = qk + mask", float),
    ):
        mutated = mutate_line(
            FULL_SOURCE,
            text,
            "# [batch_size, heads_num, q_len, k_len]",
            "# [batch_size, heads_num, q_len, src_len]",
        )
        report = check_full(mutated, FULL_NAMESPACE)
        masks = ("padding", "bool-4d", "bool-2d") if kind is bool else ("float-2d",)
        expected = runs_where(lambda r, masks=masks: is_math(r) and r.cached and r.mask in masks)
        assert len(expected) == 1, expected
        assert runs_reporting(report.mismatches, _full_line(text)) == expected


def test_full_trailing_dimensions_of_a_mask_comment_are_checked():
    # A mask keeps the caller's leading dimensions: its comment states only the trailing one.
    text = 'allowed = mask != float("-inf")'
    mutated = mutate_line(FULL_SOURCE, text, "[..., k_len]", "[..., q_len]")
    report = check_full(mutated, FULL_NAMESPACE)
    line = _full_line(text)
    expected = runs_where(lambda r: is_math(r) and r.mask == "float-2d")
    assert len(expected) == 2, expected
    assert runs_reporting(report.mismatches, line) == expected
    assert all(
        "`allowed` commented [..., q_len] = [..., 3], real shape [" in m
        for m in report.mismatches
        if f"] line {line}:" in m
    )


def test_the_fast_path_passes_a_padding_mask_unexpanded():
    # The comment [..., k_len] holds for the padding mask's [batch_size, 1, 1, k_len]; a comment
    # stating the expanded [..., q_len, k_len] is reported where the fast path meets that mask.
    text = "mask = self._mask(attn_mask, is_causal, q, k)  # [..., k_len]"
    fast_line = [i for i, line in enumerate(FULL_SOURCE.splitlines(), 1) if text in line][
        -1
    ]  # the second one: _attend_fast
    lines = FULL_SOURCE.splitlines(keepends=True)
    lines[fast_line - 1] = lines[fast_line - 1].replace("[..., k_len]", "[..., q_len, k_len]")
    report = check_full("".join(lines), FULL_NAMESPACE)
    expected = runs_where(lambda r: not is_math(r) and r.mask == "padding" and not r.is_causal)
    assert expected == ["cross/fast/padding"], expected
    assert runs_reporting(report.mismatches, fast_line) == expected


def test_full_removed_comment_is_reported_as_missing():
    text = "attn = torch.softmax(qk"
    line = _full_line(text)
    mutated = mutate_line(FULL_SOURCE, text, "  # [batch_size, heads_num, q_len, k_len]", "")
    report = check_full(mutated, FULL_NAMESPACE)
    assert [p for p in report.problems if f"] line {line}:" in p] == [
        f"[{name}] line {line}: tensor `attn` has no shape comment"
        for name in (r.name for r in RUNS if is_math(r))
    ]


def test_full_comment_in_a_branch_no_configuration_runs_is_reported():
    # Insert a commented assignment that never executes: the checker must not let it pass.
    mutated = FULL_SOURCE.replace(
        "            weights = None\n",
        "            weights = None\n"
        "            if weights is not None:\n"
        "                weights = weights.float()  # [batch_size, heads_num, q_len, k_len]\n",
        1,
    )
    assert mutated != FULL_SOURCE
    report = check_full(mutated, None, filename="<mutated full.py>")
    line = _full_line("weights = weights.float()", mutated)
    assert report.never_ran == [f"line {line}: `weights = ...` never ran in any configuration"]


def test_full_comment_no_configuration_checks_is_reported():
    # The same file with fewer configurations: drop every run of the written-out path, and the
    # comments of _weights are no longer checked anywhere.
    fast_only = [r for r in RUNS if not is_math(r)]
    report = check_full(FULL_SOURCE, FULL_NAMESPACE, runs=fast_only)
    never = {m.split("`")[1] for m in report.never_ran}
    assert {"qk = ...", "attn = ..."} <= never, report.never_ran


def test_full_comment_on_a_value_that_is_never_a_tensor_is_reported():
    text = "groups = self.heads_num // self.kv_heads"
    mutated = mutate_line(FULL_SOURCE, text, "self.kv_heads\n", "self.kv_heads  # [heads_num]\n")
    report = check_full(mutated, FULL_NAMESPACE)
    assert report.never_checked == [
        f"line {_full_line(text)}: the comment on `groups = ...` was checked in no configuration"
    ]


def test_full_sizes_that_coincide_would_hide_a_wrong_comment():
    # Why kv_heads must differ from heads_num somewhere: with the site's sizes only, the wrong
    # kv_heads comment passes, and the lookalike check says why.
    text = "k = k.view("
    mutated = mutate_line(
        FULL_SOURCE,
        text,
        "# [batch_size, kv_heads, src_len, head_size]",
        "# [batch_size, heads_num, src_len, head_size]",
    )
    site_only = [r for r in RUNS if r.kv_heads is None]
    report = check_full(mutated, FULL_NAMESPACE, runs=site_only)
    line = _full_line(text)
    assert runs_reporting(report.mismatches, line) == []
    found, _ = assignments(mutated)
    assert f"line {line}: `k`: heads_num is always kv_heads" in lookalike_gaps(
        report, found, site_only
    )
