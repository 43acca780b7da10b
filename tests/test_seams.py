"""Where two features of ``mha`` meet: each reproducer of the 2026-12-01 reviews that failed (or
was silently wrong) before issue 29, as a test of its own. The transformers ones are in
``tests/test_transformers.py`` (bf16 frequencies, qk_norm under autocast with a cache)."""

from __future__ import annotations

import re

import pytest
import torch
from support import assert_close

from mha.decoder import Decoder, generate
from mha.full import MHA, KVCache, ModelCache
from mha.mla import MLA, LatentCache
from mha.rope import RotaryEmbedding


def recomputed(model, x, **options):
    """``model`` over the whole of ``x`` without a cache: what a cached run must equal."""
    with torch.no_grad():
        return model(x, is_causal=True, **options)


# ---- Sliding windows: padding, masks over the held keys, long prompts, rollback ---------------


def windowed_decoder():
    torch.manual_seed(0)
    lm = Decoder(vocab_size=50, hidden_size=32, heads_num=4, kv_heads=2).eval()
    for block in lm.blocks:
        block.attn.window = 3  # what MHA(..., window=3) sets
    return lm


def test_right_padding_with_a_window_is_refused_by_name_and_left_padding_is_right():
    lm, prompts = windowed_decoder(), [[1, 2, 3, 4, 5, 6, 7, 8], [9, 10]]
    with pytest.raises(ValueError, match=re.escape("left=False pads the shorter prompts")) as e:
        generate(lm, prompts, 12, left=False)
    assert "model.blocks.0.attn (window=3)" in str(e.value)
    alone = [generate(lm, [p], 12)[0] for p in prompts]
    together = generate(lm, prompts, 12)
    assert [torch.equal(row, a) for row, a in zip(together, alone, strict=True)] == [True, True]
    # Prompts of one length have no gap: the right is allowed, and agrees
    same = [[1, 2, 3], [4, 5, 6]]
    assert torch.equal(generate(lm, same, 5, left=False), generate(lm, same, 5))


def test_a_window_accepts_a_mask_over_the_keys_its_cache_holds():
    torch.manual_seed(0)
    m, x = MHA(32, 4, window=4).eval(), torch.randn(1, 10, 32)
    cache = KVCache()
    with torch.no_grad():
        m(x[:, :9], is_causal=True, cache=cache)  # holds the 3 latest of 9
        held = torch.ones(1, 1, 1, 4, dtype=torch.bool)  # transformers' form: 3 held + 1 new
        step = m(x[:, 9:], is_causal=True, cache=cache, attn_mask=held)
    assert (len(cache), cache.keys.size(2)) == (10, 3)
    assert_close(step, recomputed(m, x)[:, 9:])


def test_a_window_refuses_a_mask_of_neither_length_naming_both():
    m, cache = MHA(32, 4, window=4).eval(), KVCache()
    with torch.no_grad():
        m(torch.randn(1, 9, 32), is_causal=True, cache=cache)
        expected = (
            "attn_mask of shape [1, 1, 1, 5] must broadcast to [batch_size, heads_num, q_len, "
            "k_len] = [1, 4, 1, 10] (k_len: every position the cache has seen and this call's), "
            "or [1, 4, 1, 4] (the keys the sliding window's cache holds and this call's)"
        )
        with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
            mask = torch.ones(1, 1, 1, 5, dtype=torch.bool)
            m(torch.randn(1, 1, 32), is_causal=True, cache=cache, attn_mask=mask)
    assert len(cache) == 9  # a refused call leaves the cache as it was


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "math"])
def test_a_long_prompt_fits_a_short_windowed_cache_and_decoding_goes_on(fast):
    torch.manual_seed(0)
    m, x = MHA(32, 4, kv_heads=2, window=4, fast=fast).eval(), torch.randn(2, 23, 32)
    cache = KVCache(max_len=8)
    with torch.no_grad():
        prefill = m(x[:, :20], is_causal=True, cache=cache)  # 20 positions, 3 of them kept
        steps = [m(x[:, i : i + 1], is_causal=True, cache=cache) for i in range(20, 23)]
    assert (len(cache), cache.keys.size(2), cache._keys.size(2)) == (23, 3, 8)
    whole = recomputed(m, x)
    assert_close(prefill, whole[:, :20])
    assert_close(torch.cat(steps, dim=1), whole[:, 20:])


def test_a_windowed_cache_too_short_for_the_window_is_refused_by_name():
    m, cache = MHA(32, 4, window=4).eval(), KVCache(max_len=2)
    expected = (
        "cache holds at most max_len (2) positions, and the window needs window - 1 + rollback "
        "= 3 held between calls: create it with max_len of at least 3"
    )
    with torch.no_grad(), pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        m(torch.randn(1, 5, 32), is_causal=True, cache=cache)
    assert len(cache) == 0


@pytest.mark.parametrize("max_len", [None, 12])
def test_rollback_lets_speculative_decoding_crop_a_windowed_cache(max_len):
    """Verify a draft of 3 tokens in one call, accept 1, crop the 2 rejected, go on: equal to
    recomputing, with a window of 4 long past."""
    torch.manual_seed(0)
    m, x = MHA(32, 4, window=4).eval(), torch.randn(1, 16, 32)
    draft = torch.randn(1, 3, 32)
    cache = KVCache(max_len, rollback=2)
    with torch.no_grad():
        m(x[:, :12], is_causal=True, cache=cache)
        m(torch.cat([x[:, 12:13], draft[:, 1:]], dim=1), is_causal=True, cache=cache)
        cache.crop(13)  # keep the accepted token
        rest = m(x[:, 13:], is_causal=True, cache=cache)
    assert_close(rest, recomputed(m, x)[:, 13:])
    # Without rollback the same crop is refused, naming what is held
    plain = KVCache(max_len)
    with torch.no_grad():
        m(x[:, :15], is_causal=True, cache=plain)
    with pytest.raises(ValueError, match=re.escape("n must be at least 15")):
        plain.crop(13)


