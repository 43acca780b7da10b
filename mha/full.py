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

This file holds ``MHA`` and its ``Options``; the masks, the caches and the norm it uses have
files of their own (``mha/masks.py``, ``mha/cache.py``, ``mha/norm.py``), and the argument checks
``mha/checks.py``. Their public names are re-exported here: ``from mha.full import KVCache``
imports the same class as ``from mha.cache import KVCache``.

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

# Why this file stays whole (1,400 lines): it is one class, the full MHA, with its options and the
# two paths of its forward; the full page includes its sections in this order, and half the lines
# are the bilingual docstrings of its arguments. A shorter forward is issue 46's item 2.

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from mha.cache import KVCache, ModelCache
from mha.checks import (
    check_flag,
    check_input,
    check_length,
    check_mask,
    check_number,
    check_positions,
    check_rotations,
    check_sizes,
)
from mha.masks import and_causal, causal_mask, chunk_mask, float_mask_as, held_mask, padding_mask
from mha.norm import RMSNorm
from mha.rope import RotaryEmbedding

__all__ = [
    "MHA",
    "KVCache",
    "ModelCache",
    "Options",
    "RMSNorm",
    "causal_mask",
    "chunk_mask",
    "padding_mask",
]

# A cache saved when its classes lived in this file names them mha.full.KVCache and
# mha.full.ModelCache: torch.load(weights_only=True) still accepts those names.
torch.serialization.add_safe_globals(
    [(KVCache, "mha.full.KVCache"), (ModelCache, "mha.full.ModelCache")]
)


PROJECTIONS = ("W_q", "W_k", "W_v", "W_o")
# The flavours of q/k norm named by a string (True is Qwen3's): Gemma 3's, OLMo 2's, Llama 4's
QK_NORMS = ("gemma", "projection", "weightless")
_BIAS_SAID = {(): False, PROJECTIONS: True}  # how print shows MHA.bias, a tuple of names
# PyTorch's fused kernel on the CPU gives zeros for a row whose scores are all NaN only when the
# call has fewer keys than one vector of lanes: measured with torch 2.13 on an AVX2 CPU, k_len <= 7
# in float32, bfloat16 and float16, <= 3 in float64, and NaN itself from 8 keys on (an AVX-512 CPU
# has twice the lanes: <= 15). The fast path checks for NaN below this many keys, four times the
# widest vector, and runs the bare kernel from here on (decoding over a long cache, long prompts)
NAN_CHECKED_BELOW = 64


def _check_qk_norm(qk_norm: object) -> None:
    """``qk_norm`` is ``False``, ``True`` (Qwen3's RMSNorm), ``"gemma"`` (Gemma 3's),
    ``"projection"`` (OLMo 2's) or ``"weightless"`` (Llama 4's)."""
    if isinstance(qk_norm, str) and qk_norm not in QK_NORMS:
        raise ValueError(
            f"qk_norm must be False, True, 'gemma', 'projection' or 'weightless', got {qk_norm!r}"
        )
    if not isinstance(qk_norm, bool | str):
        raise TypeError(
            "qk_norm must be a bool, 'gemma', 'projection' or 'weightless', got "
            f"{type(qk_norm).__name__} ({qk_norm!r})"
        )


def _check_temperature(temperature: object) -> None:
    """``temperature`` is ``(attn_scale, floor_scale)``, two positive numbers (Llama 4's)."""
    if not isinstance(temperature, tuple) or len(temperature) != 2:
        raise TypeError(
            "temperature must be a tuple (attn_scale, floor_scale) of two numbers, got "
            f"{type(temperature).__name__} ({temperature!r})"
        )
    for name, value in zip(("attn_scale", "floor_scale"), temperature, strict=True):
        check_number(f"temperature's {name}", value, positive=True, finite=True)


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



