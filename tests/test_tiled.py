"""``mha.tiled``: attention one block of keys at a time equals the attention of the whole matrix.

Against ``scaled_dot_product_attention`` with the same (lower-right aligned) causal mask written
as a boolean mask, over drawn shapes and block sizes that do not divide the lengths; the
log-sum-exp against ``torch.logsumexp`` of the masked scores; ``merge`` of any split of the keys
against the whole; queries that see no key; and clear errors.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from support import assert_close, dtypes, seeds

from mha.full import causal_mask
from mha.tiled import TiledAttention, merge


def inputs(seed, b, h, q_len, k_len, d, dv, dtype):
    torch.manual_seed(seed)
    q = torch.randn(b, h, q_len, d, dtype=dtype)
    k = torch.randn(b, h, k_len, d, dtype=dtype)
    v = torch.randn(b, h, k_len, dv, dtype=dtype)
    return q, k, v


@given(
    seed=seeds,
    b=st.integers(1, 2),
    h=st.integers(1, 3),
    q_len=st.integers(1, 9),
    extra=st.integers(0, 9),
    d=st.integers(1, 6),
    dv=st.integers(1, 6),
    block=st.integers(1, 7),
    is_causal=st.booleans(),
    dtype=dtypes,
)
def test_tiled_equals_sdpa_and_its_lse_the_scores_logsumexp(
    seed, b, h, q_len, extra, d, dv, block, is_causal, dtype
):
    k_len = q_len + extra  # a cache's keys: as many as the queries, or more
    q, k, v = inputs(seed, b, h, q_len, k_len, d, dv, dtype)
    out, lse = TiledAttention(block)(q, k, v, is_causal=is_causal)
    mask = causal_mask(q_len, k_len) if is_causal else None
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    assert_close(lse, torch.logsumexp(scores, dim=-1))


@given(seed=seeds, k_len=st.integers(2, 12), cut=st.integers(1, 11), dtype=dtypes)
def test_merge_of_any_split_of_the_keys_is_the_whole(seed, k_len, cut, dtype):
    cut = min(cut, k_len - 1)
    q, k, v = inputs(seed, 2, 2, 5, k_len, 4, 3, dtype)
    tiled = TiledAttention(3)
    whole = tiled(q, k, v)
    parts = tiled(q, k[:, :, :cut], v[:, :, :cut]), tiled(q, k[:, :, cut:], v[:, :, cut:])
    out, lse = merge(*parts[0], *parts[1])
    assert_close(out, whole[0])
    assert_close(lse, whole[1])


def test_a_query_that_sees_no_key_gets_zero_and_minus_infinity():
    # 5 queries, 3 keys, causal aligned to the lower right: queries 0 and 1 see nothing
    q, k, v = inputs(0, 1, 2, 5, 3, 4, 4, torch.float64)
    out, lse = TiledAttention(2)(q, k, v, is_causal=True)
    assert torch.equal(out[:, :, :2], torch.zeros(1, 2, 2, 4, dtype=torch.float64))
    assert torch.isneginf(lse[:, :, :2]).all() and torch.isfinite(lse[:, :, 2:]).all()
    # merged with a part that sees something, the empty part weighs nothing
    other = TiledAttention(2)(q, k, v)
    merged, _ = merge(out, lse, *other)
    assert_close(merged[:, :, :2], other[0][:, :, :2])


def test_half_precision_inputs_are_summed_in_float32():
    q, k, v = inputs(1, 1, 2, 4, 6, 8, 8, torch.bfloat16)
    out, lse = TiledAttention(4)(q, k, v)
    assert out.dtype == lse.dtype == torch.float32
    exact = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
    assert_close(out, exact)


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="block_size must be a positive int, got 0"):
        TiledAttention(0)
    q, k, v = inputs(0, 1, 2, 3, 4, 5, 5, torch.float32)
    with pytest.raises(ValueError, match=r"q, k, v must be .* got \[1, 2, 3, 5\], \[1, 2, 4, 4\]"):
        TiledAttention()(q, k[..., :4], v)
    with pytest.raises(TypeError, match="is_causal must be a bool"):
        TiledAttention()(q, k, v, is_causal=1)


@pytest.mark.parametrize(
    ("scale", "error", "message"),
    [
        (True, TypeError, "scale must be a float, got bool (True)"),
        ("x", TypeError, "scale must be a float, got str ('x')"),
        (0.0, ValueError, "scale must be positive, got 0.0"),
        (-0.5, ValueError, "scale must be positive, got -0.5"),
    ],
)
def test_a_bad_scale_is_refused_by_name(scale, error, message):
    q, k, v = inputs(0, 1, 2, 3, 4, 5, 5, torch.float32)
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        TiledAttention()(q, k, v, scale=scale)


def test_a_given_scale_is_used():
    q, k, v = inputs(0, 1, 2, 3, 4, 5, 5, torch.float64)
    out, _ = TiledAttention(3)(q, k, v, scale=0.25)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.25))
    out, _ = TiledAttention(3)(q, k, v, scale=2)  # an int is a number too
    assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=2.0))


@pytest.mark.parametrize("name", ["q", "k", "v"])
def test_integer_inputs_are_refused_by_name(name):
    q, k, v = inputs(0, 1, 2, 3, 4, 5, 5, torch.float32)
    given = {"q": q, "k": k, "v": v}
    given[name] = given[name].round().to(torch.int64)
    message = f"{name} must be a floating-point tensor, got torch.int64"
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        TiledAttention()(*given.values())
