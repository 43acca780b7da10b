"""``to_torch`` and ``from_torch`` move weights between ``mha`` and ``nn.MultiheadAttention``
exactly, and refuse, by name, every option one side has and the other does not.

The full MHA maps both ways with its ``bias`` and ``dropout``; its outputs equal PyTorch's with the
masks converted (ours: ``True`` = may attend; theirs: ``True`` = blocked), for self- and
cross-attention. Grouped-query attention (``kv_heads < heads_num``) has no counterpart.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn
from hypothesis import given
from hypothesis import strategies as st
from support import IMPLEMENTATIONS, assert_close, each_implementation, seeds

import mha.annotated
import mha.full
import mha.pure
from mha.full import causal_mask, padding_mask
from mha.interop import TO_TORCH_REFUSES, from_torch, to_torch
from mha_site.checkers import options as options_checker

impls = each_implementation(IMPLEMENTATIONS)
sizes = st.tuples(st.integers(1, 6), st.integers(1, 8))  # heads_num, head_size


def bitwise_equal_state_dicts(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def model_of(MHA, heads_num=4, head_size=5, seed=0):
    torch.manual_seed(seed)
    return MHA(heads_num * head_size, heads_num)


# ---- Exact round trips ------------------------------------------------------------------------


@impls
@given(size=sizes, seed=seeds)
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


@given(size=sizes, seed=seeds, batch_first=st.booleans())
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
    assert_close(out, model(x))


def test_from_torch_maps_a_batch_first_false_module_to_a_batch_first_mha():
    torch.manual_seed(0)
    t = nn.MultiheadAttention(20, 4)  # batch_first=False by default
    model = from_torch(t)
    x = torch.randn(2, 3, 20)
    xt = x.transpose(0, 1)
    expected = t(xt, xt, xt, need_weights=False)[0].transpose(0, 1)
    assert_close(model(x), expected)


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


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(bias=False), "bias=False (the pure MHA's linear layers always have a bias; "),
        (dict(dropout=0.1), "dropout=0.1 (the pure MHA has no dropout; "),
    ],
    ids=["bias", "dropout"],
)
def test_from_torch_says_full_true_maps_what_the_pure_mha_lacks(options, message):
    with pytest.raises(ValueError) as e:
        from_torch(nn.MultiheadAttention(20, 4, **options))
    assert message + "from_torch(t, full=True) maps it), expected " in str(e.value), e.value


FULL_UNMAPPABLE = [
    param for param in UNMAPPABLE if param.id in ("kdim-vdim", "add_bias_kv", "add_zero_attn")
] + [pytest.param(dict(dropout=1.0), "dropout=1.0, expected 0 <= dropout < 1", id="dropout-1")]


@pytest.mark.parametrize(("options", "named"), FULL_UNMAPPABLE)
def test_from_torch_full_refuses_an_option_the_full_mha_lacks_and_names_it(options, named):
    t = nn.MultiheadAttention(20, 4, batch_first=True, **options)
    with pytest.raises(ValueError, match=re.escape(named)) as e:
        from_torch(t, full=True)
    assert str(e.value).startswith("cannot map t: "), e.value
    assert "expected" in str(e.value)


def test_from_torch_full_names_every_unmappable_option_at_once():
    t = nn.MultiheadAttention(20, 4, kdim=10, vdim=12, add_bias_kv=True, add_zero_attn=True)
    with pytest.raises(ValueError) as e:
        from_torch(t, full=True)
    for named in ("kdim=10, vdim=12", "add_bias_kv=True", "add_zero_attn=True"):
        assert named in str(e.value), e.value


def test_from_torch_refuses_a_half_removed_bias():
    t = nn.MultiheadAttention(20, 4)
    t.out_proj.bias = None
    expected = "in_proj_bias is set but out_proj.bias is None, expected both set"
    with pytest.raises(ValueError, match=re.escape(expected)):
        from_torch(t, full=True)


@pytest.mark.parametrize("full", [1, None, "yes"])
def test_from_torch_refuses_a_full_that_is_not_a_bool(full):
    expected = f"full must be a bool, got {type(full).__name__} ({full!r})"
    with pytest.raises(TypeError, match=re.escape(expected)):
        from_torch(nn.MultiheadAttention(20, 4), full=full)


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
def test_to_torch_refuses_some_linear_layers_with_a_bias_and_some_without(MHA):
    model = model_of(MHA)
    model.W_k = nn.Linear(20, 20, bias=False)
    expected = "cannot map m: a bias on W_q, W_v, W_o but none on W_k; nn.MultiheadAttention"
    with pytest.raises(ValueError, match=re.escape(expected)):
        to_torch(model)


@impls
def test_to_torch_refuses_a_layer_that_is_not_linear_and_names_it(MHA):
    model = model_of(MHA)
    model.W_o = nn.Identity()
    with pytest.raises(TypeError, match=re.escape("got m.W_o is Identity")):
        to_torch(model)


@impls
def test_to_torch_refuses_a_linear_layer_of_another_shape_and_names_it(MHA):
    model = model_of(MHA)
    model.W_v = nn.Linear(20, 10)
    expected = (
        "cannot map m: every linear layer must be [hidden_size, hidden_size] = [20, 20], "
        "got W_v.weight is [10, 20]"
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        to_torch(model)


def test_to_torch_refuses_a_dropout_that_is_not_a_number():
    model = model_of(mha.pure.MHA)
    model.dropout = nn.Dropout(0.1)
    with pytest.raises(TypeError, match=re.escape("m.dropout must be a float, got Dropout")):
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
    assert_close(out, model(x))


@impls
@pytest.mark.parametrize("device", DEVICES)
def test_to_torch_keeps_the_device(MHA, device):
    t = to_torch(model_of(MHA).to(device))
    assert {p.device.type for p in t.parameters()} == {device}


@pytest.mark.parametrize("device", DEVICES)
def test_from_torch_keeps_the_device(device):
    model = from_torch(nn.MultiheadAttention(20, 4, device=device))
    assert {p.device.type for p in model.parameters()} == {device}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_from_torch_full_keeps_the_dtype(dtype):
    model = from_torch(nn.MultiheadAttention(20, 4, bias=False, dtype=dtype), full=True)
    assert {p.dtype for p in model.parameters()} == {dtype}


@pytest.mark.parametrize("device", DEVICES)
def test_from_torch_full_keeps_the_device(device):
    model = from_torch(nn.MultiheadAttention(20, 4, device=device), full=True)
    assert {p.device.type for p in model.parameters()} == {device}


# ---- The full MHA: bias, dropout, mode --------------------------------------------------------


def full_model(heads_num=4, head_size=5, seed=0, **options):
    torch.manual_seed(seed)
    return mha.full.MHA(heads_num * head_size, heads_num, **options)


@given(
    size=sizes,
    seed=seeds,
    bias=st.booleans(),
    dropout=st.sampled_from([0.0, 0.1, 0.5]),
)
def test_full_to_torch_then_from_torch_gives_back_the_same_module_bitwise(
    size, seed, bias, dropout
):
    model = full_model(*size, seed=seed, bias=bias, dropout=dropout)
    t = to_torch(model)
    assert (t.dropout, t.in_proj_bias is None, t.out_proj.bias is None) == (
        dropout,
        not bias,
        not bias,
    )
    back = from_torch(t, full=True)
    assert isinstance(back, mha.full.MHA)
    assert (back.hidden_size, back.heads_num, back.kv_heads, back.dropout, back.fast) == (
        model.hidden_size,
        model.heads_num,
        model.heads_num,
        dropout,
        True,
    )
    assert bitwise_equal_state_dicts(back.state_dict(), model.state_dict())


@given(
    size=sizes,
    seed=seeds,
    bias=st.booleans(),
    dropout=st.sampled_from([0.0, 0.1, 0.5]),
    batch_first=st.booleans(),
)
def test_from_torch_full_then_to_torch_gives_back_the_same_module_bitwise(
    size, seed, bias, dropout, batch_first
):
    heads_num, head_size = size
    torch.manual_seed(seed)
    t = nn.MultiheadAttention(
        heads_num * head_size, heads_num, dropout=dropout, bias=bias, batch_first=batch_first
    )
    if bias:
        with torch.no_grad():  # PyTorch initialises the biases to 0: make them tell apart
            t.in_proj_bias.normal_()
            t.out_proj.bias.normal_()
    again = to_torch(from_torch(t, full=True), batch_first=batch_first)
    assert (again.dropout, again.batch_first) == (dropout, batch_first)
    assert bitwise_equal_state_dicts(again.state_dict(), t.state_dict())


def test_full_without_bias_has_no_bias_on_either_side():
    model = full_model(bias=False)
    t = to_torch(model)
    assert sorted(t.state_dict()) == ["in_proj_weight", "out_proj.weight"]
    assert sorted(model.state_dict()) == ["W_k.weight", "W_o.weight", "W_q.weight", "W_v.weight"]


def test_from_torch_full_false_still_gives_the_pure_mha():
    assert type(from_torch(nn.MultiheadAttention(20, 4))) is mha.pure.MHA
    assert type(from_torch(nn.MultiheadAttention(20, 4), full=True)) is mha.full.MHA


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_the_mode_crosses_over_both_ways(training):
    model = full_model(dropout=0.1).train(training)
    t = to_torch(model)
    assert t.training is training
    assert from_torch(t, full=True).training is training
    assert from_torch(to_torch(model_of(mha.pure.MHA).train(training))).training is training


# ---- The full MHA: equal outputs, masks converted ---------------------------------------------


def full_and_torch(fast: bool, bias: bool = True, dropout: float = 0.0):
    model = full_model(bias=bias, dropout=dropout, fast=fast).eval()
    return model, to_torch(model)


paths = pytest.mark.parametrize("fast", [True, False], ids=["fast", "math"])
biases = pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])


def blocked(mask: torch.Tensor) -> torch.Tensor:
    """Our boolean mask (True = may attend) in nn.MultiheadAttention's polarity (True = blocked)."""
    return ~mask


