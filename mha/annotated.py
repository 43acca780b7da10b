"""The annotated MHA: the design post's class, every line commented in 中文 and English.

Every comment of the form ``# [batch_size, ...]`` at the end of a line states the shape of the
tensor assigned on that line. ``tests/test_shape_comments.py`` runs ``forward`` and checks each of
them against the real shape, so none of them can be wrong. The design post's own comment after
``.view`` states the wrong shape; the site's Pitfalls page gives the whole account.

Examples:
    >>> import torch
    >>> from mha.annotated import MHA
    >>> _ = torch.manual_seed(0)
    >>> model = MHA(hidden_size=20, heads_num=4)  # head_size = 20 // 4 = 5
    >>> x = torch.randn(2, 3, 20)  # [batch_size=2, seq_len=3, hidden_size=20]
    >>> model(x).shape
    torch.Size([2, 3, 20])
"""

# --8<-- [start:imports]
import math

import torch
import torch.nn as nn
from torch import Tensor

from mha.checks import check_input, check_sizes

# --8<-- [end:imports]

__all__ = ["MHA"]


# --8<-- [start:class]
class MHA(nn.Module):
    """Multi-head self-attention, as in the design post, with every line explained.

    Args:
        hidden_size: model width, the last dimension of the input (the post's ``hidden_size``).
        heads_num: number of attention heads; must divide ``hidden_size``.

    Raises:
        TypeError: ``hidden_size`` or ``heads_num`` is not an ``int``.
        ValueError: a size is not positive, or ``hidden_size`` is not divisible by ``heads_num``.

    Examples:
        >>> model = MHA(hidden_size=20, heads_num=4)
        >>> model.head_size
        5
        >>> MHA(hidden_size=10, heads_num=3)
        Traceback (most recent call last):
        ...
        ValueError: hidden_size (10) must be divisible by heads_num (3); 10 % 3 = 1

    中文:
        多头自注意力：原文的类，每一行都有注释。

        参数：
            hidden_size: 隐藏层维度，即输入最后一维的大小（原文的 ``hidden_size``）。
            heads_num: 注意力头数，必须整除 ``hidden_size``。

        异常：
            TypeError: ``hidden_size`` 或 ``heads_num`` 不是 ``int``。
            ValueError: 某个尺寸不是正数，或者 ``hidden_size`` 不能被 ``heads_num`` 整除。
    """

    # --8<-- [start:init]
    def __init__(self, hidden_size: int, heads_num: int):
        # 初始化 nn.Module 的内部状态（参数表、子模块表）
        # Set up nn.Module's internals (parameter and submodule registries)
        super().__init__()
        # 尽早检查：尺寸必须是正整数，且 hidden_size 能被 heads_num 整除
        # Check early: sizes must be positive ints, hidden_size divisible by heads_num
        check_sizes(hidden_size, heads_num)
        # 隐藏层维度，即输入最后一维的大小
        # Hidden size: the size of the input's last dimension
        self.hidden_size = hidden_size
        # 注意力头数
        # Number of attention heads
        self.heads_num = heads_num
        # 每个注意力头的维度；上面的检查保证整除，没有余数被丢掉
        # Size of each head; the check above guarantees nothing is lost to the floor division
        self.head_size = hidden_size // heads_num

        # 查询投影（一个线性层）：W_q(x) 等于 x 乘以拼接起来的 [W_q_0, W_q_1, ..., W_q_(heads_num-1)]，
        # 一次算出所有头的查询，按头拼接在最后一维
        # Query projection: W_q(x) multiplies x by the concatenation [W_q_0, ..., W_q_(heads_num-1)],
        # computing every head's query at once, heads side by side in the last dimension
        self.W_q = nn.Linear(hidden_size, hidden_size)
        # 键投影，同理
        # Key projection, likewise
        self.W_k = nn.Linear(hidden_size, hidden_size)
        # 值投影，同理
        # Value projection, likewise
        self.W_v = nn.Linear(hidden_size, hidden_size)

        # 输出投影：把拼接后的各头输出混合起来
        # Output projection: mixes the concatenated outputs of the heads
        self.W_o = nn.Linear(hidden_size, hidden_size)

    # --8<-- [end:init]

    # --8<-- [start:forward]
    def forward(self, x: Tensor) -> Tensor:
        """Let every position of ``x`` attend to every position of ``x``, itself included.

        Args:
            x: input sequence, shape ``[batch_size, seq_len, hidden_size]``, of the parameters' dtype
                (under autocast, also of a dtype it casts).

        Returns:
            Tensor of the same shape ``[batch_size, seq_len, hidden_size]``.

        Raises:
            TypeError: ``x`` is not a floating-point tensor, or (outside autocast) its dtype is not
                the parameters' dtype.
            ValueError: ``x`` is not 3-D, its last dimension is not ``hidden_size``, or it is not
                on the parameters' device.

        Examples:
            >>> model = MHA(hidden_size=20, heads_num=4)
            >>> model(torch.randn(2, 3, 20)).shape
            torch.Size([2, 3, 20])
            >>> model(torch.randn(3, 20))
            Traceback (most recent call last):
            ...
            ValueError: x must be 3-D [batch_size, seq_len, hidden_size], got 2-D with shape [3, 20]

        中文:
            对 ``x`` 做自注意力：每个位置都关注所有位置，包括它自己。

            参数：
                x: 输入序列，形状为 ``[batch_size, seq_len, hidden_size]``，dtype 与参数相同；在 autocast 之内，
                    也可以是 autocast 会转换的其他 dtype。

            返回：
                形状同样为 ``[batch_size, seq_len, hidden_size]`` 的张量。

            异常：
                TypeError: ``x`` 不是浮点张量，或者在 autocast 之外 dtype 与参数不同。
                ValueError: ``x`` 不是三维张量、最后一维不等于 ``hidden_size``，或者与参数不在同一个设备上。
        """
        # 检查输入：三维浮点张量，最后一维是 hidden_size，dtype 与参数相同
        # Check the input: a 3-D floating tensor, last dim hidden_size, the parameters' dtype
        check_input(x, self.hidden_size, self.W_q.weight)

        # 投影，得到所有头的查询、键、值，各头在最后一维上拼接
        # Project: every head's query, key and value, heads concatenated in the last dimension
        q = self.W_q(x)  # [batch_size, seq_len, hidden_size]
        k = self.W_k(x)  # [batch_size, seq_len, hidden_size]
        v = self.W_v(x)  # [batch_size, seq_len, hidden_size]

        # 按头拆分：view 只拆最后一维，把 hidden_size 拆成 heads_num × head_size（不复制数据），
        # 其余维度不动，所以 heads_num 排在 seq_len 之后（原文这一行的形状注释写错了，详见“常见陷阱”）
        # Split into heads: view only splits the last dim hidden_size into heads_num x head_size,
        # no copy, so heads_num comes after seq_len (the design's comment here is wrong: Pitfalls)
        q = q.view(q.size(0), q.size(1), self.heads_num, self.head_size)  # [batch_size, seq_len, heads_num, head_size]
        k = k.view(k.size(0), k.size(1), self.heads_num, self.head_size)  # [batch_size, seq_len, heads_num, head_size]
        v = v.view(v.size(0), v.size(1), self.heads_num, self.head_size)  # [batch_size, seq_len, heads_num, head_size]

        # 交换 seq_len 与 heads_num：heads_num 和 batch_size 一起当作批维度，一次矩阵乘法算完所有头。
        # transpose 只改步长，不搬数据；seq_len 和 heads_num 都大于 1 时，结果不再连续
        # Swap seq_len and heads_num: with batch_size, heads_num becomes a batch dimension, so one
        # matmul serves all heads. transpose only changes strides and moves no data; when seq_len
        # and heads_num both exceed 1, the result is no longer contiguous
        q = q.transpose(1, 2)  # [batch_size, heads_num, seq_len, head_size]
        k = k.transpose(1, 2)  # [batch_size, heads_num, seq_len, head_size]
        v = v.transpose(1, 2)  # [batch_size, heads_num, seq_len, head_size]

        # 每个头的查询乘以键的转置，每个查询对每个键得到一个注意力分数；除以 sqrt(head_size)，
        # 分数的方差就不随 head_size 增大，softmax 不容易饱和
        # Each head's queries times its keys transposed: one score per (query, key) pair, divided
        # by sqrt(head_size) so the scores' variance does not grow with head_size
        # 缩放因子用 math.sqrt 算（原文用 torch.sqrt，两者的差别见“常见陷阱”）
        # The scale comes from math.sqrt (the design uses torch.sqrt; see Pitfalls for the difference)
        qk = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_size)  # [batch_size, heads_num, seq_len, seq_len]
        # 在最后一维（键）上做 softmax：每个查询对所有键的权重之和为 1
        # Softmax over the last dim (the keys): each query's weights over all keys sum to 1
        attn = torch.softmax(qk, dim=-1)  # [batch_size, heads_num, seq_len, seq_len]

        # 用注意力权重对值加权求和，得到每个头的输出
        # Weight the values by the attention: each head's output
        out = torch.matmul(attn, v)  # [batch_size, heads_num, seq_len, head_size]
        # 拼接各头。transpose 把形状换回 [batch_size, seq_len, heads_num, head_size]，这时一般不连续；
        # contiguous 按这个顺序把数据复制进一块连续内存，view 需要这一点；
        # view 再把 heads_num × head_size 合成 hidden_size。
        # out.size(2) 是 seq_len：求值时 out 还指向转置之前的张量。
        # Concatenate the heads. transpose gives [batch_size, seq_len, heads_num, head_size],
        # in general not contiguous;
        # contiguous copies the data into one block in that order, which view needs;
        # view then merges heads_num x head_size into hidden_size.
        # out.size(2) is seq_len: out still names the tensor before the transpose.
        out = out.transpose(1, 2).contiguous().view(out.size(0), out.size(2), self.hidden_size)  # [batch_size, seq_len, hidden_size]
        # 最后通过输出投影 W_o，混合各头的信息
        # Finally the output projection W_o mixes the heads' information
        out = self.W_o(out)  # [batch_size, seq_len, hidden_size]

        # 返回与输入形状相同的张量
        # Return a tensor shaped like the input
        return out

    # --8<-- [end:forward]


# --8<-- [end:class]
