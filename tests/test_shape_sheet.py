"""The full class's shape sheet (``mha_site.shape_sheet``): drawn from real calls, complete, and a
wrong stated shape fails the build."""

from __future__ import annotations

import inspect

import pytest

import mha.full
from mha.trace import assignments
from mha_site import shape_sheet


def test_every_commented_tensor_has_a_row_but_the_fast_path_float_masks_and_todays_options():
    """The sheet's calls take the math path with boolean masks and the 2017 layer's options: the
    rows left out are exactly the lines of the fast path (``_attend_fast``, the NaN check
    ``_nans``), of a float mask, and of today's options (q/k norm, rotary embeddings, a sliding
    window's cache and its call longer than max_len, a given scale, a soft-cap, sinks, norms of
    the projections, a gate, a temperature, chunks and the norm without a weight) and of a static
    cache, which their own chapter traces."""
    source = inspect.getsource(mha.full)
    found, _ = assignments(source)
    lines = source.splitlines()
    commented = {a.first_line for a in found if a.comment}
    shown = {row.line for row in shape_sheet.rows() if row.line is not None}
    left_out = sorted(
        lines[n - 1].split("=", 1)[1].split("#")[0].strip() for n in commented - shown
    )
    assert left_out == [
        "(q * tuned.unsqueeze(-1).unsqueeze(-3)).to(q.dtype)",  # Llama 4's temperature
        "F.scaled_dot_product_attention(*(t[:, :, whole:] for t in (q, k, v)), **options)",
        "F.scaled_dot_product_attention(q_rows, k_rows, v_rows, **options)",  # Llama 4's chunks
        "and_causal(attn_mask, seen)",  # a static cache's mask of the slots held
        "at",  # Llama 4's chunks
        "attn_mask[..., -k.size(2) :]",
        "cache.keys",  # held_keys: a sliding window's call longer than the cache's max_len
        "cache.keys",  # a static cache's whole buffer
        "cache.next_positions(x.size(1), x.device)",  # a static cache's positions, 3 times
        "cache.next_positions(x.size(1), x.device)",
        "cache.next_positions(x.size(1), x.device)",
        "cache.values",
        "cache.values",
        "chunk_mask(q_at, k_at, self.chunk)",  # Llama 4's chunks
        "chunks if attn_mask is None else and_causal(attn_mask, chunks)",  # Llama 4's chunks
        "float_mask_as(attn_mask, q.dtype)",
        "held_mask(at, cache.max_len, is_causal=is_causal, window=self.window)",
        "k.detach().sum((-2, -1), keepdim=True, dtype=dtype)",  # the fast path's NaN check
        "k[:, :, :whole].unflatten(2, (n_chunks, size)).transpose(1, 2).flatten(0, 1)",
        "k_at + shift",  # Llama 4's chunks
        "k_at[k_len - q_len :]",  # Llama 4's chunks
        'mask != float("-inf")',
        "out * torch.sigmoid(gate)",  # Qwen3-Next's gate
        "out + nans.to(out.dtype)",  # the fast path's NaN check
        "out.unflatten(0, (q.size(0), n_chunks)).transpose(1, 2).flatten(2, 3)",  # Llama 4's chunks
        "positions",  # Llama 4's chunks
        "positions[..., -1:] - q_at[-1]",  # Llama 4's chunks
        "q.detach().sum(-1, keepdim=True, dtype=dtype)",  # the fast path's NaN check
        "q[:, :, :whole].unflatten(2, (n_chunks, size)).transpose(1, 2).flatten(0, 1)",
        "q_at + shift",  # Llama 4's chunks
        "qg[..., : self.head_size].reshape(x.size(0), x.size(1), -1)",
        "qg[..., self.head_size :].reshape(x.size(0), x.size(1), -1)",
        "qk + mask",
        "self.W_q(x).view(x.size(0), x.size(1), self.heads_num, 2 * self.head_size)",
        "self._attend_fast(q, k, v, attn_mask, is_causal)",
        "self._attend_in_chunks(q, k, v)",  # Llama 4's chunks
        "self._chunks(",  # Llama 4's chunks
        "self._mask(attn_mask, is_causal, q, k)",
        "self._nans(q, new_keys)",  # the fast path's NaN check
        "self.k_norm(k)",
        "self.k_norm(k)",  # OLMo 2's norm of the whole projection
        "self.k_norm(k)",  # Llama 4's, without a weight
        "self.q_norm(q)",
        "self.q_norm(q)",  # OLMo 2's
        "self.q_norm(q)",  # Llama 4's, without a weight
        "self.rope.rotate(k, *turns)",
        "self.rope.rotate(q, *turns)",
        "self.sink_logits.to(dtype).view(1, -1, 1, 1).expand(*qk.shape[:-1], 1)",  # gpt-oss's sinks
        "sums + self._repeat_kv(keys)",  # the fast path's NaN check
        "sums - sums",  # the fast path's NaN check
        "torch.arange(end - k_len, end, device=self.W_q.weight.device)",  # Llama 4's chunks
        "torch.arange(held, held + x.size(1), device=x.device)",
        "torch.arange(held, held + x.size(1), device=x.device)",  # Llama 4's temperature
        "torch.arange(k_len, device=at.device)",  # Llama 4's chunks
        "torch.cat([held_keys, k.to(v.dtype)], dim=2)",
        "torch.cat([held_values, v], dim=2)",
        "torch.cat([qk, sink], dim=-1)",
        "torch.cat(parts, dim=2) if len(parts) > 1 else parts[0]",  # Llama 4's chunks
        "torch.log1p(torch.floor((index.float() + 1.0) / floor_scale)) * attn_scale + 1.0",
        "torch.matmul(q.to(dtype), k.transpose(-2, -1)) * self.scale",
        "torch.softmax(qk, dim=-1)[..., :-1].to(q.dtype)",
        "torch.tanh(qk / self.softcap) * self.softcap",  # Gemma 2's soft-cap
        "v[:, :, :whole].unflatten(2, (n_chunks, size)).transpose(1, 2).flatten(0, 1)",
    ], left_out
    assert shown < commented
    assert all(len(row.shapes) == len(shape_sheet.CALLS) for row in shape_sheet.rows())


