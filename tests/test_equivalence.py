"""The annotated and pure MHA compute multi-head attention, the same way PyTorch does.

Shapes are drawn by hypothesis with seq_len > 1 and heads_num > 1: with 1 of either, a missing
``.contiguous()`` goes unnoticed because ``.view`` then succeeds anyway.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from support import (
    TEXTBOOK,
    DesignMHA,
    assert_close,
    dtypes,
    each_implementation,
    reference_attention,
    seeds,
)
from torch.func import functional_call

import mha.annotated
import mha.pure
from mha.interop import to_torch

impls = each_implementation(TEXTBOOK)

# torch.jit is deprecated in favour of torch.compile, but readers of the design post still use it.
jit_deprecated = pytest.mark.filterwarnings("ignore:`torch.jit.*deprecated:DeprecationWarning")

shapes = st.tuples(
    st.integers(1, 4),  # batch_size
    st.integers(2, 7),  # seq_len
    st.integers(2, 5),  # heads_num
    st.integers(1, 8),  # head_size
)


def build(cls, shape, dtype, seed):
    """A seeded model of ``cls`` for ``shape`` and an input for it."""
    batch_size, seq_len, heads_num, head_size = shape
    hidden_size = heads_num * head_size
    torch.manual_seed(seed)
    model = cls(hidden_size, heads_num).to(dtype)
    x = torch.randn(batch_size, seq_len, hidden_size, dtype=dtype)
    return model, x


def same_weights(cls, model):
    """A ``cls`` holding exactly ``model``'s state_dict (strict: same keys, same shapes)."""
    other = cls(model.hidden_size, model.heads_num).to(model.W_q.weight.dtype)
    other.load_state_dict(model.state_dict())
    return other


# ---- Annotated, pure, PyTorch and a reference agree --------------------------------------------


@given(shape=shapes, dtype=dtypes, seed=seeds)
def test_annotated_and_pure_are_bitwise_equal(shape, dtype, seed):
    annotated, x = build(mha.annotated.MHA, shape, dtype, seed)
    pure = same_weights(mha.pure.MHA, annotated)
    assert torch.equal(annotated(x), pure(x))


@impls
@given(shape=shapes, dtype=dtypes, seed=seeds)
def test_output_equals_torch_multihead_attention(MHA, shape, dtype, seed):
    model, x = build(MHA, shape, dtype, seed)
    torch_mha = to_torch(model)
    expected, weights = torch_mha(x, x, x, need_weights=False)
    assert weights is None
    assert_close(model(x), expected, dtype)


# nn.MultiheadAttention's fused native path needs (among other conditions) eval mode, no autograd,
# batch_first, the same tensor as query, key and value, and an even number of heads.
fast_path_shapes = st.tuples(
    st.integers(1, 4),  # batch_size
    st.integers(2, 7),  # seq_len
    st.sampled_from([2, 4, 6]),  # heads_num, even
    st.integers(1, 8),  # head_size
)


@impls
@given(shape=fast_path_shapes, dtype=dtypes, seed=seeds)
def test_output_equals_torch_multihead_attention_fast_path(MHA, shape, dtype, seed):
    model, x = build(MHA, shape, dtype, seed)
    torch_mha = to_torch(model).eval()
    calls = []
    native = torch._native_multi_head_attention

    def recording_native(*args, **kwargs):
        calls.append(args[0].shape)
        return native(*args, **kwargs)

    torch._native_multi_head_attention = recording_native
    try:
        with torch.inference_mode():
            expected = torch_mha(x, x, x, need_weights=False)[0]
    finally:
        torch._native_multi_head_attention = native
    assert calls == [x.shape], "nn.MultiheadAttention did not take its fast path"
    with torch.inference_mode():
        assert_close(model(x), expected, dtype)


@impls
@given(shape=shapes, dtype=dtypes, seed=seeds)
def test_output_equals_a_scaled_dot_product_attention_reference(MHA, shape, dtype, seed):
    model, x = build(MHA, shape, dtype, seed)
    assert_close(model(x), reference_attention(model, x), dtype)


@impls
@given(shape=shapes, seed=seeds)
def test_output_has_the_input_shape_dtype_and_no_nan(MHA, shape, seed):
    model, x = build(MHA, shape, torch.float32, seed)
    out = model(x)
    assert out.shape == x.shape
    assert out.dtype == x.dtype
    assert torch.isfinite(out).all()


# ---- The design post's state_dict -------------------------------------------------------------


@impls
def test_state_dict_keys_and_shapes_equal_the_design_posts(MHA):
    ours, design = MHA(20, 4).state_dict(), DesignMHA(20, 4).state_dict()
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in design.items()}


@impls
@given(shape=shapes, dtype=dtypes, seed=seeds)
def test_design_post_state_dict_loads_unchanged_and_gives_the_same_output(MHA, shape, dtype, seed):
    design, x = build(DesignMHA, shape, dtype, seed)
    ours = same_weights(MHA, design)
    # Not bitwise: the post divides by a float32 tensor sqrt(head_size), we by math.sqrt, which
    # differ by up to one float32 rounding (see test_scale.py), in float64 too.
    assert_close(ours(x), design(x), torch.float32)