def test_a_model_cache_passes_rollback_to_every_layer():
    cache = ModelCache(3, max_len=8, rollback=2)
    assert [layer.rollback for layer in cache.layers] == [2, 2, 2]
    assert repr(cache.layers[0]) == "KVCache(len=0, max_len=8, rollback=2)"


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_rollback_must_be_a_non_negative_int(bad):
    error = ValueError if bad == -1 else TypeError
    with pytest.raises(error, match="rollback must be"):
        KVCache(rollback=bad)


# ---- transformers' position_ids: [1, q_len] broadcasts -----------------------------------------


def test_positions_of_one_row_broadcast_over_the_batch():
    torch.manual_seed(0)
    m, x = MHA(32, 4, rope=RotaryEmbedding(8)).eval(), torch.randn(3, 5, 32)
    at = torch.arange(7, 12)
    with torch.no_grad():
        one_row = m(x, is_causal=True, positions=at[None])  # [1, q_len]
        assert torch.equal(one_row, m(x, is_causal=True, positions=at))
        assert torch.equal(one_row, m(x, is_causal=True, positions=at.expand(3, -1)))


def test_mla_takes_positions_of_one_row_too():
    torch.manual_seed(0)
    m = MLA(32, 4, kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5).eval()
    x, at = torch.randn(2, 3, 32), torch.arange(4, 7)
    with torch.no_grad():
        assert torch.equal(m(x, positions=at[None]), m(x, positions=at))


# ---- Autocast with a cache: an RMSNorm's float32 output meets lower-precision values ----------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("absorb", [False, True], ids=["expanded", "absorbed"])
def test_mla_under_autocast_decodes_with_its_latent_cache(dtype, absorb):
    torch.manual_seed(0)
    m = MLA(32, 4, kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5).eval()
    x, cache = torch.randn(2, 7, 32), LatentCache()
    with torch.autocast("cpu", dtype=dtype), torch.no_grad():
        prefill = m(x[:, :5], is_causal=True, cache=cache, absorb=absorb)
        steps = [m(x[:, i : i + 1], is_causal=True, cache=cache, absorb=absorb) for i in (5, 6)]
    assert cache.latent.dtype == cache.rope_keys.dtype == dtype
    exact = recomputed(m, x)
    assert_close(prefill.float(), exact[:, :5], dtype=dtype)
    assert_close(torch.cat(steps, dim=1).float(), exact[:, 5:], dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_qk_norm_under_autocast_decodes_with_a_cache(dtype):
    torch.manual_seed(0)
    m = MHA(32, 4, kv_heads=2, head_size=8, bias=False, qk_norm=True).eval()
    x, cache = torch.randn(1, 6, 32), KVCache()
    with torch.autocast("cpu", dtype=dtype), torch.no_grad():
        prefill = m(x[:, :5], is_causal=True, cache=cache)
        step = m(x[:, 5:], is_causal=True, cache=cache)
    assert cache.keys.dtype == cache.values.dtype == dtype
    exact = recomputed(m, x)
    assert_close(torch.cat([prefill, step], dim=1).float(), exact, dtype=dtype)


# ---- Saving a cache, the checks of rope --------------------------------------------------------


def test_a_saved_cache_holds_its_positions_not_its_free_room(tmp_path):
    """``KVCache(max_len=4096)`` holding 10 positions wrote the whole buffer (about 1 MB here);
    now what it holds, and decoding goes on from the loaded copy as from the original."""
    torch.manual_seed(0)
    m, x = MHA(64, 4, kv_heads=2).eval(), torch.randn(1, 11, 64)
    big, small = KVCache(max_len=4096), KVCache()
    with torch.no_grad():
        m(x[:, :10], is_causal=True, cache=big)
        m(x[:, :10], is_causal=True, cache=small)
    torch.save(big, tmp_path / "big.pt")
    torch.save(small, tmp_path / "small.pt")
    sizes = [(tmp_path / name).stat().st_size for name in ("big.pt", "small.pt")]
    assert sizes[0] < 2 * sizes[1], sizes  # no 4096 positions of room
    loaded = torch.load(tmp_path / "big.pt")
    assert (len(loaded), loaded.max_len) == (10, 4096)
    with torch.no_grad():
        step = m(x[:, 10:], is_causal=True, cache=loaded)
    assert "capacity=4096" in repr(loaded), repr(loaded)  # the room, allocated again
    assert_close(step, recomputed(m, x)[:, 10:])


def test_a_rope_base_that_is_not_a_number_is_a_type_error_as_elsewhere():
    """One rule (mha/checks.py): the wrong type is a TypeError, the right type out of range a
    ValueError, in the same words wherever the argument is."""
    with pytest.raises(TypeError, match=re.escape("base must be a float, got str ('10000')")):
        RotaryEmbedding(4, base="10000")
    with pytest.raises(TypeError, match=re.escape("scale must be a float, got str ('1')")):
        MHA(20, 4, scale="1")
    with pytest.raises(TypeError, match=re.escape("rotary_dims must be an int, got str ('4')")):
        RotaryEmbedding("4")
    with pytest.raises(TypeError, match=re.escape("interleaved must be a bool, got int (1)")):
        RotaryEmbedding(4, interleaved=1)
    with pytest.raises(ValueError, match=re.escape("base must be a number above 1, got 1")):
        RotaryEmbedding(4, base=1)
