"""Masks that pass every check and are still, most likely, wrong get a warning with the fix
(``mha.checks.MaskWarning``): a float mask of only 0s and 1s (transformers'
``attention_mask.float()``, added to the scores), and a 2-D boolean padding-shaped mask when
``batch_size == q_len`` (a 2-D mask is ``[q_len, k_len]``). The masks that mean what they say
stay silent."""

from __future__ import annotations

import warnings

import pytest
import torch

from mha.checks import MaskWarning
from mha.full import MHA, causal_mask, padding_mask
from mha.mla import MLA

KEEP = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]])  # three rows' keys to attend, 1 = keep


def call(mask, batch=3, module=None):
    torch.manual_seed(0)
    module = module or MHA(8, 2)
    x = torch.randn(batch, 3, module.hidden_size)
    return module(x, attn_mask=mask)


def test_a_float_mask_of_zeros_and_ones_warns_with_the_fix_and_names_the_caller():
    with pytest.warns(MaskWarning, match=r"pass attn_mask\.bool\(\) \(True = may attend\)") as w:
        wrong = call(KEEP.float()[:, None, None, :])  # [batch_size, 1, 1, k_len], added
    assert w[0].filename == __file__  # the warning points at the call, not into mha
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        right = call(KEEP.bool()[:, None, None, :])
    assert not torch.allclose(wrong, right)  # what the warning is about: the two differ


def test_mla_warns_too():
    mla = MLA(8, 2, kv_lora_rank=4, qk_nope_head_dim=4, qk_rope_head_dim=2, v_head_dim=3)
    with pytest.warns(MaskWarning, match="only 0s and 1s"):
        call(KEEP.float()[:, None, None, :], module=mla)


def test_a_two_d_padding_mask_warns_when_the_batch_is_as_long_as_the_queries():
    with pytest.warns(MaskWarning, match=r"looks like a padding mask \[batch_size, k_len\]"):
        call(KEEP.bool())
    with pytest.warns(MaskWarning, match="looks like a padding mask"):  # left padding too
        call(KEEP.bool().flip(-1))


@pytest.mark.parametrize(
    "mask",
    [
        pytest.param(causal_mask(3, 3), id="causal"),
        pytest.param(KEEP.bool()[None, None], id="per-query, said so"),
        pytest.param(padding_mask(torch.tensor([2, 3, 1]), 3), id="padding-4d"),
        pytest.param(torch.zeros(3, 3), id="float-zeros"),
        pytest.param(torch.tensor([[0.0, float("-inf"), 0.0]] * 3), id="float-additive"),
        pytest.param(torch.tensor([[0.0, 1.0, 2.0]] * 3), id="float-bias"),
        pytest.param(torch.ones(3, 3, dtype=torch.bool), id="all-true"),
    ],
)
def test_masks_that_mean_what_they_say_stay_silent(mask):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        call(mask)


def test_a_two_d_mask_is_not_suspect_when_the_batch_differs():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        call(KEEP.bool(), batch=2)


def test_a_compiled_call_neither_warns_nor_breaks_the_graph():
    model = MHA(8, 2).eval()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled(torch.randn(3, 3, 8), attn_mask=KEEP.float()[:, None, None, :])
