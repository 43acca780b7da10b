"""Convert between ``mha``'s MHA and ``torch.nn.MultiheadAttention``, exactly.

The weights of every version (annotated, pure, full) map one to one (``in_proj`` stacks the three
projections along dimension 0):

| ``torch.nn.MultiheadAttention``        | ``mha`` MHA (annotated, pure, full)           |
|----------------------------------------|-----------------------------------------------|
| ``in_proj_weight[0:h]``                | ``W_q.weight``                                |
| ``in_proj_weight[h:2h]``               | ``W_k.weight``                                |
| ``in_proj_weight[2h:3h]``              | ``W_v.weight``                                |
| ``in_proj_bias``                       | ``cat(W_q.bias, W_k.bias, W_v.bias)``         |
| ``out_proj.weight``, ``out_proj.bias`` | ``W_o.weight``, ``W_o.bias``                  |
| ``bias=False``: no bias at all         | ``full.MHA(bias=False)``: no bias at all      |
| ``dropout``                            | ``full.MHA``'s ``dropout`` (the others: 0.0)  |

where ``h = hidden_size`` (PyTorch calls it ``embed_dim``, and ``heads_num`` ``num_heads``). Each of
``W_q``, ``W_k``, ``W_v``, ``W_o`` has ``h`` rows, except ``W_k`` and ``W_v`` of a ``full.MHA`` with
``kv_heads < heads_num`` (grouped-query attention): they have ``kv_heads * head_size`` rows, and
``nn.MultiheadAttention`` has no such layout, so ``to_torch`` refuses them. ``dropout`` means the
same in both: the probability of zeroing an attention weight, in training mode only.

Cross-attention needs nothing more: both modules project the queries with the first third of
``in_proj`` and the keys and values with the rest, whatever the input. ``m(x, context)`` is
``t(x, context, context)``. A context of another width, ``full.MHA(context_size=c)``, is
``nn.MultiheadAttention(kdim=c, vdim=c)``, which keeps three weights instead of ``in_proj``:
``q_proj_weight``, ``k_proj_weight`` and ``v_proj_weight`` are ``W_q.weight``, ``W_k.weight`` and
``W_v.weight`` (``in_proj_bias`` stacks the biases as above). ``kdim != vdim`` has no
counterpart: ``W_k`` and ``W_v`` take the same context.

Masks have opposite polarities: in ``mha.full``, ``True`` means *may attend*; in
``nn.MultiheadAttention``, ``True`` means *blocked*. Negate a boolean mask when passing it across
(``attn_mask=~mask``); a padding mask ``[batch_size, 1, 1, k_len]`` becomes its
``key_padding_mask=~mask[:, 0, 0]``. A float mask is added to the scores in both, but only a 2-D
``[q_len, k_len]`` one means the same in both: pass it as is. A 3-D float or boolean mask is
``[batch_size * heads_num, q_len, k_len]`` in ``nn.MultiheadAttention`` and
``[heads_num, q_len, k_len]`` in ``mha.full`` (it broadcasts over the batch): view it as
``[batch_size, heads_num, q_len, k_len]`` when passing it across.

Examples:
    >>> import torch
    >>> from mha.full import MHA, causal_mask, padding_mask
    >>> from mha.interop import to_torch, from_torch
    >>> _ = torch.manual_seed(0)
    >>> model = MHA(hidden_size=20, heads_num=4).eval()
    >>> t = to_torch(model)
    >>> t.in_proj_weight.shape  # [3 * hidden_size, hidden_size]
    torch.Size([60, 20])
    >>> x, context = torch.randn(2, 3, 20), torch.randn(2, 7, 20)
    >>> out, _ = t(x, x, x, need_weights=False)
    >>> torch.allclose(out, model(x), atol=1e-6)
    True
    >>> out, _ = t(x, context, context, need_weights=False)  # cross-attention
    >>> torch.allclose(out, model(x, context), atol=1e-6)
    True
    >>> mask = padding_mask(torch.tensor([7, 5]), 7)  # [batch_size, 1, 1, k_len], True = real
    >>> out, _ = t(x, context, context, key_padding_mask=~mask[:, 0, 0], need_weights=False)
    >>> torch.allclose(out, model(x, context, attn_mask=mask), atol=1e-6)
    True
    >>> out, _ = t(x, x, x, attn_mask=~causal_mask(3, 3), need_weights=False)
    >>> torch.allclose(out, model(x, is_causal=True), atol=1e-6)
    True
    >>> per_head = torch.randn(2 * 4, 3, 3)  # [batch_size * heads_num, q_len, k_len], added
    >>> out, _ = t(x, x, x, attn_mask=per_head, need_weights=False)
    >>> torch.allclose(out, model(x, attn_mask=per_head.view(2, 4, 3, 3)), atol=1e-6)
    True
    >>> back = from_torch(t, full=True)
    >>> all(torch.equal(back.state_dict()[k], v) for k, v in model.state_dict().items())
    True
    >>> wide = MHA(hidden_size=20, heads_num=4, context_size=12).eval()  # a context 12 wide
    >>> t = to_torch(wide)
    >>> t.kdim, t.vdim, t.k_proj_weight.shape  # [hidden_size, context_size]
    (12, 12, torch.Size([20, 12]))
    >>> memory = torch.randn(2, 7, 12)
    >>> out, _ = t(x, memory, memory, need_weights=False)
    >>> torch.allclose(out, wide(x, memory), atol=1e-6)
    True
"""

# Why this file stays whole (1,900 lines): every conversion reads one table of what each option
# of MHA means in the other library (the accepted attributes, the rotation layouts and their
# probe, the norms), both ways and for every family; split by family, each file would need that
# table, and the refusals would drift apart. Splitting swap_attention from the conversions is
# issue 46's item 3.

from __future__ import annotations

import copy
import inspect
import math
import sys

import torch
import torch.nn as nn

import mha.full
import mha.hf
import mha.mla
import mha.norm
import mha.pure
from mha.rope import SCALINGS, RotaryEmbedding

__all__ = ["from_hf", "from_torch", "restore_attention", "swap_attention", "to_hf", "to_torch"]

_LAYERS = ("W_q", "W_k", "W_v", "W_o")

# What to_torch does with each option of mha.full.MHA (the fields of mha.full.Options): the ones
# it maps to nn.MultiheadAttention, and the ones it refuses unless they have their default value,
# each with what the refusal says. mha_site/checkers/options.py checks that every field is in one
# of the two, and that each does what it says.
TO_TORCH_MAPS = {
    "hidden_size": "embed_dim",
    "heads_num": "num_heads",
    "dropout": "dropout",
    "bias": "bias (a bias on all four projections or on none)",
    "fast": "nothing: the same attention, computed another way",
    "context_size": "kdim and vdim",
}
TO_TORCH_REFUSES = {
    "kv_heads": lambda o: (
        f"kv_heads ({o.kv_heads}) < heads_num ({o.heads_num}) is grouped-query attention; "
        "nn.MultiheadAttention has none (its keys and values have heads_num heads)"
    ),
    "head_size": lambda o: (
        f"head_size={o.head_size} (nn.MultiheadAttention's heads are hidden_size / heads_num "
        f"= {o.hidden_size / o.heads_num:g} wide)"
    ),
    "scale": lambda o: f"scale={o.scale} (nn.MultiheadAttention scales by 1/sqrt(head_size))",
    "qk_norm": lambda o: f"qk_norm={o.qk_norm!r} (a norm of q and k)",
    "norm_eps": lambda o: f"norm_eps={o.norm_eps} (the eps of qk_norm's norms)",
    "rope": lambda o: "rope (rotary embeddings)",
    "window": lambda o: "window (a sliding window)",
    "chunk": lambda o: f"chunk={o.chunk} (attention within chunks of positions)",
    "softcap": lambda o: f"softcap={o.softcap} (a cap of the attention scores)",
    "sinks": lambda o: "sinks (a learned logit per head in the softmax's denominator)",
    "gate": lambda o: "gate (each head's output times a sigmoid gate computed by W_q)",
    "temperature": lambda o: f"temperature={o.temperature} (a scale of the queries by position)",
}


def _refuse_options(options: mha.full.Options) -> None:
    """Raise, naming each option of ``options`` that ``nn.MultiheadAttention`` cannot express."""
    changed = options.changed()
    unknown = [n for n in changed if n not in TO_TORCH_MAPS and n not in TO_TORCH_REFUSES]
    if unknown:  # an option added to mha.full.Options but not here: refuse rather than drop it
        raise ValueError(f"cannot map m: to_torch does not know the option(s) {unknown}")
    if "scale" in changed and options.scale == options.head_size**-0.5:
        changed.remove("scale")  # the default scale, given explicitly
    if "kv_heads" in changed:
        raise ValueError(f"cannot map m: {TO_TORCH_REFUSES['kv_heads'](options)}")
    used = [TO_TORCH_REFUSES[n](options) for n in changed if n in TO_TORCH_REFUSES]
    if used:
        raise ValueError(
            f"cannot map m: {', '.join(used)}; nn.MultiheadAttention has no such option"
        )