@paths
@biases
def test_full_self_attention_equals_torch(fast, bias):
    model, t = full_and_torch(fast, bias)
    x = torch.randn(2, 3, 20)
    out = t(x, x, x, need_weights=False)[0]
    assert_close(out, model(x))


@paths
def test_full_with_dropout_equals_torch_in_eval_mode(fast):
    # Dropout acts in training mode only, on both sides: in eval mode the outputs agree.
    model, t = full_and_torch(fast, dropout=0.5)
    assert t.training is False
    x = torch.randn(2, 3, 20)
    assert_close(t(x, x, x, need_weights=False)[0], model(x))


@paths
@biases
def test_full_causal_equals_torch_with_the_mask_negated(fast, bias):
    model, t = full_and_torch(fast, bias)
    x = torch.randn(2, 3, 20)
    out = t(x, x, x, attn_mask=blocked(causal_mask(3, 3)), need_weights=False)[0]
    assert_close(out, model(x, is_causal=True))


@paths
def test_full_causal_and_padding_equal_torch_with_both_masks_negated(fast):
    model, t = full_and_torch(fast)
    x = torch.randn(2, 3, 20)
    pad = padding_mask(torch.tensor([3, 2]), 3)  # [batch_size, 1, 1, k_len]
    out = t(
        x,
        x,
        x,
        attn_mask=blocked(causal_mask(3, 3)),  # [q_len, k_len]
        key_padding_mask=blocked(pad[:, 0, 0]),  # [batch_size, k_len]
        need_weights=False,
    )[0]
    expected = model(x, attn_mask=pad, is_causal=True)
    assert_close(out, expected)


