"""The options of ``mha.full.MHA`` are declared once (``mha.full.Options``), and the options checker
(``mha_site/checkers/options.py``) names every consumer that does not carry, map or refuse one."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

import mha.full
import mha.interop
import mha.parallel
from mha.full import MHA, Options
from mha.rope import RotaryEmbedding
from mha_site.checkers import options as checker
from mha_site.runs import RUNS


def test_every_option_is_declared_once_and_known_to_every_consumer():
    assert checker.check() == []


def test_options_give_back_the_module_they_build():
    rope = RotaryEmbedding(4)
    model = MHA(20, 4, kv_heads=2, bias=("W_q",), rope=rope, window=3)
    options = model.options
    assert options == Options(
        20,
        4,
        kv_heads=2,
        bias=("W_q",),
        context_size=20,
        head_size=5,
        rope=rope,
        window=3,
    )
    assert MHA.from_options(options).options == options
    assert options.changed() == ["kv_heads", "bias", "rope", "window"]


def test_a_head_size_that_does_not_divide_the_width_is_changed_by_necessity():
    assert MHA(11, 4, head_size=9).options.changed() == ["head_size"]


def test_print_shows_the_heads_then_the_options_that_are_not_the_default():
    model = MHA(20, 4, kv_heads=2, window=3, scale=0.5)
    assert model.extra_repr() == "20, 4, kv_heads=2, head_size=5, scale=0.5, window=3"
    assert MHA(20, 4).extra_repr() == "20, 4, kv_heads=4, head_size=5"
    assert MHA(20, 4, head_size=8, bias=False).extra_repr() == (
        "20, 4, kv_heads=4, head_size=8, bias=False"
    )


def test_print_of_an_mla_shows_its_ranks_and_head_dims():
    from mha.mla import MLA

    m = MLA(32, 4, kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5)
    assert m.extra_repr() == (
        "32, 4, q_lora_rank=None, kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4, "
        "v_head_dim=5, scale=0.316228"
    )


def test_from_options_refuses_something_else():
    with pytest.raises(TypeError, match=re.escape("options must be a mha.full.Options, got dict")):
        MHA.from_options({"hidden_size": 20, "heads_num": 4})


# ---- Planted faults: the checker must name them ----------------------------------------------


def planted_options():
    """``Options`` with one more field, ``planted``, that no consumer knows."""
    declared = [(f.name, f.type, f) for f in dataclasses.fields(Options)]
    planted = ("planted", "float | None", dataclasses.field(default=None))
    return dataclasses.make_dataclass("Options", [*declared, planted], frozen=True)


def test_a_planted_option_is_reported_for_every_consumer_that_does_not_know_it():
    problems = checker.check_options(planted_options())
    about = [p for p in problems if "planted" in p]
    assert any(p.startswith("mha/full.py: MHA's arguments") for p in problems), problems
    assert "mha_site/checkers/options.py: no EXAMPLES entry for the option planted" in about
    assert (
        "mha/interop.py: the option planted is in neither of TO_TORCH_MAPS and TO_TORCH_REFUSES"
        in about
    )
    assert (
        "mha/interop.py: the option planted is in neither of FROM_HF_FILLS and FROM_HF_DEFAULTS"
        in about
    )
    assert any(p.startswith("mha_site/runs.py: no run") for p in about), about


def heads_on_rank_by_hand(model, rank, world):
    """``heads_on_rank`` as it was before the options were declared once: every option named by
    hand, and ``window`` forgotten."""
    part = mha.parallel.heads_on_rank(model, rank, world)
    options = dataclasses.replace(part.options, window=None)
    copy = MHA.from_options(options).to(torch.float64).eval()
    copy.load_state_dict(part.state_dict())
    return copy


def test_a_heads_on_rank_that_drops_an_option_is_reported_with_the_error_it_makes():
    problems = checker.check_heads_on_rank(heads_on_rank=heads_on_rank_by_hand)
    window = [p for p in problems if "heads_on_rank(MHA(..., window=...)" in p]
    assert window == [
        f"mha/parallel/heads.py: heads_on_rank(MHA(..., window=...), {rank}, 2) does not "
        "carry the option(s) ['window']"
        for rank in (0, 1)
    ]
    assert any(p.startswith("mha/parallel/heads.py: with window,") for p in problems)
    assert all("window" in p for p in problems), problems


def test_a_to_torch_that_ignores_an_option_is_reported():
    def to_torch_ignoring_rope(m):
        if m.rope is None:
            return mha.interop.to_torch(m)
        plain = MHA.from_options(dataclasses.replace(m.options, rope=None)).double().eval()
        plain.load_state_dict(m.state_dict())
        return mha.interop.to_torch(plain)

    problems = checker.check_to_torch(to_torch=to_torch_ignoring_rope)
    assert problems == ["mha/interop.py: to_torch does not refuse the option rope"]


def test_an_example_that_leaves_its_option_default_is_reported(monkeypatch):
    monkeypatch.setitem(checker.EXAMPLES, "scale", lambda: {"scale": None})
    assert "mha_site/checkers/options.py: EXAMPLES['scale'] leaves it default" in (
        checker.check_examples()
    )


def test_a_run_list_that_never_sets_an_option_is_reported():
    without_window = [r for r in RUNS if r.window is None]
    assert checker.check_runs(runs=without_window) == [
        "mha_site/runs.py: no run of RUNS sets the option window, so its "
        "lines' shape comments are checked by none"
    ]
