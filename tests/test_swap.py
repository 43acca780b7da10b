"""``mha.interop.swap_attention``: a transformers model with mha's attention in it equals itself.

The contract (issue 32): ``swap_attention(model)`` replaces every attention layer of a
transformers causal LM of the families ``from_hf`` converts by ``mha.hf.HFAttention``; the
logits then equal the original's (float64: ``support.TOLERANCE``, 1e-12, measured 0.0; float32:
2e-6, measured 6.0e-8 on logits up to 0.4) for a prompt, a left-padded batch (its real
positions) and every step of ``generate``: greedy, sampling with a seed, beam search (3 beams),
past the sliding window, under ``sdpa`` and ``eager``. The layer's keys and values live in
transformers' own cache (its length drives its masks and positions): the very tensors the
original's layers hold, reordered and cropped by transformers; a cache the original filled is
continued, one of another layout is an error. ``restore_attention`` puts transformers'
modules back with the current weights: ``save_pretrained`` then ``from_pretrained`` in plain
transformers gives the same logits after training. Where the swap meets the other features:
bfloat16 (``.to`` and autocast) as close to float64 as the original, training with frozen parts
gives the original's gradients, a cache filled under ``inference_mode`` continues under
``no_grad``, and ``torch.compile(fullgraph=True)`` of the whole model runs with transformers'
cache as the original does.

The models are small (2 layers, hidden 32, a vocabulary of 50), built from configs with every
weight drawn (``support.randomised``): nothing is downloaded. The original is always run under
``sdpa``: its ``eager`` path computes the softmax in float32 even in float64, so the swapped
model under ``eager`` (which then gets transformers' additive masks) is compared with the same
weights under ``sdpa``.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch
from support import TOLERANCE, randomised

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
from test_transformers import float64_softmax  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    DeepseekV2Config,
    DeepseekV3Config,
    DynamicCache,
    Gemma2Config,
    Gemma3TextConfig,
    GemmaConfig,
    Glm4Config,
    GPT2Config,
    GPT2LMHeadModel,
    GptOssConfig,
    GraniteConfig,
    Llama4TextConfig,
    LlamaConfig,
    MistralConfig,
    MixtralConfig,
    Olmo2Config,
    OlmoConfig,
    Phi3Config,
    Qwen2Config,
    Qwen2MoeConfig,
    Qwen3Config,
    Qwen3MoeConfig,
    Qwen3NextConfig,
    SmolLM3Config,
)

from mha.full import MHA  # noqa: E402
from mha.hf import HFAttention  # noqa: E402
from mha.interop import from_hf, restore_attention, swap_attention, to_hf  # noqa: E402
from mha.mla import MLA  # noqa: E402

transformers.logging.set_verbosity_error()

VOCAB, WINDOW = 50, 4
SIZES = dict(
    hidden_size=32,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=32,
    num_hidden_layers=2,
    vocab_size=VOCAB,
    pad_token_id=0,
    max_position_embeddings=64,
)
SLIDING = dict(use_sliding_window=True, sliding_window=WINDOW)
# DeepSeek's multi-head latent attention: its ranks and head parts, as many key heads as queries
LATENT = dict(
    SIZES,
    num_key_value_heads=4,
    q_lora_rank=12,
    kv_lora_rank=8,
    qk_nope_head_dim=6,
    qk_rope_head_dim=4,
    v_head_dim=5,
)
# Each family with what it switches on: llama3's rope scaling (a trained context of 8, shorter
# than the sequences here), Mistral's window on every layer, Qwen2's biases and one sliding layer,
# Qwen3's q/k norm, a head size of its own and one sliding layer, DeepSeek-V3's MLA (its layers
# dense; transformers' experts run in float64 only as experts_implementation "eager", which build
# sets for the mixtures of experts below).
FAMILIES = {
    "llama": lambda: LlamaConfig(
        **SIZES,
        head_dim=8,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8,
        },
    ),
    "mistral": lambda: MistralConfig(**SIZES, head_dim=8, sliding_window=WINDOW),
    "qwen2": lambda: Qwen2Config(
        **SIZES, **SLIDING, layer_types=["full_attention", "sliding_attention"]
    ),
    "qwen3": lambda: Qwen3Config(
        **SIZES, **SLIDING, head_dim=16, layer_types=["sliding_attention", "full_attention"]
    ),
    "deepseek_v3": lambda: DeepseekV3Config(
        **LATENT,
        first_k_dense_replace=2,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
    ),
}
# The families whose attention is one of the above's (issue 34), each with what it switches on:
# Mixtral's window from its config (as Mistral's), Qwen2-MoE's biases and a sliding layer counted
# from the other end, Qwen3-MoE's q/k norm and its window on every layer, Gemma's head size,
# Granite's attention_multiplier as its scale (its other multipliers are outside attention),
# GLM-4's half-rotated heads in interleaved pairs, DeepSeek-V2's MLA; Gemma 2's soft-capped scores
# (a cap of 1.0 that the scores here reach; the published one is 50.0) and Gemma 3's (1 + w) q/k
# norms, each alternating a sliding and a full layer, each scaled by query_pre_attn_scalar, Gemma
# 3's local layer rotating by its own base (10,000; its full layer's 1,000,000); gpt-oss's sinks,
# biases, its sliding and full layers and its YaRN without truncation (a trained context of 8, so
# the stretch changes the positions here); Phi-4-mini's attention (Phi-3's layer): q, k and v in
# one qkv_proj, three quarters of each head rotating, longrope with a trained context of 8, so a
# generation past it switches to the long factors. The experts are few.
GEMMA = dict(SIZES, head_dim=8, sliding_window=WINDOW, query_pre_attn_scalar=12)
GEMMA_LAYERS = dict(layer_types=["sliding_attention", "full_attention"])
EXPERTS = dict(num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16)
SIBLINGS = {
    "mixtral": lambda: MixtralConfig(
        **SIZES, head_dim=8, sliding_window=WINDOW, num_local_experts=2, num_experts_per_tok=1
    ),
    "qwen2_moe": lambda: Qwen2MoeConfig(
        **SIZES, **SLIDING, **EXPERTS, max_window_layers=1, shared_expert_intermediate_size=16
    ),
    "qwen3_moe": lambda: Qwen3MoeConfig(**SIZES, **SLIDING, **EXPERTS, head_dim=16),
    "gemma": lambda: GemmaConfig(**SIZES, head_dim=16),
    "granite": lambda: GraniteConfig(
        **SIZES,
        attention_multiplier=0.3,
        embedding_multiplier=2.0,
        residual_multiplier=0.5,
        logits_scaling=2.0,
    ),
    "glm4": lambda: Glm4Config(**SIZES, head_dim=8),  # partial_rotary_factor 0.5, its default
    "olmo2": lambda: Olmo2Config(**SIZES),  # q and k normalised over their whole projection
    "gemma2": lambda: Gemma2Config(**GEMMA, **GEMMA_LAYERS, attn_logit_softcapping=1.0),
    "gemma3": lambda: Gemma3TextConfig(**GEMMA, **GEMMA_LAYERS),
    "gpt_oss": lambda: GptOssConfig(
        **SIZES,
        **GEMMA_LAYERS,
        head_dim=8,
        sliding_window=WINDOW,
        num_local_experts=2,
        num_experts_per_tok=1,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 150000.0,
            "factor": 32.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
            "original_max_position_embeddings": 8,
        },
    ),
    # SmolLM3: its layer 1 without rotation (no_rope_layers 0), which its config then slides
    "smollm3": lambda: SmolLM3Config(**SIZES, **SLIDING, head_dim=8, no_rope_layers=[1, 0]),
    "phi3": lambda: Phi3Config(
        **SIZES,
        original_max_position_embeddings=8,
        rope_parameters={
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.75,  # 6 of each head's 8 dimensions: 3 pairs
            "short_factor": [1.0, 1.25, 2.0],
            "long_factor": [1.5, 4.0, 9.0],
        },
    ),
    # Llama 4 (text): layer 0 rotating, in chunks of 4 (the generation crosses several), its
    # q/k norm without a weight; layer 1 without rotation, its temperature tuned (a floor_scale
    # of 2 instead of 8192, so that it changes here); its experts and shared expert few
    "llama4": lambda: Llama4TextConfig(
        **{**SIZES, "intermediate_size": 16},
        head_dim=8,
        intermediate_size_mlp=32,
        num_local_experts=2,
        num_experts_per_tok=1,
        no_rope_layers=[1, 0],
        attention_chunk_size=4,
        attn_temperature_tuning=True,
        attn_scale=0.5,
        floor_scale=2,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    ),
    "deepseek_v2": lambda: DeepseekV2Config(
        **LATENT,
        first_k_dense_replace=1,
        n_routed_experts=2,
        num_experts_per_tok=1,
        moe_intermediate_size=16,
    ),
}
# The sliding window of each layer, as the configs above set it (MLA has none).
WINDOWS = {
    "llama": [None, None],
    "mistral": [WINDOW, WINDOW],
    "qwen2": [None, WINDOW],
    "qwen3": [WINDOW, None],
    "deepseek_v3": [None, None],
    "mixtral": [WINDOW, WINDOW],
    "qwen2_moe": [WINDOW, None],
    "qwen3_moe": [WINDOW, WINDOW],
    "gemma": [None, None],
    "granite": [None, None],
    "glm4": [None, None],
    "olmo2": [None, None],
    "gemma2": [WINDOW, None],
    "gemma3": [WINDOW, None],
    "gpt_oss": [WINDOW, None],
    "smollm3": [None, WINDOW],
    "phi3": [None, None],
    "llama4": [None, None],  # its layer 0 attends in chunks of 4 (MHA.chunk)
    "deepseek_v2": [None, None],
}
# DeepSeek-V2's code rotates the query's and key's rotary parts in float32 (apply_rotary_emb's
# .float()), so its float64 logits carry float32's rounding: measured 1.9e-7 on logits up to 2.
BOUNDS = {"deepseek_v2": 1e-6, "llama4": 1e-6}  # Llama 4's rotation too (its complex numbers)
IMPLEMENTATIONS = ("sdpa", "eager")
# Two prompts, the second padded on the left (transformers' attention_mask: 0 = padding); the
# generation runs 6 positions past the longer one, well past the window of 4.
PROMPTS = [[3, 4, 5, 6, 7, 8, 9], [10, 11, 12, 13]]
NEW = 6


# Models whose attention layers are some of their layers only: Qwen3-Next's full-attention layers
# (its gated output, (1 + w) q/k norms, a quarter of each head rotated: 2 of 8 dims, its default)
# between its Gated DeltaNet layers (linear attention, another module, left as they are).
HYBRIDS = {
    "qwen3_next": lambda: Qwen3NextConfig(
        **{**SIZES, "num_hidden_layers": 3},
        head_dim=8,
        layer_types=["full_attention", "linear_attention", "full_attention"],
        linear_num_value_heads=2,
        linear_num_key_heads=2,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        num_experts=2,
        num_experts_per_tok=1,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
    ),
}


def build(family: str, dtype: torch.dtype = torch.float64, seed: int = 0):
    """The family's causal LM with every weight drawn, in ``dtype``, in evaluation mode."""
    config = {**FAMILIES, **SIBLINGS, **HYBRIDS}[family]()
    # transformers' sdpa path refuses a soft-cap and has no sinks: Gemma 2 and gpt-oss run eager
    config._attn_implementation = "eager" if family in ("gemma2", "gpt_oss") else "sdpa"
    config._experts_implementation = "eager"  # the mixtures of experts' experts, in float64
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return randomised(model, seed).eval()


