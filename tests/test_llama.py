"""``mha.decoder.Llama`` and ``from_hf``: transformers' Llama, Mistral, Qwen2 and Qwen3 models,
loaded whole, give their logits and their generations.

The models are small random ones built with ``from_config`` (nothing is downloaded), every
parameter drawn (the norms too, so a norm left at its initial ones would show), under transformers'
``sdpa`` path (its ``eager`` path computes the softmax in float32 even for float64 inputs).
float64: logits within ``support.TOLERANCE`` (1e-12); float32: within its 2e-6 (0.0 measured on
this project's CPUs, where both run the same kernels). Generations are compared token for token
with ``model.generate``: greedy, with an eos id, beam search, and sampling with ``top_k`` and
``top_p`` under the same seed; the windowed families decode past their window.
"""

from __future__ import annotations

import copy
import os
import re

import pytest
import torch
from support import assert_close, randomised

from mha.decoder import Llama, LlamaBlock, beam_search, from_hf, generate, positions_of
from mha.full import ModelCache

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    MixtralConfig,
    Qwen2Config,
    Qwen3Config,
)

transformers.logging.set_verbosity_error()

SIZES = dict(
    vocab_size=37,
    hidden_size=24,
    intermediate_size=40,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
# Each family with what sets it apart; the windows (3 and 4) are shorter than the prompts and
# the steps, so decoding runs past them.
CONFIGS = {
    "llama": lambda: LlamaConfig(
        **SIZES,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
    ),
    "llama-tied": lambda: LlamaConfig(**SIZES, tie_word_embeddings=True, attention_bias=True),
    "mistral": lambda: MistralConfig(**SIZES, sliding_window=3),
    "qwen2": lambda: Qwen2Config(
        **SIZES, use_sliding_window=True, sliding_window=4, max_window_layers=2
    ),
    "qwen3": lambda: Qwen3Config(
        **SIZES, head_dim=8, use_sliding_window=True, sliding_window=3, max_window_layers=1
    ),
}
# What from_hf must read from each: the windows per layer, the tied head, the q/k norm, the biases.
EXPECTED = {
    "llama": ([None, None, None], False, False, ()),
    "llama-tied": ([None, None, None], True, False, ("W_q", "W_k", "W_v", "W_o")),
    "mistral": ([3, 3, 3], False, False, ()),
    "qwen2": ([None, None, 4], False, False, ("W_q", "W_k", "W_v")),
    "qwen3": ([None, 3, 3], False, True, ()),
}

# A prompt alone, and a batch padded on the left (transformers' ``attention_mask``, 0 = padding).
PROMPTS = [[3, 4, 5, 6, 7, 8], [6, 7, 8, 9, 10, 11, 12, 13], [20, 21]]


@pytest.fixture(scope="module", params=["float64", "float32"])
def dtype(request):
    return getattr(torch, request.param)


@pytest.fixture(scope="module", params=list(CONFIGS))
def family(request):
    return request.param


@pytest.fixture(scope="module")
def pair(family, dtype):
    """A transformers model of ``family`` in ``dtype`` and what ``from_hf`` makes of it."""
    hf = AutoModelForCausalLM.from_config(
        CONFIGS[family](), dtype=dtype, attn_implementation="sdpa"
    )
    hf = randomised(hf.eval())
    return hf, from_hf(hf)


def left_padded(prompts):
    """transformers' inputs for ``prompts``, padded on the left with id 0."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, attention_mask


def test_from_hf_reads_each_familys_layout(family, pair):
    _, model = pair
    windows, tied, qk_norm, bias = EXPECTED[family]
    assert model.windows == windows == [block.attn.window for block in model.blocks]
    assert (model.head is None) == tied
    assert all(block.attn.qk_norm == qk_norm for block in model.blocks)
    assert all(block.attn.bias == bias for block in model.blocks)


def test_from_hf_keeps_the_dtype_device_and_mode(pair, dtype):
    hf, model = pair
    assert {p.dtype for p in model.parameters()} == {dtype}
    assert not model.training
    assert from_hf(hf.train()).training
    hf.eval()


def test_the_logits_of_a_prompt_equal_transformers(pair):
    hf, model = pair
    ids = torch.tensor([PROMPTS[1]])
    with torch.no_grad():
        assert_close(model(ids), hf(input_ids=ids).logits)


def test_the_logits_of_a_left_padded_batch_equal_transformers_at_every_real_position(pair):
    hf, model = pair
    ids, attention_mask = left_padded(PROMPTS)
    held = attention_mask.bool()[:, None, None, :]  # [batch_size, 1, 1, k_len]
    positions = positions_of(held)  # [batch_size, k_len]
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=attention_mask, position_ids=positions).logits
        ours = model(ids, positions=positions, attn_mask=held)
    real = attention_mask.bool()  # padded queries see no key: their logits mean nothing
    assert_close(ours[real], theirs[real])


def test_the_cached_logits_equal_recomputed_ones_past_the_window(pair):
    _, model = pair
    ids = torch.tensor([PROMPTS[1] + PROMPTS[0]])  # 14 positions, windows of 3 and 4
    with torch.no_grad():
        whole = model(ids)
        cache = ModelCache(model.num_layers)
        steps = [model(ids[:, :5], cache=cache)]
        steps += [model(ids[:, s : s + 1], cache=cache) for s in range(5, ids.size(1))]
    assert_close(torch.cat(steps, dim=1), whole)


def hf_generate(hf, prompts, steps, **options):
    ids, attention_mask = left_padded(prompts)
    options = {"pad_token_id": 0, "eos_token_id": None, **options}
    with torch.no_grad():
        out = hf.generate(
            input_ids=ids, attention_mask=attention_mask, max_new_tokens=steps, **options
        )
    return out[:, ids.size(1) :]


@pytest.mark.parametrize("batch", [PROMPTS[:1], PROMPTS], ids=["prompt", "left-padded"])
def test_greedy_generation_equals_transformers_token_for_token(pair, batch):
    hf, model = pair
    assert torch.equal(generate(model, batch, 12), hf_generate(hf, batch, 12, do_sample=False))


def test_generation_with_an_eos_id_equals_transformers(pair):
    hf, model = pair
    eos = int(generate(model, PROMPTS, 12)[0, 2])  # the first row stops at its third token
    ours = generate(model, PROMPTS, 12, eos_token_id=eos, pad_token_id=0)
    theirs = hf_generate(hf, PROMPTS, 12, do_sample=False, eos_token_id=eos)
    assert torch.equal(ours, theirs)
    assert ours[0, 3:].eq(0).all()


def test_beam_search_equals_transformers_beams_and_scores(pair):
    """Without an eos id every beam has ``steps`` tokens, so transformers' length-normalised
    ``sequences_scores`` are our summed log-probabilities divided by ``steps``."""
    hf, model = pair
    ids, attention_mask = left_padded(PROMPTS)
    with torch.no_grad():
        out = hf.generate(
            input_ids=ids,
            attention_mask=attention_mask,
            max_new_tokens=6,
            do_sample=False,
            num_beams=3,
            num_return_sequences=3,
            pad_token_id=0,
            eos_token_id=None,
            output_scores=True,
            return_dict_in_generate=True,
        )
    seqs, scores = beam_search(model, PROMPTS, steps=6, beams=3)
    assert torch.equal(seqs, out.sequences[:, ids.size(1) :].view(3, 3, 6))
    expected = (out.sequences_scores.view(3, 3) * 6).to(scores.dtype)
    torch.testing.assert_close(scores, expected, atol=1e-5, rtol=1e-6)  # theirs: float32 sums


def test_sampling_with_top_k_and_top_p_equals_transformers_under_the_same_seed(pair):
    hf, model = pair
    options = dict(temperature=0.7, top_k=5, top_p=0.8)
    torch.manual_seed(5)
    ours = generate(model, PROMPTS, 10, **options)
    torch.manual_seed(5)
    theirs = hf_generate(hf, PROMPTS, 10, do_sample=True, **options)
    assert torch.equal(ours, theirs)


# The blocks are causal: every block calls its attention with is_causal=True.


def later_tokens_leak(model) -> bool:
    """Whether changing the tokens after position 3 changes the logits at positions 0-3."""
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    later = ids.clone()
    later[0, 4:] = torch.tensor([7, 7, 8, 8])
    with torch.no_grad():
        return not torch.allclose(model(later)[:, :4], model(ids)[:, :4], atol=1e-12, rtol=0)


def test_no_block_lets_a_position_see_a_later_token(pair):
    _, model = pair
    assert not later_tokens_leak(copy.deepcopy(model).double())


class Leaky(LlamaBlock):
    """A block that calls its attention with is_causal left at its default (False)."""

    def forward(self, x, *, positions=None, attn_mask=None, cache=None):
        h = self.attn(self.norm_1(x), attn_mask=attn_mask, cache=cache, positions=positions)
        x = x + h
        return x + self.mlp(self.norm_2(x))


def test_the_leak_check_catches_a_block_that_leaves_is_causal_at_its_default():
    torch.manual_seed(0)
    model = Llama(37, 24, 4, kv_heads=2, num_layers=3).double().eval()
    assert not later_tokens_leak(model)
    model.blocks[1].__class__ = Leaky  # one block of three
    assert later_tokens_leak(model)


# What from_hf refuses, each with the argument, what it expects and what it got.


def test_from_hf_refuses_another_class():
    gpt2 = AutoModelForCausalLM.from_config(GPT2Config(n_embd=24, n_head=4, n_layer=1))
    message = (
        "hf_model must be a transformers LlamaForCausalLM, MistralForCausalLM, "
        "Qwen2ForCausalLM or Qwen3ForCausalLM, got GPT2LMHeadModel"
    )
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        from_hf(gpt2)


def test_from_hf_refuses_a_mixture_of_experts_saying_so():
    config = MixtralConfig(**SIZES, num_local_experts=4, num_experts_per_tok=2)
    with pytest.raises(TypeError, match="got MixtralForCausalLM \\(a mixture of 4 experts: "):
        from_hf(AutoModelForCausalLM.from_config(config))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            LlamaConfig(**SIZES, hidden_act="gelu"),
            "hf_model.config.hidden_act must be 'silu' (the SwiGLU of mha.decoder.Llama), "
            "got 'gelu'",
        ),
        (
            LlamaConfig(**SIZES, mlp_bias=True),
            "hf_model.config.mlp_bias must be False (the SwiGLU of mha.decoder.Llama has no "
            "bias), got True",
        ),
        (
            LlamaConfig(
                **SIZES,
                rope_parameters={"rope_type": "proportional", "rope_theta": 1e4, "factor": 2.0},
            ),
            "the config's rope_type is 'proportional'; mha.rope implements ",
        ),
    ],
    ids=["gelu", "mlp-bias", "rope-proportional"],
)
def test_from_hf_refuses_a_config_it_cannot_express(config, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        from_hf(AutoModelForCausalLM.from_config(config))


# Llama's own arguments.


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (
            {"windows": [4, None, 4]},
            ValueError,
            "windows must have one entry per block (num_layers = 2), got 3: [4, None, 4]",
        ),
        ({"windows": [4, 0]}, ValueError, "windows[1] must be a positive int, got 0"),
        ({"windows": 2.5}, TypeError, "windows must be None, an int (every block's) or a list "),
        ({"windows": True}, TypeError, "windows must be None, an int (every block's) or a list "),
        ({"tied": 1}, TypeError, "tied must be a bool, got int (1)"),
        ({"mlp_size": 0}, ValueError, "mlp_size must be a positive int, got 0"),
        ({"max_len": 0}, ValueError, "max_len must be a positive int, got 0"),
        ({"heads_num": 5}, ValueError, "hidden_size (24) must be divisible by heads_num (5)"),
    ],
    ids=[
        "windows-length",
        "window-zero",
        "windows-float",
        "windows-bool",
        "tied",
        "mlp",
        "max_len",
        "heads",
    ],
)
def test_llamas_arguments_are_checked_at_construction(options, error, message):
    arguments = {"vocab_size": 37, "hidden_size": 24, "heads_num": 4, **options}
    with pytest.raises(error) as raised:
        Llama(**arguments)
    assert str(raised.value).startswith(message)


def test_one_window_for_every_block_and_a_max_len_that_generation_respects():
    torch.manual_seed(0)
    model = Llama(37, 24, 4, windows=3, max_len=10).eval()
    assert model.windows == [3, 3]
    assert generate(model, [[1, 2, 3, 4]], 6).shape == (1, 6)
    message = "the longest prompt (prompts[0], 4 tokens) plus steps (7) is 11 positions, "
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        generate(model, [[1, 2, 3, 4]], 7)


@pytest.mark.parametrize("left", [True, False], ids=["left", "right"])
def test_a_llama_without_a_window_generates_each_prompt_as_alone_padded_either_side(left):
    torch.manual_seed(0)
    model = Llama(37, 24, 4, kv_heads=2, qk_norm=True).double().eval()
    batch = generate(model, PROMPTS, 8, left=left)
    alone = torch.cat([generate(model, [prompt], 8) for prompt in PROMPTS])
    assert torch.equal(batch, alone)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda m: m(torch.tensor([[1, 37]])),
            ValueError,
            "ids must lie in 0 .. vocab_size - 1 (36), got [[1, 37]]",
        ),
        (
            lambda m: m(torch.tensor([[1, 2]]), positions=torch.tensor([9, 10])),
            ValueError,
            "positions must lie in 0 .. max_len - 1 (9), got [9, 10]",
        ),
        (
            lambda m: m(torch.tensor([[1] * 11])),
            ValueError,
            "len(cache) (0) plus q_len (11) is 11 positions, more than max_len (10)",
        ),
        (
            lambda m: m(torch.tensor([[1]]), cache=ModelCache(3)),
            ValueError,
            "cache must have one layer per block (2), got 3",
        ),
    ],
    ids=["id-too-large", "position-too-large", "too-long", "cache-layers"],
)
def test_the_llamas_forward_checks_its_input(call, error, message):
    model = Llama(37, 24, 4, max_len=10)
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        call(model)
