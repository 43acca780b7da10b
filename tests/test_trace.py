"""The recorder (``mha/trace.py``) reports what the forward pass really did.

Every step whose statement carries a shape comment in ``mha/annotated.py`` is recorded with the
shape that comment states (the comments are checked against a real run by
``mha_site.checkers.shape_comments``), for several all-different size sets; the views, copies and
contiguity it reports agree with what PyTorch says of the tensors; and it records the pure and
full versions too. The pieces the checker is built on are checked here too: comments read as
comments, every method's frame traced, the lines before a crash kept.
"""

from __future__ import annotations

import pytest
import torch
from support import design_sizes

import mha.annotated
import mha.full
import mha.pure
from mha.trace import assignments, dims_of, named_sizes, record, shape_comments, trace_locals

SIZE_SETS = [(2, 3, 4, 5), (3, 5, 2, 7), (1, 6, 3, 2)]


def run(cls, sizes):
    batch_size, seq_len, heads_num, head_size = sizes
    torch.manual_seed(0)
    model = cls(heads_num * head_size, heads_num)
    return record(model, torch.randn(batch_size, seq_len, heads_num * head_size))


@pytest.mark.parametrize("sizes", SIZE_SETS, ids=str)
def test_every_commented_step_has_the_shape_its_comment_states(sizes):
    names = design_sizes(*sizes)
    commented = [s for s in run(mha.annotated.MHA, sizes) if s.comment]
    assert len(commented) == 14  # q, k, v; 3 views; 3 transposes; qk, attn, out x3
    for step in commented:
        assert step.shape == tuple(names[d] for d in step.comment), step


@pytest.mark.parametrize("sizes", SIZE_SETS, ids=str)
def test_annotated_and_pure_record_the_same_tensors(sizes):
    annotated = [(s.shape, s.stride, s.kind) for s in run(mha.annotated.MHA, sizes)]
    pure = [(s.shape, s.stride, s.kind) for s in run(mha.pure.MHA, sizes)]
    assert sorted(annotated) == sorted(pure)


def test_views_copies_and_contiguity_are_reported_as_pytorch_sees_them():
    steps = run(mha.annotated.MHA, (2, 3, 4, 5))
    by_expression = {s.expression: s for s in steps}
    q_view = by_expression["q.view(q.size(0), q.size(1), self.heads_num, self.head_size)"]
    assert (q_view.kind, q_view.contiguous, q_view.stride) == ("view", True, (60, 20, 5, 1))
    q_t = by_expression["q.transpose(1, 2)"]
    assert (q_t.kind, q_t.contiguous, q_t.stride) == ("view", False, (60, 5, 20, 1))
    copy = by_expression["out.transpose(1, 2).contiguous()"]
    assert (copy.kind, copy.contiguous, copy.stride) == ("copy", True, (60, 20, 5, 1))
    merged = steps[-2]
    assert (merged.target, merged.kind, merged.shape) == ("out", "view", (2, 3, 20))


def test_with_one_position_contiguous_copies_nothing():
    # seq_len 1: the transposed tensor is already contiguous, so .contiguous() returns it.
    steps = run(mha.annotated.MHA, (2, 1, 4, 5))
    copy = next(s for s in steps if s.expression == "out.transpose(1, 2).contiguous()")
    assert (copy.kind, copy.contiguous) == ("view", True)


def test_full_with_a_cache_records_the_cached_length():
    torch.manual_seed(0)
    model = mha.full.MHA(20, 4, kv_heads=2)
    cache = mha.full.KVCache()
    model(torch.randn(2, 3, 20), cache=cache)
    steps = record(model, torch.randn(2, 1, 20), is_causal=True, cache=cache)
    keys = next(s for s in steps if s.expression == "cache.keys")
    assert (keys.target, keys.shape) == ("k", (2, 2, 4, 5))
    assert len(cache) == 4


def test_dims_of_names_each_dimension_or_gives_up_when_sizes_repeat():
    names = design_sizes(2, 3, 4, 5)
    assert dims_of((2, 4, 3, 5), names) == ("batch_size", "heads_num", "seq_len", "head_size")
    assert dims_of((2, 7), names) is None
    assert dims_of((2, 4), design_sizes(2, 4, 4, 5)) is None


def test_named_sizes_are_the_annotated_comments_names():
    model, x = mha.annotated.MHA(20, 4), torch.randn(2, 3, 20)
    assert named_sizes(model, x) == design_sizes(2, 3, 4, 5)


def test_a_shape_comment_is_a_comment_not_text_in_a_string():
    source = 'a = f(x)  # [batch_size, seq_len]\nb = "# [heads_num]"\nc = g(a)  # not a shape\n'
    assert shape_comments(source) == {1: ("batch_size", "seq_len")}


SOURCE = """\
class M:
    def __init__(self):
        self.w = 2  # [not, a, local]

    def forward(self, x):
        y = x * self.w  # [batch_size]
        n, m = y.size(0), 1
        # [a comment on no assignment]
        return self._twice(y)

    def _twice(self, y):
        z = y + y
        return z.view(-1, 1)  # [batch_size, 1]
"""


def test_assignments_of_every_method_but_init_with_their_comments_and_the_stray_ones():
    found, stray = assignments(SOURCE, "M")
    assert [(a.targets, a.first_line, a.comment) for a in found] == [
        (("y",), 6, ("batch_size",)),
        (("n", "m"), 7, None),
        (("z",), 12, None),
    ]
    assert stray == {8: ("a comment on no assignment",), 13: ("batch_size", "1")}


def test_trace_locals_follows_every_method_and_keeps_the_lines_before_a_crash():
    namespace: dict = {}
    exec(compile(SOURCE, "<M>", "exec"), namespace)
    model = namespace["M"]()
    executed, error = trace_locals(type(model), lambda: model.forward(torch.zeros(3)))
    assert error is None
    after = dict(executed)
    assert after[6] == {"x": (3,), "y": (3,)}  # forward's frame
    assert after[12] == {"y": (3,), "z": (3,)}  # _twice's, called from forward
    executed, error = trace_locals(type(model), lambda: model.forward(None))
    assert isinstance(error, TypeError), error
    assert executed == []  # line 6 raised: it never completed
