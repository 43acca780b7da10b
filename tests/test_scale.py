"""The scale: the design post divides by ``torch.sqrt(torch.tensor(head_size, dtype=float32))``, a
new float32 tensor on every call; we divide by ``math.sqrt(head_size)``, a Python float (double
precision, correctly rounded), and make no tensor for it.

The two agree exactly for perfect squares and differ by at most one float32 ulp otherwise, so the
float32 outputs are the same except for a last-bit difference at a few head sizes; in float64 the
design's float32 rounding becomes visible and ours matches the reference.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import DesignMHA, design_scale, exact_scale, reference_attention

import mha.annotated
import mha.pure

HEAD_SIZES = range(1, 129)
SQUARES = [d for d in HEAD_SIZES if math.isqrt(d) ** 2 == d]
NON_SQUARES = [d for d in HEAD_SIZES if d not in SQUARES]


def float32_ulp(value: float) -> float:
    """The gap between ``value`` (a float32) and the next float32 away from zero."""
    return float(np.spacing(np.float32(value)))


def test_squares_up_to_128_are_the_eleven_expected():
    assert SQUARES == [1, 4, 9, 16, 25, 36, 49, 64, 81, 100, 121]


@pytest.mark.parametrize("head_size", SQUARES)
def test_design_scale_is_exact_for_perfect_squares(head_size):
    assert design_scale(head_size).item() == exact_scale(head_size) == math.isqrt(head_size)


def test_design_scale_is_inexact_for_every_non_square_head_size_up_to_128():
    inexact = [d for d in NON_SQUARES if design_scale(d).item() != exact_scale(d)]
    assert inexact == NON_SQUARES


def test_design_scale_is_within_one_float32_ulp_of_the_exact_scale():
    for d in HEAD_SIZES:
        scale32 = design_scale(d).item()
        assert abs(scale32 - exact_scale(d)) <= float32_ulp(scale32), d


def test_design_scale_for_head_size_96_is_off_by_3_6e_minus_7():
    # 96 = 768 / 8: the head size of BERT-base-sized models with 8 heads.
    diff = design_scale(96).item() - math.sqrt(96)
    assert diff == pytest.approx(3.5657e-7, rel=1e-3)
    assert diff < float32_ulp(math.sqrt(96)) / 2 + 1e-12


def test_design_scale_is_a_float32_tensor_and_ours_a_python_float():
    assert design_scale(96).dtype == torch.float32
    assert type(exact_scale(96)) is float


@pytest.mark.parametrize("MHA", [mha.annotated.MHA, mha.pure.MHA], ids=["annotated", "pure"])
def test_forward_makes_no_tensor_for_the_scale(MHA, monkeypatch):
    made = []
    real_tensor = torch.tensor
    monkeypatch.setattr(torch, "tensor", lambda *a, **k: made.append(a) or real_tensor(*a, **k))
    MHA(20, 4)(torch.randn(2, 3, 20))
    assert made == []


def test_design_post_forward_makes_a_new_scale_tensor_on_every_call(monkeypatch):
    model, x = DesignMHA(20, 4), torch.randn(2, 3, 20)
    made = []
    real_tensor = torch.tensor
    monkeypatch.setattr(torch, "tensor", lambda *a, **k: made.append(a) or real_tensor(*a, **k))
    model(x)
    model(x)
    assert made == [(5,), (5,)]


def outputs(head_size: int, dtype: torch.dtype, heads_num: int = 2):
    """Design's output and ours for the same weights and input."""
    torch.manual_seed(head_size)
    design = DesignMHA(heads_num * head_size, heads_num).to(dtype)
    ours = mha.pure.MHA(heads_num * head_size, heads_num).to(dtype)
    ours.load_state_dict(design.state_dict())
    x = torch.randn(2, 3, heads_num * head_size, dtype=dtype)
    return design(x), ours(x), reference_attention(ours, x)


def test_outputs_of_both_scales_agree_within_float32_rounding_for_head_sizes_1_to_128():
    differing = []
    for d in HEAD_SIZES:
        theirs, ours, _ = outputs(d, torch.float32)
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6, msg=f"head_size {d}")
        if not torch.equal(ours, theirs):
            differing.append(d)
    # Not vacuous: for some head sizes the two scales round to different float32 numbers and the
    # outputs are not bitwise equal -- yet still within float32 rounding.
    assert differing, "expected some head sizes where the outputs differ in the last bits"
    assert not set(differing) & set(SQUARES)


def test_in_float64_our_scale_matches_the_reference_and_the_designs_does_not():
    theirs, ours, reference = outputs(96, torch.float64)
    torch.testing.assert_close(ours, reference, atol=1e-12, rtol=0)
    assert (theirs - reference).abs().max() > 1e-10
    torch.testing.assert_close(theirs, reference, atol=1e-6, rtol=0)  # float32-rounding sized
