"""The static cache, ``KVCache(max_len=N, static=True)``: every call attends over the whole
buffer with a mask of the positions held, so the shapes never change; it equals the dynamic cache
at every step, one compiled decoding step serves every step, and a save holds only the positions
written. (The pairwise matrix, tests/test_matrix.py, has it as one of its caches.)"""

from __future__ import annotations

import io
import re

import pytest
import torch
from torch._dynamo.testing import CompileCounter

from mha.cache import KVCache, ModelCache
from mha.full import MHA
from mha.masks import held_mask
from mha.mla import MLA, LatentCache
from mha.rope import RotaryEmbedding

HIDDEN = 32
# Chunks of a 40-position sequence: a prefill, a one-position step, a chunk of three, then steps
CHUNKS = [(0, 5), (5, 6), (6, 9)] + [(i, i + 1) for i in range(9, 40)]


def layer(window=None, qk_norm=False, dtype=torch.float64):
    torch.manual_seed(0)
    m = MHA(HIDDEN, 4, kv_heads=2, rope=RotaryEmbedding(8), window=window, qk_norm=qk_norm)
    return m.to(dtype).eval()


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("fast", [True, False])
def test_a_static_cache_equals_the_dynamic_one_at_every_step(window, fast):
    m = layer(window)
    m.fast = fast
    x = torch.randn(2, 40, HIDDEN, dtype=torch.float64)
    dynamic, static = KVCache(), KVCache(max_len=48, static=True)
    with torch.no_grad():
        for start, end in CHUNKS:
            want = m(x[:, start:end], is_causal=True, cache=dynamic)
            got = m(x[:, start:end], is_causal=True, cache=static)
            assert (got - want).abs().max() <= 1e-12, (start, end)
    assert len(static) == len(dynamic) == 40
    assert static._keys.shape == (2, 2, 48, 8)  # the buffer never changed shape


def test_its_weights_cover_the_whole_buffer_and_are_zero_beyond_what_it_holds():
    m = layer(window=3)
    cache = KVCache(max_len=12, static=True)
    x = torch.randn(1, 6, HIDDEN, dtype=torch.float64)
    with torch.no_grad():
        m(x[:, :4], is_causal=True, cache=cache)
        _, weights = m(x[:, 4:6], is_causal=True, cache=cache, need_weights=True)
    assert weights.shape == (1, 4, 2, 12)  # [batch_size, heads_num, q_len, max_len]
    seen = weights[0, 0] > 0
    assert seen.tolist() == held_mask(torch.tensor([4, 5]), 12, is_causal=True, window=3).tolist()
    assert seen.sum(-1).tolist() == [3, 3]  # the window's 3 latest, itself included


def test_held_mask_without_causality_sees_every_position_written():
    mask = held_mask(torch.tensor([3, 4]), 6, is_causal=False)
    assert mask.tolist() == [[True] * 5 + [False]] * 2


def test_one_compiled_decoding_step_serves_32_steps():
    m = layer(dtype=torch.float32)
    cache, dynamic = KVCache(max_len=64, static=True), KVCache()
    x = torch.randn(1, 36, HIDDEN)
    counter = CompileCounter()
    step = torch.compile(
        lambda t: m(t, is_causal=True, cache=cache), backend=counter, fullgraph=True, dynamic=False
    )
    with torch.no_grad():
        m(x[:, :4], is_causal=True, cache=cache)  # the prefill, not compiled
        m(x[:, :4], is_causal=True, cache=dynamic)
        for i in range(4, 36):
            got = step(x[:, i : i + 1])
            want = m(x[:, i : i + 1], is_causal=True, cache=dynamic)
            assert (got - want).abs().max() <= 1e-5 * want.abs().max()
    assert counter.frame_count == 1  # one graph for all 32 steps
    assert len(cache) == 36


def test_a_dynamic_cache_under_the_same_compile_needs_a_graph_per_length():
    # The contrast the static cache exists for (and a check that the counter counts)
    m = layer(dtype=torch.float32)
    cache = KVCache(max_len=64)
    counter = CompileCounter()
    step = torch.compile(
        lambda t: m(t, is_causal=True, cache=cache), backend=counter, fullgraph=True, dynamic=False
    )
    with torch.no_grad():
        m(torch.randn(1, 4, HIDDEN), is_causal=True, cache=cache)
        for _ in range(4):
            step(torch.randn(1, 1, HIDDEN))
    assert counter.frame_count == 4


