"""``mha.decoder``: the chapter's model and its generation, against recomputation.

Generation in a batch must give each prompt the tokens it gets alone, padded on either side;
beam search through a reordered cache must find what recomputing every beam's history finds.
"""

from __future__ import annotations

import re

import pytest
import torch
from support import assert_close

from mha.decoder import Decoder, beam_search, generate, positions_of
from mha.full import ModelCache, padding_mask

PROMPTS = [[3, 1, 4, 1, 5], [9], [2, 6, 5]]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Decoder(vocab_size=13, hidden_size=16, heads_num=4, kv_heads=2, num_layers=2).eval()


def greedy_alone(model, prompt, steps):
    """Greedy decoding without a cache: the whole sequence again at each step."""
    seq = torch.tensor([prompt])
    for _ in range(steps):
        seq = torch.cat([seq, model(seq)[:, -1:].argmax(-1)], dim=1)
    return seq[0, len(prompt) :]


@pytest.mark.parametrize("left", [True, False], ids=["left", "right"])
def test_a_padded_batch_generates_what_each_prompt_generates_alone(model, left):
    batch = generate(model, PROMPTS, steps=6, left=left)
    with torch.no_grad():
        alone = torch.stack([greedy_alone(model, p, 6) for p in PROMPTS])
    assert torch.equal(batch, alone)


def test_a_preallocated_cache_generates_the_same_tokens(model):
    assert torch.equal(generate(model, PROMPTS, 6, max_len=11), generate(model, PROMPTS, 6))


def test_the_cached_logits_equal_recomputed_ones_at_every_step(model):
    """Tokens could agree while logits drift; the logits themselves, step by step."""
    tokens = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    with torch.no_grad():
        whole = model(tokens)
        cache = ModelCache(2)
        steps = [model(tokens[:, :3], cache=cache)]
        steps += [model(tokens[:, s : s + 1], cache=cache) for s in range(3, 8)]
    assert_close(torch.cat(steps, dim=1), whole)


def test_sampling_follows_the_generator(model):
    first = generate(model, PROMPTS, 8, temperature=1.0, generator=torch.Generator().manual_seed(1))
    again = generate(model, PROMPTS, 8, temperature=1.0, generator=torch.Generator().manual_seed(1))
    assert torch.equal(first, again)
    assert first.shape == (3, 8)


def test_positions_count_the_real_keys_before_each_key():
    held = padding_mask(torch.tensor([2, 4, 0]), 4, left=True)
    assert positions_of(held).tolist() == [[0, 0, 0, 1], [0, 1, 2, 3], [0, 0, 0, 0]]
    held = padding_mask(torch.tensor([2, 4]), 4)
    assert positions_of(held).tolist() == [[0, 1, 2, 2], [0, 1, 2, 3]]


def beam_search_recomputing(model, prompt, steps, beams):
    """The same search with no cache: each step runs every beam's whole sequence."""
    seqs = torch.tensor([prompt]).expand(1, -1)
    scores = torch.zeros(1)
    for _ in range(steps):
        logp = model(seqs)[:, -1].log_softmax(-1)  # [rows, vocab_size]
        total = (scores[:, None] + logp).flatten()
        scores, best = total.topk(beams)
        parent, token = best // logp.size(1), best % logp.size(1)
        seqs = torch.cat([seqs[parent], token[:, None]], dim=1)
    return seqs[:, len(prompt) :], scores


def test_beam_search_with_a_reordered_cache_finds_what_recomputing_finds(model):
    seqs, scores = beam_search(model, [3, 1, 4], steps=5, beams=4)
    with torch.no_grad():
        expected_seqs, expected_scores = beam_search_recomputing(model, [3, 1, 4], 5, 4)
    assert torch.equal(seqs, expected_seqs)
    assert_close(scores, expected_scores)
    assert seqs.shape == (4, 5)


# The checks: every argument before any work, each error naming the argument, what it should be
# and what it is (as mha.full's own).


