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

from __future__ import annotations

import torch
import torch.nn as nn

import mha.full
import mha.hf
import mha.mla
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
    "qk_norm": lambda o: "qk_norm (a norm of each head of q and k)",
    "norm_eps": lambda o: f"norm_eps={o.norm_eps} (the eps of qk_norm's norms)",
    "rope": lambda o: "rope (rotary embeddings)",
    "window": lambda o: "window (a sliding window)",
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


# transformers' attention classes from_hf converts (transformers is never imported by mha: a
# module is recognised by its class name, and read through its config and attributes).
HF_CLASSES = (
    "LlamaAttention",
    "MistralAttention",
    "Qwen2Attention",
    "Qwen3Attention",
    "DeepseekV3Attention",
)
# transformers' submodule names -> ours: Llama's family, then DeepSeek's attention (q_proj without
# a query bottleneck).
_HF_NAMES = {
    "q_proj": "W_q",
    "k_proj": "W_k",
    "v_proj": "W_v",
    "o_proj": "W_o",
    "q_norm": "q_norm",
    "k_norm": "k_norm",
}


def _hf_window(module: nn.Module) -> int | None:
    """The sliding window of a transformers layer: Mistral's is in its config, the others' on
    the layer (``None`` on a layer without one)."""
    if type(module).__name__ == "MistralAttention":
        return getattr(module.config, "sliding_window", None)
    return getattr(module, "sliding_window", None)


# How from_hf fills each option of mha.full.MHA (the fields of mha.full.Options) from a
# transformers attention layer of the Llama family, and the options these layers never use (left
# at their default). mha_site/checkers/options.py checks that every field is in one of the two.
FROM_HF_FILLS = {
    "hidden_size": lambda module: module.config.hidden_size,
    "heads_num": lambda module: module.config.num_attention_heads,
    "kv_heads": lambda module: module.config.num_key_value_heads,
    "dropout": lambda module: float(module.config.attention_dropout),
    "bias": lambda module: tuple(
        ours
        for theirs, ours in _HF_NAMES.items()
        if theirs.endswith("proj") and getattr(module, theirs).bias is not None
    ),
    "head_size": lambda module: module.head_dim,
    "scale": lambda module: float(module.scaling),
    "qk_norm": lambda module: getattr(module, "q_norm", None) is not None,
    "norm_eps": lambda module: (
        float(module.q_norm.variance_epsilon) if getattr(module, "q_norm", None) else 1e-6
    ),
    "rope": lambda module: _rope_from_hf(module.config, module.head_dim),
    "window": _hf_window,
}
FROM_HF_DEFAULTS = {
    "fast": "True: the fused kernel, which computes what transformers' sdpa and eager paths do",
    "context_size": "None: these are self-attention layers, their keys come from x",
}
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


def _load_renamed(m: nn.Module, module: nn.Module, names: dict[str, str]) -> nn.Module:
    """``m`` with ``module``'s parameters copied exactly, each renamed by ``names``; strict, so a
    parameter left over on either side is an error, not a silent default."""
    renamed = {}
    for key, value in module.state_dict().items():
        part, _, leaf = key.rpartition(".")
        renamed[f"{names[part]}.{leaf}"] = value
    m.load_state_dict(renamed, strict=True)
    return m.train(module.training)