@paths
def test_a_per_head_boolean_mask_equals_torchs_3d_mask_negated(fast):
    model, t = full_and_torch(fast)
    x = torch.randn(2, 3, 20)
    mask = torch.rand(2, 4, 3, 3) < 0.5  # [batch_size, heads_num, q_len, k_len]
    mask[..., 0] = True  # every query sees at least one key
    torch_mask = blocked(mask).reshape(2 * 4, 3, 3)  # [batch_size * heads_num, q_len, k_len]
    out = t(x, x, x, attn_mask=torch_mask, need_weights=False)[0]
    assert_close(out, model(x, attn_mask=mask))


@paths
def test_a_float_mask_is_passed_as_it_is(fast):
    # A float mask is added to the scores on both sides: no polarity to convert.
    model, t = full_and_torch(fast)
    x = torch.randn(2, 3, 20)
    mask = torch.randn(3, 3)  # [q_len, k_len]
    mask[0, 1:] = float("-inf")
    out = t(x, x, x, attn_mask=mask, need_weights=False)[0]
    assert_close(out, model(x, attn_mask=mask))


@paths
@biases
def test_full_cross_attention_equals_torch_given_context_as_key_and_value(fast, bias):
    model, t = full_and_torch(fast, bias)
    x, context = torch.randn(2, 3, 20), torch.randn(2, 7, 20)  # q_len 3, k_len 7
    out = t(x, context, context, need_weights=False)[0]
    assert out.shape == (2, 3, 20), out.shape
    assert_close(out, model(x, context))