def to_torch(m: nn.Module, *, batch_first: bool = True) -> nn.MultiheadAttention:
    """Build a ``torch.nn.MultiheadAttention`` holding exactly ``m``'s weights.

    ``m``'s ``dropout`` (a [`mha.full.MHA`][mha.full.MHA]'s; 0.0 for the others) becomes the
    module's ``dropout``, with the same meaning: attention weights zeroed in training mode only.
    The module is in ``m``'s mode (training or evaluation). Cross-attention maps as it is:
    ``m(x, context)`` is ``t(x, context, context)``.

    Args:
        m: an ``mha`` MHA: annotated, pure, or full with ``kv_heads == heads_num`` (anything
            with ``hidden_size``, ``heads_num`` and ``W_q``, ``W_k``, ``W_v``, ``W_o`` linear
            layers ``[hidden_size, hidden_size]``, all with a bias or all without; ``W_k`` and
            ``W_v`` are ``[hidden_size, context_size]`` for a full MHA with ``context_size``,
            which gives ``kdim = vdim = context_size``).
        batch_first: ``True`` (the default) gives a module that takes ``[batch_size, seq_len,
            hidden_size]`` like ``m``. ``False`` gives one with the same weights that takes
            ``[seq_len, batch_size, hidden_size]``: pass ``x.transpose(0, 1)`` and transpose
            its output back.

    Returns:
        A module on ``m``'s device and dtype, with ``bias=False`` if ``m``'s linear layers have
            no bias; call it as ``t(x, x, x, need_weights=False)``.

    Raises:
        TypeError: ``m`` lacks the attributes above, a ``W_`` layer is not an ``nn.Linear``, or
            ``m.dropout`` is not a number.
        ValueError: ``m`` has no ``nn.MultiheadAttention`` counterpart: ``kv_heads < heads_num``
            (grouped-query attention), a linear layer of another shape (``head_size`` given),
            some linear layers with a bias and some without, or one of today's options (``rope``,
            ``window``, ``qk_norm``, a ``scale`` other than ``1/sqrt(head_size)``); the message
            names which.

    Examples:
        >>> from mha.full import MHA
        >>> t = to_torch(MHA(20, 4, dropout=0.1, bias=False))
        >>> t.embed_dim, t.num_heads, t.batch_first, t.dropout, t.in_proj_bias
        (20, 4, True, 0.1, None)
        >>> to_torch(MHA(20, 4, kv_heads=2))
        Traceback (most recent call last):
        ...
        ValueError: cannot map m: kv_heads (2) < heads_num (4) is grouped-query ...

    中文:
        构建一个 ``torch.nn.MultiheadAttention``，权重与 ``m`` 完全相同。

        ``m`` 的 ``dropout``（[`mha.full.MHA`][mha.full.MHA] 才有，其余版本按 0.0 算）成为
        模块的 ``dropout``，含义也相同：只在训练模式下把一部分注意力权重置零。得到的模块与 ``m``
        处于同一模式（训练或评估）。交叉注意力直接对应：``m(x, context)`` 就是
        ``t(x, context, context)``。

        参数：
            m: ``mha`` 的 MHA：注释版、纯享版，或者 ``kv_heads == heads_num`` 的完整版。其实任何
                对象都行，只要有 ``hidden_size``、``heads_num`` 和线性层 ``W_q``、``W_k``、
                ``W_v``、``W_o``，形状都是 ``[hidden_size, hidden_size]``，且要么全有偏置、
                要么全没有；带 ``context_size`` 的完整版，``W_k`` 和 ``W_v`` 是
                ``[hidden_size, context_size]``，对应 ``kdim = vdim = context_size``。
            batch_first: 为 ``True``（默认）时，得到的模块和 ``m`` 一样接受
                ``[batch_size, seq_len, hidden_size]``。为 ``False`` 时权重不变，但模块接受
                ``[seq_len, batch_size, hidden_size]``：传入 ``x.transpose(0, 1)``，
                再把输出转置回来。

        返回：
            与 ``m`` 设备相同、dtype 相同的模块；``m`` 的线性层没有偏置时，它的 ``bias`` 为
                ``False``。调用方式为 ``t(x, x, x, need_weights=False)``。

        异常：
            TypeError: ``m`` 缺少上面列出的属性，某个 ``W_`` 层不是 ``nn.Linear``，或者
                ``m.dropout`` 不是数。
            ValueError: ``nn.MultiheadAttention`` 里没有与 ``m`` 对应的结构：
                ``kv_heads < heads_num``（分组查询注意力），某个线性层形状不同（给了
                ``head_size``），线性层有的带偏置、有的不带，或者用了主流模型的选项（``rope``、
                ``window``、``qk_norm``、不等于 ``1/sqrt(head_size)`` 的 ``scale``）。错误信息会
                指出是哪一种。
    """
    names = ("hidden_size", "heads_num", *_LAYERS)
    missing = [n for n in names if not hasattr(m, n)]
    if missing:
        raise TypeError(
            f"m must be an mha MHA with attributes {list(names)}, "
            f"got {type(m).__name__} without {missing}"
        )
    not_linear = [n for n in _LAYERS if not isinstance(getattr(m, n), nn.Linear)]
    if not_linear:
        got = ", ".join(f"m.{n} is {type(getattr(m, n)).__name__}" for n in not_linear)
        raise TypeError(f"m.W_q, m.W_k, m.W_v and m.W_o must be nn.Linear layers, got {got}")
    dropout = getattr(m, "dropout", 0.0)
    if isinstance(dropout, bool) or not isinstance(dropout, int | float):
        raise TypeError(f"m.dropout must be a float, got {type(dropout).__name__} ({dropout!r})")

    h, heads_num = m.hidden_size, m.heads_num
    c = getattr(m, "context_size", h)
    if isinstance(m, mha.full.MHA):
        _refuse_options(m.options)
    shapes = {n: tuple(getattr(m, n).weight.shape) for n in _LAYERS}
    expected = {"W_q": (h, h), "W_k": (h, c), "W_v": (h, c), "W_o": (h, h)}
    wrong = [f"{n}.weight is {list(s)}" for n, s in shapes.items() if s != expected[n]]
    if wrong:
        said = f"every linear layer must be [hidden_size, hidden_size] = {[h, h]}"
        if c != h:
            said = (
                f"W_q and W_o must be [hidden_size, hidden_size] = {[h, h]}, W_k and W_v "
                f"[hidden_size, context_size] = {[h, c]}"
            )
        raise ValueError(f"cannot map m: {said}, got {', '.join(wrong)}")
    with_bias = [n for n in _LAYERS if getattr(m, n).bias is not None]
    if with_bias and len(with_bias) < len(_LAYERS):
        without = [n for n in _LAYERS if n not in with_bias]
        raise ValueError(
            f"cannot map m: a bias on {', '.join(with_bias)} but none on {', '.join(without)}; "
            "nn.MultiheadAttention has a bias on all four projections or on none (bias=False)"
        )

    w = m.W_q.weight
    t = nn.MultiheadAttention(
        h,
        heads_num,
        dropout=float(dropout),
        bias=bool(with_bias),
        kdim=c,
        vdim=c,
        batch_first=batch_first,
        device=w.device,
        dtype=w.dtype,
    )
    with torch.no_grad():
        if c == h:
            t.in_proj_weight.copy_(torch.cat([m.W_q.weight, m.W_k.weight, m.W_v.weight]))
        else:  # kdim = vdim != embed_dim: three separate weights
            t.q_proj_weight.copy_(m.W_q.weight)
            t.k_proj_weight.copy_(m.W_k.weight)
            t.v_proj_weight.copy_(m.W_v.weight)
        t.out_proj.weight.copy_(m.W_o.weight)
        if with_bias:
            t.in_proj_bias.copy_(torch.cat([m.W_q.bias, m.W_k.bias, m.W_v.bias]))
            t.out_proj.bias.copy_(m.W_o.bias)
    return t.train(m.training)


def from_torch(t: nn.MultiheadAttention, *, full: bool = False) -> mha.pure.MHA | mha.full.MHA:
    """Build an ``mha`` MHA holding exactly ``t``'s weights: pure, or full with ``full=True``.

    Works for ``batch_first=True`` and ``False`` alike (the weights are the same; only the layout
    of ``t``'s inputs differs: ``[seq_len, batch_size, hidden_size]`` when ``False``, whereas the
    result always takes ``[batch_size, seq_len, hidden_size]``). The result is in ``t``'s mode
    (training or evaluation).

    Args:
        t: a ``torch.nn.MultiheadAttention`` with ``kdim == vdim``, ``add_bias_kv=False`` and
            ``add_zero_attn=False``. For the pure MHA also ``kdim == embed_dim``, ``bias=True``
            and ``dropout=0.0``, which it cannot hold (the full MHA maps ``kdim`` to
            ``context_size``).
        full: ``False`` (the default) gives an [`mha.pure.MHA`][mha.pure.MHA]; ``True`` gives
            an [`mha.full.MHA`][mha.full.MHA] (``kv_heads == heads_num``, ``fast=True``) with
            ``t``'s ``bias`` and ``dropout``.

    Returns:
        A pure or full MHA on ``t``'s device and dtype.

    Raises:
        TypeError: ``t`` is not a ``torch.nn.MultiheadAttention``, or ``full`` not a ``bool``.
        ValueError: ``t`` uses an option the chosen MHA does not have, named in the message.

    Examples:
        >>> import torch.nn as nn
        >>> from_torch(nn.MultiheadAttention(20, 4, batch_first=True)).head_size
        5
        >>> m = from_torch(nn.MultiheadAttention(20, 4, dropout=0.1, bias=False), full=True)
        >>> type(m).__module__, m.dropout, m.W_q.bias
        ('mha.full', 0.1, None)
        >>> from_torch(nn.MultiheadAttention(20, 4, add_zero_attn=True), full=True)
        Traceback (most recent call last):
        ...
        ValueError: cannot map t: add_zero_attn=True, expected add_zero_attn=False

    中文:
        构建一个 ``mha`` 的 MHA，权重与 ``t`` 完全相同：默认是纯享版，``full=True`` 时是完整版。

        ``t`` 的 ``batch_first`` 是 ``True`` 还是 ``False`` 都可以：两种情况下权重一样，只是
        ``t`` 的输入布局不同（为 ``False`` 时是 ``[seq_len, batch_size, hidden_size]``）；
        返回的模块总是接受 ``[batch_size, seq_len, hidden_size]``。返回的模块与 ``t`` 处于同一
        模式（训练或评估）。

        参数：
            t: 一个 ``torch.nn.MultiheadAttention``，``kdim == vdim``，``add_bias_kv=False``，
                ``add_zero_attn=False``。要得到纯享版，还必须 ``kdim == embed_dim``、``bias=True``、
                ``dropout=0.0``，因为纯享版没有这些选项（完整版把 ``kdim`` 对应到
                ``context_size``）。
            full: 为 ``False``（默认）时返回 [`mha.pure.MHA`][mha.pure.MHA]；为 ``True`` 时返回
                [`mha.full.MHA`][mha.full.MHA]（``kv_heads == heads_num``，``fast=True``），
                ``bias`` 和 ``dropout`` 与 ``t`` 相同。

        返回：
            纯享版或完整版 MHA，与 ``t`` 设备相同、dtype 相同。

        异常：
            TypeError: ``t`` 不是 ``torch.nn.MultiheadAttention``，或者 ``full`` 不是 ``bool``。
            ValueError: ``t`` 用了所选版本没有的选项，错误信息会指出是哪一个。
    """
    if not isinstance(t, nn.MultiheadAttention):
        raise TypeError(f"t must be a torch.nn.MultiheadAttention, got {type(t).__name__}")
    if not isinstance(full, bool):
        raise TypeError(f"full must be a bool, got {type(full).__name__} ({full!r})")
    bias = t.in_proj_bias is not None
    problems = []
    # With kdim or vdim different from embed_dim, PyTorch keeps three separate weights instead:
    # the full MHA's context_size when kdim == vdim.
    if t.kdim != t.vdim:
        problems.append(
            f"kdim={t.kdim}, vdim={t.vdim}, expected kdim = vdim (W_k and W_v take one context)"
        )
    elif t.kdim != t.embed_dim and not full:
        problems.append(
            f"kdim = vdim = {t.kdim} (the pure MHA has no context_size; from_torch(t, full=True) "
            f"maps it), expected kdim = vdim = embed_dim = {t.embed_dim}"
        )
    if t.bias_k is not None:
        problems.append("add_bias_kv=True, expected add_bias_kv=False")
    if t.add_zero_attn:
        problems.append("add_zero_attn=True, expected add_zero_attn=False")
    if (t.out_proj.bias is not None) != bias:
        problems.append(
            f"in_proj_bias is {'set' if bias else 'None'} but out_proj.bias is "
            f"{'None' if bias else 'set'}, expected both set (bias=True) or both None (bias=False)"
        )
    if not full and not bias:
        problems.append(
            "bias=False (the pure MHA's linear layers always have a bias; "
            "from_torch(t, full=True) maps it), expected bias=True"
        )
    if not full and t.dropout != 0.0:
        problems.append(
            f"dropout={t.dropout} (the pure MHA has no dropout; from_torch(t, full=True) maps "
            "it), expected dropout=0.0"
        )
    if full and not 0.0 <= t.dropout < 1.0:
        problems.append(f"dropout={t.dropout}, expected 0 <= dropout < 1")
    if problems:
        raise ValueError("cannot map t: " + "; ".join(problems))

    h = t.embed_dim
    if t.in_proj_weight is not None:
        weights = t.in_proj_weight.split(h)  # q, k, v
    else:
        weights = (t.q_proj_weight, t.k_proj_weight, t.v_proj_weight)
    w = weights[0]
    if full:
        context_size = None if t.kdim == h else t.kdim
        m = mha.full.MHA(h, t.num_heads, dropout=t.dropout, bias=bias, context_size=context_size)
    else:
        m = mha.pure.MHA(h, t.num_heads)
    m = m.to(device=w.device, dtype=w.dtype)
    with torch.no_grad():
        for i, lin in enumerate((m.W_q, m.W_k, m.W_v)):
            lin.weight.copy_(weights[i])
            if bias:
                lin.bias.copy_(t.in_proj_bias[i * h : (i + 1) * h])
        m.W_o.weight.copy_(t.out_proj.weight)
        if bias:
            m.W_o.bias.copy_(t.out_proj.bias)
    return m.train(t.training)


# ---- transformers' attention layers ---------------------------------------------------------
# mha never imports transformers. A layer is admitted by what it has and does, not by its class
# name: its submodules, parameters and attributes are those of one of two layouts (the Llama
# family's q/k/v/o projections, DeepSeek's latent projections), each attribute is one from_hf
# reads, and last the layer is run beside the module built from it (_probe).

# The families whose attention from_hf converts into mha.full.MHA (DeepSeek-V2's and V3's latent
# attention, into mha.mla.MLA, aside), by the names the pages give them. tests/test_transformers.py
# runs each beside transformers' layer; tests/test_from_hf_choice.py checks that the README, the
# chapter "Today's layer" (its table, in both languages) and the docstrings of from_hf and
# swap_attention name these, all of them: a list or a count there cannot go stale.
FAMILIES = (
    "Llama",
    "Mistral",
    "Mixtral",
    "Qwen2",
    "Qwen2-MoE",
    "Qwen3",
    "Qwen3-MoE",
    "Gemma",
    "Granite",
    "GLM-4",
    "Gemma 2",
    "Gemma 3",
    "gpt-oss",
    "Qwen3-Next",
    "SmolLM3",
    "OLMo 2",
    "Phi-3",
    "Llama 4",
    "StarCoder2",
    "OLMo 3",
    "GLM-4.5",
    "Cohere",
    "Nemotron",
    "Qwen3.5",
    "Qwen3.5-MoE",
)

