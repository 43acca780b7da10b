"""Values that pass every type and shape check and are still bad, refused or made loud: a scale
that is not finite, positions outside the integers float32 holds exactly, and a NaN weight, which
the fast path turns into NaN as the written-out path does (PyTorch's fused kernel on the CPU gives
a row whose scores are all NaN zeros, as if it were fully masked).
"""

from __future__ import annotations

import re

import pytest
import torch
from support import raised_in_mha
from torch._dynamo.testing import CompileCounter

from mha.full import MHA, NAN_CHECKED_BELOW, KVCache
from mha.mla import MLA
from mha.rope import RotaryEmbedding
from mha_site.pictures_fast import NewTensors

MOST = 2**24  # float32 holds every integer up to here exactly, and 2**24 + 1 not


def raises(error, message):
    """``pytest.raises`` matching the whole ``message`` literally."""
    return pytest.raises(error, match=re.escape(message))


def mla(**options):
    return MLA(
        32, 4, kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5, **options
    )


# ---- A NaN weight: NaN on both paths ------------------------------------------------------------


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("weight", ["W_q", "W_k"])
def test_a_nan_weight_of_the_queries_or_keys_gives_nan_on_both_paths(weight, fast):
    # The review's reproducer: k_len 5, shorter than a CPU vector, where the kernel gave zeros
    torch.manual_seed(0)
    m = MHA(16, 4, fast=fast)
    getattr(m, weight).weight.data[0, 0] = float("nan")
    assert m(torch.randn(2, 5, 16)).isnan().any()


@pytest.mark.parametrize("fast", [True, False])
def test_a_nan_key_weight_gives_nan_in_a_decoding_step_on_both_paths(fast):
    torch.manual_seed(0)
    m = MHA(20, 4, kv_heads=2, fast=fast).eval()
    cache = KVCache()
    m(torch.randn(1, 3, 20), is_causal=True, cache=cache)  # finite keys in the cache
    m.W_k.weight.data[:] = float("nan")
    out = m(torch.randn(1, 1, 20), is_causal=True, cache=cache)
    assert out.isnan().all()


@pytest.mark.parametrize("fast", [True, False])
def test_a_fully_masked_row_still_gives_the_output_bias_on_both_paths(fast):
    torch.manual_seed(0)
    m = MHA(20, 4, kv_heads=2, fast=fast).eval()
    mask = torch.ones(2, 1, 3, 3, dtype=torch.bool)
    mask[1, :, 1] = False  # query 1 of sequence 1 sees no key
    out = m(torch.randn(2, 3, 20), attn_mask=mask)
    assert torch.equal(out[1, 1], m.W_o.bias)
    assert not out.isnan().any()


def test_a_finite_output_of_the_fast_path_is_unchanged_by_the_nan_check():
    torch.manual_seed(0)
    m = MHA(20, 4, kv_heads=2).eval()
    x = torch.randn(2, 6, 20)
    checked = m(x, is_causal=True)
    m._nans = lambda q, k: None  # the check left out
    assert torch.equal(checked, m(x, is_causal=True))


def test_the_nan_check_compiles_with_fullgraph_and_gives_nan():
    torch.manual_seed(0)
    m = MHA(20, 4).eval()
    m.W_k.weight.data[0, 0] = float("nan")
    compiled = torch.compile(m, fullgraph=True, backend="eager")  # a graph break raises here
    assert compiled(torch.randn(2, 5, 20)).isnan().any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_the_fast_path_gives_nan_for_a_nan_key_weight_at_every_key_count(dtype):
    # The kernel gives zeros below one vector of lanes (8 keys in float32 on AVX2, 4 in float64,
    # twice that on AVX-512) and NaN itself from there: the check covers the short calls, the
    # kernel the long ones, and nothing falls between
    torch.manual_seed(0)
    m = MHA(16, 4).to(dtype).eval()
    m.W_k.weight.data[0, 0] = float("nan")  # every key of head 0 NaN
    x = torch.randn(1, 80, 16, dtype=dtype)
    finite = [k_len for k_len in range(1, 81) if not m(x[:, :k_len]).isnan().any()]
    assert finite == [], finite


def test_the_shortest_chunk_of_a_chunked_call_is_checked_for_nan():
    # 69 positions with chunks of 64: the kernel's last call has 5 keys, where it gives zeros
    torch.manual_seed(0)
    m = MHA(16, 4, chunk=64).eval()
    m.W_k.weight.data[0, 0] = float("nan")
    out = m(torch.randn(1, 69, 16), is_causal=True)
    assert out.isnan().any(-1).all()


def no_check(*_):
    raise AssertionError("the NaN check ran")