def test_a_left_padded_batch_gives_each_row_what_it_gets_alone():
    m = layer(window=3)
    lengths, steps, max_len = [6, 2], 4, 16
    rows = [torch.randn(n + steps, HIDDEN, dtype=torch.float64) for n in lengths]
    width = max(lengths)
    x = torch.zeros(2, width, HIDDEN, dtype=torch.float64)
    real = torch.zeros(2, max_len, dtype=torch.bool)
    for b, (row, n) in enumerate(zip(rows, lengths, strict=True)):
        x[b, width - n :] = row[:n]
        real[b, width - n : width + steps] = True  # the prompt, then the steps' slots
    positions = (real[:, :width].cumsum(-1) - 1).clamp(min=0)
    cache = KVCache(max_len=max_len, static=True)
    mask = real[:, None, None, :]  # [batch_size, 1, 1, max_len]
    with torch.no_grad():
        out = m(x, is_causal=True, cache=cache, attn_mask=mask, positions=positions)
        outs = [out[:, -1]]
        for s in range(steps):
            at = torch.tensor([[n + s] for n in lengths])
            new = torch.stack([row[n + s] for row, n in zip(rows, lengths, strict=True)])[:, None]
            outs.append(m(new, is_causal=True, cache=cache, attn_mask=mask, positions=at)[:, 0])
        for b, (row, n) in enumerate(zip(rows, lengths, strict=True)):
            alone = m(row[None], is_causal=True)[0]  # no cache, no padding
            for s, o in enumerate(outs):
                assert (o[b] - alone[n - 1 + s]).abs().max() <= 1e-12


def test_a_saved_static_cache_holds_its_positions_not_its_max_len():
    m = layer()
    sizes = {}
    for max_len in (64, 4096):
        cache = KVCache(max_len=max_len, static=True)
        with torch.no_grad():
            m(torch.randn(1, 10, HIDDEN, dtype=torch.float64), is_causal=True, cache=cache)
        buffer = io.BytesIO()
        torch.save(cache, buffer)
        sizes[max_len] = buffer.tell()
    held = 2 * 2 * 10 * 8 * 8  # keys and values: kv_heads x 10 positions x head_size, 8 bytes
    assert sizes[4096] == sizes[64]  # the same 10 positions, whatever the buffer
    assert held <= sizes[4096] < held + 4096  # the tensors and a little framing


def test_a_loaded_static_cache_decodes_on_as_the_one_saved():
    m = layer()
    x = torch.randn(1, 14, HIDDEN, dtype=torch.float64)
    cache = KVCache(max_len=20, static=True)
    with torch.no_grad():
        m(x[:, :10], is_causal=True, cache=cache)
        buffer = io.BytesIO()
        torch.save(cache, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer)  # weights_only=True, the default
        assert loaded.static and len(loaded) == 10 and loaded.max_len == 20
        for i in range(10, 14):
            want = m(x[:, i : i + 1], is_causal=True, cache=cache)
            got = m(x[:, i : i + 1], is_causal=True, cache=loaded)
            assert torch.equal(got, want)
    assert loaded._keys.shape[2] == 20  # the buffer allocated again at the first write


def test_crop_and_reorder_act_on_the_positions_held():
    m = layer()
    x = torch.randn(2, 8, HIDDEN, dtype=torch.float64)
    static, dynamic = KVCache(max_len=10, static=True), KVCache()
    with torch.no_grad():
        for cache in (static, dynamic):
            m(x[:, :6], is_causal=True, cache=cache)
            m(torch.randn(2, 1, HIDDEN, dtype=torch.float64), is_causal=True, cache=cache)
            cache.crop(6)  # a rejected draft position
            cache.reorder(torch.tensor([1, 1, 0]))  # three beams of two rows
        assert len(static) == 6 and static.keys.shape == (3, 2, 10, 8)  # the whole buffer
        assert torch.equal(static.keys[:, :, :6], dynamic.keys)
        step = x[[1, 1, 0], 6:7]
        got = m(step, is_causal=True, cache=static)
        want = m(step, is_causal=True, cache=dynamic)
    assert (got - want).abs().max() <= 1e-12