# transformers' submodule names -> ours: the Llama family's layout (q/k/v/o projections, a norm of
# each query and key head), then DeepSeek's attention (q_proj without a query bottleneck).
_HF_NAMES = {
    "q_proj": "W_q",
    "k_proj": "W_k",
    "v_proj": "W_v",
    "o_proj": "W_o",
    "q_norm": "q_norm",
    "k_norm": "k_norm",
    "sinks": "sink_logits",  # gpt-oss's parameter of the layer itself: one logit per head
}
# Phi-3's one projection for all three: its rows are the query's heads_num * head_dim, then the
# key's kv_heads * head_dim, then the value's (its forward slices them in that order)
_HF_FUSED = "qkv_proj"
_HF_SPLIT = ("q_proj", "k_proj", "v_proj")
_HF_MLA_NAMES = {
    "q_proj": "W_q",
    "q_a_proj": "W_dq",
    "q_a_layernorm": "q_norm",
    "q_b_proj": "W_uq",
    "kv_a_proj_with_mqa": "W_dkv",
    "kv_a_layernorm": "kv_norm",
    "kv_b_proj": "W_ukv",
    "o_proj": "W_o",
}
# The attributes a layer of each layout may carry: each is read below, or a copy of the config's
# sizes that the weights' shapes confirm. Any other is refused, naming it, unless _HF_ACCEPTED
# takes it at the value it has.
_HF_ATTRIBUTES = frozenset(
    {
        "config",
        "layer_idx",
        "layer_type",
        "head_dim",
        "num_key_value_groups",
        "scaling",
        "attention_dropout",
        "is_causal",
        "sliding_window",
        "is_sliding",  # Gemma 3's and EXAONE 4's: whether the layer slides, read by _hf_window
        "attn_logit_softcapping",  # Gemma 2's soft-cap of the scores: softcap
        "use_rope",  # SmolLM3's and Llama 4's: whether this layer rotates (no_rope_layers): rope
        # Llama 4's (and Phi-3's num_key_value_heads): copies of the config's head counts (the
        # weights' shapes confirm them), and Llama 4's temperature tuning (temperature, on its
        # layers without rotation)
        "num_attention_heads",
        "num_key_value_heads",
        "attn_temperature_tuning",
        "attn_scale",
        "floor_scale",
    }
)


def _has_qk_norm(module: nn.Module) -> bool:
    """Whether the layer has q/k norms (``q_norm`` and ``k_norm``, or Llama 4's one ``qk_norm``)."""
    return any(getattr(module, n, None) is not None for n in ("q_norm", "k_norm", _HF_WEIGHTLESS))


def _config_layer_type(module: nn.Module) -> str | None:
    """The type the config's ``layer_types`` gives ``module``'s layer (``None`` without)."""
    types, i = getattr(module.config, "layer_types", None), module.layer_idx
    return types[i] if types is not None and i is not None and i < len(types) else None


# Attributes from_hf does not read, each accepted at the values where it changes nothing that
# from_hf does not take from elsewhere: a no-op (a dropout of 0.0, a switch that agrees with the
# submodules the layer has) or a copy of what the config says (sizes, rope_parameters, the layer's
# type). name -> (accepts(module, value), what the attribute is, the value accepted); another value
# is refused, naming the attribute, what it does and the value from_hf converts.
_HF_ACCEPTED = {
    # StarCoder2's and Seed-OSS's: a dropout of the attention's output, in training only
    "residual_dropout": (
        lambda module, v: v == 0,
        "a dropout of the layer's output in training, which mha.full.MHA has no option for",
        "0.0",
    ),
    # GLM-4.5's and Cohere's: whether the layer has q/k norms (read as the submodules they are)
    "use_qk_norm": (
        lambda module, v: isinstance(v, bool) and v == _has_qk_norm(module),
        "whether the layer normalises q and k",
        "a bool that agrees with its q_norm and k_norm submodules",
    ),
    # OLMo 3's: the layer's type, as the config's layer_types gives it
    "attention_type": (
        lambda module, v: v == _config_layer_type(module) and v in _LAYER_TYPES,
        "the layer's type",
        "the config's layer_types[layer_idx], of a type from_hf converts",
    ),
    # GLM-4.5's: the config's rope_parameters, which from_hf reads from the config
    "rope_parameters": (
        lambda module, v: v == getattr(module.config, "rope_parameters", None),
        "the layer's rotation",
        "a copy of the config's rope_parameters",
    ),
    # Nemotron's and EXAONE 4's: copies of the config's sizes, which the weights' shapes confirm
    "hidden_size": (
        lambda module, v: v == module.config.hidden_size,
        "the width of the layer's input",
        "the config's hidden_size",
    ),
    "num_heads": (
        lambda module, v: v == module.config.num_attention_heads,
        "the number of query heads",
        "the config's num_attention_heads",
    ),
    # Nemotron's: the share of each head that rotates, as the config's rope_parameters say it
    "partial_rotary_factor": (
        lambda module, v: v == dict(_rope_parameters(module) or {}).get("partial_rotary_factor"),
        "the share of each head that rotates",
        "the config's rope_parameters['partial_rotary_factor']",
    ),
    # EXAONE 4's: the config's pattern of sliding layers, which its layer_types spell out
    "sliding_window_pattern": (
        lambda module, v: v == getattr(module.config, "sliding_window_pattern", None),
        "which layers slide",
        "the config's sliding_window_pattern (its layer_types say which layers slide)",
    ),
}
_HF_MLA_ATTRIBUTES = frozenset(
    {
        "config",
        "layer_idx",
        "hidden_size",
        "num_heads",
        "num_key_value_groups",
        "q_lora_rank",
        "kv_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "qk_head_dim",
        "v_head_dim",
        "q_proj",
        "scaling",
        "attention_dropout",
        "is_causal",
    }
)
# Config fields a layer of the Llama family's layout reads in its forward, for a feature mha has
# no option for (OLMo's clip_qkv); set to anything but None, the layer is refused, naming it.
_HF_CONFIG_FEATURES = {"clip_qkv": "clamps q, k and v to [-clip_qkv, clip_qkv]"}
# The kinds of layer (a config's layer_types) that are causal attention: in full, in a sliding
# window, or in chunks (Llama 4's: attention_chunk_size positions each).
_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")
# Llama 4's one norm of the queries' and the keys' heads, without a weight (after the rotation)
_HF_WEIGHTLESS = "qk_norm"


def _layout(module: nn.Module) -> str:
    """``"mha"`` or ``"mla"``: which layout ``module`` has, every part of it one ``from_hf`` maps;
    otherwise an error naming the part."""
    _check_module(module)
    name = type(module).__name__
    children = dict(module.named_children())
    if "kv_a_proj_with_mqa" in children:
        kind, names, known = "mla", _HF_MLA_NAMES, _HF_MLA_ATTRIBUTES
    else:
        kind, names, known = "mha", _HF_NAMES, _HF_ATTRIBUTES
        projections = ("q_proj", "k_proj", "v_proj", "o_proj")
        if _HF_FUSED in children:  # Phi-3's: q, k and v in one projection
            names = {**names, _HF_FUSED: None}
            projections = (_HF_FUSED, "o_proj")
        if not all(n in children for n in projections):
            raise TypeError(
                "from_hf converts attention layers with q_proj, k_proj, v_proj and o_proj linear "
                "layers (or Phi-3's fused qkv_proj and o_proj, or DeepSeek's latent "
                f"kv_a_proj_with_mqa); {name}'s submodules are {', '.join(children) or 'none'}"
            )
    _check_linear(name, {n: c for n, c in children.items() if n in names and n.endswith("proj")})
    extra = [
        f"submodule {n} ({type(c).__name__})"
        for n, c in children.items()
        if n not in names and not (n == _HF_WEIGHTLESS and _weightless(c))
    ]
    extra += [
        f"{what} {n} {list(t.shape)}"
        for what, items in (
            ("parameter", module.named_parameters(recurse=False)),
            ("buffer", module.named_buffers(recurse=False)),
        )
        for n, t in items
        if not (
            what == "parameter" and n in names and t.shape == (module.config.num_attention_heads,)
        )
    ]
    if extra:
        target = "mha.mla.MLA" if kind == "mla" else "mha.full.MHA"
        raise ValueError(f"{name} has {', '.join(extra)}, which {target} has no counterpart for")
    unknown = {
        n: v
        for n, v in vars(module).items()
        # a submodule left out (DeepSeek's q_a_proj without a query bottleneck) is None
        if not n.startswith("_")
        and n != "training"
        and n not in known
        and not (n in names and v is None)
    }
    refused = [
        f"{n}={v!r} ({_HF_ACCEPTED[n][1]}; from_hf converts {_HF_ACCEPTED[n][2]})"
        for n, v in unknown.items()
        if n in _HF_ACCEPTED and not _HF_ACCEPTED[n][0](module, v)
    ]
    if refused:
        raise ValueError(f"{name} sets {', '.join(refused)}")
    unknown = {n: v for n, v in unknown.items() if n not in _HF_ACCEPTED}
    if unknown:
        said = ", ".join(f"{n}={v!r}" for n, v in unknown.items())
        raise ValueError(
            f"{name} sets {said}, which from_hf does not read: an attribute it does not know may "
            "change what the layer computes, and mha.full.MHA has no option by that name"
        )
    features = [
        f"{n}={getattr(module.config, n)!r} (it {said})"
        for n, said in _HF_CONFIG_FEATURES.items()
        if getattr(module.config, n, None) is not None
    ]
    if features:
        raise ValueError(f"{name}'s config sets {', '.join(features)}; mha has no such option")
    if getattr(module, "is_causal", True) is not True:
        why = getattr(module.config, "use_bidirectional_attention", None)
        said = "" if why is None else f" (its config's use_bidirectional_attention={why!r})"
        raise ValueError(
            f"{name} has is_causal={module.is_causal!r}{said}: it attends both ways; the "
            "layers from_hf converts are causal"
        )
    layer_type = _layer_type(module)
    if layer_type is not None and layer_type not in _LAYER_TYPES:
        raise ValueError(
            f"{name} is a layer of type {layer_type!r} (the config's layer_types); from_hf "
            f"converts {' and '.join(_LAYER_TYPES)} layers"
        )
    return kind


def _check_module(module: object) -> None:
    """``module`` is a ``torch.nn.Module`` with ``config`` and ``layer_idx``; a ``TypeError``
    naming what it is otherwise."""
    if not isinstance(module, nn.Module) or not all(
        hasattr(module, n) for n in ("config", "layer_idx")
    ):
        raise TypeError(
            "module must be a transformers attention layer (with config and layer_idx), got "
            f"{type(module).__name__}"
        )


# What to do with an adapter around a projection (peft's LoRA), converting one way or the other
_ADAPTER_BEFORE = (
    "merge the adapter into the weights first (peft's merge_and_unload()), or apply it after "
    "swap_attention (the layers are then W_q, W_k, W_v and W_o)"
)
_ADAPTER_AFTER = (
    "merge the adapter into the weights first (peft's merge_and_unload()), then "
    "restore_attention: transformers' layers take plain weights"
)


def _check_linear(
    owner: str, projections: dict[str, nn.Module], advice: str = _ADAPTER_BEFORE
) -> None:
    """Each of ``projections`` (name -> submodule of ``owner``) is an ``nn.Linear``; otherwise a
    ``TypeError`` naming each and what it is: an adapter around a linear layer (peft's LoRA
    ``lora.Linear``, its ``base_layer`` the ``nn.Linear``) is named as such, with ``advice``."""
    wrong = {n: c for n, c in projections.items() if not isinstance(c, nn.Linear)}
    if not wrong:
        return
    wrapped = [n for n, c in wrong.items() if isinstance(getattr(c, "base_layer", None), nn.Linear)]
    said = "; ".join(
        f"{n} is {type(c).__module__}.{type(c).__name__}"
        + (", an adapter wrapping an nn.Linear (its base_layer)" if n in wrapped else "")
        for n, c in wrong.items()
    )
    advice = f": {advice}" if wrapped else ""
    raise TypeError(f"{owner}'s projections must be nn.Linear layers: {said}{advice}")


def _layer_type(module: nn.Module) -> str | None:
    """The kind of layer the config's ``layer_types`` says ``module`` is (``None`` without)."""
    if getattr(module, "layer_type", None) is not None:
        return module.layer_type
    return _config_layer_type(module)


def _hf_window(module: nn.Module) -> int | None:
    """The sliding window a layer's model masks it with: the layer's own ``sliding_window``
    (Qwen's; ``None`` on a full layer), else the config's on the layers its ``layer_types`` marks
    sliding, else the config's ``sliding_window`` on every layer (Mistral's, Mixtral's)."""
    if hasattr(module, "sliding_window"):
        # EXAONE 4's full layers keep the config's window and mask without it (is_sliding False)
        return module.sliding_window if getattr(module, "is_sliding", True) else None
    if getattr(module.config, "layer_types", None) is not None:
        sliding = _layer_type(module) == "sliding_attention"
        return module.config.sliding_window if sliding else None
    return getattr(module.config, "sliding_window", None)


