"""Where ``mha`` meets transformers' call inside a swapped model (issue 44, items 2, 5 and 6).

Run on whichever transformers is installed (``make test`` on the pin, ``make compat`` on the
newest release):

- **No keyword swallowed.** ``HFAttention`` takes the cache as ``past_key_values=`` (5.23) and as
  ``cache=`` (5.25), never both; a keyword it does not know that carries a tensor or a cache is a
  ``TypeError`` naming it; those it knows and does not need change nothing. A swapped Llama,
  Qwen3, Mistral, Gemma 3 and gpt-oss generate the original's tokens and logits (greedy, a
  left-padded batch) and continue a ``DynamicCache`` step by step as the original does (5.25's
  ``cache=`` was swallowed: every step decoded without the cache, other tokens).
- **Llama 4's positions.** A swapped Llama 4 rotates by the model's positions (its complex
  tables), so gapped ``position_ids`` give the original's logits (they were 0.38 to 5.6 off);
  its layers used directly take one convention in a left-padded batch (each row's own
  positions, to the chunked and the NoPE layer alike) and give transformers' outputs.
- **Saving a swapped model.** ``state_dict`` has transformers' names (Phi-3's fused ``qkv_proj``,
  gpt-oss's ``sinks``, DeepSeek-V3's latent projections), so ``save_pretrained`` writes a
  checkpoint plain transformers loads equal, a plain checkpoint loads into a swapped model, and
  what cannot be named is refused before a weight is written, naming ``restore_attention``.

The models are ``tests/test_swap.py``'s (2 layers, hidden 32, float64, every weight drawn).
"""

from __future__ import annotations

import copy
import inspect

import pytest
import torch

transformers = pytest.importorskip("transformers")
from support import randomised  # noqa: E402
from test_swap import (  # noqa: E402
    BOUNDS,
    PROMPTS,
    SIBLINGS,
    assert_equal,
    assert_same_generation,
    batch,
    build,
    ours_of,
)
from transformers import AutoModelForCausalLM, DynamicCache, LlamaForCausalLM  # noqa: E402
from transformers.models.llama4.modeling_llama4 import (  # noqa: E402
    Llama4TextAttention,
    Llama4TextRotaryEmbedding,
)

from mha.cache import KVCache  # noqa: E402
from mha.full import MHA  # noqa: E402
from mha.hf import IGNORED_KEYWORDS, HFAttention  # noqa: E402
from mha.interop import from_hf, swap_attention  # noqa: E402
from mha.parallel.heads import HeadsAcrossRanks  # noqa: E402

transformers.logging.set_verbosity_error()

# The families the issue names: a swapped one generates the original's tokens on both versions
GENERATING = ("llama", "qwen3", "mistral", "gemma3", "gpt_oss")
# The families whose parameters are named otherwise than the Llama family's q/k/v/o: Phi-3's
# fused qkv_proj, gpt-oss's sinks of the layer itself, DeepSeek-V3's latent projections
SAVED = ("llama", "qwen3", "phi3", "gpt_oss", "deepseek_v3")
# The name the installed transformers gives the cache in a model's call (5.25: cache=, 5.23:
# past_key_values=), so that neither version warns of the other's
CACHE = next(
    n
    for n in ("cache", "past_key_values")
    if n in inspect.signature(LlamaForCausalLM.forward).parameters
)
EAGER = ("gemma2", "gpt_oss")  # their attention runs transformers' eager path (build says why)


@pytest.fixture(scope="module")
def llama():
    """Tests/test_swap.py's Llama and a swapped copy of it."""
    original = build("llama")
    return original, swap_attention(copy.deepcopy(original))


def layer_call(model, **keywords):
    """Layer 0's swapped attention called as the decoder calls it, on a prompt of 5 positions;
    its output."""
    layer = ours_of(model)[0]
    torch.manual_seed(0)
    x = torch.randn(2, 5, 32, dtype=torch.float64)
    positions = torch.arange(5)[None]
    tables = model.model.rotary_emb(x, positions)
    with torch.no_grad():
        out, _ = layer(x, position_embeddings=tables, position_ids=positions, **keywords)
    return out


