# ruff: noqa: E501
"""``mha.shapecheck`` says what it did not read: a comment that looks like a shape and is not
understood is listed and counted, never skipped; nothing checked is exit status 3; ``--fix``
never writes a run's numbers where a comment had names; ``mha/full.py`` is checked with no
option; and a note about two names of one size is printed only when it can be acted on.

The styles are those of the practitioner review of 2026-12-05 (§3.2): its table of comment
styles that vanished, its ``sc/edge.py`` with two planted wrong comments, its ``Probe``.
"""

from __future__ import annotations

import pytest
import test_shapecheck

import mha.full
from mha.shapecheck import RIGHT, UNREAD, WRONG, check, run
from mha.shapecheck.__main__ import main
from mha.shapecheck.grammar import looks_like_shape, not_understood, read

here = test_shapecheck.here  # the fixture: a folder of one's own, the current one
write = test_shapecheck.write

# ---- What looks like a shape: one predicate ----------------------------------------------------

# The review's table (§3.2.1): each style, and why the checker does not read it.
REVIEW_STYLES = {
    "# x: (B, T, d_model)": "it starts with 'x:', not with its shape",
    "# x: [batch, seq, dim]": "it starts with 'x:', not with its shape",
    "# shape: (B, T, d_model)": "it starts with 'shape:', not with its shape",
    "# b t d_ff": "its dimensions are not a bracketed list (write [b, t, d_ff])",
    "# (B, T, 3C)": "3C is no dimension (write 3 * C)",
    "# B T 3C": "its dimensions are not a bracketed list (write [B, T, 3 * C])",
    "# B x T x 3C": "its dimensions are not a bracketed list (write [B, T, 3 * C])",
    "# 2 x (B, T, 3*C)": "it starts with the count '2 x', not with its shape",
    "# (b*t) d_ff": "its dimensions are not a bracketed list (write [b*t, d_ff])",
}


@pytest.mark.parametrize("comment", REVIEW_STYLES)
def test_each_style_of_the_review_looks_like_a_shape_and_says_why_it_is_not_read(comment):
    assert read(comment) is None
    assert looks_like_shape(comment)
    assert not_understood(comment) == REVIEW_STYLES[comment]


@pytest.mark.parametrize(
    "prose",
    [
        "# the causal mask",
        "# 中文注释",
        "# (see above)",
        "# (optional) the mask",
        "# (the eos ids, the pad id) or None",
        "# W_q(x) multiplies x by [W_q_0, W_q_1, ..., W_q_(heads_num-1)]",
        "# shape [batch_size, heads_num, seq_len, head_size]: so out.size(2) is seq_len",
        "# x:输入序列，[batch_size, seq_len, hidden_size]",
        "# fmt: skip",
        "# type: ignore[attr-defined]",
        "# pragma: no cover",
        "# keeps d_model",
        "# 2 heads",
    ],
)
def test_prose_does_not_look_like_a_shape(prose):
    assert not looks_like_shape(prose)
    assert not_understood(prose) is None


def test_a_comment_the_grammar_reads_looks_like_a_shape_and_is_understood():
    for comment in ("# (B, nh, T, hs)", "# [batch_size, seq_len, hidden_size]", "# [..., k_len]"):
        assert looks_like_shape(comment) and not_understood(comment) is None


# ---- Listed and counted, never silent ----------------------------------------------------------

EDGE = """\
import torch.nn as nn


class Edge(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)

    def forward(self, x):
        h = self.up(x)  # b t d_model
        g = self.up(x)  # shape: (B, T, d_model)
        # the causal mask
        # 中文注释
        return h + g
"""


def test_the_reviews_two_planted_comments_are_listed_as_not_understood(here, capsys):
    write(here, "edge.py", EDGE)
    report = check("edge.py::Edge", init="d_ff=6")
    assert [(f.line, f.status) for f in report.findings] == [(10, UNREAD), (11, UNREAD)]
    assert [f.message for f in report.not_understood] == [
        "not understood: '# b t d_model': its dimensions are not a bracketed list (write [b, t, d_model])",
        "not understood: '# shape: (B, T, d_model)': it starts with 'shape:', not with its shape",
    ]
    assert main(["edge.py::Edge", "--init", "d_ff=6"]) == 3
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == [
        "edge.py:10: not understood: '# b t d_model': its dimensions are not a bracketed list (write [b, t, d_model])",
        "edge.py:11: not understood: '# shape: (B, T, d_model)': it starts with 'shape:', not with its shape",
        "0 wrong, 0 right, 0 not checked, 2 not understood: nothing checked",
    ]


def test_a_passing_check_warns_in_pytest_with_the_comments_it_did_not_understand(here):
    source = EDGE.replace("return h + g", "return h + g  # [batch_size, seq_len, d_ff]")
    write(here, "edge.py", source)
    with pytest.warns(UserWarning, match=r"edge.py::Edge: 2 not understood:\n.*edge.py:10"):
        from mha.shapecheck.pytest_plugin import _warn_unread

        report = check("edge.py::Edge", init="d_ff=6")
        assert report.ok
        _warn_unread(report)


# ---- Nothing checked is exit status 3 ----------------------------------------------------------


