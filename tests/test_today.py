"""The options of today's models in ``mha.full.MHA`` and ``mha.rope``, on their own terms.

``tests/test_transformers.py`` proves them equal to transformers' modules; here each is proven
against its definition, the way users combine them: the relative-position property of RoPE in
both layouts and with partial rotation, the position offset under a cache (the bug of restarting
at 0, shown failing), a sliding window's cache that stops growing, trained through and decoded in
``inference_mode`` then ``no_grad``, and the clear errors of each option.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from support import assert_close, raised_in_mha, seeds

from mha.full import MHA, KVCache, RMSNorm, causal_mask
from mha.mla import MLA, LatentCache
from mha.rope import RotaryEmbedding, frequencies


def rotated(rope: RotaryEmbedding, t: torch.Tensor, position: int) -> torch.Tensor:
    """``t`` ``[head_size]`` rotated as if at ``position``."""
    cos, sin = rope(torch.tensor([position]))
    return rope.rotate(t[None, None, None], cos, sin)[0, 0, 0]


@given(
    seed=seeds,
    m=st.integers(0, 500),
    n=st.integers(0, 500),
    shift=st.integers(-300, 300),
    interleaved=st.booleans(),
    rotary_dims=st.sampled_from([2, 4, 8]),
)
def test_q_dot_k_after_rotation_depends_only_on_the_distance(
    seed, m, n, shift, interleaved, rotary_dims
):
    torch.manual_seed(seed)
    rope = RotaryEmbedding(rotary_dims, interleaved=interleaved)
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    if m + shift < 0 or n + shift < 0:
        shift = -min(m, n)
    here = rotated(rope, q, m) @ rotated(rope, k, n)
    there = rotated(rope, q, m + shift) @ rotated(rope, k, n + shift)
    # float32 angles: positions up to 800 turn by up to 800 radians, rounded to ~6e-5
    torch.testing.assert_close(here, there, atol=2e-3 * (1 + here.abs()), rtol=0)
    # And it does depend on the distance: position 0 against itself is the plain dot product
    assert_close(rotated(rope, q, 0) @ rotated(rope, k, 0), q @ k)


def test_the_interleaved_layout_is_the_half_layout_with_its_dims_reordered():
    torch.manual_seed(0)
    half, interleaved = RotaryEmbedding(8), RotaryEmbedding(8, interleaved=True)
    t = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    # Half pairs i with i + 4; interleaved pairs 2i with 2i + 1: order = 0, 4, 1, 5, 2, 6, 3, 7
    order = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])
    positions = torch.arange(5)
    a = half.rotate(t, *half(positions))
    b = interleaved.rotate(t[..., order], *interleaved(positions))
    assert_close(b, a[..., order])


def test_partial_rotation_turns_the_first_rotary_dims_and_passes_the_rest():
    rope = RotaryEmbedding(4)
    t = torch.randn(1, 2, 6, 10)
    out = rope.rotate(t, *rope(torch.arange(6)))
    assert torch.equal(out[..., 4:], t[..., 4:])
    assert not torch.allclose(out[..., :4], t[..., :4])
    # A rotation keeps each pair's length
    pairs = lambda u: u[..., :2] ** 2 + u[..., 2:4] ** 2  # noqa: E731
    assert_close(pairs(out), pairs(t))


def test_position_zero_is_no_rotation_and_the_frequencies_fall_from_1_to_about_1_over_base():
    inv_freq, factor = frequencies(8, 10000.0)
    assert factor == 1.0
    assert inv_freq[0] == 1.0
    assert inv_freq[-1] == pytest.approx(10000.0 ** (-6 / 8))
    rope = RotaryEmbedding(8)
    t = torch.randn(1, 1, 1, 8)
    assert torch.equal(rope.rotate(t, *rope(torch.tensor([0]))), t)


def today_model(seed: int = 0, **options) -> MHA:
    torch.manual_seed(seed)
    options.setdefault("rope", RotaryEmbedding(8))
    return MHA(24, 4, kv_heads=2, head_size=8, **options).double().eval()


def test_decoding_continues_at_len_cache_and_restarting_at_0_is_the_offset_bug():
    m = today_model(qk_norm=True)
    x = torch.randn(2, 7, 24, dtype=torch.float64)
    whole = m(x, is_causal=True)
    cache = KVCache()
    m(x[:, :5], is_causal=True, cache=cache)
    # Right: positions default to len(cache) + arange(q_len) = 5, 6
    right = m(x[:, 5:], is_causal=True, cache=cache)
    assert_close(right, whole[:, 5:])
    # The offset bug: the new rows rotated as if at 0, 1 (positions restarted when decoding)
    cache.crop(5)
    wrong = m(x[:, 5:], is_causal=True, cache=cache, positions=torch.arange(2))
    assert (wrong - whole[:, 5:]).abs().max() > 1e-2
    # Explicit positions 5, 6 are the default
    cache.crop(5)
    assert_close(m(x[:, 5:], is_causal=True, cache=cache, positions=torch.arange(5, 7)), right)


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("window", [1, 3, 5])
def test_a_sliding_window_cache_holds_window_minus_1_and_decodes_as_the_full_forward(fast, window):
    m = today_model(window=window, fast=fast)
    x = torch.randn(2, 12, 24, dtype=torch.float64)
    whole = m(x, is_causal=True)
    # The window's mask, written out: the full forward with causal_mask(window=...)
    plain = today_model(fast=fast)
    assert_close(whole, plain(x, attn_mask=causal_mask(12, 12, window=window)))
    cache = KVCache()
    outs = [m(x[:, :4], is_causal=True, cache=cache)]
    assert cache.keys.size(2) == min(4, window - 1) and len(cache) == 4
    for i in range(4, 12):
        outs.append(m(x[:, i : i + 1], is_causal=True, cache=cache))
        assert cache.keys.size(2) == min(i + 1, window - 1)
        assert len(cache) == i + 1
    assert_close(torch.cat(outs, dim=1), whole)


def test_a_window_cache_stops_growing_in_inference_mode_then_no_grad():
    window = 4
    m = today_model(window=window)
    x = torch.randn(1, 40, 24, dtype=torch.float64)
    whole = m(x, is_causal=True)
    cache = KVCache()
    with torch.inference_mode():
        outs = [m(x[:, :6], is_causal=True, cache=cache)]
    capacities = set()
    with torch.no_grad():
        for i in range(6, 40):
            outs.append(m(x[:, i : i + 1], is_causal=True, cache=cache))
            capacities.add(cache._keys.size(2))
    assert_close(torch.cat(outs, dim=1), whole)
    # The buffer: never more than a few windows long, whatever the length generated
    assert max(capacities) <= 2 * (window - 1) + 6


def test_training_through_a_windowed_rope_cache_gives_the_full_forwards_gradients():
    m = today_model(window=3, qk_norm=True)
    x = torch.randn(2, 6, 24, dtype=torch.float64, requires_grad=True)
    cache = KVCache()
    chunked = torch.cat(
        [m(x[:, :4], is_causal=True, cache=cache), m(x[:, 4:], is_causal=True, cache=cache)], dim=1
    )
    chunked.square().sum().backward()
    grads = [x.grad.clone()] + [p.grad.clone() for p in m.parameters()]
    x.grad = None
    m.zero_grad()
    m(x, is_causal=True).square().sum().backward()
    for got, expected in zip(grads, [x.grad] + [p.grad for p in m.parameters()], strict=True):
        assert_close(got, expected)


def test_a_window_cache_refuses_a_crop_that_needs_dropped_positions():
    m = today_model(window=3)
    cache = KVCache()
    m(torch.randn(1, 6, 24, dtype=torch.float64), is_causal=True, cache=cache)
    assert "held=2 (window keeps 2)" in repr(cache)
    with pytest.raises(ValueError, match=r"holds only positions 4 \.\. 5 .* n must be at least 6"):
        cache.crop(5)
    cache.crop(6)  # nothing dropped that position 6 needs
    cache.reset()
    assert len(cache) == 0 and "held" not in repr(cache)


def test_a_padding_mask_over_every_position_is_cut_to_what_the_window_cache_holds():
    m = today_model(window=3)
    x = torch.randn(2, 6, 24, dtype=torch.float64)
    visible = torch.ones(2, 6, dtype=torch.bool)
    visible[1, :2] = False  # row 1: two positions of left padding
    whole = m(x, is_causal=True, attn_mask=visible[:, None, None, :])
    cache = KVCache()
    m(x[:, :4], is_causal=True, cache=cache, attn_mask=visible[:, None, None, :4])
    for i in (4, 5):  # the mask covers all positions so far; the cache holds 2 of them
        out = m(
            x[:, i : i + 1], is_causal=True, cache=cache, attn_mask=visible[:, None, None, : i + 1]
        )
        assert_close(out[:, 0], whole[:, i])


def test_scale_and_head_size_options_are_what_the_scores_use():
    torch.manual_seed(0)
    m = MHA(10, 4, head_size=3, scale=0.25, fast=False).double()
    assert m.W_q.weight.shape == (12, 10) and m.W_o.weight.shape == (10, 12)
    x = torch.randn(2, 5, 10, dtype=torch.float64)
    out, weights = m(x, need_weights=True)
    q = m.W_q(x).view(2, 5, 4, 3).transpose(1, 2)
    k = m.W_k(x).view(2, 5, 4, 3).transpose(1, 2)
    assert_close(weights, torch.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-1))
    m.fast = True
    assert_close(m(x), out)


def test_rmsnorm_is_computed_in_float32_as_qwen3_does():
    norm = RMSNorm(4, eps=1e-6).double()
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0, 0.5, -1.0]))
    x = torch.randn(3, 4, dtype=torch.float64)
    wide = x.float()
    expected = norm.weight * (wide / (wide.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()).double()
    assert_close(norm(x), expected, dtype=torch.float32)
    assert norm(x).dtype == torch.float64


def test_bias_names_the_projections_that_have_one():
    m = MHA(20, 4, bias=("W_q", "W_k", "W_v"))
    assert [n for n in ("W_q", "W_k", "W_v", "W_o") if getattr(m, n).bias is not None] == [
        "W_q",
        "W_k",
        "W_v",
    ]
    # The default loads a pure checkpoint unchanged: no new parameter, no new buffer saved
    assert set(MHA(20, 4).state_dict()) == set(
        MHA(20, 4, rope=RotaryEmbedding(4), window=3).state_dict()
    )


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (dict(bias=("W_q", "W_x")), ValueError, "bias names projections among"),
        (dict(scale=0.0), ValueError, "scale must be positive, got 0.0"),
        (dict(scale="1"), TypeError, "scale must be a float, got str ('1')"),
        (dict(norm_eps=-1.0), ValueError, "norm_eps must be positive, got -1.0"),
        (dict(window=0), ValueError, "window must be a positive int, got 0"),
        (
            dict(rope=RotaryEmbedding(8)),
            ValueError,
            "rope.rotary_dims (8) must be at most head_size (5)",
        ),
        (
            dict(rope=torch.nn.Identity()),
            TypeError,
            "rope must be a mha.rope.RotaryEmbedding, got Identity",
        ),
        (dict(head_size=0), ValueError, "head_size must be a positive int, got 0"),
    ],
)
def test_each_option_refuses_a_bad_value_by_name(options, error, message):
    with pytest.raises(error) as e:
        MHA(20, 4, **options)
    assert message in str(e.value)
    assert raised_in_mha(e)


def test_forward_refuses_what_the_options_cannot_mean():
    m = MHA(20, 4, rope=RotaryEmbedding(4))
    x = torch.randn(2, 3, 20)
    with pytest.raises(ValueError, match=r"rope.*context= .cross-attention. has no such positions"):
        m(x, torch.randn(2, 5, 20))
    with pytest.raises(TypeError, match=r"positions must be an integer tensor, got torch\.float32"):
        m(x, positions=torch.zeros(3))
    with pytest.raises(ValueError, match=r"positions must be \[q_len\] = \[3\] or .* got \[2, 4\]"):
        m(x, positions=torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"positions= is used only by rope, temperature or chunk"):
        MHA(20, 4)(x, positions=torch.arange(3))
    with pytest.raises(ValueError, match=r"sliding window \(window=2\).*pass is_causal=True"):
        MHA(20, 4, window=2)(x)
    with pytest.raises(ValueError, match="rotary_dims must be a positive even number, got 3"):
        RotaryEmbedding(3)
    with pytest.raises(ValueError, match="a llama3 scaling needs"):
        RotaryEmbedding(4, scaling={"rope_type": "llama3", "factor": 8.0})
    with pytest.raises(ValueError, match="got unknown keys \\['beta'\\]"):
        RotaryEmbedding(
            4,
            scaling={
                "rope_type": "yarn",
                "factor": 2.0,
                "original_max_position_embeddings": 8,
                "beta": 1,
            },
        )


LONGROPE = {
    "rope_type": "longrope",
    "short_factor": [1.0, 2.0],
    "long_factor": [3.0, 5.0],
    "original_max_position_embeddings": 4,
    "factor": 4.0,
}


def test_longrope_turns_a_call_by_its_long_factors_once_its_last_position_passes_the_context():
    rope = RotaryEmbedding(4, scaling=LONGROPE)
    short, long = rope.inv_freq, rope.long_inv_freq
    per_radian = 10000.0 ** torch.tensor([0.0, 0.5])
    assert torch.equal(short, 1.0 / (torch.tensor([1.0, 2.0]) * per_radian))
    assert torch.equal(long, 1.0 / (torch.tensor([3.0, 5.0]) * per_radian))
    assert rope.attention_factor == math.sqrt(1 + math.log(4.0) / math.log(4))  # sqrt(2)
    # positions 0-3 (4 positions, the trained context): short; 0-4, or 4 alone: long for all
    cos, _ = rope(torch.arange(4))
    assert torch.equal(cos[1, :2], torch.cos(short) * rope.attention_factor)
    for positions in (torch.arange(5), torch.tensor([4]), torch.tensor([[0, 1], [2, 4]])):
        cos, _ = rope(positions)
        turns = positions[..., None].float() * long
        assert torch.equal(cos[..., :2], torch.cos(turns) * rope.attention_factor)
    # a cast keeps both sets float32; without factor or attention_factor, no scaling
    assert rope.double().long_inv_freq.dtype == torch.float32
    plain = {k: v for k, v in LONGROPE.items() if k != "factor"}
    assert RotaryEmbedding(4, scaling=plain).attention_factor == 1.0


def test_longrope_needs_one_factor_per_pair():
    with pytest.raises(ValueError, match=r"short_factor must be a list of rotary_dims // 2 = 2 "):
        RotaryEmbedding(4, scaling={**LONGROPE, "short_factor": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match=r"a longrope scaling needs \['long_factor'\]"):
        RotaryEmbedding(4, scaling={k: v for k, v in LONGROPE.items() if k != "long_factor"})


# ---- MLA on its own terms -----------------------------------------------------------------------


def test_mla_caches_kv_lora_rank_plus_rope_dims_per_position_whatever_the_heads():
    torch.manual_seed(0)
    m = MLA(32, 8, kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=2, v_head_dim=4).eval()
    cache = LatentCache()
    with torch.no_grad():
        m(torch.randn(3, 10, 32), is_causal=True, cache=cache)
    held = cache.latent.numel() + cache.rope_keys.numel()
    assert held == 3 * 10 * (6 + 2)
    # The same heads as plain attention would cache 2 * heads * head_size per position
    plain = KVCache()
    with torch.no_grad():
        MHA(32, 8)(torch.randn(3, 10, 32), is_causal=True, cache=plain)
    assert plain.keys.numel() + plain.values.numel() == 3 * 10 * 2 * 8 * 4


def test_mla_absorbed_equals_expanded_with_a_padding_mask_and_crop():
    torch.manual_seed(1)
    m = MLA(
        24, 4, q_lora_rank=10, kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5
    ).double()
    x = torch.randn(2, 7, 24, dtype=torch.float64)
    visible = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    visible[1, ..., :3] = False
    expanded = m(x, is_causal=True, attn_mask=visible)
    absorbed = m(x, is_causal=True, attn_mask=visible, absorb=True)
    assert_close(absorbed, expanded)
    cache = LatentCache()
    m(x[:, :5], is_causal=True, cache=cache, attn_mask=visible[..., :5])
    cache.crop(4)
    again = m(x[:, 4:], is_causal=True, cache=cache, attn_mask=visible, absorb=True)
    assert_close(again, expanded[:, 4:])


def test_mla_refuses_bad_arguments_by_name():
    sizes = dict(kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5)
    with pytest.raises(ValueError, match="kv_lora_rank must be a positive int, got 0"):
        MLA(24, 4, **{**sizes, "kv_lora_rank": 0})
    with pytest.raises(
        ValueError, match=r"rope must be a RotaryEmbedding of qk_rope_head_dim \(4\)"
    ):
        MLA(24, 4, rope=RotaryEmbedding(6), **sizes)
    m = MLA(24, 4, **sizes)
    with pytest.raises(TypeError, match=r"cache must be a mha\.mla\.LatentCache, got KVCache"):
        m(torch.randn(1, 2, 24), cache=KVCache())
    with pytest.raises(ValueError, match="n must be at most len"):
        LatentCache().crop(1)


def test_a_latent_cache_is_a_kv_cache_its_buffers_crop_reorder_and_save(tmp_path):
    torch.manual_seed(2)
    m = MLA(24, 4, kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5).double()
    x = torch.randn(2, 9, 24, dtype=torch.float64)
    whole = m(x, is_causal=True)
    cache = LatentCache()
    with torch.inference_mode():
        m(x[:, :6], is_causal=True, cache=cache)
    cache.reorder(torch.tensor([1, 0]))
    torch.save(cache, tmp_path / "cache.pt")
    loaded = torch.load(tmp_path / "cache.pt")
    with torch.no_grad():
        again = m(x.flip(0)[:, 6:], is_causal=True, cache=loaded, absorb=True)
    assert_close(again, whole.flip(0)[:, 6:])
    assert loaded.latent.shape == (2, 9, 8) and loaded.rope_keys.shape == (2, 9, 4)
    with pytest.raises(ValueError, match="belongs to another module"):
        MLA(24, 4, kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5)(
            x[:, :1].float(), cache=loaded
        )


# ---- Gemma: soft-capped scores, and the q/k norm that scales by 1 + weight ---------------------


def gemma_scores(m: MHA, x: torch.Tensor) -> torch.Tensor:
    """The scaled scores of ``m`` on ``x``, before any cap, written out here."""
    q = m.W_q(x).view(*x.shape[:2], m.heads_num, m.head_size).transpose(1, 2)
    k = m.W_k(x).view(*x.shape[:2], m.kv_heads, m.head_size).transpose(1, 2)
    k = k.repeat_interleave(m.heads_num // m.kv_heads, dim=1)
    return q @ k.transpose(-2, -1) * m.head_size**-0.5


def test_softcapped_weights_are_the_softmax_of_tanh_of_the_scores_over_the_cap_times_it():
    torch.manual_seed(0)
    m = MHA(20, 4, kv_heads=2, softcap=1.5, fast=False).double()
    x = 3 * torch.randn(2, 5, 20, dtype=torch.float64)  # scores well past the cap
    _, weights = m(x, is_causal=True, need_weights=True)
    capped = torch.tanh(gemma_scores(m, x) / 1.5) * 1.5
    capped = capped.masked_fill(~causal_mask(5, 5), float("-inf"))  # the mask after the cap
    assert_close(weights, torch.softmax(capped, dim=-1))


@given(seed=seeds, cap=st.floats(0.05, 4.0), gain=st.sampled_from([0.1, 1.0, 10.0]))
def test_the_cap_bounds_every_score_so_two_weights_of_a_row_differ_by_at_most_exp_2_cap(
    seed, cap, gain
):
    # w_j / w_i = exp(s_j - s_i), and each capped score lies in (-cap, cap)
    torch.manual_seed(seed)
    m = MHA(12, 3, softcap=cap).double()
    x = gain * torch.randn(2, 6, 12, dtype=torch.float64)
    _, weights = m(x, need_weights=True)
    spread = weights.log().amax(-1) - weights.log().amin(-1)
    assert spread.max().item() < 2 * cap + 1e-12


def test_with_a_softcap_the_fast_flag_runs_the_written_out_path(monkeypatch):
    import mha.full

    calls = []
    kernel = torch.nn.functional.scaled_dot_product_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return kernel(*args, **kwargs)

    monkeypatch.setattr(mha.full.F, "scaled_dot_product_attention", counted)
    torch.manual_seed(0)
    capped = MHA(20, 4, softcap=2.0).double()
    x = torch.randn(2, 5, 20, dtype=torch.float64)
    out = capped(x, is_causal=True)
    assert calls == [], "the fused kernel ran, and it cannot cap the scores"
    capped.fast = False
    assert_close(out, capped(x, is_causal=True))
    capped.softcap = None
    capped.fast = True
    capped(x, is_causal=True)
    assert calls == [1], "without a cap the fast path calls the kernel"


@pytest.mark.parametrize("window", [None, 3])
def test_softcapped_decoding_after_a_prefill_equals_one_causal_forward(window):
    torch.manual_seed(0)
    m = MHA(20, 4, kv_heads=2, softcap=1.0, window=window, rope=RotaryEmbedding(4)).double()
    x = 2 * torch.randn(2, 7, 20, dtype=torch.float64)
    whole, cache = m(x, is_causal=True), KVCache()
    parts = [m(x[:, :4], is_causal=True, cache=cache)]
    parts += [m(x[:, i : i + 1], is_causal=True, cache=cache) for i in range(4, 7)]
    assert_close(torch.cat(parts, dim=1), whole)


def test_softcap_is_printed_and_carried_by_its_options():
    m = MHA(20, 4, softcap=30)
    assert m.softcap == 30.0 and isinstance(m.softcap, float)
    assert m.extra_repr() == "20, 4, kv_heads=4, head_size=5, softcap=30.0"
    assert MHA.from_options(m.options).softcap == 30.0
    assert m.options.changed() == ["softcap"]


def test_gemmas_norm_scales_by_one_plus_weight_in_float32_then_casts_back():
    norm = RMSNorm(4, eps=1e-6, plus_one=True).double()
    assert norm.weight.detach().tolist() == [0.0] * 4  # Gemma's weights start at 0
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0, -0.5, -1.0]))
    x = torch.randn(3, 4, dtype=torch.float64)
    wide = x.float()
    normed = wide / (wide.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()
    expected = (normed * (1.0 + norm.weight.float())).double()
    assert_close(norm(x), expected, dtype=torch.float32)
    assert norm(x).dtype == torch.float64
    m = MHA(20, 4, qk_norm="gemma")
    assert m.q_norm.plus_one and m.k_norm.plus_one
    assert "qk_norm='gemma'" in m.extra_repr()


# ---- gpt-oss: a sink per head in the softmax's denominator -------------------------------------


def test_sink_weights_are_the_softmax_with_one_more_logit_per_head_then_dropped():
    torch.manual_seed(0)
    m = MHA(20, 4, kv_heads=2, sinks=True, fast=False).double()
    with torch.no_grad():
        m.sink_logits.copy_(torch.tensor([-2.0, 0.0, 1.0, 3.0]))
    x = torch.randn(2, 5, 20, dtype=torch.float64)
    _, weights = m(x, is_causal=True, need_weights=True)
    scores = gemma_scores(m, x).masked_fill(~causal_mask(5, 5), float("-inf"))
    sink = m.sink_logits.view(1, 4, 1, 1).expand(2, 4, 5, 1)
    assert_close(weights, torch.softmax(torch.cat([scores, sink], -1), -1)[..., :-1])
    # What the sink takes is what the row's weights lack, no value receives it
    taken = 1 - weights.sum(-1)  # [2, 4, 5]
    assert 0 < taken.min().item() and taken.max().item() < 1


@pytest.mark.parametrize("window", [None, 3])
def test_with_sinks_fast_runs_the_written_out_path_and_decoding_equals_one_forward(
    window, monkeypatch
):
    import mha.full

    calls = []
    kernel = torch.nn.functional.scaled_dot_product_attention
    counted = lambda *args, **kwargs: calls.append(1) or kernel(*args, **kwargs)  # noqa: E731
    monkeypatch.setattr(mha.full.F, "scaled_dot_product_attention", counted)
    torch.manual_seed(0)
    m = MHA(20, 4, kv_heads=2, sinks=True, window=window, rope=RotaryEmbedding(4)).double()
    torch.nn.init.normal_(m.sink_logits)
    x = torch.randn(2, 7, 20, dtype=torch.float64)
    m(x, is_causal=True)
    assert calls == [], "the fused kernel ran, and it has no sinks"
    assert_decoding_and_the_written_out_path_equal_one_forward(m, x)


def assert_decoding_and_the_written_out_path_equal_one_forward(m, x):
    """``m``'s causal forward over ``x``'s 7 positions equals a prefill of 4 then 3 steps in a
    ``KVCache``, and equals itself with ``fast=False``."""
    whole, cache = m(x, is_causal=True), KVCache()
    parts = [m(x[:, :4], is_causal=True, cache=cache)]
    parts += [m(x[:, i : i + 1], is_causal=True, cache=cache) for i in range(4, 7)]
    assert_close(torch.cat(parts, dim=1), whole)
    m.fast = False
    assert_close(m(x, is_causal=True), whole)


# ---- Qwen3-Next: each head's output times a sigmoid gate -----------------------------------------


@pytest.mark.parametrize("fast", [True, False])
def test_gate_multiplies_each_heads_output_by_the_sigmoid_of_its_rows_of_w_q(fast):
    """W_q's rows, head by head: the query's head_size, then the gate's (Qwen3-Next's q_proj);
    the output is the ungated module's on the query rows, each head times sigmoid(gate), then
    W_o."""
    torch.manual_seed(0)
    m = MHA(20, 4, kv_heads=2, gate=True, fast=fast, rope=RotaryEmbedding(4)).double()
    assert m.W_q.weight.shape == (4 * 2 * 5, 20)
    plain = MHA(20, 4, kv_heads=2, fast=fast, rope=RotaryEmbedding(4)).double()
    rows = m.W_q.weight.view(4, 2, 5, 20)  # [heads_num, query/gate, head_size, hidden_size]
    biases = m.W_q.bias.view(4, 2, 5)
    with torch.no_grad():
        rest = {k: v for k, v in m.state_dict().items() if not k.startswith("W_q")}
        plain.load_state_dict(rest, strict=False)
        plain.W_q.weight.copy_(rows[:, 0].reshape(20, 20))
        plain.W_q.bias.copy_(biases[:, 0].reshape(20))
    x = torch.randn(2, 6, 20, dtype=torch.float64)
    gate = torch.sigmoid(x @ rows[:, 1].reshape(20, 20).T + biases[:, 1].reshape(20))  # [2, 6, 20]
    heads = []
    plain.W_o.register_forward_hook(lambda module, args, out: heads.append(args[0]))
    plain(x, is_causal=True)
    expected = torch.nn.functional.linear(heads[0] * gate, m.W_o.weight, m.W_o.bias)
    assert_close(m(x, is_causal=True), expected)
    assert "gate=True" in m.extra_repr()


def test_with_a_gate_fast_keeps_the_fused_kernel_and_decoding_equals_one_forward(monkeypatch):
    import mha.full

    calls = []
    kernel = torch.nn.functional.scaled_dot_product_attention
    counted = lambda *args, **kwargs: calls.append(1) or kernel(*args, **kwargs)  # noqa: E731
    monkeypatch.setattr(mha.full.F, "scaled_dot_product_attention", counted)
    torch.manual_seed(0)
    m = MHA(20, 4, kv_heads=2, gate=True, qk_norm="gemma", rope=RotaryEmbedding(2)).double()
    x = torch.randn(2, 7, 20, dtype=torch.float64)
    m(x, is_causal=True)
    assert calls == [1], "the gate multiplies the output after attention: the kernel runs"
    assert_decoding_and_the_written_out_path_equal_one_forward(m, x)


# ---- Llama 4: each query scaled by a temperature of its position ---------------------------------


@pytest.mark.parametrize("fast", [True, False])
def test_temperature_scales_each_query_by_log1p_of_its_floored_position(fast):
    """Position p's query times log1p(floor((p + 1) / floor_scale)) * attn_scale + 1 (float32),
    then attention as without: the scores of a module without temperature, times that factor."""
    torch.manual_seed(0)
    m = MHA(20, 4, kv_heads=2, temperature=(0.5, 2.0), fast=fast).double()
    plain = MHA(20, 4, kv_heads=2, fast=False).double()
    plain.load_state_dict(m.state_dict())
    x = torch.randn(2, 7, 20, dtype=torch.float64)
    factor = torch.log1p(torch.floor((torch.arange(7.0) + 1) / 2.0)) * 0.5 + 1  # [7]
    exact = torch.tensor([1.0, 1 + 0.5 * math.log(2), 1 + 0.5 * math.log(2)])  # p = 0, 1, 2
    assert (factor[:3] - exact).abs().max() < 1e-6  # float32's rounding
    _, weights = plain(x, is_causal=True, need_weights=True)
    scores = torch.log(weights)  # the causal row's log-softmax: scores up to a constant
    m.fast = False
    _, tuned = m(x, is_causal=True, need_weights=True)
    expected = torch.softmax(scores * factor.double().view(7, 1), dim=-1)
    assert_close(tuned, expected)
    m.fast = fast
    # decoding from a cache continues the positions: the same output as one forward
    whole, cache = m(x, is_causal=True), KVCache()
    parts = [m(x[:, :3], is_causal=True, cache=cache)]
    parts += [m(x[:, i : i + 1], is_causal=True, cache=cache) for i in range(3, 7)]
    assert_close(torch.cat(parts, dim=1), whole)
    assert "temperature=(0.5, 2.0)" in m.extra_repr()
    # each row at its own positions (a left-padded batch): each row as alone at those
    rows = torch.stack([torch.arange(7), torch.arange(3, 10)])  # [2, 7]
    both = m(x, is_causal=True, positions=rows)
    assert_close(both[:1], m(x[:1], is_causal=True))
    assert_close(both[1:], m(x[1:], is_causal=True, positions=torch.arange(3, 10)))


# ---- Llama 4: attention within chunks, and its q/k norm without a weight -------------------------


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("chunk", [1, 3, 5])
def test_a_chunked_cache_frees_each_finished_chunk_and_decodes_as_the_full_forward(fast, chunk):
    m = today_model(chunk=chunk, fast=fast, qk_norm="weightless")
    x = torch.randn(2, 12, 24, dtype=torch.float64)
    whole = m(x, is_causal=True)
    # The chunks' mask, written out: query p sees keys p - p % chunk .. p
    plain = today_model(fast=fast, qk_norm="weightless")
    p = torch.arange(12)
    same = (p[:, None] // chunk == p[None, :] // chunk) & causal_mask(12, 12)
    assert_close(whole, plain(x, attn_mask=same))
    assert not torch.allclose(whole, plain(x, is_causal=True)), "the chunks change the output"
    cache = KVCache()
    outs = [m(x[:, :4], is_causal=True, cache=cache)]
    assert cache.keys.size(2) == 4 % chunk and len(cache) == 4
    for i in range(4, 12):
        outs.append(m(x[:, i : i + 1], is_causal=True, cache=cache))
        assert cache.keys.size(2) == (i + 1) % chunk, "only the chunk in progress is held"
        assert len(cache) == i + 1
    assert_close(torch.cat(outs, dim=1), whole)
    # A prompt past a cache's max_len: only what the chunk in progress needs is written
    bounded = KVCache(max_len=chunk)
    assert_close(m(x, is_causal=True, cache=bounded), whole)
    assert bounded.keys.size(2) == 12 % chunk and len(bounded) == 12


def test_a_chunked_prompt_and_its_decode_steps_call_the_kernel_without_a_mask(monkeypatch):
    import mha.full

    calls = []
    kernel = torch.nn.functional.scaled_dot_product_attention

    def recorded(q, k, v, **kw):
        calls.append((q.shape[0], q.shape[2], k.shape[2], kw.get("attn_mask"), kw.get("is_causal")))
        return kernel(q, k, v, **kw)

    monkeypatch.setattr(mha.full.F, "scaled_dot_product_attention", recorded)
    m, cache = today_model(chunk=4), KVCache()
    x = torch.randn(2, 13, 24, dtype=torch.float64)
    whole = m(x, is_causal=True)
    # A prompt of 10 positions: its 2 whole chunks as a batch of 2 * 2 causal calls of 4, then
    # the 2 left; no mask, and no score between two chunks computed
    out = [m(x[:, :10], is_causal=True, cache=cache)]
    assert calls[-2:] == [(4, 4, 4, None, True), (2, 2, 2, None, True)]
    for i in range(10, 13):  # the cache holds only the query's chunk: every key is the query's
        out.append(m(x[:, i : i + 1], is_causal=True, cache=cache))
        assert calls[-1] == (2, 1, i % 4 + 1, None, None)  # 12 starts chunk 3: itself alone
    assert_close(torch.cat(out, dim=1), whole)
    # A call that starts inside a chunk, or counts by positions, passes the kernel the chunks' mask
    m(x[:, :6], is_causal=True, positions=torch.arange(6))
    assert calls[-1][3].shape == (6, 6)


def test_a_chunked_cache_refuses_a_crop_into_a_freed_chunk_and_takes_one_within():
    m = today_model(chunk=4)
    cache = KVCache()
    m(torch.randn(1, 10, 24, dtype=torch.float64), is_causal=True, cache=cache)
    assert "held=2 (its chunk of 4 so far)" in repr(cache)
    with pytest.raises(ValueError, match=r"holds only positions 8 \.\. 9 .* n must be at least 8"):
        cache.crop(7)
    cache.crop(8)  # position 8 starts a chunk: it needs nothing before it
    assert len(cache) == 8 and cache.keys.size(2) == 0
    cache.reset()
    assert len(cache) == 0 and "held" not in repr(cache)


@pytest.mark.parametrize("static", [False, True])
def test_chunks_count_by_each_rows_positions_so_a_left_padded_row_equals_itself_alone(static):
    # Row 1 is row 0's sequence without its first 2 positions, padded on the left by 2: with
    # positions counted from its first real one, its chunks are those of the sequence alone
    m = today_model(chunk=3)
    x = torch.randn(2, 9, 24, dtype=torch.float64)
    x[1, 2:] = x[0, :7]
    positions = torch.stack([torch.arange(9), torch.arange(9) - 2]).clamp(min=0)  # [2, 9]
    visible = torch.ones(2, 9, dtype=torch.bool)
    visible[1, :2] = False
    alone = m(x[:1], is_causal=True)
    cache = KVCache(max_len=9, static=True) if static else KVCache()
    # a static cache's mask covers its 9 slots, a dynamic one's the positions seen so far
    covered = lambda end: visible[:, None, None, : 9 if static else end]  # noqa: E731
    outs = [
        m(x[:, :5], is_causal=True, positions=positions[:, :5], cache=cache, attn_mask=covered(5))
    ]
    for i in range(5, 9):
        step = dict(positions=positions[:, i : i + 1], cache=cache, attn_mask=covered(i + 1))
        outs.append(m(x[:, i : i + 1], is_causal=True, **step))
    out = torch.cat(outs, dim=1)
    assert_close(out[0], alone[0])
    assert_close(out[1, 2:], alone[0, :7])
    if not static:  # counted by positions, a row's chunk may start later: chunk - 1 held
        assert cache.keys.size(2) == 2


def test_the_weightless_norm_is_rmsnorm_without_a_weight_after_the_rotation():
    norm = RMSNorm(8, eps=1e-5, elementwise_affine=False)
    assert norm.weight is None and not list(norm.parameters())
    assert repr(norm) == "RMSNorm(8, eps=1e-05, elementwise_affine=False)"
    t = torch.randn(3, 8, dtype=torch.float64)
    by_hand = (t.float() * torch.rsqrt(t.float().pow(2).mean(-1, keepdim=True) + 1e-5)).double()
    assert torch.equal(norm(t), by_hand)
    # In MHA: no parameter, and the norm after the rotation (Llama 4's order)
    m = today_model(qk_norm="weightless", norm_eps=1e-5)
    assert [n for n, _ in m.named_parameters() if "norm" in n] == []
    x = torch.randn(2, 5, 24, dtype=torch.float64)
    q = m.W_q(x).view(2, 5, 4, 8).transpose(1, 2)
    k = m.W_k(x).view(2, 5, 2, 8).transpose(1, 2)
    cos, sin = m.rope(torch.arange(5))
    q, k = norm(m.rope.rotate(q, cos, sin)), norm(m.rope.rotate(k, cos, sin))
    v = m.W_v(x).view(2, 5, 2, 8).transpose(1, 2)
    attended = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True
    )
    expected = m.W_o(attended.transpose(1, 2).reshape(2, 5, 32))
    assert_close(m(x, is_causal=True), expected)
    with pytest.raises(ValueError, match="plus_one scales by 1 \\+ weight: it needs"):
        RMSNorm(8, plus_one=True, elementwise_affine=False)


@pytest.mark.parametrize(
    ("options", "call", "message"),
    [
        (dict(chunk=0), None, "chunk must be a positive int, got 0"),
        (dict(chunk=4, window=3), None, r"window \(3\) and chunk \(4\) are two ways"),
        (dict(chunk=4), dict(), r"attends in chunks \(chunk=4\), .* pass is_causal=True"),
        (
            dict(chunk=4, rope=None),
            dict(is_causal=True, context=True),
            r"chunks \(chunk=4\) of self-attention's positions: context= .* refused",
        ),
    ],
)
def test_chunk_refuses_what_it_cannot_mean_by_name(options, call, message):
    with pytest.raises((ValueError, TypeError), match=message) as e:
        m = today_model(**options)
        x = torch.randn(1, 3, 24, dtype=torch.float64)
        context = call.pop("context", None) and torch.randn(1, 5, 24, dtype=torch.float64)
        m(x, context, **call)
    assert raised_in_mha(e)