def _heads_width(module: nn.Module) -> int:
    """``num_attention_heads * head_dim``: the width of the query heads, concatenated."""
    return module.config.num_attention_heads * module.head_dim


def _check_projections(module: nn.Module) -> None:
    """The four projections have the shapes the config's heads give (a query projection twice as
    wide holds Qwen3-Next's gate: each head's query, then its gate)."""
    config, d = module.config, module.head_dim
    heads, kv_heads, h = config.num_attention_heads, config.num_key_value_heads, config.hidden_size
    q_rows = module.q_proj.weight.shape[0] if not _fused(module) else heads * d
    gated = q_rows == 2 * heads * d
    expected = {
        "q_proj": (
            [q_rows if gated else heads * d, h],
            "(2 *) num_attention_heads * head_dim, hidden_size",
        ),
        "k_proj": ([kv_heads * d, h], "num_key_value_heads * head_dim, hidden_size"),
        "v_proj": ([kv_heads * d, h], "num_key_value_heads * head_dim, hidden_size"),
        "o_proj": ([h, heads * d], "hidden_size, num_attention_heads * head_dim"),
    }
    if _fused(module):
        said = "(num_attention_heads + 2 * num_key_value_heads) * head_dim, hidden_size"
        fused = ([(heads + 2 * kv_heads) * d, h], said)
        expected = {_HF_FUSED: fused, "o_proj": expected["o_proj"]}
    wrong = [
        f"{n}.weight is {list(getattr(module, n).weight.shape)}, expected [{said}] = {shape}"
        for n, (shape, said) in expected.items()
        if list(getattr(module, n).weight.shape) != shape
    ]
    if wrong:
        raise ValueError(f"{type(module).__name__}: {'; '.join(wrong)}")


def _fused(module: nn.Module) -> bool:
    """Whether ``module`` projects q, k and v with one linear layer (Phi-3's ``qkv_proj``)."""
    return isinstance(getattr(module, _HF_FUSED, None), nn.Linear)


