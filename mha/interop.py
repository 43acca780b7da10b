"""Convert between ``mha``'s MHA (annotated or pure) and ``torch.nn.MultiheadAttention``, exactly.

The weights map one to one (``in_proj`` stacks the three projections along dimension 0):

| ``torch.nn.MultiheadAttention``       | ``mha.pure.MHA`` / ``mha.annotated.MHA``     |
|---------------------------------------|----------------------------------------------|
| ``in_proj_weight[0:h]``               | ``W_q.weight``                               |
| ``in_proj_weight[h:2h]``              | ``W_k.weight``                               |
| ``in_proj_weight[2h:3h]``             | ``W_v.weight``                               |
| ``in_proj_bias``                      | ``cat(W_q.bias, W_k.bias, W_v.bias)``        |
| ``out_proj.weight``, ``out_proj.bias``| ``W_o.weight``, ``W_o.bias``                 |

where ``h = hidden_size`` (PyTorch calls it ``embed_dim``, and ``heads_num`` ``num_heads``).

Examples:
    >>> import torch
    >>> from mha.pure import MHA
    >>> from mha.interop import to_torch, from_torch
    >>> model = MHA(hidden_size=20, heads_num=4)
    >>> t = to_torch(model)
    >>> t.in_proj_weight.shape  # [3 * hidden_size, hidden_size]
    torch.Size([60, 20])
    >>> x = torch.randn(2, 3, 20)
    >>> out, _ = t(x, x, x, need_weights=False)
    >>> torch.allclose(out, model(x), atol=1e-6)
    True
    >>> back = from_torch(t)
    >>> all(torch.equal(back.state_dict()[k], v) for k, v in model.state_dict().items())
    True
"""

from __future__ import annotations

import torch
import torch.nn as nn

from mha import pure

__all__ = ["from_torch", "to_torch"]


def to_torch(m: nn.Module, *, batch_first: bool = True) -> nn.MultiheadAttention:
    """Build a ``torch.nn.MultiheadAttention`` holding exactly ``m``'s weights.

    Args:
        m: an ``mha`` MHA (annotated or pure; anything with ``hidden_size``, ``heads_num`` and
            ``W_q``, ``W_k``, ``W_v``, ``W_o`` linear layers with bias).
        batch_first: ``True`` (the default) gives a module that takes ``[batch_size, seq_len,
            hidden_size]`` like ``m``. ``False`` gives one with the same weights that takes
            ``[seq_len, batch_size, hidden_size]``: pass ``x.transpose(0, 1)`` and transpose
            its output back.

    Returns:
        A module on ``m``'s device and dtype; call it as ``t(x, x, x, need_weights=False)``.

    Raises:
        TypeError: ``m`` lacks the attributes above or its linear layers have no bias.

    Examples:
        >>> from mha.pure import MHA
        >>> t = to_torch(MHA(20, 4))
        >>> t.embed_dim, t.num_heads, t.batch_first
        (20, 4, True)

    中文:
        构建一个 ``torch.nn.MultiheadAttention``，权重与 ``m`` 完全相同。

        参数:
            m: ``mha`` 的 MHA，注释版和纯享版都可以。其实任何对象都行，只要有 ``hidden_size``、
                ``heads_num`` 和带偏置的线性层 ``W_q``、``W_k``、``W_v``、``W_o``。
            batch_first: 为 ``True``（默认）时，得到的模块和 ``m`` 一样接受
                ``[batch_size, seq_len, hidden_size]``。为 ``False`` 时权重不变，但模块接受
                ``[seq_len, batch_size, hidden_size]``：传入 ``x.transpose(0, 1)``，
                再把输出转置回来。

        返回:
            与 ``m`` 设备相同、dtype 相同的模块，调用方式为 ``t(x, x, x, need_weights=False)``。

        引发:
            TypeError: ``m`` 缺少上面列出的属性，或者它的线性层没有偏置。
    """
    names = ("hidden_size", "heads_num", "W_q", "W_k", "W_v", "W_o")
    missing = [n for n in names if not hasattr(m, n)]
    if missing:
        raise TypeError(
            f"m must be an mha MHA with attributes {list(names)}, "
            f"got {type(m).__name__} without {missing}"
        )
    linears = (m.W_q, m.W_k, m.W_v, m.W_o)
    if any(not isinstance(lin, nn.Linear) or lin.bias is None for lin in linears):
        raise TypeError("m.W_q, m.W_k, m.W_v and m.W_o must be nn.Linear layers with bias")
    w = m.W_q.weight
    t = nn.MultiheadAttention(
        m.hidden_size, m.heads_num, batch_first=batch_first, device=w.device, dtype=w.dtype
    )
    with torch.no_grad():
        t.in_proj_weight.copy_(torch.cat([m.W_q.weight, m.W_k.weight, m.W_v.weight]))
        t.in_proj_bias.copy_(torch.cat([m.W_q.bias, m.W_k.bias, m.W_v.bias]))
        t.out_proj.weight.copy_(m.W_o.weight)
        t.out_proj.bias.copy_(m.W_o.bias)
    return t


