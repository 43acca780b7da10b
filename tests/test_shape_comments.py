"""Every shape comment in ``mha/annotated.py`` and ``mha/full.py`` is true, and the checker that
says so catches a wrong one.

The checker is ``mha_site.checkers.shape_comments`` (run by ``make check``), built on
``mha.trace``: it reads the comments, runs ``forward`` under the tracer and compares. Here it runs
on the package's files (every comment holds, in every configuration of ``full.py``), and on altered
copies of the source or of the configurations, to show that it then fails: it is not a checker
that passes whatever the comments say.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest
import torch
from support import DESIGN_FILENAME, DESIGN_SOURCE, exec_module_source

import mha.annotated
import mha.full
import mha.mla
from mha_site.checkers import shape_comments
from mha_site.checkers.shape_comments import (
    SIZE_SETS,
    check_full,
    check_shape_comments,
    evaluate,
    lookalike_gaps,
    read_comments,
)
from mha_site.runs import MLA_RUNS, RUNS, Run, mask_for

# q, k, v; their three views; their three transposes; qk, attn, out (x3): one comment each.
EXPECTED_COMMENTS = 14


def executed(source: str, filename: str) -> dict:
    """The namespace of ``source`` run as a module: the checker runs that copy's classes."""
    return exec_module_source(source, filename)


# The design post's class, executed from its source text (the comments the checker reads).
DESIGN = executed(DESIGN_SOURCE, DESIGN_FILENAME)["MHA"]


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
    found, stray = read_comments(ANNOTATED_SOURCE)
    assert [a.target for a in found if a.comment is None] == []
    assert stray == []
    assert len(found) == EXPECTED_COMMENTS


def test_view_comment_states_seq_len_before_heads_num():
    found, _ = read_comments(ANNOTATED_SOURCE)
    views = [a for a in found if ".view(" in ANNOTATED_SOURCE.splitlines()[a.first_line - 1]]
    assert [a.target for a in views] == ["q", "k", "v", "out"]
    for a in views[:3]:
        assert a.comment == ("batch_size", "seq_len", "heads_num", "head_size")


def test_checker_runs_the_same_class_the_package_exports():
    # Executing the file's source gives the same shapes as importing it: the checker's default
    # path (exec) and the real module agree.
    report = check_shape_comments(
        ANNOTATED_SOURCE, executed(ANNOTATED_SOURCE, mha.annotated.__file__)["MHA"], SIZE_SETS[1]
    )
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
    report = check_shape_comments(mutated, executed(mutated, "<mutated annotated.py>")["MHA"])
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
    report = check_shape_comments(mutated, executed(mutated, "<mutated annotated.py>")["MHA"])
    assert [m.split("`")[1] for m in report.mismatches] == ["q", "k", "v", "qk", "attn", "out"]
    assert report.problems[0].startswith("forward raised RuntimeError: shape '[2, 4, 20]'")
    assert [p.split("`")[1] for p in report.problems[1:]] == ["out = ...", "out = ..."]


def test_checker_finds_exactly_the_design_posts_three_wrong_view_comments():
    report = check_shape_comments(DESIGN_SOURCE, DESIGN)
    assert report.problems == []
    assert report.checked == EXPECTED_COMMENTS
    assert [m.split("`")[1] for m in report.mismatches] == ["q", "k", "v"]
    assert all("[batch_size, heads_num, seq_len, head_size]" in m for m in report.mismatches)


def test_equal_sizes_would_hide_the_design_posts_wrong_comment():
    # Why the sizes must all differ: with seq_len == heads_num the wrong comment "passes".
    report = check_shape_comments(DESIGN_SOURCE, DESIGN, sizes=(2, 4, 4, 5))
    assert report.mismatches == []


def _line_of(text: str, source: str = ANNOTATED_SOURCE) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


# ---- The full file: one checker, many configurations ------------------------------------------


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


def test_every_name_in_a_comment_is_told_apart_from_every_other_name_somewhere():
    # Self-attention has src_len == q_len, no cache src_len == k_len, no GQA kv_heads ==
    # heads_num: each comment must also be checked in a run where the names it uses differ.
    report = check_full(FULL_SOURCE, FULL_NAMESPACE)
    found, _ = read_comments(FULL_SOURCE)
    assert lookalike_gaps(report, found, RUNS, FULL_SOURCE) == []


