"""RMSNorm (均方根归一化): the normalisation Qwen3 applies to each head of the queries and keys.

[`MHA`][mha.full.MHA] uses it for ``qk_norm=True`` (Gemma's flavour, ``(1 + weight)``, for
``qk_norm="gemma"``) and [`MLA`][mha.mla.MLA] on its latents; [`mha.full`][mha.full] re-exports
it.

Examples:
    >>> from mha.norm import RMSNorm
    >>> RMSNorm(4)(torch.ones(2, 4)).shape
    torch.Size([2, 4])
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from mha.checks import check_flag, check_length, check_number

__all__ = ["RMSNorm"]


class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the last dimension, with a weight per dimension.

    ``x / sqrt(mean(x²) + eps) * weight``; Qwen3 applies one to each head of the queries and of
    the keys (``MHA(qk_norm=True)``). The statistics are computed in float32 and the result cast
    back to the input's dtype before the weight multiplies it, as Qwen3's reference code does,
    whatever the input's dtype (float64 included), so a converted model gives the same numbers.

    Gemma's flavour (``plus_one=True``; Gemma 3's q/k norms, ``MHA(qk_norm="gemma")``) scales by
    ``1 + weight``, its weights starting at 0, and multiplies in float32 before the cast back, as
    Gemma's reference code does. OLMo 2's (``weight_in_float32=True``; its norms over the whole
    projection, ``MHA(qk_norm="projection")``) scales by ``weight``, multiplied in float32 before
    the cast back, as OLMo 2's reference code does.

    Args:
        size: the last dimension's size (``head_size`` in ``MHA``).
        eps: added to the mean square, so that a zero vector stays finite.
        plus_one: scale by ``1 + weight`` (Gemma's), not by ``weight``.
        weight_in_float32: multiply by the weight in float32, then cast back (OLMo 2's; Gemma's
            always does), not after the cast.
        elementwise_affine: ``False`` for a norm without a weight (Llama 4's q/k norm,
            ``MHA(qk_norm="weightless")``): the normalised ``x``, cast back, and no parameter.

    Examples:
        >>> norm = RMSNorm(2)
        >>> # 均方根为 3.5355
        >>> norm(torch.tensor([3.0, 4.0]))  # root mean square 3.5355
        tensor([0.8485, 1.1314], grad_fn=<MulBackward0>)
        >>> # 乘 1 + weight，权重为 0：得数相同
        >>> gemma = RMSNorm(2, plus_one=True)  # 1 + weight, the weights at 0: the same numbers
        >>> gemma(torch.tensor([3.0, 4.0]))
        tensor([0.8485, 1.1314], grad_fn=<MulBackward0>)

    中文:
        对最后一维做均方根归一化，每一维各有一个权重。

        ``x / sqrt(mean(x²) + eps) * weight``；Qwen3 对查询和键的每个头各做一次
        （``MHA(qk_norm=True)``）。统计量在 float32 里算，乘权重之前把结果转回输入的 dtype，与 Qwen3
        的参考实现相同，无论输入是什么 dtype（float64 也一样），所以转换来的模型算出同样的数。

        Gemma 的写法（``plus_one=True``；Gemma 3 的 q/k 归一化，``MHA(qk_norm="gemma")``）乘的是
        ``1 + weight``，权重从 0 开始，并且先在 float32 里相乘再转回，与 Gemma 的参考实现相同。
        OLMo 2 的写法（``weight_in_float32=True``；它跨越整个投影的归一化，
        ``MHA(qk_norm="projection")``）乘 ``weight``，也是先在 float32 里相乘再转回，与 OLMo 2 的
        参考实现相同。

        参数：
            size: 最后一维的大小（在 ``MHA`` 里是 ``head_size``）。
            eps: 加到均方上的小数，让全零向量也不会除以零。
            plus_one: 乘 ``1 + weight``（Gemma 的写法），而不是乘 ``weight``。
            weight_in_float32: 在 float32 里乘权重再转回（OLMo 2 的写法；Gemma 的总是这样），
                而不是转回之后再乘。
            elementwise_affine: 为 ``False`` 时没有权重（Llama 4 的 q/k 归一化，
                ``MHA(qk_norm="weightless")``）：只归一化、转回，没有参数。
    """

    def __init__(
        self,
        size: int,
        eps: float = 1e-6,
        *,
        plus_one: bool = False,
        weight_in_float32: bool = False,
        elementwise_affine: bool = True,
    ) -> None:
        super().__init__()
        check_length("size", size, positive=True)
        check_number("eps", eps, positive=True)
        check_flag("plus_one", plus_one)
        check_flag("weight_in_float32", weight_in_float32)
        check_flag("elementwise_affine", elementwise_affine)
        if plus_one and not elementwise_affine:
            raise ValueError("plus_one scales by 1 + weight: it needs elementwise_affine=True")
        # Gemma 的权重从 0 开始（乘的是 1 + weight），其余的从 1 开始；Llama 4 的没有权重
        # Gemma's weights start at 0 (it scales by 1 + weight), the others' at 1; Llama 4's has none
        weight = torch.zeros(size) if plus_one else torch.ones(size)
        self.weight = nn.Parameter(weight) if elementwise_affine else None
        self.size = size
        self.eps = float(eps)
        self.plus_one = plus_one
        self.weight_in_float32 = weight_in_float32

    def extra_repr(self) -> str:
        """What ``print`` shows between the parentheses.

        Returns:
            The size and ``eps``, as ``RMSNorm(5, eps=1e-06)`` prints them, and
                ``plus_one=True`` for Gemma's flavour, ``weight_in_float32=True`` for OLMo 2's.

        中文:
            ``print`` 在括号里显示的内容。

            返回：
                尺寸和 ``eps``，打印出来就是 ``RMSNorm(5, eps=1e-06)``；Gemma 的写法再加上
                    ``plus_one=True``，OLMo 2 的加上 ``weight_in_float32=True``。
        """
        flavour = ", plus_one=True" if self.plus_one else ""
        flavour += ", weight_in_float32=True" if self.weight_in_float32 else ""
        flavour += ", elementwise_affine=False" if self.weight is None else ""
        return f"{self.size}, eps={self.eps}{flavour}"

    def forward(self, x: Tensor) -> Tensor:
        """``x`` normalised over its last dimension, then scaled by the weight.

        Args:
            x: ``[..., size]``.

        Returns:
            ``[..., size]``, in ``x``'s dtype (or the weight's, if wider).

        中文:
            ``x`` 在最后一维上归一化，再乘权重。

            参数：
                x: 形状为 ``[..., size]`` 的张量。

            返回：
                ``[..., size]``，dtype 与 ``x`` 相同（权重的 dtype 更宽时取权重的）。
        """
        wide = x.float()
        wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.weight is None:  # Llama 4's: no weight, cast back
            return wide.to(x.dtype)
        if self.plus_one:  # Gemma's: (1 + weight), multiplied in float32, then cast back
            return (wide * (1.0 + self.weight.float())).to(x.dtype)
        if self.weight_in_float32:  # OLMo 2's: times the weight (float32 or wider), then cast
            return (self.weight * wide).to(x.dtype)
        return self.weight * wide.to(x.dtype)