# ---- No keyword swallowed --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["past_key_values", "cache"])
def test_the_cache_is_taken_under_either_name_and_written(llama, name):
    """transformers 5.23 passes the cache as past_key_values=, 5.25 as cache=: both are
    written (5.25's was swallowed, and every step decoded without the cache)."""
    cache = DynamicCache()
    out = layer_call(llama[1], **{name: cache})
    assert cache.get_seq_length(0) == 5
    assert_equal(out, layer_call(llama[1]), "the prompt, with the cache and without")


def test_the_cache_under_both_names_at_once_is_refused(llama):
    with pytest.raises(TypeError, match=r"cache was given twice, as past_key_values= .* cache="):
        layer_call(llama[1], past_key_values=DynamicCache(), cache=DynamicCache())


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(torch.arange(6), id="tensor"),
        pytest.param(DynamicCache(), id="cache"),
        pytest.param((torch.zeros(1), torch.zeros(1)), id="tuple-of-tensors"),
        pytest.param(KVCache(), id="mha-cache"),
    ],
)
def test_an_unknown_keyword_carrying_a_tensor_or_a_cache_is_refused_by_name(llama, value):
    with pytest.raises(
        TypeError, match=r"HFAttention got cu_seq_lens_q= .*does not know: it reads"
    ):
        layer_call(llama[1], cu_seq_lens_q=value)


def test_transformers_4s_name_for_the_cache_is_refused_not_dropped(llama):
    with pytest.raises(TypeError, match=r"got past_key_value= \(DynamicCache\)"):
        layer_call(llama[1], past_key_value=DynamicCache())


def test_the_keywords_known_as_not_needed_change_nothing(llama):
    known = dict(
        use_cache=True,
        cache_position=torch.arange(5),
        output_hidden_states=True,
        output_router_logits=False,
        num_items_in_batch=torch.tensor(7),
        max_length_q=5,
        max_length_k=5,
        output_attentions=False,
        is_causal=True,
    )
    assert set(IGNORED_KEYWORDS) <= set(known)
    assert_equal(layer_call(llama[1], **known), layer_call(llama[1]), "with the known keywords")


def test_an_unknown_keyword_without_a_tensor_changes_nothing(llama):
    assert_equal(layer_call(llama[1], some_flag=True), layer_call(llama[1]), "with a flag")


def test_a_bidirectional_call_is_refused(llama):
    with pytest.raises(ValueError, match=r"is_causal=False: this layer replaces LlamaAttention"):
        layer_call(llama[1], is_causal=False)


def test_heads_across_ranks_refuses_an_unknown_keyword_through_mha():
    """HeadsAcrossRanks, mha's other adapter with **kwargs, passes them to MHA.forward, whose
    keywords are fixed: an unknown one is Python's TypeError, naming it."""
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'cahce'"):
        HeadsAcrossRanks(MHA(20, 4), None)(torch.randn(2, 3, 20), cahce=KVCache())


@pytest.mark.parametrize("family", GENERATING)
def test_a_swapped_model_generates_the_originals_tokens_and_logits(family):
    """Greedy decoding of a left-padded batch, 6 new positions (past the sliding windows): the
    same tokens, every step's logits equal."""
    original = build(family)
    swapped = swap_attention(copy.deepcopy(original))
    assert_same_generation(original, swapped, do_sample=False)


@pytest.mark.parametrize("family", GENERATING)
def test_a_swapped_model_continues_a_dynamic_cache_step_by_step_as_the_original(family):
    """A left-padded batch into a DynamicCache, then one position at a time: every call's
    logits equal the original's, and the cache holds as many positions."""
    original = build(family)
    swapped = swap_attention(copy.deepcopy(original))
    ids, mask = batch()
    caches = DynamicCache(config=original.config), DynamicCache(config=swapped.config)
    models = original, swapped
    with torch.no_grad():
        logits = [
            m(ids, attention_mask=mask, **{CACHE: c}).logits
            for m, c in zip(models, caches, strict=True)
        ]
        real = mask.bool()
        assert_equal(logits[1][real], logits[0][real], "the prompt")
        for step in range(4):
            mask = torch.cat([mask, torch.ones(2, 1, dtype=mask.dtype)], dim=1)
            new = torch.full((2, 1), 5 + step)
            logits = [
                m(new, attention_mask=mask, **{CACHE: c}).logits
                for m, c in zip(models, caches, strict=True)
            ]
            assert_equal(logits[1], logits[0], f"step {step}")
    assert caches[1].get_seq_length() == caches[0].get_seq_length() == ids.size(1) + 4


