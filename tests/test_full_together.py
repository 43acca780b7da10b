"""``mha.full`` used the way real code combines its features, where the property tests of
``tests/test_full.py`` (one feature, float32/float64, eager) did not look.

Each test reproduces a bug found in review (``shared/reviews/2026-11-30-mha-full.md``, B1-B6)
and fails without its fix: ``torch.compile`` with changing lengths, the peak memory of a small
mask, training through a cache with frozen key/value weights, half precision at its limits,
``inference_mode`` then ``no_grad``, and masks built as other libraries build them
(``finfo(float32).min``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from support import assert_close
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from mha.full import MHA, KVCache, causal_mask, padding_mask
from mha.masks import float_mask_as

paths = pytest.mark.parametrize("fast", [True, False], ids=["fast", "math"])
low_precision = pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])


def decode(model, x, cache, prefill):
    """Prefill ``prefill`` positions of ``x``, then one position a call: the outputs, joined."""
    outs = [model(x[:, :prefill], is_causal=True, cache=cache)]
    for s in range(prefill, x.size(1)):
        outs.append(model(x[:, s : s + 1], is_causal=True, cache=cache))
    return torch.cat(outs, dim=1)


# ---- B1: torch.compile(fullgraph=True) with changing lengths ----------------------------------


@pytest.mark.slow
def test_compiled_prefill_then_decode_runs_without_a_graph_break_and_equals_eager():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = MHA(32, 4, kv_heads=2).eval()
    x = torch.randn(2, 9, 32)
    compiled = torch.compile(model, backend="eager", fullgraph=True)  # a break raises here
    with torch.no_grad():
        expected = decode(model, x, KVCache(), prefill=5)
        # lengths 5, then 1 a step: q_len changes, k_len grows, the buffer doubles once
        got = decode(compiled, x, KVCache(), prefill=5)
        # and a causal call of another length than before
        assert torch.equal(compiled(x[:, :3], is_causal=True), model(x[:, :3], is_causal=True))
    assert_close(got, expected)


# ---- B2: a small mask stays small on the fast path --------------------------------------------


class LargestTensor(TorchDispatchMode):
    """The bytes of the largest storage any operation returned while active: what a forward
    allocates at once, beyond the kernels' own scratch space."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.bytes = max(self.bytes, t.untyped_storage().nbytes())
        return out


def largest_tensor(fn) -> int:
    with LargestTensor() as seen:
        fn()
    return seen.bytes