@pytest.mark.parametrize("cached", [0, NAN_CHECKED_BELOW - 1], ids=["prompt", "decoding"])
def test_a_call_with_nan_checked_below_keys_or_more_runs_the_bare_kernel(cached):
    torch.manual_seed(0)
    m = MHA(20, 4, kv_heads=2).eval()
    cache = KVCache()
    if cached:
        m(torch.randn(1, cached, 20), is_causal=True, cache=cache)
    x = torch.randn(1, NAN_CHECKED_BELOW - cached, 20)  # NAN_CHECKED_BELOW keys in all
    m._nans = no_check  # the check is not made: no sum, no tensor added
    with torch.no_grad(), NewTensors() as seen:
        m(x, is_causal=True, cache=cache)
    assert not {"sum", "sub"} & {op for op, *_ in seen.tensors}, seen.tensors
    one_fewer = torch.randn(1, NAN_CHECKED_BELOW - 1, 20)  # one key fewer: checked
    with pytest.raises(AssertionError, match="the NaN check ran"):
        m(one_fewer, is_causal=True)


# ---- scale: a finite positive number ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(float("inf"), "scale must be a finite positive float, got inf", id="inf"),
        pytest.param(float("nan"), "scale must be positive, got nan", id="nan"),
        pytest.param(float("-inf"), "scale must be positive, got -inf", id="-inf"),
    ],
)
@pytest.mark.parametrize("build", [lambda **o: MHA(20, 4, **o), mla], ids=["MHA", "MLA"])
def test_a_scale_that_is_not_finite_is_refused_by_name(build, value, message):
    with raises(ValueError, message) as e:
        build(scale=value)
    assert raised_in_mha(e)


@pytest.mark.parametrize("build", [lambda **o: MHA(20, 4, **o), mla], ids=["MHA", "MLA"])
def test_an_infinite_norm_eps_is_refused_by_name(build):
    with raises(ValueError, "norm_eps must be a finite positive float, got inf") as e:
        build(norm_eps=float("inf"))
    assert raised_in_mha(e)


def test_mla_refuses_a_scale_that_is_not_a_number_or_not_positive():
    with raises(TypeError, "scale must be a float, got str ('0.1')"):
        mla(scale="0.1")
    with raises(ValueError, "scale must be positive, got 0.0"):
        mla(scale=0.0)


def test_an_infinite_temperature_is_refused_by_name():
    with raises(ValueError, "temperature's attn_scale must be a finite positive float, got inf"):
        MHA(20, 4, temperature=(float("inf"), 8.0))


# ---- positions: 0 .. 2**24 ----------------------------------------------------------------------

RANGE = "positions must lie in 0 .. 2**24 (16777216), the integers float32 holds exactly"


def rotating(**options):
    torch.manual_seed(0)
    return MHA(20, 4, rope=RotaryEmbedding(4), **options).eval()


@pytest.mark.parametrize(
    ("positions", "said"),
    [
        pytest.param([0, -3, 1], "got -3 (the smallest)", id="negative"),
        pytest.param([7, MOST + 1, 9], f"got {MOST + 1} (the largest)", id="beyond 2**24"),
        pytest.param([10**12] * 3, f"got {10**12} (the smallest)", id="10**12"),
    ],
)
@pytest.mark.parametrize(
    "build",
    [rotating, lambda: MHA(20, 4, chunk=2), mla],
    ids=["rope", "chunk", "MLA"],
)
def test_positions_outside_float32s_exact_integers_are_refused_naming_the_extreme(
    build, positions, said
):
    m = build()
    x = torch.randn(1, 3, m.hidden_size)
    with raises(ValueError, f"{RANGE} (rope turns them into angles in float32), {said}") as e:
        m(x, is_causal=True, positions=torch.tensor(positions))
    assert raised_in_mha(e)


def test_positions_per_row_name_the_smallest_of_the_batch():
    with raises(ValueError, "got -1 (the smallest)"):
        rotating()(torch.randn(2, 3, 20), positions=torch.tensor([[0, 1, 2], [-1, 0, 1]]))


def test_a_refused_position_leaves_the_cache_as_it_was():
    m, cache = rotating(), KVCache()
    m(torch.randn(1, 3, 20), is_causal=True, cache=cache)
    with pytest.raises(ValueError):
        m(torch.randn(1, 1, 20), is_causal=True, cache=cache, positions=torch.tensor([-1]))
    assert len(cache) == 3


@pytest.mark.parametrize(
    "positions", [[MOST - 2, MOST - 1, MOST], [5, 3, 0]], ids=["2**24", "decreasing"]
)
def test_positions_up_to_2_24_and_decreasing_positions_are_accepted(positions):
    out = rotating()(torch.randn(1, 3, 20), positions=torch.tensor(positions))
    assert out.shape == (1, 3, 20)


def test_a_compiled_static_decoding_step_with_positions_is_one_graph():
    m = rotating()
    cache = KVCache(max_len=16, static=True)
    counter = CompileCounter()
    step = torch.compile(
        lambda t, at: m(t, is_causal=True, cache=cache, positions=at),
        backend=counter,
        fullgraph=True,  # the value check reads no value under compile: no graph break
        dynamic=False,
    )
    with torch.no_grad():
        m(torch.randn(1, 4, 20), is_causal=True, cache=cache, positions=torch.arange(4))
        for i in range(4, 10):
            step(torch.randn(1, 1, 20), torch.tensor([i]))
    assert counter.frame_count == 1  # one graph for all 6 steps, no recompilation
    assert len(cache) == 10
