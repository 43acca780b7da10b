"""A decoder-only language model on [`mha.full.MHA`][mha.full.MHA], and generation with its cache.

The model of the site's chapter *Use it in a model*: pre-norm blocks (``x + attn(norm(x))``, then
``x + mlp(norm(x))``), learned absolute positions, a [`ModelCache`][mha.cache.ModelCache] for
generation. [`generate`][mha.decoder.generate] runs a batch of prompts of different lengths,
padded on the left or the right, and gives each the tokens it would get alone;
[`beam_search`][mha.decoder.beam_search] keeps the best ``beams`` continuations with
[`ModelCache.reorder`][mha.cache.ModelCache.reorder].

Shapes: ``batch_size`` sequences of ``seq_len`` tokens (``q_len`` new ones in a call with a cache,
``k_len`` held in all), ``vocab_size`` token ids, ``hidden_size`` wide.

Examples:
    >>> import torch
    >>> from mha.decoder import Decoder, generate
    >>> _ = torch.manual_seed(0)
    >>> model = Decoder(vocab_size=11, hidden_size=16, heads_num=4, kv_heads=2, num_layers=2)
    >>> model(torch.tensor([[1, 2, 3]])).shape  # [batch_size, seq_len, vocab_size]
    torch.Size([1, 3, 11])
    >>> generate(model.eval(), [[1, 2, 3], [4]], steps=5).shape  # [batch_size, steps]
    torch.Size([2, 5])
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from mha.cache import KVCache, ModelCache
from mha.checks import (
    _check_flag,
    _check_integer_tensor,
    _check_length,
    _check_number,
    _check_range,
)
from mha.full import MHA
from mha.masks import padding_mask

__all__ = ["Block", "Decoder", "beam_search", "generate", "positions_of"]


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
        _check_length("vocab_size", vocab_size, positive=True)
        _check_length("num_layers", num_layers, positive=True)
        _check_length("max_len", max_len, positive=True)
        self.vocab_size, self.max_len = vocab_size, max_len
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


@torch.no_grad()
def generate(
    model: Decoder,
    prompts: list[list[int]],
    steps: int,
    *,
    left: bool = True,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    max_len: int | None = None,
) -> Tensor:
    """Continue each prompt by ``steps`` tokens, all prompts in one batch.

    The prompts are padded to the longest, on the left (the default) or the right; a key mask
    that grows by one real position per step and each row's own positions make every row's
    tokens those its prompt would get alone.

    The model need not be a [`Decoder`][mha.decoder.Decoder]; what ``generate`` uses of it is:
    ``model.vocab_size``, ``model.max_len`` (the most positions a sequence may have; ``None`` or
    absent: no limit), ``len(model.blocks)`` (one cache per block), its parameters (their device
    is where the tokens go), and the call ``model(ids, positions=..., attn_mask=..., cache=...)``
    with ``ids`` and ``positions`` ``[batch_size, q_len]``, ``attn_mask`` a key mask
    ``[batch_size, 1, 1, k_len]`` and ``cache`` a [`ModelCache`][mha.cache.ModelCache] it extends,
    returning the logits ``[batch_size, q_len, vocab_size]``.

    Args:
        model: the decoder, in evaluation mode.
        prompts: token ids, one list per prompt, each at least one token.
        steps: how many tokens to add to each.
        left: pad on the left (``True``) or the right.
        temperature: 0 picks the most likely token (greedy); above 0, samples from the softmax
            of ``logits / temperature``.
        generator: for sampling, on the model's device.
        max_len: each cache's ``max_len`` (``None``: growing buffers); at least the longest
            prompt's length plus ``steps``.

    Returns:
        ``[batch_size, steps]`` the new tokens.

    Raises:
        TypeError: ``model`` lacks what it needs (above); ``prompts`` is not a list of lists of
            ``int``; ``steps`` or ``max_len`` is not an ``int``, ``left`` not a ``bool``,
            ``temperature`` not a number, or ``generator`` not a ``torch.Generator``.
        ValueError: there is no prompt, a prompt is empty or holds an id outside
            ``0 .. vocab_size - 1``; ``left=False`` with prompts of different lengths and a
            model with a sliding window (its window counts the padding's columns: pad on the
            left); ``steps`` is negative, ``temperature`` negative;
            ``generator`` is on another device than the model; the longest prompt plus
            ``steps`` is more than ``model.max_len`` or ``max_len``.

    Examples:
        >>> model = Decoder(vocab_size=11, hidden_size=16, heads_num=4, max_len=8).eval()
        >>> generate(model, [[1, 2, 3], [4]], steps=5).shape
        torch.Size([2, 5])
        >>> generate(model, [[1, 2, 3], [4]], steps=6)
        Traceback (most recent call last):
        ...
        ValueError: the longest prompt (prompts[0], 3 tokens) plus steps (6) is 9 positions,
        more than model.max_len (8)

    中文:
        把每个提示续写 ``steps`` 个位置，所有提示放在一批里。

        提示填充到最长的那个，填充在左边（默认）或右边；键掩码每一步增加一个真实位置，每一行用它自己
        的位置，所以每一行生成的 id，与它的提示单独生成时相同。

        模型不必是 [`Decoder`][mha.decoder.Decoder]；``generate`` 用到的只有：
        ``model.vocab_size``；``model.max_len``（一条序列最多的位置数，为 ``None`` 或没有
        这个属性时不设上限）；``len(model.blocks)``（每个块一个缓存）；模型的参数（新的 id
        放在它们所在的设备上）；以及调用
        ``model(ids, positions=..., attn_mask=..., cache=...)``，其中 ``ids`` 和
        ``positions`` 为 ``[batch_size, q_len]``，``attn_mask`` 是键掩码
        ``[batch_size, 1, 1, k_len]``，``cache`` 是一个由它延长的
        [`ModelCache`][mha.cache.ModelCache]，返回形状为 ``[batch_size, q_len, vocab_size]``
        的 logits。

        参数：
            model: 解码器，处于评估模式。
            prompts: 词表 id，每个提示一个列表，至少一个 id。
            steps: 每个提示续写多少个位置。
            left: 填充在左边（``True``）还是右边。
            temperature: 0 表示取概率最大的 id（贪心）；大于 0 时，从 ``logits / temperature``
                的 softmax 中采样。
            generator: 采样用的随机数生成器，与模型在同一个设备上。
            max_len: 每个缓存的 ``max_len``（``None``：缓冲区按需增长）；不小于最长的提示的长度加上
                ``steps``。

        返回：
            ``[batch_size, steps]``，新生成的 id。

        异常：
            TypeError: ``model`` 缺少上面说的属性；``prompts`` 不是由 ``int`` 列表组成的列表；
                ``steps`` 或 ``max_len`` 不是 ``int``，``left`` 不是 ``bool``，``temperature``
                不是数，或者 ``generator`` 不是 ``torch.Generator``。
            ValueError: 一个提示也没有，某个提示为空，或者有超出 0–``vocab_size - 1`` 的 id；
                提示长短不一、``left=False`` 而模型有滑动窗口（窗口按列计数，会把填充的列也算进去：
                请在左边填充）；``steps`` 为负，``temperature`` 为负；``generator`` 与模型不在同一个
                设备上；
                最长的提示加上 ``steps`` 超过 ``model.max_len`` 或 ``max_len``。
    """
    device = _check_generate(model, prompts, steps, left, temperature, generator, max_len)
    lengths = torch.tensor([len(p) for p in prompts], device=device)  # [batch_size]
    width = int(lengths.max())
    tokens = torch.zeros(len(prompts), width, dtype=torch.long, device=device)
    for row, prompt in enumerate(prompts):
        where = slice(width - len(prompt), width) if left else slice(0, len(prompt))
        tokens[row, where] = torch.tensor(prompt, device=device)
    held = padding_mask(lengths, width, left=left)  # [batch_size, 1, 1, width]
    cache = ModelCache(len(model.blocks), max_len=max_len)
    logits = model(tokens, positions=positions_of(held), attn_mask=held, cache=cache)
    # 每一行最后一个真实位置的 logits：左填充时都在最后一列
    # Each row's last real position: the last column when padded on the left
    last = logits[:, -1] if left else logits[torch.arange(len(prompts)), lengths - 1]
    new = [tokens[:, :0]]  # [batch_size, 0], so that steps=0 gives [batch_size, 0]
    for _ in range(steps):
        token = _pick(last, temperature, generator)  # [batch_size]
        new.append(token[:, None])
        position = held.sum(dim=-1).view(-1, 1)  # [batch_size, 1]: the real positions so far
        held = torch.cat([held, held.new_ones(len(prompts), 1, 1, 1)], dim=-1)  # one more key
        last = model(token[:, None], positions=position, attn_mask=held, cache=cache)[:, -1]
    return torch.cat(new, dim=1)  # [batch_size, steps]


def _pick(logits: Tensor, temperature: float, generator: torch.Generator | None) -> Tensor:
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


# --8<-- [end:generate]


# --8<-- [start:beam]
@torch.no_grad()
def beam_search(model: Decoder, prompt: list[int], steps: int, beams: int) -> tuple[Tensor, Tensor]:
    """The ``beams`` most likely continuations of ``steps`` tokens, found one token at a time.

    After each step the ``beams`` best of ``beams × vocab_size`` candidates survive, and the
    cache is reordered so that row ``i`` holds the history of the beam that candidate ``i``
    continues.

    The model need not be a [`Decoder`][mha.decoder.Decoder]; ``beam_search`` uses what
    [`generate`][mha.decoder.generate] uses, but calls ``model(ids, cache=...)`` without
    positions or mask: the model counts positions from ``len(cache)`` on.

    Args:
        model: the decoder, in evaluation mode.
        prompt: token ids, one prompt of at least one token.
        steps: tokens per continuation; 0 gives ``beams`` empty ones, of log-probability 0.
        beams: how many continuations to keep, at most ``vocab_size``.

    Returns:
        ``[beams, steps]`` the continuations, best first, and ``[beams]`` their total
            log-probabilities.

    Raises:
        TypeError: ``model`` lacks what it needs (above); ``prompt`` is not a list of ``int``
            (a list of prompts included); ``steps`` or ``beams`` is not an ``int``.
        ValueError: ``prompt`` is empty or holds an id outside ``0 .. vocab_size - 1``;
            ``steps`` is negative; ``beams`` is not positive or more than ``vocab_size``; the
            prompt plus ``steps`` is more than ``model.max_len``.

    Examples:
        >>> model = Decoder(vocab_size=11, hidden_size=16, heads_num=4).eval()
        >>> seqs, scores = beam_search(model, [1, 2], steps=4, beams=3)
        >>> # 序列 [beams, steps]，得分 [beams]
        >>> seqs.shape, scores.shape  # [beams, steps], [beams]
        (torch.Size([3, 4]), torch.Size([3]))
        >>> beam_search(model, [1, 2], steps=4, beams=12)
        Traceback (most recent call last):
        ...
        ValueError: beams (12) must be at most model.vocab_size (11):
        the first step has vocab_size candidates

    中文:
        逐个位置地找出 ``beams`` 个概率最大的续写，每个续写 ``steps`` 个位置。

        每一步在 ``beams × vocab_size`` 个候选中留下最好的 ``beams`` 个，并重排缓存，让行 ``i``
        存着候选 ``i`` 所接续那一束的历史。

        模型不必是 [`Decoder`][mha.decoder.Decoder]；``beam_search`` 用到的与
        [`generate`][mha.decoder.generate] 相同，只是调用 ``model(ids, cache=...)`` 时不给位置和
        掩码：模型从 ``len(cache)`` 起数位置。

        参数：
            model: 解码器，处于评估模式。
            prompt: 提示的词表 id，只有一个提示，至少一个 id。
            steps: 每个续写的位置数；为 0 时给出 ``beams`` 个空的续写，对数概率都是 0。
            beams: 保留几个续写，不超过 ``vocab_size``。

        返回：
            ``[beams, steps]`` 个续写（最好的在前），以及 ``[beams]`` 个总对数概率。

        异常：
            TypeError: ``model`` 缺少上面说的属性；``prompt`` 不是 ``int`` 的列表（多个提示组成的
                列表也不行）；``steps`` 或 ``beams`` 不是 ``int``。
            ValueError: ``prompt`` 为空，或者有超出 0–``vocab_size - 1`` 的 id；``steps`` 为负；
                ``beams`` 不是正数或者超过 ``vocab_size``；提示加上 ``steps`` 超过
                ``model.max_len``。
    """
    device = _check_search(model, prompt, steps, beams)
    if steps == 0:  # nothing to choose: beams empty continuations, each of log-probability 0
        empty = torch.zeros(beams, 0, dtype=torch.long, device=device)  # [beams, 0]
        return empty, torch.zeros(beams, device=device)
    cache = ModelCache(len(model.blocks))
    logits = model(torch.tensor([prompt], device=device), cache=cache)[:, -1]  # [1, vocab_size]
    scores, first = logits.log_softmax(dim=-1)[0].topk(beams)  # [beams]
    cache.reorder(torch.zeros(beams, dtype=torch.long, device=device))  # one prompt, beams rows
    seqs = first[:, None]  # [beams, 1]
    for _ in range(steps - 1):
        logp = model(seqs[:, -1:], cache=cache)[:, -1].log_softmax(dim=-1)  # [beams, vocab_size]
        total = (scores[:, None] + logp).flatten()  # [beams * vocab_size]
        scores, best = total.topk(beams)  # [beams]
        parent, token = best // logp.size(1), best % logp.size(1)
        cache.reorder(parent)  # row i now holds the history of the beam candidate i continues
        seqs = torch.cat([seqs[parent], token[:, None]], dim=1)  # [beams, step + 1]
    return seqs, scores


# --8<-- [end:beam]


# The checks of generate and beam_search: every argument, before any work, each error naming the
# argument, what it should be and what it is.


def _check_model(model: object) -> torch.device:
    """``model`` has what generation uses (``generate``'s docstring); returns its device."""
    missing = [name for name in ("blocks", "vocab_size") if not hasattr(model, name)]
    if not isinstance(model, nn.Module) or missing:
        lacks = f" (it has no {' and no '.join(missing)})" if missing else ""
        raise TypeError(
            "model must be an nn.Module with blocks, vocab_size and a forward taking "
            f"(ids, positions=, attn_mask=, cache=), such as mha.decoder.Decoder, "
            f"got {type(model).__name__}{lacks}"
        )
    _check_length("model.vocab_size", model.vocab_size, positive=True)
    if getattr(model, "max_len", None) is not None:
        _check_length("model.max_len", model.max_len, positive=True)
    return next(model.parameters(), torch.empty(0)).device


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
        _check_length(f"{name}[{i}]", token)
        if token >= vocab_size:
            raise ValueError(
                f"{name}[{i}] must be a token id in 0 .. vocab_size - 1 ({vocab_size - 1}), "
                f"got {token}"
            )


def _check_fits(model: nn.Module, name: str, length: int, steps: int) -> None:
    """A prompt of ``length`` tokens and ``steps`` more fit in the model's ``max_len``."""
    most = getattr(model, "max_len", None)
    if most is not None and length + steps > most:
        raise ValueError(
            f"{name} plus steps ({steps}) is {length + steps} positions, "
            f"more than model.max_len ({most})"
        )


def _check_generate(
    model: object,
    prompts: object,
    steps: object,
    left: object,
    temperature: object,
    generator: object,
    max_len: object,
) -> torch.device:
    """``generate``'s arguments; returns the model's device."""
    device = _check_model(model)
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
        _check_prompt(f"prompts[{row}]", prompt, model.vocab_size)
    _check_length("steps", steps)
    _check_flag("left", left)
    windows = [
        (name, module.window)
        for name, module in model.named_modules()
        if getattr(module, "window", None) is not None
    ]
    if not left and windows and len({len(prompt) for prompt in prompts}) > 1:
        name, window = windows[0]
        raise ValueError(
            f"left=False pads the shorter prompts on the right, and the sliding window of "
            f"model.{name} (window={window}) counts columns, the padding's among them: pad on "
            "the left (left=True, the default) with a windowed model"
        )
    _check_number("temperature", temperature)
    if not temperature >= 0:
        raise ValueError(f"temperature must be 0 (greedy) or positive, got {temperature}")
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(
                f"generator must be a torch.Generator or None, got {type(generator).__name__}"
            )
        if generator.device.type != device.type:
            raise ValueError(
                f"generator must be on the model's device ({device}), got {generator.device}"
            )
    row = max(range(len(prompts)), key=lambda r: len(prompts[r]))  # the first of the longest
    longest = f"the longest prompt (prompts[{row}], {len(prompts[row])} tokens)"
    _check_fits(model, longest, len(prompts[row]), steps)
    if max_len is not None:
        _check_length("max_len", max_len, positive=True)
        if len(prompts[row]) + steps > max_len:
            raise ValueError(
                f"max_len ({max_len}) must be at least {longest} plus steps ({steps}), "
                f"{len(prompts[row]) + steps}: each cache holds every position"
            )
    return device


def _check_search(model: object, prompt: object, steps: object, beams: object) -> torch.device:
    """``beam_search``'s arguments; returns the model's device."""
    device = _check_model(model)
    if isinstance(prompt, list | tuple) and any(isinstance(p, list | tuple) for p in prompt):
        raise TypeError(
            f"prompt must be one prompt, a list of token ids, got a list of {len(prompt)} lists: "
            "beam_search searches one prompt at a time"
        )
    _check_prompt("prompt", prompt, model.vocab_size)
    _check_length("steps", steps)
    _check_length("beams", beams, positive=True)
    if beams > model.vocab_size:
        raise ValueError(
            f"beams ({beams}) must be at most model.vocab_size ({model.vocab_size}): "
            "the first step has vocab_size candidates"
        )
    _check_fits(model, f"the prompt ({len(prompt)} tokens)", len(prompt), steps)
    return device


def _check_forward(
    model: Decoder, ids: object, positions: object, cache: ModelCache | None
) -> None:
    """``Decoder.forward``'s ``ids``, ``positions`` and ``cache``."""
    _check_integer_tensor("ids", ids, "[batch_size, q_len]")
    if ids.dim() != 2:
        raise ValueError(f"ids must be 2-D [batch_size, q_len], got shape {list(ids.shape)}")
    _check_range("ids", ids, model.vocab_size - 1, "vocab_size - 1")
    if cache is not None:
        if not isinstance(cache, ModelCache):
            raise TypeError(f"cache must be a mha.full.ModelCache, got {type(cache).__name__}")
        if len(cache.layers) != len(model.blocks):
            raise ValueError(
                f"cache must have one layer per block ({len(model.blocks)}), "
                f"got {len(cache.layers)}"
            )
    if positions is None:
        start = 0 if cache is None else len(cache)
        if start + ids.size(1) > model.max_len:
            raise ValueError(
                f"len(cache) ({start}) plus q_len ({ids.size(1)}) is {start + ids.size(1)} "
                f"positions, more than max_len ({model.max_len})"
            )
        return
    _check_integer_tensor("positions", positions, "[batch_size, q_len] or [q_len]")
    if positions.shape not in (ids.shape, ids.shape[1:]):
        raise ValueError(
            f"positions must have shape [batch_size, q_len] {list(ids.shape)} or [q_len] "
            f"{list(ids.shape[1:])}, got {list(positions.shape)}"
        )
    _check_range("positions", positions, model.max_len - 1, "max_len - 1")
