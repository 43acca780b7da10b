"""Rotary position embeddings (RoPE, 旋转位置编码), as Llama, Qwen, Mistral and DeepSeek use them.

RoPE gives attention the positions without adding anything to the input: it rotates each pair of
dimensions of a query or key head by an angle proportional to the position, ``position * freq``,
one frequency per pair. A query at position ``m`` and a key at position ``n`` are rotated by ``m``
and ``n`` times the same frequencies, so their dot product depends on ``m - n`` only.

Shape comments use these names: ``q_len`` positions of this call; ``rotary_dims`` the dimensions
of a head that rotate (an even number, ``head_size`` unless a model rotates only some of them);
``head_size`` the dimensions of a head.

Two layouts pair the dimensions differently: *half* (Llama, Qwen, Mistral) pairs ``i`` with
``i + rotary_dims / 2``; *interleaved* (DeepSeek's weights) pairs ``2i`` with ``2i + 1``. The
frequency of pair ``i`` is ``base ** (-2i / rotary_dims)``; the scalings that stretch a model to
longer contexts change these frequencies: ``llama3`` (Llama 3.1 and later) and ``yarn`` (Qwen's
long-context configurations, DeepSeek-V3), which also scales the rotated vectors by its
``attention_factor``; ``longrope`` (Phi-3, Phi-4-mini) divides each pair's frequency by a factor
of its own, from one list (``short_factor``) while a call's positions stay within the trained
context and from another (``long_factor``) once its last position passes it, and scales the
rotated vectors too.

The tables of cosines and sines are computed in float32 from float32 frequencies, then cast to the
rotated tensor's dtype, as transformers does, so a model converted from transformers rotates by
the very same numbers.

Examples:
    >>> import torch
    >>> from mha.rope import RotaryEmbedding
    >>> rope = RotaryEmbedding(8)
    >>> cos, sin = rope(torch.arange(5))
    >>> cos.shape  # [q_len, rotary_dims]
    torch.Size([5, 8])
    >>> q = torch.randn(2, 4, 5, 8)  # [batch_size, heads_num, q_len, head_size]
    >>> rope.rotate(q, cos, sin).shape
    torch.Size([2, 4, 5, 8])
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn as nn
from torch import Tensor

from mha.checks import (
    autocast_enabled,
    check_flag,
    check_integer_tensor,
    check_length,
    check_number,
)

__all__ = ["RotaryEmbedding", "frequencies"]

# The keys each scaling takes (the names of the models' config.json, "rope_scaling" or
# "rope_parameters"), required ones first; the type is "rope_type" (or "type", older files).
SCALINGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "default": ((), ()),
    "llama3": (
        ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
        (),
    ),
    "yarn": (
        ("factor", "original_max_position_embeddings"),
        ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate"),
    ),
    # without factor or attention_factor the rotated vectors are not scaled; transformers fills
    # factor from the config's max_position_embeddings / original_max_position_embeddings
    "longrope": (
        ("short_factor", "long_factor", "original_max_position_embeddings"),
        ("factor", "attention_factor"),
    ),
    # every frequency divided by factor (positions factor times closer): Gemma 3's global layers
    "linear": (("factor",), ()),
    # NTK-aware: the base grows with a call's length past the trained context; transformers takes
    # the config's max_position_embeddings for original_max_position_embeddings
    "dynamic": (("factor", "original_max_position_embeddings"), ()),
}


def frequencies(
    rotary_dims: int, base: float, scaling: dict | None = None, *, length: int | None = None
) -> tuple[Tensor, float]:
    """The angle per position of each rotated pair, and the factor rotated vectors are scaled by.

    Args:
        rotary_dims: the dimensions of a head that rotate, an even number.
        base: the base of the frequencies (``rope_theta`` in the models' configs).
        scaling: ``None`` (the original RoPE), or a dict as in a model's config.json
            (``rope_scaling``): ``{"rope_type": "llama3" | "yarn" | "longrope", ...}``; see
            ``SCALINGS`` for the keys of each.
        length: under ``longrope``, how many positions the call covers (its last position + 1):
            beyond ``original_max_position_embeddings`` the ``long_factor`` applies, otherwise
            (and for ``None``) the ``short_factor``; the other scalings do not read it.

    Returns:
        ``inv_freq``, float32 ``[rotary_dims // 2]``: pair ``i`` turns by ``inv_freq[i]`` radians
            per position; and ``attention_factor``, 1.0 except under YaRN and LongRoPE.

    Raises:
        TypeError: ``scaling`` is not a dict, a size is not an ``int``, or ``base`` not a number.
        ValueError: ``rotary_dims`` is not a positive even number, ``base`` not above 1,
            ``scaling`` names an unknown type, misses a key or has an unknown one, or a
            LongRoPE factor list does not hold one factor per pair.

    Examples:
        >>> inv_freq, factor = frequencies(4, 10000.0)
        >>> # 即 10000 ** (-0 / 4) 和 10000 ** (-2 / 4)
        >>> inv_freq  # 10000 ** (-0 / 4), 10000 ** (-2 / 4)
        tensor([1.0000, 0.0100])

    中文:
        每一对旋转维度每个位置转过的角度，以及旋转后的向量要乘的系数。

        参数：
            rotary_dims: 一个头里参与旋转的维度数，必须是偶数。
            base: 频率的底数（模型配置里的 ``rope_theta``）。
            scaling: ``None``（原始的 RoPE），或者与模型 config.json 里（``rope_scaling``）写法
                相同的字典：``{"rope_type": "llama3" | "yarn" | "longrope", ...}``；各类型的键见
                ``SCALINGS``。
            length: 只有 ``longrope`` 读它：这次调用覆盖多少个位置（最后一个位置加 1）。超过
                ``original_max_position_embeddings`` 时用 ``long_factor``，否则（以及 ``None``）
                用 ``short_factor``。

        返回：
            ``inv_freq``，float32，形状 ``[rotary_dims // 2]``：通道对 ``i`` 的两个通道每个位置转
                ``inv_freq[i]`` 弧度；以及 ``attention_factor``，只有 YaRN 和 LongRoPE 不是 1.0。

        异常：
            TypeError: ``scaling`` 不是字典，尺寸不是 ``int``，或者 ``base`` 不是数。
            ValueError: ``rotary_dims`` 不是正偶数，``base`` 不大于 1，``scaling`` 的类型未知、
                缺少键或有未知的键，或者 LongRoPE 的因子列表不是每对一个。
    """
    check_length("rotary_dims", rotary_dims)
    if rotary_dims <= 0 or rotary_dims % 2:
        raise ValueError(f"rotary_dims must be a positive even number, got {rotary_dims}")
    check_number("base", base)
    if not base > 1:
        raise ValueError(f"base must be a number above 1, got {base!r}")
    kind, options = _scaling(scaling)
    # 对 i 的频率：base 的 -2i/rotary_dims 次方，从每个位置转 1 弧度一直降到接近 1/base
    # Pair i turns by base ** (-2i / rotary_dims) per position: from 1 radian down to about 1/base
    exponents = (
        torch.arange(0, rotary_dims, 2, dtype=torch.float32) / rotary_dims
    )  # [rotary_dims // 2]
    # positions per radian of each pair (a full turn takes 2π times as many)
    per_radian = base**exponents  # [rotary_dims // 2]
    inv_freq = 1.0 / per_radian  # [rotary_dims // 2]
    if kind == "llama3":
        return _llama3(inv_freq, options), 1.0
    if kind == "yarn":
        return _yarn(per_radian, rotary_dims, base, options)
    if kind == "longrope":
        return _longrope(per_radian, rotary_dims, options, length)
    if kind == "linear":
        return inv_freq / options["factor"], 1.0
    if kind == "dynamic" and length is not None:
        return _dynamic(inv_freq, rotary_dims, base, options, torch.tensor(length)), 1.0
    return inv_freq, 1.0


def _scaling(scaling: dict | None) -> tuple[str, dict]:
    """The scaling's type and its other keys, checked against ``SCALINGS``."""
    if scaling is None:
        return "default", {}
    if not isinstance(scaling, dict):
        raise TypeError(f"scaling must be a dict or None, got {type(scaling).__name__}")
    options = dict(scaling)
    kind = options.pop("rope_type", None) or options.pop("type", None) or "default"
    options.pop("type", None)
    if kind not in SCALINGS:
        raise ValueError(f"scaling's rope_type must be one of {sorted(SCALINGS)}, got {kind!r}")
    required, optional = SCALINGS[kind]
    missing = [key for key in required if options.get(key) is None]
    unknown = sorted(set(options) - set(required) - set(optional))
    if missing:
        raise ValueError(f"a {kind} scaling needs {missing}, got the keys {sorted(options)}")
    if unknown:
        raise ValueError(
            f"a {kind} scaling takes {list(required + optional)}, got unknown keys {unknown}"
        )
    if "factor" in options and options["factor"] is not None:
        factor = options["factor"]
        check_number(f"a {kind} scaling's factor", factor)
        # YaRN's and the dynamic scaling's formulas stretch the trained context: a factor of 1 or
        # more; a linear one may also squeeze it
        least = 0.0 if kind in ("linear", "longrope", "llama3") else 1.0
        if not (math.isfinite(factor) and (factor > least if least == 0 else factor >= least)):
            said = "a finite number above 0" if least == 0 else "a finite number of at least 1"
            raise ValueError(f"a {kind} scaling's factor must be {said}, got {factor!r}")
    if kind == "dynamic":
        check_length(
            "a dynamic scaling's original_max_position_embeddings",
            options["original_max_position_embeddings"],
        )
    return kind, options


def _llama3(inv_freq: Tensor, options: dict) -> Tensor:
    """Llama 3.1's scaling: slow pairs (long wavelengths) turn ``factor`` times slower, fast pairs
    as before, and the pairs between are blended smoothly."""
    factor = options["factor"]
    low, high = options["low_freq_factor"], options["high_freq_factor"]
    trained = options["original_max_position_embeddings"]
    wavelength = 2 * math.pi / inv_freq  # positions per full turn of each pair
    # 0 for the slow pairs (a turn longer than trained / low), 1 for the fast ones (shorter than
    # trained / high), a straight line between
    blend = ((trained / wavelength - low) / (high - low)).clamp(0.0, 1.0)
    slow = wavelength > trained / low
    fast = wavelength < trained / high
    blended = (1 - blend) * inv_freq / factor + blend * inv_freq
    return torch.where(slow, inv_freq / factor, torch.where(fast, inv_freq, blended))


def _mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's growth of the attention logits' scale with the context's stretch ``factor``."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _yarn(per_radian: Tensor, rotary_dims: int, base: float, options: dict) -> tuple[Tensor, float]:
    """YaRN: pairs that turn fewer than ``beta_slow`` times over the trained context are
    interpolated (``factor`` times slower), pairs that turn more than ``beta_fast`` times keep their
    frequency, with a linear ramp between; the rotated vectors scale by ``attention_factor``."""
    factor = options["factor"]
    trained = options["original_max_position_embeddings"]
    fast_turns = options.get("beta_fast") or 32
    slow_turns = options.get("beta_slow") or 1

    def pair_turning(turns: float) -> float:
        # the (fractional) pair index that turns `turns` times over the trained context
        return rotary_dims * math.log(trained / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_turning(fast_turns), pair_turning(slow_turns)
    if options.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dims - 1)
    if low == high:
        high += 0.001  # a ramp of zero width would divide by zero
    pair = torch.arange(rotary_dims // 2, dtype=torch.float32)
    keep = 1 - ((pair - low) / (high - low)).clamp(0.0, 1.0)  # 1: the pair keeps its frequency
    inv_freq = 1.0 / (factor * per_radian) * (1 - keep) + 1.0 / per_radian * keep
    attention_factor = options.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = options.get("mscale"), options.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention_factor = _mscale(factor, mscale) / _mscale(factor, mscale_all_dim)
        else:
            attention_factor = _mscale(factor)
    return inv_freq, float(attention_factor)


def _longrope(
    per_radian: Tensor, rotary_dims: int, options: dict, length: int | None
) -> tuple[Tensor, float]:
    """LongRoPE: pair ``i`` turns ``factors[i]`` times slower, the factors ``short_factor`` up to
    the trained context and ``long_factor`` past it; the rotated vectors scale by
    ``attention_factor``, by default ``sqrt(1 + log(factor) / log(trained))``."""
    trained = options["original_max_position_embeddings"]
    for key in ("short_factor", "long_factor"):
        said = options[key]
        if not isinstance(said, list | tuple) or len(said) != rotary_dims // 2:
            raise ValueError(
                f"a longrope scaling's {key} must be a list of rotary_dims // 2 = "
                f"{rotary_dims // 2} numbers, one per pair, got {said!r}"
            )
    long = length is not None and length > trained
    factors = torch.tensor(options["long_factor" if long else "short_factor"], dtype=torch.float32)
    inv_freq = 1.0 / (factors * per_radian)  # [rotary_dims // 2]
    attention_factor = options.get("attention_factor")
    if attention_factor is None:
        factor = options.get("factor") or 1.0
        attention_factor = (
            1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(trained))
        )
    return inv_freq, float(attention_factor)


def _dynamic(
    inv_freq: Tensor, rotary_dims: int, base: float, options: dict, length: Tensor
) -> Tensor:
    """The dynamic (NTK-aware) scaling for a call covering ``length`` positions (its last position
    + 1, a tensor: no sync on a GPU): up to the trained context, ``inv_freq`` as it is; past it,
    the frequencies of a base grown to ``base * (factor * length / trained - (factor - 1)) **
    (rotary_dims / (rotary_dims - 2))``, computed in float32 as transformers computes them."""
    factor, trained = options["factor"], options["original_max_position_embeddings"]
    longer = torch.maximum(length, torch.tensor(trained, device=length.device))
    grown = base * ((factor * longer / trained) - (factor - 1)) ** (rotary_dims / (rotary_dims - 2))
    exponents = torch.arange(0, rotary_dims, 2, dtype=torch.int64, device=length.device)
    scaled = 1.0 / (grown ** (exponents.float() / rotary_dims))  # [rotary_dims // 2]
    return torch.where(length > trained, scaled, inv_freq.to(length.device))


def _without_autocast(device_type: str) -> contextlib.AbstractContextManager:
    """Autocast turned off where it is on (the angles stay float32); where it is off, nothing to
    enter (the context manager costs more than the angles of one decoding step)."""
    if autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


class RotaryEmbedding(nn.Module):
    """The rotation of each head's queries and keys by their positions.

    Args:
        rotary_dims: the dimensions of a head that rotate: an even number, at most ``head_size``;
            the first ``rotary_dims`` dimensions rotate, the others pass unchanged.
        base: the base of the frequencies (``rope_theta``): 10000 in Llama 2, 500000 in Llama 3.
        interleaved: ``False`` pairs dimension ``i`` with ``i + rotary_dims / 2`` (Llama, Qwen,
            Mistral); ``True`` pairs ``2i`` with ``2i + 1`` (DeepSeek's weights).
        scaling: a scaling of the frequencies as in a model's config.json (``rope_scaling``), or
            ``None``; see [`frequencies`][mha.rope.frequencies].

    Attributes:
        inv_freq: float32 ``[rotary_dims // 2]``, a buffer (not saved in the ``state_dict``);
            under ``longrope`` the short factors' (within the trained context).
        long_inv_freq: under ``longrope``, the long factors' frequencies (a buffer like
            ``inv_freq``): a call whose last position is past ``original_max_position_embeddings``
            turns all its positions by them, as transformers does (so in decoding, the keys
            cached before that point stay turned by the short ones); ``None`` otherwise.
        attention_factor: what the cosines and sines are multiplied by: 1.0 except under YaRN
            and LongRoPE.

    Examples:
        >>> rope = RotaryEmbedding(4)
        >>> q = torch.tensor([[[[1.0, 0.0, 0.0, 0.0]]]])  # [batch, heads, q_len, head_size]
        >>> # 位置 1：通道对 0 转 1 弧度
        >>> cos, sin = rope(torch.tensor([1]))  # position 1: pair 0 turns by 1 radian
        >>> # (cos 1, 0, sin 1, 0)：通道 0 和 2 组成通道对 0
        >>> rope.rotate(q, cos, sin)  # (cos 1, 0, sin 1, 0): dims 0 and 2 are pair 0
        tensor([[[[0.5403, 0.0000, 0.8415, 0.0000]]]])

    中文:
        按位置旋转每个头的查询和键。

        参数：
            rotary_dims: 一个头里参与旋转的维度数：偶数，不超过 ``head_size``；前 ``rotary_dims`` 维
                旋转，其余维原样保留。
            base: 频率的底数（``rope_theta``）：Llama 2 是 10000，Llama 3 是 500000。
            interleaved: ``False`` 把第 ``i`` 维和第 ``i + rotary_dims / 2`` 维配成一对（Llama、
                Qwen、Mistral）；``True`` 把第 ``2i`` 维和第 ``2i + 1`` 维配成一对（DeepSeek 的
                权重）。
            scaling: 与模型 config.json 写法相同的频率缩放（``rope_scaling``），或 ``None``；见
                [`frequencies`][mha.rope.frequencies]。

        属性：
            inv_freq: float32，``[rotary_dims // 2]``，一个缓冲区（不存进 ``state_dict``）；
                ``longrope`` 下是短因子（训练长度以内）的频率。
            long_inv_freq: ``longrope`` 下长因子的频率（与 ``inv_freq`` 一样是缓冲区）：一次调用
                的最后一个位置超过 ``original_max_position_embeddings`` 时，这次的所有位置都按它
                旋转，与 transformers 相同（所以解码时，越过这一点之前存进缓存的键仍是按短因子
                转的）；其他情况下是 ``None``。
            attention_factor: 余弦和正弦要乘的系数：只有 YaRN 和 LongRoPE 不是 1.0。
    """

    def __init__(
        self,
        rotary_dims: int,
        *,
        base: float = 10000.0,
        interleaved: bool = False,
        scaling: dict | None = None,
    ) -> None:
        super().__init__()
        check_flag("interleaved", interleaved)
        inv_freq, self.attention_factor = frequencies(rotary_dims, base, scaling)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        # LongRoPE's second set, and the length past which a call takes it
        kind, options = _scaling(scaling)
        self.trained = (
            options["original_max_position_embeddings"] if kind in ("longrope", "dynamic") else None
        )
        self._dynamic = options if kind == "dynamic" else None
        long = None
        if kind == "longrope":
            long = frequencies(rotary_dims, base, scaling, length=self.trained + 1)[0]
        self.register_buffer("long_inv_freq", long, persistent=False)
        self.rotary_dims = rotary_dims
        self.base = float(base)
        self.interleaved = interleaved
        self.scaling = None if scaling is None else dict(scaling)

    def _apply(self, fn, recurse=True):
        # .to(), .half(), .bfloat16(), .double() cast every floating buffer: inv_freq moves to
        # the new device but stays float32, as transformers keeps it (in bfloat16 a frequency is
        # off by up to 0.4%, and the angle at position 4000 by more than a radian)
        kept = {n: getattr(self, n) for n in ("inv_freq", "long_inv_freq")}
        super()._apply(fn, recurse)
        for n, before in kept.items():
            now = getattr(self, n)
            if now is not None and before.is_meta and not now.is_meta:
                # out of the meta device (to_empty): the values are computed, not left unwritten,
                # as nothing loads them (they are not in the state_dict)
                setattr(self, n, self._frequencies(n).to(now.device))
            elif now is not None and now.dtype != torch.float32:
                setattr(self, n, before.to(now.device))
        return self

    def _frequencies(self, name: str) -> Tensor:
        """The buffer ``name`` (``inv_freq`` or ``long_inv_freq``) computed anew, on the CPU."""
        length = self.trained + 1 if name == "long_inv_freq" else None
        return frequencies(self.rotary_dims, self.base, self.scaling, length=length)[0]

    def extra_repr(self) -> str:
        """What ``print`` shows between the parentheses.

        Returns:
            ``rotary_dims``, ``base``, ``interleaved`` and the scaling, if any.

        中文:
            ``print`` 在括号里显示的内容。

            返回：
                ``rotary_dims``、``base``、``interleaved``，以及频率缩放（如果有）。
        """
        said = f"{self.rotary_dims}, base={self.base:g}, interleaved={self.interleaved}"
        return said if self.scaling is None else f"{said}, scaling={self.scaling}"

    def forward(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """The cosines and sines of each position's angles, in the layout ``rotate`` takes.

        Args:
            positions: integer positions, ``[q_len]`` or ``[batch_size, q_len]``.

        Returns:
            ``cos`` and ``sin``, float32, ``[q_len, rotary_dims]`` (or
                ``[batch_size, q_len, rotary_dims]``), each already multiplied by
                ``attention_factor``.

        Raises:
            TypeError: ``positions`` is not an integer tensor.
            ValueError: ``positions`` is not 1-D or 2-D.

        中文:
            各位置各对维度转角的余弦和正弦，排列方式就是 ``rotate`` 要的。

            参数：
                positions: 整数位置，``[q_len]`` 或 ``[batch_size, q_len]``。

            返回：
                ``cos`` 和 ``sin``，float32，``[q_len, rotary_dims]``（或
                    ``[batch_size, q_len, rotary_dims]``），都已乘上 ``attention_factor``。

            异常：
                TypeError: ``positions`` 不是整数张量。
                ValueError: ``positions`` 不是一维或二维的。
        """
        check_integer_tensor("positions", positions)
        if positions.dim() not in (1, 2):
            raise ValueError(
                "positions must be [q_len] or [batch_size, q_len], got shape "
                f"{list(positions.shape)}"
            )
        # float32 (a cast of the module keeps it so, see _apply), on the positions' device
        inv_freq = self.inv_freq.to(positions.device, torch.float32)
        if self.long_inv_freq is not None and positions.numel():
            # LongRoPE: the long factors for every position of a call whose last one is past the
            # trained context (a comparison on the device, no sync), the short ones otherwise
            past = positions.max() + 1 > self.trained
            inv_freq = torch.where(past, self.long_inv_freq.to(positions.device), inv_freq)
        if self._dynamic is not None and positions.numel():
            # the dynamic scaling: the base this call's length gives (each call on its own)
            length = positions.max() + 1
            inv_freq = _dynamic(inv_freq, self.rotary_dims, self.base, self._dynamic, length)
        # 每个位置乘每对的频率：位置 m 的对 i 转过 m * inv_freq[i] 弧度；
        # 在 float32 里算，自动混合精度不介入
        # Each position times each pair's frequency: pair i at position m turns by m * inv_freq[i]
        # radians; in float32, whatever autocast says
        with _without_autocast(positions.device.type):
            angles = positions[..., None].float() * inv_freq  # [..., q_len, rotary_dims // 2]
            # 对 i 的角度放在它的两维上：交错排列时是 2i 和 2i+1，否则是 i 和 i + rotary_dims/2
            # Pair i's angle at both its dims: 2i and 2i+1 interleaved, else i and
            # i + rotary_dims/2
            if self.interleaved:
                angles = angles.repeat_interleave(2, dim=-1)  # [..., q_len, rotary_dims]
            else:
                angles = torch.cat((angles, angles), dim=-1)  # [..., q_len, rotary_dims]
            cos = angles.cos()  # [..., q_len, rotary_dims]
            sin = angles.sin()  # [..., q_len, rotary_dims]
            if self.attention_factor != 1.0:  # YaRN's, LongRoPE's (a product by 1 changes nothing)
                cos = cos * self.attention_factor  # [..., q_len, rotary_dims]
                sin = sin * self.attention_factor  # [..., q_len, rotary_dims]
        return cos, sin

    def rotate(self, t: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """Rotate the first ``rotary_dims`` dimensions of each head of ``t``; the rest pass.

        Args:
            t: queries or keys, ``[batch_size, heads, q_len, head_size]``.
            cos: from ``forward``, ``[q_len, rotary_dims]`` or
                ``[batch_size, q_len, rotary_dims]`` (or ``[1, q_len, rotary_dims]``, the same for
                every row).
            sin: likewise.

        Returns:
            ``t`` rotated, same shape and dtype.

        Raises:
            ValueError: ``t``'s heads are narrower than ``rotary_dims``, or ``cos`` does not match
                ``t``'s positions.

        中文:
            旋转 ``t`` 每个头的前 ``rotary_dims`` 维，其余维原样保留。

            参数：
                t: 查询或键，``[batch_size, heads, q_len, head_size]``。
                cos: ``forward`` 的结果，``[q_len, rotary_dims]`` 或
                    ``[batch_size, q_len, rotary_dims]``。
                sin: 同上。

            返回：
                旋转后的 ``t``，形状和 dtype 不变。

            异常：
                ValueError: ``t`` 的头比 ``rotary_dims`` 窄，或者 ``cos`` 的位置与 ``t`` 对不上。
        """
        if t.size(-1) < self.rotary_dims:
            raise ValueError(
                f"the heads ({t.size(-1)} dims) are narrower than rotary_dims ({self.rotary_dims})"
            )
        if cos.shape[-2] != t.size(-2) or (cos.dim() == 3 and cos.size(0) not in (1, t.size(0))):
            raise ValueError(
                f"cos of shape {list(cos.shape)} must be [q_len, rotary_dims] or [batch_size, "
                f"q_len, rotary_dims] for t of shape {list(t.shape)}"
            )
        if cos.dim() == 3:
            # 每一行有自己的位置：插入头这一维，让所有头共用同一组角度
            # Each row has positions of its own: a heads dim, so every head turns by the same angles
            cos, sin = cos[:, None], sin[:, None]  # [batch_size, 1, q_len, rotary_dims]
        if cos.dtype != t.dtype:
            cos, sin = cos.to(t.dtype), sin.to(t.dtype)
        whole = t.size(-1) == self.rotary_dims  # every dim turns: nothing to split and join
        turned = t if whole else t[..., : self.rotary_dims]
        # 一对 (a, b) 转过角度 θ 得到 (a cos θ - b sin θ, b cos θ + a sin θ)：
        # partner 在 a 的位置放 -b，在 b 的位置放 a
        # A pair (a, b) turned by θ is (a cos θ - b sin θ, b cos θ + a sin θ): partner holds -b
        # where a is, a where b is
        if self.interleaved:
            partner = torch.stack((-turned[..., 1::2], turned[..., 0::2]), dim=-1).flatten(-2)
        else:
            first, second = turned.chunk(2, dim=-1)
            partner = torch.cat((-second, first), dim=-1)
        turned = turned * cos + partner * sin
        return turned if whole else torch.cat((turned, t[..., self.rotary_dims :]), dim=-1)
