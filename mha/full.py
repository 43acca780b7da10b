"""The full MHA (完整版): the pure version plus what real models need.

Masks, cross-attention, a KV cache for generation, grouped-query attention, dropout and a fast
path, each proven equal to PyTorch's own in ``tests/test_full.py``. The parameters keep the pure
version's names (``W_q``, ``W_k``, ``W_v``, ``W_o``), so a pure (and so a design-post) checkpoint
loads into ``MHA(hidden_size, heads_num)`` unchanged.

Shape comments use these names: ``q_len`` positions of the queries (from ``x``); ``src_len``
positions this call projects into keys and values (``x`` itself, or ``context``); ``k_len``
positions attended over (``src_len`` plus what the cache holds before the call: every earlier
position, except under a sliding window, whose cache holds only the latest); ``kv_heads`` heads of keys
and values (``heads_num`` unless grouped-query attention). ``tests/test_shape_comments.py`` runs
``forward`` in several configurations and checks every one of them.

Examples:
    >>> import torch
    >>> from mha.full import MHA, KVCache, causal_mask
    >>> _ = torch.manual_seed(0)
    >>> model = MHA(hidden_size=20, heads_num=4, kv_heads=2).eval()
    >>> x = torch.randn(2, 3, 20)
    >>> model(x, is_causal=True).shape
    torch.Size([2, 3, 20])
    >>> cache = KVCache()
    >>> _ = model(x, is_causal=True, cache=cache)  # prefill 3 positions
    >>> _ = model(torch.randn(2, 1, 20), is_causal=True, cache=cache)  # then one per step
    >>> len(cache), cache.keys.shape
    (4, torch.Size([2, 2, 4, 5]))
    >>> causal_mask(2, 4)
    tensor([[ True,  True,  True, False],
            [ True,  True,  True,  True]])
"""

from __future__ import annotations

import contextlib
import math
import weakref
from dataclasses import dataclass, fields, replace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from mha.checks import (
    _check_flag,
    _check_integer_tensor,
    _check_length,
    _check_number,
    check_input,
    check_sizes,
)
from mha.rope import RotaryEmbedding

__all__ = ["MHA", "KVCache", "ModelCache", "Options", "RMSNorm", "causal_mask", "padding_mask"]


PROJECTIONS = ("W_q", "W_k", "W_v", "W_o")


def _biased(bias: object) -> set[str]:
    """The projections that have a bias: ``bias`` is a ``bool`` (all or none) or their names."""
    if isinstance(bias, bool):
        return set(PROJECTIONS) if bias else set()
    if not isinstance(bias, tuple | list | set | frozenset):
        raise TypeError(
            f"bias must be a bool or a tuple of projection names, got {type(bias).__name__} "
            f"({bias!r})"
        )
    unknown = [name for name in bias if name not in PROJECTIONS]
    if unknown:
        raise ValueError(f"bias names projections among {list(PROJECTIONS)}, got {unknown}")
    return set(bias)


def _check_vector(name: str, value: object, shape: str) -> None:
    """``value`` is a 1-D integer tensor (a boolean one is not)."""
    _check_integer_tensor(name, value, shape)
    if value.dim() != 1:
        raise ValueError(f"{name} must be 1-D {shape}, got shape {list(value.shape)}")


def _check_range(name: str, value: Tensor, most: int, said: str) -> None:
    """``value``'s entries lie in ``0 .. most``. Checked on the CPU only and outside
    ``torch.compile``: elsewhere reading the values would wait for the device (or break the
    graph), and the meta device holds none."""
    if value.device.type != "cpu" or torch.compiler.is_compiling() or not value.numel():
        return
    if value.min() < 0 or value.max() > most:
        raise ValueError(f"{name} must lie in 0 .. {said} ({most}), got {value.tolist()}")


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

        最后一个查询是最新的位置，能看到所有键；查询 ``i`` 能看到键 ``0 .. i + (k_len - q_len)``。
        ``q_len == k_len`` 时就是常见的下三角；有缓存时（``k_len > q_len``），新的查询能看到缓存里的
        所有键。给了 ``window``（滑动窗口注意力）时，查询 ``i`` 只能看到这些键里最近的 ``window``
        个，包括它自己。

        参数:
            q_len: 查询的个数。
            k_len: 键的个数。
            device: 在哪个设备上创建掩码（应与输入相同）。
            window: 默认 ``None``，或者一个查询最多能看到的位置数。

        返回:
            形状为 ``[q_len, k_len]`` 的布尔张量。

        引发:
            TypeError: ``q_len``、``k_len`` 或 ``window`` 不是 ``int``。
            ValueError: ``q_len`` 或 ``k_len`` 是负数，或者 ``window`` 不是正数。
    """
    _check_length("q_len", q_len)
    _check_length("k_len", k_len)
    ones = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    mask = ones.tril(diagonal=k_len - q_len)
    if window is None:
        return mask
    _check_length("window", window, positive=True)
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

        参数:
            lengths: 每条序列的真实长度，形状为 ``[batch_size]`` 的整数张量，取值在
                ``0 .. k_len`` 之间；掩码建在它所在的设备上。
            k_len: 填充后的长度（键的个数）。
            left: 填充在位置之前时为 ``True``。

        返回:
            形状为 ``[batch_size, 1, 1, k_len]`` 的布尔张量，可以在头和查询两个维度上广播。

        引发:
            TypeError: ``lengths`` 不是整数张量（布尔张量也不行），``k_len`` 不是 ``int``，或者
                ``left`` 不是 ``bool``。
            ValueError: ``lengths`` 不是一维的，（在 CPU 上）某个长度不在 ``0 .. k_len`` 之间，或者
                ``k_len`` 是负数。
    """
    _check_length("k_len", k_len)
    _check_flag("left", left)
    _check_vector("lengths", lengths, "[batch_size]")
    _check_range("lengths", lengths, k_len, "k_len")
    positions = torch.arange(k_len, device=lengths.device)  # [k_len]
    if left:
        return (positions >= k_len - lengths[:, None])[:, None, None, :]
    return (positions < lengths[:, None])[:, None, None, :]


# --8<-- [end:masks]


