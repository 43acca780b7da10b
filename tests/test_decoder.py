"""``mha.decoder``: the chapter's model and its generation, against recomputation.

Generation in a batch must give each prompt the tokens it gets alone, padded on either side;
beam search through a reordered cache must find what recomputing every beam's history finds.
"""

from __future__ import annotations

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
