"""``mha.parallel.parallelize`` (PyTorch's tensor parallelism, DTensor) equals one process.

One launch per world size (2 and 4 gloo ranks) runs every check, to keep the cost of forking
and of DTensor's first calls low: the module's DTensor weights, the forward, a KV cache's prefill
and step, one SGD step (every bias, the per-head norms, rotary positions) with the input's
gradient, and a refused split; on 4 ranks also a decoder block with sequence parallelism, its
shapes per rank recorded by forward hooks. The one-process results are computed first, in the
parent, so the forked ranks inherit what the first optimizer step imports.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from support import assert_close, randomised, refused

from mha.decoder import Block, LlamaBlock
from mha.full import MHA, KVCache
from mha.parallel import block_plan, launch, parallelize
from mha.rope import RotaryEmbedding

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="no gloo backend in this torch"
)

HIDDEN, HEADS, KV_HEADS, SEQ = 32, 8, 4, 8


def seeded(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` in float64, its weights of one seed, biases and norms far from 0 and 1, so a
    bias added twice or a norm's gradient summed wrong would show."""
    return randomised(module.double(), seed=3)


def attention() -> MHA:
    return seeded(MHA(HIDDEN, HEADS, kv_heads=KV_HEADS, qk_norm=True, rope=RotaryEmbedding(4)))


def llama_block() -> LlamaBlock:
    options = dict(kv_heads=KV_HEADS, qk_norm=True, rope=RotaryEmbedding(4), mlp_size=48)
    return seeded(LlamaBlock(HIDDEN, HEADS, **options))


def data() -> tuple[torch.Tensor, torch.Tensor]:
    """The input ``[2, SEQ, HIDDEN]`` and the weights of the loss (a weighted sum of the output)."""
    torch.manual_seed(4)
    return torch.randn(2, SEQ, HIDDEN, dtype=torch.float64), torch.randn(2, SEQ, HIDDEN).double()


def trained(module: torch.nn.Module, x: torch.Tensor, weights: torch.Tensor, **kwargs) -> dict:
    """One SGD step on ``(module(x) * weights).sum()``: the output after it, and ``x``'s
    gradient. ``* 1`` waits for a DTensor module's output (an AsyncCollectiveTensor)."""
    x = x.clone().requires_grad_()
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    (module(x, **kwargs) * weights).sum().backward()
    optimizer.step()
    with torch.no_grad():
        return dict(after=module(x, **kwargs) * 1, x_grad=x.grad)