def test_the_full_checker_traces_the_methods_forward_calls():
    report = check_full(FULL_SOURCE, FULL_NAMESPACE)
    found, _ = read_comments(FULL_SOURCE)
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
    ran = check_full(FULL_SOURCE, executed(FULL_SOURCE, mha.full.__file__))
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
    # a soft-cap and sinks are written out whatever fast says: the fused kernels take neither
    return not run.fast or run.need_weights or run.softcap is not None or run.sinks


def test_full_swapped_q_len_and_k_len_in_the_scores_comment_is_reported_where_they_differ():
    text = "qk = torch.matmul(q.to(dtype), k.transpose(-2, -1)) / math.sqrt"
    mutated = mutate_line(
        FULL_SOURCE,
        text,
        "# [batch_size, heads_num, q_len, k_len]",
        "# [batch_size, heads_num, k_len, q_len]",
    )
    report = check_full(mutated, FULL_NAMESPACE)
    line = _full_line(text)
    # Only the written-out path computes qk (this line without a scale given); where
    # q_len == k_len the swap passes.
    expected = runs_where(lambda r: is_math(r) and r.scale is None and differ(r, "q_len", "k_len"))
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
    # The keys are projected in every run but one whose cache holds the context's keys already.
    expected = runs_where(lambda r: differ(r, "kv_heads", "heads_num") and not r.context_cached)
    assert runs_reporting(report.mismatches, _full_line(text)) == expected
    assert expected == runs_where(lambda r: r.kv_heads is not None and not r.context_cached)


def test_full_wrong_product_in_a_projection_comment_is_reported():
    text = "v = self.W_v(source)"
    mutated = mutate_line(FULL_SOURCE, text, "kv_heads * head_size", "heads_num * head_size")
    report = check_full(mutated, FULL_NAMESPACE)
    line = _full_line(text)
    expected = runs_where(lambda r: r.kv_heads is not None and not r.context_cached)
    assert runs_reporting(report.mismatches, line) == expected
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
        # (chunks are a boolean mask of their own)
        chunks = kind is bool

        def masked(r, masks=masks, chunks=chunks):
            return r.mask in masks or (chunks and r.chunk is not None)

        expected = runs_where(lambda r: is_math(r) and r.cached and masked(r))
        assert expected, expected
        assert runs_reporting(report.mismatches, _full_line(text)) == expected


def test_full_trailing_dimensions_of_a_mask_comment_are_checked():
    # A mask keeps the caller's leading dimensions: its comment states only the trailing one.
    text = 'allowed = mask != float("-inf")'
    mutated = mutate_line(FULL_SOURCE, text, "[..., k_len]", "[..., q_len]")
    report = check_full(mutated, FULL_NAMESPACE)
    line = _full_line(text)
    expected = runs_where(lambda r: is_math(r) and r.mask == "float-2d")
    assert len(expected) >= 2, expected
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
    text = "attn = torch.softmax(qk, dim=-1).to(q.dtype)"  # without sinks (they have their own)
    line = _full_line(text)
    mutated = mutate_line(FULL_SOURCE, text, "  # [batch_size, heads_num, q_len, k_len]", "")
    report = check_full(mutated, FULL_NAMESPACE)
    assert [p for p in report.problems if f"] line {line}:" in p] == [
        f"[{name}] line {line}: tensor `attn` has no shape comment"
        for name in (r.name for r in RUNS if is_math(r) and not r.sinks)
    ]


def test_full_comment_in_a_branch_no_configuration_runs_is_reported():
    # Insert a commented assignment that never executes: the checker must not let it pass. The
    # planted line matches a whole line (its indentation included), not the inside of a deeper
    # one, and the mutated file still runs every configuration without an error.
    lines = FULL_SOURCE.splitlines(keepends=True)
    at = [
        i
        for i, line in enumerate(lines)
        if line == "                weights = None\n" and "_attend_fast(" in lines[i - 1]
    ]
    assert len(at) == 1, at
    lines[at[0] + 1 : at[0] + 1] = [
        "                if weights is not None:\n",
        "                    weights = weights.float()  # [batch_size, heads_num, q_len, k_len]\n",
    ]
    mutated = "".join(lines)
    report = check_full(mutated, executed(mutated, "<mutated full.py>"))
    assert not [p for p in report.problems if "raised" in p], report.problems
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
    found, _ = read_comments(mutated)
    assert f"line {line}: `k`: heads_num is always kv_heads" in lookalike_gaps(
        report, found, site_only
    )