def from_torch(t: nn.MultiheadAttention) -> pure.MHA:
    """Build an [`mha.pure.MHA`][mha.pure.MHA] holding exactly ``t``'s weights.

    Works for ``batch_first=True`` and ``False`` alike (the weights are the same; only the layout
    of ``t``'s inputs differs: ``[seq_len, batch_size, hidden_size]`` when ``False``, whereas the
    result always takes ``[batch_size, seq_len, hidden_size]``).

    Args:
        t: a ``torch.nn.MultiheadAttention`` with the default options: ``bias=True``, ``kdim``
            and ``vdim`` equal to ``embed_dim`` (one ``in_proj_weight``), ``add_bias_kv=False``,
            ``add_zero_attn=False`` and ``dropout=0.0``.

    Returns:
        A pure MHA on ``t``'s device and dtype.

    Raises:
        TypeError: ``t`` is not a ``torch.nn.MultiheadAttention``.
        ValueError: ``t`` uses an option MHA does not have, named in the message.

    Examples:
        >>> import torch.nn as nn
        >>> from_torch(nn.MultiheadAttention(20, 4, batch_first=True)).head_size
        5
        >>> from_torch(nn.MultiheadAttention(20, 4, add_zero_attn=True))
        Traceback (most recent call last):
        ...
        ValueError: cannot map t: add_zero_attn=True, expected add_zero_attn=False

    中文:
        构建一个 [`mha.pure.MHA`][mha.pure.MHA]，权重与 ``t`` 完全相同。

        ``t`` 的 ``batch_first`` 是 ``True`` 还是 ``False`` 都可以：两种情况下权重一样，只是
        ``t`` 的输入布局不同（为 ``False`` 时是 ``[seq_len, batch_size, hidden_size]``）；
        返回的模块总是接受 ``[batch_size, seq_len, hidden_size]``。

        参数:
            t: 使用默认选项的 ``torch.nn.MultiheadAttention``：``bias=True``，``kdim`` 和
                ``vdim`` 等于 ``embed_dim``（只有一个 ``in_proj_weight``），
                ``add_bias_kv=False``，``add_zero_attn=False``，``dropout=0.0``。

        返回:
            纯享版 MHA，与 ``t`` 设备相同、dtype 相同。

        引发:
            TypeError: ``t`` 不是 ``torch.nn.MultiheadAttention``。
            ValueError: ``t`` 用了 MHA 没有的选项，错误信息会指出是哪一个。
    """
    if not isinstance(t, nn.MultiheadAttention):
        raise TypeError(f"t must be a torch.nn.MultiheadAttention, got {type(t).__name__}")
    problems = []
    # With kdim or vdim different from embed_dim, PyTorch keeps three separate weights instead.
    if t.in_proj_weight is None:
        problems.append(
            f"kdim={t.kdim}, vdim={t.vdim} (separate q/k/v weights), "
            f"expected kdim = vdim = embed_dim = {t.embed_dim}"
        )
    if t.in_proj_bias is None:
        problems.append("bias=False (MHA's linear layers always have a bias), expected bias=True")
    if t.bias_k is not None:
        problems.append("add_bias_kv=True, expected add_bias_kv=False")
    if t.add_zero_attn:
        problems.append("add_zero_attn=True, expected add_zero_attn=False")
    if t.dropout != 0.0:
        problems.append(f"dropout={t.dropout} (MHA has no dropout), expected dropout=0.0")
    if problems:
        raise ValueError("cannot map t: " + "; ".join(problems))
    h = t.embed_dim
    w = t.in_proj_weight
    m = pure.MHA(h, t.num_heads).to(device=w.device, dtype=w.dtype)
    with torch.no_grad():
        for i, lin in enumerate((m.W_q, m.W_k, m.W_v)):
            lin.weight.copy_(w[i * h : (i + 1) * h])
            lin.bias.copy_(t.in_proj_bias[i * h : (i + 1) * h])
        m.W_o.weight.copy_(t.out_proj.weight)
        m.W_o.bias.copy_(t.out_proj.bias)
    return m
