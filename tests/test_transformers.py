"""``mha.interop.from_hf``: our MHA equals transformers' attention of the Llama family's layout
(Llama, Mistral, Mixtral, Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE, Gemma, Gemma 2, Gemma 3, Granite,
GLM-4, gpt-oss, Qwen3-Next's full-attention layers, SmolLM3's and Llama 4's layers without
rotation, OLMo 2, Phi-3, StarCoder2, OLMo 3, GLM-4.5, Cohere, Nemotron, Qwen3.5), our MLA
DeepSeek-V2's and V3's; the layers that differ are refused, naming what differs.

The contract (issue 18): ``m = from_hf(module)``; ``m(x, is_causal=True)`` equals the module's
output for positions ``0 .. q_len - 1`` under its causal (and sliding-window) mask; with a
``KVCache``, ``m(x_new, is_causal=True, cache=cache)`` continues at position ``len(cache)`` and
equals the module decoding with its own cache (``DynamicCache``, which keeps only the window on a
sliding layer); float64 at rounding level, float32 within 1e-5 (``support.TOLERANCE`` is
stricter still: 1e-12 and 2e-6).

The modules are built from configs with random weights: nothing is downloaded. transformers is
called as its models call the attention: ``position_embeddings=(cos, sin)`` from the model's own
rotary embedding, an additive 4-D mask built here from the positions (the oracle's input, written
out: a key ``j`` is visible to the query at ``i`` when ``j <= i`` and, with a window ``w``,
``i - j < w``), its ``sdpa`` path (its ``eager`` path computes the softmax in float32 even for
float64 inputs; it is compared in float32). Gemma 2's soft-cap has no ``sdpa`` path in
transformers: its layers run the ``eager`` one, in float64 with that one cast lifted
(``float64_softmax``). gpt-oss's sinks have no ``sdpa`` path either: its ``eager`` one computes its
softmax in the scores' dtype.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
from unittest import mock

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from support import assert_close, randomised, seeds

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
from transformers import (  # noqa: E402
    DynamicCache,
    Gemma2Config,
    Gemma3TextConfig,
    GemmaConfig,
    Glm4Config,
    GptOssConfig,
    GraniteConfig,
    Llama4TextConfig,
    LlamaConfig,
    MistralConfig,
    MixtralConfig,
    Olmo2Config,
    Phi3Config,
    Qwen2Config,
    Qwen2MoeConfig,
    Qwen3Config,
    Qwen3MoeConfig,
    Qwen3NextConfig,
    SmolLM3Config,
)
from transformers.models.cohere.modeling_cohere import (  # noqa: E402
    CohereAttention,
    CohereConfig,
    CohereRotaryEmbedding,
)
from transformers.models.gemma.modeling_gemma import GemmaAttention  # noqa: E402
from transformers.models.gemma2.modeling_gemma2 import (  # noqa: E402
    Gemma2Attention,
    Gemma2RotaryEmbedding,
)
from transformers.models.gemma3.modeling_gemma3 import (  # noqa: E402
    Gemma3Attention,
    Gemma3RotaryEmbedding,
)
from transformers.models.glm4.modeling_glm4 import Glm4Attention, Glm4RotaryEmbedding  # noqa: E402
from transformers.models.glm4_moe.modeling_glm4_moe import (  # noqa: E402
    Glm4MoeAttention,
    Glm4MoeConfig,
    Glm4MoeRotaryEmbedding,
)
from transformers.models.gpt_oss.modeling_gpt_oss import (  # noqa: E402
    GptOssAttention,
    GptOssRotaryEmbedding,
)
from transformers.models.granite.modeling_granite import GraniteAttention  # noqa: E402
from transformers.models.llama.modeling_llama import (  # noqa: E402
    LlamaAttention,
    LlamaRotaryEmbedding,
)
from transformers.models.llama4.modeling_llama4 import (  # noqa: E402
    Llama4TextAttention,
    Llama4TextRotaryEmbedding,
)
from transformers.models.mistral.modeling_mistral import MistralAttention  # noqa: E402
from transformers.models.mixtral.modeling_mixtral import MixtralAttention  # noqa: E402
from transformers.models.nemotron.modeling_nemotron import (  # noqa: E402
    NemotronAttention,
    NemotronConfig,
    NemotronRotaryEmbedding,
)
from transformers.models.olmo2.modeling_olmo2 import Olmo2Attention  # noqa: E402
from transformers.models.olmo3.modeling_olmo3 import (  # noqa: E402
    Olmo3Attention,
    Olmo3Config,
    Olmo3RotaryEmbedding,
)
from transformers.models.phi3.modeling_phi3 import Phi3Attention, Phi3RotaryEmbedding  # noqa: E402
from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention  # noqa: E402
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeAttention  # noqa: E402
from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention  # noqa: E402
from transformers.models.qwen3_5.modeling_qwen3_5 import (  # noqa: E402
    Qwen3_5Attention,
    Qwen3_5TextConfig,
    Qwen3_5TextRotaryEmbedding,
)
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeAttention  # noqa: E402
from transformers.models.qwen3_next.modeling_qwen3_next import (  # noqa: E402
    Qwen3NextAttention,
    Qwen3NextRotaryEmbedding,
)
from transformers.models.smollm3.modeling_smollm3 import (  # noqa: E402
    SmolLM3Attention,
    SmolLM3RotaryEmbedding,
)
from transformers.models.starcoder2.modeling_starcoder2 import (  # noqa: E402
    Starcoder2Attention,
    Starcoder2Config,
)

from mha.full import MHA, KVCache, padding_mask  # noqa: E402
from mha.interop import from_hf  # noqa: E402
from mha.mla import MLA, LatentCache  # noqa: E402
from mha.rope import RotaryEmbedding  # noqa: E402

transformers.logging.set_verbosity_error()


def assert_matches(actual: torch.Tensor, expected: torch.Tensor, msg: str | None = None) -> None:
    """Equal to transformers' output: float64 at ``support.TOLERANCE`` (1e-12; measured 1.3e-15),
    float32 at the contract's 1e-5: transformers sums in another order (grouped heads repeated,
    the norms on another layout), measured up to 2.6e-6 on outputs of size 0.03 to 3."""
    if expected.dtype == torch.float64:
        assert_close(actual, expected, msg=msg)
    else:
        torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5, msg=msg)


class Gemma3Tables:
    """Gemma 3's rotary embedding, giving the tables of layer 0's type (a local base on sliding
    layers, the global one on full layers), called as the others are: ``(x, positions)``; OLMo 3's
    makes its tables by layer type too (``Olmo3Tables``)."""

    rotary_class = Gemma3RotaryEmbedding

    def __init__(self, config):
        self.rotary, self.layer_type = self.rotary_class(config), config.layer_types[0]

    def __call__(self, x, positions):
        return self.rotary(x, positions, self.layer_type)


class Olmo3Tables(Gemma3Tables):
    rotary_class = Olmo3RotaryEmbedding


# Each family: its config, its attention, its model's rotary embedding (Llama's tables are every
# family's here but GLM-4's, whose rotary embedding honours partial_rotary_factor, and Gemma 2's
# and 3's, whose model builds them from its own config).
FAMILIES = {
    "llama": (LlamaConfig, LlamaAttention, LlamaRotaryEmbedding),
    "mistral": (MistralConfig, MistralAttention, LlamaRotaryEmbedding),
    "mixtral": (MixtralConfig, MixtralAttention, LlamaRotaryEmbedding),
    "qwen2": (Qwen2Config, Qwen2Attention, LlamaRotaryEmbedding),
    "qwen2_moe": (Qwen2MoeConfig, Qwen2MoeAttention, LlamaRotaryEmbedding),
    "qwen3": (Qwen3Config, Qwen3Attention, LlamaRotaryEmbedding),
    "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeAttention, LlamaRotaryEmbedding),
    "gemma": (GemmaConfig, GemmaAttention, LlamaRotaryEmbedding),
    "gemma2": (Gemma2Config, Gemma2Attention, Gemma2RotaryEmbedding),
    "gemma3": (Gemma3TextConfig, Gemma3Attention, Gemma3Tables),
    "granite": (GraniteConfig, GraniteAttention, LlamaRotaryEmbedding),
    "glm4": (Glm4Config, Glm4Attention, Glm4RotaryEmbedding),
    "gpt_oss": (GptOssConfig, GptOssAttention, GptOssRotaryEmbedding),
    "olmo2": (Olmo2Config, Olmo2Attention, LlamaRotaryEmbedding),  # q/k norms of the projections
    "qwen3_next": (Qwen3NextConfig, Qwen3NextAttention, Qwen3NextRotaryEmbedding),
    "smollm3": (SmolLM3Config, SmolLM3Attention, SmolLM3RotaryEmbedding),
    "llama4": (Llama4TextConfig, Llama4TextAttention, Llama4TextRotaryEmbedding),
    # Llama 4's other layers: rotating (interleaved pairs), chunked, a q/k norm without a weight
    "llama4_chunked": (Llama4TextConfig, Llama4TextAttention, Llama4TextRotaryEmbedding),
    "phi3": (Phi3Config, Phi3Attention, Phi3RotaryEmbedding),
    # the families whose no-op and copied attributes from_hf accepts by value (issue 44)
    "starcoder2": (Starcoder2Config, Starcoder2Attention, LlamaRotaryEmbedding),
    "olmo3": (Olmo3Config, Olmo3Attention, Olmo3Tables),
    "glm4_moe": (Glm4MoeConfig, Glm4MoeAttention, Glm4MoeRotaryEmbedding),
    "cohere": (CohereConfig, CohereAttention, CohereRotaryEmbedding),
    "nemotron": (NemotronConfig, NemotronAttention, NemotronRotaryEmbedding),
    "qwen3_5": (Qwen3_5TextConfig, Qwen3_5Attention, Qwen3_5TextRotaryEmbedding),
}
# Where each family's window is set (the others have none): the config's sliding_window on every
# layer, or Qwen's sliding layers (use_sliding_window; Qwen2-MoE counts them from the other end).
WINDOW_IN_CONFIG = ("mistral", "mixtral", "qwen3_moe", "starcoder2")
SLIDING_LAYERS = {"qwen2": dict(max_window_layers=0), "qwen3": dict(max_window_layers=0)}
SLIDING_LAYERS["qwen2_moe"] = dict(max_window_layers=64)
# Gemma 2 and 3, and gpt-oss, alternate sliding and full layers (their config's layer_types):
# layer 0 is built sliding when the case has a window, full otherwise
GEMMAS = ("gemma2", "gemma3")
LAYER_TYPES = (*GEMMAS, "gpt_oss", "olmo3")
# The families whose config's attention_bias puts a bias on all four projections (and those below)
BIASED = ("llama", "qwen3", "qwen3_moe", "gemma", "granite", "smollm3", "llama4", "llama4_chunked")
BIASED += ("cohere", "nemotron", "qwen3_5")
# SmolLM3's layer here is one of its NoPE layers (no_rope_layers 0: no rotation), which slide
# when its config's use_sliding_window is on
# Llama 4's chunked layer takes the drawn window as its attention_chunk_size (CHUNK without one)
WINDOWED = (*WINDOW_IN_CONFIG, *SLIDING_LAYERS, *LAYER_TYPES, "smollm3", "llama4_chunked")
CHUNK = 4
# Gemma's query_pre_attn_scalar (its scale is its inverse square root, not the head size's);
# Gemma 2's soft-cap, small enough that the scores drawn reach it (the published one is 50.0);
# Gemma 3's base of the local (sliding) layers' rotation, the drawn rope being its full layers'
GEMMA_QUERY_SCALAR, GEMMA2_SOFTCAP, GEMMA3_LOCAL_BASE = 12, 0.8, 100.0
# Granite's attention_multiplier (its scale), and GLM-4's share of each head that rotates (and
# Qwen3-Next's here: its default, 0.25, would rotate a single dimension of a head of 4)
GRANITE_MULTIPLIER, GLM4_PARTIAL = 0.3, 0.5
# Llama 4's temperature tuning, (attn_scale, floor_scale): its floor_scale of 8192 would leave
# the factor at 1 on the positions here, 2 changes it every other position
LLAMA4_TEMPERATURE = (0.5, 2)  # its config takes floor_scale as an int
# The families that rotate part of each head (GLM-4 in interleaved pairs, Qwen3-Next in halves)
PARTIAL = ("glm4", "qwen3_next", "glm4_moe", "nemotron", "qwen3_5")
# The rope_parameters drawn: each scaling real configs use, at sizes where it changes something
# (a trained context of 16 positions, shorter than the lengths drawn beyond it).
ROPES = {
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "llama3": {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    },
    "yarn": {
        "rope_type": "yarn",
        "rope_theta": 1000000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 16,
    },
    # Phi-3's: one factor per pair (build draws them for the pairs rotated), the short ones up to
    # a trained context of 8, the long ones for a call past it (the lengths drawn cross it)
    "longrope": {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "original_max_position_embeddings": 8,
    },
}
# Phi-3's config checks its factors against hidden_size // num_attention_heads: its heads are that
# wide; it takes no rope type but default and longrope (the others are drawn as longrope for it)
PHI3_ROPES = ("default", "longrope")


def longrope_factors(pairs: int) -> dict[str, list[float]]:
    """A short and a long factor for each of ``pairs`` pairs, growing from the fast pairs to the
    slow ones as Phi-3's do (1.0 to about 1.6 short, 1.0 to 12 long in its config.json)."""
    return {
        "short_factor": [1.0 + 0.2 * i for i in range(pairs)],
        "long_factor": [1.0 + 3.0 * i for i in range(pairs)],
    }