@dataclass(frozen=True)
class Options:
    """The options of [`MHA`][mha.full.MHA], declared once: its keyword arguments, in order.

    ``MHA(**vars(options))`` and [`MHA.from_options`][mha.full.MHA.from_options] build a module
    from them; [`MHA.options`][mha.full.MHA.options] gives a module's back, resolved (no
    ``None`` where a value follows from the others, ``bias`` as the names of the projections
    that have one). Every consumer reads this one declaration: splitting the heads across ranks
    copies it with the local head counts (``mha.parallel.heads_on_rank``), ``to_torch`` maps or
    refuses each field by name, ``from_hf`` fills it from a transformers module, and the
    shape-comment checker's runs set each field.

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
        chunk: as in [`MHA`][mha.full.MHA].
        softcap: as in [`MHA`][mha.full.MHA].
        sinks: as in [`MHA`][mha.full.MHA].
        gate: as in [`MHA`][mha.full.MHA].
        temperature: as in [`MHA`][mha.full.MHA].

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
        字段地对应或者点名拒绝；``from_hf`` 从 transformers 的模块填写它。

        各字段就是 [`MHA`][mha.full.MHA] 的参数，含义和默认值都相同。

        参数：
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
            chunk: 与 [`MHA`][mha.full.MHA] 相同。
            softcap: 与 [`MHA`][mha.full.MHA] 相同。
            sinks: 与 [`MHA`][mha.full.MHA] 相同。
            gate: 与 [`MHA`][mha.full.MHA] 相同。
            temperature: 与 [`MHA`][mha.full.MHA] 相同。
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
    qk_norm: bool | str = False
    norm_eps: float = 1e-6
    rope: RotaryEmbedding | None = None
    window: int | None = None
    chunk: int | None = None
    softcap: float | None = None
    sinks: bool = False
    gate: bool = False
    temperature: tuple[float, float] | None = None

    def resolved(self) -> Options:
        """The same options with what follows from the others filled in: ``kv_heads``,
        ``context_size`` and ``head_size`` as numbers, ``bias`` as a tuple of names.

        Returns:
            A new ``Options`` (checked as ``MHA`` checks its arguments).

        中文:
            同样的选项，把能由其他选项推出的填上：``kv_heads``、``context_size``、``head_size``
            换成数，``bias`` 换成名字的元组。

            返回：
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

            返回：
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
            ``False`` runs the attention written out, as on the site's walkthrough. With
            ``softcap`` or ``sinks`` the written-out path runs either way: the fused kernels
            cannot cap the scores or add a sink to the softmax.
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
            (Qwen3): ``q_norm`` and ``k_norm``, each with ``head_size`` weights; ``"gemma"``
            for Gemma 3's flavour, which scales by ``1 + weight``
            ([`RMSNorm`][mha.norm.RMSNorm]'s ``plus_one``); ``"projection"`` for OLMo 2's, one
            RMSNorm over the whole projection (all heads together, before the split into heads):
            ``q_norm`` with ``heads_num * head_size`` weights, ``k_norm`` with
            ``kv_heads * head_size``; ``"weightless"`` for Llama 4's, an RMSNorm of each head
            without a weight, after the rotation.
        norm_eps: the ``eps`` of those norms (``rms_norm_eps`` in the configs).
        rope: a [`RotaryEmbedding`][mha.rope.RotaryEmbedding]: the queries and the new keys are
            rotated by their positions before the keys enter the cache (self-attention only).
        window: sliding-window attention (Mistral): with ``is_causal``, each query sees only the
            ``window`` latest positions, itself included; a cache then keeps only the
            ``window - 1`` latest positions after each call.
        chunk: chunked attention (Llama 4's ``attention_chunk_size``): with ``is_causal``, the
            positions fall into chunks of ``chunk`` (``0 .. chunk - 1``, ``chunk ..``), and a
            query sees only the keys of its own chunk, up to itself; a cache frees each finished
            chunk, holding ``len(cache) % chunk`` positions after a call. With ``positions`` the
            chunks count by them (a left-padded row's from its first token, as transformers'
            do), and the cache holds the ``chunk - 1`` latest. Not with ``window``.
        softcap: attention logit soft-capping (Gemma 2's ``attn_logit_softcapping``): each
            scaled score ``s`` becomes ``tanh(s / softcap) * softcap`` before the mask, so every
            score lies in ``(-softcap, softcap)``. ``None`` (the default) leaves the scores as
            they are. The fused kernels take no such cap: with one, the written-out path runs
            even when ``fast`` is ``True``.
        sinks: attention sinks (gpt-oss): a learned logit per query head, ``sink_logits``
            (``heads_num`` of them, starting at 0), joins each row of scores in the softmax's
            denominator and is dropped after it, so a query's weights sum to less than 1 (the
            rest goes to no value). The fused kernels take no such logit: with sinks, the
            written-out path runs even when ``fast`` is ``True``.
        gate: a gated output (Qwen3-Next): ``W_q`` gives each head its query and then a gate of
            as many values (``2 * head_size`` rows a head, in Qwen3-Next's ``q_proj`` layout,
            so ``W_q.weight`` is ``[heads_num * 2 * head_size, hidden_size]``), and each head's
            output is multiplied by ``sigmoid(gate)`` before ``W_o``. The gate multiplies the
            output after attention, so the fused kernels still run on the fast path.
        temperature: Llama 4's attention temperature tuning, ``(attn_scale, floor_scale)``: the
            query at index ``p`` of the cache (``len(cache)`` and on: a left-padded row's
            padding counted, whatever ``positions`` says, as Llama 4 counts) is multiplied by
            ``log1p(floor((p + 1) / floor_scale)) * attn_scale + 1``, computed in float32 as
            Llama 4 does, so far positions attend more sharply (self-attention only). ``None``
            (the default) scales no query.

    Raises:
        TypeError: a size is not an ``int``, ``dropout`` or ``softcap`` not a number, ``bias``
            neither a ``bool`` nor a tuple of names, ``fast``, ``sinks`` or ``gate`` not a
            ``bool``, ``qk_norm`` neither a ``bool`` nor a string, ``rope`` not a
            ``RotaryEmbedding``, ``temperature`` not a tuple of two numbers.
        ValueError: a size is not positive, ``hidden_size`` is not divisible by ``heads_num``
            (without ``head_size``), ``heads_num`` not by ``kv_heads``, ``dropout`` is outside
            ``[0, 1)``, ``bias`` names another projection, ``scale``, ``norm_eps`` or
            ``softcap`` is not a finite positive number (``inf`` and ``nan`` included),
            ``qk_norm`` is a string other than ``"gemma"``, ``"projection"`` and
            ``"weightless"``, ``temperature`` holds a number that is not finite and positive,
            ``window`` and ``chunk`` are both given, or ``rope`` rotates more dimensions than a
            head has.

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

        从 ``head_size`` 起的参数是当下主流开源模型（Llama、Qwen、Mistral）用到的选项，默认全部
        关闭，所以纯享版（以及原文）的权重文件照样能加载。

        参数：
            hidden_size: 隐藏层维度，即输入最后一维的大小。
            heads_num: 查询的头数，必须整除 ``hidden_size``。
            kv_heads: 键和值的头数（分组查询注意力），必须整除 ``heads_num``。默认 ``None``
                表示与 ``heads_num`` 相同；取 1 就是多查询注意力。
            dropout: 把一个注意力权重置零的概率，只在训练模式下生效。
            bias: 四个线性层是否带偏置，或者带偏置的那几个投影的名字组成的元组（Qwen2：
                ``("W_q", "W_k", "W_v")``）。
            fast: ``True`` 调用 ``torch.nn.functional.scaled_dot_product_attention``（融合算子）；
                ``False`` 按网站逐行走读里的写法把注意力逐步算出来。有 ``softcap`` 或 ``sinks`` 时
                无论如何都走逐步计算的路径：融合算子没法给分数加上限，也没法在 softmax 里加汇点项。
            context_size: 交叉注意力中 ``context`` 的宽度，与 ``hidden_size`` 不同时给出（即
                ``nn.MultiheadAttention`` 的 ``kdim`` 和 ``vdim``）：``W_k`` 和 ``W_v`` 的输入是
                ``context_size`` 维，模块只能做交叉注意力。默认 ``None`` 表示 ``hidden_size``。
            head_size: 每个头的宽度，不等于 ``hidden_size // heads_num`` 时给出（Qwen3、Gemma）：
                各头拼接后是 ``heads_num * head_size`` 维，由 ``W_o`` 投影回 ``hidden_size``。
                默认 ``None`` 表示 ``hidden_size // heads_num``，此时必须能整除。
            scale: 分数 ``q·k`` 要乘的系数；默认 ``None`` 表示 ``1 / sqrt(head_size)``。
            qk_norm: 在旋转之前，对查询和键的每个头各做一次 RMSNorm（Qwen3）：``q_norm`` 和
                ``k_norm``，各有 ``head_size`` 个权重；取 ``"gemma"`` 时是 Gemma 3 的写法，乘的是
                ``1 + weight``（[`RMSNorm`][mha.norm.RMSNorm] 的 ``plus_one``）；取
                ``"projection"`` 时是 OLMo 2 的写法：在拆分成头之前，对整个投影（所有头一起）做
                一次 RMSNorm，``q_norm`` 有 ``heads_num * head_size`` 个权重，``k_norm`` 有
                ``kv_heads * head_size`` 个；取 ``"weightless"`` 时是 Llama 4 的写法：对每个头做没有
                权重的 RMSNorm，在旋转之后。
            norm_eps: 这两个归一化的 ``eps``（配置里的 ``rms_norm_eps``）。
            rope: 一个 [`RotaryEmbedding`][mha.rope.RotaryEmbedding]：查询和新的键在键存进缓存
                之前按位置旋转（只用于自注意力）。
            window: 滑动窗口注意力（Mistral）：与 ``is_causal`` 一起使用时，每个查询只看最近的
                ``window`` 个位置（包括它自己）；缓存在每次调用之后也只保留最近的 ``window - 1``
                个位置。
            chunk: 块内注意力（Llama 4 的 ``attention_chunk_size``）：与 ``is_causal`` 一起使用时，
                位置按 ``chunk`` 个一块划分（0–``chunk - 1``、``chunk`` 起……），查询只看得到自己
                那一块里、不晚于自己的键；缓存释放每个写完的块，调用之后只留 ``len(cache) % chunk``
                个位置。给了 ``positions`` 时按它们划分块（左填充的行从第一个真实位置数起，与
                transformers 相同），缓存留最近的 ``chunk - 1`` 个。不能与 ``window`` 同时使用。
            softcap: 注意力分数的软上限（Gemma 2 的 ``attn_logit_softcapping``）：缩放后的每个
                分数 ``s`` 在加掩码之前变成 ``tanh(s / softcap) * softcap``，于是每个分数都落在
                ``(-softcap, softcap)`` 之内。默认 ``None`` 表示分数保持原样。融合算子不接受这样的
                上限：有了它，即使 ``fast`` 为 ``True`` 也走逐步计算的路径。
            sinks: 注意力汇点（gpt-oss）：每个查询头一个学出来的 logit，即 ``sink_logits``（共
                ``heads_num`` 个，初始为 0），加进每行分数的 softmax 分母，算完再丢掉，于是一个查询
                的权重之和小于 1（其余的不落在任何值上）。融合算子不接受这样的 logit：有汇点项时，
                即使 ``fast`` 为 ``True`` 也走逐步计算的路径。
            gate: 门控输出（Qwen3-Next）：``W_q`` 给每个头先算出查询，再算出同样多的门控值（每个头
                ``2 * head_size`` 行，与 Qwen3-Next 的 ``q_proj`` 排法相同，所以 ``W_q.weight`` 是
                ``[heads_num * 2 * head_size, hidden_size]``），每个头的输出在进 ``W_o`` 之前乘上
                ``sigmoid(gate)``。门控乘在注意力算完之后的输出上，所以快速路径照样用融合算子。
            temperature: Llama 4 的注意力温度调节，``(attn_scale, floor_scale)``：位置 ``p``
                （缓存里的下标，从 ``len(cache)`` 数起：左填充的行连填充一起数，不看
                ``positions``，与 Llama 4 的数法相同）上的查询乘以
                ``log1p(floor((p + 1) / floor_scale)) * attn_scale + 1``，与 Llama 4 一样在 float32
                里算，于是越远的位置注意力越集中（只用于自注意力）。默认 ``None`` 表示不缩放查询。

        异常：
            TypeError: 尺寸不是 ``int``，``dropout`` 或 ``softcap`` 不是数，``bias`` 既不是
                ``bool`` 也不是名字组成的元组，``fast``、``sinks`` 或 ``gate`` 不是 ``bool``，``qk_norm``
                既不是 ``bool`` 也不是字符串，``rope`` 不是 ``RotaryEmbedding``，``temperature``
                不是两个数组成的元组。
            ValueError: 尺寸不是正数，（没给 ``head_size`` 时）``hidden_size`` 不能被
                ``heads_num`` 整除，``heads_num`` 不能被 ``kv_heads`` 整除，``dropout`` 不在
                ``[0, 1)`` 之内，``bias`` 里有别的投影名，``scale``、``norm_eps`` 或 ``softcap``
                不是有限的正数（``inf`` 和 ``nan`` 都不行），``qk_norm`` 是 ``"gemma"``、
                ``"projection"``、``"weightless"`` 以外的字符串，``temperature`` 里有不是有限正数
                的数，同时给了 ``window`` 和 ``chunk``，或者 ``rope`` 要旋转的维度比一个头的还多。
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
        qk_norm: bool | str = False,
        norm_eps: float = 1e-6,
        rope: RotaryEmbedding | None = None,
        window: int | None = None,
        chunk: int | None = None,
        softcap: float | None = None,
        sinks: bool = False,
        gate: bool = False,
        temperature: tuple[float, float] | None = None,
    ):
        super().__init__()
        kv_heads = heads_num if kv_heads is None else kv_heads
        if head_size is None:
            check_sizes(hidden_size, heads_num)
            head_size = hidden_size // heads_num
        else:
            check_length("hidden_size", hidden_size, positive=True)
            check_length("heads_num", heads_num, positive=True)
            check_length("head_size", head_size, positive=True)
        check_sizes(heads_num, kv_heads, names=("heads_num", "kv_heads"))
        check_number("dropout", dropout)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout}")
        biased = _biased(bias)
        check_flag("fast", fast)
        check_flag("sinks", sinks)
        check_flag("gate", gate)
        _check_qk_norm(qk_norm)
        context_size = hidden_size if context_size is None else context_size
        check_length("context_size", context_size, positive=True)
        for name, value in (("scale", scale), ("norm_eps", norm_eps), ("softcap", softcap)):
            if value is not None:
                check_number(name, value, positive=True, finite=True)
        if window is not None:
            check_length("window", window, positive=True)
        if chunk is not None:
            check_length("chunk", chunk, positive=True)
        if chunk is not None and window is not None:
            raise ValueError(
                f"window ({window}) and chunk ({chunk}) are two ways of limiting what a query "
                "sees (a sliding band, fixed blocks): a layer has one or the other"
            )
        if temperature is not None:
            _check_temperature(temperature)
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
        self.chunk = chunk
        self.softcap = None if softcap is None else float(softcap)
        self.sinks = sinks
        self.gate = gate
        self.temperature = None if temperature is None else tuple(map(float, temperature))

        # 查询投影与纯享版相同；键和值只投影到 kv_heads 个头（分组查询注意力时少于 heads_num），
        # 输入是 context_size 维（默认就是 hidden_size）
        # The query projection is the pure version's; keys and values project to kv_heads heads
        # only (fewer than heads_num under grouped-query attention), from context_size inputs
        # (hidden_size unless given)
        # Qwen3-Next 的门控：每个头的查询后面紧跟它的门控值，W_q 的行数翻倍
        # Qwen3-Next's gate: each head's query is followed by its gate, W_q has twice the rows
        per_head = 2 * head_size if gate else head_size
        self.W_q = nn.Linear(hidden_size, heads_num * per_head, bias="W_q" in biased)
        self.W_k = nn.Linear(context_size, kv_heads * head_size, bias="W_k" in biased)
        self.W_v = nn.Linear(context_size, kv_heads * head_size, bias="W_v" in biased)

        self.W_o = nn.Linear(heads_num * head_size, hidden_size, bias="W_o" in biased)
        # Qwen3：查询和键的每个头各有一个 RMSNorm（不用时为 None）；Gemma 3 的乘 1 + weight
        # Qwen3: an RMSNorm for each head of the queries and of the keys (None when off); Gemma
        # 3's scales by 1 + weight
        # OLMo 2 的跨越整个投影（所有头一起），权重在 float32（或更宽）里相乘
        # OLMo 2's spans the whole projection (all heads together), times the weight in float32
        # Llama 4 的没有权重，在旋转之后做
        # Llama 4's has no weight, and comes after the rotation
        gemma, whole = qk_norm == "gemma", qk_norm == "projection"
        sizes = (heads_num * head_size, kv_heads * head_size) if whole else (head_size, head_size)
        flavour = dict(
            plus_one=gemma, weight_in_float32=whole, elementwise_affine=qk_norm != "weightless"
        )
        self.q_norm, self.k_norm = (
            RMSNorm(size, eps=norm_eps, **flavour) if qk_norm else None for size in sizes
        )
        # gpt-oss：每个查询头一个汇点 logit，初始为 0（不用时为 None）
        # gpt-oss: one sink logit per query head, starting at 0 (None when off)
        self.sink_logits = nn.Parameter(torch.zeros(heads_num)) if sinks else None

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

            参数：
                options: 一个 [`Options`][mha.full.Options]。

            返回：
                ``MHA(**vars(options))``。

            异常：
                TypeError: ``options`` 不是 ``Options``。
        """
        if not isinstance(options, Options):
            raise TypeError(f"options must be a mha.full.Options, got {type(options).__name__}")
        return cls(**{f.name: getattr(options, f.name) for f in fields(options)})

    def extra_repr(self) -> str:
        """What ``print`` shows between the parentheses: the heads' layout, then the options
        that are not the default.

        Returns:
            ``hidden_size, heads_num``, ``kv_heads=`` and ``head_size=`` (always: the shapes of
                ``W_k`` and ``W_v`` depend on them), then each other changed option as
                ``name=value`` (``rope`` is a submodule, printed on a line of its own).

        中文:
            ``print`` 在括号里显示的内容：先是各头的布局，再是不等于默认值的那些选项。

            返回：
                ``hidden_size, heads_num``、``kv_heads=`` 和 ``head_size=``（总是显示：``W_k``、
                    ``W_v`` 的形状取决于它们），然后是其余每个改过的选项，写成 ``name=value``
                    （``rope`` 是子模块，单独占一行）。
        """
        return ", ".join(
            [f"{self.hidden_size}, {self.heads_num}"]
            + [f"kv_heads={self.kv_heads}, head_size={self.head_size}"]
            + [
                # bias as given: all, none, or the names of the projections that have one
                f"{n}={_BIAS_SAID.get(self.bias, self.bias) if n == 'bias' else getattr(self, n)!r}"
                for n in self.options.changed()
                if n not in ("kv_heads", "head_size", "rope")
            ]
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
        rotations: tuple[Tensor, Tensor] | None = None,
        chunks_in_mask: bool = False,
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
                passes it); a static cache's covers its ``max_len`` slots. A mask on the CPU that
                is most likely meant otherwise gets a ``mha.checks.MaskWarning`` with the fix: a
                float mask of only 0s and 1s (it is added, so a keep-mask needs ``.bool()``), or
                a 2-D boolean one shaped like a padding mask ``[batch_size, k_len]`` when
                ``batch_size == q_len``.
            is_causal: apply [`causal_mask`][mha.full.causal_mask] (lower-right aligned), on top of
                ``attn_mask`` if both are given.
            cache: a [`KVCache`][mha.full.KVCache] to extend with this call's keys and values and
                attend over in full. With ``context``, the first call fills it with the
                context's keys and values and later calls read them instead of projecting the
                context again. A cache belongs to the first module that uses it.
            need_weights: also return the attention weights (computed by the written-out path).
            positions: with ``rope`` (or ``temperature``), the positions of ``x``'s rows: ``[q_len]`` (or
                ``[1, q_len]``, transformers' default ``position_ids``), or
                ``[batch_size, q_len]`` when each row has its own (a left-padded batch). ``None``
                (the default) means ``len(cache) + arange(q_len)``: the positions right after
                those in the cache (``0 .. q_len - 1`` without one). One convention for every
                layer of a left-padded batch: each row's own positions (from its first real
                token); ``rope`` rotates and ``chunk`` counts by them, ``temperature`` scales
                by the index in the cache whatever they say (as Llama 4 does), so the same
                arguments give transformers' Llama 4 on its chunked and its NoPE layers.
            rotations: with ``rope``, instead of ``positions``: the cosines and sines that
                ``rope(positions)`` gives, ``[q_len, rotary_dims]`` or ``[batch_size or 1,
                q_len, rotary_dims]`` each, for a model that computes them once for all its
                layers (transformers passes its own as ``position_embeddings``).
            chunks_in_mask: with ``chunk``, ``True`` when ``attn_mask`` holds the chunks already
                (transformers' chunked mask, which counts a left-padded row's chunks from its
                first real token even where the positions it passes count the padding): no
                chunk mask of this module's is added, and a cache holds the ``chunk - 1``
                latest positions.

        Returns:
            ``[batch_size, q_len, hidden_size]``; with ``need_weights``, also the weights
                ``[batch_size, heads_num, q_len, k_len]`` (after dropout, as applied). A query
                whose keys are all masked (all ``False``, or all ``-inf`` in a float mask; a finite
                value, however negative, is added to the scores in every dtype) gets a zero
                attention output, so its output is ``W_o``'s bias. A query that is not finite
                (a NaN weight, say), or a key head whose new keys are not, gives NaN on both
                paths: the fast path adds it back where PyTorch's kernel may give zeros (on the
                CPU, with fewer than ``NAN_CHECKED_BELOW`` keys, it takes a row of NaN scores for
                a fully masked one), so such a row is NaN there even when its keys are all
                masked; with more keys the kernel gives NaN itself and nothing is added.

        Raises:
            TypeError: an input, the mask, the cache or ``positions`` has the wrong type or dtype.
            ValueError: an input, the mask or ``positions`` has the wrong shape or device;
                ``cache`` belongs to another module, holds self-attention's keys when given
                ``context`` (or the reverse), or holds a context of another batch size or length;
                ``positions`` without ``rope`` or ``temperature``, ``context`` with either, or a
                ``window`` without ``is_causal``; a position outside ``0 .. 2**24`` (the integers
                float32 holds exactly), checked where reading the values waits for nothing: on
                the CPU, outside ``torch.compile`` (a compiled step or a CUDA one reads none).

        Examples:
            >>> model = MHA(20, 4)
            >>> x = torch.randn(2, 3, 20)
            >>> out, weights = model(x, torch.randn(2, 7, 20), need_weights=True)
            >>> out.shape, weights.shape
            (torch.Size([2, 3, 20]), torch.Size([2, 4, 3, 7]))

        中文:
            让 ``x`` 的每个位置关注 ``x``（或 ``context``）的各个位置。

            参数：
                x: 查询的输入，``[batch_size, q_len, hidden_size]``。
                context: 交叉注意力时键和值的输入，``[batch_size, src_len, context_size]``
                    （不给 ``context_size`` 时就是 ``hidden_size``）；自注意力时为 ``None``。
                attn_mask: 布尔掩码（``True`` 表示可以关注，与 ``scaled_dot_product_attention``
                    相同，与 ``nn.MultiheadAttention`` 相反）或浮点掩码（加到注意力分数上），
                    能广播到 ``[batch_size, heads_num, q_len, k_len]``，与输入在同一设备上；最后一维
                    覆盖缓存见过的所有位置和这次的位置，有滑动窗口时也可以只覆盖缓存留着的位置和
                    这次的位置（transformers 就是这样传的）；静态缓存的掩码覆盖它的 ``max_len``
                    个格子。在 CPU 上的掩码若多半另有所指，会收到带改法的
                    ``mha.checks.MaskWarning``：只含 0 和 1 的浮点掩码（它会加到分数上，表示保留
                    哪些键的掩码要先 ``.bool()``），或者 ``batch_size == q_len`` 时形状像填充掩码
                    ``[batch_size, k_len]`` 的二维布尔掩码。
                is_causal: 加上右下对齐的 [`causal_mask`][mha.full.causal_mask]；与
                    ``attn_mask`` 同时给出时两者都生效。
                cache: 一个 [`KVCache`][mha.full.KVCache]：把这次算出的键和值追加进去，再对其中
                    全部的键和值做注意力。同时给了 ``context`` 时，第一次调用把上下文的键和值存进
                    缓存，之后的调用直接读取，不再投影上下文。缓存属于第一个使用它的模块。
                need_weights: 同时返回注意力权重（由逐步计算的路径算出）。
                positions: 有 ``rope``（或 ``temperature``）时，``x`` 各行的位置：``[q_len]``（或者 ``[1, q_len]``，即
                    transformers 默认的 ``position_ids``）；每一行各有各的位置时
                    （左填充的一批）是 ``[batch_size, q_len]``。默认 ``None`` 表示
                    ``len(cache) + arange(q_len)``：紧接在缓存里已有的位置之后（没有缓存时就是
                    0–``q_len - 1``）。左填充的一批，每一层都用同一种约定：各行自己的位置（从第一个
                    真实位置数起）；``rope`` 按它们旋转，``chunk`` 按它们划分块，``temperature`` 则
                    不看它们，按缓存里的下标缩放（与 Llama 4 相同），所以同样的参数在 Llama 4 的
                    块内注意力层和 NoPE 层上都得到 transformers 的结果。
                rotations: 有 ``rope`` 时可以代替 ``positions``：``rope(positions)`` 给出的余弦和
                    正弦，各为 ``[q_len, rotary_dims]`` 或 ``[batch_size 或 1, q_len, rotary_dims]``，
                    供所有层只算一次角度的模型使用（transformers 以 ``position_embeddings`` 传入它
                    自己算的）。
                chunks_in_mask: 有 ``chunk`` 时，``attn_mask`` 已经按块划分就设为 ``True``
                    （transformers 的块内注意力掩码：左填充的行从第一个真实位置数块，即使它传来的
                    位置把填充也算在内）：模块不再加自己的块内注意力掩码，缓存留最近的 ``chunk - 1``
                    个位置。

            返回：
                ``[batch_size, q_len, hidden_size]``；``need_weights`` 为真时再返回注意力权重
                    ``[batch_size, heads_num, q_len, k_len]``（训练时为 dropout 之后实际用到的
                    权重）。某个查询的键全被屏蔽时（布尔掩码全为 ``False``，或浮点掩码全为
                    ``-inf``；有限的值再小，在任何 dtype 下也只是加到分数上），它的注意力输出为零，
                    模块在这里的输出就是 ``W_o`` 的偏置。查询不是有限值（比如权重里有 NaN），或者某个
                    键头这次新算的键不全是有限值时，两条路径都得到 NaN：在 CPU 上键少于
                    ``NAN_CHECKED_BELOW`` 个时，PyTorch 的算子把分数全是 NaN 的一行当作全被屏蔽的
                    行，给出零，快速路径再把 NaN 加回去，所以这样的一行即使键全被屏蔽，在快速路径上
                    也是 NaN；键更多时算子自己就给出 NaN，什么也不加。

            异常：
                TypeError: 输入、掩码、缓存或 ``positions`` 的类型或 dtype 不对。
                ValueError: 输入、掩码或 ``positions`` 的形状、设备不对；``cache`` 属于另一个模块，
                    给了 ``context`` 却存着自注意力的键（或者反过来），或者存的上下文批大小、长度
                    与这次不同；没有 ``rope`` 和 ``temperature`` 却给了 ``positions``，有其中之一
                    却给了 ``context``，或者有 ``window`` 却没有 ``is_causal``；某个位置不在
                    0–``2**24`` 之内（float32 能精确表示的整数）。读取这些值不必等待时才检查：
                    在 CPU 上、不在 ``torch.compile`` 之下（编译过的一步或者 CUDA 上的一步不读）。

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
        check_flag("is_causal", is_causal)
        check_flag("need_weights", need_weights)
        check_flag("chunks_in_mask", chunks_in_mask)
        self._check_options(context, is_causal, positions, x, rotations)
        # 缓存里存的是 context 的键和值
        # the cache holds the context's keys and values
        reuse = self._check_cache(cache, context, x)
        # 预先分配的缓存：对整个缓冲区做注意力，靠掩码屏蔽
        # a preallocated cache: attends over its whole buffer, masked
        static = cache is not None and cache.static
        held = 0 if cache is None or static else len(cache)
        if attn_mask is not None and static:
            # A static cache's keys are its max_len slots, so the mask covers them all
            check_mask(attn_mask, (x.size(0), self.heads_num, x.size(1), cache.max_len), x.device)
        elif attn_mask is not None:
            # Checked before anything changes, so a bad mask leaves the cache as it was. Under a
            # sliding window it may also cover only the keys the cache holds (transformers' form).
            k_len = source.size(1) + (0 if cache is None or context is not None else held)
            kept = 0 if cache is None or context is not None or cache.keys is None else cache.keys.size(2)
            check_mask(
                attn_mask, (x.size(0), self.heads_num, x.size(1), k_len), x.device, source.size(1) + kept
            )

        # 投影查询，按头拆分，再把头换到第 1 维：保持四维，融合算子要的就是这种布局
        # Project the queries, split them into heads and move the heads to dim 1: kept 4-D, the
        # layout the fused kernels take
        if self.gate:
            # Qwen3-Next：W_q 给每个头先是查询、再是门控，各 head_size 维，先把两者分开
            # Qwen3-Next: W_q gives each head its query, then its gate, head_size each: split them
            qg = self.W_q(x).view(x.size(0), x.size(1), self.heads_num, 2 * self.head_size)  # [batch_size, q_len, heads_num, 2 * head_size]
            q = qg[..., : self.head_size].reshape(x.size(0), x.size(1), -1)  # [batch_size, q_len, heads_num * head_size]
            gate = qg[..., self.head_size :].reshape(x.size(0), x.size(1), -1)  # [batch_size, q_len, heads_num * head_size]
        else:
            q = self.W_q(x)  # [batch_size, q_len, heads_num * head_size]
        whole, after = self.qk_norm == "projection", self.qk_norm == "weightless"
        if whole:
            # OLMo 2：归一化跨越整个投影，在拆分成头之前
            # OLMo 2: the norm spans the whole projection, before the split into heads
            q = self.q_norm(q)  # [batch_size, q_len, heads_num * head_size]
        q = q.view(q.size(0), q.size(1), self.heads_num, self.head_size).transpose(1, 2)  # [batch_size, heads_num, q_len, head_size]
        if self.q_norm is not None and not whole and not after:
            q = self.q_norm(q)  # [batch_size, heads_num, q_len, head_size]

        if not reuse:
            # 键和值同样投影、拆分，但只有 kv_heads 个头（交叉注意力的缓存里已有上下文的键和值时不必再算）
            # The keys and values likewise, with kv_heads heads (not again when a cross-attention
            # cache holds the context's keys and values already)
            k = self.W_k(source)  # [batch_size, src_len, kv_heads * head_size]
            v = self.W_v(source)  # [batch_size, src_len, kv_heads * head_size]
            if whole:
                k = self.k_norm(k)  # [batch_size, src_len, kv_heads * head_size]
            k = k.view(k.size(0), k.size(1), self.kv_heads, self.head_size).transpose(1, 2)  # [batch_size, kv_heads, src_len, head_size]
            v = v.view(v.size(0), v.size(1), self.kv_heads, self.head_size).transpose(1, 2)  # [batch_size, kv_heads, src_len, head_size]
            if self.k_norm is not None and not whole and not after:
                k = self.k_norm(k)  # [batch_size, kv_heads, src_len, head_size]

        given = None
        if self.chunk is not None:
            # 调用者给的位置（若有）：块按它们数（左填充的行各自从第一个真实位置数起）
            # The caller's positions, if any: chunks count by them (a left-padded row's own)
            given = positions  # [..., q_len]
        if self.rope is not None:
            # 旋转位置编码：查询和新的键按各自的位置旋转，键在存进缓存之前就转好
            # Rotary embeddings: the queries and the new keys turn by their positions, the keys
            # before they enter the cache
            if rotations is None and positions is None and static:
                # 位置从缓存里的张量算出
                # the positions, from a tensor of the cache
                positions = cache.next_positions(x.size(1), x.device)  # [q_len]
            elif rotations is None and positions is None:
                positions = torch.arange(held, held + x.size(1), device=x.device)  # [q_len]
            # cos and sin of the angles, each [..., q_len, rotary_dims] (or the caller's, the same)
            turns = self.rope(positions) if rotations is None else rotations
            q = self.rope.rotate(q, *turns)  # [batch_size, heads_num, q_len, head_size]
            k = self.rope.rotate(k, *turns)  # [batch_size, kv_heads, q_len, head_size]
        if after:
            # Llama 4：没有权重的归一化，在旋转之后（旋转不改变一个头的长度，顺序只影响舍入）
            # Llama 4's: a norm without a weight, after the rotation (which keeps each head's
            # length, so the order changes only the rounding)
            q = self.q_norm(q)  # [batch_size, heads_num, q_len, head_size]
            if not reuse:
                k = self.k_norm(k)  # [batch_size, kv_heads, src_len, head_size]
        fused = self.fast and not need_weights and self.softcap is None and not self.sinks
        # 这次调用新算的键（缓存里的键接上来之前）
        # This call's keys, before the cache's join them
        new_keys = None if reuse else k  # [batch_size, kv_heads, src_len, head_size]

        if self.temperature is not None:
            # Llama 4 的温度调节：位置 p 上的查询乘以 log1p(floor((p + 1) / floor_scale)) * attn_scale + 1，
            # 在 float32 里算（与它的代码相同）
            # Llama 4's temperature tuning: the query at position p times
            # log1p(floor((p + 1) / floor_scale)) * attn_scale + 1, in float32 (as its code does)
            # （p 是缓存里的下标，与 Llama 4 的数法相同：左填充的行连填充一起数，不看 positions）
            # (p is the index in the cache, as Llama 4 counts: a left-padded row's padding
            # counted, whatever positions says, so every layer takes the same positions)
            attn_scale, floor_scale = self.temperature
            if static:
                # 位置从缓存里的张量算出
                # the positions, from a tensor of the cache
                index = cache.next_positions(x.size(1), x.device)  # [q_len]
            else:
                index = torch.arange(held, held + x.size(1), device=x.device)  # [q_len]
            tuned = torch.log1p(torch.floor((index.float() + 1.0) / floor_scale)) * attn_scale + 1.0  # [q_len]
            q = (q * tuned.unsqueeze(-1).unsqueeze(-3)).to(q.dtype)  # [batch_size, heads_num, q_len, head_size]

        if cache is not None:
            # 有缓存时：把新的键和值接在缓存后面（上下文的键和值只在第一次调用时存入），对全部键和值做注意力。
            # 自动混合精度下 RMSNorm 返回 float32（k_norm 之后的键），值却是低精度：存进缓存的键换成
            # 值的 dtype，正是注意力算子在 autocast 下本来就会做的转换
            # With a cache: append the new keys and values (a context's at the first call only),
            # then attend over all of them. Under autocast an RMSNorm returns float32 (the keys
            # after k_norm) while the values are in the lower precision: the cached keys take the
            # values' dtype, the very cast the attention kernel makes under autocast anyway
            if static:
                # 静态缓存：写进各自位置的格子，对整个缓冲区做注意力（k_len 就是 max_len），掩码挡住
                # 没写过的格子（以及因果顺序、窗口之外的格子）；形状每一步都一样
                # A static cache: write each position into its slot and attend over the whole
                # buffer (k_len is max_len), the slots not written (and those outside the causal
                # order and the window) masked out; the shapes are the same at every step
                at = cache.next_positions(x.size(1), x.device)  # [q_len]
                cache.append_static(k.to(v.dtype), v, queries=q)
                k = cache.keys  # [batch_size, kv_heads, k_len, head_size]
                v = cache.values  # [batch_size, kv_heads, k_len, head_size]
                seen = held_mask(at, cache.max_len, is_causal=is_causal, window=self.window)  # [q_len, k_len]
                attn_mask = and_causal(attn_mask, seen)  # [..., q_len, k_len]
                # 因果顺序和窗口都已在掩码里
                # the mask holds the causal order and the window
                is_causal = False
            elif context is None and self._drops and cache.overflows(k.size(2)):
                # 滑动窗口的一次调用可以比 max_len 长（一段长提示）：缓存只写入之后要留下的位置，
                # 注意力用缓存原有的键、值接上这次新算的
                # A sliding window's call may bring more than max_len positions (a long prompt):
                # the cache writes only those it keeps after the call, and attention takes what it
                # held followed by the new keys and values
                held_keys = cache.keys  # [batch_size, kv_heads, held, head_size]
                held_values = cache.values  # [batch_size, kv_heads, held, head_size]
                by_rows = given is not None or chunks_in_mask
                cache.append_windowed(k.to(v.dtype), v, self._keeps(held + x.size(1), by_rows))
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
        # 每一块各调用一次融合算子
        # each chunk its own call of the fused kernel
        blocks = False
        if self.chunk is not None and not chunks_in_mask:
            # Llama 4 的块内注意力：查询只看得到自己那一块里的键，块按位置划分（不是相对距离）
            # Llama 4's chunked attention: a query sees only the keys of its own chunk, chunks
            # counted by position (not by distance)
            # 给了位置时是 [batch_size, 1, q_len, k_len]，否则是 [q_len, k_len]
            # by positions [batch_size, 1, q_len, k_len], else [q_len, k_len]
            chunks = self._chunks(
                q.size(2), k.size(2), held + x.size(1), given, at if static else None
            )  # [..., q_len, k_len]
            # 这次调用的键正好是它自己的位置、从一块的开头起（没有缓存的提示，或刚好在块边界）：每一块
            # 各做一次因果注意力，不必构造掩码，也不算块与块之间的分数
            # This call's keys are its own positions, from the start of a chunk (a prompt without a
            # cache, or at a chunk's boundary): each chunk is a causal attention of its own, with
            # no mask built and no score between two chunks computed
            blocks = (
                fused and chunks is not None and attn_mask is None and given is None
                and not static and k.size(2) == q.size(2) and held % self.chunk == 0
            )
            if chunks is not None and not blocks:
                attn_mask = chunks if attn_mask is None else and_causal(attn_mask, chunks)  # [..., q_len, k_len]

        nans = None
        if fused and self._kernel_may_zero_nans(q, k.size(2), blocks):
            # 快速路径记下查询和这次新键里不是有限值的地方（0 或 NaN），算完加回输出：逐步计算的路径
            # 在那里本来就得到 NaN（只在 CPU 上、键少于 NAN_CHECKED_BELOW 个时，算子才会给出零）
            # The fast path notes where the queries and this call's new keys are not finite (0 or
            # NaN), to add it back to its output: the written-out path gives NaN there by itself
            # (only on the CPU with fewer than NAN_CHECKED_BELOW keys may the kernel give zeros)
            nans = self._nans(q, new_keys)  # [batch_size, heads_num, q_len, 1]

        try:
            if blocks:
                out = self._attend_in_chunks(q, k, v)  # [batch_size, heads_num, q_len, head_size]
                weights = None
            elif fused:
                # 快速路径：融合算子；一个键都看不到的查询，算子自己给出零输出（它不能给分数加
                # 软上限，也没有汇点项：有 softcap 或 sinks 时走下面逐步计算的路径）
                # Fast path: a fused kernel, which itself gives a zero output to a query with no key
                # (it cannot cap the scores, nor add a sink: with softcap or sinks the written-out
                # path below runs)
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
                cache.crop(len(cache) - x.size(1) if static else held)
            raise
        if nans is not None:
            # 融合算子在 CPU 上把分数全是 NaN 的一行当作被屏蔽的行，给出零：这样的行加回 NaN
            # The fused kernel on the CPU takes a row whose scores are all NaN for a masked row
            # and gives zeros: such rows get their NaN back
            out = out + nans.to(out.dtype)  # [batch_size, heads_num, q_len, head_size]
        if cache is not None and self.window is not None and not static:
            # 滑动窗口：下一次调用的查询看不到更早的位置，缓存只留最近的 window - 1 个
            # Sliding window: the next call's queries see nothing older, so the cache keeps the
            # window - 1 latest positions
            cache.keep_last(self.window - 1)
        elif cache is not None and self.chunk is not None and not static and given is None and not chunks_in_mask:
            # 块内注意力：写完的一块再也不会被看到，缓存只留正在进行的这一块
            # Chunks: a finished chunk is never seen again, so the cache keeps the one in progress
            cache.keep_chunk(self.chunk)
        elif cache is not None and self.chunk is not None and not static:
            # 按调用者的位置（或掩码）切块（左填充的各行各自切块）：留下任何一行下一个查询可能要的
            # chunk - 1 个
            # Chunks by the caller's positions, or mask (a left-padded batch's rows chunked
            # apart): keep the chunk - 1 any row's next query may need
            cache.keep_last(self.chunk - 1)

        # 拼接各头（与纯享版相同），再做输出投影
        # Concatenate the heads (as in the pure version), then the output projection
        out = out.transpose(1, 2).contiguous().view(out.size(0), out.size(2), self.heads_num * self.head_size)  # [batch_size, q_len, heads_num * head_size]
        if self.gate:
            # Qwen3-Next：每个头的输出乘上 sigmoid(门控)，门控来自这个位置的输入（乘在注意力之后，
            # 融合算子不受影响）
            # Qwen3-Next: each head's output times sigmoid(gate), the gate from this position's
            # input (after attention, so the fused kernel is unaffected)
            out = out * torch.sigmoid(gate)  # [batch_size, q_len, heads_num * head_size]
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
        """The attention weights, written out: scores, scale, soft-cap, mask, softmax (with the
        sinks), dropout. A query whose keys are all masked (``False``, or ``-inf`` in a float
        mask) gets a row of zeros.

        中文:
            逐步算出注意力权重：分数、缩放、软上限、掩码、softmax（连同汇点项）、dropout。键全被屏蔽（布尔掩码
            全为 ``False``，或浮点掩码全为 ``-inf``）的查询，权重整行为零。
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
        if self.softcap is not None:
            # Gemma 2 的软上限：每个分数经 tanh 压进 (-softcap, softcap)，在加掩码之前
            # Gemma 2's soft-cap: tanh squeezes each score into (-softcap, softcap), before the mask
            qk = torch.tanh(qk / self.softcap) * self.softcap  # [batch_size, heads_num, q_len, k_len]
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
        if self.sinks:
            # gpt-oss 的汇点项：每个头的 logit 作为多出来的一列进 softmax 的分母，算完丢掉
            # gpt-oss's sinks: each head's logit joins the softmax's denominator as one more
            # column, dropped after it
            sink = self.sink_logits.to(dtype).view(1, -1, 1, 1).expand(*qk.shape[:-1], 1)  # [batch_size, heads_num, q_len, 1]
            qk = torch.cat([qk, sink], dim=-1)  # [batch_size, heads_num, q_len, k_len + 1]
            attn = torch.softmax(qk, dim=-1)[..., :-1].to(q.dtype)  # [batch_size, heads_num, q_len, k_len]
        else:
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

    def _attend_in_chunks(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Chunked causal attention over keys that are the queries' own positions, starting at a
        chunk: the whole chunks as a batch of causal ``scaled_dot_product_attention`` calls (the
        chunks moved into the batch dimension), the part of a chunk left at the end one more.

        中文:
            键正好是查询自己的位置、从一块的开头起时的块内因果注意力：完整的块挪进批这一维，一次
            调用 ``scaled_dot_product_attention``（因果）算完，最后不满一块的部分再调用一次。
        """
        size, length = self.chunk, q.size(2)
        # 完整的块有几个
        # the whole chunks
        n_chunks = length // size
        # 这些块占的位置
        # their positions
        whole = n_chunks * size
        options = dict(dropout_p=self.dropout if self.training else 0.0, scale=self.scale)
        options.update(is_causal=True, enable_gqa=self.kv_heads != self.heads_num)
        parts = []
        if n_chunks:
            # 完整的块挪进批这一维：每一块是批里的一行
            # The whole chunks moved into the batch dimension: each chunk a row of the batch
            q_rows = q[:, :, :whole].unflatten(2, (n_chunks, size)).transpose(1, 2).flatten(0, 1)  # [batch_size * n_chunks, heads_num, chunk, head_size]
            k_rows = k[:, :, :whole].unflatten(2, (n_chunks, size)).transpose(1, 2).flatten(0, 1)  # [batch_size * n_chunks, kv_heads, chunk, head_size]
            v_rows = v[:, :, :whole].unflatten(2, (n_chunks, size)).transpose(1, 2).flatten(0, 1)  # [batch_size * n_chunks, kv_heads, chunk, head_size]
            out = F.scaled_dot_product_attention(q_rows, k_rows, v_rows, **options)  # [batch_size * n_chunks, heads_num, chunk, head_size]
            out = out.unflatten(0, (q.size(0), n_chunks)).transpose(1, 2).flatten(2, 3)  # [batch_size, heads_num, n_chunks * chunk, head_size]
            parts.append(out)
        if whole < length:
            # 最后不满一块的部分
            # The part of a chunk left at the end
            rest = F.scaled_dot_product_attention(*(t[:, :, whole:] for t in (q, k, v)), **options)  # [batch_size, heads_num, q_len - n_chunks * chunk, head_size]
            parts.append(rest)
        out = torch.cat(parts, dim=2) if len(parts) > 1 else parts[0]  # [batch_size, heads_num, q_len, head_size]
        return out

    def _kernel_may_zero_nans(self, q: Tensor, k_len: int, blocks: bool) -> bool:
        """Whether a call of PyTorch's fused kernel may give zeros where the written-out path
        gives NaN: on the CPU, when a call of the kernel has fewer than ``NAN_CHECKED_BELOW``
        keys (``k_len``, or with ``blocks`` the shortest chunk). There the kernel takes a row
        whose scores are all NaN for a fully masked row when the call has fewer keys than one
        vector of lanes; from ``NAN_CHECKED_BELOW`` keys on it gives NaN itself and nothing is
        added (decoding over a long cache, a long prompt). A ``bool`` from shapes and the
        device only, so ``torch.compile`` guards on it rather than breaking the graph.

        中文:
            PyTorch 的融合算子会不会在逐步计算的路径得到 NaN 的地方给出零：在 CPU 上，算子的一次
            调用里键少于 ``NAN_CHECKED_BELOW`` 个时（``k_len``；``blocks`` 时看最短的一块）。
            一次调用的键比一个向量的通道数还少时，算子把分数全是 NaN 的一行当作全被屏蔽的行；
            键有 ``NAN_CHECKED_BELOW`` 个或更多时，它自己就给出 NaN，什么也不用加（长缓存上的
            解码、长提示）。结果只看形状和设备，``torch.compile`` 为它加一个守卫条件，不必断开
            计算图。
        """
        if q.device.type != "cpu":
            return False
        if blocks:
            # 每一块各调用一次算子：最短的是最后不满一块的部分（若有）
            # One call per chunk: the shortest is the part of a chunk left at the end, if any
            k_len = k_len % self.chunk or self.chunk
        return k_len < NAN_CHECKED_BELOW

    def _nans(self, q: Tensor, k: Tensor | None) -> Tensor:
        """What the fast path adds to its output, where ``_kernel_may_zero_nans``, so that it is
        NaN where the written-out path's is: 0, or NaN for a query that is not finite, and for
        every query of a key head whose new keys ``k`` (this call's; ``None`` when it brings
        none) are not all finite. PyTorch's fused kernel on the CPU takes a row whose scores are
        all NaN for a fully masked row and gives it zeros when the call has fewer keys than one
        vector of lanes, so a NaN weight would go unseen. One sum per query and per key head, no
        score computed: ``[batch_size, heads_num, q_len, 1]``.

        中文:
            在 ``_kernel_may_zero_nans`` 成立时，快速路径加到输出上的量，让输出在逐步计算的路径
            得到 NaN 的地方也是 NaN：一般是 0；查询不是有限值时为 NaN；某个键头这次新算的键
            ``k``（``None`` 表示这次没有新键）不全是有限值时，这个键头的所有查询也为 NaN。一次
            调用的键比一个向量的通道数还少时，PyTorch 在 CPU 上的融合算子把分数全是 NaN 的一行
            当作全被屏蔽的行，给出零，权重里的 NaN 就这样悄无声息地不见了。每个查询、每个键头各求
            一次和，不算任何分数：``[batch_size, heads_num, q_len, 1]``。
        """
        # 和在至少 float32 里求（半精度的和可能溢出）；有一项不是有限值，和就不是有限值
        # The sums in at least float32 (a half-precision one could overflow); a term that is not
        # finite makes the sum not finite
        dtype = torch.promote_types(q.dtype, torch.float32)
        sums = q.detach().sum(-1, keepdim=True, dtype=dtype)  # [batch_size, heads_num, q_len, 1]
        if k is not None:
            # 每个键头的和加到它那一组查询头的每个查询上
            # Each key head's sum joins every query of the query heads of its group
            keys = k.detach().sum((-2, -1), keepdim=True, dtype=dtype)  # [batch_size, kv_heads, 1, 1]
            sums = sums + self._repeat_kv(keys)  # [batch_size, heads_num, q_len, 1]
        # s - s：有限值得 0，NaN 或 ±inf 得 NaN
        # s - s: 0 for a finite s, NaN for NaN or ±inf
        nans = sums - sums  # [batch_size, heads_num, q_len, 1]
        return nans

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
                attn_mask = float_mask_as(attn_mask, q.dtype)  # [..., k_len]
        if not is_causal or (q_len == 1 and (self.window or k_len) >= k_len):
            return attn_mask  # a single (newest) query sees every key: the causal mask is all True
        causal = causal_mask(q_len, k_len, device=q.device, window=self.window)  # [q_len, k_len]
        return and_causal(attn_mask, causal)

    @property
    def _drops(self) -> bool:
        """Whether a cache of this module drops positions after each call (a sliding window, or
        chunks)."""
        return self.window is not None or self.chunk is not None

    def _keeps(self, end: int, by_rows: bool) -> int:
        """How many positions a dropping cache holds after a call that ends at ``end``: a
        window's ``window - 1``, or the chunk in progress (``chunk - 1`` at most when chunks
        count ``by_rows``, by the caller's ``positions`` or mask: a row's own)."""
        if self.window is not None:
            return self.window - 1
        return self.chunk - 1 if by_rows else end % self.chunk

    def _chunks(
        self, q_len: int, k_len: int, end: int, positions: Tensor | None, at: Tensor | None
    ) -> Tensor | None:
        """Which keys share a chunk with each query (``chunk``): ``[q_len, k_len]``, or
        ``[batch_size, 1, q_len, k_len]`` for ``positions`` per row; ``None`` when every key
        does. The keys are the positions ``end - k_len .. end - 1``, the queries the ``q_len``
        latest (a static cache's: every slot, and the queries at ``at``); with ``positions``
        every row is shifted so that its last query sits at its own last position."""
        if at is None:
            if positions is None and (end - k_len) // self.chunk == (end - 1) // self.chunk:
                return None  # one chunk holds every key: the causal mask alone
            k_at = torch.arange(end - k_len, end, device=self.W_q.weight.device)  # [k_len]
            q_at = k_at[k_len - q_len :]  # [q_len]
        else:  # a static cache: slot p holds position p
            k_at = torch.arange(k_len, device=at.device)  # [k_len]
            q_at = at  # [q_len]
        if positions is not None:
            # 按调用者的位置：每一行平移到它最后一个查询所在的位置（左填充的行从第一个真实位置数起）
            # By the caller's positions: each row shifted to where its last query is (a
            # left-padded row counts from its first real position)
            shift = positions[..., -1:] - q_at[-1]  # [..., 1]
            q_at = q_at + shift  # [..., q_len]
            k_at = k_at + shift  # [..., k_len]
        same = chunk_mask(q_at, k_at, self.chunk)  # [..., q_len, k_len]
        return same if same.dim() == 2 else same.unsqueeze(1)

    def _check_options(
        self,
        context: Tensor | None,
        is_causal: bool,
        positions: Tensor | None,
        x: Tensor,
        rotations: tuple[Tensor, Tensor] | None = None,
    ) -> None:
        """The options of today's models, against this call's arguments."""
        if self.window is not None and not is_causal:
            raise ValueError(
                f"this MHA has a sliding window (window={self.window}), which applies to causal "
                "attention: pass is_causal=True"
            )
        if self.chunk is not None and not is_causal:
            raise ValueError(
                f"this MHA attends in chunks (chunk={self.chunk}), which applies to causal "
                "attention: pass is_causal=True"
            )
        if self.chunk is not None and context is not None:
            raise ValueError(
                f"this MHA attends in chunks (chunk={self.chunk}) of self-attention's positions: "
                "context= (cross-attention) is refused"
            )
        if self.temperature is not None and context is not None:
            raise ValueError(
                "this MHA tunes a temperature (temperature), which scales self-attention's "
                "queries by their positions: context= (cross-attention) is refused"
            )
        if self.rope is not None and context is not None:
            raise ValueError(
                "this MHA has rotary embeddings (rope), which rotate self-attention's queries and "
                "keys by their positions: context= (cross-attention) has no such positions"
            )
        if rotations is not None:
            check_rotations(rotations, positions, x, self.rope)
        if positions is None:
            return
        if self.rope is None and self.temperature is None and self.chunk is None:
            raise ValueError(
                "positions= is used only by rope, temperature or chunk, and this MHA has none "
                "of them"
            )
        check_positions(positions, x)

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
        cache.claim(self, "x" if context is None else "context")
        if context is None or not len(cache):
            return False
        if context.size(1) != len(cache) or cache.keys.size(0) != x.size(0):
            raise ValueError(
                f"cache holds the keys and values of a context [batch_size, src_len] = "
                f"{[cache.keys.size(0), len(cache)]}, this call's context is "
                f"{[context.size(0), context.size(1)]}: reset() the cache for a new context"
            )
        return True


# --8<-- [end:class]
