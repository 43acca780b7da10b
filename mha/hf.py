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
| Llama 4's ``position_embeddings`` (complex numbers)    | ``rotations=``: real, imaginary |
| ``past_key_values=`` (5.23) or ``cache=`` (5.25 on)    | ``cache=``, the same storage    |

**Every keyword is read or refused.** transformers renames what it passes (5.25 passes the cache as
``cache=``, 5.23 as ``past_key_values=``; the layer takes both, and refuses both at once). Of the
other keywords, those in ``IGNORED_KEYWORDS`` are known and need nothing from this layer (each
with why); any other keyword that carries a tensor or a cache is a ``TypeError`` naming it: a
new name for something the layer must read would otherwise be dropped, and the model would run
without it (5.25's ``cache=`` did: every step decoded without the cache, other tokens).

The masks need no conversion: ``mha.full.MHA`` takes a boolean mask with the polarity of
``scaled_dot_product_attention`` and adds a float one, as transformers' eager path does; on a
sliding-window layer transformers' mask covers only the keys its cache holds, which ``MHA``
accepts too. ``is_causal=True`` is always passed: transformers' attention is causal, and
``MHA``'s causal mask (lower-right aligned, with the window) is the one transformers' mask
already holds, so the two together are that mask.

**The cache.** The keys and values live in transformers' own cache, written through its
``update``, exactly as its own attention layers write theirs: a [`KVCache`][mha.cache.KVCache]
(for MLA a [`LatentCache`][mha.mla.LatentCache]) whose storage is one layer of transformers'
``DynamicCache`` ([`TransformersKVCache`][mha.hf.TransformersKVCache]) is what ``MHA.forward``
receives. So there is one cache, and transformers' length, its masks and positions, its
reorders for beam search, its repeats, selections and crops are right by construction: nothing
to follow, nothing that can fall out of step, no second copy of the keys. A cache transformers'
own layers filled before the swap holds the same keys (rotated, after the q/k norm) and values,
and the swapped layer continues it; a cache of another layout (another model's) is a
``ValueError`` that names both, and so is one DeepSeek-V3's own layers filled (latents of MLA's
shape, laid out otherwise).

transformers' ``DynamicCache`` is supported (its full and sliding-window layers: a sliding
layer's ``update`` returns the keys it held and the new ones, which its mask covers). A
``StaticCache`` (``generate(..., cache_implementation="static")``) is refused with a
``TypeError``: its ``update`` returns the whole preallocated buffer, positions not yet written
included; ``mha``'s own static cache is ``KVCache(max_len=..., static=True)``.

The layer returns ``(output, None)``: the attention weights are not computed (transformers'
``sdpa`` path returns ``None`` too), and ``output_attentions`` records nothing from it.

**Its state dict has transformers' names.** ``state_dict()`` writes the parameters under the names
of the layer replaced (``q_proj.weight``, ..., gpt-oss's ``sinks``, Phi-3's fused ``qkv_proj``,
DeepSeek's latent projections: the table ``from_hf`` reads, in ``mha.interop``), and
``load_state_dict`` takes those names (or ``mha``'s own): ``save_pretrained`` on a swapped model
writes a checkpoint plain transformers loads, and a plain checkpoint loads into a swapped model.
``named_parameters`` keeps ``mha``'s names (``attention.W_q.weight``). What the table cannot name
(a parameter added to the module, an adapter inside Phi-3's fused projection) is a ``ValueError``
before anything is written, naming ``restore_attention``.
"""

# Why this file stays whole (700 lines): the layer that takes transformers' call and the caches it
# writes change together with transformers' attention interface, release by release.

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

import mha.full
import mha.interop
import mha.mla
from mha.cache import KVCache

__all__ = ["HFAttention", "TransformersKVCache", "TransformersLatentCache"]

# The layers of transformers' DynamicCache: one that keeps every position, and one that keeps a
# sliding window's (DynamicCache(config=...) on a sliding layer). Recognised by class name: mha
# never imports transformers.
FOLLOWED_LAYERS = ("DynamicLayer", "DynamicSlidingWindowLayer")

# The keywords transformers' models pass their attention layers (or that a user's call of the
# model passes through to them) which this layer knows and does not read, each with why nothing
# is lost. The others it reads (hidden_states, position_embeddings, attention_mask,
# position_ids, the cache under either name) or checks (output_attentions, is_causal); any other
# keyword that carries a tensor or a cache is refused by name.
IGNORED_KEYWORDS = {
    "use_cache": "whether the model returns its cache: the cache passed (or None) is what a "
    "layer writes",
    "cache_position": "the slots this call writes: a DynamicCache (the only cache taken) appends "
    "whatever it says, as it does for transformers' own layers",
    "output_hidden_states": "what the model collects between its layers",
    "output_router_logits": "what a mixture of experts collects from its routers",
    "num_items_in_batch": "the loss's divisor (a Trainer's), read by the loss",
    "max_length_q": "a length of packed sequences (an int), which cu_seq_lens_q (refused) holds",
    "max_length_k": "a length of packed sequences (an int), which cu_seq_lens_k (refused) holds",
}


class TransformersKVCache(KVCache):
    """A [`KVCache`][mha.cache.KVCache] whose keys and values live in one layer of
    transformers' ``DynamicCache``: ``append`` is transformers' ``update``.

    [`HFAttention`][mha.hf.HFAttention] makes one per call and hands it to ``MHA.forward``, which
    reads and writes it as any cache: its length is transformers' (``get_seq_length``, every
    position seen, as ``len(KVCache)``), ``keys`` and ``values`` are what the last ``update``
    returned (on a sliding layer the positions it held and the new ones), and a sliding window's
    ``keep_last`` is transformers' own business. Reordering, cropping or resetting it is done on
    transformers' cache, by transformers (``reorder_cache``, ``crop``, ``reset``).

    Args:
        past_key_values: transformers' ``DynamicCache``.
        layer_idx: which of its layers.

    Raises:
        TypeError: ``past_key_values`` is not a ``DynamicCache`` of full or sliding-window
            layers (a ``StaticCache``, say).

    中文:
        键和值存放在 transformers 的 ``DynamicCache`` 某一层里的 [`KVCache`][mha.cache.KVCache]：
        ``append`` 就是 transformers 的 ``update``。

        [`HFAttention`][mha.hf.HFAttention] 每次调用新建一个，交给 ``MHA.forward``，后者像读写任何
        缓存一样读写它：长度就是 transformers 的长度（``get_seq_length``，见过的全部位置，与
        ``len(KVCache)`` 的含义相同），``keys`` 和 ``values`` 是上一次 ``update`` 返回的（滑动
        窗口层上是它留着的位置加上新的位置），滑动窗口的 ``keep_last`` 交给 transformers 自己处理。
        重排、裁剪、清空都在 transformers 的缓存上由 transformers 完成（``reorder_cache``、
        ``crop``、``reset``）。

        参数：
            past_key_values: transformers 的 ``DynamicCache``。
            layer_idx: 它的哪一层。

        异常：
            TypeError: ``past_key_values`` 不是由全注意力层或滑动窗口层组成的 ``DynamicCache``（比如
                是 ``StaticCache``）。
    """

    def __init__(self, past_key_values: object, layer_idx: int) -> None:
        super().__init__()
        layers = getattr(past_key_values, "layers", None)
        if not isinstance(layers, list) or not hasattr(past_key_values, "update"):
            raise TypeError(
                "past_key_values must be transformers' DynamicCache, got "
                f"{type(past_key_values).__name__}"
            )
        if layer_idx < len(layers) and type(layers[layer_idx]).__name__ not in FOLLOWED_LAYERS:
            raise TypeError(
                f"past_key_values holds a {type(layers[layer_idx]).__name__} for layer "
                f"{layer_idx}: a swapped layer writes transformers' DynamicCache only "
                f"({', '.join(FOLLOWED_LAYERS)}), whose update returns the positions held. Pass "
                'a DynamicCache (generate\'s default; no cache_implementation="static"), or use '
                "mha's KVCache(max_len=..., static=True) directly"
            )
        self._transformers, self._layer_idx = past_key_values, layer_idx
        self._returned: tuple[Tensor, Tensor] | None = None

    def _held(self) -> tuple[Tensor, Tensor] | None:
        """What transformers' layer holds now, or ``None`` before its first update."""
        layers = self._transformers.layers
        layer = layers[self._layer_idx] if self._layer_idx < len(layers) else None
        if layer is None or not getattr(layer, "is_initialized", False) or layer.keys is None:
            return None
        return layer.keys, layer.values

    def __len__(self) -> int:
        return self._transformers.get_seq_length(self._layer_idx)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(len={len(self)}, layer_idx={self._layer_idx})"

    @property
    def keys(self) -> Tensor | None:
        held = self._returned or self._held()
        return None if held is None else held[0]

    @property
    def values(self) -> Tensor | None:
        held = self._returned or self._held()
        return None if held is None else held[1]

    def append(self, keys: Tensor, values: Tensor, *, queries: Tensor | None = None) -> None:
        """transformers' ``update`` of this layer, after checking that what it holds has the
        layout of ``keys`` and ``values``.

        Args:
            keys: the new keys (for MLA the latents), ``[batch_size, heads, new_len, size]``.
            values: the new values (for MLA the rotated key parts), the same but the last size.
            queries: not read (transformers' cache concatenates, so nothing held changes).

        Raises:
            ValueError: transformers' cache holds tensors of another layout for this layer
                (another model's, or DeepSeek-V3's own expanded keys).
            TypeError: of another dtype.

        中文:
            transformers 对这一层的 ``update``；先检查它存着的张量与 ``keys``、``values`` 的布局
            一致。

            参数：
                keys: 新的键（MLA 则是潜在向量），``[batch_size, heads, new_len, size]``。
                values: 新的值（MLA 则是旋转过的那段键），除最后一维外形状相同。
                queries: 不读取（transformers 的缓存是拼接，存着的不会被改动）。

            异常：
                ValueError: transformers 的缓存里这一层存着别的布局的张量（别的模型的，或者
                    DeepSeek-V3 自己的层存的展开后的键）。
                TypeError: dtype 不同。
        """
        held = self._held()
        written = getattr(self._transformers, "_mha_layers", frozenset())
        if held is not None and self._layer_idx not in written and not self._continues_foreign:
            raise ValueError(
                f"past_key_values holds {len(self)} positions for layer {self._layer_idx} that "
                f"transformers' own attention wrote, and {type(self).__name__} cannot continue "
                "them (DeepSeek-V3's layers lay out the latents and rotated keys otherwise than "
                "MLA): run the swapped model from the start, with a new DynamicCache (or none)"
            )
        if held is not None:
            theirs = [(t.size(0), t.size(1), t.size(3)) for t in held]
            ours = [(t.size(0), t.size(1), t.size(3)) for t in (keys, values)]
            if theirs != ours:
                raise ValueError(
                    f"past_key_values holds, for layer {self._layer_idx}, keys and values of "
                    f"[batch_size, heads, size] = {theirs}, this layer writes {ours}: a cache "
                    "filled by another model (or by DeepSeek-V3's own layers, which hold expanded "
                    "keys, not MLA's latents); pass a new DynamicCache (or none)"
                )
            if held[0].dtype != keys.dtype:
                raise TypeError(
                    f"past_key_values holds dtype {held[0].dtype} for layer {self._layer_idx}, "
                    f"this layer writes {keys.dtype}"
                )
        self._returned = self._transformers.update(keys, values, self._layer_idx)
        # Marked on transformers' cache (a copy of it keeps the mark): these layers mha wrote
        self._transformers._mha_layers = written | {self._layer_idx}

    # transformers' own layers of the Llama family hold the very keys (rotated, after the q/k
    # norm) and values MHA writes (tests/test_swap.py), so a swapped layer continues them
    _continues_foreign = True

    def keep_last(self, n: int) -> None:
        """Nothing: transformers' sliding layer keeps its window itself.

        Args:
            n: the positions a window needs (not read).

        中文:
            什么也不做：transformers 的滑动窗口层自己保留它的窗口。

            参数：
                n: 窗口需要的位置数（不读取）。
        """

    def overflows(self, new: int) -> bool:
        """Never: transformers' cache has no ``max_len``.

        Args:
            new: the positions a call brings (not read).

        Returns:
            ``False``.

        中文:
            永远不会：transformers 的缓存没有 ``max_len``。

            参数：
                new: 一次调用带来的位置数（不读取）。

            返回：
                总是 ``False``。
        """
        return False

    def crop(self, n: int) -> None:
        """Keep the first ``n`` positions (what ``MHA.forward`` does when its attention failed,
        to take back what the call wrote): transformers' ``crop`` of this layer.

        Args:
            n: how many positions to keep.

        中文:
            只保留前 ``n`` 个位置（``MHA.forward`` 的注意力失败时这样收回这次写入的位置）：即
            transformers 对这一层的 ``crop``。

            参数：
                n: 保留的位置数。
        """
        extra = len(self) - n
        if extra > 0:
            self._transformers.layers[self._layer_idx].crop(-extra)
        self._returned = None


class TransformersLatentCache(mha.mla.LatentCache, TransformersKVCache):
    """[`TransformersKVCache`][mha.hf.TransformersKVCache] for MLA: a
    [`LatentCache`][mha.mla.LatentCache] (latents and rotated key parts, one "head" each) whose
    storage is one layer of transformers' ``DynamicCache``.

    Args:
        past_key_values: transformers' ``DynamicCache``.
        layer_idx: which of its layers.

    中文:
        MLA 用的 [`TransformersKVCache`][mha.hf.TransformersKVCache]：一个
        [`LatentCache`][mha.mla.LatentCache]（潜在向量和旋转过的那段键，各当作一个“头”），存放在
        transformers 的 ``DynamicCache`` 的某一层里。

        参数：
            past_key_values: transformers 的 ``DynamicCache``。
            layer_idx: 它的哪一层。
    """

    # DeepSeek-V3's own layers hold latents of the same shape laid out otherwise: never continued
    _continues_foreign = False

    def __init__(self, past_key_values: object, layer_idx: int) -> None:
        TransformersKVCache.__init__(self, past_key_values, layer_idx)


class HFAttention(nn.Module):
    """An ``mha`` attention module in the place of a transformers attention layer.

    Built by [`swap_attention`][mha.interop.swap_attention], one per layer; called by the
    transformers model as its own attention layer was, with its mask, ``position_ids`` and
    cache. Its ``forward`` passes the mask as it is (a boolean mask or transformers' additive
    one; ``mha``'s polarity is ``scaled_dot_product_attention``'s, True = may attend),
    ``position_ids`` as ``positions`` (or transformers' rotary tables as ``rotations``), and
    always ``is_causal=True``; its keys and values live in transformers' own cache
    ([`TransformersKVCache`][mha.hf.TransformersKVCache]), so transformers' reorders and crops
    are the cache's.

    Args:
        attention: the [`mha.full.MHA`][mha.full.MHA] (or [`mha.mla.MLA`][mha.mla.MLA]) that
            computes the attention, as ``from_hf`` builds it from ``hf_attention``.
        hf_attention: the transformers attention layer it replaces; its class, ``config`` and
            ``layer_idx`` are kept, so that
            [`restore_attention`][mha.interop.restore_attention] can build it again, not its
            weights.

    Attributes:
        attention: the module given, a submodule (its parameters are the layer's).
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
        ``positions``（或者把 transformers 的旋转表当作 ``rotations``），并且总是传
        ``is_causal=True``；它的键和值存在 transformers 自己的缓存里
        （[`TransformersKVCache`][mha.hf.TransformersKVCache]），所以 transformers 的重排和裁剪
        就是对这个缓存的重排和裁剪。

        参数：
            attention: 计算注意力的 [`mha.full.MHA`][mha.full.MHA]（或
                [`mha.mla.MLA`][mha.mla.MLA]），即 ``from_hf`` 由 ``hf_attention`` 构建的模块。
            hf_attention: 被替换的 transformers 注意力层；留下的是它的类、``config`` 和
                ``layer_idx``（好让 [`restore_attention`][mha.interop.restore_attention] 重新构建
                它），不留它的权重。

        属性：
            attention: 传入的模块，作为子模块（它的参数就是这一层的参数）。
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
        self._cache_class = TransformersLatentCache if mla else TransformersKVCache
        # An MHA whose rope rotates whole heads, halves paired (the Llama family's layout):
        # transformers' position_embeddings are its tables; one whose rope rotates whole heads
        # in interleaved pairs (Llama 4's) takes them as complex numbers; MLA rotates
        # interleaved pairs of a head's part, by position_ids with its own rope
        rope = getattr(attention, "rope", None)
        whole = not mla and rope is not None and rope.rotary_dims == attention.head_size
        self._rotates_as_transformers = whole and not rope.interleaved
        self._rotates_by_complex_numbers = whole and rope.interleaved
        # Phi-3's one projection for q, k and v: its state dict fuses W_q's, W_k's and W_v's rows
        self._fused = mha.interop._fused(hf_attention)
        self.register_state_dict_post_hook(_with_transformers_names)
        self.register_load_state_dict_pre_hook(_from_transformers_names)

    def _replaced(self) -> nn.Module:
        """What ``mha.interop``'s ``_fuse`` and ``_split`` read of the layer replaced: for one
        that fuses q, k and v (Phi-3's ``qkv_proj``), that layer built again on the meta device
        (its config and sizes, no weights); otherwise this layer, which fuses nothing."""
        if not self._fused:
            return self
        with torch.device("meta"):
            return self.hf_class(self.config, self.layer_idx)

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
        position_embeddings: tuple[Tensor, Tensor] | Tensor | None = None,
        attention_mask: Tensor | None = None,
        past_key_values: object | None = None,
        position_ids: Tensor | None = None,
        *,
        cache: object | None = None,
        **kwargs: object,
    ) -> tuple[Tensor, None]:
        """The attention of ``hidden_states``, called as transformers calls its attention layers.

        Every keyword is read, checked, known as not needed (``IGNORED_KEYWORDS``, each with
        why) or, if it carries a tensor or a cache, refused by name: nothing a new transformers
        passes under a new name is dropped without a word.

        **Positions.** The rotation follows the model's positions: transformers' tables
        (``position_embeddings``: cos and sin, or Llama 4's complex numbers, whose real and
        imaginary parts are the cos and sin of interleaved pairs), else ``position_ids``, else
        the positions right after the cache's. A layer that does not rotate takes no
        positions: Llama 4's NoPE layers scale their queries by the index in the cache (its
        ``temperature``), as Llama 4 does, and its chunked layers take its mask, which holds
        the chunks (``chunks_in_mask``).

        Args:
            hidden_states: ``[batch_size, q_len, hidden_size]``.
            position_embeddings: transformers' cos and sin, computed once for all layers: an
                ``MHA`` rotates by them (``rotations=``), the very tables its own ``rope`` makes
                for ``position_ids`` (tests/test_swap.py checks them bit for bit); Llama 4's are
                complex numbers ``[batch_size or 1, q_len, head_size / 2]``, the same tables for
                interleaved pairs; an ``MLA``, which rotates a part of each head, rotates by
                ``position_ids`` with its own ``rope``.
            attention_mask: ``None`` (the causal mask alone), a boolean
                ``[batch_size, 1, q_len, k_len]`` (True = may attend) or an additive float mask
                of that shape, as the model builds it.
            past_key_values: transformers' cache (a ``DynamicCache``) as transformers 5.23
                names it, or ``None`` (no cache: training, or ``use_cache=False``).
            position_ids: ``[1, q_len]`` or ``[batch_size, q_len]``, read where the tables are
                not; ``None`` means the positions right after those in the cache.
            cache: the cache as transformers 5.25 names it; one of the two names, not both.
            **kwargs: the model's other keywords: ``output_attentions`` (refused when true),
                ``is_causal`` (refused when false), and those of ``IGNORED_KEYWORDS``; any other
                that carries a tensor or a cache is refused.

        Returns:
            ``(output, None)``: the output ``[batch_size, q_len, hidden_size]``, and no weights.

        Raises:
            TypeError: the cache is not transformers' ``DynamicCache`` (a ``StaticCache``,
                say), it is given as both ``past_key_values`` and ``cache``, or a keyword this
                layer does not know carries a tensor or a cache (the message names it).
            ValueError: ``output_attentions`` is asked for (in the call or the config):
                transformers records the weights from its own attention classes only; or
                ``is_causal=False``: this layer is causal.
            ValueError: the layer rotates, ``position_embeddings`` are not tables it can read
                and no ``position_ids`` are given (the positions could not be recovered).
            ValueError: the cache holds keys and values of another layout (another model's),
                or positions DeepSeek-V3's own layers wrote (their latents are laid out
                otherwise than MLA's).

        中文:
            对 ``hidden_states`` 做注意力，调用方式与 transformers 调用它的注意力层相同。

            每个关键字参数要么读取，要么检查，要么是已知用不到的（``IGNORED_KEYWORDS``，各写明
            原因），要么（带着张量或缓存时）按名字拒绝：新版 transformers 换了名字传来的东西，
            不会被悄悄丢掉。

            **位置。** 旋转跟着模型的位置走：先用 transformers 的旋转表
            （``position_embeddings``：cos 和 sin，或者 Llama 4 的复数，它的实部和虚部
            就是交错排列的各通道对的 cos 和 sin），没有就用 ``position_ids``，再没有就取
            紧接在缓存之后的位置。不旋转的层不取位置：Llama 4 的 NoPE 层按缓存里的下标
            给查询乘上温度系数（它的 ``temperature``），与 Llama 4 相同；
            它的块内注意力层用它的掩码，掩码里已经按块划分（``chunks_in_mask``）。

            参数：
                hidden_states: 输入，``[batch_size, q_len, hidden_size]``。
                position_embeddings: transformers 为所有层只算一次的 cos 和 sin：``MHA`` 直接按它们
                    旋转（``rotations=``），它们正是模块自己的 ``rope`` 对 ``position_ids`` 算出的表
                    （tests/test_swap.py 逐位核对）；Llama 4 传的是复数
                    ``[batch_size or 1, q_len, head_size / 2]``，就是交错排列的通道对的同一张表；
                    ``MLA`` 只旋转每个头的一部分，仍按 ``position_ids`` 用自己的 ``rope`` 旋转。
                attention_mask: ``None``（只有因果掩码）、布尔掩码 ``[batch_size, 1, q_len, k_len]``
                    （True 表示可以关注），或者同样形状、加到分数上的浮点掩码，都是模型构建好的。
                past_key_values: transformers 5.23 这样称呼它的缓存（``DynamicCache``），或
                    ``None``（不用缓存：训练时，或者 ``use_cache=False``）。
                position_ids: ``[1, q_len]`` 或 ``[batch_size, q_len]``，在用不上旋转表时读取；
                    ``None`` 表示紧接在缓存里已有位置之后的位置。
                cache: transformers 5.25 对缓存的称呼；两个名字只能给一个。
                **kwargs: 模型传来的其他关键字参数：``output_attentions``（为真时拒绝）、
                    ``is_causal``（为假时拒绝），以及 ``IGNORED_KEYWORDS`` 里的那些；其余带着
                    张量或缓存的一律拒绝。

            返回：
                ``(output, None)``：输出 ``[batch_size, q_len, hidden_size]``，不返回注意力权重。

            异常：
                TypeError: 缓存不是 transformers 的 ``DynamicCache``（比如是 ``StaticCache``），
                    同时用 ``past_key_values`` 和 ``cache`` 两个名字给了缓存，或者一个本层不认识
                    的关键字参数带着张量或缓存（错误信息写出它的名字）。
                ValueError: 要求了 ``output_attentions``（在调用里或配置里）：transformers 只从它
                    自己的注意力类收集权重；或者 ``is_causal=False``：这一层是因果的。
                ValueError: 这一层要旋转，``position_embeddings`` 不是它能读的旋转表，又没有给
                    ``position_ids``（位置无从得知）。
                ValueError: 缓存里存着别的布局的键和值（别的模型的），或者存着 DeepSeek-V3 自己的
                    层写的位置（它的潜在向量布局与 MLA 的不同）。
        """
        _check_keywords(kwargs)
        if past_key_values is not None and cache is not None:
            raise TypeError(
                "the cache was given twice, as past_key_values= (transformers 5.23's name) and "
                f"as cache= (5.25's): {type(past_key_values).__name__} and "
                f"{type(cache).__name__}; pass one"
            )
        cache = past_key_values if cache is None else cache
        if kwargs.get("output_attentions", getattr(self.config, "output_attentions", False)):
            # transformers collects the weights by hooks on its own attention classes, which a
            # swapped layer is not: it would return no weights, silently
            raise ValueError(
                "output_attentions=True: transformers records attention weights from its own "
                f"attention layers ({self.hf_class.__name__}), and this layer is mha's: "
                "restore_attention(model) first, or call the layer's attention with "
                "need_weights=True (model.model.layers[i].self_attn.attention)"
            )
        if kwargs.get("is_causal", True) is False:
            raise ValueError(
                f"is_causal=False: this layer replaces {self.hf_class.__name__}, a causal "
                "attention, and always masks the later positions; restore_attention(model) to "
                "run transformers' own layers without the causal mask"
            )
        if cache is not None:  # the keys and values live in transformers' cache
            cache = self._cache_class(cache, self.layer_idx)
        where = self._where(position_embeddings, position_ids)
        if getattr(self.attention, "chunk", None) is not None and attention_mask is not None:
            # Llama 4's chunked layers: transformers' mask holds the chunks, counted from each
            # row's first real token (its positions may count the padding)
            where["chunks_in_mask"] = True
        out = self.attention(
            hidden_states, attn_mask=attention_mask, is_causal=True, cache=cache, **where
        )
        return out, None

    def _where(
        self,
        position_embeddings: tuple[Tensor, Tensor] | Tensor | None,
        position_ids: Tensor | None,
    ) -> dict[str, object]:
        """The keywords that place this call's queries: ``rotations=`` from transformers'
        tables, ``positions=`` from ``position_ids``, or none (no rotation, or the positions
        right after the cache's)."""
        if self.attention.rope is None:  # a layer without rotation (SmolLM3's, Llama 4's NoPE)
            return {}
        if isinstance(position_embeddings, Tensor) and position_embeddings.is_complex():
            if self._rotates_by_complex_numbers:
                # Llama 4's tables: e^(i angle) per pair (times the rope's factor), so its real
                # and imaginary parts are the cos and sin of pair i, at dims 2i and 2i + 1
                cos = position_embeddings.real.repeat_interleave(2, dim=-1)
                sin = position_embeddings.imag.repeat_interleave(2, dim=-1)
                return dict(rotations=(cos, sin))
        elif position_embeddings is not None and self._rotates_as_transformers:
            # transformers' cos and sin, computed once for all layers: the tables this module's
            # rope makes for position_ids (tests/test_swap.py), not computed again per layer.
            # gpt-oss's hold each frequency once (half a head): the other half repeats them
            cos, sin = position_embeddings
            if cos.size(-1) * 2 == self.attention.head_size:
                cos, sin = torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
            return dict(rotations=(cos, sin))
        if position_ids is None and position_embeddings is not None:
            # Rotating by the positions after the cache's would ignore any gap in the model's
            raise ValueError(
                f"{self.hf_class.__name__} layer {self.layer_idx} got position_embeddings of a "
                f"layout it does not read ({_described(position_embeddings)}) and no "
                "position_ids: its positions cannot be recovered; pass position_ids"
            )
        return dict(positions=position_ids)


def _carries(value: object) -> bool:
    """Whether ``value`` is or holds a tensor or a cache (transformers' or ``mha``'s)."""
    if isinstance(value, Tensor | KVCache) or hasattr(value, "get_seq_length"):
        return True
    if isinstance(value, tuple | list):
        return any(_carries(v) for v in value)
    if isinstance(value, dict):
        return any(_carries(v) for v in value.values())
    return False


def _described(value: object) -> str:
    """A tensor's dtype and shape, or a value's type, for a message."""
    if isinstance(value, Tensor):
        return f"{value.dtype} {list(value.shape)}"
    return type(value).__name__


def _check_keywords(kwargs: dict[str, object]) -> None:
    """Refuse, by name, a keyword ``HFAttention.forward`` does not know that carries a tensor or
    a cache: it would be dropped, and the model run without it."""
    known = {"output_attentions", "is_causal", *IGNORED_KEYWORDS}
    for name, value in kwargs.items():
        if name not in known and _carries(value):
            raise TypeError(
                f"HFAttention got {name}= ({_described(value)}), a keyword it does not know: it "
                "reads hidden_states, position_embeddings, attention_mask, position_ids and the "
                "cache (past_key_values= or cache=), and needs nothing of "
                f"{', '.join(IGNORED_KEYWORDS)}; a tensor or cache under another name would be "
                "dropped. Call the model without it, or restore_attention(model) to run "
                "transformers' own layers"
            )


def _with_transformers_names(
    module: HFAttention, state: dict[str, Tensor], prefix: str, metadata: dict
) -> None:
    """``state_dict``'s post-hook: ``module.attention``'s parameters under the names of the
    layer it replaced (``W_q.weight`` to ``q_proj.weight``, Phi-3's three into ``qkv_proj``),
    so that what is saved loads into plain transformers; what cannot be named is refused."""
    ours = prefix + "attention."
    names = mha.interop._hf_names(module.attention, back=True)  # W_q -> q_proj
    keys = [key for key in state if key.startswith(ours)]
    cannot = []
    for key in keys:
        head, _, rest = key[len(ours) :].partition(".")
        split = head in names and names[head] in mha.interop._HF_SPLIT
        if head not in names or (module._fused and split and rest not in ("weight", "bias")):
            cannot.append(key)
    if cannot:
        raise ValueError(
            f"{prefix or 'this layer'}: {', '.join(cannot)} cannot be written under the names "
            f"of {module.hf_class.__name__}: transformers would not load "
            f"{'them' if len(cannot) > 1 else 'it'}. restore_attention(model) first (merge an "
            "adapter into the weights before), then state_dict or save_pretrained"
        )
    theirs = {}
    for key in keys:
        head, dot, rest = key[len(ours) :].partition(".")
        theirs[f"{mha.interop._renamed(head, names)}{dot}{rest}"] = state.pop(key)
    theirs = mha.interop._fuse(module._replaced(), theirs)
    state.update({prefix + key: value for key, value in theirs.items()})


def _from_transformers_names(
    module: HFAttention,
    state: dict[str, Tensor],
    prefix: str,
    metadata: dict,
    strict: bool,
    missing: list[str],
    unexpected: list[str],
    errors: list[str],
) -> None:
    """``load_state_dict``'s pre-hook: parameters under the names of the layer replaced (a
    swapped model's ``state_dict``, or a plain transformers checkpoint) renamed to
    ``module.attention``'s (Phi-3's ``qkv_proj`` split into ``W_q``, ``W_k`` and ``W_v``).
    Keys that already have ``mha``'s names (``attention.``) load as they are; a key of neither
    is left for ``load_state_dict`` to report."""
    ours = prefix + "attention."
    keys = [key for key in state if key.startswith(prefix)]
    if any(key.startswith(ours) for key in keys):
        return
    names = mha.interop._hf_names(module.attention)  # q_proj -> W_q
    theirs = {key[len(prefix) :]: state.pop(key) for key in keys}
    for key, value in mha.interop._split(module._replaced(), theirs).items():
        head, dot, rest = key.partition(".")
        if head in names:
            key = f"attention.{mha.interop._renamed(head, names)}{dot}{rest}"
        state[prefix + key] = value
