"""The cache as generation code uses it: ``reorder`` (beam search), ``crop`` (rollback),
``reset``, ``to``, a preallocated ``max_len``, one cache per layer (``ModelCache``), saving and
loading, left-padded batches, and the context's keys and values kept by cross-attention.

Each is checked against recomputation: what a cached call returns equals one call of the model
over everything it has seen, so a wrong row, a stale position or a reused key shows.
"""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
import torch
from support import ROOT, assert_close

from mha.full import MHA, KVCache, ModelCache, padding_mask

paths = pytest.mark.parametrize("fast", [True, False], ids=["fast", "math"])
# Gradients recorded (the cache concatenates) or not (it writes into buffers): both must agree.
grad_modes = pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])


def model_of(fast=True, **options):
    torch.manual_seed(0)
    return MHA(24, 4, kv_heads=2, fast=fast, **options).eval()


# ---- reorder: beam search ---------------------------------------------------------------------


@paths
@grad_modes
def test_reorder_then_a_step_equals_recomputing_the_chosen_rows(fast, grad):
    model = model_of(fast)
    x = torch.randn(3, 6, 24)
    index = torch.tensor([2, 0, 2, 1])  # rows repeat, the batch grows from 3 to 4
    with torch.set_grad_enabled(grad):
        cache = KVCache()
        model(x[:, :5], is_causal=True, cache=cache)
        cache.reorder(index)
        step = model(x[index, 5:], is_causal=True, cache=cache)
        whole = model(x[index], is_causal=True)
    assert cache.keys.shape == (4, 2, 6, 6)
    assert_close(step, whole[:, 5:])


def test_reorder_keeps_a_preallocated_buffer_and_leaves_views_taken_before_unchanged():
    model = model_of()
    x = torch.randn(1, 4, 24)
    with torch.no_grad():
        cache = KVCache(max_len=8)
        model(x, is_causal=True, cache=cache)
        before = cache.keys
        kept = before.clone()
        cache.reorder(torch.zeros(3, dtype=torch.long))  # three beams of one prompt
        assert cache._keys.shape == (3, 2, 8, 6)  # still max_len positions
        assert torch.equal(before, kept)
        assert torch.equal(cache.keys, kept.expand(3, -1, -1, -1))


def test_a_beam_search_step_by_step_equals_recomputing_each_beams_history():
    """Three steps of a toy beam search: each step reorders by the surviving beams; at the end
    each beam's cached output equals one causal forward over that beam's own history."""
    model = model_of()
    torch.manual_seed(1)
    beams, steps = 3, 3
    prompt = torch.randn(1, 4, 24)
    tokens = torch.randn(steps, beams, 1, 24)  # the input each beam gets at each step
    parents = [torch.tensor([0, 0, 0]), torch.tensor([1, 0, 1]), torch.tensor([2, 2, 0])]
    with torch.no_grad():
        cache = KVCache()
        model(prompt, is_causal=True, cache=cache)
        history = prompt.expand(beams, -1, -1)
        for step in range(steps):
            cache.reorder(parents[step])
            history = torch.cat([history[parents[step]], tokens[step]], dim=1)
            out = model(tokens[step], is_causal=True, cache=cache)
        whole = model(history, is_causal=True)
    assert_close(out, whole[:, -1:])


# ---- crop, reset, to, repr --------------------------------------------------------------------


@grad_modes
def test_crop_then_another_step_equals_recomputing_the_kept_positions_and_the_new_one(grad):
    model = model_of()
    x, other = torch.randn(2, 6, 24), torch.randn(2, 1, 24)
    with torch.set_grad_enabled(grad):
        cache = KVCache()
        model(x, is_causal=True, cache=cache)
        cache.crop(4)  # reject the last two positions, as speculative decoding does
        step = model(other, is_causal=True, cache=cache)
        whole = model(torch.cat([x[:, :4], other], dim=1), is_causal=True)
    assert len(cache) == 5
    assert_close(step, whole[:, 4:])


