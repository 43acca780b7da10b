"""Argument checks shared by every implementation, so each spends one line on them.

Every error names the argument, the value it should have and the value it got, and is raised at the
earliest point: sizes in ``__init__``, the input at the top of ``forward``. The design post builds
``MHA(10, 3)`` without complaint and only fails later, deep inside ``.view``; it also returns a
silently wrong shape for some 4-D inputs, and for a 2-D input when ``hidden_size`` is 1. These
checks turn both into clear errors.

Examples:
    >>> check_sizes(20, 4)
    >>> check_sizes(10, 3)
    Traceback (most recent call last):
    ...
    ValueError: hidden_size (10) must be divisible by heads_num (3); 10 % 3 = 1
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

__all__ = ["check_input", "check_sizes"]


# The checks every module of mha shares: a value of the wrong type is a TypeError, a value of the
# right type out of its range a ValueError; each names the argument, the expected and the actual.
# They are public names (the modules import them) but not in __all__: the API a user calls is
# check_sizes and check_input.


def check_length(name: str, value: object, *, positive: bool = False) -> None:
    # bool is a subclass of int in Python; a length of True (or MHA(True, 1)) is a bug, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if value < int(positive):
        raise ValueError(
            f"{name} must be a {'positive' if positive else 'non-negative'} int, got {value}"
        )


def check_flag(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} ({value!r})")


def check_number(name: str, value: object, *, positive: bool = False, finite: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a float, got {type(value).__name__} ({value!r})")
    if positive and not value > 0:
        raise ValueError(f"{name} must be positive, got {value}")
    if finite and not math.isfinite(value):
        said = "finite positive" if positive else "finite"
        raise ValueError(f"{name} must be a {said} float, got {value}")


def check_sizes(
    hidden_size: int, heads_num: int, names: tuple[str, str] = ("hidden_size", "heads_num")
) -> None:
    """Check the constructor's sizes; the caller then computes ``head_size`` itself.

    Args:
        hidden_size: model width, the last dimension of the input.
        heads_num: number of attention heads; must divide ``hidden_size``.
        names: what the messages call the two sizes (``("heads_num", "kv_heads")`` when
            [`mha.full.MHA`][mha.full.MHA] checks its key/value heads).

    Raises:
        TypeError: a size is not an ``int`` (``bool`` and ``float`` included).
        ValueError: a size is not positive, or ``hidden_size`` is not divisible by ``heads_num``.

    Examples:
        >>> check_sizes(512, 8)
        >>> check_sizes(20.0, 4)
        Traceback (most recent call last):
        ...
        TypeError: hidden_size must be an int, got float (20.0)

    中文:
        检查构造函数的两个尺寸参数；``head_size`` 由调用方自己计算。

        参数：
            hidden_size: 隐藏层维度，即输入最后一维的大小。
            heads_num: 注意力头数，必须整除 ``hidden_size``。
            names: 报错信息里这两个尺寸的名字（[`mha.full.MHA`][mha.full.MHA] 检查键和值的头数时
                传 ``("heads_num", "kv_heads")``）。

        异常：
            TypeError: 某个尺寸不是 ``int``，``bool`` 和 ``float`` 也不行。
            ValueError: 某个尺寸不是正数，或者 ``hidden_size`` 不能被 ``heads_num`` 整除。
    """
    check_length(names[0], hidden_size, positive=True)
    check_length(names[1], heads_num, positive=True)
    if hidden_size % heads_num != 0:
        raise ValueError(
            f"{names[0]} ({hidden_size}) must be divisible by {names[1]} ({heads_num}); "
            f"{hidden_size} % {heads_num} = {hidden_size % heads_num}"
        )


def check_integer_tensor(name: str, value: object, shape: str | None = None) -> None:
    """``value`` is an integer tensor (a boolean one is not); ``shape`` is said in the message."""
    integer = isinstance(value, Tensor) and not (
        value.dtype == torch.bool or value.is_floating_point() or value.is_complex()
    )
    if not integer:
        got = value.dtype if isinstance(value, Tensor) else type(value).__name__
        said = "" if shape is None else f" of shape {shape}"
        raise TypeError(f"{name} must be an integer tensor{said}, got {got}")


# The floating dtypes autocast casts to its lower precision (float64 it leaves alone).
_AUTOCAST_CASTS = (torch.float32, torch.float16, torch.bfloat16)


def check_vector(name: str, value: object, shape: str) -> None:
    """``value`` is a 1-D integer tensor (a boolean one is not)."""
    check_integer_tensor(name, value, shape)
    if value.dim() != 1:
        raise ValueError(f"{name} must be 1-D {shape}, got shape {list(value.shape)}")


def _readable(value: Tensor) -> bool:
    """Whether reading ``value``'s entries waits for nothing: on the CPU, outside
    ``torch.compile``. Elsewhere reading them would wait for the device (or break the graph), and
    the meta device holds none: the checks of values are made where this is true."""
    return value.device.type == "cpu" and not torch.compiler.is_compiling()


def check_range(name: str, value: Tensor, most: int, said: str) -> None:
    """``value``'s entries lie in ``0 .. most``, checked where reading them waits for nothing
    (``_readable``)."""
    if not _readable(value) or not value.numel():
        return
    if value.min() < 0 or value.max() > most:
        raise ValueError(f"{name} must lie in 0 .. {said} ({most}), got {value.tolist()}")


# The largest position mha takes: rope's angles and temperature's scales are computed from the
# positions in float32, which holds every integer up to 2**24 exactly, and not all beyond
MOST_POSITION = 2**24


def check_positions(positions: object, x: Tensor) -> None:
    """``positions`` checked against ``x``: ``[q_len]``, ``[batch_size, q_len]``, or ``[1, q_len]``
    (transformers' default ``position_ids``, the same for every row: it broadcasts); their values
    lie in ``0 .. 2**24``, checked where reading them waits for nothing (``_readable``: on the CPU,
    outside ``torch.compile``, so a compiled decoding step reads no value and a CUDA step waits
    for no copy). Decreasing positions are accepted: a row may restart, as a packed sequence
    does."""
    check_integer_tensor("positions", positions)
    if positions.shape not in ((x.size(1),), (x.size(0), x.size(1)), (1, x.size(1))):
        raise ValueError(
            f"positions must be [q_len] = [{x.size(1)}] or [batch_size, q_len] = "
            f"[{x.size(0)}, {x.size(1)}] (or [1, q_len], the same for every row), got "
            f"{list(positions.shape)}"
        )
    if positions.device != x.device:
        raise ValueError(
            f"positions must be on the input's device {x.device}, got {positions.device}"
        )
    if not _readable(positions) or not positions.numel():
        return
    smallest, largest = (int(v) for v in torch.aminmax(positions))
    for value, which in ((smallest, "smallest"), (largest, "largest")):
        if not 0 <= value <= MOST_POSITION:
            raise ValueError(
                f"positions must lie in 0 .. 2**24 ({MOST_POSITION}), the integers float32 holds "
                f"exactly (rope turns them into angles in float32), got {value} (the {which})"
            )


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether a tensor of ``shape`` broadcasts to exactly ``target``: no more dims, and each of
    its sizes, matched from the right, is 1 or the target's. (What ``torch.broadcast_shapes``
    would say, in plain Python: a decoding step calls this once a layer, and that function costs
    about 20 us.)"""
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(shape), reversed(target), strict=False))