# --8<-- [start:cache]
class KVCache:
    """The keys and values of earlier steps, for generation one position at a time.

    Empty when created. Each call of [`MHA.forward`][mha.full.MHA.forward] with ``cache=``
    appends its new keys and values along the length dimension and attends over all of them
    (if that attention fails, the cache is left as it was). When nothing that autograd records
    can see the cache (no gradients, as under ``torch.inference_mode()`` or ``torch.no_grad()``
    in generation; or none of the queries, keys and values requires grad), the keys and values
    are written into buffers that double in length when full (or, with ``max_len``, one buffer
    of that length allocated once), so a step copies its own keys and values and, amortised, a
    constant amount more. Otherwise ``torch.cat`` makes new tensors at each call, so that no
    tensor the backward pass needs is changed.

    A cache belongs to the first module that fills it: one attention layer, one cache (a
    [`ModelCache`][mha.full.ModelCache] holds one per layer). With ``context=`` (cross-attention)
    the first call fills it with the context's keys and values and later calls read them.

    ``torch.save`` stores the keys, values and length (not the module it belongs to), and
    ``torch.load`` reads it back with its default ``weights_only=True``: importing ``mha.full``
    adds ``KVCache`` and ``ModelCache`` to PyTorch's safe globals.

    Args:
        max_len: ``None`` (the default): buffers that grow as needed. An ``int``: the most
            positions the cache will hold, allocated at the first append, so its tensors never
            change shape (a compiled decoding step is not recompiled as the cache grows); an
            append beyond it is an error. Under a sliding window it bounds what the cache keeps
            between calls (``window - 1 + rollback``), not the length of one call's input.
        rollback: under a sliding window (``MHA(window=...)``), how many positions the cache
            keeps beyond the ``window - 1`` the next call needs, so that ``crop`` can take back
            that many (speculative decoding rejects a draft's last tokens); 0 by default.

    Attributes:
        keys: ``[batch_size, kv_heads, len, head_size]`` (``len`` is ``len(cache)``), a view of
            the first ``len`` positions of the buffer; ``None`` before the first append.
        values: ``[batch_size, kv_heads, len, head_size]``; ``None`` before the first append.
        max_len: as given.
        rollback: as given.

    Raises:
        TypeError: ``max_len`` is not an ``int`` or ``None``, or ``rollback`` not an ``int``.
        ValueError: ``max_len`` is not positive, or ``rollback`` is negative.

    Examples:
        >>> cache = KVCache()
        >>> len(cache), cache.keys
        (0, None)
        >>> cache.append(torch.zeros(1, 2, 5, 3), torch.zeros(1, 2, 5, 3))
        >>> cache.crop(4)  # keep positions 0-3, say to generate position 4 again
        >>> cache
        KVCache(len=4, capacity=5, batch_size=1, kv_heads=2, head_size=3, dtype=torch.float32, device=cpu)
        >>> cache.reorder(torch.tensor([0, 0, 0]))  # three beams from one prompt
        >>> cache.keys.shape
        torch.Size([3, 2, 4, 3])

    中文:
        之前各步的键和值，用于逐个位置生成。

        创建时为空。每次以 ``cache=`` 调用 [`MHA.forward`][mha.full.MHA.forward]，都会把新算出的键和
        值沿长度这一维追加进来，再对全部键和值做注意力（注意力失败时缓存保持原样）。自动求导记录不到
        缓存时（不记录梯度，比如生成时的 ``torch.inference_mode()`` 或 ``torch.no_grad()``；或者查询、
        键、值都不要求梯度），键和值写进缓冲区，缓冲区满了就把长度翻倍（给了 ``max_len`` 时，只在第一次
        分配一个这么长的缓冲区），所以每一步复制自己的键和值，均摊下来再多复制常数个位置。否则每次用
        ``torch.cat`` 拼接成新张量，以免改动反向传播要用的张量。

        缓存属于第一个往里写的模块：一个注意力层，一个缓存（[`ModelCache`][mha.full.ModelCache]
        为每一层各备一个）。传入 ``context=``（交叉注意力）时，第一次调用用上下文的键和值填满缓存，
        之后的调用直接读取。

        ``torch.save`` 保存键、值和长度（不保存缓存属于哪个模块），``torch.load`` 用默认的
        ``weights_only=True`` 就能读回：导入 ``mha.full`` 时，``KVCache`` 和 ``ModelCache`` 已加入
        PyTorch 的安全全局对象列表。

        参数:
            max_len: ``None``（默认）：缓冲区按需增长。一个 ``int``：缓存最多存放的位置数，第一次
                追加时一次分配，之后张量的形状不再变化（编译过的解码步骤不会因缓存变长而重新编译）；
                超出它的追加会报错。有滑动窗口时，它限制的是两次调用之间缓存留下的位置数
                （``window - 1 + rollback``），而不是一次调用的输入长度。
            rollback: 有滑动窗口（``MHA(window=...)``）时，除了下一次调用要用的 ``window - 1`` 个
                位置，缓存再多留多少个，好让 ``crop`` 能退回这么多个位置（投机解码会丢掉草稿最后
                几个位置）；默认为 0。

        属性:
            keys: ``[batch_size, kv_heads, len, head_size]``（``len`` 即 ``len(cache)``），缓冲区前
                ``len`` 个位置的视图；第一次追加之前是 ``None``。
            values: ``[batch_size, kv_heads, len, head_size]``；第一次追加之前是 ``None``。
            max_len: 创建时给的值。
            rollback: 创建时给的值。

        引发:
            TypeError: ``max_len`` 既不是 ``int`` 也不是 ``None``，或者 ``rollback`` 不是 ``int``。
            ValueError: ``max_len`` 不是正数，或者 ``rollback`` 是负数。
    """

    rollback = 0  # the default, for a cache saved before there was one

    def __init__(self, max_len: int | None = None, *, rollback: int = 0) -> None:
        if max_len is not None:
            _check_length("max_len", max_len, positive=True)
        _check_length("rollback", rollback)
        self.max_len = max_len
        self.rollback = rollback
        self._keys: Tensor | None = None  # [batch_size, kv_heads, capacity, head_size]
        self._values: Tensor | None = None  # [batch_size, kv_heads, capacity, head_size]
        self._len = 0  # positions appended, held or not
        # A sliding window (MHA(window=...)) drops the oldest positions: the buffer holds
        # positions _dropped .. _len - 1, from index _offset on; _kept is what the window keeps.
        self._dropped = self._offset = 0
        self._kept: int | None = None
        self._owner: weakref.ref | None = None  # the module that fills it (set by MHA.forward)
        self._source: str | None = None  # what MHA.forward filled it from: "x" or "context"

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        head = f"len={self._len}" + ("" if self.max_len is None else f", max_len={self.max_len}")
        head += f", rollback={self.rollback}" if self.rollback else ""
        if self._kept is not None:
            head += f", held={self._len - self._dropped} (window keeps {self._kept})"
        if self._keys is None:
            return f"KVCache({head})"
        b, h, capacity, d = self._keys.shape
        return (
            f"KVCache({head}, capacity={capacity}, batch_size={b}, kv_heads={h}, head_size={d}, "
            f"dtype={self._keys.dtype}, device={self._keys.device})"
        )

    def __getstate__(self) -> dict:
        # The module it belongs to is not saved (a weak reference cannot be): the loaded cache
        # belongs to the first module that uses it. Only the positions held are saved, not the
        # buffer's free room (a max_len cache allocates it again at its next append).
        state = {**self.__dict__, "_owner": None, "_offset": 0}
        if self._keys is not None:
            state["_keys"], state["_values"] = self.keys.clone(), self.values.clone()
        return state

    @property
    def keys(self) -> Tensor | None:
        held = slice(self._offset, self._offset + self._len - self._dropped)
        return None if self._keys is None else self._keys[:, :, held]

    @property
    def values(self) -> Tensor | None:
        held = slice(self._offset, self._offset + self._len - self._dropped)
        return None if self._values is None else self._values[:, :, held]

    def append(self, keys: Tensor, values: Tensor, *, queries: Tensor | None = None) -> None:
        """Append new keys and values, each ``[batch_size, kv_heads, new_len, head_size]``.

        Args:
            keys: the new keys.
            values: the new values, same shape, dtype and device as ``keys``.
            queries: the queries that will attend over the cache, if any. When gradients are
                recorded and they require grad, the attention saves the cached keys for the
                backward pass, so they are copied (``torch.cat``), not written in place.

        Raises:
            ValueError: ``values`` has another shape or device than ``keys``; the batch size,
                ``kv_heads``, ``head_size`` or device differ from the cached ones; or the cache
                would hold more than ``max_len`` positions.
            TypeError: ``values`` has another dtype than ``keys``, or the dtype differs from the
                cached one.

        中文:
            追加新的键和值，形状都是 ``[batch_size, kv_heads, new_len, head_size]``。

            参数:
                keys: 新的键。
                values: 新的值，形状、dtype 和设备都与 ``keys`` 相同。
                queries: 之后要对缓存做注意力的查询（如果有）。记录梯度且它们要求梯度时，注意力会
                    为反向传播保存缓存里的键，所以这时复制（``torch.cat``），不原地写入。

            引发:
                ValueError: ``values`` 的形状或设备与 ``keys`` 不同；批大小、``kv_heads``、
                    ``head_size``、设备与缓存里的不同；或者追加之后缓存会超过 ``max_len`` 个位置。
                TypeError: ``values`` 的 dtype 与 ``keys`` 不同，或者 dtype 与缓存里的不同。
        """
        self._check(keys, values)
        held = self._len - self._dropped
        if self.max_len is not None and held + keys.size(2) > self.max_len:
            raise ValueError(
                f"cache holds at most max_len ({self.max_len}) positions; it holds {held} and "
                f"this call adds {keys.size(2)}: crop or reset it, or create it with a larger max_len"
            )
        if self._offset and self._offset + held + keys.size(2) > self._keys.size(2):
            # 滑动窗口丢掉了缓冲区开头的位置：把留下的移到开头，腾出后面的空间
            # A sliding window dropped the buffer's first positions: move those held to the
            # front, freeing the end
            with _ordinary_tensors():
                self._keys = self._keys[:, :, self._offset :].clone()  # [batch_size, kv_heads, capacity - offset, head_size]
                self._values = self._values[:, :, self._offset :].clone()  # [batch_size, kv_heads, capacity - offset, head_size]
            self._offset = 0
        new_len = keys.size(2)
        start, end = self._offset + held, self._offset + held + new_len
        if self._recorded(keys, values, queries):
            # 自动求导看得到缓存：原地写入会改掉反向传播要用的张量，改为拼接成新张量
            # Autograd can see the cache: writing in place would change tensors saved for the
            # backward pass, so concatenate into new tensors instead
            if held > 0:
                keys = torch.cat([self.keys, keys], dim=2)  # [batch_size, kv_heads, held + new_len, head_size]
                values = torch.cat([self.values, values], dim=2)  # [batch_size, kv_heads, held + new_len, head_size]
            self._keys, self._values = keys, values
            self._offset = 0
        else:
            if self._keys is None or end > self._keys.size(2) or self._frozen():
                # 缓冲区放不下（或是推理模式之外改不了的推理张量）：换一个两倍长的（或 max_len 长的），
                # 把已有的键和值复制过去
                # The buffer is full (or an inference tensor, which cannot change outside
                # inference mode): take one twice as long (or max_len long) and copy what it held
                capacity = max(end, 2 * start) if self.max_len is None else self.max_len
                with _ordinary_tensors():
                    self._keys = _grown(self._keys, keys, start, capacity)
                    self._values = _grown(self._values, values, start, capacity)
            # 只写入新的位置：之前取出的 keys、values 视图不受影响
            # Write the new positions only: views of keys and values taken earlier stay unchanged
            self._keys[:, :, start:end] = keys
            self._values[:, :, start:end] = values
        self._len += new_len

    def _keep_last(self, n: int) -> None:
        """Called by a sliding-window ``MHA.forward`` after each call: hold only the ``n`` latest
        positions, and ``rollback`` more (``len(cache)`` still counts them all, for the positions
        of the next call)."""
        self._kept = n
        drop = max(self._len - self._dropped - n - self.rollback, 0)
        self._dropped += drop
        self._offset += drop

    def _over_max_len(self, new: int) -> bool:
        """Whether appending ``new`` positions would hold more than ``max_len``."""
        return self.max_len is not None and self._len - self._dropped + new > self.max_len

    def _append_windowed(self, keys: Tensor, values: Tensor, keep: int) -> None:
        """Append keys and values of which only the ``keep`` latest positions (of those held and
        these) will be held after the call, writing only those: a sliding window's call may
        bring more positions than ``max_len`` (a long prompt), as long as what it keeps fits.
        The caller attends over what the cache held before and ``keys``, not ``self.keys``."""
        self._check(keys, values)
        keep += self.rollback
        if self.max_len is not None and keep > self.max_len:
            raise ValueError(
                f"cache holds at most max_len ({self.max_len}) positions, and the window needs "
                f"window - 1 + rollback = {keep} held between calls: create it with max_len of "
                f"at least {keep}"
            )
        new = keys.size(2)
        stored = min(new, keep)
        held = self._len - self._dropped
        drop = max(held - (keep - stored), 0)  # the held positions this call pushes out
        self._dropped += drop
        self._offset += drop
        skipped = new - stored  # new positions older than the kept ones: never written
        if skipped:  # then nothing held before stays (stored == keep), so no position moves
            self._len += skipped
            self._dropped += skipped
        self.append(keys[:, :, skipped:], values[:, :, skipped:])

    def crop(self, n: int) -> None:
        """Keep the first ``n`` positions and forget the rest: the next append writes position ``n``.

        Args:
            n: how many positions to keep, ``0 .. len(cache)``.

        Raises:
            TypeError: ``n`` is not an ``int``.
            ValueError: ``n`` is negative or more than ``len(cache)``.

        中文:
            只保留前 ``n`` 个位置，丢掉其余的：下一次追加从位置 ``n`` 写起。

            参数:
                n: 保留的位置数，取值在 ``0 .. len(cache)`` 之间。

            引发:
                TypeError: ``n`` 不是 ``int``。
                ValueError: ``n`` 是负数，或者大于 ``len(cache)``。
        """
        _check_length("n", n)
        if n > self._len:
            raise ValueError(f"n must be at most len(cache) ({self._len}), got {n}")
        if self._dropped and n - self._dropped < self._kept:
            raise ValueError(
                f"this cache holds only positions {self._dropped} .. {self._len - 1} (a sliding "
                f"window keeps the {self._kept} latest), and attending from position {n} needs "
                f"the {self._kept} before it: n must be at least {self._dropped + self._kept}, "
                "or reset() it"
            )
        self._len = n

    def reorder(self, index: Tensor) -> None:
        """Select along the batch: row ``i`` of the cache becomes row ``index[i]`` of what it held.

        Beam search keeps, after each step, the beams that scored best: ``index`` holds, for each
        new beam, the old beam it continues. It may repeat rows and change the batch size
        (``torch.zeros(k, dtype=torch.long)`` makes ``k`` beams of a one-prompt cache).

        Args:
            index: an integer tensor ``[new_batch_size]``, on the cache's device, each value in
                ``0 .. batch_size - 1`` (checked when ``index`` is on the CPU; on an accelerator
                that check would wait for the device).

        Raises:
            TypeError: ``index`` is not an integer tensor.
            ValueError: ``index`` is not 1-D, is on another device, or (on the CPU) holds a row
                outside ``0 .. batch_size - 1``.

        中文:
            沿批这一维重新挑选：缓存的第 ``i`` 行变成原来的第 ``index[i]`` 行。

            束搜索每一步之后留下得分最高的几束：``index`` 给出每一束新束接续的是哪一束旧束。
            可以重复某一行，也可以改变批大小（``torch.zeros(k, dtype=torch.long)`` 把只有一个提示的
            缓存变成 ``k`` 束）。

            参数:
                index: 形状为 ``[new_batch_size]`` 的整数张量，与缓存在同一设备上，每个值在
                    ``0 .. batch_size - 1`` 之间（``index`` 在 CPU 上时才检查；在加速器上检查要等设备
                    算完）。

            引发:
                TypeError: ``index`` 不是整数张量。
                ValueError: ``index`` 不是一维的，与缓存不在同一设备上，或者（在 CPU 上）有一行
                    超出 ``0 .. batch_size - 1``。
        """
        _check_vector("index", index, "[new_batch_size]")
        if self._keys is None:
            return
        if index.device != self._keys.device:
            raise ValueError(
                f"index must be on the cache's device {self._keys.device}, got {index.device}"
            )
        _check_range("index", index, self._keys.size(0) - 1, "batch_size - 1")
        # 整个缓冲区按行挑选（out-of-place：之前取出的视图、反向传播要用的张量都不变）
        # The whole buffer, row by row (out of place: views taken earlier, and tensors the backward
        # pass saved, stay unchanged)
        with _ordinary_tensors():
            self._keys = self._keys.index_select(0, index)  # [new_batch_size, kv_heads, capacity, head_size]
            self._values = self._values.index_select(0, index)  # [new_batch_size, kv_heads, capacity, head_size]

    def reset(self) -> None:
        """Empty the cache, as new (``max_len`` kept): the next call may bring another batch size,
        another model, or self-attention after cross-attention.

        中文:
            清空缓存，和新建的一样（保留 ``max_len``）：下一次调用可以换批大小、换模型，也可以从交叉
            注意力换成自注意力。
        """
        self._keys = self._values = None
        self._len = self._dropped = self._offset = 0
        self._kept = None
        self._owner = self._source = None

    def to(self, *args: object, **kwargs: object) -> KVCache:
        """Move (or cast) the held keys and values, in place.

        Args:
            *args: what ``Tensor.to`` takes: a device, a dtype, or both.
            **kwargs: ``Tensor.to``'s keywords (``device=``, ``dtype=``, ``non_blocking=``).

        Returns:
            The cache itself, as ``nn.Module.to`` returns the module.

        中文:
            移动（或转换）缓存里的键和值，原地修改。

            参数:
                *args: ``Tensor.to`` 接受的参数：设备、dtype，或者两者。
                **kwargs: ``Tensor.to`` 的关键字参数（``device=``、``dtype=``、``non_blocking=``）。

            返回:
                缓存本身，就像 ``nn.Module.to`` 返回模块本身。
        """
        if self._keys is not None:
            self._keys = self._keys.to(*args, **kwargs)
            self._values = self._values.to(*args, **kwargs)
        return self

    def _claim(self, module: nn.Module, source: str) -> None:
        """Called by ``MHA.forward``: the cache belongs to one module, filled from one source."""
        owner = None if self._owner is None else self._owner()
        if owner is not None and owner is not module:
            raise ValueError(
                "this KVCache belongs to another module: each attention layer needs a cache of its "
                "own (a ModelCache holds one per layer); reset() it to use it elsewhere"
            )
        if self._len and self._source is not None and self._source != source:
            said = {"x": "self-attention (no context)", "context": "cross-attention (context=)"}
            raise ValueError(
                f"this KVCache holds keys and values of {said[self._source]}, this call is "
                f"{said[source]}: use a cache for each, or reset() it"
            )
        if owner is None:
            self._owner = weakref.ref(module)
        self._source = source

    def _recorded(self, keys: Tensor, values: Tensor, queries: Tensor | None) -> bool:
        """Whether autograd records (or has recorded) something that reads the cache."""
        held = [t for t in (self._keys, self._values) if t is not None]
        if any(t.requires_grad for t in held):
            return True  # an earlier step's graph reads these very tensors
        new = [t for t in (keys, values, queries) if t is not None]
        return torch.is_grad_enabled() and any(t.requires_grad for t in new)

    def _frozen(self) -> bool:
        """The buffer is an inference tensor and we are outside inference mode: it cannot be
        written in place (PyTorch forbids it), so it is copied into an ordinary tensor once."""
        if torch.compiler.is_compiling():
            return False  # a compiled graph holds no inference tensor (use torch.no_grad there)
        return self._keys.is_inference() and not torch.is_inference_mode_enabled()

    # What a batch of keys and values must keep from one append to the next, as named in errors
    # (a subclass holding other tensors says its own: mha.mla.LatentCache).
    _SIZES = "[batch_size, kv_heads, head_size]"

    def _sizes(self, keys: Tensor, values: Tensor) -> tuple[int, ...]:
        return (keys.size(0), keys.size(1), keys.size(3))

    def _check_pair(self, keys: Tensor, values: Tensor) -> None:
        if values.shape != keys.shape:
            raise ValueError(
                f"values must have the keys' shape {list(keys.shape)}, got {list(values.shape)}"
            )

    def _check(self, keys: Tensor, values: Tensor) -> None:
        self._check_pair(keys, values)
        if values.dtype != keys.dtype:
            raise TypeError(f"values must have the keys' dtype {keys.dtype}, got {values.dtype}")
        if values.device != keys.device:
            raise ValueError(f"values must be on the keys' device {keys.device}, got {values.device}")
        if self._keys is None:
            return
        held = self._sizes(self._keys, self._values)
        new = self._sizes(keys, values)
        if held != new:
            raise ValueError(
                f"cache holds {self._SIZES} = {list(held)}, this call gives {list(new)}: "
                f"reset() it, or use a new {type(self).__name__}, for another batch"
            )
        if keys.dtype != self._keys.dtype:
            raise TypeError(f"cache holds dtype {self._keys.dtype}, this call gives {keys.dtype}")
        if keys.device != self._keys.device:
            raise ValueError(
                f"cache is on device {self._keys.device}, this call's input is on {keys.device}"
            )


