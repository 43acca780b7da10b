"""Attention masks (掩码): which keys each query may attend to, as boolean tensors.

``True`` means *may attend*, as in PyTorch's ``scaled_dot_product_attention``. ``causal_mask``
builds the lower-right-aligned causal mask (and its sliding-window band); ``padding_mask`` hides
the padded positions of a batch of different lengths; ``chunk_mask`` keeps each query to its own
chunk of positions (Llama 4's chunked attention). [`MHA`][mha.full.MHA] and
[`MLA`][mha.mla.MLA] take either (or both, combined with ``&``) as ``attn_mask``. Both modules
also use ``and_causal`` (a mask and the causal one together) and ``float_mask_as`` (a float mask
in the scores' dtype), which are not part of the documented API.

Examples:
    >>> from mha.masks import causal_mask, padding_mask
    >>> causal_mask(2, 3)
    tensor([[ True,  True, False],
            [ True,  True,  True]])
    >>> padding_mask(torch.tensor([2]), 3).shape  # [batch_size, 1, 1, k_len]
    torch.Size([1, 1, 1, 3])
"""

from __future__ import annotations

import torch
from torch import Tensor

from mha.checks import check_flag, check_length, check_range, check_vector

__all__ = ["causal_mask", "chunk_mask", "padding_mask"]


# --8<-- [start:masks]
def causal_mask(
    q_len: int, k_len: int, device: torch.device | str | None = None, *, window: int | None = None
) -> Tensor:
    """The causal mask, aligned to the lower right: ``True`` where a query may attend.

    The last query is the newest position and sees every key; query ``i`` sees keys
    ``0 .. i + (k_len - q_len)``. With ``q_len == k_len`` this is the usual lower triangle; with a
    cache (``k_len > q_len``) the new queries see every cached key. With ``window`` (sliding-window
    attention), query ``i`` sees only the ``window`` latest of those keys, itself included.

    Args:
        q_len: number of queries.
        k_len: number of keys.
        device: where to build the mask (the input's device).
        window: ``None`` (the default), or how many positions a query sees at most.

    Returns:
        A boolean tensor of shape ``[q_len, k_len]``.

    Raises:
        TypeError: ``q_len``, ``k_len`` or ``window`` is not an ``int``.
        ValueError: ``q_len`` or ``k_len`` is negative, or ``window`` not positive.

    Examples:
        >>> causal_mask(3, 3)
        tensor([[ True, False, False],
                [ True,  True, False],
                [ True,  True,  True]])
        >>> causal_mask(3, 3, window=2)
        tensor([[ True, False, False],
                [ True,  True, False],
                [False,  True,  True]])

    中文:
        因果掩码，右下对齐：``True`` 表示可以关注。

        最后一个查询是最新的位置，能看到所有键；查询 ``i`` 能看到键 0–``i + (k_len - q_len)``。
        ``q_len == k_len`` 时就是常见的下三角；有缓存时（``k_len > q_len``），新的查询能看到缓存里的
        所有键。给了 ``window``（滑动窗口注意力）时，查询 ``i`` 只能看到这些键里最近的 ``window``
        个，包括它自己。

        参数：
            q_len: 查询的个数。
            k_len: 键的个数。
            device: 在哪个设备上创建掩码（应与输入相同）。
            window: 默认 ``None``，或者一个查询最多能看到的位置数。

        返回：
            形状为 ``[q_len, k_len]`` 的布尔张量。

        异常：
            TypeError: ``q_len``、``k_len`` 或 ``window`` 不是 ``int``。
            ValueError: ``q_len`` 或 ``k_len`` 是负数，或者 ``window`` 不是正数。
    """
    check_length("q_len", q_len)
    check_length("k_len", k_len)
    ones = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    mask = ones.tril(diagonal=k_len - q_len)
    if window is None:
        return mask
    check_length("window", window, positive=True)
    # 查询 i 之前第 window 个位置以前的键也屏蔽掉：上三角从对角线往左 window - 1 处开始
    # Keys more than window - 1 positions before query i are masked too: an upper triangle that
    # starts window - 1 diagonals left of the main one
    return mask & ones.triu(diagonal=k_len - q_len - window + 1)


