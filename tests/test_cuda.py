"""On a GPU (``make gpu-check``): the fast path through each of SDPA's CUDA kernels (flash,
memory-efficient, math) equals a float64 reference on the CPU, with grouped-query attention
(``enable_gqa``), masks and a cache, in pure bfloat16 and float16 and compiled. Skipped, with the
reason, where there is no CUDA device; this file needs only torch and pytest (the GPU machine runs
it with its own Python, without the project's set-up)."""

from __future__ import annotations

import copy

import pytest
import torch

from mha.full import MHA, KVCache, padding_mask

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device (make gpu-check runs this on one)"
)
BOUND = {torch.float16: 1e-2, torch.bfloat16: 8e-2, torch.float32: 1e-4}


def kernels():
    from torch.nn.attention import SDPBackend

    return {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }


def relative(got: torch.Tensor, expected: torch.Tensor) -> float:
    return ((got.double().cpu() - expected).abs().max() / expected.abs().max()).item()


@pytest.mark.parametrize("kernel", ["flash", "efficient", "math"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kv_heads", [8, 2, 1])
@pytest.mark.parametrize("mask", ["causal", "padding", "none"])
def test_each_kernel_equals_the_float64_reference(kernel, dtype, kv_heads, mask):
    from torch.nn.attention import sdpa_kernel

    torch.manual_seed(0)
    model64 = MHA(512, 8, kv_heads=kv_heads).double().eval()
    model = copy.deepcopy(model64).to("cuda", dtype)
    x = torch.randn(2, 64, 512, dtype=torch.float64)
    options = {"is_causal": mask == "causal"}
    if mask == "padding":
        options["attn_mask"] = padding_mask(torch.tensor([64, 40]), 64)
    with torch.no_grad():
        expected = model64(x, **options)
        on_gpu = {k: v.cuda() if torch.is_tensor(v) else v for k, v in options.items()}
        try:
            with sdpa_kernel([kernels()[kernel]]):
                got = model(x.to("cuda", dtype), **on_gpu)
        except RuntimeError as error:  # this kernel does not take this input on this build
            if "No available kernel" in str(error):
                pytest.skip(f"{kernel} takes no {mask} mask with kv_heads={kv_heads} here")
            raise
    assert got.dtype == dtype
    assert relative(got, expected) < BOUND[dtype]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_a_compiled_decode_step_with_a_cache_equals_the_reference(dtype):
    torch.manual_seed(0)
    model64 = MHA(256, 8, kv_heads=2).double().eval()
    model = copy.deepcopy(model64).to("cuda", dtype)
    step = torch.compile(model, fullgraph=True, dynamic=True)
    x = torch.randn(2, 24, 256, dtype=torch.float64)
    cache = KVCache(max_len=24)
    with torch.no_grad():
        expected = model64(x, is_causal=True)
        outs = [model(x[:, :16].to("cuda", dtype), is_causal=True, cache=cache)]
        outs += [
            step(x[:, i : i + 1].to("cuda", dtype), is_causal=True, cache=cache)
            for i in range(16, 24)
        ]
    assert relative(torch.cat(outs, dim=1), expected) < BOUND[dtype]


def test_a_static_cache_step_is_captured_once_by_a_cuda_graph_and_replayed_every_step():
    """A static cache keeps the shapes and reads no number on the host: one CUDA graph of a
    decoding step, replayed at each position, equals the dynamic cache's steps."""
    from mha.rope import RotaryEmbedding

    torch.manual_seed(0)
    model = MHA(64, 4, kv_heads=2, rope=RotaryEmbedding(16)).cuda().eval()
    x = torch.randn(1, 20, 64, device="cuda")
    static, dynamic = KVCache(max_len=32, static=True), KVCache()
    with torch.no_grad():
        model(x[:, :4], is_causal=True, cache=static)
        model(x[:, :4], is_causal=True, cache=dynamic)
        new = x[:, 4:5].clone()  # the graph's input: each step copies its position into it
        side = torch.cuda.Stream()  # warm up off the default stream, as capture asks
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            model(new, is_causal=True, cache=static)
        torch.cuda.current_stream().wait_stream(side)
        static.crop(4)  # the warm-up's position taken back
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = model(new, is_causal=True, cache=static)
        for s in range(4, 20):
            new.copy_(x[:, s : s + 1])
            graph.replay()
            want = model(x[:, s : s + 1], is_causal=True, cache=dynamic)
            assert relative(out, want.double().cpu()) < BOUND[torch.float32], s
    assert len(static) == 20


def ring_inputs(layout: str, world: int, dtype: torch.dtype):
    """A causal sequence's q, k, v and the loss's weights, float64 on the CPU, and each rank's
    part of them on the GPU in ``dtype``: 8 query heads, 2 key/value heads, values of another
    size than the keys (what the memory-efficient kernel takes and the CPU flash one does not)."""
    from mha.parallel import split_sequence

    torch.manual_seed(0)
    shapes = [(2, 8, 256, 64), (2, 2, 256, 64), (2, 2, 256, 32), (2, 8, 256, 32)]
    whole = [torch.randn(*shape, dtype=torch.float64) for shape in shapes]
    parts = [
        split_sequence(t.to("cuda", dtype), world, dim=2, layout=layout) for t in whole
    ]  # fmt: skip
    return whole, parts


def reference(whole):
    """One process's output and gradients, float64 on the CPU."""
    *qkv, weights = (t.clone().requires_grad_() for t in whole)
    out = torch.nn.functional.scaled_dot_product_attention(*qkv, is_causal=True, enable_gqa=True)
    (out * weights).sum().backward()
    return out.detach(), [t.grad for t in qkv]


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_ring_of_four_ranks_on_one_gpu_equals_the_float64_reference(layout, dtype):
    """Each rank's steps as ``ring_attention`` runs them (the kernel ``ring_kernel`` names,
    forward and backward, and the merge), the four ranks one after another on one GPU, the
    transfers left out: one GPU has no ring of NCCL ranks, and gloo sends no CUDA tensor."""
    from mha.parallel import join_sequence, ring

    world = 4
    whole, (q, k, v, weights) = ring_inputs(layout, world, dtype)
    assert ring.ring_kernel(q[0], k[0], v[0]) == "aten._scaled_dot_product_efficient_attention"
    outs, lses = [], []
    for rank in range(world):
        out = lse = None
        for source, action in ring.ring_schedule(world, rank, is_causal=True, layout=layout):
            part = ring._step_forward(q[rank], k[source], v[source], action, 64)
            if part is None:
                continue
            rows, part_out, part_lse = part
            if out is None:  # step 0: the own block, every row
                out, lse = part_out, part_lse
            else:
                ring._merge_into(ring._part(out, rows), ring._part(lse, rows), part_out, part_lse)
        outs.append(out)
        lses.append(lse)
    dq = [torch.zeros_like(t, dtype=torch.float32) for t in q]
    dk = [torch.zeros_like(t, dtype=torch.float32) for t in k]
    dv = [torch.zeros_like(t, dtype=torch.float32) for t in v]
    for rank in range(world):
        for source, action in ring.ring_schedule(world, rank, is_causal=True, layout=layout):
            grads = ring._step_backward(
                weights[rank], q[rank], k[source], v[source], outs[rank], lses[rank], action, 64
            )
            dq[rank] += grads[0]
            dk[source] += grads[1]
            dv[source] += grads[2]
    expected, expected_grads = reference(whole)
    join = lambda parts: join_sequence(parts, dim=2, layout=layout)  # noqa: E731
    assert relative(join(outs), expected) < BOUND[dtype]
    for name, got, want in zip("qkv", (dq, dk, dv), expected_grads, strict=True):
        assert relative(join(got), want) < BOUND[dtype], f"d{name}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_ring_attention_without_a_process_group_runs_the_kernel_on_the_gpu(dtype):
    """One process, no ``torch.distributed``: ``ring_attention`` is the memory-efficient kernel's
    attention, its gradients through autograd."""
    from mha.parallel import ring_attention

    whole, (q, k, v, weights) = ring_inputs("contiguous", 1, dtype)
    q, k, v = (t[0].clone().requires_grad_() for t in (q, k, v))
    out = ring_attention(q, k, v, is_causal=True)
    (out.float() * weights[0].float()).sum().backward()
    expected, expected_grads = reference(whole)
    assert out.dtype == dtype
    assert relative(out, expected) < BOUND[dtype]
    for name, got, want in zip("qkv", (q.grad, k.grad, v.grad), expected_grads, strict=True):
        assert relative(got, want) < BOUND[dtype], f"d{name}"