@pytest.fixture(scope="module", params=list(FAMILIES))
def pair(request):
    """The original model and a swapped copy of it, float64."""
    original = build(request.param)
    return original, swap_attention(copy.deepcopy(original))


@pytest.fixture(params=IMPLEMENTATIONS)
def swapped(request, pair):
    """The swapped model under each attention implementation (its masks follow it)."""
    model = pair[1]
    model.config._attn_implementation = request.param
    yield model
    model.config._attn_implementation = "sdpa"


def batch(prompts=PROMPTS) -> tuple[torch.Tensor, torch.Tensor]:
    """``input_ids`` and ``attention_mask`` of the prompts, left-padded."""
    longest = max(map(len, prompts))
    ids = torch.zeros(len(prompts), longest, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, longest - len(prompt) :] = torch.tensor(prompt)
        mask[row, longest - len(prompt) :] = 1
    return ids, mask


def assert_equal(
    actual: torch.Tensor, expected: torch.Tensor, what: str, bound: float | None = None
) -> None:
    """Equal up to ``bound``, by default ``support.TOLERANCE`` of the dtype, in the largest
    absolute difference."""
    worst = (actual - expected).abs().max().item()
    assert worst <= (bound or TOLERANCE[expected.dtype]), f"{what}: differs by {worst:.2e}"


