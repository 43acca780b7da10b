"""The pure MHA (纯享版): the design post's short version, same names, same ``state_dict`` keys.

It computes bit for bit what [`mha.annotated.MHA`][mha.annotated.MHA] computes, with the comments
stripped. The changes from the post: the argument checks (``check_sizes``, ``check_input``), type
hints, and the scale ``math.sqrt(head_size)``, a Python float: each call no longer runs the
design's ``torch.tensor`` and ``torch.sqrt``. In float32 the outputs equal the design's except in
the last bit at a few head sizes (the site's Pitfalls page lists them); in float64 they are more
accurate.

Examples:
    >>> import torch
    >>> from mha.pure import MHA
    >>> model = MHA(hidden_size=20, heads_num=4)
    >>> sorted(model.state_dict())[:2]
    ['W_k.bias', 'W_k.weight']
    >>> model(torch.randn(2, 3, 20)).shape
    torch.Size([2, 3, 20])
"""

# --8<-- [start:all]
import math

import torch
import torch.nn as nn
from torch import Tensor

from mha.checks import check_input, check_sizes


class MHA(nn.Module):
    """Multi-head self-attention, minimal (纯享版).

    Args:
        hidden_size: model width, the last dimension of the input.
        heads_num: number of attention heads; must divide ``hidden_size``.

    Raises:
        TypeError: ``hidden_size`` or ``heads_num`` is not an ``int``.
        ValueError: a size is not positive, or ``hidden_size`` is not divisible by ``heads_num``.

    Examples:
        >>> MHA(hidden_size=20, heads_num=4)(torch.randn(2, 3, 20)).shape
        torch.Size([2, 3, 20])

    中文:
        多头自注意力的纯享版：与注释版计算相同，只是没有注释。

        参数：
            hidden_size: 隐藏层维度，即输入最后一维的大小。
            heads_num: 注意力头数，必须整除 ``hidden_size``。

        异常：
            TypeError: ``hidden_size`` 或 ``heads_num`` 不是 ``int``。
            ValueError: 某个尺寸不是正数，或者 ``hidden_size`` 不能被 ``heads_num`` 整除。
    """

    def __init__(self, hidden_size: int, heads_num: int):
        super().__init__()
        check_sizes(hidden_size, heads_num)
        self.hidden_size = hidden_size
        self.heads_num = heads_num
        self.head_size = hidden_size // heads_num

        self.W_q = nn.Linear(hidden_size, hidden_size)
        self.W_k = nn.Linear(hidden_size, hidden_size)
        self.W_v = nn.Linear(hidden_size, hidden_size)

        self.W_o = nn.Linear(hidden_size, hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        """Self-attention over ``x``: every position attends to every position, itself included.

        Args:
            x: shape ``[batch_size, seq_len, hidden_size]``, of the parameters' dtype (under
                autocast, also of a dtype it casts).

        Returns:
            Tensor of the same shape ``[batch_size, seq_len, hidden_size]``.

        Raises:
            TypeError: ``x`` is not a floating-point tensor, or (outside autocast) its dtype is
                not the parameters' dtype.
            ValueError: ``x`` is not 3-D, its last dimension is not ``hidden_size``, or it is
                not on the parameters' device.

        中文:
            对 ``x`` 做自注意力：每个位置都关注所有位置，包括它自己。

            参数：
                x: 形状为 ``[batch_size, seq_len, hidden_size]``，dtype 与参数相同；在 autocast
                    之内，也可以是 autocast 会转换的其他 dtype。

            返回：
                形状同样为 ``[batch_size, seq_len, hidden_size]`` 的张量。

            异常：
                TypeError: ``x`` 不是浮点张量，或者在 autocast 之外 dtype 与参数不同。
                ValueError: ``x`` 不是三维张量、最后一维不等于 ``hidden_size``，或者与参数
                    不在同一个设备上。
        """
        check_input(x, self.hidden_size, self.W_q.weight)
        q = self.W_q(x)
        k = self.W_k(x)
        v = self.W_v(x)

        q = q.view(q.size(0), q.size(1), self.heads_num, self.head_size).transpose(1, 2)
        k = k.view(k.size(0), k.size(1), self.heads_num, self.head_size).transpose(1, 2)
        v = v.view(v.size(0), v.size(1), self.heads_num, self.head_size).transpose(1, 2)

        qk = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_size)
        attn = torch.softmax(qk, dim=-1)
        out = torch.matmul(attn, v)

        out = out.transpose(1, 2).contiguous().view(out.size(0), out.size(2), self.hidden_size)
        out = self.W_o(out)
        return out


# --8<-- [end:all]

__all__ = ["MHA"]
