# ruff: noqa: E501
"""``mha.shapecheck``, the shape-comment checker for any module: its command, its pytest plugin and
its Python API, proven on the design post's code (as a reader pastes it), on ours, and on two
modules written here in other projects' comment styles (nanoGPT's letters, labml's prose).

Every check here is one run of a small module on the CPU; a test that changes only comments
judges the new text against the same run (``run(...).report(text)``), as ``--fix`` does.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import re
import runpy
import sys
from pathlib import Path

import pytest
import torch
from support import DESIGN_SOURCE

import mha.annotated
import mha.full
import mha.pure
import mha.shapecheck.__main__
from mha.shapecheck import RIGHT, UNCHECKED, UNREAD, WRONG, Report, check, run
from mha.shapecheck.__main__ import main
from mha.shapecheck.grammar import UNREADABLE, read
from mha.trace import comments

pytest_plugins = ["pytester"]

VIEW_COMMENT = "# [batch_size, heads_num, seq_len, head_size]"
TRUE_VIEW = "# [batch_size, seq_len, heads_num, head_size]"


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(source, encoding="utf-8")
    return path


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    """A folder of one's own, the current one: the report names files relative to it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def design(here) -> Path:
    """The design post's class, pasted into a file as a reader would."""
    return write(here, "design.py", DESIGN_SOURCE)


def lines_with(source: str, text: str) -> list[int]:
    return [i for i, line in enumerate(source.splitlines(), 1) if text in line]


def mutate(source: str, line: int, old: str, new: str) -> str:
    """``source`` with ``old`` replaced by ``new`` on ``line`` (once, in its comment)."""
    lines = source.splitlines(keepends=True)
    code, hash_, comment = lines[line - 1].partition("#")
    assert comment.count(old.lstrip("#")) >= 1, (lines[line - 1], old)
    lines[line - 1] = code + hash_ + comment.replace(old.lstrip("#"), new.lstrip("#"), 1)
    return "".join(lines)


# ---- The design post, as a reader pastes it ------------------------------------------------------


def test_the_design_posts_three_view_comments_are_reported_and_no_other_line(design):
    report = check("design.py::MHA")
    views = (
        lines_with(DESIGN_SOURCE, ".view(q.size(0)")
        + lines_with(DESIGN_SOURCE, ".view(k.size(0)")
        + lines_with(DESIGN_SOURCE, ".view(v.size(0)")
    )
    assert [f.line for f in report.wrong] == views
    assert report.unchecked == []
    assert len(report.right) == 11  # 14 shape comments, every one checked
    for finding in report.wrong:
        assert finding.said == VIEW_COMMENT[2:]
        assert finding.stated == (2, 4, 3, 5)
        assert finding.actual == (2, 3, 4, 5)
        assert finding.corrected == TRUE_VIEW
    assert report.exit_code == 1


def test_the_report_says_file_line_what_the_comment_says_and_what_the_tensor_is(design):
    text = check("design.py::MHA").text()
    line = lines_with(DESIGN_SOURCE, ".view(q.size(0)")[0]
    assert text.splitlines()[:3] == [
        "design.py::MHA: MHA(hidden_size=20, heads_num=4), forward(x=[2, 3, 20]); batch_size=2, seq_len=3",
        f"design.py:{line}: comment says [batch_size, heads_num, seq_len, head_size] = [2, 4, 3, 5], the tensor is [2, 3, 4, 5]",
        f"  corrected: {TRUE_VIEW}",
    ]
    assert text.splitlines()[-1] == "3 wrong, 11 right, 0 not checked, 0 not understood"
    assert len(text.splitlines()) == 8