def generated(model, seed: int = 0, **options):
    """``model.generate`` on ``PROMPTS``, each step's logits kept."""
    ids, mask = batch()
    torch.manual_seed(seed)
    return model.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=NEW,
        output_logits=True,
        output_scores=True,
        return_dict_in_generate=True,
        **options,
    )


def assert_same_generation(original, swapped, bound: float | None = None, **options) -> None:
    theirs, ours = generated(original, **options), generated(swapped, **options)
    assert torch.equal(ours.sequences, theirs.sequences), (ours.sequences, theirs.sequences)
    assert len(ours.logits) == len(theirs.logits) == NEW
    for step, (mine, expected) in enumerate(zip(ours.logits, theirs.logits, strict=True)):
        assert_equal(mine, expected, f"step {step}", bound)
    if "num_beams" in options:
        assert_equal(ours.sequences_scores, theirs.sequences_scores, "beam scores")


# ---- The logits equal the original's -------------------------------------------------------


def test_every_attention_layer_is_swapped_and_nothing_else(pair):
    original, swapped = pair
    ours = [m for m in swapped.modules() if isinstance(m, HFAttention)]
    assert len(ours) == original.config.num_hidden_layers
    assert [m.layer_idx for m in ours] == list(range(len(ours)))
    kind = MLA if original.config.model_type == "deepseek_v3" else MHA
    assert all(type(m.attention) is kind for m in ours)
    windows = [getattr(m.attention, "window", None) for m in ours]
    assert windows == WINDOWS[original.config.model_type], windows
    # every other parameter is the original's, under its own name
    theirs = {k: v for k, v in original.state_dict().items() if "self_attn" not in k}
    mine = {k: v for k, v in swapped.state_dict().items() if "self_attn" not in k}
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in theirs)


def test_the_logits_of_a_prompt_equal_the_original(pair, swapped):
    ids = torch.tensor(PROMPTS[:1])
    with torch.no_grad():
        assert_equal(swapped(ids).logits, pair[0](ids).logits, "logits")


def test_a_left_padded_batch_equals_the_original_on_its_real_positions(pair, swapped):
    ids, mask = batch()
    with torch.no_grad():
        ours = swapped(ids, attention_mask=mask).logits
        theirs = pair[0](ids, attention_mask=mask).logits
    real = mask.bool()  # a padded query's row is not a prediction (eager and sdpa fill it apart)
    assert_equal(ours[real], theirs[real], "logits")


def test_greedy_generation_equals_the_original_at_every_step(pair, swapped):
    assert_same_generation(pair[0], swapped, do_sample=False)


def test_sampling_with_a_seed_equals_the_original_at_every_step(pair, swapped):
    assert_same_generation(pair[0], swapped, do_sample=True, top_k=0)


def test_beam_search_equals_the_original_at_every_step(pair, swapped):
    assert_same_generation(pair[0], swapped, do_sample=False, num_beams=3)


@pytest.mark.parametrize("family", list(SIBLINGS))
def test_a_family_of_the_same_layer_swaps_and_its_logits_equal_the_original(family):
    """Each sibling family swapped (every layer, its windows): the logits of a left-padded batch
    on its real positions, then two steps decoded in the model's own cache, past the window,
    equal the original's. What they share with the five above (HFAttention, transformers' masks
    and cache, generate) is tested there."""
    original = build(family)
    swapped = swap_attention(copy.deepcopy(original))
    layers = ours_of(swapped)
    kind = MLA if family.startswith("deepseek") else MHA
    assert [type(m.attention) for m in layers] == [kind] * original.config.num_hidden_layers
    assert [getattr(m.attention, "window", None) for m in layers] == WINDOWS[family]
    ids, mask = batch()
    bound = BOUNDS.get(family)
    caches = DynamicCache(config=original.config), DynamicCache(config=swapped.config)
    # Gemma 2's eager path in float64, its float32 softmax lifted (tests/test_transformers.py)
    with torch.no_grad(), float64_softmax(original.model.layers[0].self_attn, torch.float64):
        logits = [
            m(ids, attention_mask=mask, past_key_values=c).logits
            for m, c in zip((original, swapped), caches, strict=True)
        ]
        real = mask.bool()
        assert_equal(logits[1][real], logits[0][real], "the batch", bound)
        for step in range(2):
            mask = torch.cat([mask, torch.ones(2, 1, dtype=mask.dtype)], dim=1)
            new = torch.full((2, 1), 5 + step)
            logits = [
                m(new, attention_mask=mask, past_key_values=c).logits
                for m, c in zip((original, swapped), caches, strict=True)
            ]
            assert_equal(logits[1], logits[0], f"step {step}", bound)


