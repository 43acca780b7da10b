"""Every bad input gets its own error type, raised at the earliest point, with a message naming
the argument, the value expected and the value received. Both implementations share the checks.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from support import AUTOCAST_CASES, TEXTBOOK, assert_close, each_implementation, raised_in_mha

from mha.interop import to_torch

impls = each_implementation(TEXTBOOK)


# ---- Sizes: checked in __init__ --------------------------------------------------------------

NOT_INTS = [
    pytest.param(20.0, "float (20.0)", id="float"),
    pytest.param(True, "bool (True)", id="bool"),
    pytest.param("20", "str ('20')", id="str"),
    pytest.param(None, "NoneType (None)", id="None"),
]


@impls
@pytest.mark.parametrize(("value", "actual"), NOT_INTS)
def test_hidden_size_not_an_int_raises_type_error(MHA, value, actual):
    with pytest.raises(TypeError, match=re.escape(f"hidden_size must be an int, got {actual}")):
        MHA(value, 4)


@impls
@pytest.mark.parametrize(
    ("value", "actual"),
    [
        pytest.param(4.0, "float (4.0)", id="float"),
        pytest.param(True, "bool (True)", id="bool"),
        pytest.param("4", "str ('4')", id="str"),
        pytest.param(None, "NoneType (None)", id="None"),
    ],
)
def test_heads_num_not_an_int_raises_type_error(MHA, value, actual):
    with pytest.raises(TypeError, match=re.escape(f"heads_num must be an int, got {actual}")):
        MHA(20, value)


@impls
def test_float_sizes_raise_even_when_integral_and_divisible(MHA):
    # 20.0 // 4 would give head_size 5.0 and nn.Linear(20.0, ...) would fail much later.
    with pytest.raises(TypeError, match=re.escape("hidden_size must be an int, got float (20.0)")):
        MHA(20.0, 4.0)


@impls
@pytest.mark.parametrize("value", [0, -1, -20])
def test_non_positive_hidden_size_raises_value_error(MHA, value):
    with pytest.raises(
        ValueError, match=re.escape(f"hidden_size must be a positive int, got {value}")
    ):
        MHA(value, 4)


@impls
@pytest.mark.parametrize("value", [0, -1, -4])
def test_non_positive_heads_num_raises_value_error(MHA, value):
    with pytest.raises(
        ValueError, match=re.escape(f"heads_num must be a positive int, got {value}")
    ):
        MHA(20, value)


@impls
def test_indivisible_sizes_raise_value_error_in_init(MHA):
    with pytest.raises(
        ValueError,
        match=re.escape("hidden_size (10) must be divisible by heads_num (3); 10 % 3 = 1"),
    ):
        MHA(10, 3)


@impls
@given(hidden_size=st.integers(1, 512), heads_num=st.integers(1, 64))
def test_any_indivisible_pair_raises_value_error_naming_both(MHA, hidden_size, heads_num):
    if hidden_size % heads_num == 0:
        assert MHA(hidden_size, heads_num).head_size * heads_num == hidden_size
        return
    expected = (
        f"hidden_size ({hidden_size}) must be divisible by heads_num ({heads_num}); "
        f"{hidden_size} % {heads_num} = {hidden_size % heads_num}"
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        MHA(hidden_size, heads_num)


# ---- Input x: checked at the top of forward ---------------------------------------------------


@pytest.fixture(params=list(TEXTBOOK.values()), ids=list(TEXTBOOK))
def model(request):
    torch.manual_seed(0)
    return request.param(20, 4)


@pytest.mark.parametrize(
    ("x", "type_name"),
    [
        pytest.param(np.zeros((2, 3, 20), dtype=np.float32), "ndarray", id="numpy"),
        pytest.param([[[0.0] * 20] * 3] * 2, "list", id="list"),
        pytest.param(None, "NoneType", id="None"),
    ],
)
def test_x_not_a_tensor_raises_type_error(model, x, type_name):
    with pytest.raises(
        TypeError, match=re.escape(f"x must be a torch.Tensor, got {type_name}")
    ) as e:
        model(x)
    assert raised_in_mha(e)


@pytest.mark.parametrize("shape", [(20,), (3, 20), (2, 3, 1, 20), (1, 2, 3, 4, 20)])
def test_x_not_3d_raises_value_error_with_its_shape(model, shape):
    expected = (
        f"x must be 3-D [batch_size, seq_len, hidden_size], "
        f"got {len(shape)}-D with shape {list(shape)}"
    )
    with pytest.raises(ValueError, match=re.escape(expected)) as e:
        model(torch.randn(shape))
    assert raised_in_mha(e)


@given(ndim=st.sampled_from([0, 1, 2, 4, 5]), data=st.data())
def test_x_of_any_other_rank_raises_value_error(ndim, data):
    shape = tuple(data.draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim)))
    for MHA in TEXTBOOK.values():
        with pytest.raises(ValueError, match=re.escape(f"got {ndim}-D with shape {list(shape)}")):
            MHA(20, 4)(torch.randn(shape))


def test_wrong_last_dim_raises_value_error_naming_hidden_size(model):
    expected = "x.shape[-1] must equal hidden_size (20), got 19 (x.shape = [2, 3, 19])"
    with pytest.raises(ValueError, match=re.escape(expected)) as e:
        model(torch.randn(2, 3, 19))
    assert raised_in_mha(e)


@given(
    heads_num=st.integers(1, 6),
    head_size=st.integers(1, 8),
    last=st.integers(0, 60),
    batch_size=st.integers(0, 3),
    seq_len=st.integers(0, 4),
)
def test_any_wrong_last_dim_raises_value_error(heads_num, head_size, last, batch_size, seq_len):
    hidden_size = heads_num * head_size
    if last == hidden_size:
        last += 1
    x = torch.randn(batch_size, seq_len, last)
    for MHA in TEXTBOOK.values():
        expected = f"must equal hidden_size ({hidden_size}), got {last} (x.shape = {list(x.shape)})"
        with pytest.raises(ValueError, match=re.escape(expected)):
            MHA(hidden_size, heads_num)(x)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64])
def test_non_floating_x_raises_type_error_naming_its_dtype(model, dtype):
    x = torch.zeros(2, 3, 20, dtype=dtype)
    match = re.escape(f"x must be a floating-point tensor, got dtype {dtype}")
    with pytest.raises(TypeError, match=match) as e:
        model(x)
    assert raised_in_mha(e)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_x_of_another_float_dtype_than_the_parameters_raises_type_error(model, dtype):
    expected = f"x.dtype must match the parameters' dtype (torch.float32), got {dtype}"
    with pytest.raises(TypeError, match=re.escape(expected)) as e:
        model(torch.randn(2, 3, 20, dtype=dtype))
    assert raised_in_mha(e)


def test_float32_x_with_float64_parameters_raises_type_error(model):
    model = model.double()
    expected = "x.dtype must match the parameters' dtype (torch.float64), got torch.float32"
    with pytest.raises(TypeError, match=re.escape(expected)):
        model(torch.randn(2, 3, 20))


def test_x_on_another_device_than_the_parameters_raises_value_error(model):
    # The meta device needs no accelerator; the check is the same for cuda.
    x = torch.zeros(2, 3, 20, device="meta")
    expected = "x.device must match the parameters' device (cpu), got meta"
    with pytest.raises(ValueError, match=re.escape(expected)):
        model(x)


# ---- Empty inputs work ------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(0, 3, 20), (2, 0, 20), (0, 0, 20)], ids=str)
def test_empty_batch_or_sequence_returns_empty_output_of_the_same_shape(model, shape):
    out = model(torch.randn(shape))
    assert out.shape == shape
    assert out.dtype == torch.float32


@given(batch_size=st.integers(0, 3), seq_len=st.integers(0, 4), heads_num=st.integers(1, 4))
def test_empty_inputs_of_any_shape_return_empty_outputs(batch_size, seq_len, heads_num):
    if batch_size * seq_len:
        seq_len = 0
    for MHA in TEXTBOOK.values():
        out = MHA(heads_num * 3, heads_num)(torch.randn(batch_size, seq_len, heads_num * 3))
        assert out.shape == (batch_size, seq_len, heads_num * 3)


# ---- Autocast: a layer's lower-precision output feeds the next layer --------------------------


@impls
@pytest.mark.parametrize(("device", "dtype"), AUTOCAST_CASES)
def test_stacked_layers_run_under_autocast_like_torch_multihead_attention(MHA, device, dtype):
    torch.manual_seed(0)
    first, second = MHA(20, 4).to(device), MHA(20, 4).to(device)
    x = torch.randn(2, 3, 20, device=device)
    t_first, t_second = to_torch(first), to_torch(second)
    with torch.autocast(device, dtype=dtype):
        out = second(first(x))  # second gets a `dtype` input, its parameters stay float32
        h, _ = t_first(x, x, x, need_weights=False)
        expected, _ = t_second(h, h, h, need_weights=False)
    assert (out.shape, out.dtype, second.W_q.weight.dtype) == ((2, 3, 20), dtype, torch.float32)
    assert_close(out, expected)


@impls
def test_under_autocast_the_output_stays_close_to_float32(MHA):
    torch.manual_seed(0)
    first, second = MHA(20, 4), MHA(20, 4)
    x = torch.randn(2, 3, 20)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = second(first(x))
    assert_close(low.float(), second(first(x)), torch.bfloat16)


@pytest.mark.parametrize("dtype", [torch.float64, torch.int64])
def test_under_autocast_an_input_autocast_does_not_cast_still_raises_type_error(model, dtype):
    # Autocast leaves float64 (and non-floating tensors) alone: the clear error stays.
    x = torch.zeros(2, 3, 20, dtype=dtype)
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(TypeError) as e:
        model(x)
    assert str(dtype) in str(e.value)
    assert raised_in_mha(e)
