"""Multi-head latent attention (MLA, 多头潜在注意力): DeepSeek-V2 and V3's attention.

MLA caches, per position, one compressed latent vector of ``kv_lora_rank`` dims shared by every
head, plus one rotary key part of ``qk_rope_head_dim`` dims, also shared; the heads' keys and
values are projected up from the latent when attention needs them. The position goes into a
separate, decoupled part of each query and key (rotated by RoPE, interleaved in DeepSeek's
weights) because a rotation between the latent and the up-projection would stop the
up-projection from being folded into the query (*absorbed*): with ``absorb=True`` a step never
expands the cache into keys and values, it scores the queries against the latents directly.

Shape comments use these names: ``q_len`` positions of ``x``; ``k_len`` positions attended over
(``q_len`` plus what the cache held); ``heads_num`` heads; ``nope_dims`` (``qk_nope_head_dim``)
and ``rope_dims`` (``qk_rope_head_dim``) the two parts of a query or key head; ``v_dims``
(``v_head_dim``) a value head; ``kv_rank`` (``kv_lora_rank``) the latent; ``q_rank``
(``q_lora_rank``) the queries' low-rank bottleneck.

Examples:
    >>> import torch
    >>> from mha.mla import MLA, LatentCache
    >>> _ = torch.manual_seed(0)
    >>> m = MLA(32, 4, q_lora_rank=12, kv_lora_rank=8, qk_nope_head_dim=6,
    ...         qk_rope_head_dim=4, v_head_dim=5).eval()
    >>> cache = LatentCache()
    >>> m(torch.randn(2, 3, 32), is_causal=True, cache=cache).shape
    torch.Size([2, 3, 32])
    >>> cache.latent.shape, cache.rope_keys.shape  # [batch_size, len, kv_rank], [..., rope_dims]
    (torch.Size([2, 3, 8]), torch.Size([2, 3, 4]))
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from mha.cache import KVCache
from mha.checks import (
    check_flag,
    check_input,
    check_length,
    check_mask,
    check_number,
    check_positions,
)
from mha.masks import and_causal, causal_mask, float_mask_as
from mha.norm import RMSNorm
from mha.rope import RotaryEmbedding

__all__ = ["MLA", "LatentCache"]


class LatentCache(KVCache):
    """What MLA caches: per position one latent and one rotary key part, shared by every head.

    A [`KVCache`][mha.cache.KVCache] whose "keys" are the latents and whose "values" are the
    rotated key parts, each held as one head (``[batch_size, 1, len, ...]``), as transformers
    holds them too: the same buffers that grow by doubling (or ``max_len``), the same ``crop``,
    ``reorder``, ``reset`` and ``to``, the same care for autograd and inference mode.

    Args:
        max_len: as for [`KVCache`][mha.cache.KVCache].
        rollback: as for [`KVCache`][mha.cache.KVCache] (``MLA`` has no sliding window: it keeps
            nothing more).
        static: ``False``: ``MLA`` refuses a static latent cache (``max_len`` preallocates).

    Attributes:
        latent: ``[batch_size, len, kv_lora_rank]``, or ``None`` before the first call.
        rope_keys: ``[batch_size, len, qk_rope_head_dim]``, rotated already; or ``None``.

    Examples:
        >>> cache = LatentCache()
        >>> cache.append(torch.zeros(1, 3, 8), torch.zeros(1, 3, 4))
        >>> len(cache), cache.latent.shape, cache.keys.shape
        (3, torch.Size([1, 3, 8]), torch.Size([1, 1, 3, 8]))

    中文:
        MLA 缓存的内容：每个位置一个潜在向量和一段旋转过的键，所有头共用。

        它是一个 [`KVCache`][mha.cache.KVCache]，"键"是潜在向量，"值"是旋转过的那段键，各自当作
        一个头存放（``[batch_size, 1, len, ...]``，transformers 也是这样存的）：同样按倍增（或
        ``max_len``）分配的缓冲区，同样的 ``crop``、``reorder``、``reset`` 和 ``to``，对自动求导
        和推理模式的处理也相同。

        参数：
            max_len: 与 [`KVCache`][mha.cache.KVCache] 相同。
            rollback: 与 [`KVCache`][mha.cache.KVCache] 相同（``MLA`` 没有滑动窗口，不会多留位置）。
            static: ``False``：``MLA`` 不接受静态的潜在缓存（要预先分配，用 ``max_len``）。

        属性：
            latent: ``[batch_size, len, kv_lora_rank]``，第一次调用之前是 ``None``。
            rope_keys: ``[batch_size, len, qk_rope_head_dim]``，已经旋转过；或 ``None``。
    """

    _SIZES = "[batch_size, kv_lora_rank, qk_rope_head_dim]"

    def _sizes(self, keys: Tensor, values: Tensor) -> tuple[int, ...]:
        return (keys.size(0), keys.size(3), values.size(3))

    def _check_pair(self, keys: Tensor, values: Tensor) -> None:
        if keys.shape[:3] != values.shape[:3]:
            raise ValueError(
                f"latent {[keys.size(0), keys.size(2), keys.size(3)]} and rope_keys "
                f"{[values.size(0), values.size(2), values.size(3)]} must agree on "
                "[batch_size, new_len]"
            )

    def __repr__(self) -> str:
        if self._keys is None:
            return f"LatentCache(len={len(self)})"
        return (
            f"LatentCache(len={len(self)}, batch_size={self._keys.size(0)}, "
            f"kv_lora_rank={self._keys.size(3)}, qk_rope_head_dim={self._values.size(3)}, "
            f"dtype={self._keys.dtype})"
        )

    @property
    def latent(self) -> Tensor | None:
        return None if self.keys is None else self.keys[:, 0]

    @property
    def rope_keys(self) -> Tensor | None:
        return None if self.values is None else self.values[:, 0]

    def append(self, latent: Tensor, rope_keys: Tensor, *, queries: Tensor | None = None) -> None:
        """Append new positions: ``latent`` ``[batch_size, new_len, kv_lora_rank]`` and
        ``rope_keys`` ``[batch_size, new_len, qk_rope_head_dim]``.

        Args:
            latent: the new positions' latents.
            rope_keys: their rotated key parts.
            queries: the queries that will attend over the cache, as for
                [`KVCache.append`][mha.cache.KVCache.append].

        Raises:
            ValueError: the two disagree on batch size or length, or differ from what the cache
                holds.
            TypeError: their dtypes differ from each other or from the cache's.

        中文:
            追加新的位置：``latent`` 为 ``[batch_size, new_len, kv_lora_rank]``，``rope_keys`` 为
            ``[batch_size, new_len, qk_rope_head_dim]``。

            参数：
                latent: 新位置的潜在向量。
                rope_keys: 它们旋转过的键。
                queries: 之后要对缓存做注意力的查询，与
                    [`KVCache.append`][mha.cache.KVCache.append] 相同。

            异常：
                ValueError: 两者的批大小或长度不一致，或者与缓存里的不一致。
                TypeError: 两者的 dtype 不同，或者与缓存里的不同。
        """
        super().append(latent[:, None], rope_keys[:, None], queries=queries)


# A saved LatentCache loads with torch.load's default weights_only=True, as a KVCache does.
torch.serialization.add_safe_globals([LatentCache])


class MLA(nn.Module):
    """Multi-head latent attention, as DeepSeek-V2 and V3 publish it.

    Args:
        hidden_size: model width.
        heads_num: number of heads.
        q_lora_rank: the queries' low-rank bottleneck (DeepSeek-V3: 1536): ``W_dq`` down to it,
            an RMSNorm, ``W_uq`` up to the heads. ``None``: one projection ``W_q`` (the smaller
            models, DeepSeek-V2-Lite).
        kv_lora_rank: the latent's width (DeepSeek-V3: 512).
        qk_nope_head_dim: the part of a query or key head without position (128 in V3).
        qk_rope_head_dim: the rotated part of a query or key head, one per position for every
            head's key (64 in V3).
        v_head_dim: a value head's width (128 in V3).
        rope: the [`RotaryEmbedding`][mha.rope.RotaryEmbedding] of the rotated parts; ``None``
            means ``RotaryEmbedding(qk_rope_head_dim, interleaved=True)``.
        scale: what ``q·k`` is multiplied by; ``None`` means ``1 / sqrt(qk_nope_head_dim +
            qk_rope_head_dim)`` (DeepSeek multiplies it by YaRN's ``mscale`` squared:
            [`from_hf`][mha.interop.from_hf] reads it from the config).
        bias: whether ``W_dq``, ``W_dkv`` and ``W_o`` have a bias (``attention_bias``).
        norm_eps: the ``eps`` of the two RMSNorms.

    Raises:
        TypeError: a size is not an ``int``, ``bias`` not a ``bool``, ``scale`` or ``norm_eps``
            not a number.
        ValueError: a size is not positive, ``scale`` or ``norm_eps`` is not a finite positive
            number, or ``rope`` rotates another width than ``qk_rope_head_dim``.

    中文:
        多头潜在注意力，按 DeepSeek-V2、V3 发表的结构实现。

        参数：
            hidden_size: 隐藏层维度。
            heads_num: 头数。
            q_lora_rank: 查询的低秩瓶颈（DeepSeek-V3 是 1536）：``W_dq`` 降到这么宽，做一次
                RMSNorm，``W_uq`` 再升到各个头。``None``：只用一个投影 ``W_q``（较小的模型，如
                DeepSeek-V2-Lite）。
            kv_lora_rank: 潜在向量的宽度（DeepSeek-V3 是 512）。
            qk_nope_head_dim: 查询或键的一个头里不带位置的部分（V3 是 128）。
            qk_rope_head_dim: 查询或键的一个头里旋转的部分；键的这部分每个位置只有一份，所有头
                共用（V3 是 64）。
            v_head_dim: 值的一个头的宽度（V3 是 128）。
            rope: 旋转部分用的 [`RotaryEmbedding`][mha.rope.RotaryEmbedding]；``None`` 表示
                ``RotaryEmbedding(qk_rope_head_dim, interleaved=True)``。
            scale: ``q·k`` 要乘的系数；``None`` 表示 ``1 / sqrt(qk_nope_head_dim +
                qk_rope_head_dim)``（DeepSeek 还要乘 YaRN 的 ``mscale`` 的平方：
                [`from_hf`][mha.interop.from_hf] 从配置里读出）。
            bias: ``W_dq``、``W_dkv`` 和 ``W_o`` 是否带偏置（``attention_bias``）。
            norm_eps: 两个 RMSNorm 的 ``eps``。

        异常：
            TypeError: 尺寸不是 ``int``，``bias`` 不是 ``bool``，``scale`` 或 ``norm_eps`` 不是数。
            ValueError: 尺寸不是正数，``scale`` 或 ``norm_eps`` 不是有限的正数，或者 ``rope``
                旋转的宽度不等于 ``qk_rope_head_dim``。
    """

    def __init__(
        self,
        hidden_size: int,
        heads_num: int,
        *,
        q_lora_rank: int | None = None,
        kv_lora_rank: int,
        qk_nope_head_dim: int,
        qk_rope_head_dim: int,
        v_head_dim: int,
        rope: RotaryEmbedding | None = None,
        scale: float | None = None,
        bias: bool = False,
        norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        sizes = dict(
            hidden_size=hidden_size,
            heads_num=heads_num,
            kv_lora_rank=kv_lora_rank,
            qk_nope_head_dim=qk_nope_head_dim,
            qk_rope_head_dim=qk_rope_head_dim,
            v_head_dim=v_head_dim,
        )
        if q_lora_rank is not None:
            sizes["q_lora_rank"] = q_lora_rank
        for name, value in sizes.items():
            check_length(name, value, positive=True)
        check_flag("bias", bias)
        for name, value in (("scale", scale), ("norm_eps", norm_eps)):
            if value is not None:
                check_number(name, value, positive=True, finite=True)
        rope = RotaryEmbedding(qk_rope_head_dim, interleaved=True) if rope is None else rope
        if not isinstance(rope, RotaryEmbedding) or rope.rotary_dims != qk_rope_head_dim:
            raise ValueError(
                f"rope must be a RotaryEmbedding of qk_rope_head_dim ({qk_rope_head_dim}) dims"
            )
        self.hidden_size, self.heads_num = hidden_size, heads_num
        self.q_lora_rank, self.kv_lora_rank = q_lora_rank, kv_lora_rank
        self.nope_dims, self.rope_dims, self.v_dims = qk_nope_head_dim, qk_rope_head_dim, v_head_dim
        self.scale = (
            (qk_nope_head_dim + qk_rope_head_dim) ** -0.5 if scale is None else float(scale)
        )
        self.rope = rope
        q_head = qk_nope_head_dim + qk_rope_head_dim
        # 查询：低秩（降维、归一化、升维）或一个投影
        # Queries: low rank (down, norm, up) or one projection
        if q_lora_rank is None:
            self.W_q = nn.Linear(hidden_size, heads_num * q_head, bias=False)
        else:
            self.W_dq = nn.Linear(hidden_size, q_lora_rank, bias=bias)
            self.q_norm = RMSNorm(q_lora_rank, eps=norm_eps)
            self.W_uq = nn.Linear(q_lora_rank, heads_num * q_head, bias=False)
        # 键和值：降到一个潜在向量，外加一段所有头共用的旋转键；再升维到每个头的键（不含位置的部分）和值
        # Keys and values: down to one latent plus one rotary key part shared by every head; up
        # to each head's key (the part without position) and value
        self.W_dkv = nn.Linear(hidden_size, kv_lora_rank + qk_rope_head_dim, bias=bias)
        self.kv_norm = RMSNorm(kv_lora_rank, eps=norm_eps)
        self.W_ukv = nn.Linear(
            kv_lora_rank, heads_num * (qk_nope_head_dim + v_head_dim), bias=False
        )
        self.W_o = nn.Linear(heads_num * v_head_dim, hidden_size, bias=bias)

    def extra_repr(self) -> str:
        """What ``print`` shows between the parentheses: the sizes of the heads and the ranks.

        Returns:
            ``hidden_size, heads_num`` and the ranks and head dims as ``name=value``, then the
                scale (``rope`` is a submodule, printed on a line of its own).

        中文:
            ``print`` 在括号里显示的内容：各头的大小和各个秩。

            返回：
                ``hidden_size, heads_num``，各个秩和各部分的维度，写成 ``name=value``，然后是缩放
                    系数（``rope`` 是子模块，单独占一行）。
        """
        return (
            f"{self.hidden_size}, {self.heads_num}, q_lora_rank={self.q_lora_rank}, "
            f"kv_lora_rank={self.kv_lora_rank}, qk_nope_head_dim={self.nope_dims}, "
            f"qk_rope_head_dim={self.rope_dims}, v_head_dim={self.v_dims}, "
            f"scale={round(self.scale, 6)}"
        )

    def forward(
        self,
        x: Tensor,
        *,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        cache: LatentCache | None = None,
        positions: Tensor | None = None,
        absorb: bool = False,
    ) -> Tensor:
        """Attend from each position of ``x`` over the positions of ``x`` (and the cache's).

        Args:
            x: ``[batch_size, q_len, hidden_size]``.
            attn_mask: boolean (``True`` = may attend) or floating point (added), broadcastable
                to ``[batch_size, heads_num, q_len, k_len]``.
            is_causal: apply the lower-right aligned causal mask, on top of ``attn_mask``.
            cache: a [`LatentCache`][mha.mla.LatentCache] to extend and attend over.
            positions: ``[q_len]`` or ``[batch_size, q_len]``, each in ``0 .. 2**24`` (the
                integers float32 holds exactly); ``None`` means ``len(cache) + arange(q_len)``.
            absorb: fold the key up-projection into the queries and the value up-projection
                into the output, so the cache's latents are never expanded: the same output.

        Returns:
            ``[batch_size, q_len, hidden_size]``.

        Raises:
            TypeError: ``x``, the mask or ``positions`` has the wrong type or dtype.
            ValueError: ``x``, the mask or ``positions`` has the wrong shape or device, or a
                position on the CPU lies outside ``0 .. 2**24`` (values are read on the CPU only,
                and not under ``torch.compile``: there reading them would wait for the device or
                break the graph).

        中文:
            让 ``x`` 的每个位置关注 ``x``（以及缓存里）的各个位置。

            参数：
                x: 输入，``[batch_size, q_len, hidden_size]``。
                attn_mask: 布尔掩码（``True`` 表示可以关注）或浮点掩码（加到分数上），能广播到
                    ``[batch_size, heads_num, q_len, k_len]``。
                is_causal: 加上右下对齐的因果掩码，与 ``attn_mask`` 同时生效。
                cache: 一个 [`LatentCache`][mha.mla.LatentCache]：追加这次的潜在向量，再对全部
                    位置做注意力。
                positions: ``[q_len]`` 或 ``[batch_size, q_len]``，每个都在 0–``2**24`` 之内
                    （float32 能精确表示的整数）；``None`` 表示 ``len(cache) + arange(q_len)``。
                absorb: 把键的升维投影并进查询、值的升维投影并进输出，缓存里的潜在向量始终不展开：
                    输出相同。

            返回：
                输出，``[batch_size, q_len, hidden_size]``。

            异常：
                TypeError: ``x``、掩码或 ``positions`` 的类型或 dtype 不对。
                ValueError: ``x``、掩码或 ``positions`` 的形状或设备不对，或者 CPU 上的某个位置
                    不在 0–``2**24`` 之内（只在 CPU 上、不在 ``torch.compile`` 之下读取这些值：
                    别处读取要等设备，或者会打断计算图）。
        """
        check_input(x, self.hidden_size, self.W_dkv.weight)
        check_flag("is_causal", is_causal)
        check_flag("absorb", absorb)
        if cache is not None and not isinstance(cache, LatentCache):
            raise TypeError(f"cache must be a mha.mla.LatentCache, got {type(cache).__name__}")
        if cache is not None and cache.static:
            raise ValueError(
                "MLA's LatentCache has no static mode: create it without static=True "
                "(max_len= preallocates its buffers)"
            )
        if cache is not None:
            cache.claim(self, "x")  # one cache per layer, as for KVCache
        if positions is not None:
            check_positions(positions, x)
        held = 0 if cache is None else len(cache)
        b, q_len = x.size(0), x.size(1)
        if attn_mask is not None:
            check_mask(attn_mask, (b, self.heads_num, q_len, held + q_len), x.device)

        # 查询：每个头分成不带位置的部分和旋转的部分
        # Queries: each head split into its part without position and its rotated part
        if self.q_lora_rank is None:
            q = self.W_q(x)  # [batch_size, q_len, heads_num * (nope_dims + rope_dims)]
        else:
            q = self.q_norm(self.W_dq(x))  # [batch_size, q_len, q_rank]
            q = self.W_uq(q)  # [batch_size, q_len, heads_num * (nope_dims + rope_dims)]
        q = q.view(b, q_len, self.heads_num, self.nope_dims + self.rope_dims).transpose(1, 2)  # [batch_size, heads_num, q_len, nope_dims + rope_dims]
        q_nope = q[..., : self.nope_dims]  # [batch_size, heads_num, q_len, nope_dims]
        q_rope = q[..., self.nope_dims :]  # [batch_size, heads_num, q_len, rope_dims]

        # 键和值：每个位置一个潜在向量（归一化）和一段旋转键，所有头共用
        # Keys and values: per position one latent (normalised) and one rotary key part, shared
        compressed = self.W_dkv(x)  # [batch_size, q_len, kv_rank + rope_dims]
        latent = self.kv_norm(compressed[..., : self.kv_lora_rank])  # [batch_size, q_len, kv_rank]
        k_rope = compressed[..., self.kv_lora_rank :]  # [batch_size, q_len, rope_dims]

        # 旋转位置编码只作用在旋转部分：查询的每个头，和所有头共用的那一段键
        # RoPE turns the rotated parts only: each query head's, and the one shared key part
        if positions is None:
            positions = torch.arange(held, held + q_len, device=x.device)  # [q_len]
        turns = self.rope(positions)  # cos and sin, each [..., q_len, rope_dims]
        q_rope = self.rope.rotate(q_rope, *turns)  # [batch_size, heads_num, q_len, rope_dims]
        k_rope = self.rope.rotate(k_rope[:, None], *turns)[:, 0]  # [batch_size, q_len, rope_dims]

        # 缓存只存潜在向量和旋转键
        # The cache holds the latents and the rotary keys only
        if cache is not None:
            # 自动混合精度下 RMSNorm 返回 float32：潜在向量换成旋转键的 dtype（后面的矩阵乘法在
            # autocast 下本来就会这样转换）
            # Under autocast an RMSNorm returns float32: the latents take the rotary keys' dtype
            # (the cast the matrix products after it make under autocast anyway)
            cache.append(latent.to(k_rope.dtype), k_rope, queries=q)
            latent = cache.latent  # [batch_size, k_len, kv_rank]
            k_rope = cache.rope_keys  # [batch_size, k_len, rope_dims]

        # 升维矩阵按头拆开：每个头的键（不含位置的部分）和值各一块
        # The up-projection per head: one block for its key (without position), one for its value
        W_ukv = self.W_ukv.weight.view(self.heads_num, self.nope_dims + self.v_dims, self.kv_lora_rank)  # [heads_num, nope_dims + v_dims, kv_rank]
        if absorb:
            # 吸收：查询先乘键的升维矩阵，直接与潜在向量打分；值的升维矩阵留到加权求和之后
            # Absorbed: the queries times the key up-projection score the latents directly; the
            # value up-projection waits until after the weighted sum
            W_uk = W_ukv[:, : self.nope_dims]  # [heads_num, nope_dims, kv_rank]
            W_uv = W_ukv[:, self.nope_dims :]  # [heads_num, v_dims, kv_rank]
            q_latent = torch.matmul(q_nope, W_uk)  # [batch_size, heads_num, q_len, kv_rank]
            query = torch.cat([q_latent, q_rope], dim=-1)  # [batch_size, heads_num, q_len, kv_rank + rope_dims]
            # 键只有一个“头”：潜在向量接上旋转键，所有查询头共用
            # The keys have one "head": latent then rotary key, shared by every query head
            keys = torch.cat([latent, k_rope], dim=-1)[:, None]  # [batch_size, 1, k_len, kv_rank + rope_dims]
            if attn_mask is None and (not is_causal or q_len == 1):
                # 没有掩码（比如解码的一步）：把各查询头并进查询的位置这一维，一次算完（多查询注意力的
                # 做法；CPU 上 enable_gqa 会先把键复制到每个头）
                # No mask (a decoding step, say): the query heads fold into the query positions
                # and one call does them all (multi-query attention's way; on the CPU,
                # enable_gqa would first copy the keys to every head)
                query = query.reshape(b, 1, self.heads_num * q_len, -1)  # [batch_size, 1, heads_num * q_len, kv_rank + rope_dims]
                out = F.scaled_dot_product_attention(query, keys, latent[:, None], scale=self.scale)  # [batch_size, 1, heads_num * q_len, kv_rank]
                out = out.view(b, self.heads_num, q_len, -1)  # [batch_size, heads_num, q_len, kv_rank]
            else:
                # 有掩码：键和值按头展开成视图（不复制），掩码原样使用
                # With a mask: keys and values expanded to the heads as views (no copy), the mask
                # as it is
                keys = keys.expand(-1, self.heads_num, -1, -1)  # [batch_size, heads_num, k_len, kv_rank + rope_dims]
                latents = latent[:, None].expand(-1, self.heads_num, -1, -1)  # [batch_size, heads_num, k_len, kv_rank]
                out = self._attend(query, keys, latents, attn_mask, is_causal)  # [batch_size, heads_num, q_len, kv_rank]
            out = torch.matmul(out, W_uv.transpose(1, 2))  # [batch_size, heads_num, q_len, v_dims]
        else:
            # 展开：每个头的键（不含位置的部分）和值从潜在向量升维得到，旋转键复制到每个头
            # Expanded: each head's key (the part without position) and value come up from the
            # latents; the rotary key part is repeated for every head
            kv = self.W_ukv(latent)  # [batch_size, k_len, heads_num * (nope_dims + v_dims)]
            kv = kv.view(b, -1, self.heads_num, self.nope_dims + self.v_dims).transpose(1, 2)  # [batch_size, heads_num, k_len, nope_dims + v_dims]
            k_nope = kv[..., : self.nope_dims]  # [batch_size, heads_num, k_len, nope_dims]
            v = kv[..., self.nope_dims :]  # [batch_size, heads_num, k_len, v_dims]
            k_rope = k_rope[:, None].expand(-1, self.heads_num, -1, -1)  # [batch_size, heads_num, k_len, rope_dims]
            k = torch.cat([k_nope, k_rope], dim=-1)  # [batch_size, heads_num, k_len, nope_dims + rope_dims]
            query = torch.cat([q_nope, q_rope], dim=-1)  # [batch_size, heads_num, q_len, nope_dims + rope_dims]
            out = self._attend(query, k, v, attn_mask, is_causal)  # [batch_size, heads_num, q_len, v_dims]
        out = out.transpose(1, 2).reshape(b, q_len, self.heads_num * self.v_dims)  # [batch_size, q_len, heads_num * v_dims]
        return self.W_o(out)

    def _attend(
        self, query: Tensor, keys: Tensor, values: Tensor, attn_mask: Tensor | None, is_causal: bool
    ) -> Tensor:
        """``scaled_dot_product_attention`` with the mask as the caller gave it, and the causal
        mask alone on a square matrix as the kernel's own ``is_causal`` (no mask tensor built)."""
        q_len, k_len = query.size(2), keys.size(2)
        if is_causal and attn_mask is None and q_len == k_len:
            return F.scaled_dot_product_attention(query, keys, values, is_causal=True, scale=self.scale)
        mask = self._mask(attn_mask, is_causal, q_len, k_len, query)  # [..., k_len]
        return F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=self.scale)

    def _mask(
        self, attn_mask: Tensor | None, is_causal: bool, q_len: int, k_len: int, x: Tensor
    ) -> Tensor | None:
        """``attn_mask`` and the causal mask combined (``None`` if neither)."""
        if attn_mask is not None and attn_mask.dtype != torch.bool:
            attn_mask = float_mask_as(attn_mask, x.dtype)  # [..., k_len]
        if not is_causal or (attn_mask is None and q_len == 1):
            return attn_mask  # a single (newest) query under the causal mask alone sees every key
        return and_causal(attn_mask, causal_mask(q_len, k_len, device=x.device))

