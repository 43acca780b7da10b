"""The scale of the scores: ``forward`` divides by ``math.sqrt(head_size)``, a Python float.

These tests are about ``mha``'s forward, not about how a given torch build rounds ``torch.sqrt``
(the site's Pitfalls page reports that measurement, with its condition). They check that our
forward runs neither of the design's per-call ``torch.tensor`` and ``torch.sqrt``, that its scale
is the exact square root (visible in float64), and that a design checkpoint gives the same
float32 output up to float32 rounding for every head size 1..128.
"""

from __future__ import annotations

import pytest
import torch
from support import TEXTBOOK, DesignMHA, assert_close, each_implementation, reference_attention

impls = each_implementation(TEXTBOOK)


def recording(monkeypatch, name: str) -> list:
    """Replace ``torch.<name>`` by a wrapper that records its calls; return the record."""
    calls: list = []
    real = getattr(torch, name)
    monkeypatch.setattr(torch, name, lambda *a, **k: calls.append(a) or real(*a, **k))
    return calls


@impls
def test_forward_calls_neither_torch_tensor_nor_torch_sqrt(MHA, monkeypatch):
    model, x = MHA(20, 4), torch.randn(2, 3, 20)
    tensor_calls = recording(monkeypatch, "tensor")
    sqrt_calls = recording(monkeypatch, "sqrt")
    model(x)
    assert (tensor_calls, sqrt_calls) == ([], [])


@impls
@pytest.mark.parametrize("head_size", [2, 3, 5, 96])
def test_in_float64_the_output_matches_a_reference_with_the_exact_scale(MHA, head_size):
    # The reference lets F.scaled_dot_product_attention scale by 1 / sqrt(head_size) in float64:
    # a float32-rounded scale would be off by about 1e-8 relative, far above this tolerance.
    torch.manual_seed(head_size)
    model = MHA(2 * head_size, 2).double()
    x = torch.randn(2, 3, 2 * head_size, dtype=torch.float64)
    assert_close(model(x), reference_attention(model, x))


@impls
def test_a_design_checkpoint_gives_the_same_float32_output_up_to_rounding(MHA):
    for head_size in range(1, 129):
        torch.manual_seed(head_size)
        design = DesignMHA(2 * head_size, 2)
        ours = MHA(2 * head_size, 2)
        ours.load_state_dict(design.state_dict())
        x = torch.randn(2, 3, 2 * head_size)
        assert_close(ours(x), design(x), msg=f"head_size {head_size}")