# ---- Llama 4's positions ---------------------------------------------------------------------

# Positions with a gap after the fifth (as a prompt with a cut, or a second segment placed apart)
GAPPED = torch.tensor([[0, 1, 2, 3, 4, 10, 11, 12, 13, 14]])


def test_a_swapped_llama4_rotates_by_gapped_position_ids_as_the_original():
    """Llama 4's decoder layers pass the rotation as complex numbers, never position_ids: the
    swapped layer reads its positions from them. A prompt at gapped positions, then two steps
    after them: the logits within float32's rounding (Llama 4 rotates in complex64), where
    rotating by the cache's length gave 0.38 off here."""
    original = build("llama4")
    swapped = swap_attention(copy.deepcopy(original))
    ids = torch.arange(3, 13)[None]
    caches = DynamicCache(), DynamicCache()
    models = original, swapped
    with torch.no_grad():
        logits = [
            m(ids, position_ids=GAPPED, **{CACHE: c}).logits
            for m, c in zip(models, caches, strict=True)
        ]
        assert_equal(logits[1], logits[0], "the gapped prompt", BOUNDS["llama4"])
        for step in range(2):
            at = torch.tensor([[15 + step]])
            logits = [
                m(torch.tensor([[5 + step]]), position_ids=at, **{CACHE: c}).logits
                for m, c in zip(models, caches, strict=True)
            ]
            assert_equal(logits[1], logits[0], f"step {step}", BOUNDS["llama4"])


def test_tables_of_a_layout_the_layer_cannot_read_without_positions_are_refused(llama):
    """A rotating layer given rotary tables it cannot read and no position_ids would rotate by
    the cache's length, whatever the model's positions: refused."""
    layer = ours_of(llama[1])[0]
    x = torch.randn(1, 3, 32, dtype=torch.float64)
    angles = torch.polar(torch.ones(1, 3, 4), torch.zeros(1, 3, 4))  # Llama 4's, half-split rope
    with pytest.raises(ValueError, match=r"position_embeddings of a layout .* no position_ids"):
        layer(x, position_embeddings=angles)


def llama4_layers():
    """Llama 4's layer 0 (rotating, in chunks of 4) and layer 1 (NoPE, its temperature tuned,
    floor_scale 2), transformers' and ``from_hf``'s, float64, and the model's rotary tables."""
    config = SIBLINGS["llama4"]()
    config._attn_implementation = "sdpa"
    theirs = [randomised(Llama4TextAttention(config, i), i).double().eval() for i in (0, 1)]
    ours = [from_hf(layer) for layer in theirs]
    assert (ours[0].chunk, ours[1].temperature) == (4, (0.5, 2.0))
    return theirs, ours, Llama4TextRotaryEmbedding(config)


def test_llama4s_layers_used_directly_take_one_convention_in_a_left_padded_batch():
    """One set of arguments for the chunked and the NoPE layer: the padding mask, each row's own
    positions (from its first real token) and a cache. transformers chunks a row from its first
    real token (its mask) and scales the NoPE layer's queries by the index in the cache, padding
    included; with those arguments both of ours give its outputs, over a prompt and 3 steps.
    (The NoPE layer scaled by the positions given: 0.16 off.)"""
    theirs, ours, rotary = llama4_layers()
    pad = torch.tensor([0, 3])  # row 1: 3 padding slots, then its prompt
    slots = torch.arange(10)
    visible = slots >= pad[:, None]  # [2, 10]: the real slots of 7 + 3 positions
    own = (slots - pad[:, None]).clamp(min=0)  # each row's own positions
    torch.manual_seed(0)
    x = torch.randn(2, 10, 32, dtype=torch.float64)
    caches = [(DynamicCache(), KVCache()) for _ in ours]
    for start, end in ((0, 7), (7, 8), (8, 9), (9, 10)):  # the prompt, then one at a time
        q, k = slots[start:end], slots[:end]
        causal = (k[None, :] <= q[:, None]) & visible[:, None, :end]  # [2, q_len, k_len]
        chunks = (k - pad[:, None])[:, None, :] // 4 == (q - pad[:, None])[:, :, None] // 4
        real = visible[:, start:end]
        tables = rotary(x, own[:, start:end])
        for i, (layer, mine, (their_cache, my_cache)) in enumerate(
            zip(theirs, ours, caches, strict=True)
        ):
            mask = causal & chunks if i == 0 else causal
            with torch.no_grad():
                expected, _ = layer(
                    x[:, start:end],
                    position_embeddings=tables,
                    attention_mask=mask[:, None],
                    **{CACHE: their_cache},
                )
                got = mine(
                    x[:, start:end],
                    attn_mask=visible[:, None, None, :end],
                    is_causal=True,
                    cache=my_cache,
                    positions=own[:, start:end],
                )
            bound = BOUNDS["llama4"] if i == 0 else None  # its rotation in complex64
            assert_equal(got[real], expected[real], f"layer {i}, positions {start}..{end}", bound)