def test_a_padding_mask_costs_no_q_by_k_tensor_on_the_fast_path():
    torch.manual_seed(0)
    batch, length, hidden, heads = 2, 512, 64, 4
    model = MHA(hidden, heads).eval()
    x = torch.randn(batch, length, hidden)
    mask = padding_mask(torch.tensor([length, length // 2]), length)  # [2, 1, 1, 512]
    q_by_k = batch * length * length  # bytes of one boolean [batch, 1, q_len, k_len] mask
    with torch.no_grad():
        plain = largest_tensor(lambda: model(x))
        masked = largest_tensor(lambda: model(x, attn_mask=mask))
        float_masked = largest_tensor(lambda: model(x, attn_mask=(~mask).float() * -1e9))
    # Expanded to [batch, 1, q_len, k_len], the mask would be a tensor of q_by_k bytes (bool) or
    # 4 * q_by_k (SDPA's float copy); passed as it came, the largest tensors are the
    # projections [batch, L, hidden] (in float32 half of q_by_k here), with or without the mask.
    assert plain == masked == float_masked == batch * length * hidden * 4, (
        plain,
        masked,
        float_masked,
    )
    assert masked < q_by_k


@paths
def test_a_padding_mask_passed_as_it_came_gives_the_same_output_as_expanded(fast):
    torch.manual_seed(0)
    model = MHA(24, 4, fast=fast).eval()
    x = torch.randn(3, 5, 24)
    mask = padding_mask(torch.tensor([5, 2, 0]), 5)  # sequence 2 sees no key at all
    with torch.no_grad():
        small = model(x, attn_mask=mask)
        full_size = model(x, attn_mask=mask.expand(3, 4, 5, 5).contiguous())
    assert_close(small, full_size)
    assert torch.equal(small[2], model.W_o.bias.detach().expand(5, 24)), "no key: W_o's bias"


# ---- B3: training through a cache with frozen key and value weights -------------------------


@paths
@pytest.mark.parametrize("frozen", ["W_k W_v", "W_q", "W_q W_k W_v", ""])
def test_gradients_through_a_cache_with_frozen_weights_equal_one_causal_forward(fast, frozen):
    torch.manual_seed(0)
    model = MHA(24, 4, kv_heads=2, fast=fast)  # training mode, gradients on
    for name in frozen.split():
        getattr(model, name).requires_grad_(False)
    x = torch.randn(2, 6, 24)
    decode(model, x, KVCache(), prefill=3).square().sum().backward()
    stepwise = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    model.zero_grad()
    model(x, is_causal=True).square().sum().backward()
    for name, grad in stepwise.items():
        assert_close(grad, model.get_parameter(name).grad)
    assert stepwise or frozen == "W_q W_k W_v", "some parameter is trained"


def test_gradients_reach_an_input_through_a_cache_of_a_frozen_model():
    torch.manual_seed(0)
    model = MHA(24, 4).requires_grad_(False)
    x = torch.randn(2, 5, 24, requires_grad=True)
    decode(model, x, KVCache(), prefill=2).sum().backward()
    stepwise = x.grad.clone()
    x.grad = None
    model(x, is_causal=True).sum().backward()
    assert_close(stepwise, x.grad)


# ---- B4: asking for the weights never changes the output ------------------------------------


@low_precision
def test_need_weights_keeps_a_half_precision_output_finite_when_q_dot_k_exceeds_its_range(dtype):
    model = MHA(64, 1).to(dtype).eval()
    with torch.no_grad():
        for layer in (model.W_q, model.W_k, model.W_v, model.W_o):
            layer.weight.copy_(torch.eye(64))
            layer.bias.zero_()
    x = torch.full((1, 2, 64), 40.0, dtype=dtype)  # q . k = 64 * 1600 = 102400 > 65504
    with torch.no_grad():
        plain = model(x)
        out, weights = model(x, need_weights=True)
    assert plain.isfinite().all() and out.isfinite().all(), "finite with and without the weights"
    assert torch.equal(out, x), "equal keys: weights 1/2 each, output the (identical) values"
    assert torch.equal(weights, torch.full((1, 1, 2, 2), 0.5, dtype=dtype))


@low_precision
@pytest.mark.parametrize("mask", ["none", "causal", "padding", "finfo"])
def test_need_weights_gives_the_fast_output_in_half_precision(dtype, mask):
    torch.manual_seed(0)
    model = MHA(32, 4, kv_heads=2).to(dtype).eval()
    x = torch.randn(2, 5, 32, dtype=dtype) * 4
    kwargs = {
        "none": {},
        "causal": {"is_causal": True},
        "padding": {"attn_mask": padding_mask(torch.tensor([5, 0]), 5)},
        "finfo": {
            "attn_mask": torch.zeros(2, 1, 5, 5).masked_fill(
                ~causal_mask(5, 5), torch.finfo(torch.float32).min
            )
        },
    }[mask]
    with torch.no_grad():
        plain = model(x, **kwargs)
        out, _ = model(x, need_weights=True, **kwargs)
    assert_close(out, plain)


# ---- B5: a cache filled under inference_mode extends under no_grad -------------------------


@paths
@pytest.mark.parametrize("then", ["no_grad", "grad"])
def test_a_cache_prefilled_in_inference_mode_extends_outside_it(fast, then):
    torch.manual_seed(0)
    model = MHA(24, 4, fast=fast).eval()
    x = torch.randn(2, 6, 24)
    cache = KVCache()
    with torch.inference_mode():
        prefill = model(x[:, :3], is_causal=True, cache=cache)
        model(x[:, 3:4], is_causal=True, cache=cache)  # the buffer (capacity 6) has room left
    with torch.no_grad() if then == "no_grad" else torch.enable_grad():
        steps = [model(x[:, s : s + 1], is_causal=True, cache=cache) for s in (4, 5)]
        again = model(x[:, :1], is_causal=True, cache=KVCache())
    assert len(cache) == 6
    with torch.no_grad():
        expected = model(x, is_causal=True)
    got = torch.cat([prefill, *steps], dim=1)  # positions 0-2, then 4 and 5
    assert_close(got, expected[:, [0, 1, 2, 4, 5]])
    assert not cache.keys.is_inference(), "copied once into an ordinary tensor"
    assert again.shape == (2, 1, 24)


# ---- B6: one rule for fully masked rows in every dtype --------------------------------------


@paths
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_row_masked_with_finfo_min_is_a_softmax_in_every_dtype_and_minus_inf_a_zero(fast, dtype):
    torch.manual_seed(0)
    model = MHA(16, 2, fast=fast).to(dtype).eval()
    x = torch.randn(1, 3, 16, dtype=dtype)
    lowest = torch.zeros(1, 1, 3, 3)  # float32, as many libraries build masks
    lowest[..., 0, :] = torch.finfo(torch.float32).min  # query 0: every key at finfo.min
    blocked = torch.zeros(1, 1, 3, 3)
    blocked[..., 0, :] = float("-inf")  # query 0: every key -inf
    with torch.no_grad():
        v = model.W_v(x)  # [1, 3, 16]: one head's values in channels 0-7, the other's in 8-15
        average = model.W_o(v.mean(dim=1))  # a finite score on every key: the plain average
        out_lowest = model(x, attn_mask=lowest)
        out_blocked = model(x, attn_mask=blocked)
    if dtype != torch.float16:  # float16 keeps the scores' differences at -65504: still a softmax
        assert_close(out_lowest[0, 0], average[0])
    assert not torch.equal(out_lowest[0, 0], model.W_o.bias), "finite scores: not a masked row"
    assert torch.equal(out_blocked[0, 0], model.W_o.bias), "all -inf: zero attention, W_o's bias"


@low_precision
def test_a_finite_float_mask_value_becomes_the_dtypes_lowest_finite_value_never_minus_inf(dtype):
    lowest = torch.finfo(dtype).min  # float16: -65504
    mask = torch.tensor([torch.finfo(torch.float32).min, -1e9, float("-inf"), -0.5])
    expected = torch.tensor([lowest, max(-1e9, lowest), float("-inf"), -0.5], dtype=dtype)
    assert torch.equal(float_mask_as(mask, dtype), expected)


# ---- The cache: crop, values checked, unchanged on failure -----------------------------------


@pytest.mark.parametrize("grad", [False, True])
def test_crop_keeps_the_first_n_positions_and_decoding_continues_from_there(grad):
    torch.manual_seed(0)
    model = MHA(24, 4).eval()
    x = torch.randn(2, 6, 24)
    with torch.set_grad_enabled(grad):
        cache = KVCache()
        model(x, is_causal=True, cache=cache)
        held = cache.keys[:, :, :4].clone()
        cache.crop(4)
        assert len(cache) == 4 and torch.equal(cache.keys, held)
        step = model(x[:, 4:5], is_causal=True, cache=cache)
        assert_close(step, model(x[:, :5], is_causal=True)[:, 4:])


@pytest.mark.parametrize(
    "n, error", [(7, ValueError), (-1, ValueError), (2.0, TypeError), (True, TypeError)]
)
def test_crop_outside_0_to_len_raises_naming_n_and_the_length(n, error):
    cache = KVCache()
    cache.append(torch.randn(1, 2, 5, 3), torch.randn(1, 2, 5, 3))
    with pytest.raises(error, match=r"n must be"):
        cache.crop(n)
    assert len(cache) == 5


def test_values_unlike_the_held_ones_raise_and_leave_the_cache_as_it_was():
    cache = KVCache()
    cache.append(torch.randn(1, 2, 5, 3), torch.randn(1, 2, 5, 3))
    with pytest.raises(ValueError, match=r"values"):
        cache.append(torch.randn(1, 2, 1, 3), torch.randn(1, 2, 1, 4))
    with pytest.raises(TypeError, match=r"values"):
        cache.append(torch.randn(1, 2, 1, 3), torch.randn(1, 2, 1, 3, dtype=torch.float64))
    assert len(cache) == 5


def test_an_error_inside_attention_leaves_the_cache_as_it_was(monkeypatch):
    model = MHA(24, 4).eval()
    cache = KVCache()
    x = torch.randn(2, 4, 24)
    model(x, is_causal=True, cache=cache)
    keys = cache.keys.clone()

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("out of memory (simulated)")

    monkeypatch.setattr(F, "scaled_dot_product_attention", out_of_memory)
    with pytest.raises(RuntimeError, match="simulated"):
        model(x[:, :1], is_causal=True, cache=cache)
    assert len(cache) == 4 and torch.equal(cache.keys, keys)