def check_mask(
    mask: object, target: tuple[int, int, int, int], device: torch.device, held: int | None = None
) -> None:
    """``mask`` broadcasts to ``target``, ``[batch_size, heads_num, q_len, k_len]``, or (given
    ``held``, the keys a sliding window's cache holds and this call's) to ``[..., held]``."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"attn_mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(
            "attn_mask must be boolean (True = may attend) or floating point (added to the "
            f"scores), got dtype {mask.dtype}"
        )
    if mask.device != device:
        raise ValueError(
            f"attn_mask.device must match the input's device ({device}), got {mask.device}"
        )
    targets = [target] if held in (None, target[-1]) else [target, (*target[:-1], held)]
    for allowed in targets:
        if _broadcasts_to(mask.shape, allowed):
            _warn_of_lookalikes(mask, target)
            return
    said = f"[batch_size, heads_num, q_len, k_len] = {list(target)}"
    if len(targets) > 1:
        said += (
            f" (k_len: every position the cache has seen and this call's), or {list(targets[1])}"
            " (the keys the sliding window's cache holds and this call's)"
        )
    raise ValueError(f"attn_mask of shape {list(mask.shape)} must broadcast to {said}")


def check_rotations(
    rotations: object, positions: Tensor | None, x: Tensor, rope: torch.nn.Module | None
) -> None:
    """``rotations``, a model's cos and sin for this call, against the module's ``rope``."""
    if rope is None:
        raise ValueError("rotations are what rope turns by, and this MHA has no rope")
    if positions is not None:
        raise ValueError("pass positions or rotations (the cos and sin of positions), not both")
    if not (isinstance(rotations, tuple | list) and len(rotations) == 2) or not all(
        isinstance(t, Tensor) and t.is_floating_point() for t in rotations
    ):
        raise TypeError(
            "rotations must be (cos, sin), two floating-point tensors, got "
            f"{type(rotations).__name__}"
        )
    cos, sin = rotations
    q_len, dims = x.size(1), rope.rotary_dims
    shapes = [(q_len, dims), *((b, q_len, dims) for b in {1, x.size(0)})]
    if cos.shape not in shapes or sin.shape != cos.shape:
        raise ValueError(
            f"rotations must be cos and sin of [q_len, rotary_dims] = {[q_len, dims]} or "
            f"[batch_size or 1, q_len, rotary_dims], got {list(cos.shape)} and {list(sin.shape)}"
        )
    if cos.device != x.device or sin.device != x.device:
        raise ValueError(
            f"rotations must be on the input's device {x.device}, got {cos.device} and {sin.device}"
        )


class MaskWarning(UserWarning):
    """A mask that is valid but looks like another convention's (transformers' or a padding
    mask), so it likely means something else than what ``mha`` reads."""


def _warn_of_lookalikes(mask: Tensor, target: tuple[int, int, int, int]) -> None:
    """Warn, with the fix, of the two masks that pass every check and are still, most likely,
    wrong: a float mask of only 0s and 1s (transformers' ``attention_mask.float()``, a keep-mask,
    added to the scores instead) and a 2-D boolean mask shaped like a padding mask ``[batch_size,
    k_len]`` when ``batch_size == q_len`` (a 2-D mask is ``[q_len, k_len]``). Only where reading
    the values waits for nothing: a mask on the CPU, outside ``torch.compile``."""
    if not _readable(mask):
        return
    if mask.is_floating_point():
        ones = mask == 1
        if ones.any() and (ones | (mask == 0)).all():
            warnings.warn(
                "attn_mask is a float mask of only 0s and 1s, which is added to the scores (a 1 "
                "adds 1 and masks nothing): if it marks the keys to attend (transformers' "
                "attention_mask.float()), pass attn_mask.bool() (True = may attend); an additive "
                "mask holds 0 and -inf",
                MaskWarning,
                stacklevel=6,  # the caller of the module (through nn.Module.__call__)
            )
        return
    batch_size, _, q_len, k_len = target
    if mask.dim() != 2 or batch_size != q_len or q_len < 2 or mask.all():
        return
    # A padding mask's rows are a run of True at one end: the keys of each sequence
    counts = mask.sum(-1)  # [q_len]
    columns = torch.arange(mask.size(-1))
    right = mask == (columns < counts[:, None])  # True, then the padding
    left = mask == (columns >= mask.size(-1) - counts[:, None])  # the padding, then True
    causal = torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)
    if (right.all() or left.all()) and not torch.equal(mask, causal):
        warnings.warn(
            f"attn_mask is 2-D, which mha reads as [q_len, k_len] = {[q_len, k_len]}; this one "
            f"looks like a padding mask [batch_size, k_len] (batch_size is q_len here): pass "
            "attn_mask[:, None, None, :] (mha.full.padding_mask makes that form), or, if it is "
            "one row per query, attn_mask[None, None] to say so",
            MaskWarning,
            stacklevel=6,  # the caller of the module (through nn.Module.__call__)
        )


def autocast_enabled(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 takes no device type
        if device_type == "cpu":
            return torch.is_autocast_cpu_enabled()
        return torch.is_autocast_enabled()


def _autocast_will_cast(x: Tensor, weight: Tensor) -> bool:
    """Whether autocast is on for ``x``'s device and will cast both ``x`` and ``weight``."""
    if not torch.jit.is_scripting():
        if x.dtype in _AUTOCAST_CASTS and weight.dtype in _AUTOCAST_CASTS:
            return autocast_enabled(x.device.type)
    return False