def from_hf(module: nn.Module) -> mha.full.MHA | mha.mla.MLA:
    """Build an [`mha.full.MHA`][mha.full.MHA], or from DeepSeek-V3's attention an
    [`mha.mla.MLA`][mha.mla.MLA], equal to a transformers attention module.

    Llama, Mistral, Qwen2 and Qwen3 attention differ in a few switches, each an option of
    ``mha.full.MHA``: ``head_size`` (the config's ``head_dim``), ``bias`` (Qwen2: q, k and v
    only; Llama and Qwen3: the config's ``attention_bias``), ``qk_norm`` (Qwen3), ``rope`` (the
    config's ``rope_parameters``: default, ``llama3`` or ``yarn``) and ``window`` (Mistral's
    ``sliding_window``; Qwen's on its sliding layers). The weights are copied exactly, on the
    module's device and in its dtype. The result called as ``m(x, is_causal=True)`` gives the
    module's output for positions ``0 .. q_len - 1`` under its causal (and sliding-window) mask;
    with a [`KVCache`][mha.cache.KVCache] it continues at position ``len(cache)``, as the module
    does with its own cache. ``DeepseekV3Attention`` becomes an ``mha.mla.MLA`` of the config's
    ranks and head dims, its rotation (interleaved where ``rope_interleave`` says so) and the
    module's ``scaling`` (times YaRN's mscale squared where the config's ``rope_parameters`` set
    ``mscale_all_dim``); it is called the same way, with a
    [`LatentCache`][mha.mla.LatentCache] for decoding.

    Args:
        module: a transformers ``LlamaAttention``, ``MistralAttention``, ``Qwen2Attention``,
            ``Qwen3Attention`` or ``DeepseekV3Attention`` (built from a config; nothing is
            downloaded).

    Returns:
        An ``mha.full.MHA`` (an ``mha.mla.MLA`` for ``DeepseekV3Attention``) in the module's mode
        (training or evaluation).

    Raises:
        TypeError: ``module`` is another class (named in the message).
        ValueError: its config uses what ``mha`` does not implement (a rope type other than
            default, ``llama3`` and ``yarn``) or these classes do not (a
            ``partial_rotary_factor`` other than 1).

    中文:
        构建一个与 transformers 的注意力模块相等的 [`mha.full.MHA`][mha.full.MHA]；DeepSeek-V3 的
        注意力则转成 [`mha.mla.MLA`][mha.mla.MLA]。

        Llama、Mistral、Qwen2 和 Qwen3 的注意力只差几个开关，每个都是 ``mha.full.MHA`` 的一个
        选项：``head_size``（配置里的 ``head_dim``）、``bias``（Qwen2 只有 q、k、v 有偏置；Llama
        和 Qwen3 看配置的 ``attention_bias``）、``qk_norm``（Qwen3）、``rope``（配置里的
        ``rope_parameters``：默认、``llama3`` 或 ``yarn``）和 ``window``（Mistral 的
        ``sliding_window``；Qwen 的滑动窗口层）。权重原样复制，设备和 dtype 与模块相同。以
        ``m(x, is_causal=True)`` 调用时，结果就是模块对位置 0–``q_len - 1`` 在因果（以及滑动
        窗口）掩码下的输出；带着 [`KVCache`][mha.cache.KVCache] 调用时从位置 ``len(cache)`` 接着算，
        与模块用它自己的缓存时相同。``DeepseekV3Attention`` 转成 ``mha.mla.MLA``：秩和各部分的
        维度取自配置，旋转按 ``rope_interleave`` 决定是否交错，softmax 的缩放系数取模块的
        ``scaling``（配置的 ``rope_parameters`` 设了 ``mscale_all_dim`` 时，它已乘上 YaRN 的
        mscale 的平方）；调用方式相同，解码时用
        [`LatentCache`][mha.mla.LatentCache]。

        参数：
            module: transformers 的 ``LlamaAttention``、``MistralAttention``、``Qwen2Attention``、
                ``Qwen3Attention`` 或 ``DeepseekV3Attention``（由配置构建，不下载任何东西）。

        返回：
            一个 ``mha.full.MHA``（``DeepseekV3Attention`` 则是 ``mha.mla.MLA``），与模块处于同一
            模式（训练或评估）。

        异常：
            TypeError: ``module`` 是别的类（错误信息会写出类名）。
            ValueError: 它的配置用了 ``mha`` 没有实现的东西（默认、``llama3``、``yarn`` 之外的
                rope 类型），或者这几个类本身不支持的东西（不等于 1 的 ``partial_rotary_factor``）。
    """
    name = type(module).__name__
    if name not in HF_CLASSES:
        raise TypeError(f"from_hf converts transformers' {', '.join(HF_CLASSES)}; got {name}")
    if name == "DeepseekV3Attention":
        return _mla_from_hf(module)
    options = mha.full.Options(**{field: fill(module) for field, fill in FROM_HF_FILLS.items()})
    weight = module.q_proj.weight
    m = mha.full.MHA.from_options(options).to(device=weight.device, dtype=weight.dtype)
    return _load_renamed(m, module, _HF_NAMES)


