"""Every shape comment in ``mha/annotated.py`` is true: read them, run ``forward``, compare.

A shape comment is a trailing ``# [batch_size, seq_len, ...]`` on an assignment line of
``MHA.forward``. The checker below parses them from source text (``ast`` for the statements,
``tokenize`` for the comments), runs ``forward`` under ``sys.settrace`` to record the real shape of
the variable each statement assigns, and compares the two with the dimension names replaced by
numbers. Sizes are all different (batch 2, seq 3, heads 4, head 5, hidden 20), so a swapped pair
of dimensions cannot pass by accident. The mutation tests feed it altered copies of the source and
show that it then fails: it is not a checker that passes whatever the comments say.
"""

from __future__ import annotations

import ast
import inspect
import io
import re
import sys
import tokenize
from dataclasses import dataclass, field

import pytest
import torch
from helpers import DESIGN_FILENAME, DESIGN_SOURCE, exec_module_source
from torch import Tensor

import mha.annotated

SHAPE_COMMENT = re.compile(r"#\s*\[([^\]]*)\]")

# (batch_size, seq_len, heads_num, head_size): every dimension different within a set.
SIZE_SETS = [(2, 3, 4, 5), (3, 5, 2, 7)]

# q, k, v; their three views; their three transposes; qk, attn, out (x3): one comment each.
EXPECTED_COMMENTS = 14


def dims_of(batch_size: int, seq_len: int, heads_num: int, head_size: int) -> dict[str, int]:
    return {
        "batch_size": batch_size,
        "seq_len": seq_len,
        "heads_num": heads_num,
        "head_size": head_size,
        "hidden_size": heads_num * head_size,
    }


@dataclass(frozen=True)
class Assignment:
    """One assignment statement of ``forward``, with its shape comment if it has one."""

    target: str
    first_line: int
    last_line: int
    comment: tuple[str, ...] | None


@dataclass
class Report:
    checked: int = 0
    mismatches: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # missing or misplaced comments

    @property
    def ok(self) -> bool:
        return self.checked > 0 and not self.mismatches and not self.problems


def shape_comments(source: str) -> dict[int, tuple[str, ...]]:
    """Line number -> dimension names, for every ``# [a, b, ...]`` comment in ``source``."""
    found = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and (match := SHAPE_COMMENT.match(tok.string)):
            found[tok.start[0]] = tuple(d.strip() for d in match.group(1).split(","))
    return found


def forward_of(source: str, class_name: str = "MHA") -> ast.FunctionDef:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    return item
    raise LookupError(f"no {class_name}.forward in source")


def assignments(source: str, class_name: str = "MHA") -> tuple[list[Assignment], list[str]]:
    """The assignments of ``forward`` with their comments, and comments on non-assignment lines."""
    forward = forward_of(source, class_name)
    comments = shape_comments(source)
    result, used = [], set()
    for node in ast.walk(forward):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if len(targets) != 1 or not isinstance(targets[0], ast.Name):
                raise NotImplementedError(f"line {node.lineno}: only `name = ...` is supported")
            comment = comments.get(node.end_lineno)
            used.add(node.end_lineno)
            result.append(Assignment(targets[0].id, node.lineno, node.end_lineno, comment))
    stray = [
        f"line {line}: shape comment {list(dims)} is not on an assignment in forward"
        for line, dims in comments.items()
        if forward.lineno <= line <= forward.end_lineno and line not in used
    ]
    return sorted(result, key=lambda a: a.first_line), stray


def record_shapes(
    cls: type, sizes: tuple[int, int, int, int]
) -> tuple[list[tuple[int, dict]], Exception | None]:
    """Run ``cls.forward``; return, for each executed line, the tensor shapes just after it.

    Also returns the exception ``forward`` raised, if any (the lines before it are kept).

    At each ``line`` or ``return`` event of the forward frame, the frame's locals reflect the line
    executed before; that line's number is paired with a snapshot of the tensor locals' shapes.
    """
    batch_size, seq_len, heads_num, head_size = sizes
    torch.manual_seed(0)
    model = cls(heads_num * head_size, heads_num)
    x = torch.randn(batch_size, seq_len, heads_num * head_size)
    code = cls.forward.__code__
    executed: list[tuple[int, dict]] = []
    previous_line: list[int | None] = [None]

    def local_trace(frame, event, arg):
        if event in ("line", "return"):
            if previous_line[0] is not None:
                shapes = {
                    n: tuple(v.shape) for n, v in frame.f_locals.items() if isinstance(v, Tensor)
                }
                executed.append((previous_line[0], shapes))
            previous_line[0] = frame.f_lineno if event == "line" else None
        elif event == "exception":
            previous_line[0] = None  # the line did not complete: its assignment never happened
        return local_trace

    def global_trace(frame, event, arg):
        return local_trace if frame.f_code is code else None

    old = sys.gettrace()
    sys.settrace(global_trace)
    try:
        model(x)
    except Exception as error:  # a crash is reported by the caller, with the lines that ran
        return executed, error
    finally:
        sys.settrace(old)
    assert executed, "the tracer saw no line of forward"
    return executed, None


def check_shape_comments(
    source: str,
    cls: type | None = None,
    sizes: tuple[int, int, int, int] = SIZE_SETS[0],
    filename: str = "<source>",
) -> Report:
    """Compare every shape comment of ``MHA.forward`` in ``source`` with a real run.

    ``cls`` is the class to run; by default ``source`` itself is executed to get ``MHA``, so a
    mutated copy of the code can be checked too. Passing the real class with a mutated source only
    changes the comments (line numbers must stay the same).
    """
    if cls is None:
        cls = exec_module_source(source, filename)["MHA"]
    names = dims_of(*sizes)
    found, stray = assignments(source)
    executed, error = record_shapes(cls, sizes)
    report = Report(problems=list(stray))
    if error is not None:
        report.problems.insert(0, f"forward raised {type(error).__name__}: {error}")
    for a in found:
        after = [shapes for line, shapes in executed if a.first_line <= line <= a.last_line]
        if not after:
            report.problems.append(f"line {a.first_line}: `{a.target} = ...` never ran")
            continue
        real = after[-1].get(a.target)
        if real is None:
            continue  # not a tensor: no shape to state
        if a.comment is None:
            report.problems.append(f"line {a.first_line}: tensor `{a.target}` has no shape comment")
            continue
        unknown = [d for d in a.comment if d not in names]
        if unknown:
            report.problems.append(f"line {a.last_line}: unknown dimension names {unknown}")
            continue
        report.checked += 1
        stated = tuple(names[d] for d in a.comment)
        if stated != real:
            report.mismatches.append(
                f"line {a.last_line}: `{a.target}` commented [{', '.join(a.comment)}] = "
                f"{list(stated)}, real shape {list(real)}"
            )
    return report


ANNOTATED_SOURCE = inspect.getsource(mha.annotated)


def mutate_line(source: str, contains: str, old: str, new: str) -> str:
    """Replace ``old`` by ``new`` on the first line containing ``contains`` (exactly once)."""
    lines = source.splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if contains in line)
    assert lines[index].count(old) == 1, lines[index]
    lines[index] = lines[index].replace(old, new)
    return "".join(lines)


# ---- The real file ------------------------------------------------------------------------------


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


# ---- Mutations: the checker must fail ---------------------------------------------------------

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


def _line_of(text: str) -> int:
    return next(i for i, line in enumerate(ANNOTATED_SOURCE.splitlines(), 1) if text in line)