def test_fix_rewrites_only_the_three_comments_and_the_file_then_passes(design, capsys):
    assert main(["design.py::MHA", "--fix"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == (
        "fixed 3 comments in design.py; checked again: 0 wrong, 14 right, 0 not checked, 0 not understood"
    )
    before, after = DESIGN_SOURCE.splitlines(), design.read_text(encoding="utf-8").splitlines()
    changed = [i for i, (b, a) in enumerate(zip(before, after, strict=True), 1) if b != a]
    assert changed == lines_with(DESIGN_SOURCE, VIEW_COMMENT)[:3]
    for i in changed:  # the code is the same; the comment is the true one
        assert before[i - 1].split("#")[0] == after[i - 1].split("#")[0]
        assert after[i - 1].endswith(TRUE_VIEW)
    assert len(after) == len(before)
    assert check("design.py::MHA").ok


def test_equal_sizes_would_hide_the_wrong_comment_so_the_checker_chooses_them_different(design):
    # With seq_len == heads_num the post's comment passes: given so, the report says which names
    # it could not tell apart.
    report = check("design.py::MHA", init="hidden_size=20, heads_num=4", inputs="x=[2, 4, 20]",
                   sizes="batch_size=2, seq_len=4")  # fmt: skip
    assert report.wrong == []
    assert ("heads_num", "seq_len") in report.lookalikes
    assert "note: heads_num and seq_len had the same size" in report.text()


# ---- Our modules: no wrong comment --------------------------------------------------------------


def test_the_annotated_module_has_no_wrong_comment_and_every_one_is_checked():
    report = check(mha.annotated.MHA)
    assert (len(report.right), report.wrong, report.unchecked) == (14, [], [])
    assert report.lookalikes == []


def test_the_pure_module_has_no_shape_comment_to_check():
    source = inspect.getsource(mha.pure)
    assert [c.text for c in comments(source) if read(c.text) is not None] == []
    report = check(mha.pure.MHA)
    assert report.findings == []
    assert report.exit_code == 3
    assert (
        report.text().splitlines()[-1] == "nothing checked: no shape comment in the code that ran"
    )


FULL_RUN = dict(
    init="hidden_size=20, heads_num=4, kv_heads=2, context_size=11",
    inputs={"x": [6, 3, 20], "context": [6, 7, 11], "need_weights": True},
    sizes="batch_size=6, q_len=3, src_len=7, k_len=7",
)


def test_the_full_module_has_no_wrong_comment_in_cross_attention_with_weights():
    report = check(mha.full.MHA, **FULL_RUN)
    assert report.wrong == []
    assert len(report.right) >= 15, report.text()
    # what did not run in this call (a cache, rotary embeddings, the fast path ...) says so
    assert {f.message.rsplit(": ", 1)[-1] for f in report.unchecked} <= {
        "the line never ran",
        "the value is None, not a tensor",
    }, report.text()
    assert report.lookalikes == [("k_len", "src_len")]  # no cache: as many keys as the context


def test_the_full_module_in_self_attention_has_no_wrong_comment():
    report = check(mha.full.MHA, sizes="q_len=seq_len, src_len=seq_len")
    assert report.wrong == [] and len(report.right) >= 10


# ---- Mutations: any single change of a name or a number is reported -----------------------------


def changed_comment(comment: str, said: str, index: int, new: str) -> str:
    dims = [d.strip() for d in said[1:-1].split(",")]
    dims[index] = new
    return comment.replace(said, said[0] + ", ".join(dims) + said[-1])


def assert_every_mutation_reported(checked, path: Path, sizes: dict[str, int]) -> int:
    """Each dimension of every right comment replaced, one at a time, by each name of ``sizes``
    of another size there and by a number no size has: each is reported wrong. The comments are
    changed side by side (the k-th change of each in the k-th text): a verdict is one comment's."""
    text = path.read_text(encoding="utf-8")
    right = checked.report().right
    assert right and 97 not in sizes.values()
    changes: dict[int, list[tuple[str, str]]] = {}  # line -> (comment as changed, the change)
    for finding in right:
        dims = [d.strip() for d in finding.said[1:-1].split(",")]
        named = [i for i, d in enumerate(dims) if d != "..."]
        stated = dict(zip(named, finding.stated, strict=True))
        changes[finding.line] = [
            (changed_comment(finding.comment, finding.said, index, new), f"{index}: {new}")
            for index, size in stated.items()
            for new in [n for n, s in sizes.items() if s != size] + ["97"]
        ]
    comments = {f.line: f.comment for f in right}
    for k in range(max(len(c) for c in changes.values())):
        lines = text.splitlines(keepends=True)
        changed = {line: c[k] for line, c in changes.items() if k < len(c)}
        for line, (comment, _) in changed.items():
            lines[line - 1] = lines[line - 1].replace(comments[line], comment)
        statuses = {f.line: f for f in checked.report("".join(lines)).findings}
        for line, (_, change) in changed.items():
            assert statuses[line].status == WRONG, (line, change, statuses[line].message)
    return sum(len(c) for c in changes.values())


def test_any_single_name_or_number_changed_in_an_annotated_comment_is_reported():
    sizes = dict(batch_size=2, seq_len=3, heads_num=4, head_size=5, hidden_size=20)
    checked = run(mha.annotated.MHA)
    count = assert_every_mutation_reported(checked, Path(mha.annotated.__file__), sizes)
    assert count == (5 * 3 + 9 * 4) * 5  # 5 comments of 3 dimensions, 9 of 4; 5 changes each


def test_any_single_name_or_number_changed_in_fulls_comments_checked_in_a_run_is_reported():
    # without a cache src_len and k_len are one size (the report says so): each is changed to
    # the names of other sizes
    sizes = dict(batch_size=6, q_len=3, src_len=7, k_len=7, heads_num=4, kv_heads=2,
                 head_size=5, hidden_size=20, context_size=11)  # fmt: skip
    checked = run(mha.full.MHA, **FULL_RUN)
    count = assert_every_mutation_reported(checked, Path(mha.full.__file__), sizes)
    assert count >= 300, count


# ---- nanoGPT's comment style: letters from `B, T, C = x.size()` ----------------------------------

NANOGPT_STYLE = """\
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        assert n_embd % n_head == 0
        self.qkv = nn.Linear(n_embd, 3 * n_embd)  # queries, keys and values in one matmul
        self.proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head
        self.n_embd = n_embd
        causal = torch.tril(torch.ones(block_size, block_size))
        self.register_buffer("causal", causal.view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()  # batch, time (sequence length), channels (n_embd)
        q, k, v = self.qkv(x).split(self.n_embd, dim=2)  # (B, T, C)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, T, C) -> (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        # every query against every key: (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
        att = att.masked_fill(self.causal[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)  # (B, nh, T, T)
        y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, nh * hs)
        return self.proj(y)  # (B, T, C)
"""
NANOGPT = "nanogpt_style.py::CausalSelfAttention"
NANOGPT_SIZES = "nh=n_head, hs=C // n_head"  # nanoGPT's letters for its attributes


def test_nanogpt_style_comments_are_right_given_what_nh_and_hs_stand_for(here):
    write(here, "nanogpt_style.py", NANOGPT_STYLE)
    report = check(NANOGPT, sizes=NANOGPT_SIZES)
    assert report.ran == (
        "CausalSelfAttention(n_embd=20, n_head=4, block_size=6), forward(x=[2, 3, 20])"
    )
    assert (len(report.right), report.wrong, report.unchecked) == (9, [], [])
    products = [f for f in report.right if " x " in f.said]
    assert [f.message for f in products] == [
        "right: (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T) = (2, 4, 3, 5) x (2, 4, 5, 3) -> (2, 4, 3, 3)",
        "right: (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs) = (2, 4, 3, 3) x (2, 4, 3, 5) -> (2, 4, 3, 5)",
    ]


def test_unknown_names_are_reported_not_checked_never_right(here):
    source = "def split(x):\n    y = x.view(2, 3, 4, 5)  # (B, nh, T, hs)\n    return y\n"
    write(here, "split.py", source)
    (finding,) = check("split.py::split", inputs="x=[2, 3, 20]").findings
    assert finding.status == UNCHECKED
    assert finding.message == (
        "not checked: (B, nh, T, hs): unknown names B, nh, T, hs (give them with --sizes)"
    )


NANOGPT_PLANTED = [
    # (the line's code, the comment's text replaced, by, the corrected comment)
    ("k = k.view(", "(B, nh, T, hs)", "(B, T, nh, hs)", "# (B, nh, T, hs)"),
    ("q = q.view(", "(B, T, C) ->", "(B, C, T) ->", "# (B, T, C) -> (B, nh, T, hs)"),
    (
        "att = (q @",
        "x (B, nh, hs, T)",
        "x (B, nh, T, hs)",
        "# (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)",
    ),
    (
        "y = att @ v",
        "-> (B, nh, T, hs)",
        "-> (B, T, nh, hs)",
        "# (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)",
    ),
    ("y = y.transpose(", "(B, T, nh * hs)", "(B, nh * hs, T)", "# (B, T, nh * hs)"),
    ("att = F.softmax(", "(B, nh, T, T)", "(B, nh, T, hs)", "# (B, nh, T, T)"),
]


@pytest.mark.parametrize("code, old, new, corrected", NANOGPT_PLANTED, ids=lambda p: str(p)[:14])
def test_a_planted_wrong_nanogpt_style_comment_is_found_and_corrected(
    here, code, old, new, corrected
):
    (line,) = lines_with(NANOGPT_STYLE, code)
    write(here, "nanogpt_style.py", mutate(NANOGPT_STYLE, line, old, new))
    report = check(NANOGPT, sizes=NANOGPT_SIZES)
    assert [(f.line, f.corrected) for f in report.wrong] == [(line, corrected)]
    assert len(report.right) == 8


def test_all_planted_nanogpt_style_comments_are_found_at_once_and_fix_restores_the_file(
    here, capsys
):
    source = NANOGPT_STYLE
    for code, old, new, _ in NANOGPT_PLANTED:
        source = mutate(source, lines_with(source, code)[0], old, new)
    path = write(here, "nanogpt_style.py", source)
    assert main([NANOGPT, "--sizes", NANOGPT_SIZES, "--fix"]) == 0
    out = capsys.readouterr().out
    assert f"fixed {len(NANOGPT_PLANTED)} comments in nanogpt_style.py" in out
    assert path.read_text(encoding="utf-8") == NANOGPT_STYLE


def test_the_shape_before_an_arrow_names_what_it_could_not_identify(here):
    source = "import torch\n\n\ndef add(x, y):\n    z = x + y  # [a] -> [a]\n    return z\n"
    write(here, "add.py", source)
    (finding,) = check("add.py::add", inputs="x=[4], y=[4]", sizes="a=4").findings
    assert finding.status == RIGHT
    assert finding.message == (
        "right: [a] -> [a] = [4] -> [4] (the shape before -> is not checked: the line reads x, y, "
        "so the operand is not known)"
    )


# ---- labml's comment style: prose above each step, shapes in backticks ---------------------------

LABML_STYLE = r'''import math

import torch
from torch import nn


class HeadSplit(nn.Module):
    """A linear layer whose output is cut into heads."""

    def __init__(self, d_model: int, heads: int, d_k: int):
        super().__init__()
        # One linear layer serves every head
        self.linear = nn.Linear(d_model, heads * d_k)
        self.heads = heads
        self.d_k = d_k

    def forward(self, x: torch.Tensor):
        # The dimensions before the last stay as they are
        leading = x.shape[:-1]
        # Project the last dimension: the result has shape `[seq_len, batch_size, heads * d_k]`
        x = self.linear(x)
        # Cut it into heads, of shape `[seq_len, batch_size, heads, d_k]`
        return x.view(*leading, self.heads, self.d_k)


class MultiHeadAttention(nn.Module):
    def __init__(self, heads: int, d_model: int, dropout_prob: float = 0.1):
        super().__init__()
        self.d_k = d_model // heads
        self.heads = heads
        self.query = HeadSplit(d_model, heads, self.d_k)
        self.key = HeadSplit(d_model, heads, self.d_k)
        self.value = HeadSplit(d_model, heads, self.d_k)
        # Softmax over the keys: dimension 1 of `[seq_len, seq_len, batch_size, heads]`
        self.softmax = nn.Softmax(dim=1)
        self.output = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout_prob)
        self.scale = 1 / math.sqrt(self.d_k)

    def scores(self, query: torch.Tensor, key: torch.Tensor):
        # $S_{ijbh} = \sum_d Q_{ibhd} K_{jbhd}$, a tensor of shape `[seq_len, seq_len, batch_size, heads]`
        return torch.einsum("ibhd,jbhd->ijbh", query, key)

    def forward(self, *, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor):
        # `query`, `key` and `value` have shape `[seq_len, batch_size, d_model]`
        seq_len, batch_size, _ = query.shape
        # From here on each has shape `[seq_len, batch_size, heads, d_k]`
        query = self.query(query)
        key = self.key(key)
        value = self.value(value)
        # The scores $Q K^\top$, scaled: shape `[seq_len, seq_len, batch_size, heads]`
        scores = self.scores(query, key) * self.scale
        # Attention: softmax along the keys, shape `[seq_len, seq_len, batch_size, heads]`
        attn = self.dropout(self.softmax(scores))
        # Weighted sum of the values, shape `[seq_len, batch_size, heads, d_k]`
        x = torch.einsum("ijbh,jbhd->ibhd", attn, value)
        # The heads side by side again: shape `[seq_len, batch_size, d_model]`
        x = x.reshape(seq_len, batch_size, -1)
        # Output projection, to shape `[seq_len, batch_size, d_model]`
        return self.output(x)
'''
LABML = "labml_style.py::MultiHeadAttention"


def test_labml_style_comments_above_each_step_are_right(here):
    write(here, "labml_style.py", LABML_STYLE)
    report = check(LABML)
    assert (len(report.right), report.wrong) == (9, [])
    (inputs,) = report.unchecked  # the comment on the inputs is above a line that makes sizes
    assert inputs.message == (
        "not checked: [seq_len, batch_size, d_model]: the value is an int, not a tensor"
    )
    # HeadSplit's comments name seq_len and batch_size: the locals of the forward that calls it
    split = lines_with(LABML_STYLE, "heads * d_k]`") + lines_with(LABML_STYLE, "Cut it into heads")
    assert [f.line for f in report.right][:2] == split
    # a shape in backticks with no "shape" before it is prose
    assert lines_with(LABML_STYLE, "dimension 1 of")[0] not in [f.line for f in report.findings]


LABML_PLANTED = [
    (
        "$S_{ijbh}",
        "[seq_len, seq_len, batch_size, heads]",
        "[seq_len, seq_len, heads, batch_size]",
        "[seq_len, seq_len, batch_size, heads]",
    ),
    ("Weighted sum", "heads, d_k]", "heads, d_model]", "[seq_len, batch_size, heads, d_k]"),
    ("Project the last dimension", "heads * d_k]", "d_k]", "[seq_len, batch_size, d_model]"),
    (
        "side by side again",
        "[seq_len, batch_size, d_model]",
        "[batch_size, seq_len, d_model]",
        "[seq_len, batch_size, d_model]",
    ),
]


@pytest.mark.parametrize("text, old, new, corrected", LABML_PLANTED, ids=lambda p: str(p)[:14])
def test_a_planted_wrong_labml_style_comment_is_found_and_corrected_in_its_backticks(
    here, text, old, new, corrected
):
    (line,) = lines_with(LABML_STYLE, text)
    source = mutate(LABML_STYLE, line, old, new)
    write(here, "labml_style.py", source)
    report = check(LABML)
    (wrong,) = report.wrong
    assert wrong.line == line
    comment = "#" + source.splitlines()[line - 1].partition("#")[2]
    assert wrong.comment == comment
    assert wrong.corrected == comment.replace(f"`{wrong.said}`", f"`{corrected}`")
    assert len(report.right) == 8


# ---- The comment grammar: conservative -----------------------------------------------------------


def test_prose_with_brackets_is_no_shape_comment():
    for prose in (
        "# W_q(x) multiplies x by [W_q_0, W_q_1, ..., W_q_(heads_num-1)]",
        "# (optional) the mask",
        "# (the eos ids, the pad id) or None",
        "# shape [batch_size, heads_num, seq_len, head_size]: so out.size(2) is seq_len",
        "# x:输入序列，[batch_size, seq_len, hidden_size]",
        "# see `[a, b]` below",
    ):
        assert read(prose) is None, prose
    assert read("# [batch_size=2, seq_len=3]") == UNREADABLE


def test_each_comment_form_is_read():
    def dims(comment):
        spec = read(comment)
        return [[s.dims for s in group] for group in spec.groups], [
            s.dims for s in spec.alternatives
        ]

    assert dims("# [batch_size, seq_len, hidden_size])") == (
        [[("batch_size", "seq_len", "hidden_size")]],
        [],
    )
    assert dims("# (B, nh, T, hs)") == ([[("B", "nh", "T", "hs")]], [])
    assert dims("# [..., k_len]") == ([[("...", "k_len")]], [])
    assert dims("# [] a count") == ([[()]], [])
    assert dims("# [B, T, C] -> [B, T, nh, C // nh]") == (
        [[("B", "T", "C")], [("B", "T", "nh", "C // nh")]],
        [],
    )
    assert dims("# (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)")[0][0] == [
        ("B", "nh", "T", "T"),
        ("B", "nh", "T", "hs"),
    ]
    assert dims("# [a] @ [a, b] -> [b]") == ([[("a",), ("a", "b")], [("b",)]], [])
    assert dims("# Output has shape `[s, b, d]` or `[b, d]`") == ([[("s", "b", "d")]], [("b", "d")])
    assert dims("# 形状为 `[b, s, d]`") == ([[("b", "s", "d")]], [])


def test_a_comment_on_no_assignment_is_not_checked_and_an_unreadable_one_not_understood(here):
    source = (
        "import torch\n\n\n"
        "def double(x):\n"
        "    y = torch.cat([x, x])  # [2 * n]\n"
        "    x.mul_(2)  # [n]\n"
        "    z = y + 1  # [n=3]\n"
        "    # [2 * n]\n"
        "\n"
        "    return y\n"
    )
    write(here, "double.py", source)
    report = check("double.py::double", inputs="x=[3]", sizes="n=3")
    assert [(f.line, f.status, f.message) for f in report.findings] == [
        (5, RIGHT, "right: [2 * n] = [6]"),
        (6, UNCHECKED, "not checked: [n]: not on an assignment to a name, or a return"),
        (
            7,
            UNREAD,
            "not understood: '# [n=3]': its brackets hold no shape (a dimension is a name, a whole number or arithmetic of them)",
        ),
        (8, UNCHECKED, "not checked: [2 * n]: not just above an assignment or a return"),
    ]


def test_a_comment_in_numbers_is_checked_and_corrected_in_numbers(here):
    write(
        here, "numbers.py", "import torch\n\n\ndef f(x):\n    y = x.t()  # [3, 5]\n    return y\n"
    )
    (finding,) = check("numbers.py::f", inputs="x=[3, 5]").findings
    assert finding.message == "comment says [3, 5], the tensor is [5, 3]"
    assert finding.corrected == "# [5, 3]"


def test_a_loop_checks_its_line_each_time_it_runs(here):
    source = (
        "import torch\n\n\n"
        "def grow(x):\n"
        "    for step in range(1, 4):\n"
        "        x = torch.cat([x, x[:1]])  # [step + 3]\n"
        "    return x\n"
    )
    write(here, "grow.py", source)
    (finding,) = check("grow.py::grow", inputs="x=[3]").findings
    assert finding.status == RIGHT
    wrong = source.replace("# [step + 3]", "# [step + 2]")
    assert run("grow.py::grow", inputs="x=[3]").report(wrong).wrong[0].message == (
        "comment says [step + 2] = [3], the tensor is [4]"
    )


# ---- The command -------------------------------------------------------------------------------


def test_python_dash_m_runs_the_command_and_exits_with_1_on_a_wrong_comment(
    design, monkeypatch, capsys
):
    # What `python -m mha.shapecheck design.py::MHA` runs: the package's __main__.py as __main__
    monkeypatch.setattr(sys, "argv", ["python -m mha.shapecheck", "design.py::MHA"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(mha.shapecheck.__main__.__file__, run_name="__main__")
    assert exited.value.code == 1
    assert capsys.readouterr().out.rstrip("\n") == check("design.py::MHA").text()


@pytest.mark.parametrize(
    "arguments, code",
    [
        (["annotated.py::MHA"], 0),
        (["design.py::MHA"], 1),
        (["design.py::MHA", "--init", "hidden_size=20, heads_num=3"], 2),  # the post's // drops
        (["pure.py::MHA"], 3),
    ],
    ids=["right", "wrong", "raised", "nothing"],
)
def test_the_exit_status_says_right_wrong_could_not_run_or_nothing_checked(
    design, capsys, arguments, code
):
    write(design.parent, "annotated.py", inspect.getsource(mha.annotated))
    write(design.parent, "pure.py", inspect.getsource(mha.pure))
    assert main(arguments) == code
    out = capsys.readouterr().out
    if code == 2:  # 20 // 3 heads of 6: the .view has 2 left over; batch 2, seq 5 (3 is taken)
        assert out.splitlines()[-2] == (
            "the call raised RuntimeError: shape '[2, 5, 3, 6]' is invalid for input of size 200"
        )


@pytest.mark.parametrize(
    "arguments, error",
    [
        (
            ["design.py"],
            "target must be PATH::NAME, such as model.py::MHA or model.py::attention, got 'design.py'",
        ),
        (["missing.py::MHA"], "target: no file missing.py (from 'missing.py::MHA')"),
        (
            ["design.py::Attention"],
            "target: design.py has no class or function Attention; it defines MHA",
        ),
        (
            ["design.py::MHA", "--init", "hidden_size 24"],
            "--init must be NAME=VALUE pairs separated by commas, such as 'hidden_size=24, heads_num=6', got 'hidden_size 24'",
        ),
        (
            ["design.py::MHA", "--init", "hiden_size=24"],
            "--init: MHA() has no parameter hiden_size; its parameters are hidden_size, heads_num",
        ),
        (
            ["design.py::MHA", "--init", "hidden_size=width"],
            "--init: hidden_size must be a Python literal (a number, a list, None, True ...), got 'width'",
        ),
        (
            ["design.py::MHA", "--input", "x=[5, 7.5, 24]"],
            "--input: the shape of x must be a list of whole numbers such as [5, 7, 24], got [5, 7.5, 24]",
        ),
        (
            ["design.py::MHA", "--input", "y=[5, 7, 24]"],
            "--input: MHA.forward() has no parameter y; its parameters are x",
        ),
        (
            ["design.py::MHA", "--sizes", "batch_size=-1"],
            "--sizes: batch_size must be a whole number or a dimension of other names (such as n_head or C // n_head), got '-1'",
        ),
        (
            ["double.py::double"],
            '--input: cannot guess the input x of double(); give its shape, such as --input "x=[2, 3, 20]"',
        ),
        (
            ["config.py::Block"],
            '--init: cannot guess config of Block(); give it, such as --init "config=..." (a literal: a number, a string, a list)',
        ),
    ],
    ids=lambda a: a[-1][:12] if isinstance(a, list) else None,
)
def test_a_bad_argument_is_an_error_naming_it_what_it_expects_and_what_it_got(
    design, capsys, arguments, error
):
    write(design.parent, "double.py", "def double(x):\n    return x * 2\n")
    write(
        design.parent, "config.py", "class Block:\n    def __init__(self, config):\n        pass\n"
    )
    assert main(arguments) == 2
    assert capsys.readouterr().err == f"python -m mha.shapecheck: error: {error}\n"


def test_the_python_api_names_its_own_arguments_in_its_errors(design):
    with pytest.raises(ValueError, match=r"^init must be NAME=VALUE pairs"):
        check("design.py::MHA", init="24")
    with pytest.raises(
        TypeError, match=r"^inputs must be a dict or a string such as 'x=\[5, 7, 24\]', got int"
    ):
        check("design.py::MHA", inputs=5)
    with pytest.raises(
        TypeError, match=r"^target must be 'path/to/file.py::Name' or a class or function, got int"
    ):
        check(3)


def test_the_api_takes_tensors_and_shapes_as_inputs(design):
    given = check(
        "design.py::MHA", inputs={"x": torch.randn(5, 7, 20)}, sizes={"batch_size": 5, "seq_len": 7}
    )
    shaped = check("design.py::MHA", inputs={"x": (5, 7, 20)}, sizes="batch_size=5, seq_len=7")
    assert given.ran == shaped.ran == "MHA(hidden_size=20, heads_num=4), forward(x=[5, 7, 20])"
    assert [f.line for f in given.wrong] == [f.line for f in shaped.wrong]
    assert given.wrong[0].actual == (5, 7, 4, 5)


# ---- The pytest plugin ---------------------------------------------------------------------------


def test_the_plugin_is_installed_as_a_pytest11_entry_point():
    (entry,) = [
        e for e in importlib.metadata.entry_points(group="pytest11") if e.name == "shapecheck"
    ]
    assert entry.value == "mha.shapecheck.pytest_plugin"


def test_pytest_shapecheck_fails_with_the_report_of_a_wrong_comment(pytester):
    pytester.makepyfile(design=DESIGN_SOURCE)
    result = pytester.runpytest("--shapecheck", "design.py::MHA")
    result.assert_outcomes(failed=1)
    for line in (
        check("design.py::MHA").text().splitlines()[1:]
    ):  # pytester's folder is the current one
        result.stdout.re_match_lines([".*" + re.escape(line)])


def test_pytest_shapecheck_passes_on_right_comments_and_takes_the_commands_options(pytester):
    fixed = DESIGN_SOURCE.replace(VIEW_COMMENT, TRUE_VIEW, 3)
    pytester.makepyfile(design=fixed)
    result = pytester.runpytest("--shapecheck", "design.py::MHA --sizes 'batch_size=2'", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*shapecheck*design.py::MHA*PASSED*"])


def test_a_bad_shapecheck_value_stops_pytest_with_a_usage_error(pytester):
    result = pytester.runpytest("--shapecheck", "design.py::MHA --bogus")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--shapecheck must be the arguments of python -m mha.shapecheck*"]
    )


def test_the_fixture_fails_a_test_with_the_report_and_returns_it_when_right(pytester):
    pytester.makepyfile(
        design=DESIGN_SOURCE, fixed=DESIGN_SOURCE.replace(VIEW_COMMENT, TRUE_VIEW, 3)
    )
    pytester.makepyfile(
        # Not test_shapes: the page shapecheck.md leaves a module of that name imported in this
        # process
        test_the_fixture_form="""
        def test_wrong(shapecheck):
            shapecheck("design.py::MHA")

        def test_right(shapecheck):
            report = shapecheck("fixed.py::MHA", init="hidden_size=20, heads_num=4")
            assert len(report.right) == 14
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1, passed=1)
    for line in check(str(pytester.path / "design.py") + "::MHA").text().splitlines()[1:]:
        result.stdout.re_match_lines([".*" + re.escape(line.replace(str(pytester.path) + "/", ""))])


def test_a_conftest_line_loads_the_plugin_where_it_is_not_installed(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest('pytest_plugins = ["mha.shapecheck.pytest_plugin"]')
    pytester.makepyfile(design=DESIGN_SOURCE.replace(VIEW_COMMENT, TRUE_VIEW, 3))
    result = pytester.runpytest("--shapecheck", "design.py::MHA")
    result.assert_outcomes(passed=1)


def test_report_text_is_what_str_gives():
    report = Report("m.py::f", [], "f()")
    assert (
        str(report)
        == report.text()
        == "m.py::f: f()\nnothing checked: no shape comment in the code that ran"
    )
