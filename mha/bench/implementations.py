"""The implementations the benchmark compares: the one list, and how each is built and called.

Every case, the results file, the report and the site's performance page name an implementation
by ``Implementation.name``; the page labels it with ``en`` or ``zh``.

>>> [i.name for i in IMPLEMENTATIONS]
['annotated', 'pure', 'full-fast', 'full-math', 'torch']
>>> [i.name for i in IMPLEMENTATIONS if i.causal]
['full-fast', 'full-math', 'torch']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

import mha.annotated
import mha.full
import mha.pure
from mha.interop import to_torch


def _same_weights(cls: type[nn.Module]) -> Callable[[mha.full.MHA], nn.Module]:
    """A builder of ``cls`` holding the weights of the reference ``full-fast`` model."""

    def build(fast: mha.full.MHA) -> nn.Module:
        model = cls(fast.hidden_size, fast.heads_num)
        model.load_state_dict(fast.state_dict())
        return model

    return build


def _slow(fast: mha.full.MHA) -> nn.Module:
    model = mha.full.MHA(fast.hidden_size, fast.heads_num, fast=False)
    model.load_state_dict(fast.state_dict())
    return model


@dataclass(frozen=True)
class Implementation:
    name: str
    """Its name in the results file, the report and the page's data attributes."""
    en: str
    """Its label on the English page."""
    zh: str
    """Its label on the Chinese page."""
    build: Callable[[mha.full.MHA], nn.Module]
    """A model with the weights of the given ``full-fast`` model."""
    causal: bool
    """It takes ``is_causal=True``: measured in the causal forward too."""
    scores: bool
    """It writes the ``[batch, heads, L, L]`` scores out: its backward and memory stop at a
    length limit (``Config.max_backward_math_seq``, ``Config.max_memory_math_seq``)."""


IMPLEMENTATIONS = (
    Implementation(
        "annotated", "annotated", "注释版", _same_weights(mha.annotated.MHA), False, True
    ),
    Implementation("pure", "pure", "纯享版", _same_weights(mha.pure.MHA), False, True),
    Implementation("full-fast", "full, fast=True", "完整版 fast=True", lambda f: f, True, False),
    Implementation("full-math", "full, fast=False", "完整版 fast=False", _slow, True, True),
    Implementation(
        "torch", "nn.MultiheadAttention", "nn.MultiheadAttention", to_torch, True, False
    ),
)
NAMES = tuple(i.name for i in IMPLEMENTATIONS)
REFERENCE = "torch"
"""Every ratio divides by this implementation's figure, measured in the same run."""
BY_NAME = {i.name: i for i in IMPLEMENTATIONS}


def build_models(hidden: int, heads: int, device: str, dtype: torch.dtype) -> dict[str, nn.Module]:
    """Every implementation, in eval mode, all holding the same weights (seeded: the same in
    every call)."""
    torch.manual_seed(0)
    fast = mha.full.MHA(hidden, heads, fast=True)
    models = {i.name: i.build(fast) for i in IMPLEMENTATIONS}
    return {k: m.to(device=device, dtype=dtype).eval() for k, m in models.items()}


def causal_bool_mask(seq: int, device: str) -> torch.Tensor:
    """``nn.MultiheadAttention``'s convention: ``True`` = may NOT attend (above the diagonal)."""
    return torch.ones(seq, seq, dtype=torch.bool, device=device).triu(1)


def call(name: str, model: nn.Module, x: torch.Tensor, causal: bool, mask: torch.Tensor | None):
    """One forward of self-attention on ``x``, in ``name``'s convention; ``mask``: the causal
    ``[L, L]`` boolean mask ``nn.MultiheadAttention`` takes with ``is_causal=True``."""
    if name == REFERENCE:
        if causal:
            return model(x, x, x, attn_mask=mask, is_causal=True, need_weights=False)[0]
        return model(x, x, x, need_weights=False)[0]
    if causal:
        return model(x, is_causal=True)
    return model(x)


def padding_lengths(batch: int, seq: int, device: str) -> torch.Tensor:
    """The real lengths of the masked memory case: every other sequence half padding."""
    return torch.tensor([seq if i % 2 == 0 else seq // 2 for i in range(batch)], device=device)


def call_padded(name: str, model: nn.Module, x: torch.Tensor, lengths: torch.Tensor):
    """One forward with a padding mask, each in its own convention: ``mha`` takes the
    ``[batch, 1, 1, L]`` mask of ``mha.full.padding_mask`` (``True`` = may attend),
    ``nn.MultiheadAttention`` a ``key_padding_mask`` ``[batch, L]`` (``True`` = padding)."""
    mask = mha.full.padding_mask(lengths, x.size(1))  # [batch, 1, 1, L]
    if name == REFERENCE:
        return model(x, x, x, key_padding_mask=~mask[:, 0, 0], need_weights=False)[0]
    return model(x, attn_mask=mask)


def flops(batch: int, seq: int, hidden: int) -> float:
    """Projections ``4 * 2 * b * L * d**2`` plus attention products ``2 * 2 * b * L**2 * d``.

    >>> flops(1, 2, 3) == 4 * 2 * 2 * 9 + 2 * 2 * 4 * 3
    True
    """
    return 4 * 2 * batch * seq * hidden**2 + 2 * 2 * batch * seq**2 * hidden