# ---- Saving a swapped model ------------------------------------------------------------------


def tuned(family: str):
    """The family's swapped model with its attention changed (every query projection and, for
    gpt-oss, the sinks), so that what is saved is not the original's."""
    model = swap_attention(build(family))
    with torch.no_grad():
        for layer in ours_of(model):
            for name, parameter in layer.attention.named_parameters():
                if name.startswith(("W_q.", "W_uq.", "sink_logits")):
                    parameter.add_(0.25)
    return model


def logits_of(model) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor(PROMPTS[:1])).logits


@pytest.mark.parametrize("family", SAVED)
def test_a_swapped_models_state_dict_has_the_originals_names_and_its_own_values(family):
    original = build(family)
    swapped = tuned(family)
    state, theirs = swapped.state_dict(), original.state_dict()
    assert state.keys() == theirs.keys()
    attention = ours_of(swapped)[0].attention
    if family == "phi3":  # q, k and v in one projection: W_q's rows first
        rows = attention.W_q.weight.size(0)
        fused = state["model.layers.0.self_attn.qkv_proj.weight"]
        assert torch.equal(fused[:rows], attention.W_q.weight)
    if family == "gpt_oss":
        assert torch.equal(state["model.layers.0.self_attn.sinks"], attention.sink_logits)
    names = [k for k, _ in swapped.named_parameters() if ".self_attn." in k]
    assert names and all(".self_attn.attention." in k for k in names)  # mha's, as before


@pytest.mark.parametrize("family", SAVED)
def test_a_swapped_model_saved_loads_into_plain_transformers_with_equal_logits(family, tmp_path):
    """save_pretrained without restore_attention, then from_pretrained in plain transformers:
    transformers' layers, holding the tuned weights (its attention was re-initialised, 0.44 to
    5.8 off)."""
    swapped = tuned(family)
    swapped.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(
        tmp_path,
        dtype=torch.float64,
        attn_implementation="eager" if family in EAGER else "sdpa",
        experts_implementation="eager",
    ).eval()
    assert not any(isinstance(m, HFAttention) for m in reloaded.modules())
    assert_equal(logits_of(reloaded), logits_of(swapped), family)


@pytest.mark.parametrize("family", SAVED)
def test_a_plain_checkpoint_loads_into_a_swapped_model(family):
    original = build(family)
    swapped = swap_attention(build(family, seed=1))
    swapped.load_state_dict(original.state_dict(), strict=True)
    assert_equal(logits_of(swapped), logits_of(original), family)


@pytest.mark.parametrize("family", SAVED)
def test_a_swapped_model_loads_its_own_state_dict_under_either_names(family):
    source = tuned(family)
    for state in (source.state_dict(), dict(source.named_parameters())):
        swapped = swap_attention(build(family, seed=1))
        swapped.load_state_dict(state, strict=True)
        assert_equal(logits_of(swapped), logits_of(source), family)


def test_a_parameter_the_table_cannot_name_is_refused_before_a_weight_is_written(tmp_path):
    swapped = swap_attention(build("llama"))
    extra = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    ours_of(swapped)[1].attention.register_parameter("extra", extra)
    message = r"model\.layers\.1\.self_attn\.attention\.extra cannot .* restore_attention"
    with pytest.raises(ValueError, match=message):
        swapped.state_dict()
    with pytest.raises(ValueError, match=message):
        swapped.save_pretrained(tmp_path)
    assert not list(tmp_path.glob("*.safetensors"))