def test_reset_empties_the_cache_for_another_batch_size_and_keeps_max_len():
    model = model_of()
    cache = KVCache(max_len=9)
    with torch.no_grad():
        model(torch.randn(2, 3, 24), cache=cache)
        cache.reset()
        assert (len(cache), cache.keys, repr(cache)) == (0, None, "KVCache(len=0, max_len=9)")
        model(torch.randn(5, 2, 24), cache=cache)
    assert cache.keys.shape == (5, 2, 2, 6)


def test_to_moves_the_held_keys_and_values_and_returns_the_cache():
    model = model_of()
    x = torch.randn(2, 5, 24)
    cache = KVCache()
    with torch.no_grad():
        model(x[:, :4], is_causal=True, cache=cache)
        assert cache.to(torch.float64) is cache
        assert cache.keys.dtype == cache.values.dtype == torch.float64
        model.double()
        step = model(x[:, 4:].double(), is_causal=True, cache=cache)
        whole = model(x.double(), is_causal=True)
    # The first 4 keys were computed in float32: equal to float32's rounding.
    assert_close(step, whole[:, 4:], dtype=torch.float32)


def test_repr_names_every_size_and_where_the_cache_lives():
    cache = KVCache(max_len=6)
    cache.append(torch.zeros(2, 3, 4, 5), torch.zeros(2, 3, 4, 5), queries=None)
    assert repr(cache) == (
        "KVCache(len=4, max_len=6, capacity=6, batch_size=2, kv_heads=3, head_size=5, "
        "dtype=torch.float32, device=cpu)"
    )


# ---- max_len: one buffer, allocated once ------------------------------------------------------


@paths
def test_a_preallocated_cache_writes_into_one_buffer_and_equals_recomputing(fast):
    model = model_of(fast)
    x = torch.randn(2, 9, 24)
    with torch.no_grad():
        cache = KVCache(max_len=9)
        outs = [model(x[:, :3], is_causal=True, cache=cache)]
        buffer = cache._keys.data_ptr()
        for s in range(3, 9):
            outs.append(model(x[:, s : s + 1], is_causal=True, cache=cache))
            assert cache._keys.data_ptr() == buffer, s
        whole = model(x, is_causal=True)
    assert cache._keys.shape == (2, 2, 9, 6)
    assert_close(torch.cat(outs, dim=1), whole)


