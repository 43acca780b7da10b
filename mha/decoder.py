"""Decoder-only language models on [`mha.full.MHA`][mha.full.MHA], and generation with their cache.

Two models. [`Decoder`][mha.decoder.Decoder] is the model of the site's chapter *Use it in a
model*, GPT-2 style: pre-norm blocks (``x + attn(norm(x))``, then ``x + mlp(norm(x))``) with
LayerNorm and a GELU MLP, learned absolute positions. [`Llama`][mha.decoder.Llama] is today's
open models' layout (Llama, Mistral, Qwen2, Qwen3): the same pre-norm blocks with RMSNorm, a SwiGLU
MLP, rotary positions, grouped-query attention, optional q/k norm, a sliding window per layer and
tied or untied embeddings; [`from_hf`][mha.decoder.from_hf] loads a transformers model into it.

Generation works on any model that has what [`LanguageModel`][mha.decoder.LanguageModel] says:
[`generate`][mha.decoder.generate] runs a batch of prompts of different lengths, padded on the
left or the right, and gives each the tokens it would get alone (greedy, or sampled with
``top_k`` and ``top_p``, stopping at ``eos_token_id``); [`beam_search`][mha.decoder.beam_search]
keeps the best ``beams`` continuations of each prompt with
[`ModelCache.reorder`][mha.cache.ModelCache.reorder].

Shapes: ``batch_size`` sequences of ``seq_len`` tokens (``q_len`` new ones in a call with a cache,
``k_len`` held in all), ``vocab_size`` token ids, ``hidden_size`` wide.

Examples:
    >>> import torch
    >>> from mha.decoder import Decoder, Llama, generate
    >>> _ = torch.manual_seed(0)
    >>> model = Decoder(vocab_size=11, hidden_size=16, heads_num=4, kv_heads=2, num_layers=2)
    >>> model(torch.tensor([[1, 2, 3]])).shape  # [batch_size, seq_len, vocab_size]
    torch.Size([1, 3, 11])
    >>> generate(model.eval(), [[1, 2, 3], [4]], steps=5).shape  # [batch_size, steps]
    torch.Size([2, 5])
    >>> llama = Llama(vocab_size=11, hidden_size=16, heads_num=4, kv_heads=2, windows=[None, 3])
    >>> generate(llama.eval(), [[1, 2, 3], [4]], steps=5).shape  # [batch_size, steps]
    torch.Size([2, 5])
"""

# Why this file stays whole (1,600 lines): the model page reads it top to bottom through its
# included sections (the block, the model, the generation loop, beam search, the Llama), and the
# generation functions take any of the models defined here; their shared helpers (positions, the
# growing key mask) would otherwise move between files the page includes side by side.

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

import mha.interop
from mha.cache import KVCache, ModelCache
from mha.checks import (
    check_flag,
    check_integer_tensor,
    check_length,
    check_number,
    check_range,
    check_sizes,
)
from mha.full import MHA
from mha.masks import padding_mask
from mha.norm import RMSNorm
from mha.rope import RotaryEmbedding

__all__ = [
    "Block",
    "Decoder",
    "LanguageModel",
    "Llama",
    "LlamaBlock",
    "SwiGLU",
    "beam_search",
    "from_hf",
    "generate",
    "positions_of",
]


# --8<-- [start:block]
class Block(nn.Module):
    """One pre-norm decoder block: causal self-attention, then an MLP, each added to its input.

    Args:
        hidden_size: the width of the block's input and output.
        heads_num: query heads of the attention.
        kv_heads: key/value heads (grouped-query attention); ``None`` means ``heads_num``.
        dropout: of the attention weights and of the MLP's output, in training mode only.

    Examples:
        >>> block = Block(hidden_size=16, heads_num=4)
        >>> block(torch.randn(2, 3, 16)).shape
        torch.Size([2, 3, 16])

    中文:
        一个前置归一化的解码器块：先做因果自注意力，再过 MLP，各自加回到输入上。

        参数：
            hidden_size: 块的输入和输出的宽度。
            heads_num: 注意力的查询头数。
            kv_heads: 键和值的头数（分组查询注意力）；``None`` 表示与 ``heads_num`` 相同。
            dropout: 注意力权重和 MLP 输出的 dropout，只在训练模式下生效。
    """

    def __init__(
        self, hidden_size: int, heads_num: int, *, kv_heads: int | None = None, dropout: float = 0.0
    ):
        super().__init__()
        self.norm_1 = nn.LayerNorm(hidden_size)
        self.attn = MHA(hidden_size, heads_num, kv_heads=kv_heads, dropout=dropout)
        self.norm_2 = nn.LayerNorm(hidden_size)
        self.mlp = nn.Sequential(
            nn.Linear(hidden_size, 4 * hidden_size),
            nn.GELU(),
            nn.Linear(4 * hidden_size, hidden_size),
            nn.Dropout(dropout),
        )

    def forward(
        self, x: Tensor, *, attn_mask: Tensor | None = None, cache: KVCache | None = None
    ) -> Tensor:
        """The block on ``x``; its attention is causal.

        Args:
            x: ``[batch_size, q_len, hidden_size]``.
            attn_mask: the attention's mask, on top of the causal one.
            cache: the attention's cache.

        Returns:
            ``[batch_size, q_len, hidden_size]``.

        中文:
            对 ``x`` 运行这个块；其中的注意力是因果的。

            参数：
                x: 块的输入，``[batch_size, q_len, hidden_size]``。
                attn_mask: 注意力的掩码，与因果掩码同时生效。
                cache: 注意力的缓存。

            返回：
                形状为 ``[batch_size, q_len, hidden_size]`` 的张量。
        """
        x = x + self.attn(self.norm_1(x), attn_mask=attn_mask, is_causal=True, cache=cache)
        return x + self.mlp(self.norm_2(x))


# --8<-- [end:block]


