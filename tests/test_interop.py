"""``to_torch`` and ``from_torch`` move weights between ``mha`` and ``nn.MultiheadAttention``
exactly, and refuse, by name, every option of PyTorch's module that MHA does not have.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st

import mha.annotated
import mha.pure
from mha.interop import from_torch, to_torch

IMPLEMENTATIONS = [mha.annotated.MHA, mha.pure.MHA]
IMPL_IDS = ["annotated", "pure"]
impls = pytest.mark.parametrize("MHA", IMPLEMENTATIONS, ids=IMPL_IDS)

PROPERTY = settings(deadline=None, max_examples=25)
sizes = st.tuples(st.integers(1, 6), st.integers(1, 8))  # heads_num, head_size


def bitwise_equal_state_dicts(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def model_of(MHA, heads_num=4, head_size=5, seed=0):
    torch.manual_seed(seed)
    return MHA(heads_num * head_size, heads_num)


# ---- Exact round trips ------------------------------------------------------------------------


@impls
@PROPERTY
@given(size=sizes, seed=st.integers(0, 2**16))
def test_to_torch_then_from_torch_gives_back_the_same_state_dict_bitwise(MHA, size, seed):
    model = model_of(MHA, *size, seed=seed)
    back = from_torch(to_torch(model))
    assert isinstance(back, mha.pure.MHA)
    assert (back.hidden_size, back.heads_num, back.head_size) == (
        model.hidden_size,
        model.heads_num,
        model.head_size,
    )
    assert bitwise_equal_state_dicts(back.state_dict(), model.state_dict())


@PROPERTY
@given(size=sizes, seed=st.integers(0, 2**16), batch_first=st.booleans())
def test_from_torch_then_to_torch_gives_back_the_same_state_dict_bitwise(size, seed, batch_first):
    heads_num, head_size = size
    torch.manual_seed(seed)
    t = nn.MultiheadAttention(heads_num * head_size, heads_num, batch_first=batch_first)
    with torch.no_grad():  # PyTorch initialises the biases to 0: make them tell apart
        t.in_proj_bias.normal_()
        t.out_proj.bias.normal_()
    again = to_torch(from_torch(t), batch_first=batch_first)
    assert bitwise_equal_state_dicts(again.state_dict(), t.state_dict())


@impls
def test_to_torch_stacks_q_k_v_in_that_order(MHA):
    model = model_of(MHA)
    t = to_torch(model)
    h = model.hidden_size
    assert torch.equal(t.in_proj_weight[:h], model.W_q.weight)
    assert torch.equal(t.in_proj_weight[h : 2 * h], model.W_k.weight)
    assert torch.equal(t.in_proj_weight[2 * h :], model.W_v.weight)
    assert torch.equal(t.in_proj_bias, torch.cat([model.W_q.bias, model.W_k.bias, model.W_v.bias]))
    assert torch.equal(t.out_proj.weight, model.W_o.weight)
    assert torch.equal(t.out_proj.bias, model.W_o.bias)


@impls
def test_to_torch_copies_so_the_two_modules_share_no_storage(MHA):
    model = model_of(MHA)
    t = to_torch(model)
    with torch.no_grad():
        t.out_proj.weight.zero_()
    assert model.W_o.weight.abs().sum() > 0


@impls
def test_to_torch_gives_batch_first_module_with_the_same_sizes(MHA):
    t = to_torch(model_of(MHA))
    assert (t.embed_dim, t.num_heads, t.head_dim, t.batch_first) == (20, 4, 5, True)
    assert t.dropout == 0.0


# ---- batch_first=False ------------------------------------------------------------------------


@impls
def test_batch_first_false_has_the_same_weights(MHA):
    model = model_of(MHA)
    first, second = to_torch(model), to_torch(model, batch_first=False)
    assert second.batch_first is False
    assert bitwise_equal_state_dicts(first.state_dict(), second.state_dict())


@impls
def test_batch_first_false_takes_seq_len_first_and_gives_the_same_output(MHA):
    model = model_of(MHA)
    t = to_torch(model, batch_first=False)
    x = torch.randn(2, 3, 20)  # [batch_size, seq_len, hidden_size]
    xt = x.transpose(0, 1)  # [seq_len, batch_size, hidden_size]
    out = t(xt, xt, xt, need_weights=False)[0].transpose(0, 1)
    assert torch.equal(out, to_torch(model)(x, x, x, need_weights=False)[0])
    torch.testing.assert_close(out, model(x), atol=1e-5, rtol=0)


def test_from_torch_maps_a_batch_first_false_module_to_a_batch_first_mha():
    torch.manual_seed(0)
    t = nn.MultiheadAttention(20, 4)  # batch_first=False by default
    model = from_torch(t)
    x = torch.randn(2, 3, 20)
    xt = x.transpose(0, 1)
    expected = t(xt, xt, xt, need_weights=False)[0].transpose(0, 1)
    torch.testing.assert_close(model(x), expected, atol=1e-5, rtol=0)


# ---- Options MHA does not have ----------------------------------------------------------------

UNMAPPABLE = [
    pytest.param(dict(kdim=10, vdim=12), "kdim=10, vdim=12", id="kdim-vdim"),
    pytest.param(dict(bias=False), "bias=False", id="bias"),
    pytest.param(dict(add_bias_kv=True), "add_bias_kv=True", id="add_bias_kv"),
    pytest.param(dict(add_zero_attn=True), "add_zero_attn=True", id="add_zero_attn"),
    pytest.param(dict(dropout=0.1), "dropout=0.1", id="dropout"),
]


@pytest.mark.parametrize(("options", "named"), UNMAPPABLE)
def test_from_torch_refuses_an_option_mha_lacks_and_names_it(options, named):
    t = nn.MultiheadAttention(20, 4, batch_first=True, **options)
    with pytest.raises(ValueError, match=re.escape(named)) as e:
        from_torch(t)
    assert str(e.value).startswith("cannot map t: ")
    assert "expected" in str(e.value)


def test_from_torch_names_every_unmappable_option_at_once():
    t = nn.MultiheadAttention(20, 4, bias=False, add_zero_attn=True, dropout=0.5)
    with pytest.raises(ValueError) as e:
        from_torch(t)
    for named in ("bias=False", "add_zero_attn=True", "dropout=0.5"):
        assert named in str(e.value)


def test_from_torch_accepts_kdim_and_vdim_equal_to_embed_dim():
    # Explicit kdim = vdim = embed_dim still gives one in_proj_weight: nothing to refuse.
    t = nn.MultiheadAttention(20, 4, kdim=20, vdim=20)
    assert from_torch(t).hidden_size == 20


@pytest.mark.parametrize(
    "not_mha",
    [nn.Linear(20, 20), nn.TransformerEncoderLayer(20, 4), None, "MultiheadAttention"],
    ids=["Linear", "TransformerEncoderLayer", "None", "str"],
)
def test_from_torch_refuses_anything_but_multihead_attention(not_mha):
    expected = f"t must be a torch.nn.MultiheadAttention, got {type(not_mha).__name__}"
    with pytest.raises(TypeError, match=re.escape(expected)):
        from_torch(not_mha)


@pytest.mark.parametrize(
    "not_mha",
    [nn.Linear(20, 20), nn.MultiheadAttention(20, 4), None],
    ids=["Linear", "MultiheadAttention", "None"],
)
def test_to_torch_refuses_anything_but_an_mha_and_names_what_is_missing(not_mha):
    with pytest.raises(TypeError, match=re.escape(f"got {type(not_mha).__name__} without [")):
        to_torch(not_mha)


@impls
def test_to_torch_refuses_linear_layers_without_bias(MHA):
    model = model_of(MHA)
    model.W_k = nn.Linear(20, 20, bias=False)
    with pytest.raises(TypeError, match=re.escape("nn.Linear layers with bias")):
        to_torch(model)


# ---- dtype and device -------------------------------------------------------------------------

DEVICES = [
    "cpu",
    "meta",  # no data: shows the device is carried without needing an accelerator
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
    ),
]


@impls
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_to_torch_keeps_the_dtype(MHA, dtype):
    t = to_torch(model_of(MHA).to(dtype))
    assert {p.dtype for p in t.parameters()} == {dtype}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_from_torch_keeps_the_dtype(dtype):
    model = from_torch(nn.MultiheadAttention(20, 4, dtype=dtype))
    assert {p.dtype for p in model.parameters()} == {dtype}


def test_float64_round_trip_is_exact_and_computes_in_float64():
    model = model_of(mha.pure.MHA).double()
    back = from_torch(to_torch(model))
    assert bitwise_equal_state_dicts(back.state_dict(), model.state_dict())
    x = torch.randn(2, 3, 20, dtype=torch.float64)
    out = to_torch(model)(x, x, x, need_weights=False)[0]
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, model(x), atol=1e-10, rtol=0)


@impls
@pytest.mark.parametrize("device", DEVICES)
def test_to_torch_keeps_the_device(MHA, device):
    t = to_torch(model_of(MHA).to(device))
    assert {p.device.type for p in t.parameters()} == {device}


@pytest.mark.parametrize("device", DEVICES)
def test_from_torch_keeps_the_device(device):
    model = from_torch(nn.MultiheadAttention(20, 4, device=device))
    assert {p.device.type for p in model.parameters()} == {device}
