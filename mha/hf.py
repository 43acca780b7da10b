"""``mha``'s attention inside a transformers model: the layer that takes transformers' call.

[`swap_attention`][mha.interop.swap_attention] puts one [`HFAttention`][mha.hf.HFAttention] in
the place of each attention layer of a transformers causal LM; the model around it (embeddings,
norms, MLPs, the masks and positions it builds, ``generate``) stays transformers'. The layer
takes transformers' calling convention and turns it into ``mha``'s:

| transformers passes                                    | ``mha`` takes                   |
|--------------------------------------------------------|---------------------------------|
| ``attention_mask=None`` (sdpa: the causal mask alone)  | ``is_causal=True``              |
| a boolean ``[batch, 1, q_len, k_len]`` (sdpa)          | ``attn_mask=``, True = may attend |
| an additive float ``[batch, 1, q_len, k_len]`` (eager) | ``attn_mask=``, added           |
| ``position_ids`` ``[1, q_len]`` or ``[batch, q_len]``  | ``positions=`` as it is         |
| ``position_embeddings`` (its cos and sin)              | ``rotations=`` (MLA: its ``rope``) |
| ``past_key_values`` (a ``DynamicCache``)               | its own cache, kept in step     |

The masks need no conversion: ``mha.full.MHA`` takes a boolean mask with the polarity of
``scaled_dot_product_attention`` and adds a float one, as transformers' eager path does; on a
sliding-window layer transformers' mask covers only the keys its cache holds, which ``MHA``
accepts too. ``is_causal=True`` is always passed: transformers' attention is causal, and
``MHA``'s causal mask (lower-right aligned, with the window) is the one transformers' mask
already holds, so the two together are that mask.

**The cache.** Each layer keeps ``mha``'s own cache (a [`KVCache`][mha.cache.KVCache], a
[`LatentCache`][mha.mla.LatentCache] for MLA): the keys and values live there. transformers'
cache must stay consistent all the same, because transformers derives its masks and positions
from its cache's length (``get_seq_length``): left empty, it would build the masks of a first
call at every step and nothing would fail. So the layer writes into transformers' cache, at each
call, one small integer placeholder per new position, ``[batch, 1, q_len, 2]``: the row it was
written for and a stamp. These placeholders, not hooks, keep the two caches together:
transformers moves its own tensors when it reorders (beam search's ``reorder_cache``),
repeats (``batch_repeat_interleave``), selects (``batch_select_indices``) or crops (``crop``)
its cache, or when a user does the same or copies it, and the next call reads from the last
position held which of our rows each of its rows now is, and how long it is. The layer then
reorders and crops its own cache to match. Hooking those methods on each cache object would
miss what a hook does not know (a layer's own ``crop``, a ``copy.deepcopy`` that copies the
hooks with the cache, a method a later transformers adds); storing the real keys and values in
transformers' cache would copy every held key at every step. The stamp changes whenever our
rows change (a new sequence, a reorder, a crop), so a cache whose last position this layer did
not write in its present state (a cache filled before the swap, by another model, for another
sequence, or a copy taken before a crop) is an error, never a silent mix:

- transformers' cache is empty: a new sequence; ours is emptied too;
- it holds what this layer wrote: ours follows its reorder or crop, if any;
- it holds anything else: ``ValueError``, which says what to pass instead.

transformers' ``DynamicCache`` is supported (its full and sliding-window layers). A
``StaticCache`` (``generate(..., cache_implementation="static")``) is refused with a
``TypeError``: it preallocates and attends over its whole buffer, while the layer attends over
its own cache; ``mha``'s preallocated cache is ``KVCache(max_len=...)``.

The layer returns ``(output, None)``: the attention weights are not computed (transformers'
``sdpa`` path returns ``None`` too), and ``output_attentions`` records nothing from it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch import Tensor

import mha.full
import mha.mla
from mha.cache import KVCache

__all__ = ["HFAttention"]

# The cache layers of transformers' DynamicCache: a layer that keeps every position, and one
# that keeps a sliding window's (DynamicCache(config=...) on a sliding layer). Recognised by
# class name: mha never imports transformers.
FOLLOWED_LAYERS = ("DynamicLayer", "DynamicSlidingWindowLayer")

# Stamps of the placeholders: unique in the process, so that no two layers, sequences or
# states of a layer share one.
_STAMPS = itertools.count(1)


@dataclass
class _Segment:
    """Positions ``start .. end - 1`` of our cache, written while its rows stayed the same;
    ``reorder`` gives, for each of these rows, the row of the previous segment it continues
    (``None``: the same rows)."""

    stamp: int
    start: int
    end: int
    reorder: Tensor | None = None


class HFAttention(nn.Module):
    """An ``mha`` attention module in the place of a transformers attention layer.

    Built by [`swap_attention`][mha.interop.swap_attention], one per layer; called by the
    transformers model as its own attention layer was, with its mask, ``position_ids`` and
    cache. Its ``forward`` passes the mask as it is (a boolean mask or transformers' additive
    one; ``mha``'s polarity is ``scaled_dot_product_attention``'s, True = may attend),
    ``position_ids`` as ``positions``, and always ``is_causal=True``; it keeps its own cache and
    writes into transformers' cache one small placeholder per position, which tells the next
    call how transformers reordered or cropped its cache (the docstring of ``mha.hf`` says why
    placeholders, not hooks).

    Args:
        attention: the [`mha.full.MHA`][mha.full.MHA] (or [`mha.mla.MLA`][mha.mla.MLA]) that
            computes the attention, as ``from_hf`` builds it from ``hf_attention``.
        hf_attention: the transformers attention layer it replaces; its class, ``config`` and
            ``layer_idx`` are kept, so that
            [`restore_attention`][mha.interop.restore_attention] can build it again, not its
            weights.

    Attributes:
        attention: the module given, a submodule (its parameters are the layer's).
        cache: the layer's own cache, a [`KVCache`][mha.cache.KVCache] (a
            [`LatentCache`][mha.mla.LatentCache] for MLA), filled when transformers passes
            ``past_key_values``.
        config: ``hf_attention.config``.
        layer_idx: ``hf_attention.layer_idx``: which layer of transformers' cache is this
            layer's.
        hf_class: ``type(hf_attention)``.

    Raises:
        TypeError: ``attention`` is neither an ``mha.full.MHA`` nor an ``mha.mla.MLA``, or
            ``hf_attention`` has no ``config`` and ``layer_idx``.

    中文:
        放在 transformers 注意力层位置上的 ``mha`` 注意力模块。

        由 [`swap_attention`][mha.interop.swap_attention] 构建，每层一个；transformers 的模型像调用
        它原来的注意力层那样调用它，传入掩码、``position_ids`` 和缓存。它的 ``forward`` 把掩码原样
        传下去（布尔掩码，或者 transformers 的加性掩码；``mha`` 的极性与
        ``scaled_dot_product_attention`` 相同，True 表示可以关注），把 ``position_ids`` 当作
        ``positions``，并且总是传 ``is_causal=True``；它用自己的缓存，同时往 transformers 的缓存里
        每个位置写一个小小的占位值，下一次调用由此得知 transformers 怎样重排或裁剪了它的缓存（为什么
        用占位值而不用钩子，见 ``mha.hf`` 模块的说明）。

        参数：
            attention: 计算注意力的 [`mha.full.MHA`][mha.full.MHA]（或
                [`mha.mla.MLA`][mha.mla.MLA]），即 ``from_hf`` 由 ``hf_attention`` 构建的模块。
            hf_attention: 被替换的 transformers 注意力层；留下的是它的类、``config`` 和
                ``layer_idx``（好让 [`restore_attention`][mha.interop.restore_attention] 重新构建
                它），不留它的权重。

        属性：
            attention: 传入的模块，作为子模块（它的参数就是这一层的参数）。
            cache: 这一层自己的缓存，一个 [`KVCache`][mha.cache.KVCache]（MLA 则是
                [`LatentCache`][mha.mla.LatentCache]），transformers 传入 ``past_key_values`` 时
                写入。
            config: ``hf_attention.config``。
            layer_idx: ``hf_attention.layer_idx``：transformers 缓存里的哪一层归这一层。
            hf_class: ``type(hf_attention)``。

        异常：
            TypeError: ``attention`` 既不是 ``mha.full.MHA`` 也不是 ``mha.mla.MLA``，或者
                ``hf_attention`` 没有 ``config`` 和 ``layer_idx``。
    """

    def __init__(self, attention: nn.Module, hf_attention: nn.Module) -> None:
        super().__init__()
        if not isinstance(attention, mha.full.MHA | mha.mla.MLA):
            raise TypeError(
                f"attention must be a mha.full.MHA or a mha.mla.MLA, got {type(attention).__name__}"
            )
        missing = [n for n in ("config", "layer_idx") if not hasattr(hf_attention, n)]
        if missing:
            raise TypeError(
                "hf_attention must be a transformers attention layer, with config and layer_idx; "
                f"{type(hf_attention).__name__} has no {' and no '.join(missing)}"
            )
        self.attention = attention
        self.hf_class = type(hf_attention)
        self.config = hf_attention.config
        self.layer_idx = hf_attention.layer_idx
        self.is_causal = True  # as transformers' attention layers say of themselves
        mla = isinstance(attention, mha.mla.MLA)
        self.cache = mha.mla.LatentCache() if mla else KVCache()
        # An MHA whose rope rotates whole heads, halves paired (the Llama family's layout):
        # transformers' position_embeddings are its tables; MLA rotates interleaved pairs
        rope = getattr(attention, "rope", None)
        self._rotates_as_transformers = (
            not mla
            and rope is not None
            and not rope.interleaved
            and rope.rotary_dims == attention.head_size
        )
        self._segments: list[_Segment] = []
        # transformers' cache tensor as this layer's last write left it: while the layer still
        # holds that very tensor, nothing reordered, cropped or refilled it (each of those makes
        # a new tensor), and the next call need not read the placeholders
        self._written: Tensor | None = None
        self._marks: Tensor | None = None  # the last placeholders, reused while they fit
        self._marks_for: tuple | None = None  # (batch_size, q_len, device, stamp) of _marks

    def extra_repr(self) -> str:
        """What ``print`` shows between the parentheses: the class replaced and its layer.

        Returns:
            ``replaces=`` the class name, and ``layer_idx=``.

        中文:
            ``print`` 在括号里显示的内容：被替换的类和它所在的层。

            返回：
                ``replaces=`` 加类名，以及 ``layer_idx=``。
        """
        return f"replaces={self.hf_class.__name__}, layer_idx={self.layer_idx}"

    def forward(
        self,
        hidden_states: Tensor,
        position_embeddings: tuple[Tensor, Tensor] | None = None,
        attention_mask: Tensor | None = None,
        past_key_values: object | None = None,
        position_ids: Tensor | None = None,
        **kwargs: object,
    ) -> tuple[Tensor, None]:
        """The attention of ``hidden_states``, called as transformers calls its attention layers.

        Args:
            hidden_states: ``[batch_size, q_len, hidden_size]``.
            position_embeddings: transformers' cos and sin, computed once for all layers: an
                ``MHA`` rotates by them (``rotations=``), the very tables its own ``rope`` makes
                for ``position_ids`` (tests/test_swap.py checks them bit for bit); an ``MLA``,
                whose pairs are interleaved, rotates by ``position_ids`` with its own ``rope``.
            attention_mask: ``None`` (the causal mask alone), a boolean
                ``[batch_size, 1, q_len, k_len]`` (True = may attend) or an additive float mask
                of that shape, as the model builds it.
            past_key_values: transformers' cache (a ``DynamicCache``), or ``None`` (no cache:
                training, or ``use_cache=False``).
            position_ids: ``[1, q_len]`` or ``[batch_size, q_len]``; ``None`` means the
                positions right after those in the cache.
            **kwargs: the model's other keywords (``use_cache``, ``cache_position``, ...),
                not needed.

        Returns:
            ``(output, None)``: the output ``[batch_size, q_len, hidden_size]``, and no weights.

        Raises:
            TypeError: ``past_key_values`` is not transformers' ``DynamicCache`` (a
                ``StaticCache``, say).
            ValueError: ``past_key_values`` holds positions this layer did not write in its
                present state (filled before the swap, by another model or for another
                sequence), or was cropped further back than this layer's cache can follow.

        中文:
            对 ``hidden_states`` 做注意力，调用方式与 transformers 调用它的注意力层相同。

            参数：
                hidden_states: 输入，``[batch_size, q_len, hidden_size]``。
                position_embeddings: transformers 为所有层只算一次的 cos 和 sin：``MHA`` 直接按它们
                    旋转（``rotations=``），它们正是模块自己的 ``rope`` 对 ``position_ids`` 算出的表
                    （tests/test_swap.py 逐位核对）；``MLA`` 的维度对是交错排列的，仍按
                    ``position_ids`` 用自己的 ``rope`` 旋转。
                attention_mask: ``None``（只有因果掩码）、布尔掩码 ``[batch_size, 1, q_len, k_len]``
                    （True 表示可以关注），或者同样形状、加到分数上的浮点掩码，都是模型构建好的。
                past_key_values: transformers 的缓存（``DynamicCache``），或 ``None``（不用缓存：
                    训练时，或者 ``use_cache=False``）。
                position_ids: ``[1, q_len]`` 或 ``[batch_size, q_len]``；``None`` 表示紧接在缓存里
                    已有位置之后的位置。
                **kwargs: 模型传来的其他关键字参数（``use_cache``、``cache_position`` 等），用不到。

            返回：
                ``(output, None)``：输出 ``[batch_size, q_len, hidden_size]``，不返回注意力权重。

            异常：
                TypeError: ``past_key_values`` 不是 transformers 的 ``DynamicCache``（比如是
                    ``StaticCache``）。
                ValueError: ``past_key_values`` 里存着这一层在当前状态下没有写过的位置（在替换之前
                    填的、别的模型填的或者另一个序列的），或者它被裁剪得比这一层的缓存能跟上的更早。
        """
        cache = None
        if past_key_values is not None:
            self._follow(past_key_values)
            cache = self.cache
        if position_embeddings is not None and self._rotates_as_transformers:
            # transformers' cos and sin, computed once for all layers: the tables this module's
            # rope makes for position_ids (tests/test_swap.py), not computed again per layer
            where = dict(rotations=tuple(position_embeddings))
        else:
            where = dict(positions=position_ids)
        out = self.attention(
            hidden_states, attn_mask=attention_mask, is_causal=True, cache=cache, **where
        )
        if past_key_values is not None:
            self._mark(past_key_values, hidden_states)
        return out, None

    def _layer(self, past_key_values: object) -> object | None:
        """transformers' cache layer of this layer (``None`` before its first update), checked
        to be one this layer can follow."""
        layers = getattr(past_key_values, "layers", None)
        if layers is None or not hasattr(past_key_values, "get_seq_length"):
            raise TypeError(
                "past_key_values must be transformers' DynamicCache, got "
                f"{type(past_key_values).__name__}"
            )
        if self.layer_idx >= len(layers):
            return None
        layer = layers[self.layer_idx]
        if type(layer).__name__ not in FOLLOWED_LAYERS:
            raise TypeError(
                f"past_key_values holds a {type(layer).__name__} for layer {self.layer_idx}: a "
                "swapped layer keeps its own cache and follows transformers' DynamicCache only "
                f"({', '.join(FOLLOWED_LAYERS)}). Pass a DynamicCache (generate's default; no "
                'cache_implementation="static"), or use mha\'s KVCache(max_len=...) directly'
            )
        return layer

    def _follow(self, past_key_values: object) -> None:
        """Bring our cache to what transformers' holds: empty it for a new sequence, follow a
        reorder or crop, or refuse a cache this layer did not fill."""
        layers = getattr(past_key_values, "layers", None)
        if (
            self._written is not None
            and isinstance(layers, list)
            and self.layer_idx < len(layers)
            and getattr(layers[self.layer_idx], "keys", None) is self._written
        ):
            return  # untouched since our last write: in step (the case of every decoding step)
        layer = self._layer(past_key_values)
        held = past_key_values.get_seq_length(self.layer_idx)
        if held == 0:
            # 新的序列：我们的缓存也清空
            # A new sequence: ours starts empty too
            self.cache.reset()
            self._segments = [_Segment(next(_STAMPS), 0, 0)]
            return
        keys = layer.keys  # ours: [batch_size, 1, positions held, 2], integers
        ours = (
            keys.dtype == torch.int64
            and keys.dim() == 4
            and keys.shape[1:2] + keys.shape[3:] == (1, 2)
        )
        marks = keys[:, 0, -1] if ours else None  # [batch_size, 2]: the last position's row, stamp
        found = (
            []
            if marks is None
            else [k for k, s in enumerate(self._segments) if s.stamp == int(marks[0, 1])]
        )
        segment = self._segments[found[0]] if found else None
        rows, stamps = (None, None) if marks is None else (marks[:, 0], marks[:, 1])
        if (
            segment is None
            or not bool((stamps == stamps[0]).all())
            or not segment.start < held <= segment.end
        ):
            raise ValueError(
                f"past_key_values holds {held} positions for layer {self.layer_idx} that this "
                "swapped layer did not write in its present state (a cache filled before "
                "swap_attention, by another model, for another sequence, or a copy taken before "
                "a crop): pass a new DynamicCache (or none) and run the sequence from its start"
            )
        k = found[0]
        batch = len(self.cache.keys) if self.cache.keys is not None else 0
        if (
            k == len(self._segments) - 1
            and held == segment.end
            and torch.equal(rows, torch.arange(batch, device=rows.device))
        ):
            return  # in step: the same rows, the same length
        # 我们的每一行是片段 k 的哪一行（其后的重排依次复合）
        # Which row of segment k each of our rows continues (the reorders since, composed)
        ancestors = torch.arange(batch, device=rows.device)  # [batch_size]
        for later in reversed(self._segments[k + 1 :]):
            if later.reorder is not None:
                ancestors = later.reorder[ancestors]
        match = rows[:, None] == ancestors[None, :]  # [their batch, our batch]
        if not bool(match.any(dim=1).all()):
            raise ValueError(
                f"past_key_values holds {held} positions for layer {self.layer_idx} of rows "
                "that this layer's cache no longer holds (beam search dropped them since): pass "
                "a new DynamicCache (or none)"
            )
        index = match.int().argmax(dim=1)  # [their batch]: one of our rows for each of theirs
        if held < len(self.cache):
            try:
                self.cache.crop(held)
            except ValueError as error:
                raise ValueError(
                    f"past_key_values was cropped to {held} positions for layer "
                    f"{self.layer_idx} and this layer's cache cannot follow: {error}"
                ) from error
        if not torch.equal(index, torch.arange(batch, device=index.device)):
            self.cache.reorder(index.to(self.cache.keys.device))
        # 片段 k 之后的都作废；接下来的写入属于一个新片段（新的印记）
        # Everything after segment k is gone; what comes next is a new segment (a new stamp)
        del self._segments[k + 1 :]
        segment.end = held
        same = torch.equal(rows, torch.arange(len(rows), device=rows.device))
        self._segments.append(_Segment(next(_STAMPS), held, held, None if same else rows))

    def _mark(self, past_key_values: object, hidden_states: Tensor) -> None:
        """Write this call's placeholders into transformers' cache: its length grows as ours."""
        segment = self._segments[-1]
        b, q_len = hidden_states.size(0), hidden_states.size(1)
        device = hidden_states.device
        marks = self._marks  # transformers copies them into its cache: the same may serve again
        if marks is None or self._marks_for != (b, q_len, device, segment.stamp):
            rows = torch.arange(b, device=device)[:, None].expand(b, q_len)  # [batch_size, q_len]
            stamps = torch.full((b, q_len), segment.stamp, device=device)  # [batch_size, q_len]
            marks = torch.stack([rows, stamps], dim=-1)[:, None]  # [batch_size, 1, q_len, 2]
            self._marks, self._marks_for = marks, (b, q_len, device, segment.stamp)
        past_key_values.update(marks, marks, self.layer_idx)
        self._written = past_key_values.layers[self.layer_idx].keys
        segment.end += q_len