@pytest.mark.parametrize("family", ["gemma2", "gemma3"])
def test_gemmas_greedy_generation_past_the_window_equals_the_original_at_every_step(family):
    """Gemma 2 and 3 alternate sliding and full layers: 6 new positions past the longer prompt's
    7, the window 4, the same tokens and every step's logits equal."""
    original = build(family)
    swapped = swap_attention(copy.deepcopy(original))
    assert [m.attention.softcap for m in ours_of(swapped)] == [
        1.0 if family == "gemma2" else None
    ] * 2
    assert {m.attention.qk_norm for m in ours_of(swapped)} == {family == "gemma3" and "gemma"}
    bases = [m.attention.rope.base for m in ours_of(swapped)]
    assert bases == ([10000.0, 10000.0] if family == "gemma2" else [10000.0, 1000000.0])
    with float64_softmax(original.model.layers[0].self_attn, torch.float64):
        assert_same_generation(original, swapped)


def test_gpt_oss_greedy_generation_past_the_window_equals_the_original_at_every_step():
    """gpt-oss alternates a sliding and a full layer, each with its sinks and biases, its YaRN
    unrounded: 6 new positions past the longer prompt's 7, the same tokens and logits."""
    original = build("gpt_oss")
    swapped = swap_attention(copy.deepcopy(original))
    layers = [m.attention for m in ours_of(swapped)]
    assert [(m.sinks, m.bias, m.rope.scaling["truncate"]) for m in layers] == [
        (True, ("W_q", "W_k", "W_v", "W_o"), False)
    ] * 2
    sinks = [layer.self_attn.sinks for layer in original.model.layers]
    assert all(torch.equal(m.sink_logits, s) for m, s in zip(layers, sinks, strict=True))
    assert_same_generation(original, swapped)


def test_llama4s_greedy_generation_across_its_chunks_equals_the_original_at_every_step():
    """Llama 4's layer 0 rotates (interleaved pairs), normalises q and k without a weight and
    attends in chunks of 4; its layer 1 has no rotation and tunes its temperature. A left-padded
    batch, 6 new positions (the longer row's chunks end at 4, 8 and 12): the same tokens, every
    step's logits within float32's rounding (its code rotates in float32)."""
    original = build("llama4")
    swapped = swap_attention(copy.deepcopy(original))
    layers = [m.attention for m in ours_of(swapped)]
    said = [(m.chunk, m.qk_norm, m.rope, m.temperature) for m in layers]
    assert said[0][:2] == (4, "weightless") and said[0][2].interleaved
    assert said[1] == (None, False, None, (0.5, 2.0))
    assert_same_generation(original, swapped, bound=BOUNDS["llama4"])


def test_qwen3_next_swaps_its_full_attention_layers_only_and_generates_as_the_original():
    """Qwen3-Next's layers 0 and 2 attend (gated, (1 + w) norms, 2 of 8 dims rotated); its layer
    1 is a Gated DeltaNet, not swapped. Greedy decoding and beam search of a left-padded batch, 6
    new positions: the same tokens and every step's logits; restored, the layers are the
    original's, weight for weight."""
    original = build("qwen3_next")
    swapped = swap_attention(copy.deepcopy(original))
    layers = swapped.model.layers
    assert [type(getattr(x, "self_attn", None)).__name__ for x in layers] == [
        "HFAttention",
        "NoneType",
        "HFAttention",
    ]
    assert type(layers[1].linear_attn) is type(original.model.layers[1].linear_attn)
    ours = [m.attention for m in ours_of(swapped)]
    said = [(m.gate, m.qk_norm, m.rope.rotary_dims, m.rope.interleaved) for m in ours]
    assert said == [(True, "gemma", 2, False)] * 2
    for i in (0, 2):  # q_proj's rows as they are: each head's query, then its gate
        theirs = original.model.layers[i].self_attn.q_proj.weight
        assert torch.equal(layers[i].self_attn.attention.W_q.weight, theirs)
    assert_same_generation(original, swapped)
    assert_same_generation(original, swapped, do_sample=False, num_beams=3)
    restore_attention(swapped)
    mine = swapped.state_dict()
    assert mine.keys() == original.state_dict().keys()
    assert all(torch.equal(mine[k], v) for k, v in original.state_dict().items())


def test_to_hf_copies_qwen3_nexts_gated_query_projection_back():
    hf = build("qwen3_next").model.layers[2].self_attn
    m = randomised(from_hf(hf), seed=5)
    to_hf(m, hf)
    assert torch.equal(hf.q_proj.weight, m.W_q.weight) and hf.q_proj.weight.shape == (64, 32)
    assert all(torch.equal(from_hf(hf).state_dict()[k], v) for k, v in m.state_dict().items())
    with pytest.raises(ValueError, match=r"gate=False, expected gate=True"):
        to_hf(MHA(32, 4, kv_heads=2, head_size=8, qk_norm="gemma", rope=m.rope), hf)