def padding_mask(lengths: Tensor, k_len: int, *, left: bool = False) -> Tensor:
    """The padding mask of a batch: ``True`` where a key is a real position, not padding.

    Right padding (the default) puts a sequence's positions first and the padding after them, as
    training batches do; left padding (``left=True``) puts the padding first, as a batch of
    prompts for generation does, so that every row's newest position is the last column. The
    values of ``lengths`` are checked when it is on the CPU; on an accelerator, and inside
    ``torch.compile``, they are not (reading them would wait for the device, or break the graph).

    Args:
        lengths: the real length of each sequence, an integer tensor of shape ``[batch_size]``
            with values in ``0 .. k_len``; the mask is built on its device.
        k_len: the padded length (the number of keys).
        left: ``True`` when the padding comes before the positions.

    Returns:
        A boolean tensor ``[batch_size, 1, 1, k_len]`` (it broadcasts over heads and queries).

    Raises:
        TypeError: ``lengths`` is not an integer tensor (a boolean one included), ``k_len``
            is not an ``int`` or ``left`` not a ``bool``.
        ValueError: ``lengths`` is not 1-D, a length is outside ``0 .. k_len`` (on the CPU), or
            ``k_len`` is negative.

    Examples:
        >>> padding_mask(torch.tensor([3, 1]), 4)[:, 0, 0]
        tensor([[ True,  True,  True, False],
                [ True, False, False, False]])
        >>> padding_mask(torch.tensor([3, 1]), 4, left=True)[:, 0, 0]
        tensor([[False,  True,  True,  True],
                [False, False, False,  True]])

    中文:
        一批序列的填充掩码：``True`` 表示这个键是真实的位置，不是填充。

        右填充（默认）把序列的位置放在前面、填充放在后面，训练用的批就是这样；左填充
        （``left=True``）把填充放在前面，生成时的一批提示就是这样，每一行最新的位置都在最后一列。
        ``lengths`` 在 CPU 上时检查它的取值；在加速器上、在 ``torch.compile`` 里不检查（读取取值要
        等设备算完，或者会打断计算图）。

        参数：
            lengths: 每条序列的真实长度，形状为 ``[batch_size]`` 的整数张量，取值在
                0–``k_len`` 之间；掩码建在它所在的设备上。
            k_len: 填充后的长度（键的个数）。
            left: 填充在位置之前时为 ``True``。

        返回：
            形状为 ``[batch_size, 1, 1, k_len]`` 的布尔张量，可以在头和查询两个维度上广播。

        异常：
            TypeError: ``lengths`` 不是整数张量（布尔张量也不行），``k_len`` 不是 ``int``，或者
                ``left`` 不是 ``bool``。
            ValueError: ``lengths`` 不是一维的，（在 CPU 上）某个长度不在 0–``k_len`` 之间，或者
                ``k_len`` 是负数。
    """
    check_length("k_len", k_len)
    check_flag("left", left)
    check_vector("lengths", lengths, "[batch_size]")
    check_range("lengths", lengths, k_len, "k_len")
    positions = torch.arange(k_len, device=lengths.device)  # [k_len]
    if left:
        return (positions >= k_len - lengths[:, None])[:, None, None, :]
    return (positions < lengths[:, None])[:, None, None, :]


# --8<-- [end:masks]


def chunk_mask(q_at: Tensor, k_at: Tensor, chunk: int) -> Tensor:
    """Which keys lie in the same chunk of ``chunk`` positions as each query (Llama 4's chunked
    attention; the causal order is another mask): ``True`` where ``q_at // chunk`` equals
    ``k_at // chunk``.

    Args:
        q_at: the queries' positions, an integer tensor ``[..., q_len]``.
        k_at: the keys' positions, ``[..., k_len]`` (leading dims broadcast with ``q_at``'s).
        chunk: the chunk size.

    Returns:
        A boolean tensor ``[..., q_len, k_len]``.

    Examples:
        >>> chunk_mask(torch.arange(5), torch.arange(5), 2) & causal_mask(5, 5)
        tensor([[ True, False, False, False, False],
                [ True,  True, False, False, False],
                [False, False,  True, False, False],
                [False, False,  True,  True, False],
                [False, False, False, False,  True]])

    中文:
        每个查询和哪些键落在同一块里（块长 ``chunk``，Llama 4 的块内注意力；因果顺序是另一个掩码）：
        ``q_at // chunk`` 等于 ``k_at // chunk`` 的地方为 ``True``。

        参数：
            q_at: 各查询的位置，形状为 ``[..., q_len]`` 的整数张量。
            k_at: 各键的位置，``[..., k_len]``（前面的维度与 ``q_at`` 的互相广播）。
            chunk: 块的长度。

        返回：
            形状为 ``[..., q_len, k_len]`` 的布尔张量。
    """
    first = q_at.div(chunk, rounding_mode="floor").unsqueeze(-1)  # [..., q_len, 1]
    return first == k_at.div(chunk, rounding_mode="floor").unsqueeze(-2)