@pytest.mark.slow
def test_a_compiled_decoding_step_with_a_preallocated_cache_compiles_at_most_twice():
    """The buffer's shape never changes: the only recompile is the one that makes the length a
    symbol (the first step specialises on it). Without ``max_len`` the buffer's doublings add
    one each."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    model = model_of()
    counter = CompileCounter()
    step = torch.compile(
        lambda t, c: model(t, is_causal=True, cache=c), fullgraph=True, backend=counter
    )
    x = torch.randn(1, 24, 24)
    with torch.no_grad():
        cache = KVCache(max_len=24)
        model(x[:, :4], is_causal=True, cache=cache)
        outs = [step(x[:, s : s + 1], cache) for s in range(4, 24)]
        whole = model(x, is_causal=True)
    torch._dynamo.reset()
    assert counter.frame_count <= 2, counter.frame_count
    assert_close(torch.cat(outs, dim=1), whole[:, 4:])


# ---- one cache per layer ----------------------------------------------------------------------


class TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(MHA(24, 4, kv_heads=2) for _ in range(2))

    def forward(self, x, cache=None):
        for i, layer in enumerate(self.layers):
            x = x + layer(x, is_causal=True, cache=None if cache is None else cache.layers[i])
        return x


@grad_modes
def test_a_model_cache_decodes_a_two_layer_model_as_recomputing_does(grad):
    model = TwoLayers().eval()
    x = torch.randn(2, 7, 24)
    with torch.set_grad_enabled(grad):
        cache = ModelCache(2)
        outs = [model(x[:, :4], cache)]
        outs += [model(x[:, s : s + 1], cache) for s in range(4, 7)]
        whole = model(x)
    assert (len(cache), [len(c) for c in cache.layers]) == (7, [7, 7])
    assert_close(torch.cat(outs, dim=1), whole)
    cache.crop(5)
    cache.reorder(torch.tensor([1, 1]))
    with torch.set_grad_enabled(grad):
        step = model(x[1:, 5:6].expand(2, -1, -1), cache)
    assert_close(step, whole[1:, 5:6].expand(2, -1, -1))
    assert repr(cache) == "ModelCache(num_layers=2, len=6)"


def test_one_cache_shared_by_two_layers_is_refused_before_anything_changes():
    model = TwoLayers().eval()
    cache = KVCache()
    x = torch.randn(2, 3, 24)
    with torch.no_grad():
        model.layers[0](x, cache=cache)
        with pytest.raises(ValueError, match="belongs to another module"):
            model.layers[1](x, cache=cache)
    assert len(cache) == 3


# ---- saving and loading -----------------------------------------------------------------------


def test_a_saved_cache_loads_with_safe_loading_and_decodes_on():
    model = model_of()
    x = torch.randn(2, 6, 24)
    with torch.no_grad():
        cache = ModelCache(1, max_len=8)
        model(x[:, :5], is_causal=True, cache=cache.layers[0])
        buffer = io.BytesIO()
        torch.save(cache, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer)  # weights_only=True, PyTorch's default
        assert repr(loaded) == "ModelCache(num_layers=1, len=5, max_len=8)"
        assert torch.equal(loaded.layers[0].keys, cache.layers[0].keys)
        again = model_of()  # another module with the same weights: the loaded cache has no owner
        step = again(x[:, 5:], is_causal=True, cache=loaded.layers[0])
        whole = model(x, is_causal=True)
    assert_close(step, whole[:, 5:])


def test_a_cache_saved_when_it_lived_in_mha_full_still_loads_safely(monkeypatch):
    """The classes moved from mha/full.py to mha/cache.py: a file saved before names them
    ``mha.full.KVCache`` and ``mha.full.ModelCache``, which safe loading still accepts."""
    cache = ModelCache(1)
    cache.layers[0].append(torch.randn(1, 2, 3, 5), torch.randn(1, 2, 3, 5))
    buffer = io.BytesIO()
    with monkeypatch.context() as m:  # pickled under the names of the old file
        m.setattr(KVCache, "__module__", "mha.full")
        m.setattr(ModelCache, "__module__", "mha.full")
        torch.save(cache, buffer)
    assert b"mha.full" in buffer.getvalue() and b"mha.cache" not in buffer.getvalue()
    buffer.seek(0)
    loaded = torch.load(buffer)  # weights_only=True
    assert type(loaded) is ModelCache and type(loaded.layers[0]) is KVCache
    assert torch.equal(loaded.layers[0].keys, cache.layers[0].keys)


def test_the_methods_a_module_writes_a_cache_with_check_their_arguments():
    """claim, keep_last, overflows and append_windowed are public (MHA, MLA and the shape
    checker call them): a wrong argument is a clear error naming it."""
    cache = KVCache(4)
    with pytest.raises(TypeError, match=r"module must be a torch\.nn\.Module, got str"):
        cache.claim("layer 0", "x")
    with pytest.raises(ValueError, match='source must be "x" or "context", got \'y\''):
        cache.claim(MHA(20, 4), "y")
    with pytest.raises(ValueError, match="n must be a non-negative int, got -1"):
        cache.keep_last(-1)
    with pytest.raises(TypeError, match="keep must be an int, got str"):
        cache.append_windowed(torch.zeros(1, 2, 3, 5), torch.zeros(1, 2, 3, 5), "2")
    assert not cache.overflows(4) and cache.overflows(5)
    cache.append_windowed(torch.zeros(1, 2, 6, 5), torch.zeros(1, 2, 6, 5), 3)  # 6 > max_len
    assert (len(cache), cache.keys.shape[2]) == (6, 3)  # every position counted, 3 held


# ---- padding: left and right ------------------------------------------------------------------


def test_left_padding_marks_the_last_positions_of_each_row():
    mask = padding_mask(torch.tensor([3, 0, 5]), 5, left=True)
    assert mask.shape == (3, 1, 1, 5)
    assert mask[:, 0, 0].tolist() == [
        [False, False, True, True, True],
        [False, False, False, False, False],
        [True, True, True, True, True],
    ]


def test_padding_mask_compiles_without_a_graph_break():
    """Its value check reads the lengths; inside torch.compile it is skipped, not traced."""
    torch._dynamo.reset()
    compiled = torch.compile(padding_mask, fullgraph=True, backend="eager")
    lengths = torch.tensor([2, 4])
    for left in (False, True):
        assert torch.equal(compiled(lengths, 4, left=left), padding_mask(lengths, 4, left=left))
    torch._dynamo.reset()


@paths
@pytest.mark.parametrize("left", [True, False], ids=["left", "right"])
def test_a_padded_batch_of_prompts_decodes_as_each_prompt_alone(fast, left):
    """Prompts of 2, 5 and 3 positions in one batch, padded to 5, then 3 decoding steps with a
    key mask that grows by one real position per step: each row's outputs at its real
    positions equal those of its prompt decoded alone. Right padding leaves holes between a
    row's prompt and its new positions; the mask covers them."""
    model = model_of(fast)
    lengths = [2, 5, 3]
    prompts = [torch.randn(1, n, 24) for n in lengths]
    new = torch.randn(3, 3, 24)  # the positions each row decodes
    width = max(lengths)
    batch = torch.zeros(3, width, 24)
    for row, p in enumerate(prompts):
        if left:
            batch[row, width - p.size(1) :] = p[0]
        else:
            batch[row, : p.size(1)] = p[0]
    held = padding_mask(torch.tensor(lengths), width, left=left)  # [3, 1, 1, width]
    with torch.no_grad():
        cache = KVCache()
        # A padded query may see nothing: its output is garbage that nobody reads.
        first = model(batch, cache=cache, attn_mask=held & causal_for(width))
        outs = []
        for s in range(3):
            held = torch.cat([held, torch.ones(3, 1, 1, 1, dtype=torch.bool)], dim=-1)
            outs.append(model(new[:, s : s + 1], cache=cache, attn_mask=held))
        for row, p in enumerate(prompts):
            alone = model(torch.cat([p, new[row : row + 1]], dim=1), is_causal=True)
            n = p.size(1)
            real = slice(width - n, width) if left else slice(0, n)
            assert_close(first[row, real], alone[0, :n])
            assert_close(torch.cat(outs, dim=1)[row], alone[0, n:])