def test_smollm3_greedy_generation_with_a_layer_without_rotation_equals_the_original():
    """SmolLM3's layer 1 skips the rotation (a NoPE layer, sliding here): its MHA has no rope,
    layer 0's rotates whole heads; 6 new positions past the longer prompt's 7, past the window 4,
    the same tokens and every step's logits."""
    original = build("smollm3")
    swapped = swap_attention(copy.deepcopy(original))
    ropes = [m.attention.rope for m in ours_of(swapped)]
    assert ropes[0].rotary_dims == 8 and ropes[1] is None
    assert_same_generation(original, swapped)
    assert_same_generation(original, swapped, do_sample=False, num_beams=3)


def test_phi3_greedy_generation_past_its_trained_context_equals_the_original_at_every_step():
    """Phi-3's fused qkv_proj split into W_q, W_k and W_v, and its longrope: 6 new positions past
    the longer prompt's 7, through the trained context of 8 (where transformers' generate drops
    its cache and runs the whole sequence again with the long factors), the same tokens and
    logits; restored, the fused projection is the original's, bit for bit."""
    original = build("phi3")
    swapped = swap_attention(copy.deepcopy(original))
    layers = [m.attention for m in ours_of(swapped)]
    fused = [layer.self_attn.qkv_proj.weight for layer in original.model.layers]
    for m, weight in zip(layers, fused, strict=True):
        assert torch.equal(torch.cat([m.W_q.weight, m.W_k.weight, m.W_v.weight]), weight)
        assert (m.rope.rotary_dims, m.rope.scaling["rope_type"]) == (6, "longrope")
        assert m.rope.scaling["factor"] == 64 / 8  # max_position_embeddings / the trained 8
    assert_same_generation(original, swapped, do_sample=False)
    restore_attention(swapped)
    restored = [layer.self_attn for layer in swapped.model.layers]
    assert all(type(a).__name__ == "Phi3Attention" for a in restored)
    assert all(torch.equal(a.qkv_proj.weight, w) for a, w in zip(restored, fused, strict=True))


def test_a_phi3_frozen_projection_stays_frozen_there_and_back():
    model = build("phi3")
    model.model.layers[0].self_attn.qkv_proj.weight.requires_grad_(False)
    swap_attention(model)
    attention = model.model.layers[0].self_attn.attention
    assert not any(getattr(attention, n).weight.requires_grad for n in ("W_q", "W_k", "W_v"))
    assert attention.W_o.weight.requires_grad
    restore_attention(model)
    assert not model.model.layers[0].self_attn.qkv_proj.weight.requires_grad
    assert model.model.layers[1].self_attn.qkv_proj.weight.requires_grad


def test_a_family_of_another_layer_is_refused_and_nothing_is_swapped():
    """OLMo clamps q, k and v (its config's clip_qkv): swap_attention names the first layer and
    why, and leaves the model as it was."""
    model = AutoModelForCausalLM.from_config(OlmoConfig(**SIZES, clip_qkv=8.0))
    with pytest.raises(ValueError) as error:
        swap_attention(model)
    said = str(error.value)
    assert said.startswith(
        "OlmoForCausalLM has attention layers swap_attention cannot convert, so none is swapped: "
        "model.layers.0.self_attn (OlmoAttention): OlmoAttention's config sets clip_qkv=8.0"
    ), said
    assert said.endswith("(and 1 more)"), said
    assert not ours_of(model)


def test_float32_stays_within_its_bound():
    original = build("qwen3", torch.float32)
    swapped = swap_attention(copy.deepcopy(original))
    assert_same_generation(original, swapped, do_sample=False)


# ---- Where the swap meets the other features ------------------------------------------------


def _logits(model, ids, mask, autocast: bool = False) -> torch.Tensor:
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        return model(ids, attention_mask=mask).logits.double()


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("how", ["to bfloat16", "autocast"])
def test_in_bfloat16_the_swapped_model_is_as_close_to_float64_as_the_original(family, how):
    """bfloat16 may round differently along each path, so the bound is not equality: the swapped
    model's distance to the float64 model is at most twice the original's (measured: equal for
    ``.to``, at most 1.25 times under autocast; both 0.007-0.04 on logits up to 2)."""
    reference = build(family)
    dtype = torch.bfloat16 if how == "to bfloat16" else torch.float32
    original = copy.deepcopy(reference).to(dtype)
    swapped = swap_attention(copy.deepcopy(reference)).to(dtype)
    ids, mask = batch()
    truth = _logits(reference, ids, mask)
    real = mask.bool()  # the padded positions' logits are nobody's
    theirs = (_logits(original, ids, mask, how == "autocast") - truth)[real].abs().max().item()
    ours = (_logits(swapped, ids, mask, how == "autocast") - truth)[real].abs().max().item()
    assert ours <= 2 * theirs, (ours, theirs)


@pytest.mark.parametrize("family", ["qwen3", "deepseek_v3"])
def test_with_frozen_parts_the_gradients_equal_the_originals(family):
    """Layer 0 frozen (its attention too), the loss and every gradient left equal the original's:
    what flows back through the swapped layers is transformers' own."""
    original = build(family).train()
    swapped = swap_attention(copy.deepcopy(original)).train()
    for model in (original, swapped):
        model.model.layers[0].requires_grad_(False)
    ids = torch.randint(1, VOCAB, (3, 9), generator=torch.Generator().manual_seed(2))
    losses = [m(ids, labels=ids, use_cache=False).loss for m in (original, swapped)]
    for loss in losses:
        loss.backward()
    assert_equal(losses[1], losses[0], "loss")
    theirs = {n: p.grad for n, p in original.named_parameters() if p.requires_grad}
    ours = {n: p.grad for n, p in swapped.named_parameters() if p.requires_grad}
    outside = [n for n in theirs if ".self_attn." not in n]  # the names the swap keeps
    assert outside and all(n in ours for n in outside), outside
    for name in outside:
        assert_equal(ours[name], theirs[name], name)
    frozen = swapped.model.layers[0].self_attn.attention
    assert all(p.grad is None for p in frozen.parameters())