def raises(error, message):
    return pytest.raises(error, match=f"^{re.escape(message)}$")


@pytest.fixture
def calls(model):
    """How many times the model has run; the checks must come before the first."""
    count = []
    handle = model.register_forward_pre_hook(lambda *_: count.append(1))
    yield count
    handle.remove()


def test_no_prompt_at_all_is_refused(model, calls):
    with raises(ValueError, "prompts must hold at least one prompt, got []"):
        generate(model, [], 3)
    assert calls == []


def test_an_empty_prompt_is_refused_by_its_index(model, calls):
    with raises(ValueError, "prompts[1] must hold at least one token id, got []"):
        generate(model, [[1], []], 3)
    assert calls == []


@pytest.fixture(scope="module")
def short():
    torch.manual_seed(0)
    return Decoder(vocab_size=13, hidden_size=16, heads_num=4, max_len=16).eval()


def test_generating_past_the_models_max_len_is_refused_before_any_work(short):
    count = []
    handle = short.register_forward_pre_hook(lambda *_: count.append(1))
    message = (
        "the longest prompt (prompts[1], 10 tokens) plus steps (7) is 17 positions, "
        "more than model.max_len (16)"
    )
    with raises(ValueError, message):
        generate(short, [[1, 2], [3] * 10], 7)
    handle.remove()
    assert count == []


def test_a_prompt_and_steps_filling_max_len_exactly_generate(short):
    assert generate(short, [[1, 2], [3] * 10], 6).shape == (2, 6)
    assert beam_search(short, [3] * 10, 6, beams=2)[0].shape == (2, 6)


def test_beam_search_past_the_models_max_len_is_refused(short):
    message = "the prompt (10 tokens) plus steps (7) is 17 positions, more than model.max_len (16)"
    with raises(ValueError, message):
        beam_search(short, [3] * 10, 7, beams=2)


def test_a_cache_too_short_for_prompt_and_steps_is_refused(model, calls):
    message = (
        "max_len (10) must be at least the longest prompt (prompts[0], 5 tokens) plus steps (6), "
        "11: each cache holds every position"
    )
    with raises(ValueError, message):
        generate(model, PROMPTS, 6, max_len=10)
    assert calls == []


def test_generating_no_steps_gives_an_empty_row_per_prompt(model):
    new = generate(model, PROMPTS, 0)
    assert new.shape == (3, 0)
    assert new.dtype == torch.long


def test_beam_search_of_no_steps_gives_beams_empty_continuations(model):
    seqs, scores = beam_search(model, [1, 2], 0, 3)
    assert seqs.shape == (3, 0)  # [beams, steps]
    assert scores.tolist() == [0.0, 0.0, 0.0]


def test_beam_search_refuses_a_list_of_prompts(model, calls):
    message = (
        "prompt must be one prompt, a list of token ids, got a list of 2 lists: "
        "beam_search searches one prompt at a time"
    )
    with raises(TypeError, message):
        beam_search(model, [[1, 2], [3]], 3, 2)
    assert calls == []


def test_beam_search_refuses_more_beams_than_the_vocabulary(model, calls):
    message = (
        "beams (14) must be at most model.vocab_size (13): the first step has vocab_size candidates"
    )
    with raises(ValueError, message):
        beam_search(model, [1, 2], 3, 14)
    assert calls == []