def causal_for(n):
    return torch.ones(n, n, dtype=torch.bool).tril()


# ---- cross-attention: the context's keys and values computed once -----------------------------


@paths
@pytest.mark.parametrize("context_size", [None, 10], ids=["hidden_size", "context_size"])
def test_a_cross_attention_cache_projects_the_context_once_and_equals_no_cache(fast, context_size):
    model = model_of(fast, context_size=context_size)
    width = 24 if context_size is None else context_size
    x, context = torch.randn(2, 4, 24), torch.randn(2, 7, width)
    mask = padding_mask(torch.tensor([7, 5]), 7)
    projected = []
    model.W_k.register_forward_hook(lambda *_: projected.append("W_k"))
    with torch.no_grad():
        whole = model(x, context, attn_mask=mask)
        projected.clear()
        cache = KVCache()
        steps = [model(x[:, s : s + 1], context, attn_mask=mask, cache=cache) for s in range(4)]
    assert projected == ["W_k"]  # the first call only
    assert len(cache) == 7
    assert_close(torch.cat(steps, dim=1), whole)


def test_a_cross_attention_cache_reorders_with_its_beams():
    model = model_of()
    x, context = torch.randn(2, 2, 24), torch.randn(2, 7, 24)
    with torch.no_grad():
        cache = KVCache()
        model(x[:, :1], context, cache=cache)
        cache.reorder(torch.tensor([1, 1, 0]))
        step = model(x[[1, 1, 0], 1:], context[[1, 1, 0]], cache=cache)
        whole = model(x[[1, 1, 0]], context[[1, 1, 0]])
    assert_close(step, whole[:, 1:])


