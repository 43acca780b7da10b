"""The options of ``mha.full.MHA`` are declared once (``mha.full.Options``), and every consumer
carries, maps or refuses each of them.

A new option is one field of ``Options`` and one keyword of ``MHA``. This checker then names each
place that does not know it yet:

- ``MHA`` itself: its keyword arguments are the fields, in order, with the same defaults, and
  ``MHA.options`` reads every one back.
- ``mha.parallel.heads_on_rank``: every part of a split model keeps each option but the ones a
  rank sets for itself (``SET_PER_RANK``), and the parts' outputs add up to the model's.
- ``mha.interop.to_torch``: each field is mapped (``TO_TORCH_MAPS``: the converted module gives
  the same output) or refused (``TO_TORCH_REFUSES``: a ``ValueError`` that names it).
- ``mha.interop.from_hf``: each field is filled from the transformers layer (``FROM_HF_FILLS``) or
  left at its default (``FROM_HF_DEFAULTS``).
- The shape-comment checker: some run of ``RUNS`` sets the field to another value than its default,
  so the lines it adds have their shape comments checked.

Each check runs a module built with ``EXAMPLES[field]``, a value other than the default: a field
without an example is reported too. The consumers are arguments of ``check_options``, so a test can
plant one that ignores a field (``tests/test_options.py``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import MISSING, fields, replace
from typing import Any

import torch

import mha.full
import mha.interop
import mha.parallel
from mha.rope import RotaryEmbedding
from mha_site.runs import RUNS

# The options a rank of mha.parallel.heads_on_rank sets for itself: its share of the heads, and
# the biases (W_o's only on rank 0, so that the sum over the ranks adds it once).
SET_PER_RANK = ("heads_num", "kv_heads", "bias")

# For each field, the keywords of an MHA(HIDDEN, HEADS, ...) in which it is not the default (a
# function, so that a module such as a RotaryEmbedding is new each time). The two sizes have none:
# every example sets them.
HIDDEN, HEADS = 20, 4
EXAMPLES: dict[str, Callable[[], dict[str, Any]]] = {
    "kv_heads": lambda: {"kv_heads": 2},
    "dropout": lambda: {"dropout": 0.25},
    "bias": lambda: {"bias": False},
    "fast": lambda: {"fast": False},
    "context_size": lambda: {"context_size": 12},
    "head_size": lambda: {"head_size": 6},
    "scale": lambda: {"scale": 0.3},
    "qk_norm": lambda: {"qk_norm": True},
    "norm_eps": lambda: {"qk_norm": True, "norm_eps": 0.25},
    "rope": lambda: {"rope": RotaryEmbedding(4)},
    "window": lambda: {"window": 2},
    "chunk": lambda: {"chunk": 2},
    "softcap": lambda: {"softcap": 2.0},
    "sinks": lambda: {"sinks": True},
    "gate": lambda: {"gate": True},
    "temperature": lambda: {"temperature": (0.5, 2.0)},
}
REQUIRED = ("hidden_size", "heads_num")


def example_model(name: str) -> torch.nn.Module:
    """An ``MHA`` in float64 and evaluation mode, with ``EXAMPLES[name]``; weights seeded, and
    scaled up so that the attention weights are far from uniform."""
    torch.manual_seed(0)
    model = mha.full.MHA(HIDDEN, HEADS, **EXAMPLES[name]()).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3)
    return model


def example_inputs(model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The query input and, when the keys' width is not the queries', a context: causal
    self-attention or cross-attention, so that each option's branch runs."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, model.hidden_size, dtype=torch.float64, generator=generator)
    if model.context_size == model.hidden_size:
        return x, None
    return x, torch.randn(2, 7, model.context_size, dtype=torch.float64, generator=generator)


def example_call(model: torch.nn.Module) -> Callable[[torch.nn.Module], torch.Tensor]:
    """A call of ``example_inputs``: ``m(x, is_causal=True)`` or ``m(x, context)``."""
    x, context = example_inputs(model)
    return (lambda m: m(x, is_causal=True)) if context is None else (lambda m: m(x, context))


def _declared(options_cls: type) -> list[str]:
    return [f.name for f in fields(options_cls)]


def check_mha(options_cls: type = mha.full.Options, cls: type = mha.full.MHA) -> list[str]:
    """``cls``'s keywords are the fields of ``options_cls``, with their defaults, and
    ``cls.options`` gives each one back."""
    problems = []
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    declared = [(f.name, None if f.default is MISSING else f.default) for f in fields(options_cls)]
    given = [
        (p.name, None if p.default is inspect.Parameter.empty else p.default) for p in parameters
    ]
    if given != declared:
        problems.append(
            f"mha/full.py: MHA's arguments {given} are not the fields of Options {declared} "
            "(the same names, order and defaults)"
        )
    model = cls(HIDDEN, HEADS)
    missing = [name for name in _declared(options_cls) if not hasattr(model, name)]
    if missing:
        problems.append(f"mha/full.py: MHA keeps no attribute for the option(s) {missing}")
    return problems


def check_examples(options_cls: type = mha.full.Options) -> list[str]:
    """Every field but the sizes has an example, which changes that field."""
    problems = []
    for name in _declared(options_cls):
        if name in REQUIRED:
            continue
        if name not in EXAMPLES:
            problems.append(
                f"mha_site/checkers/options.py: no EXAMPLES entry for the option {name}"
            )
        elif name not in example_model(name).options.changed():
            problems.append(f"mha_site/checkers/options.py: EXAMPLES[{name!r}] leaves it default")
    return problems


def check_heads_on_rank(
    options_cls: type = mha.full.Options, heads_on_rank: Callable = mha.parallel.heads_on_rank
) -> list[str]:
    """Split each example over two ranks: every option but ``SET_PER_RANK`` carried, and the
    parts' outputs summed equal to the model's."""
    problems = []
    for name in _declared(options_cls):
        if name not in EXAMPLES:
            continue
        model = example_model(name)
        call = example_call(model)
        parts = [heads_on_rank(model, rank, 2) for rank in range(2)]
        for rank, part in enumerate(parts):
            theirs = replace(model.options, **{n: getattr(part.options, n) for n in SET_PER_RANK})
            dropped = [
                n for n in _declared(type(theirs)) if getattr(theirs, n) != getattr(part.options, n)
            ]
            if dropped:
                problems.append(
                    f"mha/parallel/heads.py: heads_on_rank(MHA(..., {name}=...), {rank}, 2) "
                    f"does not carry the option(s) {dropped}"
                )
        with torch.no_grad():
            error = (sum(call(part) for part in parts) - call(model)).abs().max().item()
        if not error < 1e-10:
            problems.append(
                f"mha/parallel/heads.py: with {name}, heads_on_rank's two parts add up to "
                f"{error:.3g} off the model's output"
            )
    return problems


def check_to_torch(
    options_cls: type = mha.full.Options,
    to_torch: Callable = mha.interop.to_torch,
    maps: dict = mha.interop.TO_TORCH_MAPS,
    refuses: dict = mha.interop.TO_TORCH_REFUSES,
) -> list[str]:
    """Each field mapped (the same output) or refused (a ``ValueError`` that names it)."""
    problems = []
    for name in _declared(options_cls):
        if (name in maps) == (name in refuses):
            where = "both" if name in maps else "neither"
            problems.append(
                f"mha/interop.py: the option {name} is in {where} of TO_TORCH_MAPS and "
                "TO_TORCH_REFUSES"
            )
            continue
        if name not in EXAMPLES:
            continue
        model = example_model(name)
        call = example_call(model)
        try:
            converted = to_torch(model)
        except ValueError as e:
            if name in maps or name not in str(e):
                problems.append(f"mha/interop.py: to_torch refuses the option {name}: {e}")
            continue
        if name in refuses:
            problems.append(f"mha/interop.py: to_torch does not refuse the option {name}")
            continue

        x, context = example_inputs(model)
        source = x if context is None else context
        with torch.no_grad():
            mask = None if context is not None else ~mha.full.causal_mask(x.size(1), x.size(1))
            theirs = converted(x, source, source, attn_mask=mask, need_weights=False)[0]
            error = (theirs - call(model)).abs().max().item()
        if not error < 1e-10:
            problems.append(
                f"mha/interop.py: to_torch maps the option {name}, but its module is {error:.3g} "
                "off the model's output"
            )
    return problems


def check_from_hf(
    options_cls: type = mha.full.Options,
    fills: dict = mha.interop.FROM_HF_FILLS,
    defaults: dict = mha.interop.FROM_HF_DEFAULTS,
) -> list[str]:
    """Each field filled from the transformers layer or declared left at its default."""
    return [
        f"mha/interop.py: the option {name} is in {'both' if name in fills else 'neither'} of "
        "FROM_HF_FILLS and FROM_HF_DEFAULTS"
        for name in _declared(options_cls)
        if (name in fills) == (name in defaults)
    ]


def check_runs(options_cls: type = mha.full.Options, runs: list | None = None) -> list[str]:
    """Some shape-comment run sets each field to another value than its default."""
    changed = {name for run in (RUNS if runs is None else runs) for name in run.options().changed()}
    return [
        f"mha_site/runs.py: no run of RUNS sets the option {name}, so its "
        "lines' shape comments are checked by none"
        for name in _declared(options_cls)
        if name not in REQUIRED and name not in changed
    ]


def check_options(options_cls: type = mha.full.Options, **consumers: Callable) -> list[str]:
    """Every check above, with ``consumers`` (``heads_on_rank=``, ``to_torch=``) in place of the
    package's own."""
    return [
        *check_mha(options_cls),
        *check_examples(options_cls),
        *check_heads_on_rank(options_cls, **_only(consumers, "heads_on_rank")),
        *check_to_torch(options_cls, **_only(consumers, "to_torch")),
        *check_from_hf(options_cls),
        *check_runs(options_cls),
    ]


def _only(consumers: dict, name: str) -> dict:
    return {name: consumers[name]} if name in consumers else {}


def check() -> list[str]:
    """Every option of ``mha.full.MHA`` declared once and known to every consumer."""
    return check_options()