def and_causal(attn_mask: Tensor | None, causal: Tensor) -> Tensor:
    """A query sees a key when both ``attn_mask`` (boolean, or float: added to the scores) and
    ``causal`` let it."""
    if attn_mask is None:
        return causal
    if attn_mask.dtype == torch.bool:
        return attn_mask & causal
    return attn_mask.masked_fill(~causal, float("-inf"))


def float_mask_as(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """``mask`` in ``dtype``, its finite values clamped to ``dtype``'s finite range: a finite
    value (``finfo(float32).min``, ``-1e9``) stays a finite score in every dtype, and only
    ``-inf`` masks a key."""
    if mask.dtype == dtype:
        return mask
    info = torch.finfo(dtype)
    return torch.where(mask.isinf(), mask, mask.clamp(info.min, info.max)).to(dtype)


def held_mask(
    at: Tensor, capacity: int, *, is_causal: bool, window: int | None = None
) -> Tensor:
    """Which slots of a static cache's buffer each new query may attend: a static
    [`KVCache`][mha.cache.KVCache] holds position ``p`` in slot ``p``, and a call writes its
    queries' positions ``at``.

    A query sees every slot written so far (``0 .. at[-1]``); with ``is_causal`` only the slots
    up to its own position, and with ``window`` only the ``window`` latest of those. Built from
    tensors only, so a compiled step that calls it has the same graph at every position.

    Args:
        at: the positions of this call's queries, an integer tensor ``[q_len]``, consecutive.
        capacity: the buffer's length (``max_len``).
        is_causal: whether a query sees only the slots up to its own position.
        window: ``None``, or how many positions a query sees at most (needs ``is_causal``).

    Returns:
        A boolean tensor ``[q_len, capacity]``, on ``at``'s device.

    Examples:
        >>> held_mask(torch.tensor([2, 3]), 5, is_causal=True)
        tensor([[ True,  True,  True, False, False],
                [ True,  True,  True,  True, False]])
        >>> held_mask(torch.tensor([3]), 5, is_causal=True, window=2)
        tensor([[False, False,  True,  True, False]])

    中文:
        静态缓存的缓冲区里，每个新查询能关注哪些格子：静态 [`KVCache`][mha.cache.KVCache] 把位置
        ``p`` 存在格子 ``p``，一次调用写入它各个查询的位置 ``at``。

        查询能看到至今写过的每个格子（0–``at[-1]``）；``is_causal`` 时只看到它自己位置为止的格子，
        给了 ``window`` 时只看到其中最近的 ``window`` 个。只用张量构造，所以调用它的编译步骤在每个
        位置上都是同一张图。

        参数：
            at: 这次调用各查询的位置，形状为 ``[q_len]`` 的整数张量，位置连续。
            capacity: 缓冲区的长度（``max_len``）。
            is_causal: 查询是否只看到它自己位置为止的格子。
            window: ``None``，或者一个查询最多看到的位置数（需要 ``is_causal``）。

        返回：
            形状为 ``[q_len, capacity]`` 的布尔张量，与 ``at`` 在同一设备上。
    """
    slots = torch.arange(capacity, device=at.device)  # [capacity]
    # 因果：查询只看到自己位置为止；否则看到这次调用写完之后的全部
    # Causal: a query sees up to its own position; otherwise all that is written after this call
    last = at.unsqueeze(-1) if is_causal else at[-1:].unsqueeze(-1)  # [q_len, 1] or [1, 1]
    seen = slots <= last  # [q_len, capacity] or [1, capacity]
    if window is not None:
        seen = seen & (slots > at.unsqueeze(-1) - window)  # [q_len, capacity]
    return seen.expand(at.size(0), capacity)
