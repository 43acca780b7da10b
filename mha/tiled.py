"""Tiled attention (分块注意力): FlashAttention's idea in plain PyTorch, one block of keys at a time.

Attention over ``k_len`` keys never needs the whole ``[q_len, k_len]`` matrix of weights at once.
Take the keys and values in blocks of ``block_size``; for each query keep a running maximum ``m``
of its scores, a running sum ``l`` of their exponentials (taken relative to ``m``), and the output
so far; when a block raises the maximum, rescale what was summed before by ``exp(m_old - m_new)``.
After the last block, ``out / l`` is the softmax-weighted sum, and ``m + log(l)`` the log-sum-exp
of the scores, which is what two partial results need to be merged (``merge``): the rule ring
attention uses to join what each device computed.

Shape comments use these names: ``batch_size``, ``heads_num``, ``q_len`` queries, ``k_len`` keys,
``head_size`` (of queries and keys), ``v_size`` (of values), ``block`` the keys of one block
(``block_size``, or fewer in the last block).

Examples:
    >>> import torch
    >>> import torch.nn.functional as F
    >>> from mha.tiled import TiledAttention
    >>> q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 8)
    >>> out, lse = TiledAttention(block_size=3)(q, k, v)  # blocks of 3, 3 and 1 keys
    >>> out.shape, lse.shape
    (torch.Size([2, 4, 5, 8]), torch.Size([2, 4, 5]))
    >>> torch.allclose(out, F.scaled_dot_product_attention(q, k, v), atol=1e-6)
    True
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
from torch import Tensor

from mha.checks import check_flag, check_length, check_number

__all__ = ["TiledAttention", "merge"]


class TiledAttention(nn.Module):
    """Attention computed one block of keys at a time, with an online softmax.

    It takes no ``attn_mask``: the causal mask (``is_causal``) is the only mask it applies.

    Args:
        block_size: the keys (and values) of one block; the last block takes what is left.

    Raises:
        TypeError: ``block_size`` is not an ``int``.
        ValueError: ``block_size`` is not positive.

    中文:
        分块计算的注意力：每次只取一块键，用在线 softmax 累加。

        它不接受 ``attn_mask``：唯一能加的掩码是因果掩码（``is_causal``）。

        参数：
            block_size: 每一块的键（和值）的个数；最后一块取剩下的。

        异常：
            TypeError: ``block_size`` 不是 ``int``。
            ValueError: ``block_size`` 不是正数。
    """

    def __init__(self, block_size: int = 64) -> None:
        super().__init__()
        check_length("block_size", block_size, positive=True)
        self.block_size = block_size

    def extra_repr(self) -> str:
        """What ``print`` shows between the parentheses.

        Returns:
            ``block_size=...``.

        中文:
            ``print`` 在括号里显示的内容。

            返回：
                形如 ``block_size=...`` 的文字。
        """
        return f"block_size={self.block_size}"

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        is_causal: bool = False,
        scale: float | None = None,
    ) -> tuple[Tensor, Tensor]:
        """``softmax(q k^T * scale) v``, and the log-sum-exp of each query's scores.

        Args:
            q: ``[batch_size, heads_num, q_len, head_size]``.
            k: ``[batch_size, heads_num, k_len, head_size]``.
            v: ``[batch_size, heads_num, k_len, v_size]``.
            is_causal: the causal mask aligned to the lower right (the last query sees every key),
                as [`causal_mask`][mha.masks.causal_mask].
            scale: ``None`` (the default) means ``1 / sqrt(head_size)``.

        Returns:
            ``out`` ``[batch_size, heads_num, q_len, v_size]`` and ``lse``
                ``[batch_size, heads_num, q_len]``, in float32 at least. A query that sees no key
                gets a zero output and an ``lse`` of ``-inf``.

        Raises:
            TypeError: ``is_causal`` is not a ``bool``, ``scale`` neither ``None`` nor a number,
                or ``q``, ``k`` or ``v`` not a floating-point tensor.
            ValueError: the shapes do not match, or ``scale`` is not positive.

        中文:
            计算 ``softmax(q k^T * scale) v``，以及每个查询的分数的 log-sum-exp。

            参数：
                q: 查询，``[batch_size, heads_num, q_len, head_size]``。
                k: 键，``[batch_size, heads_num, k_len, head_size]``。
                v: 值，``[batch_size, heads_num, k_len, v_size]``。
                is_causal: 右下对齐的因果掩码（最后一个查询能看到所有键），与
                    [`causal_mask`][mha.masks.causal_mask] 相同。
                scale: 默认 ``None`` 表示 ``1 / sqrt(head_size)``。

            返回：
                ``out`` ``[batch_size, heads_num, q_len, v_size]`` 和 ``lse``
                    ``[batch_size, heads_num, q_len]``，至少是 float32。一个键都看不到的查询，输出为零，
                    ``lse`` 为 ``-inf``。

            异常：
                TypeError: ``is_causal`` 不是 ``bool``，``scale`` 既不是 ``None`` 也不是数，或者
                    ``q``、``k``、``v`` 不是浮点张量。
                ValueError: 形状对不上，或者 ``scale`` 不是正数。
        """
        check_flag("is_causal", is_causal)
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, Tensor) or not t.is_floating_point():
                raise TypeError(
                    f"{name} must be a floating-point tensor, got "
                    f"{t.dtype if isinstance(t, Tensor) else type(t).__name__}"
                )
        if scale is not None:
            check_number("scale", scale, positive=True)
        if q.dim() != 4 or k.shape[:2] != q.shape[:2] or k.size(-1) != q.size(-1) or v.shape[:3] != k.shape[:3]:
            raise ValueError(
                "q, k, v must be [batch_size, heads_num, q_len, head_size], [batch_size, "
                "heads_num, k_len, head_size] and [batch_size, heads_num, k_len, v_size]; got "
                f"{list(q.shape)}, {list(k.shape)}, {list(v.shape)}"
            )
        q_len, k_len = q.size(2), k.size(2)
        scale = q.size(-1) ** -0.5 if scale is None else scale
        dtype = torch.promote_types(q.dtype, torch.float32)
        # 每个查询的累加量：目前的最大分数 m、相对 m 的指数和 total、未除以 total 的输出
        # Each query's running state: the largest score so far m, the sum of exponentials
        # relative to m, total, and the output not yet divided by total
        m = q.new_full((*q.shape[:3], 1), -math.inf, dtype=dtype)  # [batch_size, heads_num, q_len, 1]
        total = q.new_zeros((*q.shape[:3], 1), dtype=dtype)  # [batch_size, heads_num, q_len, 1]
        acc = q.new_zeros((*q.shape[:3], v.size(-1)), dtype=dtype)  # [batch_size, heads_num, q_len, v_size]
        for start in range(0, k_len, self.block_size):
            end = min(start + self.block_size, k_len)
            scores = torch.matmul(q.to(dtype), k[:, :, start:end].to(dtype).transpose(-2, -1)) * scale  # [batch_size, heads_num, q_len, block]
            if is_causal:
                # 查询 i 能看到的最后一个键是 i + k_len - q_len
                # Query i sees the keys up to i + k_len - q_len
                seen = torch.arange(q_len, device=q.device)[:, None] + (k_len - q_len)  # [q_len, 1]
                visible = torch.arange(start, end, device=q.device) <= seen  # [q_len, block]
                scores = scores.masked_fill(~visible, -math.inf)  # [batch_size, heads_num, q_len, block]
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))  # [batch_size, heads_num, q_len, 1]
            # 一个键都还没看到的查询 m_new 仍是 -inf：用 0 代替，免得算出 -inf - (-inf) = NaN
            # A query that has seen no key yet still has m_new = -inf: use 0 there, so that
            # -inf - (-inf) = NaN never happens
            shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)  # [batch_size, heads_num, q_len, 1]
            p = torch.exp(scores - shift)  # [batch_size, heads_num, q_len, block]
            # 最大值变大了：之前累加的都要乘上 exp(m - m_new) 缩小
            # The maximum grew: what was summed before is scaled down by exp(m - m_new)
            rescale = torch.exp(m - shift)  # [batch_size, heads_num, q_len, 1]
            total = total * rescale + p.sum(dim=-1, keepdim=True)  # [batch_size, heads_num, q_len, 1]
            acc = acc * rescale + torch.matmul(p, v[:, :, start:end].to(dtype))  # [batch_size, heads_num, q_len, v_size]
            m = m_new  # [batch_size, heads_num, q_len, 1]
        # 最后除以 total；一个键都没看到的查询 total 为 0，输出取 0，lse 为 -inf
        # Divide by total at the end; a query that saw no key has total 0: output 0, lse -inf
        seen_any = total > 0  # [batch_size, heads_num, q_len, 1]
        out = torch.where(seen_any, acc / torch.where(seen_any, total, torch.ones_like(total)), torch.zeros_like(acc))  # [batch_size, heads_num, q_len, v_size]
        lse = (m + torch.log(total)).squeeze(-1)  # [batch_size, heads_num, q_len]
        return out, lse


def merge(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor) -> tuple[Tensor, Tensor]:
    """Join the attention of the same queries over two disjoint sets of keys.

    With ``lse`` the log-sum-exp of each part's scores, the whole's is ``logaddexp(lse_a,
    lse_b)``, and each part's output weighs ``exp(lse_part - lse)``. Ring attention joins what each
    rank computed this way.

    Args:
        out_a: ``[..., q_len, v_size]``, the attention over the first set of keys.
        lse_a: ``[..., q_len]``, its log-sum-exp.
        out_b: the attention over the second set, same shape.
        lse_b: its log-sum-exp.

    Returns:
        ``out`` and ``lse`` over both sets (a query that sees no key in either: output 0, ``lse``
            ``-inf``).

    Examples:
        >>> q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4)
        >>> whole, _ = TiledAttention()(q, k, v)
        >>> first, second = TiledAttention()(q, k[:, :, :2], v[:, :, :2]), TiledAttention()(
        ...     q, k[:, :, 2:], v[:, :, 2:])
        >>> torch.allclose(merge(*first, *second)[0], whole, atol=1e-6)
        True

    中文:
        把同一批查询对两组不相交的键分别算出的注意力合并起来。

        记 ``lse`` 为各部分分数的 log-sum-exp，则整体的是 ``logaddexp(lse_a, lse_b)``，各部分的输出按
        ``exp(lse_part - lse)`` 加权。环形注意力就是这样合并各个进程算出的结果。

        参数：
            out_a: ``[..., q_len, v_size]``，对第一组键的注意力。
            lse_a: ``[..., q_len]``，它的 log-sum-exp。
            out_b: 对第二组键的注意力，形状相同。
            lse_b: 它的 log-sum-exp。

        返回：
            两组合起来的 ``out`` 和 ``lse``（两组里都看不到键的查询：输出为 0，``lse`` 为 ``-inf``）。
    """
    lse = torch.logaddexp(lse_a, lse_b)  # [..., q_len]
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)  # [..., q_len]
    weight_a = torch.exp(lse_a - safe)[..., None]  # [..., q_len, 1]
    weight_b = torch.exp(lse_b - safe)[..., None]  # [..., q_len, 1]
    return out_a * weight_a + out_b * weight_b, lse