# ---- the package ------------------------------------------------------------------------------


def test_import_mha_then_mha_full_works_in_a_fresh_interpreter():
    code = "import mha; print(mha.full.KVCache.__name__, mha.pure.__name__, mha.interop.__name__)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["KVCache", "mha.pure", "mha.interop"]


@pytest.mark.parametrize("max_len", [24, None], ids=["max_len", "growing"])
def test_a_dynamic_compiled_step_compiles_once_over_a_preallocated_cache_only(max_len):
    """What *Use it in a model* says of ``dynamic=True``: over a preallocated cache one graph
    serves every step; over growing buffers each new size is another graph."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    model = model_of()
    counter = CompileCounter()
    step = torch.compile(
        lambda t, c: model(t, is_causal=True, cache=c),
        fullgraph=True,
        dynamic=True,
        backend=counter,
    )
    x = torch.randn(1, 24, 24)
    with torch.no_grad():
        cache = KVCache(max_len=max_len)
        model(x[:, :4], is_causal=True, cache=cache)
        outs = [step(x[:, s : s + 1], cache) for s in range(4, 24)]
        whole = model(x, is_causal=True)
    torch._dynamo.reset()
    assert_close(torch.cat(outs, dim=1), whole[:, 4:])
    if max_len is None:
        assert counter.frame_count > 1, counter.frame_count
    else:
        assert counter.frame_count == 1, counter.frame_count


# ---- combined as generation code combines them ------------------------------------------------


def test_a_preallocated_cache_prefilled_and_reordered_in_inference_mode_decodes_under_no_grad():
    """Inference tensors cannot be written outside inference mode: the buffer is copied once,
    keeping max_len positions, and decoding equals recomputing the reordered rows."""
    model = model_of()
    x = torch.randn(2, 8, 24)
    cache = KVCache(max_len=10)
    with torch.inference_mode():
        model(x[:, :5], is_causal=True, cache=cache)
        cache.reorder(torch.tensor([1, 0]))
    with torch.no_grad():
        steps = [model(x[[1, 0], s : s + 1], is_causal=True, cache=cache) for s in range(5, 8)]
        whole = model(x[[1, 0]], is_causal=True)
    assert cache._keys.shape == (2, 2, 10, 6) and not cache._keys.is_inference()
    assert_close(torch.cat(steps, dim=1), whole[:, 5:])


def test_a_cross_attention_cache_compiles_without_a_graph_break_and_trains_with_frozen_kv():
    model = model_of(context_size=10)
    x, context = torch.randn(2, 4, 24), torch.randn(2, 7, 10)
    torch._dynamo.reset()
    compiled = torch.compile(
        lambda a, c: model(a, context, cache=c), fullgraph=True, backend="eager"
    )
    with torch.no_grad():
        cache = KVCache()
        steps = [compiled(x[:, s : s + 1], cache) for s in range(4)]
        whole = model(x, context)
    torch._dynamo.reset()
    assert_close(torch.cat(steps, dim=1), whole)
    model.W_k.requires_grad_(False)
    model.W_v.requires_grad_(False)
    cache = KVCache()
    loss = sum(model(x[:, s : s + 1], context, cache=cache).sum() for s in range(4))
    loss.backward()
    assert model.W_q.weight.grad is not None and model.W_k.weight.grad is None