@impls
@given(shape=shapes, dtype=dtypes, seed=seeds, root=st.sampled_from([1, 2]))
def test_design_post_state_dict_gives_bitwise_equal_output_when_head_size_is_a_square(
    MHA, shape, dtype, seed, root
):
    # sqrt(1) and sqrt(4) are exact in both formulas, so the only difference disappears.
    design, x = build(DesignMHA, (*shape[:3], root * root), dtype, seed)
    assert torch.equal(same_weights(MHA, design)(x), design(x))


@impls
def test_our_state_dict_loads_unchanged_into_the_design_posts_class(MHA):
    torch.manual_seed(0)
    ours = MHA(20, 4)
    design = DesignMHA(20, 4)
    design.load_state_dict(ours.state_dict())
    x = torch.randn(2, 3, 20)
    assert_close(design(x), ours(x))


# ---- Gradients --------------------------------------------------------------------------------


@impls
@pytest.mark.parametrize("shape", [(2, 3, 2, 2), (1, 4, 3, 1)], ids=str)
def test_gradients_pass_gradcheck_in_float64_for_input_and_parameters(MHA, shape):
    model, x = build(MHA, shape, torch.float64, seed=0)
    names = [name for name, _ in model.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in model.parameters()]
    x.requires_grad_()

    def f(x, *params):
        return functional_call(model, dict(zip(names, params, strict=True)), (x,))

    assert len(params) == 8  # W_q, W_k, W_v, W_o: weight and bias each
    # gradcheck's tolerance is for its finite differences (steps of eps), not for rounding
    assert torch.autograd.gradcheck(f, (x, *params), eps=1e-6, atol=1e-5)


@impls
def test_gradients_equal_torch_multihead_attentions(MHA):
    model, x = build(MHA, (2, 3, 4, 5), torch.float64, seed=0)
    torch_mha = to_torch(model)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    model(x1).square().sum().backward()
    torch_mha(x2, x2, x2, need_weights=False)[0].square().sum().backward()
    assert_close(x1.grad, x2.grad)
    in_proj_grad = torch.cat([model.W_q.weight.grad, model.W_k.weight.grad, model.W_v.weight.grad])
    assert_close(in_proj_grad, torch_mha.in_proj_weight.grad)
    assert_close(model.W_o.weight.grad, torch_mha.out_proj.weight.grad)


# ---- Low precision ----------------------------------------------------------------------------


@impls
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 7, 5, 8)], ids=str)
def test_half_precision_runs_and_stays_close_to_float32(MHA, dtype, shape):
    model32, x32 = build(MHA, shape, torch.float32, seed=0)
    model = same_weights(MHA, model32).to(dtype)
    out = model(x32.to(dtype))
    assert out.dtype == dtype
    assert out.shape == x32.shape
    assert torch.isfinite(out).all()
    assert_close(out.float(), model32(x32), dtype)


# ---- TorchScript and torch.compile ------------------------------------------------------------


@jit_deprecated
@impls
def test_torchscript_output_equals_eager(MHA):
    model, x = build(MHA, (2, 3, 4, 5), torch.float32, seed=0)
    assert torch.equal(torch.jit.script(model)(x), model(x))


@jit_deprecated
@impls
def test_torchscript_still_raises_the_clear_error_on_a_2d_input(MHA):
    scripted = torch.jit.script(MHA(20, 4))
    expected = "ValueError: x must be 3-D [batch_size, seq_len, hidden_size], got 2-D with shape"
    with pytest.raises(torch.jit.Error, match=r"ValueError: x must be 3-D .* got 2-D") as e:
        scripted(torch.randn(3, 20))
    assert expected in str(e.value)


@jit_deprecated
@impls
def test_torchscript_model_saves_and_loads(MHA, tmp_path):
    model, x = build(MHA, (3, 5, 2, 7), torch.float32, seed=0)
    path = tmp_path / "mha.pt"
    torch.jit.save(torch.jit.script(model), path)
    loaded = torch.jit.load(path)
    assert torch.equal(loaded(x), model(x))
    assert torch.equal(loaded.W_q.weight, model.W_q.weight)


@jit_deprecated  # importing inductor defines TorchScript methods
@pytest.mark.slow
def test_torch_compile_fullgraph_equals_eager():
    # TorchDynamo captures the whole forward (no graph break) and AOTAutograd traces it, where a
    # construct of ours could fail; "aot_eager" then runs the traced graph instead of generating
    # kernels: inductor's code generation is PyTorch's, and cost 21 s here with a cold cache.
    torch._dynamo.reset()
    model, x = build(mha.annotated.MHA, (2, 3, 4, 5), torch.float32, seed=0)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    assert_close(compiled(x), model(x))
