"""``mha.decoder``: the chapter's models and their generation, against recomputation.

Generation in a batch must give each prompt the tokens it gets alone, padded on either side, with
either model and any module that has what ``LanguageModel`` says; a row stops at
``eos_token_id``; sampling with ``top_k`` and ``top_p`` draws what a cache-free sampler draws, and
only allowed tokens; beam search of a batch through a reordered cache must find what recomputing
every beam's history finds. ``tests/test_llama.py`` holds the Llama model against transformers.
"""

from __future__ import annotations

import re

import pytest
import torch
from support import assert_close

from mha.decoder import Decoder, LanguageModel, Llama, beam_search, generate, positions_of
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


# Generation on both models, through the protocol: float64, so that a cached and a recomputed
# run agree to about 1e-16 and no near-tie between two tokens or beams can split them.

VOCAB = 13


@pytest.fixture(scope="module", params=["decoder", "llama"])
def lm(request):
    """The GPT-2 style Decoder and a Llama with a sliding window on its second block (the
    prompts and steps below decode past it), q/k norm and tied embeddings (no head)."""
    torch.manual_seed(0)
    if request.param == "decoder":
        built = Decoder(vocab_size=VOCAB, hidden_size=16, heads_num=4, kv_heads=2)
    else:
        built = Llama(
            VOCAB, 16, 4, kv_heads=2, windows=[None, 3], qk_norm=True, tied=True, mlp_size=24
        )
    return built.double().eval()