# DeepSeek-V3's YaRN, the rope_scaling of its config.json (deepseek-ai/DeepSeek-V3: a context
# stretched 40 times, mscale = mscale_all_dim = 1.0; V2's are 0.707 and 0.707), with a trained
# context of 16 positions instead of its 4096, so the stretch changes the lengths drawn here.
# cos and sin are not scaled (the ratio of the two mscales is 1); the softmax scale is.
DEEPSEEK_YARN = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 40.0,
    "original_max_position_embeddings": 16,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "beta_fast": 32,
    "beta_slow": 1,
}


def build(
    family: str,
    *,
    heads: int,
    kv_heads: int,
    head_dim: int | None,
    rope: str,
    window,
    dtype,
    seed: int,
    bias: bool = False,
    implementation: str = "sdpa",
    softcap: float = GEMMA2_SOFTCAP,
    query_scalar: float = GEMMA_QUERY_SCALAR,
    partial: float = GLM4_PARTIAL,
    temperature: tuple[float, float] = LLAMA4_TEMPERATURE,
    trained: int | None = None,
):
    """A transformers attention module of ``family`` with random weights (every parameter drawn,
    the norms' and biases' too, so none is left at a value that hides a mistake), its config and
    its model's rotary embedding. ``softcap`` and ``query_scalar`` are Gemma 2's and 3's,
    ``partial`` GLM-4's and Qwen3-Next's share of each head that rotates, ``temperature``
    Llama 4's ``(attn_scale, floor_scale)``, ``trained`` longrope's
    ``original_max_position_embeddings`` if not ``ROPES``'."""
    config_class, attention_class, rotary_class = FAMILIES[family]
    if family == "phi3":
        head_dim = None  # Phi-3's heads are hidden_size // num_attention_heads wide
        rope = rope if rope in PHI3_ROPES else "longrope"
    options = dict(
        hidden_size=24,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=64,
        rope_parameters=dict(ROPES[rope or "default"]),  # None: a layer without rotation
        attention_dropout=0.0,
    )
    if head_dim is not None:
        options["head_dim"] = head_dim
    elif (rope == "longrope" and family != "phi3") or family == "mixtral":
        # longrope's factors are one per pair of the heads drawn: not of a config's own default
        # head_dim (Gemma's 256); Mixtral's config keeps head_dim None, which transformers' yarn
        # multiplies (its Mixtral layer takes hidden_size // num_attention_heads: the same)
        options["head_dim"] = 24 // heads
    if family in (*BIASED, "olmo2", *PARTIAL, *LAYER_TYPES):
        options["attention_bias"] = bias
    if family == "qwen2_moe":
        options["qkv_bias"] = bias
    if family in WINDOW_IN_CONFIG:
        options["sliding_window"] = window
    if family in SLIDING_LAYERS or family == "qwen3_moe":
        options["use_sliding_window"] = window is not None
    if family in SLIDING_LAYERS and window is not None:
        options.update(sliding_window=window, **SLIDING_LAYERS[family])
    if family == "granite":
        options["attention_multiplier"] = GRANITE_MULTIPLIER
    if family in PARTIAL:
        options["rope_parameters"]["partial_rotary_factor"] = partial
    if family == "starcoder2":  # its biases, on all four projections
        options["use_bias"] = bias
    if family in ("qwen3_next", "qwen3_5"):  # one full-attention layer (default head_dim: 256)
        options.update(num_hidden_layers=1, layer_types=["full_attention"])
        options.setdefault("head_dim", 24 // heads)
    if family == "smollm3":  # one layer, without rotation
        options.update(num_hidden_layers=1, no_rope_layers=[0], sliding_window=window)
        options["use_sliding_window"] = window is not None
    if family == "llama4":  # one NoPE layer (full attention, no q/k norm), tuning its temperature
        options.update(num_hidden_layers=1, no_rope_layers=[0], attn_temperature_tuning=True)
        options.update(zip(("attn_scale", "floor_scale"), temperature, strict=True))
    if family == "llama4_chunked":  # one rope layer: chunked, its q/k norm without a weight
        options.update(num_hidden_layers=1, no_rope_layers=[1], use_qk_norm=True)
        options.update(layer_types=["chunked_attention"], attention_chunk_size=window or CHUNK)
    if family in LAYER_TYPES:
        kind = "full_attention" if window is None else "sliding_attention"
        options.update(num_hidden_layers=1, layer_types=[kind], sliding_window=window or 4096)
    if family in GEMMAS:
        options["query_pre_attn_scalar"] = query_scalar
    if rope == "longrope":
        partial = options["rope_parameters"].get("partial_rotary_factor", 1.0)
        pairs = int((head_dim or 24 // heads) * partial) // 2
        options["rope_parameters"].update(longrope_factors(pairs))
        if trained is not None:
            options["rope_parameters"]["original_max_position_embeddings"] = trained
    if family == "phi3":  # its config puts its own original_max_position_embeddings in the rope's
        said = options["rope_parameters"].get("original_max_position_embeddings", 4096)
        options["original_max_position_embeddings"] = said
    if family == "gpt_oss":
        implementation = "eager"  # transformers' sdpa path has no sinks
        if rope == "yarn":  # gpt-oss's YaRN keeps its correction range unrounded
            options["rope_parameters"]["truncate"] = False
    if family == "gemma2":
        options["attn_logit_softcapping"] = softcap
        implementation = "eager"  # transformers' sdpa path refuses a soft-cap
    if family == "gemma3":
        local = {"rope_type": "default", "rope_theta": GEMMA3_LOCAL_BASE}
        options["rope_parameters"] = {"full_attention": options["rope_parameters"]}
        options["rope_parameters"]["sliding_attention"] = local
    config = config_class(**options)
    config._attn_implementation = implementation
    module = randomised(attention_class(config, layer_idx=0).to(dtype).eval(), seed)
    return module, config, rotary_class(config)


def window_of(module) -> int | None:
    if isinstance(
        module, MistralAttention | MixtralAttention | Starcoder2Attention
    ):  # the config's
        return module.config.sliding_window
    return getattr(module, "sliding_window", None)


def chunk_of(module) -> int | None:
    """Llama 4's chunk size on its chunked layers (``None`` on the others)."""
    types = getattr(module.config, "layer_types", None) or []
    chunked = types[module.layer_idx : module.layer_idx + 1] == ["chunked_attention"]
    return module.config.attention_chunk_size if chunked else None


def additive_mask(
    positions: torch.Tensor, keys: torch.Tensor, window, dtype, visible=None, chunk=None
):
    """transformers' additive mask ``[batch_size, 1, q_len, k_len]``: 0 where the query at
    ``positions[b, i]`` may see the key at ``keys[b, j]`` (in its window, or its chunk), the
    dtype's minimum elsewhere."""
    i, j = positions[:, None, :, None], keys[:, None, None, :]
    allowed = j <= i
    if window is not None:
        allowed &= i - j < window
    if chunk is not None:
        allowed &= i // chunk == j // chunk
    if visible is not None:  # [batch_size, k_len]: False for padding
        allowed &= visible[:, None, None, :]
    return torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)


def hf_call(module, rotary, x, positions, mask, cache=None):
    tables = rotary(x, positions)  # cos and sin (DeepSeek-V2: complex numbers)
    with float64_softmax(module, x.dtype):
        out, _ = module(x, position_embeddings=tables, attention_mask=mask, past_key_values=cache)
    return out


@contextlib.contextmanager
def float64_softmax(module, dtype):
    """A soft-capped layer (Gemma 2's) runs transformers' eager path, which computes the softmax
    in float32 whatever the scores' dtype: in float64, that one cast is lifted for the call."""
    if dtype != torch.float64 or getattr(module, "attn_logit_softcapping", None) is None:
        yield
        return
    softmax = torch.nn.functional.softmax

    def kept(t, dim=None, dtype=None, **kw):
        return (
            softmax(t, dim=dim, **kw) if t.dtype == torch.float64 else softmax(t, dim, dtype=dtype)
        )

    with mock.patch.object(torch.nn.functional, "softmax", kept):
        yield


configurations = st.fixed_dictionaries(
    {
        "family": st.sampled_from(sorted(FAMILIES)),
        "heads_kv": st.sampled_from([(4, 4), (4, 2), (4, 1), (6, 3), (2, 2)]),
        "head_dim": st.sampled_from([None, 4, 8, 10]),
        "rope": st.sampled_from(sorted(ROPES)),
        "window": st.sampled_from([None, 3, 6]),
        "batch_size": st.integers(1, 3),
        "prefill": st.integers(1, 9),
        "steps": st.integers(1, 6),
        "dtype": st.sampled_from([torch.float32, torch.float64]),
        "bias": st.booleans(),
        "seed": seeds,
    }
)


def build_drawn(c: dict):
    heads, kv_heads = c["heads_kv"]
    head_dim = c["head_dim"]
    if head_dim is None and 24 % heads:
        head_dim = 8
    if c["family"] in PARTIAL and int(head_dim or 24 // heads) % 4:
        head_dim = 8  # GLM-4 and Qwen3-Next rotate half of each head, in pairs: a multiple of 4
    window = c["window"] if c["family"] in WINDOWED else None
    return build(
        c["family"],
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        rope=c["rope"],
        window=window,
        dtype=c["dtype"],
        seed=c["seed"],
        bias=c["bias"],
    )


@given(c=configurations)
def test_prefill_then_decoding_equals_transformers_with_its_own_cache(c):
    assert_prefill_then_decoding_equal(c)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_prefill_then_decoding_equals_transformers_in_float64(family):
    # One case of each family for certain (the draws above spread over them): grouped heads, a
    # head size of its own, yarn, biases, the family's window past the prefill
    c = dict(family=family, heads_kv=(4, 2), head_dim=8, rope="yarn", window=3, batch_size=2)
    assert_prefill_then_decoding_equal(
        {**c, "prefill": 5, "steps": 3, "dtype": torch.float64, "bias": True, "seed": 2}
    )


@pytest.mark.parametrize(
    ("rope", "prefill", "steps"),
    # within the trained context of 8; a prefill within it, decoded across it (the keys cached
    # before stay turned by the short factors, as transformers' are); a prefill past it
    [("default", 5, 3), ("longrope", 5, 3), ("longrope", 6, 5), ("longrope", 9, 3)],
)
def test_phi3_prefill_then_decoding_across_its_trained_context_equals_transformers(
    rope, prefill, steps
):
    c = dict(family="phi3", heads_kv=(4, 2), head_dim=None, rope=rope, window=None)
    c.update(batch_size=2, prefill=prefill, steps=steps, dtype=torch.float64, bias=False, seed=3)
    assert_prefill_then_decoding_equal(c)


@pytest.mark.parametrize("rope", ["default", "longrope"])
def test_phi4_minis_partial_rotation_is_read_and_equals_transformers(rope):
    # Phi-4-mini's layer is Phi-3's with 3/4 of each head rotating (partial_rotary_factor 0.75):
    # 4 heads of 8 dims (hidden 32), 6 of them rotating, 2 passing; decoded across the context
    params = {"rope_type": rope, "rope_theta": 10000.0, "partial_rotary_factor": 0.75}
    if rope == "longrope":
        params.update(longrope_factors(3))
    config = Phi3Config(
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        original_max_position_embeddings=8,
        rope_parameters=params,
    )
    config._attn_implementation = "sdpa"
    module = randomised(Phi3Attention(config, layer_idx=0).double().eval(), 5)
    m = from_hf(module)
    assert (m.rope.rotary_dims, m.head_size, m.rope.interleaved) == (6, 8, False)
    rotary = Phi3RotaryEmbedding(config)
    theirs, ours = DynamicCache(config=config), KVCache()
    x = torch.randn(1, 6, 32, dtype=torch.float64)
    positions = torch.arange(6)[None]
    mask = additive_mask(positions, positions, None, torch.float64)
    expected = hf_call(module, rotary, x, positions, mask, theirs)
    with torch.no_grad():
        assert_matches(m(x, is_causal=True, cache=ours), expected, msg="prefill")
        for step in range(6, 11):
            x = torch.randn(1, 1, 32, dtype=torch.float64)
            position = torch.tensor([[step]])
            mask = additive_mask(position, torch.arange(step + 1)[None], None, torch.float64)
            expected = hf_call(module, rotary, x, position, mask, theirs)
            assert_matches(m(x, is_causal=True, cache=ours), expected, msg=f"position {step}")


def assert_prefill_then_decoding_equal(c: dict) -> None:
    """The case ``c`` (a draw of ``configurations``): prefill, then decoding step by step, each
    equal to transformers' layer with its own cache."""
    module, config, rotary = build_drawn(c)
    m = from_hf(module)
    window, chunk = window_of(module), chunk_of(module)
    dtype, b = c["dtype"], c["batch_size"]
    matches = (
        assert_rotated_in_float32_matches if c["family"] in ROTATES_IN_FLOAT32 else assert_matches
    )
    theirs, ours = DynamicCache(config=config), KVCache()
    x = torch.randn(b, c["prefill"], 24, dtype=dtype)
    positions = torch.arange(c["prefill"]).expand(b, -1)
    mask = additive_mask(positions, positions, window, dtype, chunk=chunk)
    expected = hf_call(module, rotary, x, positions, mask, theirs)
    with torch.no_grad():
        # Without a cache, and with one: the same output
        matches(m(x, is_causal=True), expected, msg="prefill without a cache")
        matches(m(x, is_causal=True, cache=ours), expected, msg="prefill into the cache")
    for step in range(c["prefill"], c["prefill"] + c["steps"]):
        x = torch.randn(b, 1, 24, dtype=dtype)
        position = torch.full((b, 1), step)
        held = theirs.layers[0].keys.size(2)
        keys = torch.arange(step + 1 - held - 1, step + 1).expand(b, -1)  # the positions it holds
        mask = additive_mask(position, keys, window, dtype, chunk=chunk)
        expected = hf_call(module, rotary, x, position, mask, theirs)
        with torch.no_grad():
            got = m(x, is_causal=True, cache=ours)
        matches(got, expected, msg=f"decoding position {step}")
        assert len(ours) == step + 1
        # The cache holds what transformers' holds: the window's latest, or everything; on a
        # chunked layer only the chunk in progress (transformers' keeps the chunk - 1 latest)
        kept = theirs.layers[0].keys.size(2) if chunk is None else (step + 1) % chunk
        assert ours.keys.size(2) == kept


# The families whose layer rotates in float32 whatever its input's dtype (Llama 4's
# apply_rotary_emb, as DeepSeek-V2's: .float(), complex numbers), so that in float64 their
# output carries float32's rounding
ROTATES_IN_FLOAT32 = ("llama4_chunked", "cohere")  # Cohere's apply_rotary_pos_emb: .float()


def assert_rotated_in_float32_matches(actual, expected, msg=None):
    """``assert_matches``, but in float64 at 1e-6, float32's rounding (measured up to 2e-7)."""
    if expected.dtype == torch.float64:
        torch.testing.assert_close(actual, expected, atol=1e-6, rtol=1e-6, msg=msg)
    else:
        assert_matches(actual, expected, msg=msg)


def test_float32_equals_transformers_eager_path_within_the_contract():
    # transformers' eager path (softmax in float32) against ours, in float32: the contract's 1e-5
    for family in sorted(FAMILIES):
        module, _, rotary = build(
            family,
            heads=4,
            kv_heads=2,
            head_dim=8,
            rope="yarn",
            window=4 if family in WINDOWED else None,
            dtype=torch.float32,
            seed=1,
            implementation="eager",
        )
        m = from_hf(module)
        x = torch.randn(2, 11, 24)
        positions = torch.arange(11).expand(2, -1)
        mask = additive_mask(
            positions, positions, window_of(module), torch.float32, chunk=chunk_of(module)
        )
        expected = hf_call(module, rotary, x, positions, mask)
        with torch.no_grad():
            assert_matches(m(x, is_causal=True), expected)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_weights_are_copied_exactly_and_each_family_switches_on_its_options(family):
    module, _, _ = build(
        family,
        heads=4,
        kv_heads=2,
        head_dim=8,
        rope="llama3",
        window=5,
        dtype=torch.float32,
        seed=0,
        bias=True,
    )
    m = from_hf(module)
    names = {"W_q": "q_proj", "W_k": "k_proj", "W_v": "v_proj", "W_o": "o_proj"}
    theirs = module.state_dict()
    d = 24 // 4 if family == "phi3" else 8  # Phi-3's heads: hidden_size // num_attention_heads
    if family == "phi3":  # its fused qkv_proj: the query's 4 heads' rows, the key's 2, the value's
        rows = theirs.pop("qkv_proj.weight").split([4 * d, 2 * d, 2 * d])
        split = zip(("q_proj", "k_proj", "v_proj"), rows, strict=True)
        theirs.update({f"{n}.weight": w for n, w in split})
    for ours, hf in names.items():
        assert torch.equal(getattr(m, ours).weight, theirs[f"{hf}.weight"])
    # What each family switches on (the table of the chapter "Today's layer"), biases asked for
    biased = {n for n in names if getattr(m, n).bias is not None}
    qkv = {"W_q", "W_k", "W_v"}
    assert biased == {"mistral": set(), "mixtral": set(), "phi3": set()}.get(
        family, qkv if family in ("qwen2", "qwen2_moe", "glm4", "glm4_moe") else set(names)
    )
    assert (m.q_norm is not None) == (
        family
        in (
            "qwen3",
            "qwen3_moe",
            "gemma3",
            "qwen3_next",
            "olmo2",
            "llama4_chunked",
            "olmo3",
            "qwen3_5",
        )
    )
    # Gemma 3's and Qwen3-Next's (1 + w), OLMo 2's of the whole projection, Llama 4's without a
    # weight (after the rotation)
    flavours = {"gemma3": "gemma", "qwen3_next": "gemma", "olmo2": "projection"}
    flavours.update(qwen3_5="gemma", olmo3="projection")
    flavours["llama4_chunked"] = "weightless"
    assert m.qk_norm == flavours.get(family, m.q_norm is not None)
    assert m.window == (5 if family in WINDOWED and family != "llama4_chunked" else None)
    assert m.chunk == (5 if family == "llama4_chunked" else None)  # its attention_chunk_size
    assert m.head_size == d and m.hidden_size == 24 and m.W_o.in_features == 4 * d
    scales = {"granite": GRANITE_MULTIPLIER} | dict.fromkeys(GEMMAS, GEMMA_QUERY_SCALAR**-0.5)
    assert m.scale == scales.get(family, d**-0.5)
    assert m.softcap == (GEMMA2_SOFTCAP if family == "gemma2" else None)
    assert m.sinks == (family == "gpt_oss")  # one learned logit per head, copied exactly
    assert m.sink_logits is None or torch.equal(m.sink_logits, theirs["sinks"])
    # Qwen3-Next's gate: q_proj's rows as they are, each head's query then its gate
    assert m.gate == (family in ("qwen3_next", "qwen3_5"))
    assert m.temperature == (LLAMA4_TEMPERATURE if family == "llama4" else None)  # NoPE layers'
    assert m.W_q.out_features == (2 if m.gate else 1) * 4 * d
    if family == "gemma3":  # layer 0 slides: its rotation is the local one
        assert (m.rope.base, m.rope.scaling) == (GEMMA3_LOCAL_BASE, None)
    elif family == "olmo3":  # layer 0 slides: OLMo 3 scales the rotation of its full layers only
        assert m.rope.scaling is None
    elif family in ("smollm3", "llama4"):  # NoPE layers: no rotation, whatever rope_parameters say
        assert m.rope is None
        return
    else:  # Phi-3 takes longrope for llama3
        assert m.rope.scaling["rope_type"] == ("longrope" if family == "phi3" else "llama3")
    # GLM-4 rotates the first half of each head, in interleaved pairs; Qwen3-Next in halves;
    # Llama 4 the whole head in interleaved pairs (its complex numbers)
    # GLM-4.5, Nemotron and Qwen3.5 half or a quarter in pairs of halves, Cohere whole heads
    # interleaved
    rotation = {"glm4": (4, True), "qwen3_next": (4, False), "llama4_chunked": (d, True)}
    rotation.update(glm4_moe=(4, False), nemotron=(4, False), qwen3_5=(4, False), cohere=(d, True))
    rotation = rotation.get(family, (d, False))
    assert (m.rope.rotary_dims, m.rope.interleaved) == rotation


# Every rope_parameters drawn above, and DeepSeek-V3's YaRN with its mscale
ALL_ROPES = {**ROPES, "deepseek-yarn": DEEPSEEK_YARN}


@pytest.mark.parametrize(
    ("rope", "partial"),
    # transformers' default rope type ignores partial_rotary_factor in Llama's code
    [(rope, 1.0) for rope in sorted(ALL_ROPES)]
    + [("llama3", 0.5), ("yarn", 0.5), ("longrope", 0.75)],
)
def test_rotary_frequencies_equal_transformers_bit_for_bit(rope, partial):
    factors = longrope_factors(int(32 * partial) // 2) if rope == "longrope" else {}
    params = {**ALL_ROPES[rope], **factors, "partial_rotary_factor": partial}
    config = LlamaConfig(
        hidden_size=64,
        num_attention_heads=2,
        head_dim=32,
        max_position_embeddings=64,
        rope_parameters=params,
    )
    theirs = LlamaRotaryEmbedding(config)
    scaling = {k: v for k, v in {**ALL_ROPES[rope], **factors}.items() if k != "rope_theta"}
    if rope == "longrope":  # transformers' factor: max_position_embeddings / the trained context
        scaling["factor"] = 64 / ALL_ROPES[rope]["original_max_position_embeddings"]
    ours = RotaryEmbedding(
        int(32 * partial),
        base=ALL_ROPES[rope]["rope_theta"],
        scaling=None if rope == "default" else scaling,
    )
    assert torch.equal(ours.inv_freq, theirs.inv_freq)
    assert ours.attention_factor == theirs.attention_scaling
    # within the trained context, then past it (longrope's long factors), then within again
    for length in (5, 40, 8):
        positions = torch.arange(length)[None]
        cos, sin = theirs(torch.zeros(1, dtype=torch.float64), positions)
        assert torch.equal(ours(positions)[0].double(), cos), length
        assert torch.equal(ours(positions)[1].double(), sin), length


def test_left_padded_batch_with_explicit_positions_equals_each_row_alone():
    # A batch of prompts of lengths 5 and 2, padded on the left: each row's real positions
    # start at 0. Ours takes positions [batch_size, q_len] and a padding mask; transformers
    # takes position_ids and its 4-D mask. The real rows agree, prefill and two steps on.
    module, config, rotary = build(
        "qwen3",
        heads=4,
        kv_heads=2,
        head_dim=8,
        rope="default",
        window=None,
        dtype=torch.float64,
        seed=3,
    )
    m = from_hf(module)
    lengths = torch.tensor([5, 2])
    k_len = 5
    visible = padding_mask(lengths, k_len, left=True)[:, 0, 0]  # [batch_size, k_len]
    positions = (torch.arange(k_len) - (k_len - lengths)[:, None]).clamp(min=0)
    x = torch.randn(2, k_len, 24, dtype=torch.float64)
    theirs, ours = DynamicCache(config=config), KVCache()
    slots = torch.arange(k_len).expand(2, -1)  # causality by slot in the padded batch
    mask = additive_mask(slots, slots, None, torch.float64, visible)
    expected = hf_call(module, rotary, x, positions, mask, theirs)
    got = m(x, is_causal=True, cache=ours, positions=positions, attn_mask=visible[:, None, None, :])
    real = visible[:, :, None].expand_as(got)
    assert_matches(got[real], expected[real])
    # The short row alone, unpadded: the same numbers at its real positions
    alone = m(x[1:, 3:], is_causal=True)
    assert_matches(got[1, 3:], alone[0])
    for step in range(2):
        x = torch.randn(2, 1, 24, dtype=torch.float64)
        position = (lengths + step)[:, None]
        visible = torch.cat([visible, torch.ones(2, 1, dtype=torch.bool)], dim=1)
        slots = torch.arange(visible.size(1)).expand(2, -1)
        mask = additive_mask(slots[:, -1:], slots, None, torch.float64, visible)
        expected = hf_call(module, rotary, x, position, mask, theirs)
        got = m(
            x, is_causal=True, cache=ours, positions=position, attn_mask=visible[:, None, None, :]
        )
        assert_matches(got, expected, msg=f"step {step}")


def test_bf16_autocast_agrees_with_transformers_under_autocast():
    module, _, rotary = build(
        "qwen3", heads=4, kv_heads=2, head_dim=8, rope="yarn", window=4, dtype=torch.float32, seed=4
    )
    m = from_hf(module)
    x = torch.randn(2, 9, 24)
    positions = torch.arange(9).expand(2, -1)
    mask = additive_mask(positions, positions, 4, torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        expected = hf_call(module, rotary, x, positions, mask)
        got = m(x, is_causal=True)
    assert got.dtype == expected.dtype == torch.bfloat16
    # Both round to bfloat16 at different points; each is within bfloat16 of float32
    exact = hf_call(module, rotary, x, positions, mask)
    assert_close(got.float(), exact, dtype=torch.bfloat16)
    assert_close(expected.float(), exact, dtype=torch.bfloat16)


def test_a_compiled_decode_step_with_fullgraph_equals_transformers():
    module, config, rotary = build(
        "mistral",
        heads=4,
        kv_heads=2,
        head_dim=None,
        rope="llama3",
        window=4,
        dtype=torch.float32,
        seed=5,
    )
    m = from_hf(module)
    theirs, ours = DynamicCache(config=config), KVCache(max_len=16)

    def step(x, cache):
        return m(x, is_causal=True, cache=cache)

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager", dynamic=True)
    x = torch.randn(1, 3, 24)
    positions = torch.arange(3)[None]
    with torch.no_grad():
        hf_call(
            module, rotary, x, positions, additive_mask(positions, positions, 4, x.dtype), theirs
        )
        m(x, is_causal=True, cache=ours)
        for position in range(3, 9):
            x = torch.randn(1, 1, 24)
            held = theirs.layers[0].keys.size(2)
            keys = torch.arange(position - held, position + 1)[None]
            mask = additive_mask(torch.tensor([[position]]), keys, 4, x.dtype)
            expected = hf_call(module, rotary, x, torch.tensor([[position]]), mask, theirs)
            assert_matches(compiled(x, ours), expected, msg=f"position {position}")


def test_another_layout_is_refused_with_its_submodules():
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    with pytest.raises(TypeError, match=r"GPT2Attention's submodules are c_attn, c_proj, "):
        from_hf(GPT2Attention(GPT2Config(n_embd=24, n_head=4)))
    with pytest.raises(TypeError, match=r"\(with config and layer_idx\), got MHA$"):
        from_hf(MHA(24, 4))


# ---- Layers that differ are refused, naming what differs ----------------------------------------


def layer(kind: str, prefix: str, layer_idx: int = 0, **more):
    """transformers' ``<prefix>Attention`` (in ``models/<kind>``) of a small ``<prefix>Config``:
    hidden 24, 4 query heads and 2 key/value heads of 8."""
    code = importlib.import_module(f"transformers.models.{kind}.modeling_{kind}")
    config = getattr(transformers, f"{prefix}Config")(
        hidden_size=24, num_attention_heads=4, num_key_value_heads=2, head_dim=8, **more
    )
    config._attn_implementation = "sdpa"
    return getattr(code, f"{prefix}Attention")(config, layer_idx)


def qwen3_with_norms(q_norm, k_norm):
    """A Qwen3 layer with these q and k norms in place of its own."""
    module = layer("qwen3", "Qwen3")
    module.q_norm, module.k_norm = q_norm, k_norm
    return module


class L2(torch.nn.Module):
    """A norm without a weight that divides by the length, not the root mean square."""

    eps = 1e-6

    def forward(self, x):
        return torch.nn.functional.normalize(x, dim=-1)


def l2_normed(module):
    """Llama 4's chunked rope layer with a true L2 norm in place of its ``qk_norm``."""
    module.qk_norm = L2()
    return module


def said_not_to_rotate(module):
    """A layer that rotates, yet carries SmolLM3's ``use_rope = 0`` (which its code never reads)."""
    module.use_rope = 0
    return module


def gemmas_norm_on_q_only():
    """Gemma 3's ``(1 + weight)`` norm on the queries, Qwen3's on the keys."""
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    module = layer("qwen3", "Qwen3")
    return qwen3_with_norms(randomised(Gemma3RMSNorm(8), 1), module.k_norm)


# Each: the layer, the error, what it says. GPT-NeoX's projection is fused under another name
# (query_key_value, its heads' q, k and v interleaved, not Phi-3's qkv_proj); a norm of neither
# formula (a LayerNorm) or two formulas at once is refused; OLMo's clip_qkv is read from its
# config; Llama 4's q/k norm has no weight and its layers with rotation are chunked (each refused,
# named; its NoPE layers, tuning their temperature, convert); Cohere 2's full layers do not
# rotate, which no attribute says, and a layer whose use_rope says it does not rotate (SmolLM3's
# NoPE layers) does: the run beside the module built shows each.
REFUSED = {
    "gpt-neox": (
        lambda: layer("gpt_neox", "GPTNeoX"),
        r"GPTNeoXAttention's submodules are query_key_value, dense$",
    ),
    "olmo-clip": (
        lambda: layer("olmo", "Olmo", clip_qkv=8.0),
        r"^OlmoAttention's config sets clip_qkv=8\.0 \(it clamps q, k and v",
    ),
    "gemma-bidirectional": (
        lambda: layer("gemma", "Gemma", use_bidirectional_attention=True),
        r"is_causal=False \(its config's use_bidirectional_attention=True\): it attends both",
    ),
    "llama4-other-norm": (
        lambda: l2_normed(layer("llama4", "Llama4Text")),
        r"^Llama4TextAttention\.qk_norm \(L2\) computes otherwise than x / sqrt\(mean\(x²\) \+ "
        r"eps\) \(mha\.norm\.RMSNorm without a weight\): relative difference ",
    ),
    "nope-that-rotates": (
        lambda: said_not_to_rotate(layer("llama", "Llama")),
        r"^LlamaAttention computes otherwise than the MHA from_hf reads from its config and "
        r"attributes: run on 6 positions, the two outputs differ by \S+ without rotation "
        r"\(use_rope=0\)",
    ),
    "layer-norm": (
        lambda: qwen3_with_norms(
            *(randomised(torch.nn.LayerNorm(8, bias=False), s) for s in (1, 2))
        ),
        r"q_norm \(LayerNorm\) computes otherwise than weight \* x / sqrt\(mean\(x²\) \+ eps\) "
        r"\(mha\.norm\.RMSNorm\) and its flavours: relative differences \{True: \S+, 'gemma': ",
    ),
    "mixed-norms": (
        gemmas_norm_on_q_only,
        r"^Qwen3Attention's q_norm and k_norm compute two different norms",
    ),
    "cohere2-full": (
        lambda: layer(
            "cohere2",
            "Cohere2",
            layer_idx=1,
            num_hidden_layers=2,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
        ),
        r"^Cohere2Attention does not rotate on this layer \(a NoPE layer, as Cohere 2's and "
        r"EXAONE 4's global layers\): run on 6 positions, it computes as the MHA without "
        r"rotation \(0 off\)",
    ),
    "unwritten-sinks": (
        lambda: with_nan_sinks(layer("gpt_oss", "GptOss", num_hidden_layers=1)),
        r"^GptOssAttention\.sinks holds nan or inf \(1 of 4 values\): a layer built on its own "
        r"leaves the parameters it makes with torch\.empty unwritten",
    ),
}


def with_nan_sinks(module):
    """A gpt-oss layer whose sinks are as torch.empty may leave them: here, one nan."""
    with torch.no_grad():
        module.sinks.copy_(torch.tensor([0.5, math.nan, -1.0, 2.0]))
    return module


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_layer_that_differs_is_refused_naming_what_differs(case):
    built, said = REFUSED[case]
    error = TypeError if case == "gpt-neox" else ValueError
    with pytest.raises(error, match=said):
        from_hf(built())


def test_phi3s_fused_projection_is_split_into_w_q_w_k_w_v_and_fused_back():
    # Phi-3's qkv_proj: the query's 4 heads' rows, then the key's 2, then the value's 2 (of 6
    # dims: its heads are hidden_size // num_attention_heads wide); prefill and decoding equal
    from mha.interop import to_hf

    config = Phi3Config(
        hidden_size=24, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64
    )
    config._attn_implementation = "sdpa"
    module = randomised(Phi3Attention(config, layer_idx=0).double().eval(), 0)
    m = from_hf(module)
    fused = module.qkv_proj.weight
    assert torch.equal(torch.cat([m.W_q.weight, m.W_k.weight, m.W_v.weight]), fused)
    assert [m.W_q.out_features, m.W_k.out_features, m.W_v.out_features] == [24, 12, 12]
    rotary, theirs, ours = Phi3RotaryEmbedding(config), DynamicCache(config=config), KVCache()
    x = torch.randn(2, 5, 24, dtype=torch.float64)
    positions = torch.arange(5).expand(2, -1)
    mask = additive_mask(positions, positions, None, torch.float64)
    expected = hf_call(module, rotary, x, positions, mask, theirs)
    with torch.no_grad():
        assert_matches(m(x, is_causal=True, cache=ours), expected)
        x = torch.randn(2, 1, 24, dtype=torch.float64)
        position = torch.full((2, 1), 5)
        mask = additive_mask(position, torch.arange(6).expand(2, -1), None, torch.float64)
        expected = hf_call(module, rotary, x, position, mask, theirs)
        assert_matches(m(x, is_causal=True, cache=ours), expected)
    # back: W_q, W_k and W_v changed on mha's side are the fused rows, in that order
    with torch.no_grad():
        m.W_k.weight.mul_(2.0)
    again = to_hf(m, Phi3Attention(config, layer_idx=0).double())
    assert torch.equal(again.qkv_proj.weight[24:36], 2.0 * fused[24:36])
    assert torch.equal(again.qkv_proj.weight[36:], fused[36:])


def test_a_layer_that_rotates_whole_heads_whatever_the_config_says_is_converted_so():
    # Llama's code gives the default rope type whole-head tables, partial_rotary_factor or not:
    # from_hf follows what the layer does (its first guess, half the head, does not match)
    half = {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}
    module = randomised(layer("llama", "Llama", rope_parameters=half).double().eval(), 0)
    config = module.config
    m = from_hf(module)
    assert (m.rope.rotary_dims, m.rope.interleaved) == (8, False)
    x = torch.randn(2, 7, 24, dtype=torch.float64)
    positions = torch.arange(7).expand(2, -1)
    mask = additive_mask(positions, positions, None, torch.float64)
    expected = hf_call(module, LlamaRotaryEmbedding(config), x, positions, mask)
    with torch.no_grad():
        assert_matches(m(x, is_causal=True), expected)


def test_from_hf_gives_the_layer_back_in_its_mode_and_attention_implementation():
    # the run beside the module built is in evaluation mode, under sdpa where the model's
    # implementation is another (flash attention's kernels take no additive mask)
    module = layer("glm4", "Glm4", rope_parameters={"rope_type": "default", "rope_theta": 1e4})
    config = module.config
    config._attn_implementation = "flash_attention_2"
    m = from_hf(module.train())
    assert module.training and m.training and config._attn_implementation == "flash_attention_2"
    assert m.rope.interleaved  # settled by the run, under sdpa


def test_a_rope_type_mha_does_not_implement_is_refused_by_name():
    # Gemma 4's proportional rotation (linear and dynamic are mha.rope's: tests/test_from_hf_choice)
    config = LlamaConfig(
        hidden_size=24,
        num_attention_heads=4,
        num_key_value_heads=2,
        rope_parameters={"rope_type": "proportional", "rope_theta": 10000.0},
    )
    with pytest.raises(ValueError, match="rope_type is 'proportional'"):
        from_hf(LlamaAttention(config, layer_idx=0))


# ---- DeepSeek-V3: multi-head latent attention ---------------------------------------------------

mla_configurations = st.fixed_dictionaries(
    {
        "heads": st.sampled_from([1, 2, 4]),
        "q_lora_rank": st.sampled_from([None, 12]),
        "kv_lora_rank": st.sampled_from([4, 8]),
        "nope": st.sampled_from([2, 6]),
        "rope_dims": st.sampled_from([2, 4]),
        "v_dims": st.sampled_from([3, 5]),
        "rope": st.sampled_from(["default", "yarn"]),
        "interleave": st.booleans(),  # V3's rope_interleave; V2 always interleaves
        "version": st.sampled_from(["v3", "v2"]),
        "batch_size": st.integers(1, 3),
        "prefill": st.integers(1, 7),
        "steps": st.integers(1, 4),
        "dtype": st.sampled_from([torch.float32, torch.float64]),
        "seed": seeds,
    }
)


def build_deepseek(c: dict):
    """DeepSeek-V3's attention (V2's with ``c["version"] == "v2"``), its config and its model's
    rotary embedding (V2's gives complex numbers, V3's cos and sin)."""
    from transformers import DeepseekV2Config, DeepseekV3Config
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import (
        DeepseekV2Attention,
        DeepseekV2RotaryEmbedding,
    )
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3Attention,
        DeepseekV3RotaryEmbedding,
    )

    v2 = c.get("version") == "v2"
    config_class, attention, rotary = (
        (DeepseekV2Config, DeepseekV2Attention, DeepseekV2RotaryEmbedding)
        if v2
        else (DeepseekV3Config, DeepseekV3Attention, DeepseekV3RotaryEmbedding)
    )
    rope = ROPES["default"] if c["rope"] == "default" else DEEPSEEK_YARN
    config = config_class(
        hidden_size=24,
        num_attention_heads=c["heads"],
        num_key_value_heads=c["heads"],
        q_lora_rank=c["q_lora_rank"],
        kv_lora_rank=c["kv_lora_rank"],
        qk_nope_head_dim=c["nope"],
        qk_rope_head_dim=c["rope_dims"],
        v_head_dim=c["v_dims"],
        rope_parameters=dict(rope),
        rope_interleave=c["interleave"],
        max_position_embeddings=640,
        n_routed_experts=4,
        num_experts_per_tok=2,
        attention_bias=c["q_lora_rank"] is None,
    )
    config._attn_implementation = "sdpa"
    module = randomised(attention(config, layer_idx=0).to(c["dtype"]).eval(), c["seed"])
    return module, config, rotary(config)


def assert_deepseek_matches(actual, expected, version: str, msg: str) -> None:
    """``assert_matches``, but for V2 in float64 at 1e-6: its code rotates the query's and key's
    rotary parts in float32 (``apply_rotary_emb``'s ``.float()``), so its float64 output carries
    float32's rounding (measured up to 2.0e-7 on outputs up to 1.8, over 384 configurations)."""
    if version == "v2" and expected.dtype == torch.float64:
        torch.testing.assert_close(actual, expected, atol=1e-6, rtol=1e-6, msg=msg)
    else:
        assert_matches(actual, expected, msg=msg)


def test_deepseek_v3_yarn_scales_the_softmax_not_cos_and_sin():
    # V3's mscale = mscale_all_dim = 1: transformers' rotary embedding leaves cos and sin as
    # they are, and its attention multiplies 1 / sqrt(q head size) by (0.1 ln 40 + 1) ** 2,
    # which from_hf carries into MLA's scale
    c = dict(heads=2, q_lora_rank=None, kv_lora_rank=4, nope=6, rope_dims=4, v_dims=3)
    c.update(rope="yarn", interleave=True, dtype=torch.float64, seed=0)
    module, _, rotary = build_deepseek(c)
    scaling = {k: v for k, v in DEEPSEEK_YARN.items() if k != "rope_theta"}
    mscale = 0.1 * 1.0 * math.log(40.0) + 1
    assert rotary.attention_scaling == 1.0
    assert RotaryEmbedding(4, scaling=scaling).attention_factor == 1.0
    assert math.isclose(module.scaling, (6 + 4) ** -0.5 * mscale**2)
    assert from_hf(module).scale == module.scaling


@given(c=mla_configurations)
def test_mla_prefill_and_decoding_expanded_and_absorbed_equal_deepseek_v2_and_v3(c):
    module, config, rotary = build_deepseek(c)
    m = from_hf(module)
    assert isinstance(m, MLA)
    # V2's code always rotates interleaved pairs, V3's as its config says (of 2 dims, one pair:
    # the two layouts are one, and the first tried, halves, is kept)
    if c["rope_dims"] > 2:
        assert m.rope.interleaved == (c["version"] == "v2" or c["interleave"])

    def assert_matches(actual, expected, msg):
        assert_deepseek_matches(actual, expected, c["version"], msg)

    dtype, b = c["dtype"], c["batch_size"]
    theirs, expanded, absorbed = DynamicCache(config=config), LatentCache(), LatentCache()
    x = torch.randn(b, c["prefill"], 24, dtype=dtype)
    positions = torch.arange(c["prefill"]).expand(b, -1)
    mask = additive_mask(positions, positions, None, dtype)
    expected = hf_call(module, rotary, x, positions, mask, theirs)
    with torch.no_grad():
        assert_matches(m(x, is_causal=True, cache=expanded), expected, msg="prefill")
        assert_matches(m(x, is_causal=True, cache=absorbed, absorb=True), expected, msg="absorbed")
    for step in range(c["prefill"], c["prefill"] + c["steps"]):
        x = torch.randn(b, 1, 24, dtype=dtype)
        expected = hf_call(module, rotary, x, torch.full((b, 1), step), None, theirs)
        with torch.no_grad():
            assert_matches(m(x, is_causal=True, cache=expanded), expected, msg=f"step {step}")
            got = m(x, is_causal=True, cache=absorbed, absorb=True)
        assert_matches(got, expected, msg=f"absorbed step {step}")
    # What each caches: transformers' latent [B, 1, L, kv_lora_rank] is ours [B, L, kv_lora_rank]
    assert_matches(absorbed.latent, theirs.layers[0].keys[:, 0], msg="latent")
    assert absorbed.rope_keys.shape == (b, len(absorbed), c["rope_dims"])


def test_a_compiled_absorbed_decode_step_with_fullgraph_equals_deepseek_v3():
    c = dict(
        heads=4,
        q_lora_rank=12,
        kv_lora_rank=8,
        nope=6,
        rope_dims=4,
        v_dims=5,
        rope="yarn",
        interleave=True,
        dtype=torch.float32,
        seed=7,
    )
    module, config, rotary = build_deepseek(c)
    m = from_hf(module)
    theirs, ours = DynamicCache(config=config), LatentCache()
    step = torch.compile(
        lambda x, cache: m(x, is_causal=True, cache=cache, absorb=True),
        fullgraph=True,
        backend="aot_eager",
        dynamic=True,
    )
    x = torch.randn(1, 3, 24)
    positions = torch.arange(3)[None]
    with torch.no_grad():
        mask = additive_mask(positions, positions, None, x.dtype)
        hf_call(module, rotary, x, positions, mask, theirs)
        m(x, is_causal=True, cache=ours)
        for position in range(3, 7):
            x = torch.randn(1, 1, 24)
            expected = hf_call(module, rotary, x, torch.tensor([[position]]), None, theirs)
            assert_matches(step(x, ours), expected, msg=f"position {position}")


# ---- Where dtypes meet the cache and the rotation (issue 29) ----------------------------------


def test_a_bf16_model_keeps_float32_frequencies_and_equals_transformers_far_apart():
    """``from_hf`` of a model loaded in bfloat16: the rotary frequencies stay float32 (as
    transformers keeps them), so a query 4,000 positions after a key turns by the same angle. With
    the frequencies rounded to bfloat16 the output was 1.4 off transformers' at such distances."""
    from transformers import AutoModel

    config = LlamaConfig(
        hidden_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        num_hidden_layers=1,
        intermediate_size=32,
        vocab_size=8,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = AutoModel.from_config(config, dtype=torch.bfloat16).eval()
    module = model.layers[0].self_attn
    m = from_hf(module)
    assert m.W_q.weight.dtype == torch.bfloat16
    assert m.rope.inv_freq.dtype == model.rotary_emb.inv_freq.dtype == torch.float32
    assert torch.equal(m.rope.inv_freq, model.rotary_emb.inv_freq)
    x = torch.randn(1, 6, 256, dtype=torch.bfloat16)
    positions = torch.tensor([[0, 1, 2, 4000, 4001, 4096]])
    mask = additive_mask(positions, positions, None, torch.bfloat16)
    with torch.no_grad():
        expected = hf_call(module, model.rotary_emb, x, positions, mask)
        got = m(x, is_causal=True, positions=positions)  # [1, q_len], as transformers passes
    # The same numbers, rounded at the same points: within a few bfloat16 steps of each other
    assert (got - expected).abs().max() <= 0.05 * expected.abs().max()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_qwen3_under_autocast_decodes_with_a_cache_as_transformers_does(dtype):
    """qk_norm's RMSNorm returns float32 under autocast while the values are in the lower
    precision: the cache takes both, and prefill then decoding equals transformers' own under the
    same autocast (it raised ``values must have the keys' dtype`` before)."""
    module, _, rotary = build(
        "qwen3",
        heads=4,
        kv_heads=2,
        head_dim=8,
        rope="yarn",
        window=None,
        dtype=torch.float32,
        seed=5,
    )
    m = from_hf(module)
    x = torch.randn(2, 9, 24)
    positions = torch.arange(9).expand(2, -1)
    ours, theirs = KVCache(), DynamicCache()
    got, expected = [], []
    with torch.autocast("cpu", dtype=dtype), torch.no_grad():
        for chunk in (slice(0, 6), slice(6, 7), slice(7, 9)):
            at = positions[:, chunk]
            mask = additive_mask(at, positions[:, : chunk.stop], None, torch.float32)
            expected.append(hf_call(module, rotary, x[:, chunk], at, mask, theirs))
            got.append(m(x[:, chunk], is_causal=True, cache=ours))
    assert ours.keys.dtype == ours.values.dtype == dtype
    exact = hf_call(
        module, rotary, x, positions, additive_mask(positions, positions, None, torch.float32)
    )
    for ours_out, theirs_out, part in zip(
        got, expected, (slice(0, 6), slice(6, 7), slice(7, 9)), strict=True
    ):
        assert ours_out.dtype == theirs_out.dtype == dtype
        # each is within its dtype's rounding of float32, and so of the other
        assert_close(ours_out.float(), exact[:, part], dtype=dtype)
        assert_close(theirs_out.float(), exact[:, part], dtype=dtype)