def test_a_prompt_under_inference_mode_then_a_step_under_no_grad_equals_the_original():
    """The cache filled under ``inference_mode`` (inference tensors), then read and appended to
    under ``no_grad``: the next logits equal the original's in the same sequence of modes."""
    original = build("qwen3")
    swapped = swap_attention(copy.deepcopy(original))
    ids, mask = batch()
    nexts = []
    for model in (original, swapped):
        cache = DynamicCache(config=model.config)
        with torch.inference_mode():
            model(ids, attention_mask=mask, past_key_values=cache)
        step = torch.full((2, 1), 5)
        with torch.no_grad():
            longer = torch.cat([mask, torch.ones_like(step)], dim=1)
            nexts.append(model(step, attention_mask=longer, past_key_values=cache).logits)
    assert_equal(nexts[1], nexts[0], "the step after the prompt")


def test_compiled_whole_with_transformers_cache_it_equals_the_original_with_as_many_graphs():
    """``torch.compile(fullgraph=True)`` of the whole swapped model (a break would raise) over a
    prompt and two steps in a ``DynamicCache``, the length changing: the logits equal the eager
    original's, and the graphs are as many as the compiled original's. (Qwen3, with q/k norm and
    a sliding layer; compiling costs seconds per model.)"""
    from torch._dynamo.testing import CompileCounter

    original = build("qwen3")
    swapped = swap_attention(copy.deepcopy(original))
    ids, mask = batch()
    step = torch.full((2, 1), 5)
    outputs, graphs = [], []
    for model, compiled in ((original, False), (original, True), (swapped, True)):
        torch._dynamo.reset()
        counter = CompileCounter()
        run = torch.compile(model, fullgraph=True, backend=counter) if compiled else model
        cache, seen, logits = DynamicCache(config=model.config), mask, []
        with torch.no_grad():
            logits.append(run(ids, attention_mask=seen, past_key_values=cache).logits)
            for _ in range(2):
                seen = torch.cat([seen, torch.ones_like(step)], dim=1)
                logits.append(run(step, attention_mask=seen, past_key_values=cache).logits)
        outputs.append(logits)
        graphs.append(counter.frame_count)
    assert graphs[2] == graphs[1] > 0, graphs
    for when, (mine, expected) in enumerate(zip(outputs[2], outputs[0], strict=True)):
        assert_equal(mine, expected, f"call {when}")


# ---- transformers' cache and ours stay together ---------------------------------------------


def ours_of(model) -> list[HFAttention]:
    return [m for m in model.modules() if isinstance(m, HFAttention)]


def test_the_keys_and_values_live_in_transformers_cache(pair):
    """One cache: after generation transformers' holds the swapped layers' own keys and values,
    as many positions as the original's, in the layout its own layers write (MLA: latents)."""
    theirs = generated(pair[0], do_sample=False, num_beams=3).past_key_values
    ours = generated(pair[1], do_sample=False, num_beams=3).past_key_values
    for layer in ours_of(pair[1]):
        i = layer.layer_idx
        assert ours.get_seq_length(i) == theirs.get_seq_length(i)
        assert ours.layers[i].keys.dtype == torch.float64
        if isinstance(layer.attention, MHA):  # the very tensors the original's layers hold
            assert_equal(ours.layers[i].keys, theirs.layers[i].keys, "keys")
            assert_equal(ours.layers[i].values, theirs.layers[i].values, "values")
        else:  # MLA: one latent and one rotated key part per position
            assert ours.layers[i].keys.shape[1] == 1


def steps(model, cache, *chunks):
    """Run ``chunks`` of token ids through ``model`` with ``cache``; the last one's logits."""
    with torch.no_grad():
        for chunk in chunks:
            logits = model(torch.tensor(chunk), past_key_values=cache).logits
    return logits


@pytest.fixture(scope="module")
def llama():
    original = build("llama")
    return original, swap_attention(copy.deepcopy(original))


def test_a_crop_of_transformers_cache_is_followed(llama):
    # speculative decoding's rollback: verify 3 drafted positions, keep 1
    caches = DynamicCache(), DynamicCache()  # the original's, the swapped model's
    for model, cache in zip(llama, caches, strict=True):
        steps(model, cache, [[3, 4, 5, 6, 7]] * 2, [[8, 9, 10]] * 2)
        cache.crop(-2)
    theirs, ours = (steps(m, c, [[11]] * 2) for m, c in zip(llama, caches, strict=True))
    assert_equal(ours, theirs, "after the crop")
    assert caches[1].get_seq_length() == 7


def test_reorders_repeats_and_selections_of_transformers_cache_are_followed(llama):
    caches = DynamicCache(), DynamicCache()
    logits = []
    for model, cache in zip(llama, caches, strict=True):
        steps(model, cache, [[3, 4, 5], [6, 7, 8]])
        cache.batch_repeat_interleave(3)  # 2 rows -> 6
        steps(model, cache, [[9], [10], [11], [12], [13], [14]])
        cache.reorder_cache(torch.tensor([5, 0, 0, 3, 1, 2]))
        steps(model, cache, [[15], [16], [17], [18], [19], [20]])
        cache.batch_select_indices(torch.tensor([4, 1]))
        logits.append(steps(model, cache, [[21], [22]]))
    assert_equal(logits[1], logits[0], "after repeat, reorder, select")