def test_beam_search_keeps_as_many_beams_as_the_vocabulary(model):
    seqs, scores = beam_search(model, [1, 2], 2, 13)
    assert seqs.shape == (13, 2)
    assert scores.shape == (13,)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda m: generate(m, [[1, 13]], 3),
            ValueError,
            "prompts[0][1] must be a token id in 0 .. vocab_size - 1 (12), got 13",
        ),
        (
            lambda m: generate(m, [[1], [-1]], 3),
            ValueError,
            "prompts[1][0] must be a non-negative int, got -1",
        ),
        (
            lambda m: generate(m, [[1.0]], 3),
            TypeError,
            "prompts[0][0] must be an int, got float (1.0)",
        ),
        (
            lambda m: generate(m, [[True]], 3),
            TypeError,
            "prompts[0][0] must be an int, got bool (True)",
        ),
        (
            lambda m: beam_search(m, [13], 3, 2),
            ValueError,
            "prompt[0] must be a token id in 0 .. vocab_size - 1 (12), got 13",
        ),
        (
            lambda m: beam_search(m, [], 3, 2),
            ValueError,
            "prompt must hold at least one token id, got []",
        ),
    ],
    ids=["too-large", "negative", "float", "bool", "beam-too-large", "beam-empty"],
)
def test_token_ids_outside_the_vocabulary_are_refused_by_position(
    model, calls, call, error, message
):
    with raises(error, message):
        call(model)
    assert calls == []


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda m: generate(m, [[1]], 3.0), TypeError, "steps must be an int, got float (3.0)"),
        (lambda m: generate(m, [[1]], True), TypeError, "steps must be an int, got bool (True)"),
        (lambda m: generate(m, [[1]], -1), ValueError, "steps must be a non-negative int, got -1"),
        (lambda m: generate(m, [[1]], 3, left=1), TypeError, "left must be a bool, got int (1)"),
        (
            lambda m: generate(m, [[1]], 3, temperature="1"),
            TypeError,
            "temperature must be a float, got str ('1')",
        ),
        (
            lambda m: generate(m, [[1]], 3, temperature=-1.0),
            ValueError,
            "temperature must be 0 (greedy) or positive, got -1.0",
        ),
        (
            lambda m: generate(m, [[1]], 3, temperature=1.0, generator=42),
            TypeError,
            "generator must be a torch.Generator or None, got int",
        ),
        (
            lambda m: generate(m, [[1]], 3, max_len=4.0),
            TypeError,
            "max_len must be an int, got float (4.0)",
        ),
        (
            lambda m: generate(m, torch.tensor([[1, 2]]), 3),
            TypeError,
            "prompts must be a list of prompts, got a Tensor: pass prompts.tolist()",
        ),
        (
            lambda m: generate(m, [1, 2], 3),
            TypeError,
            "prompts must be a list of prompts (each a list of token ids), "
            "got a list of ints [1, 2]: "
            "one prompt is written [[1, 2]]",
        ),
        (
            lambda m: generate(m, [torch.tensor([1, 2])], 3),
            TypeError,
            "prompts[0] must be a list of token ids, got a Tensor: pass prompts[0].tolist()",
        ),
        (lambda m: beam_search(m, [1], 3, 2.0), TypeError, "beams must be an int, got float (2.0)"),
        (lambda m: beam_search(m, [1], 3, 0), ValueError, "beams must be a positive int, got 0"),
        (lambda m: beam_search(m, [1], "3", 2), TypeError, "steps must be an int, got str ('3')"),
    ],
    ids=[
        "steps-float",
        "steps-bool",
        "steps-negative",
        "left-int",
        "temperature-str",
        "temperature-negative",
        "generator-int",
        "max_len-float",
        "prompts-tensor",
        "prompts-flat",
        "prompt-tensor",
        "beams-float",
        "beams-zero",
        "beam-steps-str",
    ],
)
def test_arguments_of_the_wrong_type_or_value_are_named(model, calls, call, error, message):
    with raises(error, message):
        call(model)
    assert calls == []


def test_a_model_without_the_protocol_is_refused_naming_what_it_lacks():
    message = (
        "model must be an nn.Module with blocks, vocab_size and a forward taking "
        "(ids, positions=, attn_mask=, cache=), such as mha.decoder.Decoder, "
        "got Linear (it has no blocks and no vocab_size)"
    )
    with raises(TypeError, message):
        generate(torch.nn.Linear(2, 2), [[1]], 3)