def test_nothing_checked_is_status_3_and_says_what_was_not_read(here, capsys):
    write(here, "edge.py", EDGE)
    report = check("edge.py::Edge", init="d_ff=6")
    assert (report.right, report.wrong, report.exit_code, report.ok) == ([], [], 3, False)
    assert report.text().splitlines()[-1] == (
        "0 wrong, 0 right, 0 not checked, 2 not understood: nothing checked"
    )


# ---- --fix leaves a comment whose names no size has ---------------------------------------------

PROBE = """\
import torch.nn as nn


class Probe(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__(); self.qkv = nn.Linear(n_embd, 3 * n_embd)
    def forward(self, x):
        B, T, C = x.shape
        h = self.qkv(x)  # (B, T, C)
        return x
"""


def test_fix_never_writes_the_runs_numbers_where_the_comment_had_names(here, capsys):
    path = write(here, "styles.py", PROBE)
    assert main(["styles.py::Probe", "--fix"]) == 1
    assert path.read_text(encoding="utf-8") == PROBE
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == [
        "styles.py:9: comment says (B, T, C) = (2, 3, 20), the tensor is (2, 3, 60)",
        "  not fixed: no name of the comments stands for 60 here, and this run's numbers would replace the comment's names",
        "1 wrong, 0 right, 0 not checked, 0 not understood",
        "fixed nothing (1 wrong left as it is: not fixed above)",
    ]


LOOP = """\
import torch


def widen(x):
    for _ in range(2):
        x = torch.cat([x, x], dim=-1)  # (B, d_model)
    return x
"""


def test_fix_leaves_a_line_that_made_tensors_of_different_shapes(here):
    path = write(here, "loop.py", LOOP)
    report = check("loop.py::widen", inputs="x=[2, 5]", sizes="B=2, d_model=5")
    (finding,) = report.wrong
    assert finding.corrected is None
    assert finding.not_fixed == "the line ran 2 times, its tensors (2, 10), (2, 20)"
    assert report.fix() == 0
    assert path.read_text(encoding="utf-8") == LOOP


def test_fix_still_corrects_a_comment_in_names_that_names_can_say(here):
    source = PROBE.replace("# (B, T, C)", "# (B, C, T)").replace("h = self.qkv(x)", "h = x")
    path = write(here, "styles.py", source)
    assert main(["styles.py::Probe", "--fix"]) == 0
    assert "h = x  # (B, T, C)" in path.read_text(encoding="utf-8")


# ---- mha/full.py is checked with no option ------------------------------------------------------


def test_the_full_module_is_checked_with_no_option_and_none_is_wrong():
    report = check(mha.full.MHA)
    # q_len and src_len, the only names nothing else knows, are taken where first used
    assert sorted(report.taken) == ["q_len", "src_len"]
    assert [report.taken[n][0] for n in ("q_len", "src_len")] == [3, 3]
    given = check(mha.full.MHA, sizes="q_len=seq_len, src_len=seq_len")
    assert report.wrong == [] and report.not_understood == []
    assert [f.line for f in report.right] == [f.line for f in given.right]
    assert len(report.right) >= 10 and report.exit_code == 0


def test_a_name_taken_where_first_used_is_checked_everywhere_after(here):
    source = (
        "import torch\n\n\n"
        "def f(x):\n"
        "    y = x.t()  # [n, m]\n"
        "    z = y.sum(0)  # [m]\n"
        "    return z\n"
    )
    write(here, "taken.py", source)
    checked = run("taken.py::f", inputs="x=[5, 7]", sizes="n=7")
    assert checked.report().taken == {"m": (5, 5)}
    assert [f.status for f in checked.report().findings] == [RIGHT, RIGHT]
    assert (
        checked.report().right[0].message == "right: [n, m] = [7, 5] (m = 5 taken from this line)"
    )
    wrong = checked.report(source.replace("# [m]", "# [n]"))
    assert [f.status for f in wrong.findings] == [RIGHT, WRONG]


# ---- A note that can be acted on -----------------------------------------------------------------

BATCH_WORDS = """\
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.shape
        y = self.proj(x)  # [batch_size, T, C]
        z = y.view(B * T, C)  # (B * T, C)
        return z
"""


def test_no_note_about_two_names_of_one_dimension_of_one_input(here):
    write(here, "block.py", BATCH_WORDS)
    report = check("block.py::Block")
    assert len(report.right) == 2
    assert report.lookalikes == []
    assert "note:" not in report.text()


def test_a_note_about_two_sizes_that_can_differ_says_how(here):
    source = (
        BATCH_WORDS.replace("# (B * T, C)", "# (B * T, n_embd)")
        .replace("B, T, C = x.shape", "B, T, C = x.shape\n        n = 20")
        .replace("# [batch_size, T, C]", "# [batch_size, T, n]")
    )
    write(here, "block.py", source)
    report = check("block.py::Block")
    assert report.lookalikes == [("n", "n_embd")]
    assert report.text().splitlines()[-2] == (
        "note: n and n_embd had the same size where the comments use them, so a comment "
        "that swaps them passes: give them different sizes (--init, --input or --sizes)"
    )