def test_the_calls_shapes_are_the_real_ones():
    rows = {(row.where, row.name, row.code): row.shapes for row in shape_sheet.rows()}
    assert rows["", "x", ""] == ["[3, 6, 20]", "[3, 6, 20]", "[3, 1, 20]"]
    assert rows["forward", "weights", "_weights(q, k, mask)"] == [
        "[3, 4, 6, 6]",
        "[3, 4, 6, 7]",
        "[3, 4, 1, 7]",
    ]
    assert rows["_weights", "k", "_repeat_kv(k).to(dtype)"][2] == "[3, 4, 7, 5]"  # repeated


def test_a_wrong_stated_argument_shape_is_caught(monkeypatch):
    wrong = (("x", "[batch_size, hidden_size, q_len]", lambda call: call.x),)
    monkeypatch.setattr(shape_sheet, "ARGUMENTS", wrong)
    shape_sheet.rows.cache_clear()
    try:
        with pytest.raises(AssertionError, match=r"prefill: x is \[3, 6, 20\]"):
            shape_sheet.rows()
    finally:
        shape_sheet.rows.cache_clear()


def test_both_languages_have_the_same_rows_and_their_own_headers():
    en, zh = shape_sheet.table("full", "en"), shape_sheet.table("full", "zh")
    assert en.splitlines()[0].startswith("| Method | Tensor |"), en.splitlines()[0]
    assert zh.splitlines()[0].startswith("| 所在方法 | 张量 |"), zh.splitlines()[0]
    assert len(en.splitlines()) == len(zh.splitlines()) == len(shape_sheet.rows()) + 2
    with pytest.raises(ValueError, match="no shape sheet 'nope'"):
        shape_sheet.table("nope", "en")