class Tied(Decoder):
    """The protocol, not the class: no ``head``, the logits from the token embedding."""

    def __init__(self):
        super().__init__(vocab_size=13, hidden_size=16, heads_num=4, max_len=32)
        del self.head

    def forward(self, ids, *, positions=None, attn_mask=None, cache=None):
        if positions is None:
            start = 0 if cache is None else len(cache)
            positions = torch.arange(start, start + ids.size(1))
        x = self.tokens(ids) + self.positions(positions)
        for block, layer in zip(self.blocks, cache.layers, strict=True):
            x = block(x, attn_mask=attn_mask, cache=layer)
        return self.norm(x) @ self.tokens.weight.T  # [batch_size, q_len, vocab_size]


def test_a_model_without_a_head_generates_through_the_protocol():
    torch.manual_seed(0)
    tied = Tied().eval()
    assert generate(tied, PROMPTS, 4).shape == (3, 4)
    assert beam_search(tied, [1, 2], 4, 3)[0].shape == (3, 4)


@pytest.mark.parametrize(
    ("sizes", "error", "message"),
    [
        ({"vocab_size": 0}, ValueError, "vocab_size must be a positive int, got 0"),
        ({"num_layers": 0}, ValueError, "num_layers must be a positive int, got 0"),
        ({"max_len": 8.0}, TypeError, "max_len must be an int, got float (8.0)"),
    ],
    ids=["vocab_size", "num_layers", "max_len"],
)
def test_the_decoders_sizes_are_checked_at_construction(sizes, error, message):
    with raises(error, message):
        Decoder(**{"vocab_size": 13, "hidden_size": 16, "heads_num": 4, **sizes})


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda m: m(torch.tensor([[1.0, 2.0]])),
            TypeError,
            "ids must be an integer tensor of shape [batch_size, q_len], got torch.float32",
        ),
        (
            lambda m: m(torch.tensor([1, 2])),
            ValueError,
            "ids must be 2-D [batch_size, q_len], got shape [2]",
        ),
        (
            lambda m: m(torch.tensor([[1, 13]])),
            ValueError,
            "ids must lie in 0 .. vocab_size - 1 (12), got [[1, 13]]",
        ),
        (
            lambda m: m(torch.tensor([[1, 2]]), positions=torch.tensor([15, 16])),
            ValueError,
            "positions must lie in 0 .. max_len - 1 (15), got [15, 16]",
        ),
        (
            lambda m: m(torch.tensor([[1, 2]]), positions=torch.tensor([0, 1, 2])),
            ValueError,
            "positions must have shape [batch_size, q_len] [1, 2] or [q_len] [2], got [3]",
        ),
        (
            lambda m: m(torch.tensor([[1] * 17])),
            ValueError,
            "len(cache) (0) plus q_len (17) is 17 positions, more than max_len (16)",
        ),
        (
            lambda m: m(torch.tensor([[1]]), cache=ModelCache(1)),
            ValueError,
            "cache must have one layer per block (2), got 1",
        ),
    ],
    ids=[
        "float-ids",
        "1-D-ids",
        "id-too-large",
        "position-too-large",
        "positions-shape",
        "too-long",
        "cache-layers",
    ],
)
def test_the_decoders_forward_checks_its_input(short, call, error, message):
    with raises(error, message):
        call(short)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_on_a_gpu_generation_checks_the_generators_device_and_runs():
    torch.manual_seed(0)
    gpu = Decoder(vocab_size=13, hidden_size=16, heads_num=4, kv_heads=2).cuda().eval()
    message = "generator must be on the model's device (cuda:0), got cpu"
    with raises(ValueError, message):
        generate(gpu, PROMPTS, 3, temperature=1.0, generator=torch.Generator())
    with raises(ValueError, "prompts[0][0] must be a token id in 0 .. vocab_size - 1 (12), got 13"):
        generate(gpu, [[13]], 3)
    new = generate(gpu, PROMPTS, 4, temperature=1.0, generator=torch.Generator("cuda"))
    assert new.shape == (3, 4)
    assert new.device.type == "cuda"
