"""The KV cache: the keys and values of earlier steps, for generation.

[`KVCache`][mha.cache.KVCache] holds one attention layer's keys and values (or, in
[`MLA`][mha.mla.MLA]'s [`LatentCache`][mha.mla.LatentCache], its latents); a
[`ModelCache`][mha.cache.ModelCache] holds one per layer and crops, reorders and resets them
together. An attention module writes a cache through four public methods: ``claim`` (the cache
becomes this module's, filled from ``x`` or a context), ``append``, and under a sliding window
``overflows`` / ``append_windowed`` (a call longer than ``max_len``) and ``keep_last`` (hold only
the latest positions). [`mha.full`][mha.full] re-exports both classes.

Examples:
    >>> from mha.cache import KVCache
    >>> cache = KVCache()
    >>> cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    >>> len(cache), cache.keys.shape  # [batch_size, kv_heads, len, head_size]
    (3, torch.Size([1, 2, 3, 4]))
"""

# Why this file stays whole (950 lines): KVCache's growing and static buffers and ModelCache share
# one write, crop and reorder logic; the cache page teaches them together.

from __future__ import annotations

import contextlib
import weakref

import torch
import torch.nn as nn
from torch import Tensor

from mha.checks import check_flag, check_length, check_range, check_vector

__all__ = ["KVCache", "ModelCache"]


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
    [`ModelCache`][mha.cache.ModelCache] holds one per layer). With ``context=`` (cross-attention)
    the first call fills it with the context's keys and values and later calls read them.

    ``torch.save`` stores the keys, values and length (not the module it belongs to), and
    ``torch.load`` reads it back with its default ``weights_only=True``: importing ``mha.cache``
    (or ``mha.full``) adds ``KVCache`` and ``ModelCache`` to PyTorch's safe globals.

    Args:
        max_len: ``None`` (the default): buffers that grow as needed. An ``int``: the most
            positions the cache will hold, allocated at the first append, so its tensors never
            change shape (a compiled decoding step is not recompiled as the cache grows); an
            append beyond it is an error. Under a sliding window it bounds what the cache keeps
            between calls (``window - 1 + rollback``), not the length of one call's input.
        rollback: under a sliding window (``MHA(window=...)``), how many positions the cache
            keeps beyond the ``window - 1`` the next call needs, so that ``crop`` can take back
            that many (speculative decoding rejects a draft's last tokens); 0 by default.
        static: ``False`` (the default): each call attends over the positions held, so the key
            length grows by one a step. ``True`` (needs ``max_len``): a static cache. Each call
            writes its keys and values at their positions in the ``max_len`` buffer and attends
            over the whole buffer, with a mask of the positions held (and of the causal order and
            window): every decoding step has the same shapes, and the number of positions held is
            a tensor on the buffer's device, never a Python number, so one compiled step
            (``torch.compile(fullgraph=True, dynamic=False)``) serves every step and CUDA graphs
            can capture it. It never drops positions (a sliding window masks them instead) and
            holds self-attention only. ``torch.save`` writes the positions held, not ``max_len``.

    Attributes:
        keys: ``[batch_size, kv_heads, len, head_size]`` (``len`` is ``len(cache)``), a view of
            the positions held in the buffer; ``None`` before the first append. A static
            cache's: its whole buffer, ``[batch_size, kv_heads, max_len, head_size]``, what the
            attention reads (the first ``len`` positions are those held).
        values: the same shape as ``keys``; ``None`` before the first append.
        max_len: as given.
        rollback: as given.
        static: as given.

    Raises:
        TypeError: ``max_len`` is not an ``int`` or ``None``, ``rollback`` not an ``int``, or
            ``static`` not a ``bool``.
        ValueError: ``max_len`` is not positive, ``rollback`` is negative, or ``static=True``
            without ``max_len`` or with ``rollback``.

    Examples:
        >>> cache = KVCache()
        >>> len(cache), cache.keys
        (0, None)
        >>> cache.append(torch.zeros(1, 2, 5, 3), torch.zeros(1, 2, 5, 3))
        >>> # 保留位置 0–3，比如要重新生成位置 4
        >>> cache.crop(4)  # keep positions 0-3, say to generate position 4 again
        >>> cache
        KVCache(len=4, capacity=5, batch_size=1, kv_heads=2, head_size=3, dtype=torch.float32, device=cpu)
        >>> # 一个提示变成三束
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

        缓存属于第一个往里写的模块：一个注意力层，一个缓存（[`ModelCache`][mha.cache.ModelCache]
        为每一层各备一个）。传入 ``context=``（交叉注意力）时，第一次调用用上下文的键和值填满缓存，
        之后的调用直接读取。

        ``torch.save`` 保存键、值和长度（不保存缓存属于哪个模块），``torch.load`` 用默认的
        ``weights_only=True`` 就能读回：导入 ``mha.cache``（或 ``mha.full``）时，``KVCache`` 和
        ``ModelCache`` 已加入 PyTorch 的安全全局对象列表。

        参数：
            max_len: ``None``（默认）：缓冲区按需增长。一个 ``int``：缓存最多存放的位置数，第一次
                追加时一次分配，之后张量的形状不再变化（编译过的解码步骤不会因缓存变长而重新编译）；
                超出它的追加会报错。有滑动窗口时，它限制的是两次调用之间缓存留下的位置数
                （``window - 1 + rollback``），而不是一次调用的输入长度。
            rollback: 有滑动窗口（``MHA(window=...)``）时，除了下一次调用要用的 ``window - 1`` 个
                位置，缓存再多留多少个，好让 ``crop`` 能退回这么多个位置（投机解码会丢掉草稿最后
                几个位置）；默认为 0。
            static: 默认 ``False``：每次调用对缓存里留着的位置做注意力，键的长度每步加一。
                ``True``（必须给 ``max_len``）：静态缓存。每次调用把键和值写进 ``max_len`` 长的
                缓冲区里各自的位置，再对整个缓冲区做注意力，用掩码屏蔽没写过的位置（以及因果顺序
                和窗口之外的位置）：每一步解码的形状都一样，已存的位置数是缓冲区所在设备上的张量，
                从不是 Python 数，所以编译一次的解码步骤（``torch.compile(fullgraph=True,
                dynamic=False)``）服务每一步，CUDA Graphs 也能捕获它。它从不丢弃位置（滑动窗口
                改用掩码屏蔽），只存自注意力的键和值。``torch.save`` 只写已存的位置，不写满
                ``max_len``。

        属性：
            keys: ``[batch_size, kv_heads, len, head_size]``（``len`` 即 ``len(cache)``），缓冲区里
                留着的那些位置的视图；第一次追加之前是 ``None``。静态缓存的 ``keys`` 是整个缓冲区
                ``[batch_size, kv_heads, max_len, head_size]``，也就是注意力读取的全部（前 ``len``
                个位置是存着的）。
            values: 形状与 ``keys`` 相同；第一次追加之前是 ``None``。
            max_len: 创建时给的值。
            rollback: 创建时给的值。
            static: 创建时给的值。

        异常：
            TypeError: ``max_len`` 既不是 ``int`` 也不是 ``None``，``rollback`` 不是 ``int``，
                或者 ``static`` 不是 ``bool``。
            ValueError: ``max_len`` 不是正数，``rollback`` 是负数，或者 ``static=True`` 却没给
                ``max_len``、或同时给了 ``rollback``。
    """

    rollback = 0  # the defaults, for a cache saved before there was one
    static = False

    def __init__(
        self, max_len: int | None = None, *, rollback: int = 0, static: bool = False
    ) -> None:
        if max_len is not None:
            check_length("max_len", max_len, positive=True)
        check_length("rollback", rollback)
        check_flag("static", static)
        if static and max_len is None:
            raise ValueError(
                "static=True needs max_len: a static cache attends over a buffer of max_len "
                "positions at every step, got max_len=None"
            )
        if static and rollback:
            raise ValueError(
                f"a static cache never drops a position, so there is nothing to roll back: "
                f"rollback must be 0 with static=True, got {rollback}"
            )
        self.max_len = max_len
        self.rollback = rollback
        self.static = static
        # A static cache counts the positions it holds in a tensor (on the buffers' device from
        # the first append on), so that a compiled step reads no Python number that changes
        self._length = torch.zeros((), dtype=torch.long) if static else None
        self._keys: Tensor | None = None  # [batch_size, kv_heads, capacity, head_size]
        self._values: Tensor | None = None  # [batch_size, kv_heads, capacity, head_size]
        self._len = 0  # positions appended, held or not
        # A sliding window (MHA(window=...)) drops the oldest positions: the buffer holds
        # positions _dropped .. _len - 1, from index _offset on; _kept is what the window keeps.
        self._dropped = self._offset = 0
        self._kept: int | None = None
        self._chunk: int | None = None  # chunked attention's chunk size (keep_chunk), else None
        self._owner: weakref.ref | None = None  # the module that fills it (set by MHA.forward)
        self._source: str | None = None  # what MHA.forward filled it from: "x" or "context"

    def __len__(self) -> int:
        return int(self._length) if self.static else self._len

    def __repr__(self) -> str:
        head = f"len={len(self)}" + ("" if self.max_len is None else f", max_len={self.max_len}")
        head += f", rollback={self.rollback}" if self.rollback else ""
        head += ", static=True" if self.static else ""
        if self._chunk is not None:
            head += f", held={self._len - self._dropped} (its chunk of {self._chunk} so far)"
        elif self._kept is not None:
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
            held = self._held()
            state["_keys"] = self._keys[:, :, held].clone()
            state["_values"] = self._values[:, :, held].clone()
        if self.static:
            state["_length"] = self._length.clone()
        return state

    def _held(self) -> slice:
        """Where the positions held lie in the buffer."""
        if self.static:
            return slice(0, len(self))
        return slice(self._offset, self._offset + self._len - self._dropped)

    @property
    def keys(self) -> Tensor | None:
        if self._keys is None or self.static:  # a static cache's keys are its whole buffer
            return self._keys
        return self._keys[:, :, self._held()]

    @property
    def values(self) -> Tensor | None:
        if self._values is None or self.static:
            return self._values
        return self._values[:, :, self._held()]

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

            参数：
                keys: 新的键。
                values: 新的值，形状、dtype 和设备都与 ``keys`` 相同。
                queries: 之后要对缓存做注意力的查询（如果有）。记录梯度且它们要求梯度时，注意力会
                    为反向传播保存缓存里的键，所以这时复制（``torch.cat``），不原地写入。

            异常：
                ValueError: ``values`` 的形状或设备与 ``keys`` 不同；批大小、``kv_heads``、
                    ``head_size``、设备与缓存里的不同；或者追加之后缓存会超过 ``max_len`` 个位置。
                TypeError: ``values`` 的 dtype 与 ``keys`` 不同，或者 dtype 与缓存里的不同。
        """
        if self.static:
            raise ValueError(
                "this cache is static: MHA.forward writes it by position (append_static); "
                "append is for a dynamic cache"
            )
        self._check(keys, values)
        held = self._len - self._dropped
        if self.max_len is not None and held + keys.size(2) > self.max_len:
            raise ValueError(
                f"cache holds at most max_len ({self.max_len}) positions; it holds {held} and "
                f"this call adds {keys.size(2)}: crop or reset it, or create it with a larger max_len"
            )
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
                # 缓冲区放不下（或是推理模式之外改不了的推理张量）：换一个新的（两倍长，或 max_len 长），
                # 只把留着的位置复制过去，放在开头（滑动窗口丢掉的开头位置一并腾出来）
                # The buffer is full (or an inference tensor, which cannot change outside
                # inference mode): take a new one (twice as long, or max_len long) and copy only
                # the positions held, to its front (freeing what a sliding window dropped)
                capacity = max(held + new_len, 2 * held) if self.max_len is None else self.max_len
                with _ordinary_tensors():
                    self._keys = _grown(self._keys, keys, self._offset, held, capacity)  # [batch_size, kv_heads, capacity, head_size]
                    self._values = _grown(self._values, values, self._offset, held, capacity)  # [batch_size, kv_heads, capacity, head_size]
                self._offset = 0
                start, end = held, held + new_len
            # 只写入新的位置：之前取出的 keys、values 视图不受影响
            # Write the new positions only: views of keys and values taken earlier stay unchanged
            self._keys[:, :, start:end] = keys
            self._values[:, :, start:end] = values
        self._len += new_len

    def next_positions(self, new: int, device: torch.device) -> Tensor:
        """The positions of a call's ``new`` rows, ``len(cache) .. len(cache) + new - 1``, as a
        tensor on ``device``: for a static cache computed from its length tensor, so that a
        compiled step reads no Python number.

        Args:
            new: how many positions the call brings.
            device: where the positions go (the input's device).

        Returns:
            An integer tensor ``[new]``.

        中文:
            一次调用的 ``new`` 行所在的位置，即 ``len(cache)``–``len(cache) + new - 1``，放在
            ``device`` 上的张量里：静态缓存从它的长度张量算出，编译过的步骤因此不读任何 Python 数。

            参数：
                new: 这次调用带来的位置数。
                device: 位置放在哪个设备上（输入所在的设备）。

            返回：
                形状为 ``[new]`` 的整数张量。
        """
        start = self._length.to(device) if self.static else len(self)
        return start + torch.arange(new, device=device)

    def append_static(
        self, keys: Tensor, values: Tensor, *, queries: Tensor | None = None
    ) -> None:
        """Write new keys and values at their positions in a static cache's buffer: at
        ``next_positions`` (before the call). The attention then reads the whole buffer
        (``keys``, ``values``) and masks out what it must not see (``mha.masks.held_mask``).

        Args:
            keys: the new keys, ``[batch_size, kv_heads, new_len, head_size]``.
            values: the new values, same shape, dtype and device as ``keys``.
            queries: as for ``append``: when gradients are recorded and they require grad, the
                buffer is written out of place (a new tensor), not in place.

        Raises:
            ValueError: the cache is not static, or (checked outside ``torch.compile`` and
                CUDA graph capture, where reading the length is allowed) would hold more than
                ``max_len`` positions; or as for ``append``.
            TypeError: as for ``append``.

        中文:
            把新的键和值写进静态缓存缓冲区里它们各自的位置，也就是（调用之前的）``next_positions``。
            之后注意力读取整个缓冲区（``keys``、``values``），用掩码挡住不该看到的部分
            （``mha.masks.held_mask``）。

            参数：
                keys: 新的键，``[batch_size, kv_heads, new_len, head_size]``。
                values: 新的值，形状、dtype 和设备都与 ``keys`` 相同。
                queries: 与 ``append`` 相同：记录梯度且它们要求梯度时，缓冲区不原地写入，而是写成
                    新张量。

            异常：
                ValueError: 缓存不是静态的，或者（在 ``torch.compile`` 和 CUDA graph 捕获之外检查：
                    那里才能读长度）写入之后会超过 ``max_len`` 个位置；其余与 ``append`` 相同。
                TypeError: 与 ``append`` 相同。
        """
        if not self.static:
            raise ValueError("append_static writes a static cache (KVCache(static=True)); use append")
        self._check(keys, values)
        new = keys.size(2)
        if _may_read_the_length() and len(self) + new > self.max_len:
            raise ValueError(
                f"cache holds at most max_len ({self.max_len}) positions; it holds {len(self)} "
                f"and this call adds {new}: crop or reset it, or create it with a larger max_len"
            )
        if self._keys is None or self._keys.size(2) < self.max_len or self._frozen():
            # 第一次写入（或刚从只存了已有位置的文件读回）：分配 max_len 长的缓冲区，只此一次
            # The first write (or just loaded from a save of the positions held): allocate the
            # max_len buffer, once
            held = 0 if self._keys is None else self._keys.size(2)
            with _ordinary_tensors():
                self._keys = _grown(self._keys, keys, 0, held, self.max_len, zeros=True)  # [batch_size, kv_heads, max_len, head_size]
                self._values = _grown(self._values, values, 0, held, self.max_len, zeros=True)  # [batch_size, kv_heads, max_len, head_size]
                self._length = self._length.to(keys.device)  # []
        at = self._length + torch.arange(new, device=keys.device)  # [new_len]
        if self._recorded(keys, values, queries):
            # 自动求导看得到缓存：写成新张量，反向传播要用的旧缓冲区保持不变
            # Autograd can see the cache: write into new tensors, leaving the old buffers (which
            # the backward pass may need) unchanged
            self._keys = self._keys.index_copy(2, at, keys)  # [batch_size, kv_heads, max_len, head_size]
            self._values = self._values.index_copy(2, at, values)  # [batch_size, kv_heads, max_len, head_size]
        else:
            self._keys.index_copy_(2, at, keys)
            self._values.index_copy_(2, at, values)
        self._length.add_(new)

    def keep_last(self, n: int) -> None:
        """Hold only the ``n`` latest positions, and ``rollback`` more: a sliding-window
        ``MHA.forward`` calls it after each call with ``window - 1``, the positions the next
        call's queries can see. ``len(cache)`` still counts every position seen, so the next
        call's positions continue from it.

        Args:
            n: how many of the latest positions to hold (``rollback`` more are kept).

        Raises:
            TypeError: ``n`` is not an ``int``.
            ValueError: ``n`` is negative.

        中文:
            只留最近的 ``n`` 个位置，外加 ``rollback`` 个：有滑动窗口的 ``MHA.forward`` 每次调用之后
            以 ``window - 1`` 调用它，也就是下一次调用的查询看得到的位置数。``len(cache)`` 仍然计入
            见过的全部位置，下一次调用的位置从它接着数。

            参数：
                n: 留下多少个最近的位置（另外再留 ``rollback`` 个）。

            异常：
                TypeError: ``n`` 不是 ``int``。
                ValueError: ``n`` 是负数。
        """
        check_length("n", n)
        self._kept = n
        drop = max(self._len - self._dropped - n - self.rollback, 0)
        self._dropped += drop
        self._offset += drop

    def keep_chunk(self, size: int) -> None:
        """Hold only the positions of the chunk in progress, and ``rollback`` more: a chunked
        ``MHA.forward`` (``MHA(chunk=size)``, Llama 4's chunked attention) calls it after each
        call. A query sees only the keys of its own chunk of ``size`` positions, so a finished
        chunk is freed: ``len(cache) % size`` positions are held, none right after a chunk ends.

        Args:
            size: the chunk size.

        Raises:
            TypeError: ``size`` is not an ``int``.
            ValueError: ``size`` is not positive.

        中文:
            只留正在进行的那一块的位置，外加 ``rollback`` 个：做块内注意力的 ``MHA.forward``
            （``MHA(chunk=size)``，Llama 4 的块内注意力）每次调用之后调用它。查询只看得到自己那一块
            （``size`` 个位置）里的键，所以写完的一块就释放掉：留下 ``len(cache) % size`` 个位置，
            一块刚结束时一个也不留。

            参数：
                size: 块的大小。

            异常：
                TypeError: ``size`` 不是 ``int``。
                ValueError: ``size`` 不是正数。
        """
        check_length("size", size, positive=True)
        self.keep_last(self._len % size)
        self._chunk = size

    def overflows(self, new: int) -> bool:
        """Whether appending ``new`` positions would hold more than ``max_len`` (never without
        one): then a sliding window's call appends with ``append_windowed`` instead.

        Args:
            new: how many positions the call would append.

        Returns:
            ``True`` when they do not fit beside the positions held.

        中文:
            追加 ``new`` 个位置之后，缓存是否会超过 ``max_len`` 个位置（没有 ``max_len`` 就永远不会）：
            这时滑动窗口的调用改用 ``append_windowed`` 追加。

            参数：
                new: 这次调用要追加的位置数。

            返回：
                放不下（加上已有的位置超过 ``max_len``）时为 ``True``。
        """
        return self.max_len is not None and self._len - self._dropped + new > self.max_len

    def append_windowed(self, keys: Tensor, values: Tensor, keep: int) -> None:
        """Append keys and values of which only the ``keep`` latest positions (of those held and
        these) will be held after the call, writing only those: a sliding window's call may
        bring more positions than ``max_len`` (a long prompt), as long as what it keeps fits.
        The caller attends over what the cache held before and ``keys``, not ``self.keys``.

        Args:
            keys: the new keys, ``[batch_size, kv_heads, new_len, head_size]``.
            values: the new values, same shape, dtype and device as ``keys``.
            keep: how many of the latest positions the window needs held (``window - 1``);
                ``rollback`` more are kept.

        Raises:
            ValueError: ``keep + rollback`` exceeds ``max_len``; or as for ``append``.
            TypeError: as for ``append``.

        中文:
            追加一批键和值，调用之后（已有的加上这批里）只留最近的 ``keep`` 个位置，所以也只写入这些：
            滑动窗口的一次调用可以带来比 ``max_len`` 更多的位置（一段长提示），只要留下的放得下。调用方
            对缓存原有的键、值接上 ``keys`` 做注意力，而不是对 ``self.keys``。

            参数：
                keys: 新的键，形状为 ``[batch_size, kv_heads, new_len, head_size]``。
                values: 新的值，形状、dtype 和设备都与 ``keys`` 相同。
                keep: 窗口需要留下的最近位置数（``window - 1``）；另外再留 ``rollback`` 个。

            异常：
                ValueError: ``keep + rollback`` 超过 ``max_len``；其余与 ``append`` 相同。
                TypeError: 与 ``append`` 相同。
        """
        check_length("keep", keep)
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

            参数：
                n: 保留的位置数，取值在 0–``len(cache)`` 之间。

            异常：
                TypeError: ``n`` 不是 ``int``。
                ValueError: ``n`` 是负数，或者大于 ``len(cache)``。
        """
        check_length("n", n)
        if n > len(self):
            raise ValueError(f"n must be at most len(cache) ({len(self)}), got {n}")
        if self.static:  # the positions beyond n stay in the buffer, masked out, overwritten later
            self._length.fill_(n)
            return
        if self._dropped and self._chunk is not None and self._dropped > n - n % self._chunk:
            raise ValueError(
                f"this cache holds only positions {self._dropped} .. {self._len - 1} (chunked "
                f"attention frees each finished chunk of {self._chunk}), and attending from "
                f"position {n} needs the positions of its chunk from {n - n % self._chunk} on: n "
                f"must be at least {self._dropped}, or reset() it"
            )
        if self._dropped and self._chunk is None and n - self._dropped < self._kept:
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
            沿批这一维重新挑选：缓存的行 ``i`` 变成原来的行 ``index[i]``。

            束搜索每一步之后留下得分最高的几束：``index`` 给出每一束新束接续的是哪一束旧束。
            可以重复某一行，也可以改变批大小（``torch.zeros(k, dtype=torch.long)`` 把只有一个提示的
            缓存变成 ``k`` 束）。

            参数：
                index: 形状为 ``[new_batch_size]`` 的整数张量，与缓存在同一设备上，每个值在
                    0–``batch_size - 1`` 之间（``index`` 在 CPU 上时才检查；在加速器上检查要等设备
                    算完）。

            异常：
                TypeError: ``index`` 不是整数张量。
                ValueError: ``index`` 不是一维的，与缓存不在同一设备上，或者（在 CPU 上）有一行
                    超出 0–``batch_size - 1``。
        """
        check_vector("index", index, "[new_batch_size]")
        if self._keys is None:
            return
        if index.device != self._keys.device:
            raise ValueError(
                f"index must be on the cache's device {self._keys.device}, got {index.device}"
            )
        check_range("index", index, self._keys.size(0) - 1, "batch_size - 1")
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
        self._kept = self._chunk = None
        self._owner = self._source = None
        self._length = torch.zeros((), dtype=torch.long) if self.static else None

    def to(self, *args: object, **kwargs: object) -> KVCache:
        """Move (or cast) the held keys and values, in place.

        Args:
            *args: what ``Tensor.to`` takes: a device, a dtype, or both.
            **kwargs: ``Tensor.to``'s keywords (``device=``, ``dtype=``, ``non_blocking=``).

        Returns:
            The cache itself, as ``nn.Module.to`` returns the module.

        中文:
            移动（或转换）缓存里的键和值，原地修改。

            参数：
                *args: ``Tensor.to`` 接受的参数：设备、dtype，或者两者。
                **kwargs: ``Tensor.to`` 的关键字参数（``device=``、``dtype=``、``non_blocking=``）。

            返回：
                缓存本身，就像 ``nn.Module.to`` 返回模块本身。
        """
        if self._keys is not None:
            self._keys = self._keys.to(*args, **kwargs)
            self._values = self._values.to(*args, **kwargs)
            if self.static:  # the length moves with the buffers (a dtype leaves it an integer)
                self._length = self._length.to(self._keys.device)
        return self

    def claim(self, module: nn.Module, source: str) -> None:
        """Make the cache ``module``'s, filled from ``source``. ``MHA`` and ``MLA`` call it at
        each call given a cache: a cache belongs to the first module that fills it, and holds
        the keys and values of one source until ``reset``.

        Args:
            module: the attention module that writes the cache.
            source: ``"x"`` (self-attention) or ``"context"`` (cross-attention).

        Raises:
            TypeError: ``module`` is not a ``torch.nn.Module``.
            ValueError: ``source`` is neither ``"x"`` nor ``"context"``; the cache belongs to
                another module; or it holds the keys and values of the other source.

        中文:
            让缓存归 ``module`` 所有，由 ``source`` 填写。``MHA`` 和 ``MLA`` 每次带缓存调用时
            都会调用它：缓存属于第一个往里写的模块，在 ``reset`` 之前只存放同一来源的键和值。

            参数：
                module: 写这个缓存的注意力模块。
                source: ``"x"``（自注意力）或 ``"context"``（交叉注意力）。

            异常：
                TypeError: ``module`` 不是 ``torch.nn.Module``。
                ValueError: ``source`` 既不是 ``"x"`` 也不是 ``"context"``；缓存属于另一个模块；
                    或者缓存里存的是另一种来源的键和值。
        """
        if not isinstance(module, nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
        if source not in ("x", "context"):
            raise ValueError(f'source must be "x" or "context", got {source!r}')
        owner = None if self._owner is None else self._owner()
        if owner is not None and owner is not module:
            raise ValueError(
                "this KVCache belongs to another module: each attention layer needs a cache of its "
                "own (a ModelCache holds one per layer); reset() it to use it elsewhere"
            )
        if self.static and source == "context":
            raise ValueError(
                "a static cache holds self-attention's keys and values; cross-attention's cache "
                "(context=) never grows, so it needs none: use KVCache()"
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


def _may_read_the_length() -> bool:
    """Whether a static cache may read its length tensor as a number: not while compiling (a
    graph break) nor while a CUDA graph is being captured (reading waits for the device, which a
    capture forbids)."""
    if torch.compiler.is_compiling():
        return False
    return not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def _ordinary_tensors() -> contextlib.AbstractContextManager:
    """Where the cache makes a buffer: outside inference mode even inside it (when not compiling),
    so that the buffer is an ordinary tensor, which a later call under ``torch.no_grad`` (or a
    compiled step) may write in place; an inference tensor may only be read there."""
    if torch.compiler.is_compiling() or not torch.is_inference_mode_enabled():
        return contextlib.nullcontext()
    return torch.inference_mode(False)


def _grown(
    buffer: Tensor | None, new: Tensor, start: int, held: int, capacity: int, *, zeros: bool = False
) -> Tensor:
    """A buffer like ``new`` with ``capacity`` positions that starts with the ``held`` positions
    of ``buffer`` from ``start`` on; the rest uninitialised, or zeros with ``zeros`` (a static
    cache attends over its free slots too, masked: a weight of 0 times a NaN left in memory
    would be NaN)."""
    empty = new.new_zeros if zeros else new.new_empty
    grown = empty(new.size(0), new.size(1), capacity, new.size(3))
    if held:
        grown[:, :, :held] = buffer[:, :, start : start + held]
    return grown


class ModelCache:
    """One [`KVCache`][mha.cache.KVCache] per attention layer of a model, handled together.

    A model of ``n`` layers passes ``cache.layers[i]`` to its layer ``i``. ``crop``, ``reorder``,
    ``reset`` and ``to`` act on every layer's cache, as a generation loop needs.

    Args:
        num_layers: how many caches (attention layers).
        max_len: each cache's ``max_len`` (``None``: buffers that grow as needed).
        rollback: each cache's ``rollback`` (positions kept beyond a sliding window).
        static: each cache's ``static`` (a static cache: attends over the whole ``max_len``
            buffer with a mask, so every decoding step has the same shapes).

    Attributes:
        layers: the caches, a tuple of ``num_layers`` [`KVCache`][mha.cache.KVCache].

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
        模型每个注意力层各一个 [`KVCache`][mha.cache.KVCache]，统一处理。

        有 ``n`` 层的模型把 ``cache.layers[i]`` 传给层 ``i``。``crop``、``reorder``、``reset``
        和 ``to`` 作用于每一层的缓存，生成循环需要的正是这样。

        参数：
            num_layers: 缓存的个数（注意力层数）。
            max_len: 每个缓存的 ``max_len``（``None``：缓冲区按需增长）。
            rollback: 每个缓存的 ``rollback``（滑动窗口之外多留的位置数）。
            static: 每个缓存的 ``static``（静态缓存：用掩码对整个 ``max_len`` 长的缓冲区做注意力，
                每一步解码的形状都一样）。

        属性：
            layers: 这些缓存，由 ``num_layers`` 个 [`KVCache`][mha.cache.KVCache] 组成的元组。

        异常：
            TypeError: ``num_layers`` 或 ``max_len`` 不是 ``int``。
            ValueError: ``num_layers`` 或 ``max_len`` 不是正数。
    """

    def __init__(
        self,
        num_layers: int,
        *,
        max_len: int | None = None,
        rollback: int = 0,
        static: bool = False,
    ) -> None:
        check_length("num_layers", num_layers, positive=True)
        self.layers = tuple(
            KVCache(max_len, rollback=rollback, static=static) for _ in range(num_layers)
        )
        self.max_len = max_len
        self.static = static

    def __len__(self) -> int:
        # The positions the caches hold: every layer holds as many between two forwards.
        return len(self.layers[0])

    def __repr__(self) -> str:
        extra = "" if self.max_len is None else f", max_len={self.max_len}"
        extra += ", static=True" if getattr(self, "static", False) else ""
        return f"ModelCache(num_layers={len(self.layers)}, len={len(self)}{extra})"

    def crop(self, n: int) -> None:
        """[`KVCache.crop`][mha.cache.KVCache.crop] on every layer.

        Args:
            n: how many positions to keep, ``0 .. len(cache)``.

        中文:
            对每一层调用 [`KVCache.crop`][mha.cache.KVCache.crop]。

            参数：
                n: 保留的位置数，取值在 0–``len(cache)`` 之间。
        """
        for layer in self.layers:
            layer.crop(n)

    def reorder(self, index: Tensor) -> None:
        """[`KVCache.reorder`][mha.cache.KVCache.reorder] on every layer.

        Args:
            index: an integer tensor ``[new_batch_size]``: row ``i`` becomes row ``index[i]``.

        中文:
            对每一层调用 [`KVCache.reorder`][mha.cache.KVCache.reorder]。

            参数：
                index: 形状为 ``[new_batch_size]`` 的整数张量：行 ``i`` 变成原来的行
                    ``index[i]``。
        """
        for layer in self.layers:
            layer.reorder(index)

    def reset(self) -> None:
        """[`KVCache.reset`][mha.cache.KVCache.reset] on every layer.

        中文:
            对每一层调用 [`KVCache.reset`][mha.cache.KVCache.reset]。
        """
        for layer in self.layers:
            layer.reset()

    def to(self, *args: object, **kwargs: object) -> ModelCache:
        """[`KVCache.to`][mha.cache.KVCache.to] on every layer.

        Args:
            *args: what ``Tensor.to`` takes: a device, a dtype, or both.
            **kwargs: ``Tensor.to``'s keywords.

        Returns:
            The container itself.

        中文:
            对每一层调用 [`KVCache.to`][mha.cache.KVCache.to]。

            参数：
                *args: ``Tensor.to`` 接受的参数：设备、dtype，或者两者。
                **kwargs: ``Tensor.to`` 的关键字参数。

            返回：
                容器本身。
        """
        for layer in self.layers:
            layer.to(*args, **kwargs)
        return self


# A saved cache loads with torch.load's default weights_only=True (its state is tensors, ints,
# strings and None).
torch.serialization.add_safe_globals([KVCache, ModelCache])


# --8<-- [end:cache]
