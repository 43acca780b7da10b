"""Every shape comment in ``mha/annotated.py``, ``mha/full.py``, ``mha/cache.py``, ``mha/mla.py``
and ``mha/tiled.py`` is true: read them, run, compare.

A shape comment is a trailing ``# [batch_size, seq_len, ...]`` on an assignment line of a method of
the class ``MHA`` (``KVCache`` in ``cache.py``, ``MLA`` in ``mla.py``): to a local, or to an
attribute of ``self`` (a cache's buffer, ``self._keys``). ``mha.trace`` reads them from the source
text (``ast`` for the statements, ``tokenize`` for the comments) and runs ``forward`` under its
tracer, which records, in every frame of the class's methods (``forward`` and what it calls:
``_weights``, ``_mask``, ...), the real shape of the variable each statement assigns; this checker
compares the two with the dimension names replaced by numbers, by the grammar and the comparison
of ``mha.shapecheck.grammar`` (the engine of the checker readers run on their own code,
``python -m mha.shapecheck``). A dimension of the site's comments is a name, a number, or their
sums, differences and products with parentheses (``kv_heads * head_size``, ``heads_num *
(nope_dims + rope_dims)``; ``SITE_OPERATORS``); a leading ``...`` (``[..., q_len, k_len]``) states
only the trailing dimensions, for a mask whose leading ones are whatever the caller's mask has.
What this checker adds to the engine is the site's own demands: every tensor a method assigns must
have a comment, and every comment must hold in every configuration below.

Sizes are all different within a run (batch 2, seq 3, heads 4, head 5, hidden 20 for the annotated
class), so a swapped pair of dimensions cannot pass by accident. ``full.py`` runs in several
configurations (``RUNS``: self- and cross-attention, a prefilled cache, grouped-query attention,
both paths, ``need_weights``, masks with a fully masked row, ``is_causal``, today's options),
``cache.py``'s ``KVCache`` in the calls that write its buffers (``CACHE_RUNS``: concatenated,
moved to the front after a sliding window dropped positions, reordered; there a line no run
reaches fails only if it has a comment), ``mla.py`` in both query paths and both decoding modes
(``MLA_RUNS``), ``tiled.py`` with and without the causal mask (``TILED_RUNS``); the runs live in
``mha_site/runs.py``. So a comment that only
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

import torch

import mha.annotated
import mha.cache
import mha.full
import mha.mla
import mha.tiled
from mha.shapecheck import grammar
from mha.shapecheck.grammar import ELLIPSIS, names_in
from mha.trace import Assignment, assignments, named_sizes, trace_locals
from mha_site.languages import ROOT
from mha_site.runs import CACHE_RUNS, MLA_RUNS, RUNS, TILED_RUNS, MlaRun, Run

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


# The site's own comments use these operators only; mha.shapecheck's grammar allows // and / too.
SITE_OPERATORS = {op: grammar.OPERATORS[op] for op in (ast.Mult, ast.Add, ast.Sub)}


def evaluate(dimension: str, names: dict[str, int]) -> tuple[int | None, list[str]]:
    """The size a comment's dimension states (``kv_heads * head_size``), and unknown names."""
    return grammar.evaluate(dimension, names, SITE_OPERATORS)


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
        stated, unknown = grammar.stated(a.comment, names, SITE_OPERATORS)
        if unknown:
            report.problems.append(f"line {a.last_line}: unknown dimension names {unknown}")
            continue
        report.checked += 1
        report.status[a.first_line] = "checked"
        if not grammar.agrees(a.comment, stated, real):
            shown = ([ELLIPSIS] if grammar.trailing(a.comment) else []) + [str(s) for s in stated]
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


FULL_NAMES = tuple(RUNS[0].dims())
"""Every dimension name the full file's comments may use."""