def test_a_cache_filled_before_the_swap_is_continued():
    """transformers' own layers hold the same keys (rotated, after the q/k norm) and values:
    a model swapped mid-sequence continues its cache as the original would."""
    original = build("qwen3")
    cache, alone = DynamicCache(config=original.config), DynamicCache(config=original.config)
    steps(original, cache, [[3, 4, 5, 6, 7]])
    want = steps(original, alone, [[3, 4, 5, 6, 7]], [[8]], [[9]])
    got = steps(swap_attention(copy.deepcopy(original)), cache, [[8]], [[9]])
    assert_equal(got, want, "continued after the swap")


def test_a_deepseek_cache_filled_before_the_swap_is_refused():
    """DeepSeek-V3's own layers hold latents of MLA's shape, laid out otherwise (continued, the
    logits would be 0.075 off): refused, not continued."""
    original = build("deepseek_v3")
    cache = DynamicCache()
    steps(original, cache, [[3, 4, 5]])
    with pytest.raises(ValueError, match=r"holds 3 positions for layer 0 that transformers' own"):
        steps(swap_attention(original), cache, [[6]])


def test_a_cache_of_another_models_layout_is_refused_by_name(llama):
    cache = DynamicCache()
    steps(llama[1], cache, [[3, 4, 5]])  # heads of 8
    other = swap_attention(build("qwen3"))  # heads of 16
    with pytest.raises(ValueError, match=r"holds, for layer 0, keys and values of"):
        steps(other, cache, [[6]])


def test_a_static_cache_is_refused_by_name(llama):
    ids, mask = batch()
    with pytest.raises(TypeError, match=r"StaticLayer for layer 0.*DynamicCache only"):
        llama[1].generate(ids, attention_mask=mask, max_new_tokens=2, cache_implementation="static")


def test_a_cache_without_the_models_config_keeps_every_key_and_still_equals():
    """``DynamicCache()`` keeps every position even on a sliding layer, and transformers' mask
    then covers them all: the window's layer takes that mask too."""
    original = build("mistral")
    swapped = swap_attention(copy.deepcopy(original))
    chunks = [[3, 4, 5, 6, 7, 8]], [[9]], [[10]], [[11]]
    caches = DynamicCache(), DynamicCache()
    assert_equal(steps(swapped, caches[1], *chunks), steps(original, caches[0], *chunks), "logits")
    assert caches[1].layers[0].keys.size(2) == 9  # every position


def test_a_sliding_layer_of_the_models_cache_holds_the_window():
    original = build("mistral")
    swapped = swap_attention(copy.deepcopy(original))
    chunks = [[3, 4, 5, 6, 7, 8]], [[9]], [[10]], [[11]]
    caches = DynamicCache(config=original.config), DynamicCache(config=original.config)
    assert_equal(steps(swapped, caches[1], *chunks), steps(original, caches[0], *chunks), "logits")
    assert caches[1].layers[0].keys.size(2) == WINDOW - 1  # the window's, kept by transformers
    assert caches[1].get_seq_length(0) == 9  # every position seen


# ---- Back to transformers ------------------------------------------------------------------


def test_a_fine_tuned_swapped_model_saves_and_reloads_in_plain_transformers(tmp_path):
    for family in ("qwen3", "deepseek_v3"):
        model = swap_attention(build(family)).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        before = copy.deepcopy(model.state_dict())
        torch.manual_seed(1)
        for _ in range(3):
            ids = torch.randint(1, VOCAB, (4, 9))
            model(ids, labels=ids, use_cache=False).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        key = "model.layers.0.self_attn.o_proj.weight"  # transformers' name in the state dict
        assert not torch.equal(model.state_dict()[key], before[key]), "training changed it"
        ids = torch.tensor(PROMPTS[:1])
        with torch.no_grad():
            expected = model.eval()(ids).logits
        restore_attention(model).save_pretrained(tmp_path / family)
        reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / family, dtype=torch.float64)
        with torch.no_grad():
            assert_equal(reloaded.eval()(ids).logits, expected, family)


def test_restored_layers_are_the_class_config_layer_device_dtype_and_mode_replaced():
    original = build("qwen3")
    swapped = swap_attention(copy.deepcopy(original)).train()
    restore_attention(swapped)
    for theirs, mine in zip(original.model.layers, swapped.model.layers, strict=True):
        a, b = theirs.self_attn, mine.self_attn
        assert type(b) is type(a) and b.config is swapped.config
        assert (b.layer_idx, b.sliding_window) == (a.layer_idx, a.sliding_window)
        assert b.training and b.q_proj.weight.dtype == torch.float64
        assert b.q_proj.weight.device == a.q_proj.weight.device
        assert all(torch.equal(b.state_dict()[k], v) for k, v in a.state_dict().items())


def test_frozen_weights_stay_frozen_there_and_back():
    model = build("llama")
    model.model.layers[0].self_attn.q_proj.weight.requires_grad_(False)
    swap_attention(model)
    assert not model.model.layers[0].self_attn.attention.W_q.weight.requires_grad
    assert model.model.layers[0].self_attn.attention.W_k.weight.requires_grad
    restore_attention(model)
    assert not model.model.layers[0].self_attn.q_proj.weight.requires_grad
    assert model.model.layers[1].self_attn.q_proj.weight.requires_grad


