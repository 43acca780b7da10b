"""The full MHA (``mha.full``) computes what PyTorch computes, for every mask, cache and head count.

Each test states one behaviour. Shapes are drawn by hypothesis: batch 1..3, q_len 1..6, k_len
1..7, heads_num 1..6 with kv_heads any divisor of it, head_size 1..6, float32 and float64; both
paths (``fast=True`` runs ``F.scaled_dot_product_attention``, ``fast=False`` the written-out math)
unless a test is about one of them. PyTorch is the reference, never the subject: ``F`` builds the
expected values independently (heads split with ``unflatten``, merged with ``flatten``), and
``nn.MultiheadAttention`` holds the same weights through ``mha.interop.to_torch`` (its mapping is
checked bit for bit in ``tests/test_interop.py``).

Tolerances, against an independent computation: ``support.TOLERANCE`` (2e-6 in float32, 1e-12 in
float64, 5e-2 under bfloat16 autocast; each a few times the largest difference measured); bit-exact
(``torch.equal``) where the computation is the same one. Where a property says "changes nothing",
it is checked bit for bit.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from support import (
    AUTOCAST_CASES,
    LANGUAGES,
    ROOT,
    DesignMHA,
    assert_close,
    dtypes,
    merge_heads,
    seeds,
    split_heads,
)

import mha.pure
from mha import full
from mha.full import MHA, KVCache, causal_mask, padding_mask
from mha.interop import to_torch

paths = pytest.mark.parametrize("fast", [True, False], ids=["fast", "math"])

# ---- Shapes, models, inputs -------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    batch_size: int
    q_len: int
    k_len: int
    heads_num: int
    kv_heads: int
    head_size: int

    @property
    def hidden_size(self) -> int:
        return self.heads_num * self.head_size

    @property
    def groups(self) -> int:
        return self.heads_num // self.kv_heads


@st.composite
def shapes(draw, gqa: bool = True) -> Shape:
    """A random shape; ``kv_heads`` is any divisor of ``heads_num`` (``heads_num`` if not gqa)."""
    heads_num = draw(st.integers(1, 6))
    divisors = [d for d in range(1, heads_num + 1) if heads_num % d == 0]
    return Shape(
        batch_size=draw(st.integers(1, 3)),
        q_len=draw(st.integers(1, 6)),
        k_len=draw(st.integers(1, 7)),
        heads_num=heads_num,
        kv_heads=draw(st.sampled_from(divisors)) if gqa else heads_num,
        head_size=draw(st.integers(1, 6)),
    )


@dataclass
class Case:
    """A seeded model with its inputs: ``x`` ``[batch, q_len, hidden]``, ``context``
    ``[batch, k_len, hidden]``, and the generator that drew them (for more random tensors)."""

    shape: Shape
    model: full.MHA
    x: torch.Tensor
    context: torch.Tensor
    gen: torch.Generator

    def randn(self, *size, dtype=None):
        return torch.randn(*size, generator=self.gen, dtype=dtype or self.x.dtype)

    def twin(self, **changes) -> full.MHA:
        """Another ``full.MHA`` holding exactly this model's state_dict (``fast`` etc. changed)."""
        m = self.model
        bias = m.W_q.bias is not None
        options = dict(kv_heads=m.kv_heads, dropout=m.dropout, bias=bias, fast=m.fast)
        options.update(changes)
        other = full.MHA(m.hidden_size, m.heads_num, **options).to(self.x.dtype)
        other.load_state_dict(m.state_dict())
        return other.train(m.training)


def build(shape: Shape, dtype, seed: int, *, fast: bool, bias=True, dropout=0.0) -> Case:
    torch.manual_seed(seed)
    model = full.MHA(
        shape.hidden_size,
        shape.heads_num,
        kv_heads=shape.kv_heads,
        dropout=dropout,
        bias=bias,
        fast=fast,
    ).to(dtype)
    gen = torch.Generator().manual_seed(seed)
    b, h = shape.batch_size, shape.hidden_size
    x = torch.randn(b, shape.q_len, h, generator=gen).to(dtype)
    context = torch.randn(b, shape.k_len, h, generator=gen).to(dtype)
    return Case(shape, model, x, context, gen)


# ---- Independent references -------------------------------------------------------------------


def projected(model: full.MHA, x, context=None):
    """q ``[b, heads_num, q_len, d]``, k and v ``[b, kv_heads, k_len, d]``, from the weights."""
    source = x if context is None else context
    q = split_heads(model.W_q(x), model.heads_num)
    k = split_heads(model.W_k(source), model.kv_heads)
    v = split_heads(model.W_v(source), model.kv_heads)
    return q, k, v