def check_input(
    x: Tensor, hidden_size: int, weight: Tensor, name: str = "x", size_name: str = "hidden_size"
) -> None:
    """Check the input of ``forward`` against the module's size and parameters.

    Args:
        x: the input; must be a floating-point tensor of shape
            ``[batch_size, seq_len, hidden_size]`` with the same dtype and device as ``weight``.
            ``batch_size`` and ``seq_len`` may be 0. Under ``torch.autocast`` for ``x``'s device,
            the dtypes may differ when autocast casts both (float32, float16, bfloat16): a layer's
            bfloat16 output can then feed the next layer, whose parameters stay float32.
        hidden_size: the module's ``hidden_size``.
        weight: one of the module's parameters (its dtype and device are the expected ones).
        name: what the messages call the tensor (``"context"`` for cross-attention's keys and
            values source in [`mha.full.MHA`][mha.full.MHA]).
        size_name: what the messages call ``hidden_size`` (``"context_size"`` for a context of
            another width).

    Raises:
        TypeError: ``x`` is not a tensor, not floating point, or of another dtype than ``weight``
            (outside autocast).
        ValueError: ``x`` is not 3-D, its last dimension is not ``hidden_size``, or it lives on
            another device than ``weight``.

    Examples:
        >>> w = torch.zeros(20, 20)
        >>> check_input(torch.zeros(2, 3, 20), 20, w)
        >>> check_input(torch.zeros(3, 20), 20, w)
        Traceback (most recent call last):
        ...
        ValueError: x must be 3-D [batch_size, seq_len, hidden_size], got 2-D with shape [3, 20]

    中文:
        检查 ``forward`` 的输入与模块的尺寸、参数是否相符。

        参数：
            x: 输入，必须是形状为 ``[batch_size, seq_len, hidden_size]`` 的浮点张量，dtype 和设备
                都与 ``weight`` 相同；``batch_size`` 和 ``seq_len`` 可以为 0。dtype 有一个例外：
                ``x`` 所在设备开启了 ``torch.autocast``，并且两者的 dtype 都是 autocast 会转换的
                （float32、float16、bfloat16）时，两者可以不同。这样上一层输出的 bfloat16 张量
                可以直接送进下一层，即使下一层的参数仍是 float32。
            hidden_size: 模块的 ``hidden_size``。
            weight: 模块的任意一个参数，``x`` 的 dtype 和设备以它为准。
            name: 报错信息里张量的名字（[`mha.full.MHA`][mha.full.MHA] 检查交叉注意力的
                ``context`` 时传 ``"context"``）。
            size_name: 报错信息里 ``hidden_size`` 的名字（上下文宽度不同时传 ``"context_size"``）。

        异常：
            TypeError: ``x`` 不是张量、不是浮点类型，或者在 autocast 之外 dtype 与 ``weight``
                不同。
            ValueError: ``x`` 不是三维张量、最后一维不等于 ``hidden_size``，或者与 ``weight``
                不在同一个设备上。
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 3:
        raise ValueError(
            f"{name} must be 3-D [batch_size, seq_len, {size_name}], "
            f"got {x.dim()}-D with shape {list(x.shape)}"
        )
    if x.size(-1) != hidden_size:
        raise ValueError(
            f"{name}.shape[-1] must equal {size_name} ({hidden_size}), "
            f"got {x.size(-1)} ({name}.shape = {list(x.shape)})"
        )
    if not torch.is_floating_point(x):
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.dtype != weight.dtype and not _autocast_will_cast(x, weight):
        raise TypeError(
            f"{name}.dtype must match the parameters' dtype ({weight.dtype}), got {x.dtype}; "
            f"use {name}.to({weight.dtype}) or model.to({x.dtype})"
        )
    if x.device != weight.device:
        raise ValueError(
            f"{name}.device must match the parameters' device ({weight.device}), got {x.device}"
        )