def _ordinary_tensors() -> contextlib.AbstractContextManager:
    """Where the cache makes a buffer: outside inference mode even inside it (when not compiling),
    so that the buffer is an ordinary tensor, which a later call under ``torch.no_grad`` (or a
    compiled step) may write in place; an inference tensor may only be read there."""
    if torch.compiler.is_compiling() or not torch.is_inference_mode_enabled():
        return contextlib.nullcontext()
    return torch.inference_mode(False)


def _grown(buffer: Tensor | None, new: Tensor, held: int, capacity: int) -> Tensor:
    """A buffer like ``new`` with ``capacity`` positions that starts with ``buffer``'s first
    ``held``."""
    grown = new.new_empty(new.size(0), new.size(1), capacity, new.size(3))
    if held:
        grown[:, :, :held] = buffer[:, :, :held]
    return grown


class ModelCache:
    """One [`KVCache`][mha.full.KVCache] per attention layer of a model, handled together.

    A model of ``n`` layers passes ``cache.layers[i]`` to its layer ``i``. ``crop``, ``reorder``,
    ``reset`` and ``to`` act on every layer's cache, as a generation loop needs.

    Args:
        num_layers: how many caches (attention layers).
        max_len: each cache's ``max_len`` (``None``: buffers that grow as needed).
        rollback: each cache's ``rollback`` (positions kept beyond a sliding window).

    Attributes:
        layers: the caches, a tuple of ``num_layers`` [`KVCache`][mha.full.KVCache].

    Raises:
        TypeError: ``num_layers`` or ``max_len`` is not an ``int``.
        ValueError: ``num_layers`` or ``max_len`` is not positive.

    Examples:
        >>> cache = ModelCache(2, max_len=16)
        >>> cache
        ModelCache(num_layers=2, len=0, max_len=16)
        >>> for layer in cache.layers:
        ...     layer.append(torch.zeros(1, 2, 5, 3), torch.zeros(1, 2, 5, 3))
        >>> cache.crop(3)
        >>> len(cache), [len(layer) for layer in cache.layers]
        (3, [3, 3])

    中文:
        模型每个注意力层各一个 [`KVCache`][mha.full.KVCache]，统一处理。

        有 ``n`` 层的模型把 ``cache.layers[i]`` 传给第 ``i`` 层。``crop``、``reorder``、``reset``
        和 ``to`` 作用于每一层的缓存，生成循环需要的正是这样。

        参数:
            num_layers: 缓存的个数（注意力层数）。
            max_len: 每个缓存的 ``max_len``（``None``：缓冲区按需增长）。
            rollback: 每个缓存的 ``rollback``（滑动窗口之外多留的位置数）。

        属性:
            layers: 这些缓存，由 ``num_layers`` 个 [`KVCache`][mha.full.KVCache] 组成的元组。

        引发:
            TypeError: ``num_layers`` 或 ``max_len`` 不是 ``int``。
            ValueError: ``num_layers`` 或 ``max_len`` 不是正数。
    """

    def __init__(
        self, num_layers: int, *, max_len: int | None = None, rollback: int = 0
    ) -> None:
        _check_length("num_layers", num_layers, positive=True)
        self.layers = tuple(KVCache(max_len, rollback=rollback) for _ in range(num_layers))
        self.max_len = max_len

    def __len__(self) -> int:
        # The positions the caches hold: every layer holds as many between two forwards.
        return len(self.layers[0])

    def __repr__(self) -> str:
        extra = "" if self.max_len is None else f", max_len={self.max_len}"
        return f"ModelCache(num_layers={len(self.layers)}, len={len(self)}{extra})"

    def crop(self, n: int) -> None:
        """[`KVCache.crop`][mha.full.KVCache.crop] on every layer.

        Args:
            n: how many positions to keep, ``0 .. len(cache)``.

        中文:
            对每一层调用 [`KVCache.crop`][mha.full.KVCache.crop]。

            参数:
                n: 保留的位置数，取值在 ``0 .. len(cache)`` 之间。
        """
        for layer in self.layers:
            layer.crop(n)

    def reorder(self, index: Tensor) -> None:
        """[`KVCache.reorder`][mha.full.KVCache.reorder] on every layer.

        Args:
            index: an integer tensor ``[new_batch_size]``: row ``i`` becomes row ``index[i]``.

        中文:
            对每一层调用 [`KVCache.reorder`][mha.full.KVCache.reorder]。

            参数:
                index: 形状为 ``[new_batch_size]`` 的整数张量：第 ``i`` 行变成原来的第
                    ``index[i]`` 行。
        """
        for layer in self.layers:
            layer.reorder(index)

    def reset(self) -> None:
        """[`KVCache.reset`][mha.full.KVCache.reset] on every layer.

        中文:
            对每一层调用 [`KVCache.reset`][mha.full.KVCache.reset]。
        """
        for layer in self.layers:
            layer.reset()

    def to(self, *args: object, **kwargs: object) -> ModelCache:
        """[`KVCache.to`][mha.full.KVCache.to] on every layer.

        Args:
            *args: what ``Tensor.to`` takes: a device, a dtype, or both.
            **kwargs: ``Tensor.to``'s keywords.

        Returns:
            The container itself.

        中文:
            对每一层调用 [`KVCache.to`][mha.full.KVCache.to]。

            参数:
                *args: ``Tensor.to`` 接受的参数：设备、dtype，或者两者。
                **kwargs: ``Tensor.to`` 的关键字参数。

            返回:
                容器本身。
        """
        for layer in self.layers:
            layer.to(*args, **kwargs)
        return self