def test_to_hf_copies_the_weights_exactly():
    hf = build("qwen3").model.layers[0].self_attn
    m = randomised(from_hf(hf), seed=5)
    to_hf(m, hf)
    assert torch.equal(hf.q_proj.weight, m.W_q.weight)
    assert torch.equal(hf.k_norm.weight, m.k_norm.weight)
    assert all(torch.equal(from_hf(hf).state_dict()[k], v) for k, v in m.state_dict().items())


def test_to_hf_names_each_option_that_differs():
    hf = build("qwen3").model.layers[0].self_attn
    m = MHA(32, 4, kv_heads=4, head_size=16, bias=False, qk_norm=True)
    with pytest.raises(ValueError) as error:
        to_hf(m, hf)
    said = str(error.value)
    assert said.startswith(
        "cannot copy module into Qwen3Attention: kv_heads=4, expected kv_heads=2"
    )
    assert "rope=None, expected rope=RotaryEmbedding(16" in said
    assert "window=None, expected window=4" in said
    assert "head_size" not in said and "qk_norm" not in said  # those agree


def test_to_hf_refuses_another_kind_of_module_and_another_class():
    llama = build("llama").model.layers[0].self_attn
    deepseek = build("deepseek_v3").model.layers[0].self_attn
    with pytest.raises(TypeError, match=r"LlamaAttention takes the weights of a mha\.full\.MHA"):
        to_hf(from_hf(deepseek), llama)
    with pytest.raises(
        TypeError, match=r"DeepseekV3Attention takes the weights of a mha\.mla\.MLA"
    ):
        to_hf(from_hf(llama), deepseek)
    gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2))
    with pytest.raises(TypeError, match="GPT2Attention's submodules are c_attn, c_proj"):
        to_hf(from_hf(llama), gpt2.transformer.h[0].attn)


# ---- Errors --------------------------------------------------------------------------------


def test_a_model_without_a_layer_it_converts_is_refused_with_its_attention_classes():
    gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2))
    with pytest.raises(
        ValueError, match=r"GPT2LMHeadModel has attention layers .*\(GPT2Attention\): .*c_attn"
    ):
        swap_attention(gpt2)
    with pytest.raises(ValueError, match=r"Linear has no transformers attention layer"):
        swap_attention(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("where", ["call", "config"])
def test_attention_weights_asked_of_a_swapped_model_are_refused_not_returned_empty(llama, where):
    """transformers collects ``attentions`` by hooks on its own attention classes: a swapped
    layer would give an empty tuple. The original under ``eager`` gives one tensor a layer (under
    ``sdpa`` an empty tuple too: its kernel returns no weights)."""
    original, swapped = llama
    ids, mask = batch()
    original.config._attn_implementation = "eager"
    try:
        with torch.no_grad():
            weights = original(ids, attention_mask=mask, output_attentions=True).attentions
    finally:
        original.config._attn_implementation = "sdpa"
    assert len(weights) == 2  # transformers' own layers
    ask = {"output_attentions": True} if where == "call" else {}
    swapped.config._attn_implementation = "eager"  # transformers' config takes no other then
    swapped.config.output_attentions = where == "config"
    try:
        with pytest.raises(ValueError, match=r"output_attentions=True: .*restore_attention"):
            swapped(ids, attention_mask=mask, **ask)
    finally:
        swapped.config.output_attentions = False
        swapped.config._attn_implementation = "sdpa"


def test_a_second_swap_is_refused(llama):
    with pytest.raises(ValueError, match="is swapped already"):
        swap_attention(llama[1])


def test_restore_without_a_swap_is_refused(llama):
    with pytest.raises(ValueError, match=r"has no swapped attention layer.*swap_attention"):
        restore_attention(llama[0])


@pytest.mark.parametrize("call", [swap_attention, restore_attention])
def test_something_else_than_a_module_is_refused(call):
    with pytest.raises(TypeError, match=r"model must be a torch\.nn\.Module, got dict"):
        call({})


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "qwen3", "qwen3-yarn", "gpt_oss"])
def test_transformers_rotary_tables_are_the_modules_own_so_a_swapped_layer_reads_them(
    family, dtype
):
    """A swapped layer of the Llama family rotates by transformers' position_embeddings (computed
    once for all layers) instead of computing them again: the same tables, bit for bit, as its
    own rope gives for the positions, in every dtype (transformers casts them to the model's).
    gpt-oss's tables hold each frequency once, half a head (its YaRN unrounded): the module's
    hold them twice, one copy per half."""
    if family == "qwen3-yarn":
        config = FAMILIES["qwen3"]()
        config.rope_parameters = {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 16,
        }
        model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    else:
        model = build(family, dtype)
    swapped = swap_attention(copy.deepcopy(model))
    positions = torch.tensor([[0, 1, 5, 40, 63]])
    hidden = torch.zeros(1, 5, model.config.hidden_size, dtype=dtype)
    cos, sin = model.model.rotary_emb(hidden, positions)
    for layer in ours_of(swapped):
        assert layer._rotates_as_transformers
        mine = [t.to(dtype) for t in layer.attention.rope(positions)]
        if family == "gpt_oss":
            half = cos.size(-1)
            assert all(torch.equal(t[..., :half], t[..., half:]) for t in mine)
            mine = [t[..., :half] for t in mine]
        assert torch.equal(cos, mine[0]) and torch.equal(sin, mine[1])


def test_mla_layers_rotate_by_their_own_tables():
    # DeepSeek-V3's transformers tables pair halves; its layers rotate interleaved pairs
    swapped = swap_attention(build("deepseek_v3"))
    assert not any(layer._rotates_as_transformers for layer in ours_of(swapped))