def test_no_lookalike_is_claimed_for_a_line_no_run_checked():
    # With the fast runs only, the written-out path's lines run nowhere: "X is always Y" about
    # them would hold over no run at all (432 of 435 such reports were of that kind).
    fast_only = [r for r in RUNS if not is_math(r)]
    report = check_full(FULL_SOURCE, FULL_NAMESPACE, runs=fast_only)
    found, _ = read_comments(FULL_SOURCE)
    checked = {
        a.last_line
        for a in found
        if any(r.status[a.first_line] == "checked" for r in report.runs.values())
    }
    gaps = lookalike_gaps(report, found, fast_only, FULL_SOURCE)
    assert {int(g.split(":")[0].split()[1]) for g in gaps} <= checked, gaps
    assert _full_line("attn = torch.softmax(qk") not in checked


# ---- The checker as make check runs it ----------------------------------------------------------


def test_the_checker_finds_nothing_wrong_in_the_package():
    assert shape_comments.check() == []


def test_the_checker_names_the_file_and_line_of_each_problem():
    text = "v = self.W_v(source)"
    mutated = mutate_line(FULL_SOURCE, text, "kv_heads * head_size", "heads_num * head_size")
    report = check_full(mutated, FULL_NAMESPACE)
    line = _full_line(text)
    assert shape_comments.located("mha/full.py", report.mismatches[0]) == (
        f"mha/full.py:{line}: [self/gqa/fast/causal] `v` commented "
        "[batch_size, src_len, heads_num * head_size] = [6, 3, 20], real shape [6, 3, 10]"
    )
    assert shape_comments.located("mha/full.py", "forward raised ValueError: x") == (
        "mha/full.py: forward raised ValueError: x"
    )


# ---- mha/mla.py: MLA in both modes ---------------------------------------------------------------

MLA_SOURCE = inspect.getsource(mha.mla)


def test_a_dimension_may_sum_subtract_and_multiply_names_in_parentheses():
    names = {"heads_num": 4, "nope_dims": 5, "rope_dims": 6}
    assert evaluate("heads_num * (nope_dims + rope_dims)", names) == (44, [])
    assert evaluate("nope_dims + 2", names) == (7, [])
    assert evaluate("rope_dims - heads_num", names) == (2, [])  # a cache's capacity - offset
    assert evaluate("heads_num * v_dims", names) == (None, ["v_dims"])
    assert evaluate("heads_num // 2", names) == (None, ["heads_num // 2"])  # no other operator


def test_every_mla_comment_is_checked_in_both_modes_and_a_wrong_one_is_reported_where_it_runs():
    report = check_full(MLA_SOURCE, vars(mha.mla), MLA_RUNS)
    assert report.failures == []
    found, _ = read_comments(MLA_SOURCE, "MLA")
    assert lookalike_gaps(report, found, MLA_RUNS, MLA_SOURCE) == []
    text = "q_latent = torch.matmul(q_nope, W_uk)"
    mutated = mutate_line(
        MLA_SOURCE,
        text,
        "# [batch_size, heads_num, q_len, kv_rank]",
        "# [batch_size, heads_num, q_len, kv_rank + rope_dims]",
    )
    report = check_full(mutated, vars(mha.mla), MLA_RUNS)
    line = next(i for i, s in enumerate(MLA_SOURCE.splitlines(), 1) if text in s)
    # Only absorbed decoding computes q_latent
    assert sorted(runs_reporting(report.mismatches, line)) == sorted(
        r.name for r in MLA_RUNS if r.absorb
    )


# ---- the cache's buffers ------------------------------------------------------------------------


def test_a_wrong_comment_on_a_cache_buffer_is_caught():
    """``mha/cache.py``'s comments are on ``self._keys = ...`` lines: the tracer records the
    attributes of ``self`` too, and a comment that states what the move keeps instead of the new
    buffer's length fails the move's run."""
    import mha.cache
    from mha_site.runs import CACHE_RUNS

    source = inspect.getsource(mha.cache)
    right = check_full(source, vars(mha.cache), CACHE_RUNS, commented_only=True)
    assert right.failures == [] and sum(r.checked for r in right.runs.values()) == 16
    wrong = source.replace(
        "self._offset, held, capacity)  # [batch_size, kv_heads, capacity, head_size]",
        "self._offset, held, capacity)  # [batch_size, kv_heads, held, head_size]",
        1,
    )
    assert wrong != source
    report = check_full(wrong, executed(wrong, mha.cache.__file__), CACHE_RUNS, commented_only=True)
    (mismatch,) = report.mismatches
    assert mismatch.startswith("[cache/move] line ") and "real shape [2, 3, 11, 5]" in mismatch