# A saved cache loads with torch.load's default weights_only=True (its state is tensors, ints,
# strings and None).
torch.serialization.add_safe_globals([KVCache, ModelCache])


# --8<-- [end:cache]


@dataclass(frozen=True)
class Options:
    """The options of [`MHA`][mha.full.MHA], declared once: its keyword arguments, in order.

    ``MHA(**vars(options))`` and [`MHA.from_options`][mha.full.MHA.from_options] build a module
    from them; [`MHA.options`][mha.full.MHA.options] gives a module's back, resolved (no
    ``None`` where a value follows from the others, ``bias`` as the names of the projections
    that have one). Every consumer reads this one declaration: splitting the heads across ranks
    copies it with the local head counts (``mha.parallel.heads_on_rank``), ``to_torch`` maps or
    refuses each field by name, ``from_hf`` fills it from a transformers module, and the
    shape-comment checker's runs set each field; ``mha_site/checkers/options.py`` fails when a
    field is missing from one of them.

    The fields are the arguments of [`MHA`][mha.full.MHA], with the same meaning and defaults.

    Args:
        hidden_size: as in [`MHA`][mha.full.MHA].
        heads_num: as in [`MHA`][mha.full.MHA].
        kv_heads: as in [`MHA`][mha.full.MHA].
        dropout: as in [`MHA`][mha.full.MHA].
        bias: as in [`MHA`][mha.full.MHA].
        fast: as in [`MHA`][mha.full.MHA].
        context_size: as in [`MHA`][mha.full.MHA].
        head_size: as in [`MHA`][mha.full.MHA].
        scale: as in [`MHA`][mha.full.MHA].
        qk_norm: as in [`MHA`][mha.full.MHA].
        norm_eps: as in [`MHA`][mha.full.MHA].
        rope: as in [`MHA`][mha.full.MHA].
        window: as in [`MHA`][mha.full.MHA].

    Examples:
        >>> options = MHA(20, 4, kv_heads=2).options
        >>> options.kv_heads, options.head_size, options.bias
        (2, 5, ('W_q', 'W_k', 'W_v', 'W_o'))
        >>> options.changed()
        ['kv_heads']
        >>> MHA.from_options(replace(options, heads_num=2, kv_heads=1)).W_q.weight.shape
        torch.Size([10, 20])

    中文:
        [`MHA`][mha.full.MHA] 的选项，只在这里声明一次：就是它的关键字参数，顺序也相同。

        ``MHA(**vars(options))`` 和 [`MHA.from_options`][mha.full.MHA.from_options] 用它构建模块；
        [`MHA.options`][mha.full.MHA.options] 给出一个模块的选项，已经确定下来（能由其他选项推出的
        不再是 ``None``，``bias`` 是带偏置的那几个投影的名字）。用到选项的地方都读这一份声明：把头
        分到多个进程时，按本进程的头数复制它（``mha.parallel.heads_on_rank``）；``to_torch`` 逐个
        字段地对应或者点名拒绝；``from_hf`` 从 transformers 的模块填写它；形状注释检查器的各次运行
        把每个字段都用上。``mha_site/checkers/options.py`` 在某个字段被其中一处漏掉时报错。

        各字段就是 [`MHA`][mha.full.MHA] 的参数，含义和默认值都相同。

        参数:
            hidden_size: 与 [`MHA`][mha.full.MHA] 相同。
            heads_num: 与 [`MHA`][mha.full.MHA] 相同。
            kv_heads: 与 [`MHA`][mha.full.MHA] 相同。
            dropout: 与 [`MHA`][mha.full.MHA] 相同。
            bias: 与 [`MHA`][mha.full.MHA] 相同。
            fast: 与 [`MHA`][mha.full.MHA] 相同。
            context_size: 与 [`MHA`][mha.full.MHA] 相同。
            head_size: 与 [`MHA`][mha.full.MHA] 相同。
            scale: 与 [`MHA`][mha.full.MHA] 相同。
            qk_norm: 与 [`MHA`][mha.full.MHA] 相同。
            norm_eps: 与 [`MHA`][mha.full.MHA] 相同。
            rope: 与 [`MHA`][mha.full.MHA] 相同。
            window: 与 [`MHA`][mha.full.MHA] 相同。
    """

    hidden_size: int
    heads_num: int
    kv_heads: int | None = None
    dropout: float = 0.0
    bias: bool | tuple[str, ...] = True
    fast: bool = True
    context_size: int | None = None
    head_size: int | None = None
    scale: float | None = None
    qk_norm: bool = False
    norm_eps: float = 1e-6
    rope: RotaryEmbedding | None = None
    window: int | None = None

    def resolved(self) -> Options:
        """The same options with what follows from the others filled in: ``kv_heads``,
        ``context_size`` and ``head_size`` as numbers, ``bias`` as a tuple of names.

        Returns:
            A new ``Options`` (checked as ``MHA`` checks its arguments).

        中文:
            同样的选项，把能由其他选项推出的填上：``kv_heads``、``context_size``、``head_size``
            换成数，``bias`` 换成名字的元组。

            返回:
                一个新的 ``Options``（像 ``MHA`` 一样检查各参数）。
        """
        kv_heads = self.heads_num if self.kv_heads is None else self.kv_heads
        head_size = self.head_size
        if head_size is None:
            check_sizes(self.hidden_size, self.heads_num)
            head_size = self.hidden_size // self.heads_num
        biased = _biased(self.bias)
        return replace(
            self,
            kv_heads=kv_heads,
            context_size=self.hidden_size if self.context_size is None else self.context_size,
            head_size=head_size,
            bias=tuple(name for name in PROJECTIONS if name in biased),
        )

    def changed(self) -> list[str]:
        """The names of the fields whose value is not the default one, once both are resolved.

        Returns:
            Field names, in declaration order.

        中文:
            值不是默认值的字段名（两边都先确定下来再比较）。

            返回:
                字段名，按声明的顺序。
        """
        mine, h, heads = self.resolved(), self.hidden_size, self.heads_num
        # The default head_size is h / heads; when that is not a whole number, no default is
        default = replace(Options(h, heads, head_size=h // heads or 1).resolved(), head_size=None)
        if h % heads == 0:
            default = replace(default, head_size=h // heads)
        return [f.name for f in fields(self) if getattr(mine, f.name) != getattr(default, f.name)]


# --8<-- [start:class]
class MHA(nn.Module):
    """Multi-head attention as real models use it: masks, cross-attention, KV cache, GQA.

    The arguments from ``head_size`` on are the options of today's open models (Llama, Qwen,
    Mistral), each off by default, so a pure (and a design-post) checkpoint loads unchanged.

    Args:
        hidden_size: model width, the last dimension of the input.
        heads_num: number of query heads; must divide ``hidden_size``.
        kv_heads: number of key/value heads (grouped-query attention); must divide
            ``heads_num``. ``None`` (the default) means ``heads_num``; 1 is multi-query attention.
        dropout: probability of zeroing an attention weight, in training mode only.
        bias: whether the four linear layers have a bias, or the names of those that have one,
            as a tuple (Qwen2: ``("W_q", "W_k", "W_v")``).
        fast: ``True`` runs ``torch.nn.functional.scaled_dot_product_attention`` (fused kernels);
            ``False`` runs the attention written out, as on the site's walkthrough.
        context_size: the width of ``context`` in cross-attention, when it differs from
            ``hidden_size`` (``kdim`` and ``vdim`` in ``nn.MultiheadAttention``): ``W_k`` and
            ``W_v`` take ``context_size`` inputs, and the module does cross-attention only.
            ``None`` (the default) means ``hidden_size``.
        head_size: the width of each head, when it is not ``hidden_size // heads_num`` (Qwen3,
            Gemma): the heads then concatenate to ``heads_num * head_size``, which ``W_o``
            projects back to ``hidden_size``. ``None`` (the default) means
            ``hidden_size // heads_num``, which then must divide evenly.
        scale: what the scores ``q·k`` are multiplied by; ``None`` (the default) means
            ``1 / sqrt(head_size)``.
        qk_norm: an RMSNorm over each head of the queries and of the keys, before the rotation
            (Qwen3): ``q_norm`` and ``k_norm``, each with ``head_size`` weights.
        norm_eps: the ``eps`` of those norms (``rms_norm_eps`` in the configs).
        rope: a [`RotaryEmbedding`][mha.rope.RotaryEmbedding]: the queries and the new keys are
            rotated by their positions before the keys enter the cache (self-attention only).
        window: sliding-window attention (Mistral): with ``is_causal``, each query sees only the
            ``window`` latest positions, itself included; a cache then keeps only the
            ``window - 1`` latest positions after each call.

    Raises:
        TypeError: a size is not an ``int``, ``dropout`` not a number, ``bias`` neither a
            ``bool`` nor a tuple of names, ``fast`` or ``qk_norm`` not a ``bool``, ``rope`` not a
            ``RotaryEmbedding``.
        ValueError: a size is not positive, ``hidden_size`` is not divisible by ``heads_num``
            (without ``head_size``), ``heads_num`` not by ``kv_heads``, ``dropout`` is outside
            ``[0, 1)``, ``bias`` names another projection, ``scale`` or ``norm_eps`` is not
            positive, or ``rope`` rotates more dimensions than a head has.

    Examples:
        >>> model = MHA(hidden_size=20, heads_num=4, kv_heads=2)
        >>> model.W_k.weight.shape  # [kv_heads * head_size, hidden_size]
        torch.Size([10, 20])
        >>> MHA(hidden_size=20, heads_num=4, kv_heads=3)
        Traceback (most recent call last):
        ...
        ValueError: heads_num (4) must be divisible by kv_heads (3); 4 % 3 = 1

    中文:
        真实模型用到的多头注意力：掩码、交叉注意力、KV 缓存、分组查询注意力。

        从 ``head_size`` 起的参数是今天的开源模型（Llama、Qwen、Mistral）用到的选项，默认全部
        关闭，所以纯享版（以及原帖）的检查点照样能加载。

        参数:
            hidden_size: 隐藏层维度，即输入最后一维的大小。
            heads_num: 查询的头数，必须整除 ``hidden_size``。
            kv_heads: 键和值的头数（分组查询注意力），必须整除 ``heads_num``。默认 ``None``
                表示与 ``heads_num`` 相同；取 1 就是多查询注意力。
            dropout: 把一个注意力权重置零的概率，只在训练模式下生效。
            bias: 四个线性层是否带偏置，或者带偏置的那几个投影的名字组成的元组（Qwen2：
                ``("W_q", "W_k", "W_v")``）。
            fast: ``True`` 调用 ``torch.nn.functional.scaled_dot_product_attention``（融合算子）；
                ``False`` 按网站逐行走读里的写法把注意力逐步算出来。
            context_size: 交叉注意力中 ``context`` 的宽度，与 ``hidden_size`` 不同时给出（即
                ``nn.MultiheadAttention`` 的 ``kdim`` 和 ``vdim``）：``W_k`` 和 ``W_v`` 的输入是
                ``context_size`` 维，模块只能做交叉注意力。默认 ``None`` 表示 ``hidden_size``。
            head_size: 每个头的宽度，不等于 ``hidden_size // heads_num`` 时给出（Qwen3、Gemma）：
                各头拼接后是 ``heads_num * head_size`` 维，由 ``W_o`` 投影回 ``hidden_size``。
                默认 ``None`` 表示 ``hidden_size // heads_num``，此时必须能整除。
            scale: 分数 ``q·k`` 要乘的系数；默认 ``None`` 表示 ``1 / sqrt(head_size)``。
            qk_norm: 在旋转之前，对查询和键的每个头各做一次 RMSNorm（Qwen3）：``q_norm`` 和
                ``k_norm``，各有 ``head_size`` 个权重。
            norm_eps: 这两个归一化的 ``eps``（配置里的 ``rms_norm_eps``）。
            rope: 一个 [`RotaryEmbedding`][mha.rope.RotaryEmbedding]：查询和新的键在键存进缓存
                之前按位置旋转（只用于自注意力）。
            window: 滑动窗口注意力（Mistral）：与 ``is_causal`` 一起使用时，每个查询只看最近的
                ``window`` 个位置（包括它自己）；缓存在每次调用之后也只保留最近的 ``window - 1``
                个位置。

        引发:
            TypeError: 尺寸不是 ``int``，``dropout`` 不是数，``bias`` 既不是 ``bool`` 也不是名字
                组成的元组，``fast`` 或 ``qk_norm`` 不是 ``bool``，``rope`` 不是
                ``RotaryEmbedding``。
            ValueError: 尺寸不是正数，（没给 ``head_size`` 时）``hidden_size`` 不能被
                ``heads_num`` 整除，``heads_num`` 不能被 ``kv_heads`` 整除，``dropout`` 不在
                ``[0, 1)`` 之内，``bias`` 里有别的投影名，``scale`` 或 ``norm_eps`` 不是正数，
                或者 ``rope`` 要旋转的维度比一个头的还多。
    """

    def __init__(
        self,
        hidden_size: int,
        heads_num: int,
        *,
        kv_heads: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        fast: bool = True,
        context_size: int | None = None,
        head_size: int | None = None,
        scale: float | None = None,
        qk_norm: bool = False,
        norm_eps: float = 1e-6,
        rope: RotaryEmbedding | None = None,
        window: int | None = None,
    ):
        super().__init__()
        kv_heads = heads_num if kv_heads is None else kv_heads
        if head_size is None:
            check_sizes(hidden_size, heads_num)
            head_size = hidden_size // heads_num
        else:
            _check_length("hidden_size", hidden_size, positive=True)
            _check_length("heads_num", heads_num, positive=True)
            _check_length("head_size", head_size, positive=True)
        check_sizes(heads_num, kv_heads, names=("heads_num", "kv_heads"))
        _check_number("dropout", dropout)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout}")
        biased = _biased(bias)
        _check_flag("fast", fast)
        _check_flag("qk_norm", qk_norm)
        context_size = hidden_size if context_size is None else context_size
        _check_length("context_size", context_size, positive=True)
        for name, value in (("scale", scale), ("norm_eps", norm_eps)):
            if value is not None:
                _check_number(name, value, positive=True)
        if window is not None:
            _check_length("window", window, positive=True)
        if rope is not None and not isinstance(rope, RotaryEmbedding):
            raise TypeError(f"rope must be a mha.rope.RotaryEmbedding, got {type(rope).__name__}")
        if rope is not None and rope.rotary_dims > head_size:
            raise ValueError(
                f"rope.rotary_dims ({rope.rotary_dims}) must be at most head_size ({head_size})"
            )
        # 每个选项存为同名属性（Options 的字段），MHA.options 从这些属性读回
        # Each option is kept as the attribute of its name (a field of Options): MHA.options reads
        # them back
        self.hidden_size = hidden_size
        self.heads_num = heads_num
        self.kv_heads = kv_heads
        self.dropout = float(dropout)
        self.bias = tuple(name for name in PROJECTIONS if name in biased)
        self.fast = fast
        self.context_size = context_size
        self.head_size = head_size
        self.scale = None if scale is None else float(scale)
        self.qk_norm = qk_norm
        self.norm_eps = float(norm_eps)
        self.rope = rope
        self.window = window

        # 查询投影与纯享版相同；键和值只投影到 kv_heads 个头（分组查询注意力时少于 heads_num），
        # 输入是 context_size 维（默认就是 hidden_size）
        # The query projection is the pure version's; keys and values project to kv_heads heads
        # only (fewer than heads_num under grouped-query attention), from context_size inputs
        # (hidden_size unless given)
        self.W_q = nn.Linear(hidden_size, heads_num * head_size, bias="W_q" in biased)
        self.W_k = nn.Linear(context_size, kv_heads * head_size, bias="W_k" in biased)
        self.W_v = nn.Linear(context_size, kv_heads * head_size, bias="W_v" in biased)

        self.W_o = nn.Linear(heads_num * head_size, hidden_size, bias="W_o" in biased)
        # Qwen3：查询和键的每个头各有一个 RMSNorm（不用时为 None）
        # Qwen3: an RMSNorm for each head of the queries and of the keys (None when off)
        self.q_norm = RMSNorm(head_size, eps=norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(head_size, eps=norm_eps) if qk_norm else None

    @property
    def options(self) -> Options:
        """This module's [`Options`][mha.full.Options], resolved, read from its attributes.

        中文:
            这个模块的 [`Options`][mha.full.Options]（已确定下来），从它的属性读出。
        """
        return Options(**{f.name: getattr(self, f.name) for f in fields(Options)})

    @classmethod
    def from_options(cls, options: Options) -> MHA:
        """A new module built from ``options``, its weights initialised as ``MHA(...)`` does.

        Args:
            options: the [`Options`][mha.full.Options].

        Returns:
            ``MHA(**vars(options))``.

        Raises:
            TypeError: ``options`` is not an ``Options``.

        中文:
            按 ``options`` 新建一个模块，权重的初始化与 ``MHA(...)`` 相同。

            参数:
                options: 一个 [`Options`][mha.full.Options]。

            返回:
                ``MHA(**vars(options))``。

            引发:
                TypeError: ``options`` 不是 ``Options``。
        """
        if not isinstance(options, Options):
            raise TypeError(f"options must be a mha.full.Options, got {type(options).__name__}")
        return cls(**{f.name: getattr(options, f.name) for f in fields(options)})

    def extra_repr(self) -> str:
        """What ``print`` shows between the parentheses: the options that are not the default.

        Returns:
            ``hidden_size, heads_num`` and each changed option as ``name=value``.

        中文:
            ``print`` 在括号里显示的内容：不是默认值的那些选项。

            返回:
                ``hidden_size, heads_num``，以及每个改过的选项，写成 ``name=value``。
        """
        # The rope is a submodule: print shows it on a line of its own
        return ", ".join(
            [f"{self.hidden_size}, {self.heads_num}"]
            + [f"{n}={getattr(self, n)!r}" for n in self.options.changed() if n != "rope"]
        )

    # --8<-- [start:forward]
    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        cache: KVCache | None = None,
        need_weights: bool = False,
        positions: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Let each position of ``x`` attend to the positions of ``x`` (or of ``context``).

        Args:
            x: the queries' input, ``[batch_size, q_len, hidden_size]``.
            context: for cross-attention, the keys' and values' input,
                ``[batch_size, src_len, context_size]`` (``context_size`` is ``hidden_size``
                unless given); ``None`` for self-attention.
            attn_mask: boolean (``True`` = may attend, as in
                ``scaled_dot_product_attention``; the opposite of ``nn.MultiheadAttention``) or
                floating point (added to the scores), broadcastable to
                ``[batch_size, heads_num, q_len, k_len]``, on the input's device; its last
                dimension covers every position the cache has seen and this call's, or, under a
                sliding window, only those the cache holds and this call's (as transformers
                passes it).
            is_causal: apply [`causal_mask`][mha.full.causal_mask] (lower-right aligned), on top of
                ``attn_mask`` if both are given.
            cache: a [`KVCache`][mha.full.KVCache] to extend with this call's keys and values and
                attend over in full. With ``context``, the first call fills it with the
                context's keys and values and later calls read them instead of projecting the
                context again. A cache belongs to the first module that uses it.
            need_weights: also return the attention weights (computed by the written-out path).
            positions: with ``rope``, the positions of ``x``'s rows: ``[q_len]`` (or
                ``[1, q_len]``, transformers' default ``position_ids``), or
                ``[batch_size, q_len]`` when each row has its own (a left-padded batch). ``None``
                (the default) means ``len(cache) + arange(q_len)``: the positions right after
                those in the cache (``0 .. q_len - 1`` without one).

        Returns:
            ``[batch_size, q_len, hidden_size]``; with ``need_weights``, also the weights
                ``[batch_size, heads_num, q_len, k_len]`` (after dropout, as applied). A query
                whose keys are all masked (all ``False``, or all ``-inf`` in a float mask; a finite
                value, however negative, is added to the scores in every dtype) gets a zero
                attention output, so its output is ``W_o``'s bias.

        Raises:
            TypeError: an input, the mask, the cache or ``positions`` has the wrong type or dtype.
            ValueError: an input, the mask or ``positions`` has the wrong shape or device;
                ``cache`` belongs to another module, holds self-attention's keys when given
                ``context`` (or the reverse), or holds a context of another batch size or length;
                ``positions`` without ``rope``, ``context`` with it, or a ``window`` without
                ``is_causal``.

        Examples:
            >>> model = MHA(20, 4)
            >>> x = torch.randn(2, 3, 20)
            >>> out, weights = model(x, torch.randn(2, 7, 20), need_weights=True)
            >>> out.shape, weights.shape
            (torch.Size([2, 3, 20]), torch.Size([2, 4, 3, 7]))

        中文:
            让 ``x`` 的每个位置关注 ``x``（或 ``context``）的各个位置。

            参数:
                x: 查询的输入，``[batch_size, q_len, hidden_size]``。
                context: 交叉注意力时键和值的输入，``[batch_size, src_len, context_size]``
                    （不给 ``context_size`` 时就是 ``hidden_size``）；自注意力时为 ``None``。
                attn_mask: 布尔掩码（``True`` 表示可以关注，与 ``scaled_dot_product_attention``
                    相同，与 ``nn.MultiheadAttention`` 相反）或浮点掩码（加到注意力分数上），
                    能广播到 ``[batch_size, heads_num, q_len, k_len]``，与输入在同一设备上；最后一维
                    覆盖缓存见过的所有位置和这次的位置，有滑动窗口时也可以只覆盖缓存留着的位置和
                    这次的位置（transformers 就是这样传的）。
                is_causal: 加上右下对齐的 [`causal_mask`][mha.full.causal_mask]；与
                    ``attn_mask`` 同时给出时两者都生效。
                cache: 一个 [`KVCache`][mha.full.KVCache]：把这次算出的键和值追加进去，再对其中
                    全部的键和值做注意力。同时给了 ``context`` 时，第一次调用把上下文的键和值存进
                    缓存，之后的调用直接读取，不再投影上下文。缓存属于第一个使用它的模块。
                need_weights: 同时返回注意力权重（由逐步计算的路径算出）。
                positions: 有 ``rope`` 时，``x`` 各行的位置：``[q_len]``（或者 ``[1, q_len]``，即
                    transformers 默认的 ``position_ids``）；每一行各有各的位置时
                    （左填充的一批）是 ``[batch_size, q_len]``。默认 ``None`` 表示
                    ``len(cache) + arange(q_len)``：紧接在缓存里已有的位置之后（没有缓存时就是
                    ``0 .. q_len - 1``）。

            返回:
                ``[batch_size, q_len, hidden_size]``；``need_weights`` 为真时再返回注意力权重
                    ``[batch_size, heads_num, q_len, k_len]``（训练时为 dropout 之后实际用到的
                    权重）。某个查询的键全被屏蔽时（布尔掩码全为 ``False``，或浮点掩码全为
                    ``-inf``；有限的值再小，在任何 dtype 下也只是加到分数上），它的注意力输出为零，
                    模块在这里的输出就是 ``W_o`` 的偏置。

            引发:
                TypeError: 输入、掩码、缓存或 ``positions`` 的类型或 dtype 不对。
                ValueError: 输入、掩码或 ``positions`` 的形状、设备不对；``cache`` 属于另一个模块，
                    给了 ``context`` 却存着自注意力的键（或者反过来），或者存的上下文批大小、长度
                    与这次不同；没有 ``rope`` 却给了 ``positions``，有 ``rope`` 却给了
                    ``context``，或者有 ``window`` 却没有 ``is_causal``。
        """
        # 检查输入；交叉注意力时，键和值来自 context，否则来自 x 本身
        # Check the inputs; keys and values come from context for cross-attention, else from x
        check_input(x, self.hidden_size, self.W_q.weight)
        source = x if context is None else self._check_context(context, x)  # [batch_size, src_len, context_size]
        if context is None and self.context_size != self.hidden_size:
            raise ValueError(
                f"this MHA takes a context of width context_size ({self.context_size}) for its "
                f"keys and values: pass context=, [batch_size, src_len, {self.context_size}]"
            )
        _check_flag("is_causal", is_causal)
        _check_flag("need_weights", need_weights)
        self._check_options(context, is_causal, positions, x)
        reuse = self._check_cache(cache, context, x)  # the cache holds the context's keys and values
        held = 0 if cache is None else len(cache)
        if attn_mask is not None:
            # Checked before anything changes, so a bad mask leaves the cache as it was. Under a
            # sliding window it may also cover only the keys the cache holds (transformers' form).
            k_len = source.size(1) + (0 if cache is None or context is not None else held)
            dropped = 0 if cache is None or context is not None else cache._dropped
            _check_mask(
                attn_mask, (x.size(0), self.heads_num, x.size(1), k_len), x.device, k_len - dropped
            )

        # 投影查询，按头拆分，再把头换到第 1 维：保持四维，融合算子要的就是这种布局
        # Project the queries, split them into heads and move the heads to dim 1: kept 4-D, the
        # layout the fused kernels take
        q = self.W_q(x)  # [batch_size, q_len, heads_num * head_size]
        q = q.view(q.size(0), q.size(1), self.heads_num, self.head_size).transpose(1, 2)  # [batch_size, heads_num, q_len, head_size]
        if self.q_norm is not None:
            q = self.q_norm(q)  # [batch_size, heads_num, q_len, head_size]

        if not reuse:
            # 键和值同样投影、拆分，但只有 kv_heads 个头（交叉注意力的缓存里已有上下文的键和值时不必再算）
            # The keys and values likewise, with kv_heads heads (not again when a cross-attention
            # cache holds the context's keys and values already)
            k = self.W_k(source)  # [batch_size, src_len, kv_heads * head_size]
            v = self.W_v(source)  # [batch_size, src_len, kv_heads * head_size]
            k = k.view(k.size(0), k.size(1), self.kv_heads, self.head_size).transpose(1, 2)  # [batch_size, kv_heads, src_len, head_size]
            v = v.view(v.size(0), v.size(1), self.kv_heads, self.head_size).transpose(1, 2)  # [batch_size, kv_heads, src_len, head_size]
            if self.k_norm is not None:
                k = self.k_norm(k)  # [batch_size, kv_heads, src_len, head_size]

        if self.rope is not None:
            # 旋转位置编码：查询和新的键按各自的位置旋转，键在存进缓存之前就转好
            # Rotary embeddings: the queries and the new keys turn by their positions, the keys
            # before they enter the cache
            if positions is None:
                positions = torch.arange(held, held + x.size(1), device=x.device)  # [q_len]
            turns = self.rope(positions)  # cos and sin of the angles, each [..., q_len, rotary_dims]
            q = self.rope.rotate(q, *turns)  # [batch_size, heads_num, q_len, head_size]
            k = self.rope.rotate(k, *turns)  # [batch_size, kv_heads, q_len, head_size]

        if cache is not None:
            # 有缓存时：把新的键和值接在缓存后面（上下文的键和值只在第一次调用时存入），对全部键和值做注意力。
            # 自动混合精度下 RMSNorm 返回 float32（k_norm 之后的键），值却是低精度：存进缓存的键换成
            # 值的 dtype，正是注意力算子在 autocast 下本来就会做的转换
            # With a cache: append the new keys and values (a context's at the first call only),
            # then attend over all of them. Under autocast an RMSNorm returns float32 (the keys
            # after k_norm) while the values are in the lower precision: the cached keys take the
            # values' dtype, the very cast the attention kernel makes under autocast anyway
            if context is None and self.window is not None and cache._over_max_len(k.size(2)):
                # 滑动窗口的一次调用可以比 max_len 长（一段长提示）：缓存只写入之后要留下的位置，
                # 注意力用缓存原有的键、值接上这次新算的
                # A sliding window's call may bring more than max_len positions (a long prompt):
                # the cache writes only those it keeps after the call, and attention takes what it
                # held followed by the new keys and values
                held_keys = cache.keys  # [batch_size, kv_heads, held, head_size]
                held_values = cache.values  # [batch_size, kv_heads, held, head_size]
                cache._append_windowed(k.to(v.dtype), v, self.window - 1)
                if held_keys is not None:
                    k = torch.cat([held_keys, k.to(v.dtype)], dim=2)  # [batch_size, kv_heads, k_len, head_size]
                    v = torch.cat([held_values, v], dim=2)  # [batch_size, kv_heads, k_len, head_size]
            else:
                if not reuse:
                    cache.append(k.to(v.dtype), v, queries=q)
                k = cache.keys  # [batch_size, kv_heads, k_len, head_size]
                v = cache.values  # [batch_size, kv_heads, k_len, head_size]
            if attn_mask is not None and attn_mask.size(-1) > k.size(2):
                # 滑动窗口的缓存丢掉了最早的位置：掩码也只留最后 k_len 列
                # A sliding window's cache dropped the oldest positions: so does the mask
                attn_mask = attn_mask[..., -k.size(2) :]  # [..., k_len]

        try:
            if self.fast and not need_weights:
                # 快速路径：融合算子；一个键都看不到的查询，算子自己给出零输出
                # Fast path: a fused kernel, which itself gives a zero output to a query with no key
                out = self._attend_fast(q, k, v, attn_mask, is_causal)  # [batch_size, heads_num, q_len, head_size]
                weights = None
            else:
                # 逐步计算：先得到注意力权重，再对值加权求和（权重为零的行，输出也为零）
                # Written out: the attention weights, then the weighted sum of the values (a row of
                # zero weights gives a zero output)
                mask = self._mask(attn_mask, is_causal, q, k)  # [..., k_len]
                weights = self._weights(q, k, mask)  # [batch_size, heads_num, q_len, k_len]
                out = torch.matmul(weights, self._repeat_kv(v))  # [batch_size, heads_num, q_len, head_size]
        except BaseException:
            # 注意力没有算完（比如内存不足）：缓存退回这次调用之前的长度
            # Attention did not finish (out of memory, say): the cache goes back to its length
            # before this call
            if cache is not None:
                cache.crop(held)
            raise
        if cache is not None and self.window is not None:
            # 滑动窗口：下一次调用的查询看不到更早的位置，缓存只留最近的 window - 1 个
            # Sliding window: the next call's queries see nothing older, so the cache keeps the
            # window - 1 latest positions
            cache._keep_last(self.window - 1)

        # 拼接各头（与纯享版相同），再做输出投影
        # Concatenate the heads (as in the pure version), then the output projection
        out = out.transpose(1, 2).contiguous().view(out.size(0), out.size(2), self.heads_num * self.head_size)  # [batch_size, q_len, heads_num * head_size]
        out = self.W_o(out)  # [batch_size, q_len, hidden_size]
        if need_weights:
            return out, weights
        return out

    # --8<-- [end:forward]

    # --8<-- [start:math]
    def _repeat_kv(self, t: Tensor) -> Tensor:
        """``[batch, kv_heads, len, head_size]`` -> ``[batch, heads_num, len, head_size]``: each
        key/value head serves ``heads_num // kv_heads`` query heads in a row.

        中文:
            ``[batch, kv_heads, len, head_size]`` 变成 ``[batch, heads_num, len, head_size]``：
            每个键/值头依次服务相邻的 ``heads_num // kv_heads`` 个查询头。
        """
        groups = self.heads_num // self.kv_heads
        return t if groups == 1 else t.repeat_interleave(groups, dim=1)

    def _weights(self, q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
        """The attention weights, written out: scores, scale, mask, softmax, dropout. A query
        whose keys are all masked (``False``, or ``-inf`` in a float mask) gets a row of zeros.

        中文:
            逐步算出注意力权重：分数、缩放、掩码、softmax、dropout。键全被屏蔽（布尔掩码全为
            ``False``，或浮点掩码全为 ``-inf``）的查询，权重整行为零。
        """
        # 每个查询头与它那一组的键头做点积，再乘 scale（默认 1/sqrt(head_size)）；至少在 float32 里算
        # （半精度下点积可能超过 65504），掩码和 softmax 也是
        # Each query head against the key head of its group, times scale (1/sqrt(head_size) unless
        # given), in at least float32 (in half precision a dot product can exceed 65504), as are
        # the mask and the softmax
        dtype = torch.promote_types(q.dtype, torch.float32)
        k = self._repeat_kv(k).to(dtype)  # [batch_size, heads_num, k_len, head_size]
        if self.scale is None:
            qk = torch.matmul(q.to(dtype), k.transpose(-2, -1)) / math.sqrt(self.head_size)  # [batch_size, heads_num, q_len, k_len]
        else:
            qk = torch.matmul(q.to(dtype), k.transpose(-2, -1)) * self.scale  # [batch_size, heads_num, q_len, k_len]
        keeps = None
        if mask is not None:
            if mask.dtype == torch.bool:
                # 布尔掩码：False 的位置分数设为 -inf，softmax 之后权重为 0
                # Boolean mask: scores where it is False become -inf, weight 0 after softmax
                allowed = mask  # [..., k_len]
                qk = qk.masked_fill(~mask, float("-inf"))  # [batch_size, heads_num, q_len, k_len]
            else:
                # 浮点掩码：加到分数上；只有 -inf 才把一个键完全屏蔽
                # Float mask: added to the scores; only -inf masks a key completely
                allowed = mask != float("-inf")  # [..., k_len]
                qk = qk + mask  # [batch_size, heads_num, q_len, k_len]
            # keeps 标出至少还能看到一个键的查询；其余的查询 softmax 会得到 0/0 = NaN：
            # 先把这样一行的分数全设为 0，softmax 之后再把整行权重置零
            # keeps marks the queries that still see a key; for the others softmax would give
            # 0/0 = NaN: set such a row's scores to 0 first, then zero its weights after softmax
            keeps = allowed.any(dim=-1, keepdim=True)  # [..., 1]
            qk = qk.masked_fill(~keeps, 0.0)  # [batch_size, heads_num, q_len, k_len]
        attn = torch.softmax(qk, dim=-1).to(q.dtype)  # [batch_size, heads_num, q_len, k_len]
        if keeps is not None:
            attn = attn.masked_fill(~keeps, 0.0)  # [batch_size, heads_num, q_len, k_len]
        # dropout 只在训练模式下把一部分权重置零（其余的放大 1/(1-p)）
        # Dropout zeroes some weights in training mode only (and scales the rest by 1/(1-p))
        attn = F.dropout(attn, p=self.dropout, training=self.training)  # [batch_size, heads_num, q_len, k_len]
        return attn

    # --8<-- [end:math]

    # --8<-- [start:fast]
    def _attend_fast(
        self, q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, is_causal: bool
    ) -> Tensor:
        """``scaled_dot_product_attention`` on the 4-D q, k, v (the fused kernels' layout), with
        the mask as the caller gave it: a ``[batch_size, 1, 1, k_len]`` padding mask is not
        expanded to ``[..., q_len, k_len]``.

        中文:
            对四维的 q、k、v 调用 ``scaled_dot_product_attention``（融合算子要的布局），掩码按调用者
            给的形状传进去：``[batch_size, 1, 1, k_len]`` 的填充掩码不会扩展成 ``[..., q_len, k_len]``。
        """
        q_len, k_len = q.size(2), k.size(2)
        options = dict(dropout_p=self.dropout if self.training else 0.0, scale=self.scale)
        options["enable_gqa"] = self.kv_heads != self.heads_num
        # 只有因果掩码（没有滑动窗口，或者窗口盖住了所有键）时，可以不构造掩码张量
        # Causal alone (no sliding window, or one that covers every key) needs no mask tensor
        causal_alone = is_causal and attn_mask is None and (self.window or k_len) >= k_len
        if causal_alone and q_len == 1:
            # 只有一个（最新的）查询：它能看到所有键，不需要掩码
            # A single (newest) query sees every key and needs no mask
            return F.scaled_dot_product_attention(q, k, v, **options)
        if causal_alone and q_len == k_len:
            # 方阵：由算子自己实现同一个下三角，不必构造掩码张量，还能跳过被屏蔽的块
            # A square matrix: the kernel's own is_causal is the same triangle, with no mask
            # tensor built, and it can skip the masked blocks
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, **options)
        # 其余情况：掩码不扩展，原样交给算子（torch 2.5 起，一个键都看不到的查询由算子给出零输出）
        # Otherwise the mask goes to the kernel unexpanded (since torch 2.5 the kernel gives a
        # zero output to a query that sees no key)
        mask = self._mask(attn_mask, is_causal, q, k)  # [..., k_len]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **options)

    # --8<-- [end:fast]

    def _mask(
        self, attn_mask: Tensor | None, is_causal: bool, q: Tensor, k: Tensor
    ) -> Tensor | None:
        """``attn_mask`` (already checked) combined with the causal mask, not expanded beyond
        what the two need; a float mask in ``q``'s dtype (under autocast the lower precision)."""
        q_len, k_len = q.size(2), k.size(2)
        if attn_mask is not None:
            # 最后一维广播成 k_len（expand 只是视图，不复制数据）；其余维度保持调用者给的大小
            # The last dim broadcast to k_len (expand makes a view: no copy); the others stay as given
            leading = attn_mask.shape[:-1] if attn_mask.dim() > 1 else (1,)  # the kernel takes 2-D and up
            attn_mask = attn_mask.expand(*leading, k_len)  # [..., k_len]
            if attn_mask.dtype != torch.bool:
                # 浮点掩码换成 q 的 dtype：有限值截到它的范围之内（不会变成 -inf），-inf 保持不变
                # A float mask in q's dtype: finite values clamped to its range (never -inf)
                attn_mask = _float_mask_as(attn_mask, q.dtype)  # [..., k_len]
        if not is_causal:
            return attn_mask
        causal = causal_mask(q_len, k_len, device=q.device, window=self.window)  # [q_len, k_len]
        return _and_causal(attn_mask, causal)

    def _check_options(
        self, context: Tensor | None, is_causal: bool, positions: Tensor | None, x: Tensor
    ) -> None:
        """The options of today's models, against this call's arguments."""
        if self.window is not None and not is_causal:
            raise ValueError(
                f"this MHA has a sliding window (window={self.window}), which applies to causal "
                "attention: pass is_causal=True"
            )
        if self.rope is not None and context is not None:
            raise ValueError(
                "this MHA has rotary embeddings (rope), which rotate self-attention's queries and "
                "keys by their positions: context= (cross-attention) has no such positions"
            )
        if positions is None:
            return
        if self.rope is None:
            raise ValueError("positions are what rope rotates by, and this MHA has no rope")
        _check_positions(positions, x)

    def _check_context(self, context: Tensor, x: Tensor) -> Tensor:
        named = "hidden_size" if self.context_size == self.hidden_size else "context_size"
        check_input(context, self.context_size, self.W_k.weight, name="context", size_name=named)
        if context.size(0) != x.size(0):
            raise ValueError(
                f"context.shape[0] must equal x.shape[0] ({x.size(0)}), got {context.size(0)}"
            )
        return context

    def _check_cache(self, cache: KVCache | None, context: Tensor | None, x: Tensor) -> bool:
        """Check ``cache`` and make it this module's; whether it holds the context's keys and
        values already (cross-attention after the first call)."""
        if cache is None:
            return False
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a mha.full.KVCache, got {type(cache).__name__}")
        cache._claim(self, "x" if context is None else "context")
        if context is None or not len(cache):
            return False
        if context.size(1) != len(cache) or cache.keys.size(0) != x.size(0):
            raise ValueError(
                f"cache holds the keys and values of a context [batch_size, src_len] = "
                f"{[cache.keys.size(0), len(cache)]}, this call's context is "
                f"{[context.size(0), context.size(1)]}: reset() the cache for a new context"
            )
        return True


def _check_positions(positions: object, x: Tensor) -> None:
    """``positions`` checked against ``x``: ``[q_len]``, ``[batch_size, q_len]``, or ``[1, q_len]``
    (transformers' default ``position_ids``, the same for every row: it broadcasts)."""
    _check_integer_tensor("positions", positions)
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


def _check_mask(
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
        try:
            if tuple(torch.broadcast_shapes(mask.shape, allowed)) == allowed:
                return
        except RuntimeError:
            pass
    said = f"[batch_size, heads_num, q_len, k_len] = {list(target)}"
    if len(targets) > 1:
        said += (
            f" (k_len: every position the cache has seen and this call's), or {list(targets[1])}"
            " (the keys the sliding window's cache holds and this call's)"
        )
    raise ValueError(f"attn_mask of shape {list(mask.shape)} must broadcast to {said}")


def _and_causal(attn_mask: Tensor | None, causal: Tensor) -> Tensor:
    """A query sees a key when both ``attn_mask`` (boolean, or float: added) and ``causal`` let it."""
    if attn_mask is None:
        return causal
    if attn_mask.dtype == torch.bool:
        return attn_mask & causal
    return attn_mask.masked_fill(~causal, float("-inf"))


def _float_mask_as(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """``mask`` in ``dtype``, its finite values clamped to ``dtype``'s finite range: a finite
    value (``finfo(float32).min``, ``-1e9``) stays a finite score in every dtype, and only
    ``-inf`` masks a key."""
    if mask.dtype == dtype:
        return mask
    info = torch.finfo(dtype)
    return torch.where(mask.isinf(), mask, mask.clamp(info.min, info.max)).to(dtype)


class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the last dimension, with a weight per dimension.

    ``x / sqrt(mean(x²) + eps) * weight``; Qwen3 applies one to each head of the queries and of
    the keys (``MHA(qk_norm=True)``). The statistics are computed in float32 and the result cast
    back to the input's dtype before the weight multiplies it, as Qwen3's reference code does,
    whatever the input's dtype (float64 included), so a converted model gives the same numbers.

    Args:
        size: the last dimension's size (``head_size`` in ``MHA``).
        eps: added to the mean square, so that a zero vector stays finite.

    Examples:
        >>> norm = RMSNorm(2)
        >>> norm(torch.tensor([3.0, 4.0]))  # root mean square 3.5355
        tensor([0.8485, 1.1314], grad_fn=<MulBackward0>)

    中文:
        对最后一维做均方根归一化，每一维各有一个权重。

        ``x / sqrt(mean(x²) + eps) * weight``；Qwen3 对查询和键的每个头各做一次
        （``MHA(qk_norm=True)``）。统计量在 float32 里算，乘权重之前把结果转回输入的 dtype，与 Qwen3
        的参考实现相同，无论输入是什么 dtype（float64 也一样），所以转换来的模型算出同样的数。

        参数:
            size: 最后一维的大小（在 ``MHA`` 里是 ``head_size``）。
            eps: 加到均方上的小数，让全零向量也不会除以零。
    """

    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        _check_length("size", size, positive=True)
        _check_number("eps", eps, positive=True)
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = float(eps)

    def extra_repr(self) -> str:
        """What ``print`` shows between the parentheses.

        Returns:
            The size and ``eps``, as ``RMSNorm(5, eps=1e-06)`` prints them.

        中文:
            ``print`` 在括号里显示的内容。

            返回:
                尺寸和 ``eps``，打印出来就是 ``RMSNorm(5, eps=1e-06)``。
        """
        return f"{self.weight.size(0)}, eps={self.eps}"

    def forward(self, x: Tensor) -> Tensor:
        """``x`` normalised over its last dimension, then scaled by the weight.

        Args:
            x: ``[..., size]``.

        Returns:
            ``[..., size]``, in ``x``'s dtype (or the weight's, if wider).

        中文:
            ``x`` 在最后一维上归一化，再乘权重。

            参数:
                x: 形状为 ``[..., size]`` 的张量。

            返回:
                ``[..., size]``，dtype 与 ``x`` 相同（权重的 dtype 更宽时取权重的）。
        """
        wide = x.float()
        wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * wide.to(x.dtype)


# --8<-- [end:class]