def test_inference_mode_then_no_grad_and_training_through_it():
    m = layer()
    x = torch.randn(1, 7, HIDDEN, dtype=torch.float64)
    cache = KVCache(max_len=8, static=True)
    with torch.inference_mode():
        m(x[:, :5], is_causal=True, cache=cache)
    with torch.no_grad():  # the buffer is an ordinary tensor, written in place here
        m(x[:, 5:6], is_causal=True, cache=cache)
    assert not cache._keys.is_inference()
    # With gradients the buffer is written out of place: the backward pass sees each step's
    trained, reference = KVCache(max_len=8, static=True), KVCache()
    total = {}
    for name, c in (("static", trained), ("dynamic", reference)):
        m.zero_grad()
        out = m(x[:, :4], is_causal=True, cache=c).sum()
        for i in range(4, 7):
            out = out + m(x[:, i : i + 1], is_causal=True, cache=c).sum()
        out.backward()
        total[name] = [p.grad.clone() for p in m.parameters()]
    for a, b in zip(total["static"], total["dynamic"], strict=True):
        assert (a - b).abs().max() <= 1e-10


def test_autocast_with_qk_norm_and_a_static_cache():
    m = layer(qk_norm=True, dtype=torch.float32)
    x = torch.randn(1, 6, HIDDEN)
    static, dynamic = KVCache(max_len=8, static=True), KVCache()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for c in (static, dynamic):
            m(x[:, :5], is_causal=True, cache=c)
        got = m(x[:, 5:], is_causal=True, cache=static)
        want = m(x[:, 5:], is_causal=True, cache=dynamic)
    assert static._keys.dtype == torch.bfloat16
    assert (got.float() - want.float()).abs().max() <= 0.05 * want.float().abs().max()


def test_model_cache_makes_static_layers():
    cache = ModelCache(2, max_len=16, static=True)
    assert all(c.static and c.max_len == 16 for c in cache.layers)
    assert repr(cache) == "ModelCache(num_layers=2, len=0, max_len=16, static=True)"


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: KVCache(static=True), ValueError, "static=True needs max_len"),
        (lambda: KVCache(8, static=True, rollback=2), ValueError, "rollback must be 0"),
        (lambda: KVCache(8, static=1), TypeError, "static must be a bool"),
    ],
)
def test_bad_arguments_are_named(make, error, message):
    with pytest.raises(error, match=re.escape(message)):
        make()


def test_what_a_static_cache_refuses():
    m = layer()
    cache = KVCache(max_len=6, static=True)
    x = torch.randn(1, 4, HIDDEN, dtype=torch.float64)
    with torch.no_grad():
        m(x, is_causal=True, cache=cache)
        with pytest.raises(ValueError, match=re.escape("holds 4 and this call adds 3")):
            m(torch.randn(1, 3, HIDDEN, dtype=torch.float64), is_causal=True, cache=cache)
        assert len(cache) == 4  # left as it was
        wrong = torch.ones(1, 1, 1, 5, dtype=torch.bool)  # the positions seen, not the slots
        with pytest.raises(
            ValueError,
            match=re.escape(
                "must broadcast to [batch_size, heads_num, q_len, k_len] = [1, 4, 1, 6]"
            ),
        ):
            m(x[:, :1], is_causal=True, cache=cache, attn_mask=wrong)
    with pytest.raises(ValueError, match="append is for a dynamic cache"):
        cache.append(torch.zeros(1, 2, 1, 8), torch.zeros(1, 2, 1, 8))
    with pytest.raises(ValueError, match=re.escape("append_static writes a static cache")):
        KVCache().append_static(torch.zeros(1, 2, 1, 8), torch.zeros(1, 2, 1, 8))
    cross = MHA(HIDDEN, 4).double()
    with pytest.raises(
        ValueError, match=re.escape("cross-attention's cache (context=) never grows")
    ):
        cross(x, x, cache=KVCache(max_len=8, static=True))
    mla = MLA(HIDDEN, 4, kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5)
    with pytest.raises(ValueError, match="LatentCache has no static mode"):
        mla(torch.randn(1, 3, HIDDEN), is_causal=True, cache=LatentCache(8, static=True))
