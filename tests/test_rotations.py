"""``MHA(rope=...)`` called with ``rotations=`` (a model's cos and sin, computed once for all its
layers) equals the call with ``positions``; a wrong pair is an error that says what it must be."""

from __future__ import annotations

import re

import pytest
import torch

from mha.full import MHA, KVCache
from mha.rope import RotaryEmbedding


def layer():
    torch.manual_seed(0)
    return MHA(32, 4, kv_heads=2, rope=RotaryEmbedding(8, base=500.0)).double().eval()


@pytest.mark.parametrize("shape", ["q_len", "batch", "one"])
def test_rotations_equal_the_positions_they_were_made_from(shape):
    m = layer()
    x = torch.randn(2, 5, 32, dtype=torch.float64)
    positions = {
        "q_len": torch.arange(3, 8),
        "batch": torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]]),
        "one": torch.arange(2, 7)[None],
    }[shape]
    want = m(x, is_causal=True, positions=positions)
    got = m(x, is_causal=True, rotations=m.rope(positions))
    assert torch.equal(got, want)


def test_rotations_with_a_cache_continue_as_positions_do():
    m = layer()
    x = torch.randn(1, 6, 32, dtype=torch.float64)
    a, b = KVCache(), KVCache()
    with torch.no_grad():
        for s, e in [(0, 4), (4, 5), (5, 6)]:
            at = torch.arange(s, e)
            assert torch.equal(
                m(x[:, s:e], is_causal=True, cache=b, rotations=m.rope(at)),
                m(x[:, s:e], is_causal=True, cache=a, positions=at),
            )


@pytest.mark.parametrize(
    ("rotations", "error", "message"),
    [
        (lambda m: m.rope(torch.arange(4)), ValueError, "got [4, 8] and [4, 8]"),
        (lambda m: (torch.zeros(5, 8),), TypeError, "rotations must be (cos, sin)"),
        (lambda m: (torch.zeros(5, 8), torch.zeros(5, 6)), ValueError, "got [5, 8] and [5, 6]"),
        (lambda m: (torch.zeros(5, 8, dtype=torch.long),) * 2, TypeError, "floating-point"),
    ],
)
def test_a_wrong_pair_is_named(rotations, error, message):
    m = layer()
    with pytest.raises(error, match=re.escape(message)):
        m(torch.randn(1, 5, 32, dtype=torch.float64), is_causal=True, rotations=rotations(m))


def test_rotations_need_a_rope_and_exclude_positions():
    x = torch.randn(1, 5, 32)
    with pytest.raises(ValueError, match="this MHA has no rope"):
        MHA(32, 4)(x, rotations=(torch.zeros(5, 8), torch.zeros(5, 8)))
    m = MHA(32, 4, rope=RotaryEmbedding(8))
    with pytest.raises(ValueError, match="not both"):
        m(x, positions=torch.arange(5), rotations=m.rope(torch.arange(5)))