@paths
def test_full_cross_attention_with_padding_equals_torch(fast):
    model, t = full_and_torch(fast)
    x, context = torch.randn(2, 3, 20), torch.randn(2, 7, 20)
    pad = padding_mask(torch.tensor([7, 4]), 7)
    out = t(x, context, context, key_padding_mask=blocked(pad[:, 0, 0]), need_weights=False)[0]
    assert_close(out, model(x, context, attn_mask=pad))


@given(
    size=sizes,
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=3),
    q_len=st.integers(1, 6),
    k_len=st.integers(9, 11),
    seed=seeds,
)
def test_full_cross_attention_with_padding_equals_torch_on_random_shapes(
    size, lengths, q_len, k_len, seed
):
    heads_num, head_size = size
    model = full_model(heads_num, head_size, seed=seed).eval()
    t = to_torch(model)
    hidden_size, batch_size = heads_num * head_size, len(lengths)
    x = torch.randn(batch_size, q_len, hidden_size)
    context = torch.randn(batch_size, k_len, hidden_size)
    pad = padding_mask(torch.tensor(lengths), k_len)
    out = t(x, context, context, key_padding_mask=blocked(pad[:, 0, 0]), need_weights=False)[0]
    assert_close(out, model(x, context, attn_mask=pad))


@paths
def test_full_batch_first_false_takes_seq_len_first_and_gives_the_same_output(fast):
    model = full_model(fast=fast).eval()
    t = to_torch(model, batch_first=False)
    x, context = torch.randn(2, 3, 20), torch.randn(2, 7, 20)
    xt, ct = x.transpose(0, 1), context.transpose(0, 1)  # [len, batch_size, hidden_size]
    out = t(xt, ct, ct, need_weights=False)[0].transpose(0, 1)
    assert_close(out, model(x, context))


def test_from_torch_full_equals_torch_on_cross_attention_with_a_causal_mask():
    torch.manual_seed(0)
    t = nn.MultiheadAttention(20, 4, bias=False, dropout=0.2, batch_first=True).eval()
    model = from_torch(t, full=True)
    x, context = torch.randn(2, 3, 20), torch.randn(2, 7, 20)
    out = t(x, context, context, attn_mask=blocked(causal_mask(3, 7)), need_weights=False)[0]
    assert_close(out, model(x, context, is_causal=True))


# ---- Grouped-query attention has no counterpart -----------------------------------------------


@pytest.mark.parametrize("kv_heads", [1, 2], ids=["MQA", "GQA"])
def test_to_torch_refuses_grouped_query_attention_naming_kv_heads_and_heads_num(kv_heads):
    expected = (
        f"cannot map m: kv_heads ({kv_heads}) < heads_num (4) is grouped-query attention; "
        "nn.MultiheadAttention has none (its keys and values have heads_num heads)"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        to_torch(full_model(kv_heads=kv_heads))


def test_to_torch_accepts_kv_heads_equal_to_heads_num():
    model = full_model(kv_heads=4)
    assert to_torch(model).num_heads == 4


@pytest.mark.parametrize("name", sorted(set(TO_TORCH_REFUSES) - {"kv_heads"}))
def test_to_torch_refuses_each_option_of_todays_models_and_names_it(name):
    model = options_checker.example_model(name)
    expected = TO_TORCH_REFUSES[name](model.options)
    assert expected.startswith(name), expected
    with pytest.raises(ValueError, match=re.escape(expected)):
        to_torch(model)


def test_to_torch_maps_a_scale_equal_to_the_default():
    model = mha.full.MHA(20, 4, scale=5**-0.5).eval()
    x = torch.randn(2, 3, 20)
    out, _ = to_torch(model)(x, x, x, need_weights=False)
    assert_close(out, model(x))
