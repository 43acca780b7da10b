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
import mha.mla
import mha.pure
from mha.rope import SCALINGS, RotaryEmbedding

__all__ = ["from_hf", "from_torch", "to_torch"]

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


def _mla_from_hf(module: nn.Module) -> mha.mla.MLA:
    """``DeepseekV3Attention`` as an [`mha.mla.MLA`][mha.mla.MLA], the weights copied exactly."""
    config = module.config
    weight = module.kv_a_proj_with_mqa.weight
    m = mha.mla.MLA(
        config.hidden_size,
        config.num_attention_heads,
        q_lora_rank=config.q_lora_rank,
        kv_lora_rank=config.kv_lora_rank,
        qk_nope_head_dim=config.qk_nope_head_dim,
        qk_rope_head_dim=config.qk_rope_head_dim,
        v_head_dim=config.v_head_dim,
        rope=_rope_from_hf(config, config.qk_rope_head_dim, interleaved=config.rope_interleave),
        scale=float(module.scaling),
        bias=module.kv_a_proj_with_mqa.bias is not None,
        norm_eps=float(module.kv_a_layernorm.variance_epsilon),
    ).to(device=weight.device, dtype=weight.dtype)
    return _load_renamed(m, module, _HF_MLA_NAMES)
