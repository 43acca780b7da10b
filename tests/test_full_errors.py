"""Every bad input of ``mha.full`` gets a clear error: its type says what kind of mistake, its
message names the argument, the value expected and the value received, and it is raised by the
package's own checks (``mha/checks.py``, ``mha/full.py``), never deep inside torch.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from support import raised_in_mha

from mha.full import MHA, KVCache, ModelCache, causal_mask, padding_mask

# The sizes of the chapters: batch 2, q_len 3, k_len 7, heads 4, kv_heads 2, head 5, hidden 20.
TARGET = "[batch_size, heads_num, q_len, k_len]"


@pytest.fixture
def model():
    torch.manual_seed(0)
    return MHA(20, 4, kv_heads=2)


@pytest.fixture
def x():
    return torch.randn(2, 3, 20)


def raises(error, message):
    """``pytest.raises`` matching the whole ``message`` literally."""
    return pytest.raises(error, match=re.escape(message))


# ---- Sizes: checked in __init__, as in the pure version ----------------------------------------


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        pytest.param(
            (20.0, 4), TypeError, "hidden_size must be an int, got float (20.0)", id="float"
        ),
        pytest.param((20, True), TypeError, "heads_num must be an int, got bool (True)", id="bool"),
        pytest.param((0, 4), ValueError, "hidden_size must be a positive int, got 0", id="zero"),
        pytest.param(
            (20, -4), ValueError, "heads_num must be a positive int, got -4", id="negative"
        ),
        pytest.param(
            (10, 3),
            ValueError,
            "hidden_size (10) must be divisible by heads_num (3); 10 % 3 = 1",
            id="indivisible",
        ),
    ],
)
def test_bad_hidden_size_or_heads_num_raises_as_in_the_pure_version(args, error, message):
    with raises(error, message) as e:
        MHA(*args)
    assert raised_in_mha(e)


@pytest.mark.parametrize(
    ("value", "actual"),
    [
        pytest.param(2.0, "float (2.0)", id="float"),
        pytest.param(True, "bool (True)", id="bool"),
        pytest.param("2", "str ('2')", id="str"),
    ],
)
def test_kv_heads_not_an_int_raises_type_error(value, actual):
    with raises(TypeError, f"kv_heads must be an int, got {actual}") as e:
        MHA(20, 4, kv_heads=value)
    assert raised_in_mha(e)


@pytest.mark.parametrize("value", [0, -2])
def test_non_positive_kv_heads_raises_value_error(value):
    with raises(ValueError, f"kv_heads must be a positive int, got {value}") as e:
        MHA(20, 4, kv_heads=value)
    assert raised_in_mha(e)


@given(heads_num=st.integers(1, 12), kv_heads=st.integers(1, 12))
def test_kv_heads_not_dividing_heads_num_raises_value_error_naming_both(heads_num, kv_heads):
    hidden_size = heads_num * 3
    if heads_num % kv_heads == 0:
        model = MHA(hidden_size, heads_num, kv_heads=kv_heads)
        assert model.W_k.weight.shape == (kv_heads * 3, hidden_size)
        return
    expected = (
        f"heads_num ({heads_num}) must be divisible by kv_heads ({kv_heads}); "
        f"{heads_num} % {kv_heads} = {heads_num % kv_heads}"
    )
    with raises(ValueError, expected):
        MHA(hidden_size, heads_num, kv_heads=kv_heads)


@pytest.mark.parametrize(
    ("value", "actual"),
    [
        pytest.param("0.1", "str ('0.1')", id="str"),
        pytest.param(True, "bool (True)", id="bool"),
        pytest.param(None, "NoneType (None)", id="None"),
        pytest.param(torch.tensor(0.1), "Tensor (tensor(0.1000))", id="tensor"),
    ],
)
def test_dropout_not_a_number_raises_type_error(value, actual):
    with raises(TypeError, f"dropout must be a float, got {actual}") as e:
        MHA(20, 4, dropout=value)
    assert raised_in_mha(e)


@pytest.mark.parametrize("value", [-0.1, 1.0, 1.5, float("inf"), float("nan")])
def test_dropout_outside_0_to_1_raises_value_error(value):
    with raises(ValueError, f"dropout must lie in [0, 1), got {value}") as e:
        MHA(20, 4, dropout=value)
    assert raised_in_mha(e)


# What each flag's message says it must be: bias may also name the projections that have one.
EXPECTED_FLAG = {
    "bias": "a bool or a tuple of projection names",
    "fast": "a bool",
    "sinks": "a bool",
    "gate": "a bool",
}


@pytest.mark.parametrize("name", list(EXPECTED_FLAG))
@pytest.mark.parametrize(
    ("value", "actual"),
    [
        pytest.param(1, "int (1)", id="int"),
        pytest.param("True", "str ('True')", id="str"),
        pytest.param(None, "NoneType (None)", id="None"),
    ],
)
def test_a_flag_not_a_bool_raises_type_error(name, value, actual):
    with raises(TypeError, f"{name} must be {EXPECTED_FLAG[name]}, got {actual}") as e:
        MHA(20, 4, **{name: value})
    assert raised_in_mha(e)


# qk_norm's flavours: Gemma 3's, OLMo 2's, Llama 4's
NAMED = "a bool, 'gemma', 'projection' or 'weightless'"
VALUES = "False, True, 'gemma', 'projection' or 'weightless'"


@pytest.mark.parametrize(
    ("value", "error", "actual"),
    [
        pytest.param(1, TypeError, f"must be {NAMED}, got int (1)", id="int"),
        pytest.param(None, TypeError, f"must be {NAMED}, got NoneType (None)", id="None"),
        pytest.param("rms", ValueError, f"must be {VALUES}, got 'rms'", id="str"),
    ],
)
def test_qk_norm_neither_a_bool_nor_a_flavour_raises_by_name(value, error, actual):
    with raises(error, f"qk_norm {actual}") as e:
        MHA(20, 4, qk_norm=value)
    assert raised_in_mha(e)


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        pytest.param("2", TypeError, "softcap must be a float, got str ('2')", id="str"),
        pytest.param(True, TypeError, "softcap must be a float, got bool (True)", id="bool"),
        pytest.param(0.0, ValueError, "softcap must be positive, got 0.0", id="zero"),
        pytest.param(-50.0, ValueError, "softcap must be positive, got -50.0", id="negative"),
        pytest.param(float("nan"), ValueError, "softcap must be positive, got nan", id="nan"),
        pytest.param(
            float("inf"), ValueError, "softcap must be a finite positive float, got inf", id="inf"
        ),
    ],
)
def test_softcap_not_a_positive_finite_number_raises_by_name(value, error, message):
    with raises(error, message) as e:
        MHA(20, 4, softcap=value)
    assert raised_in_mha(e)


TWO_NUMBERS = "temperature must be a tuple (attn_scale, floor_scale) of two numbers, got "


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        pytest.param(0.1, TypeError, TWO_NUMBERS + "float (0.1)", id="float"),
        pytest.param([0.1, 8.0], TypeError, TWO_NUMBERS + "list ([0.1, 8.0])", id="list"),
        pytest.param((0.1,), TypeError, TWO_NUMBERS + "tuple ((0.1,))", id="one"),
        pytest.param(
            ("0.1", 8.0),
            TypeError,
            "temperature's attn_scale must be a float, got str ('0.1')",
            id="str",
        ),
        pytest.param(
            (0.1, 0), ValueError, "temperature's floor_scale must be positive, got 0", id="zero"
        ),
        pytest.param(
            (-0.1, 8.0),
            ValueError,
            "temperature's attn_scale must be positive, got -0.1",
            id="negative",
        ),
    ],
)
def test_temperature_not_two_positive_numbers_raises_by_name(value, error, message):
    with raises(error, message) as e:
        MHA(20, 4, temperature=value)
    assert raised_in_mha(e)


def test_temperature_with_a_context_is_refused():
    m = MHA(20, 4, temperature=(0.1, 8.0))
    with raises(ValueError, "context= (cross-attention) is refused") as e:
        m(torch.randn(2, 3, 20), torch.randn(2, 5, 20))
    assert raised_in_mha(e)


@pytest.mark.parametrize("name", ["is_causal", "need_weights"])
@pytest.mark.parametrize(
    ("value", "actual"),
    [
        pytest.param(1, "int (1)", id="int"),
        pytest.param(torch.tensor(True), "Tensor (tensor(True))", id="tensor"),
        pytest.param(None, "NoneType (None)", id="None"),
    ],
)
def test_is_causal_or_need_weights_not_a_bool_raises_type_error(model, x, name, value, actual):
    with raises(TypeError, f"{name} must be a bool, got {actual}") as e:
        model(x, **{name: value})
    assert raised_in_mha(e)


# ---- x and context: checked at the top of forward, each by its name ---------------------------

BAD_INPUTS = [
    pytest.param(
        np.zeros((2, 3, 20), dtype=np.float32),
        TypeError,
        "{name} must be a torch.Tensor, got ndarray",
        id="numpy",
    ),
    pytest.param(
        torch.zeros(3, 20),
        ValueError,
        "{name} must be 3-D [batch_size, seq_len, hidden_size], got 2-D with shape [3, 20]",
        id="2-D",
    ),
    pytest.param(
        torch.zeros(2, 3, 19),
        ValueError,
        "{name}.shape[-1] must equal hidden_size (20), got 19 ({name}.shape = [2, 3, 19])",
        id="last-dim",
    ),
    pytest.param(
        torch.zeros(2, 3, 20, dtype=torch.int64),
        TypeError,
        "{name} must be a floating-point tensor, got dtype torch.int64",
        id="int64",
    ),
    pytest.param(
        torch.zeros(2, 3, 20, dtype=torch.float64),
        TypeError,
        "{name}.dtype must match the parameters' dtype (torch.float32), got torch.float64",
        id="float64",
    ),
    pytest.param(
        torch.zeros(2, 3, 20, device="meta"),  # no accelerator needed; the same check as cuda
        ValueError,
        "{name}.device must match the parameters' device (cpu), got meta",
        id="device",
    ),
]


@pytest.mark.parametrize(("bad", "error", "message"), BAD_INPUTS)
def test_bad_x_raises_a_clear_error_naming_x(model, bad, error, message):
    with raises(error, message.format(name="x")) as e:
        model(bad)
    assert raised_in_mha(e)


@pytest.mark.parametrize(("bad", "error", "message"), BAD_INPUTS)
def test_bad_context_raises_a_clear_error_naming_context(model, x, bad, error, message):
    with raises(error, message.format(name="context")) as e:
        model(x, bad)
    assert raised_in_mha(e)


def test_context_of_another_batch_size_than_x_raises_value_error(model, x):
    with raises(ValueError, "context.shape[0] must equal x.shape[0] (2), got 3") as e:
        model(x, torch.randn(3, 7, 20))
    assert raised_in_mha(e)


# ---- attn_mask --------------------------------------------------------------------------------


def test_mask_not_a_tensor_raises_type_error(model, x):
    with raises(TypeError, "attn_mask must be a torch.Tensor, got list") as e:
        model(x, attn_mask=[[True] * 3] * 3)
    assert raised_in_mha(e)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.complex64])
def test_mask_neither_boolean_nor_float_raises_type_error_naming_its_dtype(model, x, dtype):
    # uint8 included: nn.MultiheadAttention once took byte masks (True = blocked).
    expected = (
        "attn_mask must be boolean (True = may attend) or floating point (added to the "
        f"scores), got dtype {dtype}"
    )
    with raises(TypeError, expected) as e:
        model(x, attn_mask=torch.ones(3, 3, dtype=dtype))
    assert raised_in_mha(e)


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param((2, 7), id="padding-without-unsqueeze"),  # [batch, k_len] against q_len 3
        pytest.param((3, 6), id="k_len"),
        pytest.param((4, 4, 3, 7), id="batch"),
        pytest.param((2, 3, 3, 7), id="heads"),
        pytest.param((1, 2, 4, 3, 7), id="5-D"),
    ],
)
def test_mask_that_cannot_broadcast_raises_value_error_naming_both_shapes(model, x, shape):
    expected = f"attn_mask of shape {list(shape)} must broadcast to {TARGET} = [2, 4, 3, 7]"
    with raises(ValueError, expected) as e:
        model(x, torch.randn(2, 7, 20), attn_mask=torch.ones(shape, dtype=torch.bool))
    assert raised_in_mha(e)


@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=5))
def test_any_mask_shape_either_broadcasts_or_raises_naming_both_shapes(shape):
    torch.manual_seed(0)
    model = MHA(20, 4, kv_heads=2)
    x, context = torch.randn(2, 3, 20), torch.randn(2, 5, 20)
    mask = torch.ones(shape, dtype=torch.bool)
    target = (2, 4, 3, 5)
    try:
        broadcasts = torch.broadcast_shapes(tuple(shape), target) == target
    except RuntimeError:
        broadcasts = False
    if broadcasts:
        assert model(x, context, attn_mask=mask).shape == (2, 3, 20)
        return
    expected = f"attn_mask of shape {shape} must broadcast to {TARGET} = [2, 4, 3, 5]"
    with raises(ValueError, expected):
        model(x, context, attn_mask=mask)


def test_mask_on_another_device_than_x_raises_value_error(model, x):
    mask = causal_mask(3, 3, device="meta")  # no accelerator needed; the same check as cuda
    with raises(ValueError, "attn_mask.device must match the input's device (cpu), got meta") as e:
        model(x, attn_mask=mask)
    assert raised_in_mha(e)


def test_with_a_cache_the_mask_must_cover_the_cached_keys_too(model, x):
    cache = KVCache()
    model(x, is_causal=True, cache=cache)  # 3 cached positions, then 1 new: k_len 4
    expected = f"attn_mask of shape [1, 3] must broadcast to {TARGET} = [2, 4, 1, 4]"
    with raises(ValueError, expected) as e:
        model(torch.randn(2, 1, 20), cache=cache, attn_mask=torch.ones(1, 3, dtype=torch.bool))
    assert raised_in_mha(e)


# ---- cache ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cache", "type_name"),
    [
        pytest.param({}, "dict", id="dict"),
        pytest.param((torch.zeros(2, 2, 1, 5), torch.zeros(2, 2, 1, 5)), "tuple", id="tuple"),
    ],
)
def test_cache_not_a_kv_cache_raises_type_error(model, x, cache, type_name):
    with raises(TypeError, f"cache must be a mha.full.KVCache, got {type_name}") as e:
        model(x, cache=cache)
    assert raised_in_mha(e)


def test_one_cache_in_two_modules_raises_value_error(model, x):
    cache = KVCache()
    model(x, is_causal=True, cache=cache)
    other = MHA(20, 4, kv_heads=2)
    expected = (
        "this KVCache belongs to another module: each attention layer needs a cache of its own "
        "(a ModelCache holds one per layer); reset() it to use it elsewhere"
    )
    with raises(ValueError, expected) as e:
        other(torch.randn(2, 1, 20), is_causal=True, cache=cache)
    assert raised_in_mha(e)
    assert len(cache) == 3  # left as it was
    cache.reset()
    other(torch.randn(2, 1, 20), cache=cache)  # a reset cache belongs to nobody
    assert len(cache) == 1


def test_self_attention_cache_given_a_context_raises_value_error(model, x):
    cache = KVCache()
    model(x, cache=cache)
    expected = (
        "this KVCache holds keys and values of self-attention (no context), this call is "
        "cross-attention (context=): use a cache for each, or reset() it"
    )
    with raises(ValueError, expected) as e:
        model(x, torch.randn(2, 7, 20), cache=cache)
    assert raised_in_mha(e)


def test_cross_attention_cache_of_another_context_raises_value_error(model, x):
    cache = KVCache()
    model(x, torch.randn(2, 7, 20), cache=cache)
    expected = (
        "cache holds the keys and values of a context [batch_size, src_len] = [2, 7], this "
        "call's context is [2, 5]: reset() the cache for a new context"
    )
    with raises(ValueError, expected) as e:
        model(x, torch.randn(2, 5, 20), cache=cache)
    assert raised_in_mha(e)


def test_context_size_without_a_context_raises_value_error(x):
    model = MHA(20, 4, context_size=12)
    expected = (
        "this MHA takes a context of width context_size (12) for its keys and values: pass "
        "context=, [batch_size, src_len, 12]"
    )
    with raises(ValueError, expected) as e:
        model(x)
    assert raised_in_mha(e)
    with raises(ValueError, "context.shape[-1] must equal context_size (12), got 20") as e:
        model(x, torch.randn(2, 7, 20))
    assert raised_in_mha(e)


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        pytest.param(0, ValueError, "context_size must be a positive int, got 0", id="zero"),
        pytest.param(8.0, TypeError, "context_size must be an int, got float (8.0)", id="float"),
    ],
)
def test_bad_context_size_raises(value, error, message):
    with raises(error, message):
        MHA(20, 4, context_size=value)


def test_cache_beyond_max_len_raises_value_error_and_keeps_the_cache(model, x):
    cache = KVCache(max_len=4)
    with torch.no_grad():
        model(x, is_causal=True, cache=cache)
        expected = (
            "cache holds at most max_len (4) positions; it holds 3 and this call adds 2: crop or "
            "reset it, or create it with a larger max_len"
        )
        with raises(ValueError, expected) as e:
            model(x[:, :2], is_causal=True, cache=cache)
    assert raised_in_mha(e)
    assert len(cache) == 3


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        pytest.param(
            lambda: KVCache(0), ValueError, "max_len must be a positive int, got 0", id="max_len-0"
        ),
        pytest.param(
            lambda: KVCache(True),
            TypeError,
            "max_len must be an int, got bool (True)",
            id="max_len-bool",
        ),
        pytest.param(
            lambda: ModelCache(0),
            ValueError,
            "num_layers must be a positive int, got 0",
            id="layers-0",
        ),
        pytest.param(
            lambda: ModelCache(2, max_len=-1),
            ValueError,
            "max_len must be a positive int, got -1",
            id="layers-max_len",
        ),
    ],
)
def test_bad_cache_sizes_raise(make, error, message):
    with raises(error, message):
        make()


@pytest.mark.parametrize(
    ("index", "error", "message"),
    [
        pytest.param(
            torch.tensor([0.0, 1.0]),
            TypeError,
            "index must be an integer tensor of shape [new_batch_size], got torch.float32",
            id="float",
        ),
        pytest.param(
            torch.tensor([[0, 1]]),
            ValueError,
            "index must be 1-D [new_batch_size], got shape [1, 2]",
            id="2-D",
        ),
        pytest.param(
            torch.tensor([0, 2]),
            ValueError,
            "index must lie in 0 .. batch_size - 1 (1), got [0, 2]",
            id="out-of-range",
        ),
        pytest.param(
            [0, 1],
            TypeError,
            "index must be an integer tensor of shape [new_batch_size], got list",
            id="list",
        ),
    ],
)
def test_bad_reorder_index_raises_and_keeps_the_cache(index, error, message):
    cache = KVCache()
    cache.append(torch.zeros(2, 2, 3, 5), torch.zeros(2, 2, 3, 5))
    with raises(error, message):
        cache.reorder(index)
    assert cache.keys.shape == (2, 2, 3, 5)


def test_padding_mask_left_not_a_bool_raises_type_error():
    with raises(TypeError, "left must be a bool, got int (1)"):
        padding_mask(torch.tensor([1, 2]), 3, left=1)


def test_cache_of_another_batch_size_raises_value_error_naming_both(model, x):
    cache = KVCache()
    model(x, cache=cache)
    expected = (
        "cache holds [batch_size, kv_heads, head_size] = [2, 2, 5], this call gives [3, 2, 5]: "
        "reset() it, or use a new KVCache, for another batch"
    )
    with raises(ValueError, expected) as e:
        model(torch.randn(3, 1, 20), cache=cache)
    assert raised_in_mha(e)


@pytest.mark.parametrize(
    ("shape", "gives"),
    [
        pytest.param((2, 4, 1, 5), "[2, 4, 5]", id="kv_heads"),
        pytest.param((2, 2, 1, 10), "[2, 2, 10]", id="head_size"),
    ],
)
def test_cache_appended_another_shape_raises_value_error_naming_both(model, x, shape, gives):
    """Another model's keys meet the cache's ownership check first (above); ``append``, which
    anyone may call, checks the shape."""
    cache = KVCache()
    model(x, cache=cache)
    expected = f"cache holds [batch_size, kv_heads, head_size] = [2, 2, 5], this call gives {gives}"
    with raises(ValueError, expected):
        cache.append(torch.zeros(shape), torch.zeros(shape))
    assert len(cache) == 3


def test_cache_of_another_dtype_raises_type_error_naming_both(model, x):
    cache = KVCache()
    model(x, cache=cache)
    model.double()
    expected = "cache holds dtype torch.float32, this call gives torch.float64"
    with raises(TypeError, expected) as e:
        model(torch.randn(2, 1, 20, dtype=torch.float64), cache=cache)
    assert raised_in_mha(e)


def test_cache_on_another_device_raises_value_error_naming_both(model):
    cache = KVCache()
    held = torch.empty(2, 2, 3, 5, device="meta")
    cache.append(held, held)
    with raises(ValueError, "cache is on device meta, this call's input is on cpu") as e:
        model(torch.randn(2, 1, 20), cache=cache)
    assert raised_in_mha(e)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        pytest.param(
            dict(x=torch.randn(2, 1, 20), attn_mask=torch.ones(1, 3, dtype=torch.bool)),
            ValueError,
            id="mask",
        ),
        pytest.param(dict(x=torch.randn(3, 1, 20)), ValueError, id="batch"),
        pytest.param(dict(x=torch.randn(2, 1, 20), is_causal=1), TypeError, id="is_causal"),
    ],
)
def test_a_call_that_raises_leaves_the_cache_as_it_was(model, x, call, error):
    cache = KVCache()
    model(x, is_causal=True, cache=cache)
    keys, values = cache.keys.clone(), cache.values.clone()
    arguments = {name: value for name, value in call.items() if name != "x"}
    with pytest.raises(error):
        model(call["x"], cache=cache, **arguments)
    assert len(cache) == 3
    assert torch.equal(cache.keys, keys) and torch.equal(cache.values, values)


# ---- padding_mask and causal_mask -------------------------------------------------------------


@pytest.mark.parametrize(
    ("lengths", "actual"),
    [
        pytest.param(torch.tensor([3.0, 1.0]), "torch.float32", id="float"),
        pytest.param(torch.tensor([3 + 0j]), "torch.complex64", id="complex"),
        pytest.param([3, 1], "list", id="list"),
    ],
)
def test_padding_mask_lengths_not_an_integer_tensor_raises_type_error(lengths, actual):
    expected = f"lengths must be an integer tensor of shape [batch_size], got {actual}"
    with raises(TypeError, expected) as e:
        padding_mask(lengths, 7)
    assert raised_in_mha(e)


def test_padding_mask_lengths_of_booleans_raises_type_error():
    expected = "lengths must be an integer tensor of shape [batch_size], got torch.bool"
    with raises(TypeError, expected):
        padding_mask(torch.tensor([True, False]), 7)


@pytest.mark.parametrize("shape", [(), (2, 1), (1, 2, 1)], ids=str)
def test_padding_mask_lengths_not_1d_raises_value_error_naming_its_shape(shape):
    lengths = torch.ones(shape, dtype=torch.int64)
    with raises(ValueError, f"lengths must be 1-D [batch_size], got shape {list(shape)}") as e:
        padding_mask(lengths, 7)
    assert raised_in_mha(e)


@pytest.mark.parametrize("lengths", [[-1, 3], [3, 8]], ids=str)
def test_padding_mask_length_outside_0_to_k_len_raises_value_error(lengths):
    with raises(ValueError, f"lengths must lie in 0 .. k_len (7), got {lengths}") as e:
        padding_mask(torch.tensor(lengths), 7)
    assert raised_in_mha(e)


@pytest.mark.parametrize(
    ("call", "error", "names"),
    [
        pytest.param(lambda: causal_mask(3.0, 7), TypeError, ("q_len", "3.0"), id="q_len-float"),
        pytest.param(lambda: causal_mask(3, "7"), TypeError, ("k_len", "'7'"), id="k_len-str"),
        pytest.param(lambda: causal_mask(-1, 7), ValueError, ("q_len", "-1"), id="q_len-negative"),
        pytest.param(lambda: causal_mask(3, -7), ValueError, ("k_len", "-7"), id="k_len-negative"),
        pytest.param(
            lambda: padding_mask(torch.tensor([3]), 7.0),
            TypeError,
            ("k_len", "7.0"),
            id="pad-float",
        ),
        pytest.param(
            lambda: padding_mask(torch.tensor([], dtype=torch.int64), -1),
            ValueError,
            ("k_len", "-1"),
            id="pad-negative",
        ),
    ],
)
def test_mask_helper_sizes_not_non_negative_ints_raise_a_clear_error(call, error, names):
    with pytest.raises(error) as e:
        call()
    assert all(name in str(e.value) for name in names), str(e.value)
    assert raised_in_mha(e)