def padded(prompts):
    """``prompts`` padded on the left: ids ``[batch_size, width]``, their key mask."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + list(p) for p in prompts])
    held = padding_mask(torch.tensor([len(p) for p in prompts]), width, left=True)
    return ids, held


def next_logits_recomputed(model, seqs):
    """Each sequence's next-token logits ``[batch_size, vocab_size]``, without a cache: the whole
    left-padded batch again."""
    ids, held = padded(seqs)
    return model(ids, positions=positions_of(held), attn_mask=held)[:, -1]


def test_both_models_meet_the_protocol(lm):
    assert isinstance(lm, LanguageModel)
    assert (lm.vocab_size, lm.num_layers) == (VOCAB, 2)


def test_a_padded_batch_of_either_model_generates_what_each_prompt_generates_alone(lm):
    batch = generate(lm, PROMPTS, steps=8)
    with torch.no_grad():
        alone = torch.stack([greedy_alone(lm, p, 8) for p in PROMPTS])
    assert torch.equal(batch, alone)


class Bigram(torch.nn.Module):
    """The protocol and nothing else: no blocks, no head, no attention; the next token's logits
    depend on the last token only, so the cache passes unused."""

    vocab_size, max_len, num_layers = VOCAB, None, 1

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(VOCAB, VOCAB)

    def forward(self, ids, *, positions=None, attn_mask=None, cache=None):
        return self.table(ids)  # [batch_size, q_len, vocab_size]


def test_any_module_with_the_protocol_generates_and_searches():
    torch.manual_seed(0)
    bigram = Bigram()
    assert isinstance(bigram, LanguageModel)
    new = generate(bigram, [[3], [5, 7]], steps=4)
    chain = [[3], [7]]
    for _ in range(4):
        chain = [[*c, int(bigram.table.weight[c[-1]].argmax())] for c in chain]
    assert new.tolist() == [c[1:] for c in chain]
    assert beam_search(bigram, [[3], [5, 7]], steps=3, beams=2)[0].shape == (2, 2, 3)


# eos_token_id: a row that produced it stops, later tokens are pad_token_id, and generation ends
# when every row has stopped.


def greedy_until(model, prompt, steps, eos, pad):
    """Greedy decoding without a cache, stopping at ``eos``; the rest of ``steps`` is ``pad``."""
    new = []
    with torch.no_grad():
        for _ in range(steps):
            token = int(model(torch.tensor([prompt + new]))[0, -1].argmax())
            new.append(token)
            if token == eos:
                break
    return new + [pad] * (steps - len(new))


def test_a_row_that_produces_eos_stops_and_gets_the_pad_id_after_it(lm):
    free = generate(lm, PROMPTS, steps=8)
    eos = int(free[0, 2])  # what the first row produces third: it stops there
    new = generate(lm, PROMPTS, steps=8, eos_token_id=eos, pad_token_id=0)
    expected = [greedy_until(lm, p, 8, eos, 0) for p in PROMPTS]
    ends = [row.index(eos) + 1 if eos in row else 8 for row in expected]
    assert new.tolist() == [row[: max(ends)] for row in expected]  # until the last row stops
    stopped_at = free[0].tolist().index(eos)
    assert new[0, stopped_at + 1 :].eq(0).all()


def test_generation_ends_when_every_row_has_stopped():
    torch.manual_seed(0)
    bigram = Bigram()
    with torch.no_grad():  # a bigram model whose every token leads to token 4
        bigram.table.weight.zero_()
        bigram.table.weight[:, 4] = 1.0
    calls = []
    bigram.register_forward_pre_hook(lambda *_: calls.append(1))
    new = generate(bigram, [[1], [2, 3]], steps=10, eos_token_id=[9, 4])
    assert new.tolist() == [[4], [4]]  # both rows stop at their first token
    assert calls == [1]  # the prefill only: no step once every row has stopped


def test_without_a_pad_id_a_stopped_row_repeats_the_first_eos_id(lm):
    free = generate(lm, PROMPTS, steps=8)
    eos = int(free[1, 1])
    new = generate(lm, PROMPTS, steps=8, eos_token_id=[eos, VOCAB - 1])
    row = new[1].tolist()
    assert row[: row.index(eos) + 1] == free[1, : row.index(eos) + 1].tolist()
    assert set(row[row.index(eos) :]) == {eos}


# top_k and top_p: tokens only from the allowed set, and the same draws as a sampler that
# recomputes everything with the same generator.


def allowed_set(logits, top_k, top_p):
    """The tokens that sampling with ``top_k`` and ``top_p`` may draw, from one row's scaled
    logits, written out one token at a time: the ``top_k`` largest (ties kept), then the most
    likely of those until their probabilities reach ``top_p``."""
    ranked = sorted(range(len(logits)), key=lambda i: -float(logits[i]))
    if top_k is not None:
        kth = float(logits[ranked[top_k - 1]])
        ranked = [i for i in ranked if float(logits[i]) >= kth]
    if top_p is None:
        return set(ranked)
    probs = torch.softmax(logits[ranked].double(), dim=-1).tolist()
    kept, total = [], 0.0
    for token, p in zip(ranked, probs, strict=True):
        if total >= top_p:
            break
        kept.append(token)
        total += p
    return set(kept)


def sample_recomputing(model, prompts, steps, temperature, top_k, top_p, generator):
    """generate's sampling without a cache: the whole batch again at every step, each row's
    draw from the softmax over its allowed set."""
    seqs = [list(p) for p in prompts]
    with torch.no_grad():
        for _ in range(steps):
            scaled = next_logits_recomputed(model, seqs).float() / temperature
            allowed = torch.tensor(
                [[i in allowed_set(row, top_k, top_p) for i in range(VOCAB)] for row in scaled]
            )
            probs = torch.softmax(scaled.masked_fill(~allowed, float("-inf")), dim=-1)
            drawn = torch.multinomial(probs, 1, generator=generator)[:, 0]  # [batch_size]
            for seq, token in zip(seqs, drawn.tolist(), strict=True):
                seq.append(token)
    return torch.tensor([seq[len(p) :] for seq, p in zip(seqs, prompts, strict=True)])


FILTERS = [(None, None), (3, None), (None, 0.6), (4, 0.7)]


@pytest.mark.parametrize(("top_k", "top_p"), FILTERS, ids=["all", "k3", "p0.6", "k4-p0.7"])
def test_sampling_draws_what_a_cache_free_sampler_draws_with_the_same_generator(lm, top_k, top_p):
    options = dict(temperature=1.5, top_k=top_k, top_p=top_p)
    new = generate(lm, PROMPTS, 10, generator=torch.Generator().manual_seed(3), **options)
    again = sample_recomputing(
        lm, PROMPTS, 10, generator=torch.Generator().manual_seed(3), **options
    )
    assert torch.equal(new, again)


@pytest.mark.parametrize(("top_k", "top_p"), FILTERS[1:], ids=["k3", "p0.6", "k4-p0.7"])
def test_top_k_and_top_p_draw_only_allowed_tokens(lm, top_k, top_p):
    prompts = [[i % VOCAB, (3 * i) % VOCAB] for i in range(12)]
    seed = torch.Generator().manual_seed(0)
    new = generate(lm, prompts, 10, temperature=2.0, top_k=top_k, top_p=top_p, generator=seed)
    seqs, outside, largest = [list(p) for p in prompts], 0, 0
    with torch.no_grad():
        for step in range(10):
            scaled = next_logits_recomputed(lm, seqs).float() / 2.0
            for seq, row, token in zip(seqs, scaled, new[:, step].tolist(), strict=True):
                outside += token not in allowed_set(row, top_k, top_p)
                largest += token == int(row.argmax())
                seq.append(token)
    assert outside == 0
    assert largest < new.numel()  # it sampled: not every token was the most likely


# Beam search for a batch of prompts, against a search that recomputes every beam's history.


def beam_search_recomputing(model, prompt, steps, beams, eos=(), pad=0):
    """One prompt's beam search without a cache: every beam's whole sequence again at each
    step; a finished beam stays a candidate, continued by ``pad`` at log-probability 0."""
    kept = [([], 0.0, False)]  # (tokens, score, finished)
    with torch.no_grad():
        for _ in range(steps):
            candidates = []
            for tokens, score, finished in kept:
                if finished:
                    candidates.append(([*tokens, pad], score, True))
                    continue
                logp = model(torch.tensor([prompt + tokens]))[0, -1].log_softmax(-1)
                candidates += [
                    ([*tokens, t], score + float(logp[t]), t in eos) for t in range(VOCAB)
                ]
            kept = sorted(candidates, key=lambda c: -c[1])[:beams]
            if eos and all(finished for _, _, finished in kept):
                break
    return [tokens for tokens, _, _ in kept], [score for _, score, _ in kept]


def test_beam_search_of_a_batch_finds_what_recomputing_each_prompt_finds(lm):
    seqs, scores = beam_search(lm, PROMPTS, steps=5, beams=4)
    assert seqs.shape == (3, 4, 5)  # [batch_size, beams, steps]
    assert scores.shape == (3, 4)  # [batch_size, beams]
    for row, prompt in enumerate(PROMPTS):
        expected, expected_scores = beam_search_recomputing(lm, prompt, 5, 4)
        assert seqs[row].tolist() == expected
        assert_close(scores[row], torch.tensor(expected_scores, dtype=torch.float64))


def test_beam_scores_are_the_summed_log_probabilities_of_their_tokens(lm):
    seqs, scores = beam_search(lm, PROMPTS, steps=5, beams=3)
    with torch.no_grad():
        for row, prompt in enumerate(PROMPTS):
            for beam in range(3):
                whole = torch.tensor([prompt + seqs[row, beam].tolist()])
                logp = lm(whole)[0, len(prompt) - 1 : -1].log_softmax(-1)  # [steps, vocab_size]
                total = logp.gather(-1, seqs[row, beam][:, None]).sum()
                assert_close(scores[row, beam], total)
    assert (scores[:, :-1] >= scores[:, 1:]).all()  # best first


def test_finished_beams_keep_their_score_and_get_the_pad_id(lm):
    first, _ = beam_search(lm, PROMPTS, steps=6, beams=3)
    eos = int(first[0, 0, 1])  # the best beam of the first prompt ends at its second token
    seqs, scores = beam_search(lm, PROMPTS, steps=6, beams=3, eos_token_id=eos, pad_token_id=1)
    for row, prompt in enumerate(PROMPTS):
        expected, expected_scores = beam_search_recomputing(lm, prompt, 6, 3, eos=(eos,), pad=1)
        n = seqs.size(-1)  # the batch runs until every prompt's beams have finished
        assert seqs[row].tolist() == [(tokens + [1] * n)[:n] for tokens in expected]
        assert_close(scores[row], torch.tensor(expected_scores, dtype=torch.float64))
    finished = [beam for beam in seqs.flatten(0, 1).tolist() if eos in beam]
    assert finished  # the search met eos
    assert all(set(beam[beam.index(eos) + 1 :]) <= {1} for beam in finished)


def test_causal_blocks_changing_later_tokens_changes_no_earlier_logits(lm):
    """Each block calls its attention with is_causal=True: a block that left it at its
    default (False) would let position 0 see the tokens after it."""
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    later = ids.clone()
    later[0, 4:] = torch.tensor([7, 7, 8, 8])
    with torch.no_grad():
        assert_close(lm(later)[:, :4], lm(ids)[:, :4])


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
    assert beam_search(short, [[3] * 10], 6, beams=2)[0].shape == (1, 2, 6)


def test_beam_search_past_the_models_max_len_is_refused(short):
    message = (
        "the longest prompt (prompts[1], 10 tokens) plus steps (7) is 17 positions, "
        "more than model.max_len (16)"
    )
    with raises(ValueError, message):
        beam_search(short, [[1], [3] * 10], 7, beams=2)


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
    seqs, scores = beam_search(model, [[1, 2], [3]], 0, 3)
    assert seqs.shape == (2, 3, 0)  # [batch_size, beams, steps]
    assert scores.tolist() == [[0.0, 0.0, 0.0]] * 2


def test_beam_search_refuses_one_prompt_not_in_a_list(model, calls):
    message = (
        "prompts must be a list of prompts (each a list of token ids), got a list of ints "
        "[1, 2]: one prompt is written [[1, 2]]"
    )
    with raises(TypeError, message):
        beam_search(model, [1, 2], 3, 2)
    assert calls == []


def test_beam_search_refuses_more_beams_than_the_vocabulary(model, calls):
    message = (
        "beams (14) must be at most model.vocab_size (13): the first step has vocab_size candidates"
    )
    with raises(ValueError, message):
        beam_search(model, [[1, 2]], 3, 14)
    assert calls == []


def test_beam_search_keeps_as_many_beams_as_the_vocabulary(model):
    seqs, scores = beam_search(model, [[1, 2]], 2, 13)
    assert seqs.shape == (1, 13, 2)
    assert scores.shape == (1, 13)


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
            lambda m: beam_search(m, [[1], [13]], 3, 2),
            ValueError,
            "prompts[1][0] must be a token id in 0 .. vocab_size - 1 (12), got 13",
        ),
        (
            lambda m: beam_search(m, [[]], 3, 2),
            ValueError,
            "prompts[0] must hold at least one token id, got []",
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
        (
            lambda m: beam_search(m, [[1]], 3, 2.0),
            TypeError,
            "beams must be an int, got float (2.0)",
        ),
        (lambda m: beam_search(m, [[1]], 3, 0), ValueError, "beams must be a positive int, got 0"),
        (
            lambda m: beam_search(m, [[1]], "3", 2),
            TypeError,
            "steps must be an int, got str ('3')",
        ),
        (
            lambda m: generate(m, [[1]], 3, top_k=3),
            ValueError,
            "top_k (3) chooses among the tokens to sample from: it needs a temperature above 0, "
            "got temperature=0 (greedy)",
        ),
        (
            lambda m: generate(m, [[1]], 3, top_p=0.9),
            ValueError,
            "top_p (0.9) chooses among the tokens to sample from: it needs a temperature above 0, "
            "got temperature=0 (greedy)",
        ),
        (
            lambda m: generate(m, [[1]], 3, temperature=1.0, top_k=0),
            ValueError,
            "top_k must be a positive int, got 0",
        ),
        (
            lambda m: generate(m, [[1]], 3, temperature=1.0, top_k=14),
            ValueError,
            "top_k (14) must be at most model.vocab_size (13)",
        ),
        (
            lambda m: generate(m, [[1]], 3, temperature=1.0, top_k=2.0),
            TypeError,
            "top_k must be an int, got float (2.0)",
        ),
        (
            lambda m: generate(m, [[1]], 3, temperature=1.0, top_p=0.0),
            ValueError,
            "top_p must lie in (0, 1], got 0.0",
        ),
        (
            lambda m: generate(m, [[1]], 3, temperature=1.0, top_p=1.5),
            ValueError,
            "top_p must lie in (0, 1], got 1.5",
        ),
        (
            lambda m: generate(m, [[1]], 3, temperature=1.0, top_p="0.9"),
            TypeError,
            "top_p must be a float, got str ('0.9')",
        ),
        (
            lambda m: generate(m, [[1]], 3, eos_token_id=13),
            ValueError,
            "eos_token_id must be a token id in 0 .. vocab_size - 1 (12), got 13",
        ),
        (
            lambda m: generate(m, [[1]], 3, eos_token_id=[2, -1]),
            ValueError,
            "eos_token_id[1] must be a non-negative int, got -1",
        ),
        (
            lambda m: generate(m, [[1]], 3, eos_token_id=[]),
            ValueError,
            "eos_token_id must hold at least one token id, got []",
        ),
        (
            lambda m: generate(m, [[1]], 3, eos_token_id=True),
            TypeError,
            "eos_token_id must be an int, got bool (True)",
        ),
        (
            lambda m: beam_search(m, [[1]], 3, 2, pad_token_id=0),
            ValueError,
            "pad_token_id (0) is what a row gets after eos_token_id: give eos_token_id too, "
            "got eos_token_id=None",
        ),
        (
            lambda m: beam_search(m, [[1]], 3, 2, eos_token_id=2, pad_token_id=13),
            ValueError,
            "pad_token_id must be a token id in 0 .. vocab_size - 1 (12), got 13",
        ),
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
        "top_k-greedy",
        "top_p-greedy",
        "top_k-zero",
        "top_k-too-large",
        "top_k-float",
        "top_p-zero",
        "top_p-too-large",
        "top_p-str",
        "eos-too-large",
        "eos-list-negative",
        "eos-empty",
        "eos-bool",
        "pad-without-eos",
        "pad-too-large",
    ],
)
def test_arguments_of_the_wrong_type_or_value_are_named(model, calls, call, error, message):
    with raises(error, message):
        call(model)
    assert calls == []


def test_a_model_without_the_protocol_is_refused_naming_what_it_lacks():
    message = (
        "model must be an nn.Module with vocab_size, max_len, num_layers and a forward taking "
        "(ids, positions=, attn_mask=, cache=), the protocol mha.decoder.LanguageModel, such as "
        "mha.decoder.Decoder or mha.decoder.Llama, "
        "got Linear (it has no vocab_size and no max_len and no num_layers)"
    )
    with raises(TypeError, message):
        generate(torch.nn.Linear(2, 2), [[1]], 3)
    with raises(TypeError, message):
        beam_search(torch.nn.Linear(2, 2), [[1]], 3, 2)


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
    assert beam_search(tied, [[1, 2]], 4, 3)[0].shape == (1, 3, 4)


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