def _split(module: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` (``module``'s ``state_dict``) with a fused ``qkv_proj``'s weight and bias split
    into ``q_proj``'s, ``k_proj``'s and ``v_proj``'s rows (views: copied as they are)."""
    if not _fused(module):
        return state
    config, d = module.config, module.head_dim
    sizes = [d * config.num_attention_heads] + [d * config.num_key_value_heads] * 2
    split = {}
    for key, value in state.items():
        part, _, leaf = key.rpartition(".")
        if part == _HF_FUSED:
            split.update(
                {f"{n}.{leaf}": rows for n, rows in zip(_HF_SPLIT, value.split(sizes), strict=True)}
            )
        else:
            split[key] = value
    return split


def _fuse(hf_attention: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of ``_split``: ``q_proj``'s, ``k_proj``'s and ``v_proj``'s rows stacked into
    ``qkv_proj``'s, in that order, for a layer that fuses them."""
    if not _fused(hf_attention):
        return state
    fused = {k: v for k, v in state.items() if k.rpartition(".")[0] not in _HF_SPLIT}
    for leaf in ("weight", "bias"):
        parts = [state[f"{n}.{leaf}"] for n in _HF_SPLIT if f"{n}.{leaf}" in state]
        if parts:
            fused[f"{_HF_FUSED}.{leaf}"] = torch.cat(parts)
    return fused


def _hf_biases(module: nn.Module) -> tuple[str, ...]:
    """Our projections whose transformers counterpart has a bias (a fused one: q, k and v)."""
    biased = []
    for theirs, ours in _HF_NAMES.items():
        held = _HF_FUSED if theirs in _HF_SPLIT and _fused(module) else theirs
        if theirs.endswith("proj") and getattr(module, held).bias is not None:
            biased.append(ours)
    return tuple(biased)


def _norm_eps(norm: nn.Module) -> float:
    """The ``eps`` of a transformers RMSNorm, under either of the names they give it."""
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
    if eps is None:
        raise ValueError(f"{type(norm).__name__} has no variance_epsilon or eps")
    return float(eps)


def _weightless(norm: object) -> bool:
    """Whether ``norm`` is a module without parameters (Llama 4's ``qk_norm``)."""
    return isinstance(norm, nn.Module) and not any(True for _ in norm.parameters())


def _check_weightless(module: nn.Module) -> str:
    """Llama 4's ``qk_norm``, one norm for the queries' and the keys' heads without a weight,
    computes ``x / sqrt(mean(x²) + eps)`` as ``mha.norm.RMSNorm(elementwise_affine=False)``
    does: ``"weightless"``; otherwise a ``ValueError`` saying how far off it is."""
    norm = _drawn(getattr(module, _HF_WEIGHTLESS))
    ours = mha.norm.RMSNorm(module.head_dim, eps=_norm_eps(norm), elementwise_affine=False)
    x = _probe_tensor((3, module.head_dim))
    off, tolerance = _relative(ours.double()(x), norm(x)), _tolerance(norm, x)
    if off > tolerance:
        raise ValueError(
            f"{type(module).__name__}.{_HF_WEIGHTLESS} ({type(norm).__name__}) computes otherwise "
            f"than x / sqrt(mean(x²) + eps) (mha.norm.RMSNorm without a weight): relative "
            f"difference {off:.2g} (at most {tolerance:.2g}, its rounding, passes)"
        )
    return "weightless"


def _check_qk_norm(module: nn.Module) -> bool | str:
    """``q_norm`` and ``k_norm``, if any, are each an RMSNorm of one head (``[head_dim]``
    weights), computing ``weight * x / sqrt(mean(x²) + eps)`` as ``mha.norm.RMSNorm`` does, or
    Gemma's ``(1 + weight) * ...`` (its ``plus_one``), or an RMSNorm of the whole projection
    (``[heads * head_dim]`` weights, OLMo 2's, multiplying by the weight before the cast back);
    the value of ``MHA``'s ``qk_norm`` that computes it: ``False`` (none), ``True``, ``"gemma"``
    or ``"projection"``. Each norm is run on a float64 copy of it, its weight drawn anew (as
    ``_drawn`` draws), beside each flavour given that weight: the flavours within the norm's
    rounding (``_tolerance``) compute it, the nearest is kept."""
    name, d = type(module).__name__, module.head_dim
    config = module.config
    if _weightless(getattr(module, _HF_WEIGHTLESS, None)):
        return _check_weightless(module)
    norms = {n: getattr(module, n, None) for n in ("q_norm", "k_norm")}
    present = [n for n, norm in norms.items() if norm is not None]
    if len(present) == 1:
        raise ValueError(f"{name} has {present[0]} but not the other of q_norm and k_norm")
    whole = {
        "q_norm": config.num_attention_heads * d,
        "k_norm": config.num_key_value_heads * d,
    }
    flavours = {}  # each norm's flavours within its rounding, and how far off each is
    for n in present:
        weights = dict(norms[n].named_parameters())
        if list(weights) != ["weight"] or weights["weight"].dim() != 1:
            raise ValueError(
                f"{name}.{n} ({type(norms[n]).__name__}) has parameters "
                f"{list(weights) or 'none'}, expected one weight [head_dim] = [{d}] "
                "(mha.norm.RMSNorm)"
            )
        size = weights["weight"].numel()
        if size not in (d, whole[n]):
            raise ValueError(
                f"{name}.{n}.weight is {list(weights['weight'].shape)}, expected [head_dim] = "
                f"[{d}] (a norm of each head) or [{whole[n]}] (of the whole projection, all heads "
                "at once)"
            )
        norm = _drawn(norms[n])
        weight = norm.weight
        x, offs = _probe_tensor((3, size)), {}
        # a norm of head_dim weights is of each head, or of the whole projection of one head
        # (OLMo 2's k_norm with one key/value head): q_norm's flavour decides which
        candidates = (True, "gemma") * (size == d) + ("projection",) * (size == whole[n])
        for flavour in candidates:
            ours = mha.norm.RMSNorm(
                size,
                eps=_norm_eps(norm),
                plus_one=flavour == "gemma",
                weight_in_float32=flavour == "projection",
            ).double()
            with torch.no_grad():
                ours.weight.copy_(weight)
                offs[flavour] = _relative(ours(x), norm(x))
        tolerance = _tolerance(norm, x)
        if min(offs.values()) > tolerance:
            said = ", ".join(f"{k!r}: {v:.2g}" for k, v in offs.items())
            raise ValueError(
                f"{name}.{n} ({type(norm).__name__}) computes otherwise than "
                f"weight * x / sqrt(mean(x²) + eps) (mha.norm.RMSNorm) and its flavours: "
                f"relative differences {{{said}}} (at most {tolerance:.2g}, its rounding, passes)"
            )
        flavours[n] = {f: off for f, off in offs.items() if off <= tolerance}
    if not flavours:
        return False
    # the flavour both norms compute (the nearest, if several), q_norm's first in a tie
    shared = [f for f in flavours["q_norm"] if f in flavours["k_norm"]]
    if not shared:
        raise ValueError(f"{name}'s q_norm and k_norm compute two different norms")
    return min(shared, key=lambda f: max(flavours["q_norm"][f], flavours["k_norm"][f]))


# How from_hf fills each option of mha.full.MHA (the fields of mha.full.Options) from a
# transformers attention layer of the Llama family's layout, and the options these layers never
# use (left at their default). mha_site/checkers/options.py checks that every field is in one of
# the two.
FROM_HF_FILLS = {
    "hidden_size": lambda module: module.config.hidden_size,
    "heads_num": lambda module: module.config.num_attention_heads,
    "kv_heads": lambda module: module.config.num_key_value_heads,
    "dropout": lambda module: float(module.attention_dropout),
    "bias": _hf_biases,  # a fused qkv_proj's bias is q's, k's and v's
    "head_size": lambda module: module.head_dim,
    "scale": lambda module: float(module.scaling),  # Granite's: its attention_multiplier
    # False, True, Gemma's (1 + weight): "gemma", or OLMo 2's whole projection: "projection"
    "qk_norm": _check_qk_norm,
    "norm_eps": lambda module: (
        _norm_eps(module.q_norm)
        if getattr(module, "q_norm", None) is not None
        else _norm_eps(getattr(module, _HF_WEIGHTLESS))
        if _weightless(getattr(module, _HF_WEIGHTLESS, None))
        else 1e-6
    ),
    # the config's rope_parameters; which dimensions rotate, paired how, is the layer's code:
    # _settle_rotation keeps the nearest of _rotations, run beside the layer
    "rope": lambda module: (
        _rope_from_hf(module, *_rotations(module)[0]) if _hf_rotates(module) else None
    ),
    "window": _hf_window,
    # Llama 4's chunked layers: a query sees the keys of its own chunk only
    "chunk": lambda module: (
        module.config.attention_chunk_size if _layer_type(module) == "chunked_attention" else None
    ),
    "softcap": lambda module: getattr(module, "attn_logit_softcapping", None),  # Gemma 2's
    "sinks": lambda module: isinstance(getattr(module, "sinks", None), nn.Parameter),  # gpt-oss's
    # Qwen3-Next's: a q_proj twice as wide, each head's query then its gate (the probe checks it)
    "gate": lambda module: (
        not _fused(module) and module.q_proj.out_features == 2 * _heads_width(module)
    ),
    # Llama 4's temperature tuning, which its code applies on its layers without rotation only
    "temperature": lambda module: (
        (float(module.attn_scale), float(module.floor_scale))
        if getattr(module, "attn_temperature_tuning", False) and not _hf_rotates(module)
        else None
    ),
}
FROM_HF_DEFAULTS = {
    "fast": "True: the fused kernel, which computes what transformers' sdpa and eager paths do",
    "context_size": "None: these are self-attention layers, their keys come from x",
}


def _load_renamed(m: nn.Module, module: nn.Module, names: dict[str, str]) -> nn.Module:
    """``m`` with ``module``'s parameters copied exactly, each renamed by ``names``; strict, so a
    parameter left over on either side is an error, not a silent default."""
    state = _split(module, module.state_dict())
    renamed = {_renamed(key, names): value for key, value in state.items()}
    m.load_state_dict(renamed, strict=True)
    return m


def _renamed(key: str, names: dict[str, str]) -> str:
    """A parameter's name on the other side: its submodule renamed by ``names`` (``q_proj.weight``
    to ``W_q.weight``), or a parameter of the layer itself (gpt-oss's ``sinks``) renamed whole."""
    part, _, leaf = key.rpartition(".")
    return f"{names[part]}.{leaf}" if part else names[leaf]


def from_hf(module: nn.Module) -> mha.full.MHA | mha.mla.MLA:
    """Build an [`mha.full.MHA`][mha.full.MHA], or from DeepSeek's latent attention an
    [`mha.mla.MLA`][mha.mla.MLA], equal to a transformers attention module.

    A layer is taken by what it is and does, not by its class's name. Of the Llama family's layout
    (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``, maybe ``q_norm`` and ``k_norm``), its variants
    differ in a few switches, each an option of ``mha.full.MHA``: ``head_size`` (the layer's
    ``head_dim``), ``bias`` (the projections that have one: Qwen2's, Qwen2-MoE's and GLM-4's q, k
    and v; the others' per the config's ``attention_bias``), ``scale`` (the layer's ``scaling``:
    Granite's is its ``attention_multiplier``, Gemma's ``query_pre_attn_scalar ** -0.5``),
    ``qk_norm`` (Qwen3, Qwen3-MoE: an RMSNorm of each head; Gemma 3's ``(1 + weight)`` one,
    ``"gemma"``; OLMo 2's of the whole projection, ``"projection"``; Llama 4's one ``qk_norm``
    without a weight, ``"weightless"``), ``rope`` (the config's ``rope_parameters``, of the layer's
    type where they differ by type, as Gemma 3's local and global bases: default, ``llama3``,
    ``yarn`` or Phi-3's ``longrope`` (its ``factor``, if the config leaves it out,
    ``max_position_embeddings / original_max_position_embeddings`` as transformers computes it),
    with its ``partial_rotary_factor``; pairs of halves, or interleaved pairs as GLM-4's code
    rotates them, and Llama 4's complex numbers; ``None`` on SmolLM3's and Llama 4's NoPE layers,
    whose ``use_rope`` is 0), ``window`` (Mistral's and Mixtral's ``sliding_window``, Qwen's,
    Gemma's and gpt-oss's on their sliding layers), ``chunk`` (Llama 4's ``attention_chunk_size`` on
    its chunked layers), ``temperature`` (Llama 4's ``attn_scale`` and ``floor_scale`` on its NoPE
    layers), ``softcap`` (Gemma 2's ``attn_logit_softcapping``, kept if the layer, run, caps by it),
    ``sinks`` (gpt-oss's ``sinks`` parameter, copied into ``sink_logits``) and ``gate``
    (Qwen3-Next's ``q_proj`` twice as wide: each head's query then its gate, copied into ``W_q`` as
    it is). This covers Llama, Mistral, Mixtral, Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE, Gemma, Gemma 2,
    Gemma 3, Granite, GLM-4, gpt-oss, Qwen3-Next, SmolLM3, OLMo 2, Phi-3, Llama 4, StarCoder2,
    OLMo 3, GLM-4.5, Cohere, Nemotron, Qwen3.5 and Qwen3.5-MoE attention (``FAMILIES``; the
    experts of the MoE models are in their MLPs, not here); Phi-3's one ``qkv_proj`` is split by
    rows into ``W_q``, ``W_k`` and ``W_v`` (the query's heads first, then the key's, then the
    value's). The weights are copied exactly, on the module's device and in its
    dtype. The result called as ``m(x, is_causal=True)`` gives the module's output for positions
    ``0 .. q_len - 1`` under its causal (and sliding-window) mask; with a
    [`KVCache`][mha.cache.KVCache] it continues at position
    ``len(cache)``, as the module does with its own cache. DeepSeek-V2's and V3's attention become
    an ``mha.mla.MLA`` of the config's ranks and head dims, its rotation (interleaved pairs: V2's
    always, V3's where ``rope_interleave`` says so) and the module's ``scaling`` (times YaRN's
    mscale squared where the config's ``rope_parameters`` set ``mscale_all_dim``); it is called the
    same way, with a [`LatentCache`][mha.mla.LatentCache] for decoding.

    Last, a float64 copy of the layer, its weights drawn anew (the layout is its code's, and
    drawn weights of size 1 show it whatever the scale of its own, or on the meta device), is run
    as its model runs it (its rotary embedding's tables, a causal mask) on 6 positions of a fixed
    input, beside the module built from it: the two must agree within the layer's rounding,
    measured on it (the copy run in float32 against float64). Of the rotation's layouts, the
    nearest is kept; two that both agree within that rounding are refused, naming both. This
    catches what no attribute says; a layer that does not rotate though its config says it does
    (Cohere 2's and EXAONE 4's global layers) is refused, naming that. A layer on the meta device
    gives a module on the meta device (its rotation's tables are computed when it leaves it).

    Args:
        module: a transformers attention layer of either layout (built from a config; nothing
            is downloaded).

    Returns:
        An ``mha.full.MHA`` (an ``mha.mla.MLA`` for DeepSeek's latent layout) in the module's
        mode (training or evaluation).

    Raises:
        TypeError: ``module`` has no ``config`` and ``layer_idx``, or not the projections of
            either layout (GPT-NeoX's ``query_key_value``, say); the message names its
            submodules.
        ValueError: the layer does what ``mha`` does not, and the message names it: a
            parameter, submodule or attribute ``from_hf`` does not map, a parameter that holds
            nan or inf, ``is_causal=False``, a layer type other than full, sliding and chunked
            attention, a projection of another shape, a q/k norm of another formula, a rope
            type other than default, ``llama3``, ``yarn`` and ``longrope`` (each named); or the
            layer, run, computes otherwise than the module built from it.

    中文:
        构建一个与 transformers 的注意力模块相等的 [`mha.full.MHA`][mha.full.MHA]；DeepSeek 的
        潜在注意力则转成 [`mha.mla.MLA`][mha.mla.MLA]。

        判断一个层能不能转换，看的是它有什么、算什么，而不是类名。Llama 这一族的结构
        （``q_proj``、``k_proj``、``v_proj``、``o_proj``，可能还有 ``q_norm`` 和 ``k_norm``）
        的各个变体只差几个开关，每个都是 ``mha.full.MHA`` 的一个选项：``head_size``（层的
        ``head_dim``）、``bias``（哪些投影带偏置：Qwen2、Qwen2-MoE 和 GLM-4 只有 q、k、v 有；
        其余的看配置的 ``attention_bias``）、``scale``（层的 ``scaling``：Granite 的就是它的
        ``attention_multiplier``，Gemma 的是 ``query_pre_attn_scalar ** -0.5``）、``qk_norm``
        （Qwen3、Qwen3-MoE：对每个头做 RMSNorm；Gemma 3 的乘 ``(1 + weight)``，即 ``"gemma"``；
        OLMo 2 的对整个投影做，即 ``"projection"``；Llama 4 那个不带权重的 ``qk_norm``，即
        ``"weightless"``）、
        ``rope``（配置里的 ``rope_parameters``，按层的类型各取一份时取这一层的，比如 Gemma 3 的局部
        和全局基数：默认、``llama3``、``yarn`` 或 Phi-3 的 ``longrope``（配置没写 ``factor`` 时，按
        transformers 的算法取 ``max_position_embeddings / original_max_position_embeddings``），
        连同它的 ``partial_rotary_factor``；前后两半配对，或者像 GLM-4 的代码那样相邻两维配对；
        以及 Llama 4 的复数写法；SmolLM3 和 Llama 4 的 NoPE 层 ``use_rope`` 为 0，取 ``None``）、
        ``window``（Mistral 和 Mixtral 的 ``sliding_window``；Qwen、Gemma 和 gpt-oss 的滑动窗口
        层）、``chunk``（Llama 4 块内注意力层的 ``attention_chunk_size``）、``temperature``
        （Llama 4 NoPE 层的 ``attn_scale`` 和 ``floor_scale``）、``softcap``（Gemma 2 的
        ``attn_logit_softcapping``，运行这个层确认它确实按它加上限时才保留）、``sinks``（gpt-oss
        的 ``sinks`` 参数，复制进 ``sink_logits``）和 ``gate``（Qwen3-Next 宽一倍的
        ``q_proj``：每个头先是查询、再是门控，原样复制进 ``W_q``）。Llama、Mistral、Mixtral、
        Qwen2、Qwen2-MoE、Qwen3、Qwen3-MoE、Gemma、Gemma 2、Gemma 3、Granite、GLM-4、gpt-oss、
        Qwen3-Next、SmolLM3、OLMo 2、Phi-3、Llama 4、StarCoder2、OLMo 3、GLM-4.5、Cohere、
        Nemotron、Qwen3.5 和 Qwen3.5-MoE 的注意力都在其中（即 ``FAMILIES``；MoE 模型的专家在 MLP
        里，不在这里）；
        Phi-3 只有一个 ``qkv_proj``，按行切成 ``W_q``、``W_k`` 和 ``W_v``（先是查询的各个头，再是
        键的，最后是值的）。权重原样复制，设备和 dtype 与模块相同。以
        ``m(x, is_causal=True)`` 调用时，结果就是模块对位置 0–``q_len - 1`` 在因果（以及滑动窗口）
        掩码下的输出；带着 [`KVCache`][mha.cache.KVCache] 调用时从位置 ``len(cache)``
        接着算，与模块用它自己的缓存时相同。DeepSeek-V2 和 V3 的注意力转成 ``mha.mla.MLA``：秩和
        各部分的维度取自配置，旋转是相邻两维配对（V2 总是如此，V3 看 ``rope_interleave``），
        softmax 的缩放系数取模块的 ``scaling``（配置的 ``rope_parameters`` 设了 ``mscale_all_dim``
        时，它已乘上 YaRN 的 mscale 的平方）；调用方式相同，解码时用
        [`LatentCache`][mha.mla.LatentCache]。

        最后，把这个层复制一份、转成 float64 并重新随机抽取权重（排列方式由代码决定；量级为 1 的
        权重能把它显现出来，不管层自己的权重多小，也不管它是否在 meta 设备上），像它的模型那样
        运行（用模型的旋转位置编码给出的表和因果掩码），输入是固定的 6 个位置，与由它构建的模块
        并排比较：两者之差必须在这个层自己的舍入误差以内（在它身上量出：副本在 float32 下与
        float64 下之差）。旋转的几种排列方式里取最接近的；若有两种都在舍入误差以内，就拒绝，
        并写出这两种。属性说不出来的差别，由这一步发现；配置说要旋转、实际却不旋转的层（Cohere 2
        和 EXAONE 4 的全局层）会被拒绝，并指出这一点。meta 设备上的层得到 meta 设备上的模块
        （离开 meta 设备时再计算它的旋转表）。

        参数：
            module: 这两种结构之一的 transformers 注意力层（由配置构建，不下载任何东西）。

        返回：
            一个 ``mha.full.MHA``（DeepSeek 的潜在注意力则是 ``mha.mla.MLA``），与模块处于同一
            模式（训练或评估）。

        异常：
            TypeError: ``module`` 没有 ``config`` 和 ``layer_idx``，或者没有这两种结构的投影
                （比如 GPT-NeoX 的 ``query_key_value``）；错误信息会列出它的子模块。
            ValueError: 这个层做了 ``mha`` 不做的事，错误信息会写出是什么：``from_hf`` 不对应的
                参数、子模块或属性，含有 nan 或 inf 的参数，``is_causal=False``，完整、滑动窗口和
                块内注意力以外的层类型，形状不同的投影，公式不同的 q/k 归一化，默认、``llama3``、
                ``yarn``、``longrope`` 之外的 rope 类型（逐个写出）；或者运行起来，这个层算出的与
                由它构建的模块不同。
    """
    return _converted(module, {})


def _converted(module: nn.Module, settled: dict) -> mha.full.MHA | mha.mla.MLA:
    """``from_hf(module)``; ``settled`` holds what running a layer settled (its rotation, whether
    it caps its scores), by what decides it (``_settle_key``): ``swap_attention`` runs one layer of
    each kind, not every layer."""
    _check_module(module)
    meta = any(p.is_meta for p in module.parameters())
    if not meta:  # a layer on the meta device has no values yet: nothing to check
        _check_finite(module)
    kind = _layout(module)
    weight = module.o_proj.weight
    if kind == "mla":
        arguments, names = _filled(module, FROM_HF_MLA_FILLS), _HF_MLA_NAMES
        build = lambda arguments: mha.mla.MLA(**arguments)  # noqa: E731
    else:
        _check_projections(module)
        arguments, names = vars(mha.full.Options(**_filled(module, FROM_HF_FILLS))), _HF_NAMES
        build = lambda arguments: mha.full.MHA(**arguments)  # noqa: E731
    key = _settle_key(module, arguments)
    if key not in settled:
        layer = _drawn(module)
        ours = _load_renamed(build(arguments).double(), layer, names)
        settled[key] = _settle(ours, layer)
    rotation, capped = settled[key]
    arguments["rope"] = None if rotation is None else _rope_from_hf(module, *rotation)
    if kind == "mha" and not capped:
        arguments["softcap"] = None
    m = build(arguments).to(device=weight.device, dtype=weight.dtype)
    return _load_renamed(m, module, names).train(module.training)


def _settle_key(module: nn.Module, arguments: dict[str, object]) -> tuple:
    """What decides what running ``module`` settles: its class, the arguments read from it and
    its attributes of plain values but its index (two layers of one model alike in these run
    the same code on the same sizes)."""
    plain = (bool, int, float, str, type(None))
    attributes = sorted(
        (n, repr(v))
        for n, v in vars(module).items()
        if isinstance(v, plain) and n not in ("layer_idx", "training")
    )
    return type(module), repr(arguments), tuple(attributes), repr(module.config)


def _check_finite(module: nn.Module) -> None:
    """Every parameter of ``module`` is finite: a nan in a checkpoint's weights would be carried
    over, unseen until the outputs are nan."""
    for name, p in module.named_parameters():
        bad = (~torch.isfinite(p.detach())).sum().item()
        if bad:
            raise ValueError(
                f"{type(module).__name__}.{name} holds nan or inf ({bad} of {p.numel()} "
                "values): a layer built on its own leaves the parameters it makes with "
                "torch.empty unwritten (gpt-oss's sinks); initialise them (the model's "
                "post_init(), or torch.nn.init) before from_hf"
            )


def _filled(module: nn.Module, fills: dict) -> dict[str, object]:
    """Each argument ``fills`` reads from ``module``; one it lacks is a ``ValueError`` naming it."""
    try:
        return {name: fill(module) for name, fill in fills.items()}
    except AttributeError as error:
        raise ValueError(
            f"{type(module).__name__} lacks what from_hf reads from a layer of its layout: {error}"
        ) from error


def _rope_parameters(module: nn.Module) -> object:
    """The config's ``rope_parameters`` for ``module``'s layer: Gemma 3's hold one per layer type
    (a local base on sliding layers, a global one on full layers), the others one for all."""
    said = getattr(module.config, "rope_parameters", None)
    layer_type = _layer_type(module)
    if isinstance(said, dict) and isinstance(said.get(layer_type), dict):
        return said[layer_type]
    return said


def _rope_from_hf(
    module: nn.Module, rotary_dims: int, interleaved: bool = False
) -> RotaryEmbedding:
    """The rotary embedding a transformers layer's config describes (its ``rope_parameters``, of
    its layer type where they differ by type), rotating ``rotary_dims`` dimensions of each head."""
    said = _rope_parameters(module)
    if not isinstance(said, dict) or "rope_theta" not in said:
        raise ValueError(
            f"the config's rope_parameters is {said!r}; from_hf reads one rotation from it, a "
            "dict with rope_theta (and rope_type)"
        )
    scaling = dict(said)
    base = scaling.pop("rope_theta")
    kind = scaling.get("rope_type", "default")
    if kind not in SCALINGS:
        raise ValueError(
            f"the config's rope_type is {kind!r}; mha.rope implements {sorted(SCALINGS)}"
        )
    scaling.pop("partial_rotary_factor", None)  # rotary_dims says it
    # Qwen3.5's sections of the pairs that turn by a text position, an image's height or width:
    # for text the three positions are one, and every pair turns by it
    scaling.pop("mrope_section", None)
    scaling.pop("mrope_interleaved", None)
    if kind == "dynamic":
        # transformers grows the base past the config's max_position_embeddings, whatever an
        # original_max_position_embeddings in the rope_parameters says
        scaling["original_max_position_embeddings"] = module.config.max_position_embeddings
    if kind == "longrope" and scaling.get("factor") is None:
        # transformers' default: the stretch from the trained context to the model's (Phi-3's)
        trained = scaling.get("original_max_position_embeddings")
        scaling["factor"] = module.config.max_position_embeddings / trained if trained else None
    return RotaryEmbedding(
        rotary_dims,
        base=base,
        interleaved=interleaved,
        scaling=None if kind == "default" else scaling,
    )


def _hf_rotates(module: nn.Module) -> bool:
    """Whether the layer rotates its queries and keys: all do but SmolLM3's NoPE layers, whose
    ``use_rope`` (its config's ``no_rope_layers``, 0 for a layer without rotation) says so."""
    return bool(getattr(module, "use_rope", True))


def _rotations(module: nn.Module) -> list[tuple[int, bool]]:
    """The rotations a layer may do, ``(rotary_dims, interleaved)``, the likeliest first: the
    config's share of each head (``partial_rotary_factor``, as transformers rounds it), then the
    whole head (which some families rotate whatever the factor says); pairs of halves, then
    interleaved pairs (DeepSeek's latent layout: as ``rope_interleave`` says first)."""
    config = module.config
    if "kv_a_proj_with_mqa" in dict(module.named_children()):
        said, size = bool(getattr(config, "rope_interleave", False)), config.qk_rope_head_dim
        return [(size, said), (size, not said)][: size // 2]
    d = module.head_dim
    partial = dict(_rope_parameters(module) or {}).get("partial_rotary_factor", 1.0)
    sizes = dict.fromkeys([int(d * partial), d])  # in order, once each
    # two dims are one pair, whichever way they are paired: one candidate, not two alike
    return [(size, interleaved) for size in sizes for interleaved in (False, True)[: size // 2]]


# ---- What no attribute says, settled by running the layer ---------------------------------------
# from_hf runs the layer beside the module it builds, to settle the rotation's layout (and whether
# Gemma 2's soft-cap is read). It runs a float64 copy of it whose parameters are drawn anew
# (_drawn): the layout is the code's, not the weights', and with scores of size 1 another layout is
# far off (0.1 and more) whatever the scale of the layer's own weights (small at transformers'
# initialisation, none at all on the meta device), while the right one is off by rounding only.
# That rounding is measured on the layer: the same copy run in float32 (transformers computes some
# steps in float32 whatever the input's dtype: Llama 4's rotation, DeepSeek-V2's, Gemma 2's eager
# softmax, the RMSNorms' statistics). A candidate passes within _ROUNDING_MARGIN times it.
_PROBE_LENGTH = 6
_ROUNDING_MARGIN = 16.0


def _drawn(module: nn.Module) -> nn.Module:
    """A copy of ``module`` on the CPU in float64, without the hooks put on it, its parameters
    drawn anew from a fixed generator: matrices ``N(0, 1 / fan_in)`` (scores of size 1), vectors
    (norms' weights, biases, sinks) ``1 + N(0, 0.3)``. ``module``'s own values are not read (it may
    be on the meta device, or anywhere)."""
    memo = {
        id(t): nn.Parameter(t.new_empty(t.shape, device="meta"), requires_grad=False)
        for t in module.parameters()
    }
    memo.update({id(t): t.new_empty(t.shape, device="meta") for t in module.buffers()})
    copied = copy.deepcopy(module, memo).to_empty(device="cpu").double()
    for sub in copied.modules():  # the layer's own code: no hook (accelerate's) around it
        sub._forward_hooks.clear()
        sub._forward_pre_hooks.clear()
        vars(sub).pop("forward", None)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for t in copied.parameters():
            drawn = torch.randn(t.shape, generator=generator, dtype=torch.float64)
            t.copy_(drawn / math.sqrt(t.shape[-1]) if t.dim() > 1 else 1.0 + 0.3 * drawn)
        for t in copied.buffers():
            t.zero_()
    return copied


def _probe_tensor(shape: tuple[int, ...]) -> torch.Tensor:
    """A fixed random float64 tensor on the CPU (the global generator is left as it was)."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def _relative(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    """The largest difference, relative to ``theirs``' largest magnitude."""
    scale = theirs.abs().max().clamp_min(torch.finfo(theirs.dtype).tiny)
    return ((ours.double() - theirs.double()).abs().max() / scale).item()


def _tolerance(module: nn.Module, x: torch.Tensor, run=None) -> float:
    """How far from the float64 ``module`` (run on ``x`` by ``run(module, x)``, by default
    ``module(x)``) a float64 computation of the same thing may be: ``_ROUNDING_MARGIN`` times the
    rounding measured on it, ``module`` run in float32 against itself in float64 (at least the
    margin times float64's own rounding)."""
    run = run or (lambda module, x: module(x))
    with torch.no_grad():
        exact = run(module, x)
        rounded = run(copy.deepcopy(module).float(), x.float())
    rounding = max(_relative(rounded, exact), torch.finfo(torch.float64).eps)
    return _ROUNDING_MARGIN * rounding


def _rotary_class(module: nn.Module) -> type:
    """The class of the rotary embedding ``module``'s model makes its tables with: of the classes
    named ``...RotaryEmbedding`` in its module that take a ``config``, ``<Name>RotaryEmbedding``
    (``<Name>Attention``'s), else the one whose name starts with ``<Name>`` (of several, the one
    of ``<Name>Text...``: Qwen3.5's ``Qwen3_5TextRotaryEmbedding``, not its vision tower's),
    else the only one."""
    name, code = type(module).__name__, sys.modules[type(module).__module__]
    prefix = name.removesuffix("Attention")
    found = {
        n: c
        for n, c in vars(code).items()
        if n.endswith("RotaryEmbedding")
        and isinstance(c, type)
        and issubclass(c, nn.Module)
        and list(inspect.signature(c.__init__).parameters)[1:2] == ["config"]
    }
    if prefix + "RotaryEmbedding" in found:
        return found[prefix + "RotaryEmbedding"]
    named = [n for n in found if n.startswith(prefix)] or list(found)
    text = [n for n in named if n.startswith(prefix + "Text")]
    if len(named) > 1 and len(text) == 1:  # a multimodal model's: its language model's tables
        named = text
    if len(named) != 1:
        raise ValueError(
            f"from_hf runs {name} with its model's rotary embedding, and "
            f"{type(module).__module__} has {len(named)} classes that could be it (a class "
            f"named ...RotaryEmbedding taking a config): {sorted(named) or 'none'}"
        )
    return found[named[0]]


def _run_layer(module: nn.Module, x: torch.Tensor, window, chunk) -> torch.Tensor:
    """``module``'s output for ``x`` ``[1, q_len, hidden_size]`` at positions ``0 .. q_len - 1``,
    run as its model runs it: the tables of its model's rotary embedding, an additive causal mask
    (with ``window`` and ``chunk``), in evaluation mode, under its eager or sdpa path (sdpa where
    its model's is another: flash attention's kernels take no additive mask; eager for a soft-cap
    or sinks, which transformers' sdpa path lacks)."""
    rotary_class = _rotary_class(module)
    positions = torch.arange(x.size(1))
    i, j = positions[:, None], positions[None, :]
    visible = j <= i
    if window is not None:
        visible &= i - j < window
    if chunk is not None:
        visible &= i // chunk == j // chunk
    mask = torch.zeros(visible.shape, dtype=x.dtype)
    mask = mask.masked_fill(~visible, torch.finfo(x.dtype).min)[None, None]
    config, training = module.config, module.training
    implementation = getattr(config, "_attn_implementation", None)
    capped = getattr(module, "attn_logit_softcapping", None) is not None
    runs = "eager" if capped or isinstance(getattr(module, "sinks", None), nn.Parameter) else "sdpa"
    # Gemma 3's rotary embedding makes the tables of one layer type at a time
    per_type = "layer_type" in inspect.signature(rotary_class.forward).parameters
    where = (_layer_type(module),) if per_type else ()
    try:
        if implementation not in (None, "eager", runs):
            config._attn_implementation = runs
        module.training = False  # what the attention reads for its dropout
        with torch.no_grad(), torch.autocast("cpu", enabled=False):
            tables = rotary_class(config)(x, positions[None], *where)
            out = module(x, position_embeddings=tables, attention_mask=mask)
    finally:
        if implementation not in (None, "eager", runs):
            config._attn_implementation = implementation
        module.training = training
    return out[0] if isinstance(out, tuple) else out


def _probe(m: nn.Module, layer: nn.Module) -> float:
    """How far ``m``'s output is from ``layer``'s (both float64, on the CPU) on a fixed input of
    ``_PROBE_LENGTH`` positions, relative to the largest; the layer run by ``_run_layer`` with
    ``m``'s window and chunk."""
    x = _probe_tensor((1, _PROBE_LENGTH, m.hidden_size))
    training = m.training
    try:
        theirs = _run_layer(layer, x, getattr(m, "window", None), getattr(m, "chunk", None))
        with torch.no_grad():
            ours = m.eval()(x, is_causal=True)
    except Exception as error:  # the layer does not run as the Llama family's runs
        raise ValueError(
            f"from_hf runs {type(layer).__name__} as its model does (hidden states, its rotary "
            f"embedding's tables, a mask), and it raised {type(error).__name__}: {error}"
        ) from error
    finally:
        m.train(training)
    return _relative(ours, theirs)


def _settle(ours: nn.Module, layer: nn.Module) -> tuple[tuple[int, bool] | None, bool]:
    """What running ``layer`` (``_drawn``'s copy) beside ``ours`` (the module built from it, in
    float64) settles: its rotation ``(rotary_dims, interleaved)`` or ``None``, and whether it caps
    its scores by its soft-cap (``ours``'s ``softcap`` kept)."""
    x = _probe_tensor((1, _PROBE_LENGTH, ours.hidden_size))
    window, chunk = getattr(ours, "window", None), getattr(ours, "chunk", None)
    try:
        tolerance = _tolerance(layer, x, lambda module, x: _run_layer(module, x, window, chunk))
    except Exception as error:  # as in _probe
        raise ValueError(
            f"from_hf runs {type(layer).__name__} as its model does (hidden states, its rotary "
            f"embedding's tables, a mask), and it raised {type(error).__name__}: {error}"
        ) from error
    rotation = _settle_rotation(ours, layer, tolerance)
    capped = getattr(ours, "softcap", None) is not None and _settle_softcap(ours, layer)
    return rotation, capped


def _settle_rotation(m: nn.Module, layer: nn.Module, tolerance: float) -> tuple[int, bool] | None:
    """The rotation of ``_rotations`` under which ``m`` computes what ``layer`` does, the nearest
    (``None`` for a layer whose ``use_rope`` says it does not rotate); ``m`` is left rotating so.
    A ``ValueError`` saying how far each is when none is within ``tolerance``, or when two are
    within it of each other (the run does not tell them apart); naming a layer that computes as
    one without rotation although nothing it carries says so (Cohere 2's and EXAONE 4's global
    layers)."""
    name = type(layer).__name__
    if not _hf_rotates(layer):  # SmolLM3's NoPE layer: no rotation, which the run confirms
        m.rope = None
        off = _probe(m, layer)
        if off <= tolerance:
            return None
        raise ValueError(
            f"{name} computes otherwise than the {type(m).__name__} from_hf reads from its config "
            f"and attributes: run on {_PROBE_LENGTH} positions, the two outputs differ by "
            f"{off:.2g} without rotation (use_rope={layer.use_rope!r}) (relative to the largest "
            f"output; at most {tolerance:.2g}, the layer's rounding, passes)"
        )
    ranked, unbuilt = [], []
    for rotation in _rotations(layer):
        try:  # LongRoPE's factors fit one width only: a candidate of another cannot be built
            m.rope = _rope_from_hf(layer, *rotation)
        except ValueError as error:
            unbuilt.append(error)
            continue
        ranked.append((_probe(m, layer), rotation))
    if not ranked:
        raise unbuilt[0]
    ranked.sort(key=lambda tried: tried[0])
    (off, best), said = (
        ranked[0],
        "; ".join(f"{o:.2g} rotating {_rotation_said(r)}" for o, r in ranked),
    )
    if off > tolerance:
        m.rope = None
        unrotated = _probe(m, layer)
        if unrotated <= tolerance:
            raise ValueError(
                f"{name} does not rotate on this layer (a NoPE layer, as Cohere 2's and EXAONE "
                f"4's global layers): run on {_PROBE_LENGTH} positions, it computes as the "
                f"{type(m).__name__} without rotation ({unrotated:.2g} off), though its config "
                "gives it rope_parameters and no attribute (a use_rope of 0) says it does not "
                f"rotate; the rotations differ by {said}. from_hf converts a layer whose "
                "rotation it reads, not one that decides by itself"
            )
        raise ValueError(
            f"{name} computes otherwise than the {type(m).__name__} from_hf reads from its config "
            f"and attributes: run on {_PROBE_LENGTH} positions, the two outputs differ by "
            f"{said} (relative to the largest output; at most {tolerance:.2g}, the layer's "
            "rounding, passes)"
        )
    if len(ranked) > 1 and ranked[1][0] - off <= tolerance:
        second, other = ranked[1]
        raise ValueError(
            f"{name}'s rotation is not settled: run on {_PROBE_LENGTH} positions, rotating "
            f"{_rotation_said(best)} and rotating {_rotation_said(other)} both compute what it "
            f"does, within its rounding ({off:.2g} and {second:.2g}; at most {tolerance:.2g} "
            "apart tells nothing)"
        )
    m.rope = _rope_from_hf(layer, *best)
    return best


def _rotation_said(rotation: tuple[int, bool]) -> str:
    """``(8, True)`` as ``"8 dims in interleaved pairs"``."""
    rotary_dims, interleaved = rotation
    return f"{rotary_dims} dims in {'interleaved pairs' if interleaved else 'pairs of halves'}"


def _settle_softcap(m: nn.Module, layer: nn.Module) -> bool:
    """Whether the layer caps its scores by its ``attn_logit_softcapping`` (``m``'s soft-cap): both
    run with a cap so tight that it flattens every score, and with ``m`` uncapped. A layer that
    reads its attribute (Gemma 2's) agrees with the first; one that carries the config's value and
    never reads it (Gemma 3's) with the second."""
    cap = m.softcap
    m.softcap = layer.attn_logit_softcapping = _TIGHT_CAP
    try:
        capped = _probe(m, layer)
        m.softcap = None
        plain = _probe(m, layer)
    finally:
        layer.attn_logit_softcapping = cap
        m.softcap = cap
    return capped <= plain


# A cap that flattens the probe's scores (of size 1) to nearly uniform weights
_TIGHT_CAP = 1e-3


# How from_hf fills each argument of mha.mla.MLA from DeepSeek's latent attention (V2's and V3's),
# and how an MLA gives each back (the module keeps some under shorter names): to_hf compares them.
FROM_HF_MLA_FILLS = {
    "hidden_size": lambda module: module.config.hidden_size,
    "heads_num": lambda module: module.config.num_attention_heads,
    "q_lora_rank": lambda module: module.config.q_lora_rank,
    "kv_lora_rank": lambda module: module.config.kv_lora_rank,
    "qk_nope_head_dim": lambda module: module.config.qk_nope_head_dim,
    "qk_rope_head_dim": lambda module: module.config.qk_rope_head_dim,
    "v_head_dim": lambda module: module.config.v_head_dim,
    "rope": lambda module: _rope_from_hf(module, *_rotations(module)[0]),
    "scale": lambda module: float(module.scaling),
    "bias": lambda module: module.kv_a_proj_with_mqa.bias is not None,
    "norm_eps": lambda module: _norm_eps(module.kv_a_layernorm),
}
_MLA_ARGUMENTS = {
    "hidden_size": lambda m: m.hidden_size,
    "heads_num": lambda m: m.heads_num,
    "q_lora_rank": lambda m: m.q_lora_rank,
    "kv_lora_rank": lambda m: m.kv_lora_rank,
    "qk_nope_head_dim": lambda m: m.nope_dims,
    "qk_rope_head_dim": lambda m: m.rope_dims,
    "v_head_dim": lambda m: m.v_dims,
    "rope": lambda m: m.rope,
    "scale": lambda m: m.scale,
    "bias": lambda m: m.W_dkv.bias is not None,
    "norm_eps": lambda m: m.kv_norm.eps,
}


# ---- A whole transformers model: swap its attention layers for mha's, and back ----------------


def _hf_options(hf_attention: nn.Module) -> dict[str, object]:
    """The arguments ``from_hf`` builds its module with from ``hf_attention`` (the fields of
    ``mha.full.Options``, resolved, or ``mha.mla.MLA``'s arguments): those of the module it
    builds, its rotation settled by running the layer."""
    return _own_options(from_hf(hf_attention))


def _own_options(module: nn.Module) -> dict[str, object]:
    """The same arguments read back from an ``mha`` module."""
    if isinstance(module, mha.mla.MLA):
        return {name: read(module) for name, read in _MLA_ARGUMENTS.items()}
    return vars(module.options.resolved())


def _said(name: str, value: object, options: dict[str, object]) -> object:
    """An option as to_hf compares it: a rotation by what it computes, the default scale as the
    number it stands for."""
    if isinstance(value, RotaryEmbedding):
        return (value.rotary_dims, value.base, value.interleaved, value.scaling)
    if name == "scale" and value is None:
        return options["head_size"] ** -0.5
    return value


def _differences(module: nn.Module, hf_attention: nn.Module) -> list[str]:
    """Each option of ``module`` that differs from what ``from_hf(hf_attention)`` would build."""
    expected, actual = _hf_options(hf_attention), _own_options(module)
    problems = []
    for name, wanted in expected.items():
        if name == "fast":
            continue  # how the attention is computed, not what: any value computes the same
        if name == "norm_eps" and not expected.get("qk_norm", True) and not actual["qk_norm"]:
            continue  # the eps of norms neither side has
        if _said(name, actual[name], actual) != _said(name, wanted, expected):
            problems.append(f"{name}={actual[name]!r}, expected {name}={wanted!r}")
    return problems


def to_hf(module: nn.Module, hf_attention: nn.Module) -> nn.Module:
    """Copy an ``mha`` module's weights into a transformers attention module.

    The inverse of [`from_hf`][mha.interop.from_hf]: the parameters take transformers' names
    back (``W_q`` to ``q_proj``, ...; the same table, read the other way), and are copied into
    ``hf_attention``'s own tensors (cast to their dtype and device, as ``load_state_dict``
    does). First ``module``'s options are compared with those of the module
    ``from_hf(hf_attention)`` builds (``FROM_HF_FILLS``: sizes, heads, head size, biases, scale,
    q/k norm, rotation, window; ``fast`` aside, which changes how, not what), so that the copy
    computes what ``module`` computes.

    Args:
        module: an [`mha.full.MHA`][mha.full.MHA], or an [`mha.mla.MLA`][mha.mla.MLA] for
            DeepSeek's latent attention.
        hf_attention: a transformers attention layer ``from_hf`` converts.

    Returns:
        ``hf_attention``, its weights now ``module``'s.

    Raises:
        TypeError: ``hf_attention`` is not of a layout ``from_hf`` converts, or ``module`` is
            not the kind of ``mha`` module it converts to.
        ValueError: ``from_hf`` refuses ``hf_attention`` (the message says why), or an option of
            ``module`` differs from ``hf_attention``'s; the message names each, with both values.

    Examples:
        >>> from transformers import LlamaConfig
        >>> from transformers.models.llama.modeling_llama import LlamaAttention
        >>> config = LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2)
        >>> hf = LlamaAttention(config, layer_idx=0)
        >>> m = from_hf(hf)
        >>> # 在 mha 这边改动权重
        >>> _ = m.W_q.weight.data.mul_(2.0)  # changed on mha's side
        >>> torch.equal(to_hf(m, hf).q_proj.weight, m.W_q.weight)
        True
        >>> to_hf(mha.full.MHA(32, 4, kv_heads=4, bias=False), hf)
        Traceback (most recent call last):
        ...
        ValueError: cannot copy module into LlamaAttention: kv_heads=4, expected kv_heads=2; ...

    中文:
        把 ``mha`` 模块的权重复制进 transformers 的注意力模块。

        它是 [`from_hf`][mha.interop.from_hf] 的逆操作：参数换回 transformers 的名字（``W_q`` 换回
        ``q_proj`` 等，用的是同一张表，反过来读），复制进 ``hf_attention`` 自己的张量（按它们的
        dtype 和设备转换，与 ``load_state_dict`` 相同）。复制之前先比较 ``module`` 的选项和
        ``from_hf(hf_attention)`` 构建出的模块的选项（``FROM_HF_FILLS``：尺寸、头数、每个头的
        维度、偏置、缩放系数、q/k 的归一化、旋转、窗口；``fast`` 除外，它只改变怎样算，不改变算
        什么），保证复制过去的模块算的就是 ``module`` 算的。

        参数：
            module: 一个 [`mha.full.MHA`][mha.full.MHA]；对 DeepSeek 的潜在注意力则是
                [`mha.mla.MLA`][mha.mla.MLA]。
            hf_attention: ``from_hf`` 能转换的 transformers 注意力层。

        返回：
            ``hf_attention`` 本身，权重已换成 ``module`` 的。

        异常：
            TypeError: ``hf_attention`` 的结构 ``from_hf`` 不能转换，或者 ``module`` 不是它对应的
                那种 ``mha`` 模块。
            ValueError: ``from_hf`` 拒绝转换 ``hf_attention``（错误信息写出原因），或者 ``module``
                的某个选项与 ``hf_attention`` 的不同；错误信息逐个写出，两边的值都写上。
    """
    name = type(hf_attention).__name__
    kind = mha.mla.MLA if _layout(hf_attention) == "mla" else mha.full.MHA
    if not isinstance(module, kind):
        raise TypeError(
            f"{name} takes the weights of a {kind.__module__}.{kind.__name__}, "
            f"got {type(module).__name__}"
        )
    problems = _differences(module, hf_attention)
    if problems:
        raise ValueError(f"cannot copy module into {name}: {'; '.join(problems)}")
    theirs = _hf_names(module, back=True)
    renamed = {_renamed(key, theirs): value for key, value in module.state_dict().items()}
    hf_attention.load_state_dict(_fuse(hf_attention, renamed), strict=True)
    return hf_attention


def _hf_names(m: nn.Module, *, back: bool = False) -> dict[str, str]:
    """transformers' submodule names to those of ``m`` (an ``MLA``: DeepSeek-V3's), or with
    ``back=True`` the same table read the other way."""
    names = _HF_MLA_NAMES if isinstance(m, mha.mla.MLA) else _HF_NAMES
    return {ours: theirs for theirs, ours in names.items()} if back else names


def _same_requires_grad(source: nn.Module, target: nn.Module, names: dict[str, str]) -> None:
    """Each parameter of ``target`` requires grad as the one of ``source`` it was copied from
    (``names``: ``source``'s submodule names to ``target``'s), so a frozen weight stays frozen."""
    wanted, needs = dict(target.named_parameters()), {}
    for key, parameter in source.named_parameters():
        part, _, leaf = key.rpartition(".")
        if part == _HF_FUSED:  # Phi-3's fused projection: W_q's, W_k's and W_v's
            keys = [_renamed(f"{n}.{leaf}", names) for n in _HF_SPLIT]
        else:
            key = _renamed(key, names)
            keys = [key if key in wanted else f"{_HF_FUSED}.{leaf}"]  # W_q back into qkv_proj
        for key in keys:
            needs[key] = needs.get(key, False) or parameter.requires_grad
    for key, grad in needs.items():
        wanted[key].requires_grad_(grad)


def swap_attention(model: nn.Module) -> nn.Module:
    """Replace, in place, every attention layer of a transformers model by ``mha``'s.

    Each of its transformers attention layers (a module of a class named ``...Attention``, with
    ``config`` and ``layer_idx``) is converted by [`from_hf`][mha.interop.from_hf]: those of
    Llama, Mistral, Mixtral, Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE, Gemma, Granite, GLM-4, Gemma 2,
    Gemma 3, gpt-oss, Qwen3-Next, SmolLM3, OLMo 2, Phi-3, Llama 4, StarCoder2, OLMo 3, GLM-4.5,
    Cohere, Nemotron, Qwen3.5 and Qwen3.5-MoE (``FAMILIES``) and of DeepSeek-V2 and V3, among
    others of the same layer. A model built on the meta device is swapped as well (its layers'
    rotation settled on a copy with drawn weights); load its weights into the swapped layers. If
    one is refused, none is swapped and the error names it and why. Each becomes an
    [`HFAttention`][mha.hf.HFAttention] around ``from_hf(layer)``: the same weights
    (which parameters require grad too), device, dtype and mode. The model then runs as before,
    ``model(...)``, ``model.generate(...)`` (greedy, sampling, beam search, with left padding
    and sliding windows) and training alike, with ``mha`` computing every attention; its logits
    equal the original's up to rounding. [`HFAttention`][mha.hf.HFAttention] says how
    transformers' masks, positions and cache are taken.
    [`restore_attention`][mha.interop.restore_attention] puts transformers' modules back, with
    the weights as they are then (to ``save_pretrained``).

    Args:
        model: a transformers model (a causal LM, or its base model) built from a config or
            loaded with ``from_pretrained``.

    Returns:
        ``model`` itself.

    Raises:
        TypeError: ``model`` is not a ``torch.nn.Module``.
        ValueError: ``model`` has no transformers attention layer (the message names the
            attention classes it has), ``from_hf`` refuses one (the message names the first and
            says why), or the model is swapped already.

    Examples:
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> config = LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
        ...                      intermediate_size=64, num_hidden_layers=2, vocab_size=50)
        >>> model = LlamaForCausalLM(config).eval()
        >>> ids = torch.tensor([[1, 5, 9, 2]])
        >>> before = model(ids).logits
        >>> swapped = swap_attention(model)
        >>> swapped is model, type(model.model.layers[0].self_attn).__name__
        (True, 'HFAttention')
        >>> bool((model(ids).logits - before).abs().max() < 1e-5)
        True

    中文:
        把 transformers 模型的每个注意力层原地换成 ``mha`` 的。

        它的每个 transformers 注意力层（类名形如 ``...Attention``、带 ``config`` 和 ``layer_idx``
        的模块）都交给 [`from_hf`][mha.interop.from_hf] 转换：Llama、Mistral、Mixtral、Qwen2、
        Qwen2-MoE、Qwen3、Qwen3-MoE、Gemma、Granite、GLM-4、Gemma 2、Gemma 3、gpt-oss、
        Qwen3-Next、SmolLM3、OLMo 2、Phi-3、Llama 4、StarCoder2、OLMo 3、GLM-4.5、Cohere、
        Nemotron、Qwen3.5 和 Qwen3.5-MoE（即 ``FAMILIES``）以及 DeepSeek-V2、V3 的都可以，与它们
        同样的层也可以。在 meta 设备上构建的模型同样可以替换（各层的旋转在一份随机抽取权重的副本上
        确定），之后把权重加载进替换后的层即可。只要有一层被拒绝，就一层也不替换，错误信息写出是哪一层、为什么。每一层都
        换成包着 ``from_hf(layer)`` 的 [`HFAttention`][mha.hf.HFAttention]：权重（连同哪些参数
        要求梯度）、设备、dtype 和模式都不变。之后模型照常运行，``model(...)``、
        ``model.generate(...)``（贪心、采样、束搜索，左填充和滑动窗口都可以）和训练都一样，只是
        每个注意力都由 ``mha`` 计算；
        logits 与原模型的只差舍入误差。transformers 的掩码、位置和缓存怎样传进来，见
        [`HFAttention`][mha.hf.HFAttention]。
        [`restore_attention`][mha.interop.restore_attention] 把 transformers 的模块换回去，权重取
        换回时的值（好用 ``save_pretrained`` 保存）。

        参数：
            model: 一个 transformers 模型（因果语言模型，或者它的基础模型），由配置构建，或者用
                ``from_pretrained`` 加载。

        返回：
            ``model`` 本身。

        异常：
            TypeError: ``model`` 不是 ``torch.nn.Module``。
            ValueError: ``model`` 里没有 transformers 的注意力层（错误信息写出它有哪些注意力类），
                ``from_hf`` 拒绝了其中一层（错误信息写出第一层和原因），或者模型已经替换过了。
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    modules = list(model.named_modules())
    if any(isinstance(m, mha.hf.HFAttention) for _, m in modules):
        raise ValueError(
            f"this {type(model).__name__} is swapped already: its attention layers are "
            "mha.hf.HFAttention (restore_attention(model) puts transformers' back)"
        )
    # transformers' attention layers: what HFAttention takes (config, layer_idx), named so
    found = [
        (name, m)
        for name, m in modules
        if "Attention" in type(m).__name__ and hasattr(m, "config") and hasattr(m, "layer_idx")
    ]
    found = [(n, m) for n, m in found if not any(n.startswith(f"{o}.") for o, _ in found)]
    if not found:
        attentions = sorted(
            {type(m).__name__ for _, m in modules if "Attention" in type(m).__name__}
        )
        raise ValueError(
            f"{type(model).__name__} has no transformers attention layer (a module of a class "
            f"named ...Attention, with config and layer_idx); its attention classes: "
            f"{attentions or 'none'}"
        )
    converted, refused, settled = [], [], {}
    for name, layer in found:  # every layer converted before any is swapped
        try:
            converted.append((name, layer, _converted(layer, settled)))
        except Exception as error:  # any error of any layer: named with its layer, none swapped
            kind = "" if isinstance(error, TypeError | ValueError) else f"{type(error).__name__}: "
            refused.append((f"{name} ({type(layer).__name__}): {kind}{error}", error))
    if refused:
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise ValueError(
            f"{type(model).__name__} has attention layers swap_attention cannot convert, so "
            f"none is swapped: {refused[0][0]}{more}"
        ) from refused[0][1]
    for name, layer, attention in converted:
        _same_requires_grad(layer, attention, _hf_names(attention))
        parent, _, child = name.rpartition(".")
        model.get_submodule(parent).register_module(child, mha.hf.HFAttention(attention, layer))
    return model


def restore_attention(model: nn.Module) -> nn.Module:
    """Put transformers' own attention modules back into a model ``swap_attention`` changed.

    Each [`HFAttention`][mha.hf.HFAttention] becomes a new module of the class it replaced,
    built from the same ``config`` and ``layer_idx``, on its device, in its dtype and mode, with
    its weights as they are now ([`to_hf`][mha.interop.to_hf]), which parameters require grad
    too. A model fine-tuned with ``mha`` inside then saves with ``save_pretrained`` and loads
    with ``from_pretrained`` in plain transformers.

    Args:
        model: a model given to [`swap_attention`][mha.interop.swap_attention].

    Returns:
        ``model`` itself.

    Raises:
        TypeError: ``model`` is not a ``torch.nn.Module``, or a swapped layer's projection is
            not an ``nn.Linear`` (peft's LoRA ``lora.Linear`` around it: merge it first with
            ``merge_and_unload()``); no layer is restored then.
        ValueError: ``model`` has no swapped layer.

    Examples:
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> config = LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
        ...                      intermediate_size=64, num_hidden_layers=2, vocab_size=50)
        >>> model = swap_attention(LlamaForCausalLM(config))
        >>> attention = restore_attention(model).model.layers[1].self_attn
        >>> type(attention).__name__, attention.layer_idx
        ('LlamaAttention', 1)

    中文:
        把 transformers 自己的注意力模块放回被 ``swap_attention`` 改过的模型。

        每个 [`HFAttention`][mha.hf.HFAttention] 换成它所替换的那个类的新模块：由同一个
        ``config`` 和 ``layer_idx`` 构建，设备、dtype 和模式与它相同，权重取它此刻的值
        （[`to_hf`][mha.interop.to_hf]），哪些参数要求梯度也相同。在 ``mha`` 里微调过的模型于是
        可以用 ``save_pretrained`` 保存，再在普通的 transformers 里用 ``from_pretrained`` 加载。

        参数：
            model: 交给过 [`swap_attention`][mha.interop.swap_attention] 的模型。

        返回：
            ``model`` 本身。

        异常：
            TypeError: ``model`` 不是 ``torch.nn.Module``，或者某个替换后的层的投影不是
                ``nn.Linear``（外面包着 peft 的 LoRA ``lora.Linear``：先用 ``merge_and_unload()``
                合并）；这时一层也不换回。
            ValueError: ``model`` 里没有被替换的层。
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    swapped = [(n, m) for n, m in model.named_modules() if isinstance(m, mha.hf.HFAttention)]
    if not swapped:
        raise ValueError(
            f"this {type(model).__name__} has no swapped attention layer (mha.hf.HFAttention): "
            "call swap_attention(model) first"
        )
    for name, layer in swapped:  # every layer checked before any is restored
        projections = dict(layer.attention.named_children())
        projections = {n: c for n, c in projections.items() if n.startswith("W_")}
        _check_linear(f"{name}.attention", projections, _ADAPTER_AFTER)
    for name, layer in swapped:
        attention = layer.attention
        weight = next(attention.parameters())
        with torch.device(weight.device):
            original = layer.hf_class(layer.config, layer.layer_idx)
        original = to_hf(attention, original.to(dtype=weight.dtype))
        _same_requires_grad(attention, original, _hf_names(attention, back=True))
        parent, _, child = name.rpartition(".")
        model.get_submodule(parent).register_module(child, original.train(layer.training))
    return model