def _rope_from_hf(config: object, head_size: int, *, interleaved: bool = False) -> RotaryEmbedding:
    """The rotary embedding a transformers config describes (its ``rope_parameters``)."""
    scaling = dict(config.rope_parameters)
    base = scaling.pop("rope_theta")
    kind = scaling.get("rope_type", "default")
    if kind not in SCALINGS:
        raise ValueError(
            f"the config's rope_type is {kind!r}; mha.rope implements {sorted(SCALINGS)}"
        )
    # These families rotate whole heads (their code has no partial rotation)
    partial = scaling.pop("partial_rotary_factor", 1.0)
    if partial != 1.0:
        raise ValueError(
            f"the config's partial_rotary_factor is {partial}; these attention classes rotate "
            "whole heads (1.0)"
        )
    return RotaryEmbedding(
        head_size,
        base=base,
        interleaved=interleaved,
        scaling=None if kind == "default" else scaling,
    )


# How from_hf fills each argument of mha.mla.MLA from DeepSeek-V3's attention, and how an MLA
# gives each back (the module keeps some under shorter names): to_hf compares the two.
FROM_HF_MLA_FILLS = {
    "hidden_size": lambda module: module.config.hidden_size,
    "heads_num": lambda module: module.config.num_attention_heads,
    "q_lora_rank": lambda module: module.config.q_lora_rank,
    "kv_lora_rank": lambda module: module.config.kv_lora_rank,
    "qk_nope_head_dim": lambda module: module.config.qk_nope_head_dim,
    "qk_rope_head_dim": lambda module: module.config.qk_rope_head_dim,
    "v_head_dim": lambda module: module.config.v_head_dim,
    "rope": lambda module: _rope_from_hf(
        module.config, module.config.qk_rope_head_dim, interleaved=module.config.rope_interleave
    ),
    "scale": lambda module: float(module.scaling),
    "bias": lambda module: module.kv_a_proj_with_mqa.bias is not None,
    "norm_eps": lambda module: float(module.kv_a_layernorm.variance_epsilon),
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


def _mla_from_hf(module: nn.Module) -> mha.mla.MLA:
    """``DeepseekV3Attention`` as an [`mha.mla.MLA`][mha.mla.MLA], the weights copied exactly."""
    weight = module.kv_a_proj_with_mqa.weight
    arguments = {name: fill(module) for name, fill in FROM_HF_MLA_FILLS.items()}
    m = mha.mla.MLA(**arguments).to(device=weight.device, dtype=weight.dtype)
    return _load_renamed(m, module, _HF_MLA_NAMES)


# ---- A whole transformers model: swap its attention layers for mha's, and back ----------------


def _hf_options(hf_attention: nn.Module) -> dict[str, object]:
    """The arguments ``from_hf`` builds its module with from ``hf_attention`` (the fields of
    ``mha.full.Options``, resolved, or ``mha.mla.MLA``'s arguments)."""
    if type(hf_attention).__name__ == "DeepseekV3Attention":
        return {name: fill(hf_attention) for name, fill in FROM_HF_MLA_FILLS.items()}
    options = mha.full.Options(**{f: fill(hf_attention) for f, fill in FROM_HF_FILLS.items()})
    return vars(options.resolved())


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
    does). First ``module``'s options are compared with those ``from_hf(hf_attention)`` would
    build (``FROM_HF_FILLS``: sizes, heads, head size, biases, scale, q/k norm, rotation,
    window; ``fast`` aside, which changes how, not what), so that the copy computes what
    ``module`` computes.

    Args:
        module: an [`mha.full.MHA`][mha.full.MHA], or an [`mha.mla.MLA`][mha.mla.MLA] for a
            ``DeepseekV3Attention``.
        hf_attention: a transformers attention module of a class ``from_hf`` converts.

    Returns:
        ``hf_attention``, its weights now ``module``'s.

    Raises:
        TypeError: ``hf_attention`` is of a class ``from_hf`` does not convert, or ``module``
            is not the kind of ``mha`` module it converts to.
        ValueError: an option of ``module`` differs from ``hf_attention``'s; the message names
            each, with both values.

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
        ``from_hf(hf_attention)`` 会构建出的选项（``FROM_HF_FILLS``：尺寸、头数、每个头的维度、
        偏置、缩放系数、q/k 的归一化、旋转、窗口；``fast`` 除外，它只改变怎样算，不改变算什么），
        保证复制过去的模块算的就是 ``module`` 算的。

        参数：
            module: 一个 [`mha.full.MHA`][mha.full.MHA]；对 ``DeepseekV3Attention`` 则是
                [`mha.mla.MLA`][mha.mla.MLA]。
            hf_attention: transformers 的注意力模块，属于 ``from_hf`` 能转换的类。

        返回：
            ``hf_attention`` 本身，权重已换成 ``module`` 的。

        异常：
            TypeError: ``hf_attention`` 的类 ``from_hf`` 不能转换，或者 ``module`` 不是它对应的那种
                ``mha`` 模块。
            ValueError: ``module`` 的某个选项与 ``hf_attention`` 的不同；错误信息逐个写出，两边的
                值都写上。
    """
    name = type(hf_attention).__name__
    if name not in HF_CLASSES:
        raise TypeError(f"to_hf copies into transformers' {', '.join(HF_CLASSES)}; got {name}")
    mla = name == "DeepseekV3Attention"
    kind = mha.mla.MLA if mla else mha.full.MHA
    if not isinstance(module, kind):
        raise TypeError(
            f"{name} takes the weights of a {kind.__module__}.{kind.__name__}, "
            f"got {type(module).__name__}"
        )
    problems = _differences(module, hf_attention)
    if problems:
        raise ValueError(f"cannot copy module into {name}: {'; '.join(problems)}")
    theirs = _hf_names(module, back=True)
    renamed = {}
    for key, value in module.state_dict().items():
        part, _, leaf = key.rpartition(".")
        renamed[f"{theirs[part]}.{leaf}"] = value
    hf_attention.load_state_dict(renamed, strict=True)
    return hf_attention


def _hf_names(m: nn.Module, *, back: bool = False) -> dict[str, str]:
    """transformers' submodule names to those of ``m`` (an ``MLA``: DeepSeek-V3's), or with
    ``back=True`` the same table read the other way."""
    names = _HF_MLA_NAMES if isinstance(m, mha.mla.MLA) else _HF_NAMES
    return {ours: theirs for theirs, ours in names.items()} if back else names


def _same_requires_grad(source: nn.Module, target: nn.Module, names: dict[str, str]) -> None:
    """Each parameter of ``target`` requires grad as the one of ``source`` it was copied from
    (``names``: ``source``'s submodule names to ``target``'s), so a frozen weight stays frozen."""
    wanted = dict(target.named_parameters())
    for key, parameter in source.named_parameters():
        part, _, leaf = key.rpartition(".")
        wanted[f"{names[part]}.{leaf}"].requires_grad_(parameter.requires_grad)


def swap_attention(model: nn.Module) -> nn.Module:
    """Replace, in place, every attention layer of a transformers model by ``mha``'s.

    Each module of a class [`from_hf`][mha.interop.from_hf] converts (``LlamaAttention``,
    ``MistralAttention``, ``Qwen2Attention``, ``Qwen3Attention``, ``DeepseekV3Attention``)
    becomes an [`HFAttention`][mha.hf.HFAttention] around ``from_hf(layer)``: the same weights
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
        ValueError: ``model`` has no attention layer of those classes (the message names the
            attention classes it has), or is swapped already.

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

        凡是 [`from_hf`][mha.interop.from_hf] 能转换的类（``LlamaAttention``、``MistralAttention``、
        ``Qwen2Attention``、``Qwen3Attention``、``DeepseekV3Attention``）的模块，都换成包着
        ``from_hf(layer)`` 的 [`HFAttention`][mha.hf.HFAttention]：权重（连同哪些参数要求梯度）、
        设备、dtype 和模式都不变。之后模型照常运行，``model(...)``、``model.generate(...)``（贪心、
        采样、束搜索，左填充和滑动窗口都可以）和训练都一样，只是每个注意力都由 ``mha`` 计算；
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
            ValueError: ``model`` 里没有这些类的注意力层（错误信息写出它有哪些注意力类），或者
                已经替换过了。
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    modules = list(model.named_modules())
    if any(isinstance(m, mha.hf.HFAttention) for _, m in modules):
        raise ValueError(
            f"this {type(model).__name__} is swapped already: its attention layers are "
            "mha.hf.HFAttention (restore_attention(model) puts transformers' back)"
        )
    found = [(name, m) for name, m in modules if type(m).__name__ in HF_CLASSES]
    if not found:
        attentions = sorted(
            {type(m).__name__ for _, m in modules if "Attention" in type(m).__name__}
        )
        raise ValueError(
            f"{type(model).__name__} has no attention layer swap_attention converts "
            f"({', '.join(HF_CLASSES)}); its attention classes: {attentions or 'none'}"
        )
    for name, layer in found:
        attention = from_hf(layer)
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
        TypeError: ``model`` is not a ``torch.nn.Module``.
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
            TypeError: ``model`` 不是 ``torch.nn.Module``。
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