def run_full(namespace: dict, run: Run | MlaRun) -> tuple[Executed, Exception | None]:
    """Build ``namespace[run.class_name]`` as ``run`` says and trace one call of it."""
    return trace_locals(namespace[run.class_name], run.call(namespace).run)


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
    source: str,
    namespace: dict,
    runs: list[Run] | list[MlaRun] = RUNS,
    *,
    commented_only: bool = False,
) -> FullReport:
    """Check every shape comment of the runs' class's methods in ``source`` over ``runs``
    (``mha.full.MHA`` over ``RUNS``, ``mha.mla.MLA`` over ``MLA_RUNS``).

    ``namespace`` holds the classes to run: the package module's, or those of ``source``
    executed (a mutated copy). ``commented_only``: a line that no run reaches is a failure only
    if it has a shape comment (a cache's ``__repr__`` need not run for its comments to be checked).
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
        if statuses[a.first_line] == {"not run"} and (a.comment is not None or not commented_only)
    ]
    never_checked = [
        f"line {a.last_line}: the comment on `{a.target} = ...` was checked in no configuration"
        for a in found
        if a.comment is not None
        and statuses[a.first_line] <= {"not run", "not a tensor"}
        and statuses[a.first_line] != {"not run"}
    ]
    return FullReport(reports, never_ran, never_checked, stray)


# Names equal by construction inside a block: `forward` refuses context= with rotary embeddings
# (and with a temperature), so under `if self.rope is not None:` the keys come from x, and
# src_len is q_len; so they do in the block of a sliding window's long call, which is
# self-attention only.
SAME_IN_BLOCK = {
    "self.rope is not None": {frozenset({"q_len", "src_len"})},
    "context is None and self._drops and cache.overflows(k.size(2))": {
        frozenset({"q_len", "src_len"})
    },
    "static": {frozenset({"q_len", "src_len"})},  # a static cache holds self-attention only
    # forward refuses context= with a temperature too: its queries' positions are self-attention's
    "self.temperature is not None": {frozenset({"q_len", "src_len"})},
    # and with chunks, which count self-attention's positions
    "self.chunk is not None": {frozenset({"q_len", "src_len"})},
    "self.chunk is not None and (not chunks_in_mask)": {frozenset({"q_len", "src_len"})},
    # each chunk its own call: only when this call's keys are its own positions
    "blocks": {frozenset({"q_len", "src_len"}), frozenset({"q_len", "k_len"})},
}


# The same, for every line of a method (by its name) that only such a block calls
SAME_IN_FUNCTION = {  # called with chunks only; the second when the keys are the queries' own
    "_chunks": {frozenset({"q_len", "src_len"})},
    "_attend_in_chunks": {frozenset({"q_len", "src_len"}), frozenset({"q_len", "k_len"})},
}


def same_by_construction(source: str) -> dict[int, set[frozenset[str]]]:
    """Line -> the pairs of names equal by construction there (``SAME_IN_BLOCK``,
    ``SAME_IN_FUNCTION``)."""
    same: dict[int, set[frozenset[str]]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and ast.unparse(node.test) in SAME_IN_BLOCK:
            pairs = SAME_IN_BLOCK[ast.unparse(node.test)]
        elif isinstance(node, ast.FunctionDef) and node.name in SAME_IN_FUNCTION:
            pairs = SAME_IN_FUNCTION[node.name]
        else:
            continue
        for line in range(node.body[0].lineno, node.body[-1].end_lineno + 1):
            same.setdefault(line, set()).update(pairs)
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
    cache, path = inspect.getsource(mha.cache), _path(mha.cache)
    report = check_full(cache, vars(mha.cache), CACHE_RUNS, commented_only=True)
    found += [located(path, m) for m in report.failures]
    assigned, _ = assignments(cache, "KVCache")
    found += [located(path, m) for m in lookalike_gaps(report, assigned, CACHE_RUNS, cache)]
    mla, path = inspect.getsource(mha.mla), _path(mha.mla)
    report = check_full(mla, vars(mha.mla), MLA_RUNS)
    found += [located(path, m) for m in report.failures]
    assigned, _ = assignments(mla, "MLA")
    found += [located(path, m) for m in lookalike_gaps(report, assigned, MLA_RUNS, mla)]
    return list(dict.fromkeys(found))  # the two annotated runs may say the same thing twice