# --8<-- [start:decoder]
class Decoder(nn.Module):
    """A decoder-only language model: token and position embeddings, blocks, a LayerNorm and the
    logits.

    Args:
        vocab_size: how many token ids.
        hidden_size: the model's width.
        heads_num: query heads of each block's attention.
        kv_heads: key/value heads; ``None`` means ``heads_num``.
        num_layers: how many blocks.
        max_len: how many positions the learned position embedding has.
        dropout: each block's dropout.

    Attributes:
        vocab_size: how many token ids.
        max_len: how many positions the model embeds.
        num_layers: how many blocks, so how many caches a
            [`ModelCache`][mha.cache.ModelCache] for it holds.

    Raises:
        TypeError: ``vocab_size``, ``num_layers`` or ``max_len`` is not an ``int``.
        ValueError: ``vocab_size``, ``num_layers`` or ``max_len`` is not positive.

    Examples:
        >>> model = Decoder(vocab_size=11, hidden_size=16, heads_num=4, num_layers=2, max_len=8)
        >>> model.positions.weight.shape  # [max_len, hidden_size]
        torch.Size([8, 16])
        >>> Decoder(vocab_size=11, hidden_size=16, heads_num=4, num_layers=0)
        Traceback (most recent call last):
        ...
        ValueError: num_layers must be a positive int, got 0

    中文:
        只有解码器的语言模型：词表 id 的嵌入加上位置嵌入，若干个块，一个 LayerNorm，
        最后输出 logits。

        参数：
            vocab_size: 词表的大小（id 的个数）。
            hidden_size: 模型的宽度。
            heads_num: 每个块里注意力的查询头数。
            kv_heads: 键和值的头数；``None`` 表示与 ``heads_num`` 相同。
            num_layers: 块的个数。
            max_len: 学习得到的位置嵌入有多少个位置。
            dropout: 每个块的 dropout。

        属性：
            vocab_size: 词表的大小（id 的个数）。
            max_len: 模型能嵌入的位置数。
            num_layers: 块的个数，也就是给它用的 [`ModelCache`][mha.cache.ModelCache] 里有几个缓存。

        异常：
            TypeError: ``vocab_size``、``num_layers`` 或 ``max_len`` 不是 ``int``。
            ValueError: ``vocab_size``、``num_layers`` 或 ``max_len`` 不是正数。
    """

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        heads_num: int,
        *,
        kv_heads: int | None = None,
        num_layers: int = 2,
        max_len: int = 256,
        dropout: float = 0.0,
    ):
        super().__init__()
        check_length("vocab_size", vocab_size, positive=True)
        check_length("num_layers", num_layers, positive=True)
        check_length("max_len", max_len, positive=True)
        self.vocab_size, self.max_len, self.num_layers = vocab_size, max_len, num_layers
        self.tokens = nn.Embedding(vocab_size, hidden_size)
        self.positions = nn.Embedding(max_len, hidden_size)
        self.blocks = nn.ModuleList(
            Block(hidden_size, heads_num, kv_heads=kv_heads, dropout=dropout)
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(hidden_size)
        self.head = nn.Linear(hidden_size, vocab_size, bias=False)

    def forward(
        self,
        ids: Tensor,
        *,
        positions: Tensor | None = None,
        attn_mask: Tensor | None = None,
        cache: ModelCache | None = None,
    ) -> Tensor:
        """The logits of the next token after each position.

        Args:
            ids: ``[batch_size, q_len]`` token ids.
            positions: ``[batch_size, q_len]`` (or ``[q_len]``) the position of each token in
                its own sequence; ``None``: ``len(cache)`` onwards (0 without a cache), the
                same for every row. A padded batch passes
                [`positions_of`][mha.decoder.positions_of] its key mask.
            attn_mask: the keys each row may attend, ``[batch_size, 1, 1, k_len]`` (a
                [`padding_mask`][mha.masks.padding_mask]), with ``k_len`` = ``len(cache)`` +
                ``q_len``; on top of the causal mask.
            cache: one cache per block, extended by this call.

        Returns:
            ``[batch_size, q_len, vocab_size]``.

        Raises:
            TypeError: ``ids`` or ``positions`` is not an integer tensor, or ``cache`` is not a
                [`ModelCache`][mha.cache.ModelCache].
            ValueError: ``ids`` is not 2-D or holds an id outside ``0 .. vocab_size - 1``;
                ``positions`` has another shape than ``ids`` or one outside ``0 .. max_len - 1``;
                without ``positions``, ``len(cache)`` + ``q_len`` is more than ``max_len``; or
                ``cache`` has another number of layers than the model has blocks.

        中文:
            每个位置的下一个位置的 logits。

            参数：
                ids: ``[batch_size, q_len]`` 个词表 id。
                positions: ``[batch_size, q_len]``（或 ``[q_len]``），每个 id 在它自己那条序列里
                    的位置；``None`` 时从 ``len(cache)`` 起（没有缓存时从 0 起），每行相同。填充过的
                    批把键掩码交给 [`positions_of`][mha.decoder.positions_of] 算出位置。
                attn_mask: 每一行可以关注的键，``[batch_size, 1, 1, k_len]``（一个
                    [`padding_mask`][mha.masks.padding_mask]），``k_len`` = ``len(cache)`` +
                    ``q_len``；与因果掩码同时生效。
                cache: 每个块一个缓存，这次调用会把它们延长。

            返回：
                形状为 ``[batch_size, q_len, vocab_size]`` 的 logits。

            异常：
                TypeError: ``ids`` 或 ``positions`` 不是整数张量，或者 ``cache`` 不是
                    [`ModelCache`][mha.cache.ModelCache]。
                ValueError: ``ids`` 不是二维的，或者有超出 0–``vocab_size - 1`` 的 id；
                    ``positions`` 的形状与 ``ids`` 不同，或者有超出 0–``max_len - 1`` 的位置；
                    没有给 ``positions`` 时 ``len(cache)`` + ``q_len`` 超过 ``max_len``；或者
                    ``cache`` 的层数与模型的块数不同。
        """
        _check_forward(self, ids, positions, cache)
        if positions is None:
            start = 0 if cache is None else len(cache)
            positions = torch.arange(start, start + ids.size(1), device=ids.device)
        x = self.tokens(ids) + self.positions(positions)  # [batch_size, q_len, hidden_size]
        for i, block in enumerate(self.blocks):
            layer_cache = None if cache is None else cache.layers[i]
            x = block(x, attn_mask=attn_mask, cache=layer_cache)  # [batch_size, q_len, hidden_size]
        return self.head(self.norm(x))  # [batch_size, q_len, vocab_size]


# --8<-- [end:decoder]


# --8<-- [start:llama-block]
class SwiGLU(nn.Module):
    """The MLP of Llama, Mistral and Qwen: ``down(silu(gate(x)) * up(x))``, no bias.

    ``silu(gate(x))`` decides, for each of the ``mlp_size`` dimensions, how much of ``up(x)``
    passes; ``down`` projects back to ``hidden_size``. Three matrices instead of GPT-2's two,
    so Llama makes ``mlp_size`` about ``8/3 * hidden_size`` where GPT-2 has ``4 * hidden_size``.

    Args:
        hidden_size: the width of the input and output.
        mlp_size: the width in between (``intermediate_size`` in the configs).

    Raises:
        TypeError: a size is not an ``int``.
        ValueError: a size is not positive.

    Examples:
        >>> mlp = SwiGLU(hidden_size=16, mlp_size=40)
        >>> mlp.gate.weight.shape  # [mlp_size, hidden_size]
        torch.Size([40, 16])
        >>> mlp(torch.randn(2, 3, 16)).shape
        torch.Size([2, 3, 16])

    中文:
        Llama、Mistral 和 Qwen 的 MLP：``down(silu(gate(x)) * up(x))``，没有偏置。

        ``silu(gate(x))`` 决定 ``up(x)`` 的 ``mlp_size`` 维里每一维放行多少；``down`` 再投影回
        ``hidden_size``。比 GPT-2 多一个矩阵，所以 GPT-2 取 ``4 * hidden_size`` 的地方，Llama 的
        ``mlp_size`` 大约取 ``8/3 * hidden_size``。

        参数：
            hidden_size: 输入和输出的宽度。
            mlp_size: 中间的宽度（配置里的 ``intermediate_size``）。

        异常：
            TypeError: 某个尺寸不是 ``int``。
            ValueError: 某个尺寸不是正数。
    """

    def __init__(self, hidden_size: int, mlp_size: int):
        super().__init__()
        check_length("hidden_size", hidden_size, positive=True)
        check_length("mlp_size", mlp_size, positive=True)
        self.gate = nn.Linear(hidden_size, mlp_size, bias=False)
        self.up = nn.Linear(hidden_size, mlp_size, bias=False)
        self.down = nn.Linear(mlp_size, hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """The MLP on ``x``.

        Args:
            x: ``[batch_size, seq_len, hidden_size]``.

        Returns:
            ``[batch_size, seq_len, hidden_size]``.

        中文:
            对 ``x`` 运行这个 MLP。

            参数：
                x: 形状为 ``[batch_size, seq_len, hidden_size]`` 的输入。

            返回：
                形状为 ``[batch_size, seq_len, hidden_size]`` 的张量。
        """
        gated = F.silu(self.gate(x)) * self.up(x)  # [batch_size, seq_len, mlp_size]
        return self.down(gated)  # [batch_size, seq_len, hidden_size]


class LlamaBlock(nn.Module):
    """One Llama-style block: RMSNorm, causal self-attention with rotary positions, RMSNorm,
    SwiGLU, each of the two added to its input.

    Args:
        hidden_size: the width of the block's input and output.
        heads_num: query heads of the attention.
        rope: the rotary embedding of the attention (one can serve every block).
        kv_heads: key/value heads (grouped-query attention); ``None`` means ``heads_num``.
        head_size: each head's width; ``None`` means ``hidden_size // heads_num``.
        mlp_size: the SwiGLU's width in between.
        qk_norm: an RMSNorm over each head of the queries and keys (Qwen3).
        window: this block's sliding window (Mistral, some of Qwen's layers); ``None``: none.
        attn_bias: the attention's ``bias`` (a ``bool``, or the names of the projections that
            have one: Qwen2 has ``("W_q", "W_k", "W_v")``).
        norm_eps: the ``eps`` of every RMSNorm (``rms_norm_eps`` in the configs).

    Examples:
        >>> block = LlamaBlock(16, 4, rope=RotaryEmbedding(4), kv_heads=2, mlp_size=40)
        >>> block(torch.randn(2, 3, 16)).shape
        torch.Size([2, 3, 16])

    中文:
        一个 Llama 式的块：RMSNorm，带旋转位置编码的因果自注意力，再一个 RMSNorm，SwiGLU；
        两部分各自加回到输入上。

        参数：
            hidden_size: 块的输入和输出的宽度。
            heads_num: 注意力的查询头数。
            rope: 注意力用的旋转位置编码（所有块可以共用一个）。
            kv_heads: 键和值的头数（分组查询注意力）；``None`` 表示与 ``heads_num`` 相同。
            head_size: 每个头的宽度；``None`` 表示 ``hidden_size // heads_num``。
            mlp_size: SwiGLU 中间的宽度。
            qk_norm: 对查询和键的每个头各做一次 RMSNorm（Qwen3）。
            window: 这个块的滑动窗口（Mistral，Qwen 的部分层）；``None`` 表示没有。
            attn_bias: 注意力的 ``bias``（一个 ``bool``，或者带偏置的那几个投影的名字：Qwen2 是
                ``("W_q", "W_k", "W_v")``）。
            norm_eps: 每个 RMSNorm 的 ``eps``（配置里的 ``rms_norm_eps``）。
    """

    def __init__(
        self,
        hidden_size: int,
        heads_num: int,
        *,
        rope: RotaryEmbedding,
        kv_heads: int | None = None,
        head_size: int | None = None,
        mlp_size: int,
        qk_norm: bool = False,
        window: int | None = None,
        attn_bias: bool | tuple[str, ...] = False,
        norm_eps: float = 1e-6,
    ):
        super().__init__()
        self.norm_1 = RMSNorm(hidden_size, eps=norm_eps)
        self.attn = MHA(
            hidden_size,
            heads_num,
            kv_heads=kv_heads,
            head_size=head_size,
            bias=attn_bias,
            qk_norm=qk_norm,
            norm_eps=norm_eps,
            rope=rope,
            window=window,
        )
        self.norm_2 = RMSNorm(hidden_size, eps=norm_eps)
        self.mlp = SwiGLU(hidden_size, mlp_size)

    def forward(
        self,
        x: Tensor,
        *,
        positions: Tensor | None = None,
        attn_mask: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """The block on ``x``; its attention is causal.

        Args:
            x: ``[batch_size, q_len, hidden_size]``.
            positions: the rotary positions, ``[batch_size, q_len]`` or ``[q_len]``; ``None``:
                ``len(cache)`` onwards.
            attn_mask: the attention's mask, on top of the causal one.
            cache: the attention's cache.

        Returns:
            ``[batch_size, q_len, hidden_size]``.

        中文:
            对 ``x`` 运行这个块；其中的注意力是因果的。

            参数：
                x: 块的输入，``[batch_size, q_len, hidden_size]``。
                positions: 旋转用的位置，``[batch_size, q_len]`` 或 ``[q_len]``；``None`` 表示从
                    ``len(cache)`` 起。
                attn_mask: 注意力的掩码，与因果掩码同时生效。
                cache: 注意力的缓存。

            返回：
                形状为 ``[batch_size, q_len, hidden_size]`` 的张量。
        """
        normed = self.norm_1(x)  # [batch_size, q_len, hidden_size]
        attended = self.attn(
            normed, attn_mask=attn_mask, is_causal=True, cache=cache, positions=positions
        )
        x = x + attended  # [batch_size, q_len, hidden_size]
        return x + self.mlp(self.norm_2(x))  # [batch_size, q_len, hidden_size]


# --8<-- [end:llama-block]


# --8<-- [start:llama]
class Llama(nn.Module):
    """A Llama-style language model: token embeddings, blocks, an RMSNorm and the logits.

    No position embedding: each block's attention rotates its queries and keys by their
    positions (one [`RotaryEmbedding`][mha.rope.RotaryEmbedding] shared by every block). The
    options cover Llama 2 and 3, Mistral, Qwen2 and Qwen3 (see [`from_hf`][mha.decoder.from_hf]).

    Args:
        vocab_size: how many token ids.
        hidden_size: the model's width.
        heads_num: query heads of each block's attention.
        kv_heads: key/value heads; ``None`` means ``heads_num``.
        head_size: each head's width; ``None`` means ``hidden_size // heads_num``.
        mlp_size: each SwiGLU's width in between; ``None`` means ``4 * hidden_size``.
        num_layers: how many blocks.
        windows: the sliding windows: ``None`` (no block has one), an ``int`` (every block has
            that one, as in Mistral) or a list of ``num_layers`` entries, each an ``int`` or
            ``None`` (Qwen's ``layer_types``, Gemma's alternating layers).
        qk_norm: an RMSNorm over each head of the queries and keys (Qwen3).
        attn_bias: the attention's ``bias``: a ``bool``, or the names of the projections that
            have one (Qwen2: ``("W_q", "W_k", "W_v")``).
        norm_eps: the ``eps`` of every RMSNorm.
        rope: the rotary embedding; ``None`` means ``RotaryEmbedding(head_size)`` (base 10000).
        tied: ``True``: no ``head``, the logits are computed with the token embedding's weight
            (``tie_word_embeddings`` in the configs).
        max_len: the most positions a sequence may have; ``None`` (the default): no limit, as a
            rotary embedding has none (a model trained on ``n`` positions may still do poorly
            beyond them).

    Attributes:
        vocab_size: how many token ids.
        max_len: as given.
        num_layers: how many blocks, so how many caches a
            [`ModelCache`][mha.cache.ModelCache] for it holds.
        windows: each block's sliding window (``None`` for none), a list of ``num_layers``.
        head: the output layer ``[vocab_size, hidden_size]``; ``None`` when ``tied``.

    Raises:
        TypeError: ``vocab_size``, ``num_layers``, ``mlp_size``, ``max_len`` or a window is not an
            ``int``, ``windows`` not a list, or ``tied`` not a ``bool``; or what
            [`MHA`][mha.full.MHA] raises for the attention's options.
        ValueError: a size is not positive, ``hidden_size`` is not divisible by ``heads_num``
            (without ``head_size``), ``windows`` has another length than ``num_layers``; or what
            [`MHA`][mha.full.MHA] raises for the attention's options.

    Examples:
        >>> model = Llama(vocab_size=11, hidden_size=16, heads_num=4, kv_heads=2, tied=True)
        >>> model(torch.tensor([[1, 2, 3]])).shape  # [batch_size, seq_len, vocab_size]
        torch.Size([1, 3, 11])
        >>> model.head is None, model.windows
        (True, [None, None])
        >>> Llama(vocab_size=11, hidden_size=16, heads_num=4, windows=[4])
        Traceback (most recent call last):
        ...
        ValueError: windows must have one entry per block (num_layers = 2), got 1: [4]

    中文:
        Llama 式的语言模型：词表 id 的嵌入，若干个块，一个 RMSNorm，最后输出 logits。

        没有位置嵌入：每个块的注意力按位置旋转查询和键（所有块共用一个
        [`RotaryEmbedding`][mha.rope.RotaryEmbedding]）。这些选项覆盖 Llama 2 和 3、Mistral、
        Qwen2 和 Qwen3（见 [`from_hf`][mha.decoder.from_hf]）。

        参数：
            vocab_size: 词表的大小（id 的个数）。
            hidden_size: 模型的宽度。
            heads_num: 每个块里注意力的查询头数。
            kv_heads: 键和值的头数；``None`` 表示与 ``heads_num`` 相同。
            head_size: 每个头的宽度；``None`` 表示 ``hidden_size // heads_num``。
            mlp_size: 每个 SwiGLU 中间的宽度；``None`` 表示 ``4 * hidden_size``。
            num_layers: 块的个数。
            windows: 滑动窗口：``None``（哪个块都没有），一个 ``int``（每个块都用它，与 Mistral
                相同），或者 ``num_layers`` 项的列表，每项是 ``int`` 或 ``None``（Qwen 的
                ``layer_types``，Gemma 交替的层）。
            qk_norm: 对查询和键的每个头各做一次 RMSNorm（Qwen3）。
            attn_bias: 注意力的 ``bias``：一个 ``bool``，或者带偏置的那几个投影的名字（Qwen2：
                ``("W_q", "W_k", "W_v")``）。
            norm_eps: 每个 RMSNorm 的 ``eps``。
            rope: 旋转位置编码；``None`` 表示 ``RotaryEmbedding(head_size)``（底数 10000）。
            tied: 为 ``True`` 时没有 ``head``，logits 用词嵌入的权重来算（配置里的
                ``tie_word_embeddings``）。
            max_len: 一条序列最多的位置数；默认 ``None`` 表示不设上限，旋转位置编码本身没有上限
                （不过模型在训练时没见过的长度上可能表现不好）。

        属性：
            vocab_size: 词表的大小（id 的个数）。
            max_len: 创建时给的值。
            num_layers: 块的个数，也就是给它用的 [`ModelCache`][mha.cache.ModelCache] 里有几个缓存。
            windows: 每个块的滑动窗口（没有时为 ``None``），``num_layers`` 项的列表。
            head: 输出层 ``[vocab_size, hidden_size]``；``tied`` 时为 ``None``。

        异常：
            TypeError: ``vocab_size``、``num_layers``、``mlp_size``、``max_len`` 或某个窗口不是
                ``int``，``windows`` 不是列表，或者 ``tied`` 不是 ``bool``；或者
                [`MHA`][mha.full.MHA] 对注意力的选项报的错。
            ValueError: 某个尺寸不是正数，（没给 ``head_size`` 时）``hidden_size`` 不能被
                ``heads_num`` 整除，``windows`` 的长度与 ``num_layers`` 不同；或者
                [`MHA`][mha.full.MHA] 对注意力的选项报的错。
    """

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        heads_num: int,
        *,
        kv_heads: int | None = None,
        head_size: int | None = None,
        mlp_size: int | None = None,
        num_layers: int = 2,
        windows: int | list[int | None] | None = None,
        qk_norm: bool = False,
        attn_bias: bool | tuple[str, ...] = False,
        norm_eps: float = 1e-6,
        rope: RotaryEmbedding | None = None,
        tied: bool = False,
        max_len: int | None = None,
    ):
        super().__init__()
        check_length("vocab_size", vocab_size, positive=True)
        check_length("num_layers", num_layers, positive=True)
        if max_len is not None:
            check_length("max_len", max_len, positive=True)
        check_flag("tied", tied)
        if head_size is None:
            check_sizes(hidden_size, heads_num)
            head_size = hidden_size // heads_num
        self.vocab_size, self.max_len, self.num_layers = vocab_size, max_len, num_layers
        self.windows = _windows(windows, num_layers)
        rope = RotaryEmbedding(head_size) if rope is None else rope
        self.tokens = nn.Embedding(vocab_size, hidden_size)
        # 与 Llama 的 initializer_range 相同：共享权重时它也是输出层，N(0, 1) 会让初始 logits 过大
        # As Llama's initializer_range: tied, it is the output layer too, where N(0, 1) would
        # make the first logits far too large
        nn.init.normal_(self.tokens.weight, std=0.02)
        self.blocks = nn.ModuleList(
            LlamaBlock(
                hidden_size,
                heads_num,
                rope=rope,
                kv_heads=kv_heads,
                head_size=head_size,
                mlp_size=4 * hidden_size if mlp_size is None else mlp_size,
                qk_norm=qk_norm,
                window=window,
                attn_bias=attn_bias,
                norm_eps=norm_eps,
            )
            for window in self.windows
        )
        self.norm = RMSNorm(hidden_size, eps=norm_eps)
        self.head = None if tied else nn.Linear(hidden_size, vocab_size, bias=False)

    def forward(
        self,
        ids: Tensor,
        *,
        positions: Tensor | None = None,
        attn_mask: Tensor | None = None,
        cache: ModelCache | None = None,
    ) -> Tensor:
        """The logits of the next token after each position.

        Args:
            ids: ``[batch_size, q_len]`` token ids.
            positions: ``[batch_size, q_len]`` (or ``[q_len]``) the position of each token in
                its own sequence, by which its query and key rotate; ``None``: ``len(cache)``
                onwards (0 without a cache), the same for every row. A padded batch passes
                [`positions_of`][mha.decoder.positions_of] its key mask.
            attn_mask: the keys each row may attend, ``[batch_size, 1, 1, k_len]`` (a
                [`padding_mask`][mha.masks.padding_mask]), with ``k_len`` = ``len(cache)`` +
                ``q_len``; on top of the causal mask (and of each block's window).
            cache: one cache per block, extended by this call.

        Returns:
            ``[batch_size, q_len, vocab_size]``.

        Raises:
            TypeError: ``ids`` or ``positions`` is not an integer tensor, or ``cache`` is not a
                [`ModelCache`][mha.cache.ModelCache].
            ValueError: ``ids`` is not 2-D or holds an id outside ``0 .. vocab_size - 1``;
                ``positions`` has another shape than ``ids``; with ``max_len``, a position
                outside ``0 .. max_len - 1`` or, without ``positions``, ``len(cache)`` +
                ``q_len`` more than ``max_len``; or ``cache`` has another number of layers than
                the model has blocks.

        中文:
            每个位置的下一个位置的 logits。

            参数：
                ids: ``[batch_size, q_len]`` 个词表 id。
                positions: ``[batch_size, q_len]``（或 ``[q_len]``），每个 id 在它自己那条序列里
                    的位置，查询和键按它旋转；``None`` 时从 ``len(cache)`` 起（没有缓存时从 0
                    起），每行相同。填充过的批把键掩码交给
                    [`positions_of`][mha.decoder.positions_of] 算出位置。
                attn_mask: 每一行可以关注的键，``[batch_size, 1, 1, k_len]``（一个
                    [`padding_mask`][mha.masks.padding_mask]），``k_len`` = ``len(cache)`` +
                    ``q_len``；与因果掩码（以及每个块的窗口）同时生效。
                cache: 每个块一个缓存，这次调用会把它们延长。

            返回：
                形状为 ``[batch_size, q_len, vocab_size]`` 的 logits。

            异常：
                TypeError: ``ids`` 或 ``positions`` 不是整数张量，或者 ``cache`` 不是
                    [`ModelCache`][mha.cache.ModelCache]。
                ValueError: ``ids`` 不是二维的，或者有超出 0–``vocab_size - 1`` 的 id；
                    ``positions`` 的形状与 ``ids`` 不同；给了 ``max_len`` 时，有超出
                    0–``max_len - 1`` 的位置，或者没给 ``positions`` 而 ``len(cache)`` +
                    ``q_len`` 超过 ``max_len``；或者 ``cache`` 的层数与模型的块数不同。
        """
        _check_forward(self, ids, positions, cache)
        x = self.tokens(ids)  # [batch_size, q_len, hidden_size]
        for i, block in enumerate(self.blocks):
            layer_cache = None if cache is None else cache.layers[i]
            x = block(x, positions=positions, attn_mask=attn_mask, cache=layer_cache)
        x = self.norm(x)  # [batch_size, q_len, hidden_size]
        # 共享权重时，词嵌入矩阵 [vocab_size, hidden_size] 也是输出层
        # Tied: the token embedding [vocab_size, hidden_size] is the output layer too
        weight = self.tokens.weight if self.head is None else self.head.weight
        return F.linear(x, weight)  # [batch_size, q_len, vocab_size]


# --8<-- [end:llama]


def _windows(windows: object, num_layers: int) -> list[int | None]:
    """``Llama``'s ``windows`` as one entry per block, each checked."""
    named = isinstance(windows, list | tuple)  # errors name windows[i]
    if windows is None or (isinstance(windows, int) and not isinstance(windows, bool)):
        each = [windows] * num_layers
    elif named:
        if len(windows) != num_layers:
            raise ValueError(
                f"windows must have one entry per block (num_layers = {num_layers}), "
                f"got {len(windows)}: {list(windows)!r}"
            )
        each = list(windows)
    else:
        raise TypeError(
            "windows must be None, an int (every block's) or a list of one int or None per "
            f"block, got {type(windows).__name__} ({windows!r})"
        )
    for i, window in enumerate(each):
        if window is not None:
            check_length(f"windows[{i}]" if named else "windows", window, positive=True)
    return each


# --8<-- [start:protocol]
@runtime_checkable
class LanguageModel(Protocol):
    """What [`generate`][mha.decoder.generate] and [`beam_search`][mha.decoder.beam_search] use
    of a model.

    [`Decoder`][mha.decoder.Decoder] and [`Llama`][mha.decoder.Llama] have it, and so can your
    own model: an ``nn.Module`` (its parameters say on which device the tokens go) with these
    three attributes and this ``forward``. Nothing else is read: no ``head`` (a model with tied
    embeddings has none), no ``blocks``.

    Attributes:
        vocab_size: how many token ids: the logits' last dimension.
        max_len: the most positions a sequence may have, prompt and new tokens together;
            ``None``: no limit.
        num_layers: how many attention layers, so how many caches the
            [`ModelCache`][mha.cache.ModelCache] that generation makes for it holds.

    Examples:
        >>> from mha.decoder import Decoder, Llama
        >>> [m.num_layers for m in (Decoder(11, 16, 4), Llama(11, 16, 4, num_layers=3))]
        [2, 3]

    中文:
        [`generate`][mha.decoder.generate] 和 [`beam_search`][mha.decoder.beam_search] 对模型的
        全部要求。

        [`Decoder`][mha.decoder.Decoder] 和 [`Llama`][mha.decoder.Llama] 都满足，你自己的模型
        也可以满足：一个 ``nn.Module``（新的 id 放在它的参数所在的设备上），有下面三个属性和这样一个
        ``forward``。别的都不读：不要 ``head``（共享词嵌入权重的模型没有它），也不要 ``blocks``。

        属性：
            vocab_size: 词表的大小，也就是 logits 最后一维的大小。
            max_len: 一条序列（提示加上新生成的位置）最多的位置数；``None`` 表示不设上限。
            num_layers: 注意力层的个数，也就是生成时为它建的
                [`ModelCache`][mha.cache.ModelCache] 里有几个缓存。
    """

    vocab_size: int
    max_len: int | None
    num_layers: int

    def forward(
        self,
        ids: Tensor,
        *,
        positions: Tensor | None = None,
        attn_mask: Tensor | None = None,
        cache: ModelCache | None = None,
    ) -> Tensor:
        """The logits of the next token after each position of ``ids``.

        Generation calls ``model(ids, positions=..., attn_mask=..., cache=...)``, always with
        the three keywords: once with the padded prompts, then with one new token per row at
        each step.

        Args:
            ids: ``[batch_size, q_len]`` token ids.
            positions: ``[batch_size, q_len]``, each token's position in its own sequence, the
                padding not counted ([`positions_of`][mha.decoder.positions_of]).
            attn_mask: ``[batch_size, 1, 1, k_len]``, ``True`` at the real keys, with ``k_len``
                = ``len(cache)`` + ``q_len``: every position the cache has seen, then this
                call's; the model applies it on top of its causal mask.
            cache: a ``ModelCache(num_layers)``: the model gives layer ``i`` its cache
                ``cache.layers[i]``, and the call extends them by ``q_len`` positions.

        Returns:
            ``[batch_size, q_len, vocab_size]``.

        中文:
            ``ids`` 每个位置的下一个位置的 logits。

            生成时总是以 ``model(ids, positions=..., attn_mask=..., cache=...)`` 调用，三个参数
            都给：先用填充好的提示调用一次，之后每一步每行一个新的 id。

            参数：
                ids: ``[batch_size, q_len]`` 个词表 id。
                positions: ``[batch_size, q_len]``，每个 id 在它自己那条序列里的位置，填充不计
                    （[`positions_of`][mha.decoder.positions_of]）。
                attn_mask: ``[batch_size, 1, 1, k_len]``，真实的键为 ``True``，``k_len`` =
                    ``len(cache)`` + ``q_len``：缓存见过的每个位置，再加这次的位置；模型在自己的
                    因果掩码之上再用它。
                cache: 一个 ``ModelCache(num_layers)``：模型把 ``cache.layers[i]`` 交给层
                    ``i``，这次调用把每个缓存延长 ``q_len`` 个位置。

            返回：
                形状为 ``[batch_size, q_len, vocab_size]`` 的 logits。
        """
        ...


# The attributes of LanguageModel, which generation checks before any work.
PROTOCOL = tuple(LanguageModel.__annotations__)


# --8<-- [end:protocol]


# --8<-- [start:generate]
def positions_of(held: Tensor) -> Tensor:
    """Each key's position in its own sequence: how many real keys precede it in its row.

    Args:
        held: a key mask ``[batch_size, 1, 1, k_len]``, ``True`` at real positions.

    Returns:
        ``[batch_size, k_len]`` positions; padding gets its next real key's (or 0), which no
            real query sees.

    Examples:
        >>> positions_of(padding_mask(torch.tensor([2, 4]), 4, left=True))
        tensor([[0, 0, 0, 1],
                [0, 1, 2, 3]])

    中文:
        每个键在它自己那条序列里的位置：这一行里它前面有几个真实的键。

        参数：
            held: 键掩码 ``[batch_size, 1, 1, k_len]``，真实位置为 ``True``。

        返回：
            ``[batch_size, k_len]`` 个位置；填充的位置取下一个真实键的位置（或 0），真实的查询
                看不到它们。
    """
    real = held[:, 0, 0].long()  # [batch_size, k_len]
    return (real.cumsum(-1) - real).clamp(min=0)  # [batch_size, k_len]


def _prefill(
    model: LanguageModel, prompts: list[list[int]], left: bool, max_len: int | None
) -> tuple[Tensor, Tensor, ModelCache]:
    """Run the padded prompts once: each row's next-token logits ``[batch_size, vocab_size]``,
    the key mask ``[batch_size, 1, 1, width]`` and the filled cache."""
    device = next(model.parameters(), torch.empty(0)).device
    lengths = torch.tensor([len(p) for p in prompts], device=device)  # [batch_size]
    width = int(lengths.max())
    tokens = torch.zeros(len(prompts), width, dtype=torch.long, device=device)
    for row, prompt in enumerate(prompts):
        where = slice(width - len(prompt), width) if left else slice(0, len(prompt))
        tokens[row, where] = torch.tensor(prompt, device=device)
    held = padding_mask(lengths, width, left=left)  # [batch_size, 1, 1, width]
    cache = ModelCache(model.num_layers, max_len=max_len)
    logits = model(tokens, positions=positions_of(held), attn_mask=held, cache=cache)
    # 每一行最后一个真实位置的 logits：左填充时都在最后一列
    # Each row's last real position: the last column when padded on the left
    last = logits[:, -1] if left else logits[torch.arange(len(prompts)), lengths - 1]
    return last, held, cache


def _step(
    model: LanguageModel, token: Tensor, held: Tensor, cache: ModelCache
) -> tuple[Tensor, Tensor]:
    """One new token per row, ``[rows]``: its logits ``[rows, vocab_size]``, and the key mask
    one real column longer."""
    position = held.sum(dim=-1).view(-1, 1)  # [rows, 1]: the real positions so far
    held = torch.cat([held, held.new_ones(held.size(0), 1, 1, 1)], dim=-1)  # one more key
    logits = model(token[:, None], positions=position, attn_mask=held, cache=cache)
    return logits[:, -1], held  # [rows, vocab_size], [rows, 1, 1, k_len + 1]


@torch.no_grad()
def generate(
    model: LanguageModel,
    prompts: list[list[int]],
    steps: int,
    *,
    left: bool = True,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    eos_token_id: int | list[int] | None = None,
    pad_token_id: int | None = None,
    max_len: int | None = None,
) -> Tensor:
    """Continue each prompt by ``steps`` tokens (fewer if every row stops), all prompts in one
    batch.

    The prompts are padded to the longest, on the left (the default) or the right; a key mask
    that grows by one real position per step and each row's own positions make every row's
    tokens those its prompt would get alone. The model is anything that has what
    [`LanguageModel`][mha.decoder.LanguageModel] says: ``vocab_size``, ``max_len``,
    ``num_layers``, parameters, and ``forward(ids, *, positions, attn_mask, cache)``.

    Sampling (``temperature`` above 0) divides the logits by ``temperature``, keeps the
    ``top_k`` largest, then the fewest most likely tokens whose probabilities add up to
    ``top_p`` at least, and draws from the softmax of what is kept (the order transformers
    applies them in).

    Args:
        model: the model, in evaluation mode.
        prompts: token ids, one list per prompt, each at least one token.
        steps: the most tokens to add to each.
        left: pad on the left (``True``) or the right.
        temperature: 0 picks the most likely token (greedy); above 0, samples.
        top_k: when sampling, keep only the ``top_k`` most likely tokens (ties at the last
            kept value kept too); ``None``: all.
        top_p: when sampling, keep only the most likely tokens whose probabilities, after
            ``top_k``, add up to at least ``top_p`` (nucleus sampling), in ``(0, 1]``; ``None``:
            all.
        generator: for sampling, on the model's device.
        eos_token_id: the id (or ids) that ends a sequence: a row that produced it stops, its
            later tokens are ``pad_token_id``, and generation ends when every row has stopped.
            ``None``: every row runs ``steps`` tokens.
        pad_token_id: what a stopped row gets; ``None``: ``eos_token_id`` (the first, if several).
        max_len: each cache's ``max_len`` (``None``: growing buffers); at least the longest
            prompt's length plus ``steps``.

    Returns:
        ``[batch_size, n]`` the new tokens, ``n`` = ``steps``, or fewer when every row has
            produced ``eos_token_id``: then the step at which the last row did.

    Raises:
        TypeError: ``model`` lacks what it needs (above); ``prompts`` is not a list of lists of
            ``int``; ``steps``, ``top_k``, ``max_len``, ``eos_token_id`` or ``pad_token_id`` is
            not an ``int``, ``left`` not a ``bool``, ``temperature`` or ``top_p`` not a number,
            or ``generator`` not a ``torch.Generator``.
        ValueError: there is no prompt, a prompt is empty or holds an id outside
            ``0 .. vocab_size - 1`` (so does ``eos_token_id`` or ``pad_token_id``);
            ``left=False`` with prompts of different lengths and a model with a sliding window
            (its window counts the padding's columns: pad on the left); ``steps`` or
            ``temperature`` is negative; ``top_k`` or ``top_p`` without sampling, ``top_k``
            outside ``1 .. vocab_size``, ``top_p`` outside ``(0, 1]``; ``pad_token_id``
            without ``eos_token_id``; ``generator`` is on another device than the model; the
            longest prompt plus ``steps`` is more than ``model.max_len`` or ``max_len``.

    Examples:
        >>> model = Decoder(vocab_size=11, hidden_size=16, heads_num=4, max_len=8).eval()
        >>> generate(model, [[1, 2, 3], [4]], steps=5).shape
        torch.Size([2, 5])
        >>> seed = torch.Generator().manual_seed(0)
        >>> generate(model, [[1, 2, 3]], 5, temperature=0.8, top_k=3, generator=seed).shape
        torch.Size([1, 5])
        >>> generate(model, [[1, 2, 3], [4]], steps=6)
        Traceback (most recent call last):
        ...
        ValueError: the longest prompt (prompts[0], 3 tokens) plus steps (6) is 9 positions,
        more than model.max_len (8)

    中文:
        把每个提示续写 ``steps`` 个位置（所有行都停下时更少），所有提示放在一批里。

        提示填充到最长的那个，填充在左边（默认）或右边；键掩码每一步增加一个真实位置，每一行用它自己
        的位置，所以每一行生成的 id，与它的提示单独生成时相同。模型可以是任何满足
        [`LanguageModel`][mha.decoder.LanguageModel] 的对象：有 ``vocab_size``、``max_len``、
        ``num_layers``、参数，以及 ``forward(ids, *, positions, attn_mask, cache)``。

        采样（``temperature`` 大于 0）时，logits 先除以 ``temperature``，留下最大的 ``top_k`` 个，
        再留下概率之和刚好达到 ``top_p`` 的那几个最可能的 id，从留下的 id 的 softmax 中抽取（与
        transformers 的先后顺序相同）。

        参数：
            model: 模型，处于评估模式。
            prompts: 词表 id，每个提示一个列表，至少一个 id。
            steps: 每个提示最多续写多少个位置。
            left: 填充在左边（``True``）还是右边。
            temperature: 0 表示取概率最大的 id（贪心）；大于 0 时采样。
            top_k: 采样时只留下最可能的 ``top_k`` 个 id（与最后一个留下的值相等的也留下）；
                ``None`` 表示全部留下。
            top_p: 采样时（在 ``top_k`` 之后）只留下概率之和至少为 ``top_p`` 的那几个最可能的
                id（核采样），取值在 ``(0, 1]``；``None`` 表示全部留下。
            generator: 采样用的随机数生成器，与模型在同一个设备上。
            eos_token_id: 表示序列结束的 id（一个或几个）：生成了它的行就停下，之后的位置填
                ``pad_token_id``，所有行都停下时生成结束。``None`` 表示每行都续写 ``steps`` 个。
            pad_token_id: 停下的行之后得到的 id；``None`` 表示 ``eos_token_id``（有几个时取
                第一个）。
            max_len: 每个缓存的 ``max_len``（``None``：缓冲区按需增长）；不小于最长的提示的长度加上
                ``steps``。

        返回：
            ``[batch_size, n]``，新生成的 id。``n`` 就是 ``steps``；所有行都生成了
                ``eos_token_id`` 时更少，等于最后一行停下的那一步。

        异常：
            TypeError: ``model`` 缺少上面说的属性；``prompts`` 不是由 ``int`` 列表组成的列表；
                ``steps``、``top_k``、``max_len``、``eos_token_id`` 或 ``pad_token_id`` 不是
                ``int``，``left`` 不是 ``bool``，``temperature`` 或 ``top_p`` 不是数，或者
                ``generator`` 不是 ``torch.Generator``。
            ValueError: 一个提示也没有，某个提示为空，或者有超出 0–``vocab_size - 1`` 的 id
                （``eos_token_id`` 和 ``pad_token_id`` 也一样）；提示长短不一、``left=False`` 而
                模型有滑动窗口（窗口按列计数，会把填充的列也算进去：请在左边填充）；``steps`` 或
                ``temperature`` 为负；不采样却给了 ``top_k`` 或 ``top_p``，``top_k`` 超出
                1–``vocab_size``，``top_p`` 不在 ``(0, 1]`` 之内；给了 ``pad_token_id`` 却没给
                ``eos_token_id``；``generator`` 与模型不在同一个设备上；最长的提示加上 ``steps``
                超过 ``model.max_len`` 或 ``max_len``。
    """
    _check_generate(model, prompts, steps, left, temperature, top_k, top_p, generator, max_len)
    # (结束符的 id, 填充符的 id)，或者 None
    # (the eos ids, the pad id) or None
    stop = _check_stop(model, eos_token_id, pad_token_id)
    last, held, cache = _prefill(model, prompts, left, max_len)
    eos = None if stop is None else torch.tensor(stop[0], device=held.device)
    done = torch.zeros(len(prompts), dtype=torch.bool, device=held.device)  # [batch_size]
    new = [held.new_zeros(len(prompts), 0, dtype=torch.long)]  # so that steps=0 gives [b, 0]
    for step in range(steps):
        token = _pick(last, temperature, top_k, top_p, generator)  # [batch_size]
        if eos is not None:
            token = token.masked_fill(done, stop[1])  # a row that has stopped gets the pad id
            done = done | torch.isin(token, eos)
        new.append(token[:, None])
        if step == steps - 1 or bool(done.all()):  # no step after the last one is needed
            break
        last, held = _step(model, token, held, cache)  # [batch_size, vocab_size]
    return torch.cat(new, dim=1)  # [batch_size, n]


def _pick(
    logits: Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    generator: torch.Generator | None,
) -> Tensor:
    """The next token of each row, ``[rows]``, from its logits ``[rows, vocab_size]``."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    scaled = logits.float() / temperature  # [rows, vocab_size]
    scaled = scaled.masked_fill(~_allowed(scaled, top_k, top_p), float("-inf"))
    probs = torch.softmax(scaled, dim=-1)  # [rows, vocab_size], 0 where not allowed
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def _allowed(logits: Tensor, top_k: int | None, top_p: float | None) -> Tensor:
    """Which tokens sampling may draw, ``[rows, vocab_size]``: the ``top_k`` largest logits,
    then, of those, the fewest most likely whose probabilities add up to ``top_p``."""
    keep = torch.ones_like(logits, dtype=torch.bool)  # [rows, vocab_size]
    if top_k is not None:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # [rows, 1]: the k-th largest logit
        keep = logits >= kth
    if top_p is not None:
        probs = torch.softmax(logits.masked_fill(~keep, float("-inf")), dim=-1)
        ranked, order = probs.sort(dim=-1, descending=True)  # [rows, vocab_size]
        # 排在它前面的概率之和还不到 top_p 的 id 留下：最可能的那个总会留下
        # A token stays while the tokens ranked above it add up to less than top_p: the most
        # likely one always stays
        stays = ranked.cumsum(dim=-1) - ranked < top_p  # [rows, vocab_size], in ranked order
        keep = keep & torch.zeros_like(keep).scatter(-1, order, stays)  # back in id order
    return keep


# --8<-- [end:generate]


# --8<-- [start:beam]
@torch.no_grad()
def beam_search(
    model: LanguageModel,
    prompts: list[list[int]],
    steps: int,
    beams: int,
    *,
    eos_token_id: int | list[int] | None = None,
    pad_token_id: int | None = None,
    max_len: int | None = None,
) -> tuple[Tensor, Tensor]:
    """The ``beams`` most likely continuations of each prompt, found one token at a time.

    The prompts run together, padded on the left as in [`generate`][mha.decoder.generate];
    then each has ``beams`` rows, row ``b * beams + i`` its beam ``i``. After each step the
    ``beams`` best of a prompt's ``beams × vocab_size`` candidates survive, and the cache is
    reordered so that each row holds the history of the beam its candidate continues. A beam
    that produced ``eos_token_id`` is finished: it stays a candidate with its score, continued
    by ``pad_token_id`` (no length penalty: a finished beam competes with its own sum).

    Args:
        model: a [`LanguageModel`][mha.decoder.LanguageModel], in evaluation mode.
        prompts: token ids, one list per prompt, each at least one token.
        steps: the most tokens per continuation; 0 gives ``beams`` empty ones per prompt, of
            log-probability 0.
        beams: how many continuations to keep for each prompt, at most ``vocab_size``.
        eos_token_id: the id (or ids) that finishes a beam; ``None``: every beam runs
            ``steps`` tokens.
        pad_token_id: what a finished beam is continued by; ``None``: ``eos_token_id`` (the
            first, if several).
        max_len: each cache's ``max_len`` (``None``: growing buffers); at least the longest
            prompt's length plus ``steps``.

    Returns:
        ``[batch_size, beams, n]`` the continuations, best first, and ``[batch_size, beams]``
            their total log-probabilities; ``n`` = ``steps``, or fewer when every beam has
            finished.

    Raises:
        TypeError: ``model`` lacks what it needs; ``prompts`` is not a list of lists of ``int``
            (one prompt, a list of ``int``, included: write ``[prompt]``); ``steps``, ``beams``,
            ``max_len``, ``eos_token_id`` or ``pad_token_id`` is not an ``int``.
        ValueError: there is no prompt, a prompt is empty or holds an id outside
            ``0 .. vocab_size - 1`` (so does ``eos_token_id`` or ``pad_token_id``); ``steps``
            is negative; ``beams`` is not positive or more than ``vocab_size``;
            ``pad_token_id`` without ``eos_token_id``; the longest prompt plus ``steps`` is
            more than ``model.max_len`` or ``max_len``.

    Examples:
        >>> model = Decoder(vocab_size=11, hidden_size=16, heads_num=4).eval()
        >>> seqs, scores = beam_search(model, [[1, 2], [3]], steps=4, beams=3)
        >>> # 序列 [batch_size, beams, steps]，得分 [batch_size, beams]
        >>> seqs.shape, scores.shape  # [batch_size, beams, steps], [batch_size, beams]
        (torch.Size([2, 3, 4]), torch.Size([2, 3]))
        >>> beam_search(model, [[1, 2]], steps=4, beams=12)
        Traceback (most recent call last):
        ...
        ValueError: beams (12) must be at most model.vocab_size (11):
        the first step has vocab_size candidates

    中文:
        逐个位置地为每个提示找出 ``beams`` 个概率最大的续写。

        各个提示一起运行，与 [`generate`][mha.decoder.generate] 一样填充在左边；之后每个提示占
        ``beams`` 行，行 ``b * beams + i`` 是提示 ``b`` 的束 ``i``。每一步在一个提示的
        ``beams × vocab_size`` 个候选中留下最好的 ``beams`` 个，并重排缓存，让每一行存着它的候选
        所接续那一束的历史。生成了 ``eos_token_id`` 的束就结束了：它带着自己的得分继续做候选，
        后面接 ``pad_token_id``（没有长度惩罚：结束的束以它自己的总和参与比较）。

        参数：
            model: 一个 [`LanguageModel`][mha.decoder.LanguageModel]，处于评估模式。
            prompts: 词表 id，每个提示一个列表，至少一个 id。
            steps: 每个续写最多的位置数；为 0 时每个提示给出 ``beams`` 个空的续写，对数概率都是 0。
            beams: 每个提示保留几个续写，不超过 ``vocab_size``。
            eos_token_id: 让一束结束的 id（一个或几个）；``None`` 表示每一束都续写 ``steps`` 个。
            pad_token_id: 结束的束后面接的 id；``None`` 表示 ``eos_token_id``（有几个时取第一个）。
            max_len: 每个缓存的 ``max_len``（``None``：缓冲区按需增长）；不小于最长的提示的长度加上
                ``steps``。

        返回：
            ``[batch_size, beams, n]`` 个续写（最好的在前），以及 ``[batch_size, beams]`` 个总
                对数概率；``n`` 就是 ``steps``，所有束都结束时更少。

        异常：
            TypeError: ``model`` 缺少需要的属性；``prompts`` 不是由 ``int`` 列表组成的列表（只给一个
                提示、即一个 ``int`` 列表也不行：请写 ``[prompt]``）；``steps``、``beams``、
                ``max_len``、``eos_token_id`` 或 ``pad_token_id`` 不是 ``int``。
            ValueError: 一个提示也没有，某个提示为空，或者有超出 0–``vocab_size - 1`` 的 id
                （``eos_token_id`` 和 ``pad_token_id`` 也一样）；``steps`` 为负；``beams`` 不是
                正数或者超过 ``vocab_size``；给了 ``pad_token_id`` 却没给 ``eos_token_id``；最长的
                提示加上 ``steps`` 超过 ``model.max_len`` 或 ``max_len``。
    """
    _check_search(model, prompts, steps, beams, max_len)
    # (结束符的 id, 填充符的 id)，或者 None
    # (the eos ids, the pad id) or None
    stop = _check_stop(model, eos_token_id, pad_token_id)
    batch, vocab = len(prompts), model.vocab_size
    # 没有可选的：beams 个空的续写，对数概率都是 0
    # nothing to choose: beams empty continuations, each of log-probability 0
    if steps == 0:
        device = next(model.parameters(), torch.empty(0)).device
        empty = torch.zeros(batch, beams, 0, dtype=torch.long, device=device)
        return empty, torch.zeros(batch, beams, device=device)
    last, held, cache = _prefill(model, prompts, True, max_len)  # [batch_size, vocab_size]
    # 每个提示变成 beams 行：第 b * beams + i 行是提示 b 的第 i 束
    # Each prompt becomes beams rows: row b * beams + i is prompt b's beam i
    # 每个提示的行 0
    # each prompt's row 0
    first = torch.arange(batch, device=held.device) * beams  # [batch_size]
    rows = torch.arange(batch, device=held.device).repeat_interleave(beams)  # [batch_size * beams]
    cache.reorder(rows)
    held = held[rows]  # [batch_size * beams, 1, 1, width]
    logp = last.log_softmax(dim=-1)[rows]  # [batch_size * beams, vocab_size]
    # 起初一个提示的各束相同：只让束 0 提出候选，第一步就是 logits 的前 beams 名
    # At first a prompt's beams are the same: only beam 0 proposes, so the first step takes
    # the prompt's beams best tokens
    scores = torch.full((batch, beams), float("-inf"), dtype=logp.dtype, device=logp.device)
    scores[:, 0] = 0
    eos = None if stop is None else torch.tensor(stop[0], device=held.device)
    if eos is not None:
        # 结束的束只接 pad，对数概率为 0：得分不再变
        # A finished beam is continued by pad only, at log-probability 0: its score stays
        finished = torch.full_like(logp[0], float("-inf"))  # [vocab_size]
        finished[stop[1]] = 0.0
    done = torch.zeros(batch * beams, dtype=torch.bool, device=held.device)
    seqs = rows.new_zeros(batch * beams, 0)  # [batch_size * beams, 0]
    for step in range(steps):
        if step:
            last, held = _step(model, seqs[:, -1], held, cache)  # [batch_size * beams, vocab_size]
            logp = last.log_softmax(dim=-1)
        if eos is not None:
            logp = torch.where(done[:, None], finished, logp)  # [batch_size * beams, vocab_size]
        total = scores.view(batch, beams, 1) + logp.view(batch, beams, vocab)
        scores, best = total.view(batch, beams * vocab).topk(beams)  # [batch_size, beams]
        # 在整个批里的行号
        # global rows
        parent = (first[:, None] + best // vocab).flatten()  # [batch_size * beams]
        token = (best % vocab).flatten()  # [batch_size * beams]
        # 现在每一行存的是它所接续的那个 beam 的历史
        # each row now holds the history of the beam it continues
        cache.reorder(parent)
        seqs = torch.cat([seqs[parent], token[:, None]], dim=1)  # [batch_size * beams, step + 1]
        if eos is not None:
            done = done[parent] | torch.isin(token, eos)
            if bool(done.all()):
                break
    return seqs.view(batch, beams, -1), scores


# --8<-- [end:beam]


# transformers' causal language models from_hf loads, recognised by class name (mha never imports
# transformers): one dense SwiGLU MLP per layer, attention that mha.interop.from_hf converts.
HF_MODELS = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")


# --8<-- [start:from_hf]
def from_hf(hf_model: nn.Module) -> Llama:
    """A [`Llama`][mha.decoder.Llama] equal to a transformers causal language model.

    As nanoGPT's ``from_pretrained`` loads GPT-2: the sizes come from the model, each layer's
    attention from [`mha.interop.from_hf`][mha.interop.from_hf] (which reads its heads, head
    size, biases, q/k norm, rotary embedding and sliding window), and every other weight is
    copied exactly: the token embedding, each layer's two RMSNorms and SwiGLU, the final
    RMSNorm and ``lm_head`` (none when the embeddings are tied). The result, on the model's
    device and in its dtype, gives its logits for the same ``ids``, ``positions`` (transformers'
    ``position_ids``) and key mask (``attention_mask`` as booleans, ``[batch_size, 1, 1,
    k_len]``).

    Args:
        hf_model: a transformers ``LlamaForCausalLM``, ``MistralForCausalLM``,
            ``Qwen2ForCausalLM`` or ``Qwen3ForCausalLM`` (from ``from_pretrained``, or built
            from a config: nothing is downloaded here).

    Returns:
        A ``Llama`` in ``hf_model``'s mode (training or evaluation).

    Raises:
        TypeError: ``hf_model`` is another class (a mixture of experts among them: ``Llama``
            has one dense MLP per block).
        ValueError: its config has an activation other than ``silu`` or an MLP bias, or what
            [`mha.interop.from_hf`][mha.interop.from_hf] refuses (a rope type ``mha.rope`` does
            not implement); or the model has parameters ``from_hf`` does not copy.

    Examples:
        >>> from_hf(torch.nn.Linear(2, 2))
        Traceback (most recent call last):
        ...
        TypeError: hf_model must be a transformers LlamaForCausalLM, MistralForCausalLM,
        Qwen2ForCausalLM or Qwen3ForCausalLM, got Linear

    中文:
        构建一个与 transformers 的因果语言模型相等的 [`Llama`][mha.decoder.Llama]。

        与 nanoGPT 的 ``from_pretrained`` 加载 GPT-2 的做法一样：尺寸取自模型，每一层的注意力由
        [`mha.interop.from_hf`][mha.interop.from_hf] 转换（头数、头的宽度、偏置、查询和键的归一化、
        旋转位置编码和滑动窗口都由它读出），其余的权重原样复制：词嵌入，每一层的两个 RMSNorm 和
        SwiGLU，最后的 RMSNorm 和 ``lm_head``（共享词嵌入权重时没有）。结果与模型在同一个设备上、
        dtype 相同；给它同样的 ``ids``、``positions``（transformers 的 ``position_ids``）和键掩码
        （把 ``attention_mask`` 转成布尔值，``[batch_size, 1, 1, k_len]``），得到的 logits 与模型的
        相同。

        参数：
            hf_model: transformers 的 ``LlamaForCausalLM``、``MistralForCausalLM``、
                ``Qwen2ForCausalLM`` 或 ``Qwen3ForCausalLM``（``from_pretrained`` 加载的，或者由
                配置构建的：这里不下载任何东西）。

        返回：
            一个 ``Llama``，与 ``hf_model`` 处于同一模式（训练或评估）。

        异常：
            TypeError: ``hf_model`` 是别的类（包括混合专家模型：``Llama`` 每个块只有一个稠密的
                MLP）。
            ValueError: 它的配置用了 ``silu`` 以外的激活函数或者 MLP 的偏置，或者
                [`mha.interop.from_hf`][mha.interop.from_hf] 不支持的东西（``mha.rope`` 没有实现的
                rope 类型）；或者模型里有 ``from_hf`` 不复制的参数。
    """
    _check_hf_model(hf_model)
    layers = hf_model.model.layers
    # 每一层的注意力交给 mha.interop.from_hf：头数、窗口、旋转等选项都由它从那一层读出
    # Each layer's attention goes to mha.interop.from_hf, which reads its options (heads,
    # window, rotation, ...) from that layer
    attns = [mha.interop.from_hf(layer.self_attn) for layer in layers]
    first, embedding = attns[0], hf_model.model.embed_tokens.weight
    model = Llama(
        embedding.size(0),
        first.hidden_size,
        first.heads_num,
        kv_heads=first.kv_heads,
        head_size=first.head_size,
        mlp_size=layers[0].mlp.gate_proj.out_features,
        num_layers=len(layers),
        windows=[attn.window for attn in attns],
        qk_norm=first.qk_norm,
        attn_bias=first.bias,
        norm_eps=float(hf_model.model.norm.variance_epsilon),
        rope=first.rope,
        # tie_word_embeddings：同一个张量
        # tie_word_embeddings: one tensor
        tied=hf_model.lm_head.weight is embedding,
    ).to(device=embedding.device, dtype=embedding.dtype)
    with torch.no_grad():
        model.tokens.weight.copy_(embedding)
        for block, layer, attn in zip(model.blocks, layers, attns, strict=True):
            block.attn = attn
            block.norm_1.weight.copy_(layer.input_layernorm.weight)
            block.norm_2.weight.copy_(layer.post_attention_layernorm.weight)
            block.mlp.gate.weight.copy_(layer.mlp.gate_proj.weight)
            block.mlp.up.weight.copy_(layer.mlp.up_proj.weight)
            block.mlp.down.weight.copy_(layer.mlp.down_proj.weight)
        model.norm.weight.copy_(hf_model.model.norm.weight)
        if model.head is not None:
            model.head.weight.copy_(hf_model.lm_head.weight)
    _check_copied(hf_model, model)
    return model.train(hf_model.training)


# --8<-- [end:from_hf]


def _check_hf_model(hf_model: object) -> None:
    """``hf_model`` is a model ``from_hf`` converts, with a config it can express."""
    name = type(hf_model).__name__
    if name not in HF_MODELS:
        config = getattr(hf_model, "config", None)
        experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None)
        moe = (
            f" (a mixture of {experts} experts: mha.decoder.Llama has one dense MLP per block)"
            if experts
            else ""
        )
        raise TypeError(
            f"hf_model must be a transformers {', '.join(HF_MODELS[:-1])} or {HF_MODELS[-1]}, "
            f"got {name}{moe}"
        )
    config = hf_model.config
    if config.hidden_act != "silu":
        raise ValueError(
            f"hf_model.config.hidden_act must be 'silu' (the SwiGLU of mha.decoder.Llama), "
            f"got {config.hidden_act!r}"
        )
    if getattr(config, "mlp_bias", False):
        raise ValueError(
            "hf_model.config.mlp_bias must be False (the SwiGLU of mha.decoder.Llama has no "
            "bias), got True"
        )


def _check_copied(hf_model: nn.Module, model: Llama) -> None:
    """Every parameter of ``hf_model`` has its counterpart in ``model``: none left behind."""
    theirs = sum(p.numel() for p in hf_model.parameters())
    ours = sum(p.numel() for p in model.parameters())
    if theirs != ours:
        raise ValueError(
            f"hf_model has {theirs} parameters, the converted model {ours}: hf_model has "
            "weights from_hf does not copy (it copies the embedding, each layer's norms, "
            "attention and MLP, the final norm and lm_head)"
        )


# The checks of generate and beam_search: every argument, before any work, each error naming the
# argument, what it should be and what it is.


def _check_model(model: object) -> None:
    """``model`` has what generation uses ([`LanguageModel`][mha.decoder.LanguageModel])."""
    missing = [name for name in PROTOCOL if not hasattr(model, name)]
    if not isinstance(model, nn.Module) or missing:
        lacks = f" (it has no {' and no '.join(missing)})" if missing else ""
        raise TypeError(
            "model must be an nn.Module with vocab_size, max_len, num_layers and a forward "
            "taking (ids, positions=, attn_mask=, cache=), the protocol "
            "mha.decoder.LanguageModel, such as mha.decoder.Decoder or mha.decoder.Llama, "
            f"got {type(model).__name__}{lacks}"
        )
    check_length("model.vocab_size", model.vocab_size, positive=True)
    check_length("model.num_layers", model.num_layers, positive=True)
    if model.max_len is not None:
        check_length("model.max_len", model.max_len, positive=True)


def _check_prompt(name: str, prompt: object, vocab_size: int) -> None:
    """``prompt`` is a non-empty list of token ids in ``0 .. vocab_size - 1``."""
    if isinstance(prompt, Tensor):
        raise TypeError(f"{name} must be a list of token ids, got a Tensor: pass {name}.tolist()")
    if not isinstance(prompt, list | tuple):
        raise TypeError(
            f"{name} must be a list of token ids, got {type(prompt).__name__} ({prompt!r})"
        )
    if not prompt:
        raise ValueError(f"{name} must hold at least one token id, got {prompt!r}")
    for i, token in enumerate(prompt):
        _check_token(f"{name}[{i}]", token, vocab_size)


def _check_token(name: str, token: object, vocab_size: int) -> None:
    """``token`` is a token id, ``0 .. vocab_size - 1``."""
    check_length(name, token)
    if token >= vocab_size:
        raise ValueError(
            f"{name} must be a token id in 0 .. vocab_size - 1 ({vocab_size - 1}), got {token}"
        )


def _check_prompts(prompts: object, vocab_size: int) -> None:
    """``prompts`` is a non-empty list of prompts, each checked by ``_check_prompt``."""
    if isinstance(prompts, Tensor):
        raise TypeError("prompts must be a list of prompts, got a Tensor: pass prompts.tolist()")
    if not isinstance(prompts, list | tuple):
        raise TypeError(
            f"prompts must be a list of prompts (each a list of token ids), "
            f"got {type(prompts).__name__} ({prompts!r})"
        )
    if not prompts:
        raise ValueError(f"prompts must hold at least one prompt, got {prompts!r}")
    if all(isinstance(token, int) for token in prompts):
        raise TypeError(
            f"prompts must be a list of prompts (each a list of token ids), got a list of ints "
            f"{list(prompts)!r}: one prompt is written [{list(prompts)!r}]"
        )
    for row, prompt in enumerate(prompts):
        _check_prompt(f"prompts[{row}]", prompt, vocab_size)


def _check_fits(model: LanguageModel, prompts: list, steps: int, max_len: object) -> None:
    """The longest prompt and ``steps`` more fit in the model's ``max_len`` and the caches'."""
    row = max(range(len(prompts)), key=lambda r: len(prompts[r]))  # the first of the longest
    length = len(prompts[row])
    longest = f"the longest prompt (prompts[{row}], {length} tokens)"
    if model.max_len is not None and length + steps > model.max_len:
        raise ValueError(
            f"{longest} plus steps ({steps}) is {length + steps} positions, "
            f"more than model.max_len ({model.max_len})"
        )
    if max_len is not None:
        check_length("max_len", max_len, positive=True)
        if length + steps > max_len:
            raise ValueError(
                f"max_len ({max_len}) must be at least {longest} plus steps ({steps}), "
                f"{length + steps}: each cache holds every position"
            )


def _check_generate(
    model: object,
    prompts: object,
    steps: object,
    left: object,
    temperature: object,
    top_k: object,
    top_p: object,
    generator: object,
    max_len: object,
) -> None:
    """``generate``'s arguments, but ``eos_token_id`` and ``pad_token_id`` (``_check_stop``)."""
    _check_model(model)
    _check_prompts(prompts, model.vocab_size)
    check_length("steps", steps)
    check_flag("left", left)
    windows = [
        (name, kind, getattr(module, kind))
        for name, module in model.named_modules()
        for kind in ("window", "chunk")
        if getattr(module, kind, None) is not None
    ]
    if not left and windows and len({len(prompt) for prompt in prompts}) > 1:
        name, kind, size = windows[0]
        said = {"window": "the sliding window", "chunk": "the chunks"}[kind]
        counts = {"window": "counts", "chunk": "count"}[kind]
        raise ValueError(
            f"left=False pads the shorter prompts on the right, and {said} of model.{name} "
            f"({kind}={size}) {counts} columns, the padding's among them: pad on the left "
            f"(left=True, the default) with a model that has a {kind}"
        )
    check_number("temperature", temperature)
    if not temperature >= 0:
        raise ValueError(f"temperature must be 0 (greedy) or positive, got {temperature}")
    if top_k is not None:
        check_length("top_k", top_k, positive=True)
        if top_k > model.vocab_size:
            raise ValueError(
                f"top_k ({top_k}) must be at most model.vocab_size ({model.vocab_size})"
            )
    if top_p is not None:
        check_number("top_p", top_p)
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {top_p}")
    for name, value in (("top_k", top_k), ("top_p", top_p)):
        if value is not None and temperature == 0:
            raise ValueError(
                f"{name} ({value}) chooses among the tokens to sample from: it needs a "
                "temperature above 0, got temperature=0 (greedy)"
            )
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(
                f"generator must be a torch.Generator or None, got {type(generator).__name__}"
            )
        device = next(model.parameters(), torch.empty(0)).device
        if generator.device.type != device.type:
            raise ValueError(
                f"generator must be on the model's device ({device}), got {generator.device}"
            )
    _check_fits(model, prompts, steps, max_len)


def _check_search(
    model: object, prompts: object, steps: object, beams: object, max_len: object
) -> None:
    """``beam_search``'s arguments, but ``eos_token_id`` and ``pad_token_id``."""
    _check_model(model)
    _check_prompts(prompts, model.vocab_size)
    check_length("steps", steps)
    check_length("beams", beams, positive=True)
    if beams > model.vocab_size:
        raise ValueError(
            f"beams ({beams}) must be at most model.vocab_size ({model.vocab_size}): "
            "the first step has vocab_size candidates"
        )
    _check_fits(model, prompts, steps, max_len)


def _check_stop(
    model: LanguageModel, eos_token_id: object, pad_token_id: object
) -> tuple[list[int], int] | None:
    """The ids that stop a row and the id a stopped row gets, or ``None`` without
    ``eos_token_id``."""
    if eos_token_id is None:
        if pad_token_id is not None:
            raise ValueError(
                f"pad_token_id ({pad_token_id}) is what a row gets after eos_token_id: "
                "give eos_token_id too, got eos_token_id=None"
            )
        return None
    if isinstance(eos_token_id, list | tuple):
        if not eos_token_id:
            raise ValueError("eos_token_id must hold at least one token id, got []")
        for i, token in enumerate(eos_token_id):
            _check_token(f"eos_token_id[{i}]", token, model.vocab_size)
        eos = list(eos_token_id)
    else:
        _check_token("eos_token_id", eos_token_id, model.vocab_size)
        eos = [eos_token_id]
    if pad_token_id is None:
        return eos, eos[0]
    _check_token("pad_token_id", pad_token_id, model.vocab_size)
    return eos, pad_token_id


def _check_forward(
    model: Decoder | Llama, ids: object, positions: object, cache: ModelCache | None
) -> None:
    """The ``forward`` of ``Decoder`` and ``Llama``: ``ids``, ``positions`` and ``cache``."""
    check_integer_tensor("ids", ids, "[batch_size, q_len]")
    if ids.dim() != 2:
        raise ValueError(f"ids must be 2-D [batch_size, q_len], got shape {list(ids.shape)}")
    check_range("ids", ids, model.vocab_size - 1, "vocab_size - 1")
    if cache is not None:
        if not isinstance(cache, ModelCache):
            raise TypeError(f"cache must be a mha.full.ModelCache, got {type(cache).__name__}")
        if len(cache.layers) != model.num_layers:
            raise ValueError(
                f"cache must have one layer per block ({model.num_layers}), got {len(cache.layers)}"
            )
    if positions is None:
        start = 0 if cache is None else len(cache)
        if model.max_len is not None and start + ids.size(1) > model.max_len:
            raise ValueError(
                f"len(cache) ({start}) plus q_len ({ids.size(1)}) is {start + ids.size(1)} "
                f"positions, more than max_len ({model.max_len})"
            )
        return
    check_integer_tensor("positions", positions, "[batch_size, q_len] or [q_len]")
    if positions.shape not in (ids.shape, ids.shape[1:]):
        raise ValueError(
            f"positions must have shape [batch_size, q_len] {list(ids.shape)} or [q_len] "
            f"{list(ids.shape[1:])}, got {list(positions.shape)}"
        )
    if model.max_len is not None:
        check_range("positions", positions, model.max_len - 1, "max_len - 1")