def cached(module: MHA, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        cache = KVCache()
        prefill = module(x[:, :5], is_causal=True, cache=cache)
        step = module(x[:, 5:], is_causal=True, cache=cache)
        return torch.cat([prefill, step], dim=1) * 1, tuple(cache.keys.shape)


def slice_of(t: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    n = t.size(1) // world
    return t[:, rank * n : (rank + 1) * n]


def rank_checks(rank: int, world: int) -> dict:
    from torch.distributed.tensor import DTensor

    x, weights = data()
    got = {}
    model = parallelize(attention())
    got["weights"] = {
        name: (
            type(p).__name__,
            str(p.placements) if isinstance(p, DTensor) else "",
            tuple(p.to_local().shape) if isinstance(p, DTensor) else tuple(p.shape),
        )
        for name, p in model.named_parameters()
    }
    got["heads"] = (model.heads_num, model.kv_heads)
    with torch.no_grad():
        got["out"] = model(x, is_causal=True) * 1
    got["cached"], got["held"] = cached(model, x)
    got.update(trained(model, x, weights, is_causal=True))
    # two key/value heads on 4 ranks: Megatron-LM's rule, by name
    two = seeded(MHA(HIDDEN, HEADS, kv_heads=2))
    got["refused"] = refused(lambda: parallelize(two))
    got["again"] = refused(lambda: parallelize(model))
    if world == 4:
        got["block"] = block_rank(rank, world, x, weights)
        got["mesh_2d"] = data_and_tensor_rank(x, weights)
    return got


def data_and_tensor_rank(x: torch.Tensor, weights: torch.Tensor) -> dict:
    """A 2 x 2 mesh: the heads split over "tp" by ``parallelize``, the weights sharded over "dp"
    by FSDP (``fully_shard``); each data-parallel rank trains on its sample of the batch."""
    import warnings

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model = parallelize(attention(), mesh["tp"])
    fully_shard(model, mesh=mesh["dp"])
    w_q = model.W_q.weight
    got = dict(layout=(w_q.device_mesh.mesh_dim_names, str(w_q.placements), w_q.to_local().shape))
    sample = slice(mesh["dp"].get_local_rank(), mesh["dp"].get_local_rank() + 1)
    with warnings.catch_warnings():  # FSDP's warning that the module returns a view
        warnings.simplefilter("ignore", UserWarning)
        got.update(trained(model, x[sample], weights[sample], is_causal=True))
    return got


def block_rank(rank: int, world: int, x: torch.Tensor, weights: torch.Tensor) -> dict:
    """A LlamaBlock with sequence parallelism: the input and output are this rank's slice of the
    positions; the shapes each part of the block sees, recorded by forward hooks."""
    block = parallelize(llama_block(), sequence_parallel=True)
    shapes = {}

    def record(name):
        def hook(module, args, out):
            local = [a.to_local() if hasattr(a, "to_local") else a for a in (args[0], out)]
            shapes[name] = tuple(tuple(t.shape) for t in local)

        return hook

    for name in ("norm_1", "attn", "attn.W_q", "attn.W_o", "norm_2", "mlp.gate", "mlp.down"):
        block.get_submodule(name).register_forward_hook(record(name))
    got = trained(block, slice_of(x, rank, world), slice_of(weights, rank, world))
    return dict(got, shapes=shapes)


def expected_results() -> dict:
    import torch.distributed.fsdp  # imported once here, not in each forked rank

    x, weights = data()
    model = attention()
    with torch.no_grad():
        out = model(x, is_causal=True)
    return dict(
        out=out,
        cached=cached(model, x)[0],
        **trained(model, x, weights, is_causal=True),
        block=trained(llama_block(), x, weights),
        # FSDP averages the gradients over the 2 data-parallel ranks, each of one sample
        mesh_2d=trained(attention(), x, weights / 2, is_causal=True),
    )


@pytest.fixture(scope="module")
def expected() -> dict:
    return expected_results()


@pytest.fixture(scope="module")
def ranks(expected) -> dict[int, list[dict]]:
    # the one-process results first (the fixture above): the forked ranks inherit its imports
    return {world: launch(rank_checks, world) for world in (2, 4)}


@pytest.mark.parametrize("world", [2, 4])
def test_parallelize_gives_each_rank_its_heads_as_dtensors(ranks, world):
    heads, kv, d = HEADS // world, KV_HEADS // world, HIDDEN // HEADS
    for got in ranks[world]:
        w = got["weights"]
        assert w["W_q.weight"] == ("DTensor", "(Shard(dim=0),)", (heads * d, HIDDEN))
        assert w["W_k.weight"] == ("DTensor", "(Shard(dim=0),)", (kv * d, HIDDEN))
        assert w["W_o.weight"] == ("DTensor", "(Shard(dim=1),)", (HIDDEN, heads * d))
        # W_o's bias whole on every rank, added once after the all-reduce; the norms whole
        assert w["W_o.bias"] == ("DTensor", "(Replicate(),)", (HIDDEN,))
        assert w["q_norm.weight"] == ("DTensor", "(Replicate(),)", (d,))
        assert got["heads"] == (heads, kv)
        assert got["held"] == (2, kv, SEQ, d)  # the cache: this rank's key/value heads


@pytest.mark.parametrize("world", [2, 4])
def test_parallelize_forward_cache_and_training_equal_one_process(ranks, expected, world):
    moved = (expected["after"] - expected["out"]).abs().max()
    assert moved > 1e-2  # the step changed the output: the comparison means something
    for rank, got in enumerate(ranks[world]):
        for name in ("out", "cached", "after", "x_grad"):
            # float32's rounding where RMSNorm's statistics are float32 whatever the dtype
            assert_close(got[name], expected[name], torch.float32, msg=f"rank {rank} {name}")


@pytest.mark.parametrize("world", [2, 4])
def test_fewer_key_value_heads_than_ranks_are_refused_by_name(ranks, world):
    for got in ranks[world]:
        if world == 2:  # 2 key/value heads split over 2
            assert got["refused"] == ""
            continue
        assert got["refused"].startswith(
            "ValueError: kv_heads (2) must be divisible by the tensor-parallel size (4) to train"
        )
        assert "Megatron-LM" in got["refused"] and "vLLM" in got["refused"]
        assert "inference only" in got["refused"] and "shard_heads" in got["refused"]
    assert all(
        got["again"].endswith("parallelized already: its W_q.weight is a DTensor")
        for got in ranks[world]
    )


def test_sequence_parallel_block_trains_as_one_process_with_slices_per_rank(ranks, expected):
    world, n, d = 4, SEQ // 4, HIDDEN // HEADS
    for rank, got in enumerate(ranks[4]):
        block = got["block"]
        for name in ("after", "x_grad"):
            want = slice_of(expected["block"][name], rank, world)
            assert_close(block[name], want, torch.float32, msg=f"rank {rank} {name}")
        # (input, output) of each part on this rank: the norms and the residual stream hold
        # SEQ / world positions; the attention and the MLP see all of them, each rank its heads
        # or hidden units; W_o and the MLP's last layer reduce-scatter back to a slice
        assert block["shapes"] == {
            "norm_1": ((2, n, HIDDEN), (2, n, HIDDEN)),
            "attn": ((2, SEQ, HIDDEN), (2, n, HIDDEN)),
            "attn.W_q": ((2, SEQ, HIDDEN), (2, SEQ, HEADS // world * d)),
            "attn.W_o": ((2, SEQ, HEADS // world * d), (2, n, HIDDEN)),
            "norm_2": ((2, n, HIDDEN), (2, n, HIDDEN)),
            "mlp.gate": ((2, SEQ, HIDDEN), (2, SEQ, 48 // world)),
            "mlp.down": ((2, SEQ, 48 // world), (2, n, HIDDEN)),
        }


def test_the_block_plan_splits_attention_and_mlp_and_the_norms_only_with_sequence_parallel():
    styles = {n: type(s).__name__ for n, s in block_plan(Block(16, 4)).items()}
    assert styles == {
        "attn.W_q": "ColwiseParallel",
        "attn.W_k": "ColwiseParallel",
        "attn.W_v": "ColwiseParallel",
        "attn.W_o": "RowwiseParallel",
        "mlp.0": "ColwiseParallel",
        "mlp.2": "RowwiseParallel",
    }
    sequence = block_plan(Block(16, 4), sequence_parallel=True)
    assert type(sequence["norm_1"]).__name__ == type(sequence["norm_2"]).__name__
    assert type(sequence["norm_1"]).__name__ == "SequenceParallel"
    assert type(sequence["attn"]).__name__ == "PrepareModuleInput"


def test_parallelize_refuses_what_it_cannot_split_by_name():
    assert refused(lambda: parallelize(torch.nn.Linear(2, 2))) == (
        "TypeError: module must be a mha.full.MHA or a mha.decoder.Block or LlamaBlock, got Linear"
    )
    assert refused(lambda: parallelize(MHA(16, 4), sequence_parallel=True)).startswith(
        "ValueError: sequence_parallel: an MHA alone has no norms to split by positions"
    )
    assert refused(lambda: parallelize(MHA(16, 4), "tp")) == (
        "TypeError: mesh must be a torch.distributed.device_mesh.DeviceMesh or None, got str ('tp')"
    )
    assert refused(lambda: parallelize(MHA(16, 4))).startswith(
        "ValueError: mesh: parallelize needs a process group"
    )
    # OLMo 2's norm spans every head: no rank could compute its statistics alone
    assert refused(lambda: parallelize(MHA(16, 4, qk_norm="projection"))).startswith(
        "ValueError: qk_norm='projection' normalises q and k over all heads at once"
    )
    assert refused(lambda: block_plan(MHA(16, 4))) == (
        "TypeError: block must be a mha.decoder.Block or LlamaBlock, got MHA"
    )


def test_a_2d_mesh_shards_over_data_and_splits_heads_over_tensor_and_trains_as_one_process(
    ranks, expected
):
    d = HIDDEN // HEADS
    for rank, got in enumerate(ranks[4]):
        mesh_2d, sample = got["mesh_2d"], rank // 2  # ranks 0, 1: dp 0; ranks 2, 3: dp 1
        # W_q's rows: split by heads over tp (2 heads a rank), then in halves over dp
        names, placements, local = mesh_2d["layout"]
        assert names == ("dp", "tp") and tuple(local) == (HEADS // 2 * d // 2, HIDDEN)
        assert placements == "(_StridedShard(dim=0, sf=2), Shard(dim=0))"
        want = expected["mesh_2d"]["after"][sample : sample + 1]
        assert_close(mesh_2d["after"], want, torch.float32, msg=f"rank {rank}")
        # the input's gradient: of this sample's loss, which one process scaled by 1 / 2
        want = 2 * expected["mesh_2d"]["x_grad"][sample : sample + 1]
        assert_close(mesh_2d["x_grad"], want, torch.float32, msg=f"rank {rank}")