def sdpa_reference(model: full.MHA, x, context=None, **kwargs) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` on the projected heads, then ``W_o``."""
    q, k, v = projected(model, x, context)
    gqa = model.kv_heads != model.heads_num
    out = F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa, **kwargs)
    return model.W_o(merge_heads(out))


def torch_attn_mask(mask: torch.Tensor, shape: Shape, k_len: int) -> torch.Tensor:
    """Our ``attn_mask`` as ``nn.MultiheadAttention`` takes it: ``[batch * heads, q_len, k_len]``,
    boolean with the opposite polarity (True = blocked), float unchanged."""
    full_shape = (shape.batch_size, shape.heads_num, shape.q_len, k_len)
    theirs = ~mask if mask.dtype == torch.bool else mask
    return theirs.expand(full_shape).reshape(-1, shape.q_len, k_len)


# ---- Random masks -----------------------------------------------------------------------------


@st.composite
def mask_shapes(draw, shape: Shape, k_len: int) -> tuple[int, ...]:
    """Any shape that broadcasts to ``[batch, heads_num, q_len, k_len]``: each dimension full or
    1, leading 1s possibly dropped (``[q_len, k_len]``, ``[batch, 1, 1, k_len]``,
    ``[heads_num, 1, k_len]``, ``[q_len, 1]``...)."""
    dims = [
        shape.batch_size if draw(st.booleans()) else 1,
        shape.heads_num if draw(st.booleans()) else 1,
        shape.q_len if draw(st.booleans()) else 1,
        1 if draw(st.integers(0, 4)) == 0 else k_len,  # 1: one value for every key of a row
    ]
    while len(dims) > 2 and dims[0] == 1 and draw(st.booleans()):
        dims.pop(0)
    return tuple(dims)


@st.composite
def bool_masks(draw, case: Case, k_len: int, every_row_open: bool) -> torch.Tensor:
    """A boolean mask (True = may attend) of a random broadcastable shape. With
    ``every_row_open`` each query row allows at least one key; otherwise hypothesis may also mask
    whole rows and whole batch elements."""
    mask_shape = draw(mask_shapes(case.shape, k_len))
    p_open = draw(st.sampled_from([0.0, 0.3, 0.7, 1.0]))
    mask = torch.rand(mask_shape, generator=case.gen) < p_open
    if every_row_open:
        key = torch.randint(mask_shape[-1], (*mask_shape[:-1], 1), generator=case.gen)
        return mask.scatter(-1, key, True)
    rows = draw(st.lists(st.integers(0, mask_shape[-2] - 1), max_size=2))
    mask[..., rows, :] = False
    if len(mask_shape) == 4 and mask_shape[0] > 1 and draw(st.booleans()):
        mask[draw(st.integers(0, mask_shape[0] - 1))] = False
    return mask


def float_mask(case: Case, allowed: torch.Tensor, blocked: str = "-inf") -> torch.Tensor:
    """A float mask: random finite values where ``allowed``; elsewhere ``-inf``, or with
    ``blocked="lowest"`` the dtype's lowest finite value (the Hugging Face convention)."""
    dtype = case.x.dtype
    fill = float("-inf") if blocked == "-inf" else torch.finfo(dtype).min
    values = torch.randn(allowed.shape, generator=case.gen).to(dtype)
    return values.masked_fill(~allowed, fill)


def lengths_of(data, shape: Shape, k_len: int, low: int = 1) -> torch.Tensor:
    """Real lengths ``low .. k_len`` of each batch element, drawn by hypothesis."""
    n = shape.batch_size
    lengths = data.draw(st.lists(st.integers(low, k_len), min_size=n, max_size=n), label="lengths")
    return torch.tensor(lengths)


def allowed_keys(mask, is_causal: bool, shape: Shape, k_len: int) -> torch.Tensor:
    """Which keys each query may see, ``[batch, heads_num, q_len, k_len]`` (mask and causal)."""
    full_shape = (shape.batch_size, shape.heads_num, shape.q_len, k_len)
    allowed = torch.ones(full_shape, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & (mask if mask.dtype == torch.bool else mask != float("-inf"))
    if is_causal:
        allowed = allowed & causal_mask(shape.q_len, k_len)
    return allowed


# ---- The mask helpers -------------------------------------------------------------------------


@given(q_len=st.integers(0, 6), k_len=st.integers(0, 7))
def test_causal_mask_lets_query_i_see_keys_up_to_i_plus_k_len_minus_q_len(q_len, k_len):
    expected = torch.tensor(
        [[j <= i + (k_len - q_len) for j in range(k_len)] for i in range(q_len)], dtype=torch.bool
    ).reshape(q_len, k_len)
    assert torch.equal(causal_mask(q_len, k_len), expected)


@given(lengths=st.lists(st.integers(0, 7), min_size=1, max_size=3), k_len=st.integers(7, 9))
def test_padding_mask_is_true_exactly_before_each_length_shaped_batch_1_1_k_len(lengths, k_len):
    mask = padding_mask(torch.tensor(lengths), k_len)
    expected = torch.tensor([[j < n for j in range(k_len)] for n in lengths])
    assert mask.shape == (len(lengths), 1, 1, k_len)
    assert torch.equal(mask[:, 0, 0], expected)


# ---- Equal to nn.MultiheadAttention (kv_heads == heads_num) ------------------------------------


@paths
@given(shape=shapes(gqa=False), dtype=dtypes, seed=seeds, bias=st.booleans())
def test_self_attention_equals_torch_multihead_attention(fast, shape, dtype, seed, bias):
    case = build(shape, dtype, seed, fast=fast, bias=bias)
    x = case.x
    expected, _ = to_torch(case.model)(x, x, x, need_weights=False)
    assert_close(case.model(x), expected, dtype)


@paths
@given(shape=shapes(gqa=False), dtype=dtypes, seed=seeds, data=st.data())
def test_boolean_mask_equals_torch_attn_mask_of_the_opposite_polarity(
    fast, shape, dtype, seed, data
):
    case = build(shape, dtype, seed, fast=fast)
    mask = data.draw(bool_masks(case, shape.q_len, every_row_open=True), label="mask")
    x = case.x
    theirs = torch_attn_mask(mask, shape, shape.q_len)  # True = blocked
    expected, _ = to_torch(case.model)(x, x, x, attn_mask=theirs, need_weights=False)
    assert_close(case.model(x, attn_mask=mask), expected, dtype)


@paths
@given(shape=shapes(gqa=False), dtype=dtypes, seed=seeds, data=st.data())
def test_float_mask_equals_torch_float_attn_mask(fast, shape, dtype, seed, data):
    case = build(shape, dtype, seed, fast=fast)
    allowed = data.draw(bool_masks(case, shape.q_len, every_row_open=True), label="allowed")
    mask = float_mask(case, allowed)
    x = case.x
    theirs = torch_attn_mask(mask, shape, shape.q_len)  # float: added to the scores, as ours
    expected, _ = to_torch(case.model)(x, x, x, attn_mask=theirs, need_weights=False)
    assert_close(case.model(x, attn_mask=mask), expected, dtype)


@paths
@given(shape=shapes(gqa=False), dtype=dtypes, seed=seeds)
def test_is_causal_equals_torch_with_the_inverted_causal_mask(fast, shape, dtype, seed):
    case = build(shape, dtype, seed, fast=fast)
    x = case.x
    blocked = ~causal_mask(shape.q_len, shape.q_len)
    expected, _ = to_torch(case.model)(x, x, x, attn_mask=blocked, need_weights=False)
    assert_close(case.model(x, is_causal=True), expected, dtype)


@paths
@given(shape=shapes(gqa=False), dtype=dtypes, seed=seeds, data=st.data())
def test_padding_mask_equals_torch_key_padding_mask_of_the_opposite_polarity(
    fast, shape, dtype, seed, data
):
    case = build(shape, dtype, seed, fast=fast)
    padding = padding_mask(lengths_of(data, shape, shape.q_len), shape.q_len)
    x = case.x
    key_padding_mask = ~padding[:, 0, 0]  # [batch, k_len], True = padding
    expected, _ = to_torch(case.model)(
        x, x, x, key_padding_mask=key_padding_mask, need_weights=False
    )
    assert_close(case.model(x, attn_mask=padding), expected, dtype)


@paths
@given(shape=shapes(gqa=False), dtype=dtypes, seed=seeds, data=st.data())
def test_causal_and_padding_together_equal_torch_with_both_masks(fast, shape, dtype, seed, data):
    case = build(shape, dtype, seed, fast=fast)
    padding = padding_mask(lengths_of(data, shape, shape.q_len), shape.q_len)
    x = case.x
    expected, _ = to_torch(case.model)(
        x,
        x,
        x,
        attn_mask=~causal_mask(shape.q_len, shape.q_len),
        key_padding_mask=~padding[:, 0, 0],
        need_weights=False,
    )
    assert_close(case.model(x, attn_mask=padding, is_causal=True), expected, dtype)


@paths
@given(shape=shapes(gqa=False), dtype=dtypes, seed=seeds, data=st.data())
def test_cross_attention_with_a_padded_context_equals_torch(fast, shape, dtype, seed, data):
    case = build(shape, dtype, seed, fast=fast)
    # Converted the other way: from PyTorch's key_padding_mask (True = padding) to ours.
    lengths = lengths_of(data, shape, shape.k_len)
    key_padding_mask = torch.arange(shape.k_len) >= lengths[:, None]  # [batch, k_len]
    ours = ~key_padding_mask[:, None, None, :]  # [batch, 1, 1, k_len], True = may attend
    x, ctx = case.x, case.context
    expected, _ = to_torch(case.model)(
        x, ctx, ctx, key_padding_mask=key_padding_mask, need_weights=False
    )
    assert torch.equal(ours, padding_mask(lengths, shape.k_len))
    assert_close(case.model(x, ctx, attn_mask=ours), expected, dtype)


# ---- Equal to F.scaled_dot_product_attention on the projected heads --------------------------


@paths
@given(shape=shapes(), dtype=dtypes, seed=seeds, data=st.data())
def test_boolean_mask_equals_sdpa_attn_mask_with_enable_gqa(fast, shape, dtype, seed, data):
    case = build(shape, dtype, seed, fast=fast)
    mask = data.draw(bool_masks(case, shape.k_len, every_row_open=True), label="mask")
    expected = sdpa_reference(case.model, case.x, case.context, attn_mask=mask)
    assert_close(case.model(case.x, case.context, attn_mask=mask), expected, dtype)


@paths
@given(shape=shapes(), dtype=dtypes, seed=seeds, data=st.data())
def test_float_mask_equals_sdpa_float_attn_mask_with_enable_gqa(fast, shape, dtype, seed, data):
    case = build(shape, dtype, seed, fast=fast)
    allowed = data.draw(bool_masks(case, shape.k_len, every_row_open=True), label="allowed")
    mask = float_mask(case, allowed)
    expected = sdpa_reference(case.model, case.x, case.context, attn_mask=mask)
    assert_close(case.model(case.x, case.context, attn_mask=mask), expected, dtype)


@paths
@given(shape=shapes(), dtype=dtypes, seed=seeds)
def test_is_causal_equals_sdpa_is_causal_when_q_len_equals_k_len(fast, shape, dtype, seed):
    case = build(shape, dtype, seed, fast=fast)
    expected = sdpa_reference(case.model, case.x, is_causal=True)
    assert_close(case.model(case.x, is_causal=True), expected, dtype)


@paths
@given(shape=shapes(), dtype=dtypes, seed=seeds)
def test_is_causal_equals_sdpa_with_causal_mask_for_any_q_len_and_k_len(fast, shape, dtype, seed):
    case = build(shape, dtype, seed, fast=fast)
    x, ctx = case.x, case.context
    lower_right = causal_mask(shape.q_len, shape.k_len)
    expected = sdpa_reference(case.model, x, ctx, attn_mask=lower_right)
    # With q_len > k_len the first q_len - k_len queries see no key: their output is W_o's bias
    # (tested below for any mask); SDPA leaves such rows to its backend, so they are not compared.
    seeing = slice(max(0, shape.q_len - shape.k_len), None)
    out = case.model(x, ctx, is_causal=True)
    assert_close(out[:, seeing], expected[:, seeing], dtype)


@paths
def test_sdpa_is_causal_is_top_left_so_a_new_query_after_a_cache_would_see_only_key_0(fast):
    """Half characterisation: it pins PyTorch's behaviour (SDPA's ``is_causal``), which the masks
    page explains as "the top-left trap" (if PyTorch changes, the page must), and checks ours."""
    # The trap: at a decoding step (q_len 1 < k_len 4) SDPA's is_causal=True keeps the top-left
    # triangle, so the newest query sees key 0 alone; ours is lower-right: it sees all 4 keys.
    torch.manual_seed(0)
    model = full.MHA(20, 4, kv_heads=2, fast=fast)
    prompt, new = torch.randn(2, 3, 20), torch.randn(2, 1, 20)
    cache = KVCache()
    model(prompt, is_causal=True, cache=cache)
    ours = model(new, is_causal=True, cache=cache)

    q = split_heads(model.W_q(new), 4)  # [2, 4, 1, 5]
    k, v = cache.keys, cache.values  # [2, 2, 4, 5]
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    every_key = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert torch.equal(top_left, v[:, :, :1].repeat_interleave(2, dim=1))  # key 0's value alone
    assert torch.equal(causal_mask(1, 4), torch.ones(1, 4, dtype=torch.bool))
    assert_close(ours, model.W_o(merge_heads(every_key)), torch.float32)


@paths
@given(shape=shapes(), dtype=dtypes, seed=seeds)
def test_kv_heads_means_each_kv_head_serves_heads_num_over_kv_heads_query_heads_in_a_row(
    fast, shape, dtype, seed
):
    # Grouped-query attention equals the full-heads MHA whose key and value heads are the
    # grouped ones repeated: kv head j serves query heads j * groups .. (j + 1) * groups - 1.
    case = build(shape, dtype, seed, fast=fast)
    gqa = case.model
    expanded = full.MHA(shape.hidden_size, shape.heads_num, fast=fast).to(dtype)
    state = gqa.state_dict()
    for name in ("W_k", "W_v"):
        for part in ("weight", "bias"):
            rows = state[f"{name}.{part}"].unflatten(0, (shape.kv_heads, shape.head_size))
            state[f"{name}.{part}"] = rows.repeat_interleave(shape.groups, dim=0).flatten(0, 1)
    expanded.load_state_dict(state)
    x, ctx = case.x, case.context
    assert_close(gqa(x, ctx), expanded(x, ctx), dtype)
    assert_close(gqa(x, is_causal=True), expanded(x, is_causal=True), dtype)


# ---- KV cache: decoding equals one causal forward ---------------------------------------------


@paths
@given(shape=shapes(), dtype=dtypes, seed=seeds, data=st.data())
def test_decoding_one_position_per_step_after_a_prefill_equals_one_causal_forward(
    fast, shape, dtype, seed, data
):
    case = build(shape, dtype, seed, fast=fast)
    sequence, n = case.context, shape.k_len  # [batch, n, hidden], n = 1..7
    prefill = data.draw(st.integers(1, n), label="prefill")
    cache = KVCache()
    outs = [case.model(sequence[:, :prefill], is_causal=True, cache=cache)]
    for t in range(prefill, n):
        outs.append(case.model(sequence[:, t : t + 1], is_causal=True, cache=cache))
    assert_close(torch.cat(outs, dim=1), case.model(sequence, is_causal=True), dtype)


@given(shape=shapes(), seed=seeds, fast=st.booleans(), grad=st.booleans(), data=st.data())
def test_the_cache_grows_by_each_calls_length_and_holds_every_positions_keys_and_values(
    shape, seed, fast, grad, data
):
    # grad False: the buffer path (written in place); True: the concatenating path
    case = build(shape, torch.float32, seed, fast=fast)
    sequence = case.context
    cache = KVCache()
    assert (len(cache), cache.keys, cache.values) == (0, None, None)
    outs, total = [], 0
    while total < shape.k_len:
        size = data.draw(st.integers(1, shape.k_len - total), label="chunk")
        with torch.set_grad_enabled(grad):
            chunk = sequence[:, total : total + size]
            outs.append(case.model(chunk, is_causal=True, cache=cache))
        total += size
        expected = (shape.batch_size, shape.kv_heads, total, shape.head_size)
        assert len(cache) == total
        assert cache.keys.shape == expected, cache.keys.shape
        assert cache.values.shape == expected, cache.values.shape
    _, k, v = projected(case.model, sequence)
    assert_close(cache.keys, k, torch.float32)
    assert_close(cache.values, v, torch.float32)
    assert_close(torch.cat(outs, dim=1), case.model(sequence, is_causal=True), torch.float32)


def test_the_cache_buffer_doubles_when_full_and_earlier_views_stay_unchanged():
    model = full.MHA(20, 4, kv_heads=2).eval()
    cache = KVCache()
    capacities, views, copied = [], [], 0
    with torch.no_grad():
        for size in (3, 1, 1, 1, 1, 1, 1):
            before = None if cache.keys is None else cache.keys.clone()
            views.append((cache.keys, before))
            if capacities and len(cache) + size > capacities[-1][2]:
                copied += len(cache)  # a doubling copies what the cache holds
            model(torch.randn(2, size, 20), is_causal=True, cache=cache)
            capacities.append(cache._keys.shape)  # [batch_size, kv_heads, capacity, head_size]
    # 3, then doubled to 6 at the 4th position, to 12 at the 7th
    assert [c[2] for c in capacities] == [3, 6, 6, 6, 12, 12, 12]
    assert all(c == (2, 2, c[2], 5) for c in capacities), capacities
    assert len(cache) == 9 and cache.keys.shape == (2, 2, 9, 5)
    # the cache page's claim: generating n positions copies fewer than 2n in all
    assert copied == 3 + 6 and copied < 2 * len(cache), copied
    for view, before in views[1:]:
        assert torch.equal(view, before), "a view taken earlier changed"
    # Room left: the next step writes into the same buffer, no copy of the cache
    held = cache.keys
    with torch.no_grad():
        model(torch.randn(2, 1, 20), is_causal=True, cache=cache)
    assert cache.keys.data_ptr() == held.data_ptr()
    assert torch.equal(cache.keys[:, :, :9], held)


@pytest.mark.parametrize("fast", [True, False])
def test_gradients_flow_through_cached_steps_as_through_one_causal_forward(fast):
    torch.manual_seed(0)
    model = full.MHA(20, 4, fast=fast).eval()
    x = torch.randn(2, 5, 20, requires_grad=True)
    cache = KVCache()
    steps = [model(x[:, :2], is_causal=True, cache=cache)]
    steps += [model(x[:, t : t + 1], is_causal=True, cache=cache) for t in range(2, 5)]
    torch.cat(steps, dim=1).pow(2).sum().backward()
    cached_grads = [x.grad.clone(), model.W_k.weight.grad.clone()]
    x.grad = None
    model.zero_grad()
    model(x, is_causal=True).pow(2).sum().backward()
    for got, want in zip(cached_grads, [x.grad, model.W_k.weight.grad], strict=True):
        assert_close(got, want)


# ---- The pure MHA and the design post's checkpoint --------------------------------------------


@paths
@given(shape=shapes(gqa=False), dtype=dtypes, seed=seeds)
def test_with_kv_heads_equal_to_heads_num_it_equals_the_pure_mha_with_the_same_weights(
    fast, shape, dtype, seed
):
    torch.manual_seed(seed)
    pure = mha.pure.MHA(shape.hidden_size, shape.heads_num).to(dtype)
    model = full.MHA(shape.hidden_size, shape.heads_num, fast=fast).to(dtype)
    model.load_state_dict(pure.state_dict())  # strict: same keys, same shapes
    x = torch.randn(shape.batch_size, shape.q_len, shape.hidden_size, dtype=dtype)
    if fast:
        assert_close(model(x), pure(x), dtype)
    else:
        assert torch.equal(model(x), pure(x))  # the same operations in the same order


@paths
@given(shape=shapes(gqa=False), seed=seeds)
def test_a_design_post_checkpoint_loads_unchanged_and_gives_the_designs_output(fast, shape, seed):
    torch.manual_seed(seed)
    design = DesignMHA(shape.hidden_size, shape.heads_num)
    model = full.MHA(shape.hidden_size, shape.heads_num, fast=fast)
    model.load_state_dict(design.state_dict())  # strict
    x = torch.randn(shape.batch_size, shape.q_len, shape.hidden_size)
    assert_close(model(x), design(x), torch.float32)


# ---- Causality and padding as properties (bit for bit) ----------------------------------------


@paths
@given(shape=shapes(), dtype=dtypes, seed=seeds, data=st.data())
def test_causal_changing_position_j_of_x_changes_no_output_before_j(fast, shape, dtype, seed, data):
    case = build(shape, dtype, seed, fast=fast)
    j = data.draw(st.integers(0, shape.q_len - 1), label="j")
    changed = case.x.clone()
    changed[:, j] = case.randn(shape.batch_size, shape.hidden_size)
    before = case.model(case.x, is_causal=True)[:, :j]
    assert torch.equal(case.model(changed, is_causal=True)[:, :j], before)


@paths
@given(shape=shapes(), dtype=dtypes, seed=seeds, data=st.data())
def test_padding_changing_a_masked_key_or_value_of_the_context_changes_no_output(
    fast, shape, dtype, seed, data
):
    case = build(shape, dtype, seed, fast=fast)
    lengths = lengths_of(data, shape, shape.k_len, low=0)  # 0: a fully masked batch element
    padding = padding_mask(lengths, shape.k_len)
    changed = case.context.clone()
    is_padding = ~padding[:, 0, 0]  # [batch, k_len]
    changed[is_padding] = case.randn(int(is_padding.sum()), shape.hidden_size)
    before = case.model(case.x, case.context, attn_mask=padding)
    assert torch.equal(case.model(case.x, changed, attn_mask=padding), before)


@paths
@given(shape=shapes(), dtype=dtypes, seed=seeds, is_causal=st.booleans(), data=st.data())
def test_padding_changing_padded_positions_of_x_changes_no_output_at_a_real_position(
    fast, shape, dtype, seed, is_causal, data
):
    case = build(shape, dtype, seed, fast=fast)
    lengths = lengths_of(data, shape, shape.q_len, low=0)
    padding = padding_mask(lengths, shape.q_len)
    real = padding[:, 0, 0]  # [batch, q_len]
    changed = case.x.clone()
    changed[~real] = case.randn(int((~real).sum()), shape.hidden_size)
    before = case.model(case.x, attn_mask=padding, is_causal=is_causal)
    after = case.model(changed, attn_mask=padding, is_causal=is_causal)
    assert torch.equal(after[real], before[real])


# ---- The fast and the written-out paths agree -------------------------------------------------


@given(
    shape=shapes(),
    dtype=dtypes,
    seed=seeds,
    cross=st.booleans(),
    kind=st.sampled_from(["none", "bool", "float"]),
    is_causal=st.booleans(),
    data=st.data(),
)
def test_fast_and_math_paths_agree_within_rounding_for_any_mask(
    shape, dtype, seed, cross, kind, is_causal, data
):
    # Any mask, fully masked rows and batch elements included: TOLERANCE (2e-6 in float32).
    case = build(shape, dtype, seed, fast=True)
    math = case.twin(fast=False)
    k_len = shape.k_len if cross else shape.q_len
    context = case.context if cross else None
    mask = None
    if kind != "none":
        mask = data.draw(bool_masks(case, k_len, every_row_open=False), label="mask")
        mask = mask if kind == "bool" else float_mask(case, mask)
    fast_out = case.model(case.x, context, attn_mask=mask, is_causal=is_causal)
    math_out = math(case.x, context, attn_mask=mask, is_causal=is_causal)
    assert_close(fast_out, math_out, dtype)


# ---- need_weights -----------------------------------------------------------------------------


@st.composite
def weights_calls(draw, dtype=dtypes):
    """A model, its call arguments (cross or self, any boolean mask, causal or not)."""
    shape, seed = draw(shapes()), draw(seeds)
    case = build(shape, draw(dtype), seed, fast=draw(st.booleans()))
    cross = draw(st.booleans())
    k_len = shape.k_len if cross else shape.q_len
    mask = draw(st.none() | bool_masks(case, k_len, every_row_open=False))
    kwargs = dict(attn_mask=mask, is_causal=draw(st.booleans()))
    return case, (case.context if cross else None), k_len, kwargs


@given(call=weights_calls())
def test_need_weights_returns_per_head_weights_of_shape_batch_heads_num_q_len_k_len(call):
    case, context, k_len, kwargs = call
    out, weights = case.model(case.x, context, need_weights=True, **kwargs)
    s = case.shape
    assert out.shape == (s.batch_size, s.q_len, s.hidden_size), out.shape
    assert weights.shape == (s.batch_size, s.heads_num, s.q_len, k_len), weights.shape


# Random 2-D masks may look like padding masks: the warning of tests/test_traps.py, meant
@pytest.mark.filterwarnings("ignore::mha.checks.MaskWarning")
@given(call=weights_calls())
def test_weights_are_zero_where_masked_and_rows_sum_to_one_or_to_zero_when_fully_masked(call):
    case, context, k_len, kwargs = call
    _, weights = case.model(case.x, context, need_weights=True, **kwargs)
    allowed = allowed_keys(kwargs["attn_mask"], kwargs["is_causal"], case.shape, k_len)
    assert torch.equal(weights[~allowed], torch.zeros_like(weights[~allowed]))
    row_sums = allowed.any(dim=-1).to(weights.dtype)  # 1 where a key is allowed, else 0
    assert_close(weights.sum(dim=-1), row_sums, weights.dtype)


# Random 2-D masks may look like padding masks: the warning of tests/test_traps.py, meant
@pytest.mark.filterwarnings("ignore::mha.checks.MaskWarning")
@given(call=weights_calls())
def test_weights_times_the_repeated_values_then_w_o_reproduce_the_output(call):
    case, context, _, kwargs = call
    model = case.model
    out, weights = model(case.x, context, need_weights=True, **kwargs)
    _, _, v = projected(model, case.x, context)
    v = v.repeat_interleave(case.shape.groups, dim=1)  # [batch, heads_num, k_len, head_size]
    assert_close(model.W_o(merge_heads(weights @ v)), out, case.x.dtype)
    assert_close(model(case.x, context, **kwargs), out, case.x.dtype)  # without need_weights


# ---- No NaN for any mask, in any precision ----------------------------------------------------

LOW_PRECISION = st.sampled_from([torch.float32, torch.float16, torch.bfloat16])


@st.composite
def any_mask_calls(draw, kinds=("bool", "-inf", "lowest"), scales=(1, 30)):
    """A model in float32/float16/bfloat16 (bias or not) with any mask: boolean, or float with
    -inf or the dtype's lowest value, fully masked rows and batch elements included, causal or
    not, cross or self. Inputs scaled up to 30: scores far below 0 overflow a float16 sum."""
    shape, seed = draw(shapes()), draw(seeds)
    dtype = draw(LOW_PRECISION)
    case = build(shape, dtype, seed, fast=draw(st.booleans()), bias=draw(st.booleans()))
    cross = draw(st.booleans())
    k_len = shape.k_len if cross else shape.q_len
    case.x *= draw(st.sampled_from(scales))
    mask = draw(bool_masks(case, k_len, every_row_open=False))
    kind = draw(st.sampled_from(kinds))
    if kind != "bool":
        mask = float_mask(case, mask, blocked=kind)
    kwargs = dict(attn_mask=mask, is_causal=draw(st.booleans()))
    return case, (case.context if cross else None), k_len, kwargs


@settings(max_examples=60)  # any mask of any kind: more examples than the profile's 30
@given(call=any_mask_calls())
def test_no_mask_gives_nan_and_a_fully_masked_query_outputs_exactly_w_o_bias(call):
    case, context, k_len, kwargs = call
    model = case.model
    out = model(case.x, context, **kwargs)
    assert torch.isfinite(out).all(), out
    allowed = allowed_keys(kwargs["attn_mask"], kwargs["is_causal"], case.shape, k_len)
    blind = ~allowed.any(dim=-1).any(dim=1)  # [batch, q_len]: no head of the query sees a key
    bias = model.W_o.bias if model.W_o.bias is not None else torch.zeros_like(out[0, 0])
    assert torch.equal(out[blind], bias.expand(int(blind.sum()), -1))


@settings(max_examples=40)  # any mask of any kind: more examples than the profile's 30
@given(call=any_mask_calls())
def test_gradients_are_finite_for_any_mask(call):
    case, context, _, kwargs = call
    x = case.x.requires_grad_()
    if context is not None:
        context.requires_grad_()
    case.model(x, context, **kwargs).sum().backward()
    grads = [x.grad] + ([] if context is None else [context.grad])
    grads += [p.grad for p in case.model.parameters()]
    assert all(torch.isfinite(g).all() for g in grads)


@given(call=any_mask_calls(kinds=("lowest",), scales=(30,)))
def test_a_float_mask_of_the_dtypes_lowest_value_gives_no_nan_even_far_below_zero(call):
    # In float16, finfo.min (-65504) plus a score below -16 rounds to -inf: a row of them only
    # would be 0/0 in softmax. Inputs scaled by 30 give scores in the hundreds, of either sign.
    case, context, _, kwargs = call
    assert torch.isfinite(case.model(case.x, context, **kwargs)).all()


# ---- Dropout: off in eval mode, seedable in training mode -------------------------------------


@paths
@given(shape=shapes(), seed=seeds, p=st.floats(0.05, 0.95), is_causal=st.booleans())
def test_eval_mode_ignores_dropout_and_equals_dropout_zero(fast, shape, seed, p, is_causal):
    case = build(shape, torch.float32, seed, fast=fast, dropout=p)
    model = case.model.eval()
    no_dropout = case.twin(dropout=0.0).eval()
    first = model(case.x, case.context, is_causal=is_causal)
    assert torch.equal(first, model(case.x, case.context, is_causal=is_causal))
    assert torch.equal(first, no_dropout(case.x, case.context, is_causal=is_causal))


@paths
@given(shape=shapes(), seed=seeds, p=st.floats(0.05, 0.95))
def test_train_mode_with_the_same_seed_gives_the_same_output(fast, shape, seed, p):
    case = build(shape, torch.float32, seed, fast=fast, dropout=p)
    torch.manual_seed(seed)
    first = case.model(case.x, case.context)
    torch.manual_seed(seed)
    assert torch.equal(case.model(case.x, case.context), first)


@paths
def test_train_mode_with_another_seed_gives_another_output(fast):
    # 2 x 4 x 3 x 7 = 168 weights, each dropped with p = 0.5: two seeds dropping the same ones
    # has probability 2**-168.
    torch.manual_seed(0)
    model = full.MHA(20, 4, dropout=0.5, fast=fast)
    x, context = torch.randn(2, 3, 20), torch.randn(2, 7, 20)
    torch.manual_seed(1)
    first = model(x, context)
    torch.manual_seed(2)
    assert not torch.equal(model(x, context), first)


@paths
@given(shape=shapes(), seed=seeds, is_causal=st.booleans())
def test_train_mode_with_dropout_zero_equals_eval_mode(fast, shape, seed, is_causal):
    case = build(shape, torch.float32, seed, fast=fast)
    train = case.model(case.x, case.context, is_causal=is_causal)
    assert torch.equal(case.model.eval()(case.x, case.context, is_causal=is_causal), train)


@given(shape=shapes(), seed=seeds, p=st.floats(0.05, 0.95))
def test_dropout_zeroes_weights_and_scales_the_rest_by_one_over_one_minus_p(shape, seed, p):
    case = build(shape, torch.float32, seed, fast=False, dropout=p)
    model = case.model
    out, dropped = model(case.x, case.context, need_weights=True)  # train mode
    _, kept = model.eval()(case.x, case.context, need_weights=True)
    survived = dropped != 0
    assert_close(dropped[survived], kept[survived] / (1 - p), torch.float32)
    _, _, v = projected(model, case.x, case.context)
    v = v.repeat_interleave(case.shape.groups, dim=1)
    assert_close(model.W_o(merge_heads(dropped @ v)), out, torch.float32)  # the weights applied


# ---- Autocast ---------------------------------------------------------------------------------


@paths
@pytest.mark.parametrize(("device", "dtype"), AUTOCAST_CASES)
@pytest.mark.parametrize("kind", ["no mask", "causal", "float mask"])
def test_two_stacked_layers_run_under_autocast_close_to_torch(fast, device, dtype, kind):
    torch.manual_seed(0)
    first = full.MHA(20, 4, fast=fast).to(device)
    second = full.MHA(20, 4, fast=fast).to(device)
    t_first, t_second = to_torch(first), to_torch(second)
    x = torch.randn(2, 3, 20, device=device)
    causal = causal_mask(3, 3, device=device)
    ours, theirs = {}, {}
    if kind == "causal":
        ours, theirs = dict(is_causal=True), dict(attn_mask=~causal)
    elif kind == "float mask":  # float32: autocast runs the scores in `dtype`
        mask = torch.randn(3, 3, device=device).masked_fill(~causal, float("-inf"))
        ours, theirs = dict(attn_mask=mask), dict(attn_mask=mask)
    with torch.autocast(device, dtype=dtype):
        out = second(first(x, **ours), **ours)  # second gets a `dtype` input
        h, _ = t_first(x, x, x, need_weights=False, **theirs)
        expected, _ = t_second(h, h, h, need_weights=False, **theirs)
    assert (out.shape, out.dtype, second.W_q.weight.dtype) == ((2, 3, 20), dtype, torch.float32)
    assert_close(out, expected)


# ---- Devices ----------------------------------------------------------------------------------


def test_causal_mask_is_built_on_the_device_it_is_given():
    x = torch.empty(2, 3, 20, device="meta")  # no accelerator needed; the same holds for cuda
    mask = causal_mask(3, 7, device=x.device)
    assert (mask.device, mask.shape, mask.dtype) == (x.device, (3, 7), torch.bool)


def test_padding_mask_is_built_on_the_device_of_the_lengths():
    lengths = torch.tensor([7, 2], device="meta")
    mask = padding_mask(lengths, 7)
    assert (mask.device, mask.shape, mask.dtype) == (lengths.device, (2, 1, 1, 7), torch.bool)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@paths
def test_on_cuda_with_masks_built_there_it_equals_the_cpu_result(fast):
    torch.manual_seed(0)
    model = full.MHA(20, 4, kv_heads=2, fast=fast)
    x = torch.randn(2, 3, 20)
    lengths = torch.tensor([3, 2])
    expected = model(x, attn_mask=padding_mask(lengths, 3), is_causal=True)
    x, lengths = x.cuda(), lengths.cuda()
    out = model.cuda()(x, attn_mask=padding_mask(lengths, 3), is_causal=True)
    assert out.device == x.device
    # Another device's kernels, not only another order of operations: not TOLERANCE, which is
    # measured on CPU (this test needs a GPU).
    torch.testing.assert_close(out.cpu(), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_full_pages_argument_table_lists_every_argument_with_its_default_in_order(lang):
    """full.md's "What each new argument adds": the constructor's keyword arguments after
    ``heads_num``, then ``forward``'s after ``x``, each as ``name=default``, in the signatures'
    order. A new option of ``MHA`` fails here until the page names it."""
    page = (ROOT / "docs" / lang / "full.md").read_text(encoding="utf-8")
    rows = [
        (name, ast.literal_eval(default))
        for name, default in re.findall(r"^\| `(\w+)=([^`]+)` \|", page, re.M)
    ]
    constructor = list(inspect.signature(MHA.__init__).parameters.values())[3:]
    forward = list(inspect.signature(MHA.forward).parameters.values())[2:]
    expected = [(p.name, p.default) for p in constructor + forward]
    assert rows == expected, f"{lang}: {rows} != {expected}"
