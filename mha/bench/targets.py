"""The performance targets: data in code, evaluated against a results file's measurements where
they are shown (the printed report, the site's performance page), never stored in the file.

A :class:`Target` says which measurement it checks (``metric`` of the row that ``row`` selects),
how (``op`` and ``bound``), and, in English and Chinese, its name and the reason a miss gives.
Where a run did not measure the length a target is set for (a ``--quick`` run), the target is not
checked: its :class:`Checked` says so (``state`` ``"not checked"``), with no value and no reason,
never a miss measured at another length. :func:`evaluate` gives a :class:`Checked` per target.

>>> results = {"gqa": [{"heads": 8, "kv_heads": 2, "seq_len": 64, "cache_ratio_vs_full": 0.25}]}
>>> [c.name[0] for c in evaluate(results, [GQA_CACHE])]
['GQA cache memory, kv_heads = 2 of 8 heads, / full heads']
>>> checked = evaluate(results, [GQA_CACHE])[0]
>>> checked.met, checked.state, checked.asked
(True, 'met', ('<= 0.25 (saves 3/4)', '<= 0.25（省下 3/4）'))
>>> short = {"decode": [{"seq_len": 16, "speedup": 0.9}]}
>>> later = evaluate(short, [t for t in TARGETS if t.row.section == "decode"])[0]
>>> later.state, later.value, later.why
('not checked', None, None)
>>> later.status[0]
'not checked (length not measured: seq_len 1024; this run measured 16)'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mha.bench.cases.decode import rest_of_step
from mha.bench.cases.parts import rest
from mha.bench.implementations import BY_NAME

Text = tuple[str, str]
"""A text in both languages: (English, 中文). The page shows the one of its language."""
NOTHING: Text = ("", "")
FAST = BY_NAME["full-fast"].zh
"""The Chinese texts name ``full-fast`` as the Chinese page labels it: 完整版 fast=True."""


def join(*parts: Text) -> Text:
    return "".join(p[0] for p in parts), "".join(p[1] for p in parts)


def pick(rows: list[dict], impl: str, seq: int, causal: bool = False) -> dict | None:
    """The row of ``impl`` at ``seq`` of the run's main dtype (a CUDA run adds half precision)."""
    for r in rows:
        if (
            r["impl"] == impl
            and r["seq_len"] == seq
            and r.get("causal", False) == causal
            and "dtype" not in r
        ):
            return r
    return None


@dataclass(frozen=True)
class Row:
    """The row a target reads: of ``section``, of ``impl`` (if rows name one), causal or not, at
    the length ``seq_len`` (only there), or with ``kv_heads = heads / kv_share``."""

    section: str
    impl: str | None = "full-fast"
    causal: bool = False
    seq_len: int | None = None
    kv_share: int | None = None

    def rows(self, results: dict) -> list[dict]:
        """The section's rows of the run's main dtype that this selects, at any length."""
        rows = [r for r in results.get(self.section, []) if "dtype" not in r]
        if self.kv_share is not None:
            rows = [r for r in rows if r["kv_heads"] * self.kv_share == r["heads"]]
        if self.impl is not None:
            rows = [
                r for r in rows if r["impl"] == self.impl and r.get("causal", False) == self.causal
            ]
        return rows

    def find(self, results: dict) -> dict | None:
        """The row at the length ``seq_len`` (if one is set), or ``None`` where the run did not
        measure it: never a row of another length."""
        rows = self.rows(results)
        if self.seq_len is not None:
            rows = [r for r in rows if r["seq_len"] == self.seq_len]
        return rows[0] if rows else None

    def lengths(self, results: dict) -> list[int]:
        """The lengths the run measured this row at."""
        return sorted({r["seq_len"] for r in self.rows(results) if "seq_len" in r})


@dataclass(frozen=True)
class Target:
    name: Text
    """Formatted with the row's fields: ``{seq_len}``, ``{kv_heads}`` ... (and ``{FAST}``)."""
    metric: str
    """The row's field it checks."""
    op: str
    """``<=``, ``>=`` or ``==`` (a count that must come out exactly)."""
    bound: float
    row: Row
    """What it depends on."""
    reason: Callable[[dict, dict, Target], Text]
    """Why a miss was missed: ``reason(results, row, target)``, from the measurements of the
    length it is set for."""
    label: Text = NOTHING
    """Written after the bound: ``<= 0.25 (saves 3/4)``."""

    def met(self, value: float) -> bool:
        return {"<=": value <= self.bound, ">=": value >= self.bound, "==": value == self.bound}[
            self.op
        ]


MET, MISSED, NOT_CHECKED = "met", "missed", "not checked"
"""The states of a :class:`Checked` target."""


@dataclass(frozen=True)
class Checked:
    """A target checked against one results file, or not checked where the run did not measure
    the length it is set for."""

    target: Target
    name: Text
    value: float | None
    """The measured value; ``None``: not checked."""
    met: bool | None
    """``None``: not checked (the length was not measured)."""
    why: Text | None
    """The reason of a missed target; ``None`` for a met one, or one not checked."""
    measured: tuple[int, ...] = ()
    """The lengths the run measured the target's row at (for a target not checked)."""

    @property
    def state(self) -> str:
        """``"met"``, ``"missed"`` or ``"not checked"``."""
        return NOT_CHECKED if self.met is None else MET if self.met else MISSED

    @property
    def status(self) -> Text:
        """The state in words: ``met``, ``MISSED``, or why it was not checked."""
        if self.state == NOT_CHECKED:
            seq, got = self.target.row.seq_len, ", ".join(str(q) for q in self.measured)
            return (
                f"not checked (length not measured: seq_len {seq}; this run measured {got})",
                f"未检查（没有测这个长度：seq_len {seq}；这次运行测的是 {got}）",
            )
        return ("met", "达到") if self.met else ("MISSED", "未达到")

    @property
    def asked(self) -> Text:
        t = self.target
        return f"{t.op} {t.bound}{t.label[0]}", f"{t.op} {t.bound}{t.label[1]}"


# ---- the reasons: what the measurements say about a miss ----------------------------------------


def parts_text(results: dict, seq: int, row: dict | None = None) -> Text:
    """Where full-fast's time goes at ``seq``, from the breakdown rounds."""
    p = next((p for p in results.get("parts", []) if p["seq_len"] == seq), None)
    if p is None:
        return "no breakdown measured at this length", "这个长度没有测各部分的耗时"
    text = join(
        (
            f"at seq_len {seq} full-fast takes {p['full_fast_ms']:.1f} ms: the SDPA kernel "
            f"alone {p['sdpa_ms']:.1f} ms ({p['sdpa_fraction_of_gemm']:.2f} of the GEMM "
            f"rate), the four projections alone {p['projections_ms']:.1f} ms "
            f"({p['projections_fraction_of_gemm']:.2f} of the GEMM rate), ",
            f"seq_len {seq} 时{FAST} 用时 {p['full_fast_ms']:.1f} ms：其中 SDPA 算子单独 "
            f"{p['sdpa_ms']:.1f} ms（GEMM 速率的 {p['sdpa_fraction_of_gemm']:.2f}），"
            f"四个投影单独 {p['projections_ms']:.1f} ms"
            f"（GEMM 速率的 {p['projections_fraction_of_gemm']:.2f}），",
        ),
        rest(p["other_ms"]),
    )
    if row is not None and not 0.8 < row["median_ms"] / p["full_fast_ms"] < 1.25:
        text = join(
            text,
            (
                f"; the forward rounds measured {row['median_ms']:.1f} ms for the same call, so "
                f"the shared machine's load changed during the run (noise, not the code)",
                f"；而前向计时的轮次里同一次调用测得 {row['median_ms']:.1f} ms，"
                f"说明运行期间这台共享机器的负载变了（是噪声，不是代码的问题）",
            ),
        )
    return text


def _over_torch(results: dict, row: dict, target: Target) -> Text:
    over = row["ratio_vs_torch"] / target.bound - 1
    return join(
        (
            f"{over:.1%} over the target against nn.MultiheadAttention measured in the "
            "same rounds; ",
            f"比目标多 {over:.1%}（与同一轮次里测得的 nn.MultiheadAttention 相比）；",
        ),
        parts_text(results, row["seq_len"], row),
    )


def _gemm(results: dict, row: dict, target: Target) -> Text:
    return parts_text(results, row["seq_len"], row)


def _memory(results: dict, fast: dict, target: Target) -> Text:
    c = results["config"]
    ref = pick(results["memory"], "torch", fast["seq_len"])
    one = c["batch"] * fast["seq_len"] * c["hidden"] * 4 / 2**20  # one [b, L, d] float32 tensor
    scores = c["batch"] * c["heads"] * fast["seq_len"] ** 2 * 4 / 2**20  # one [b, h, L, L] tensor
    seq, grew, ref_mb = fast["seq_len"], fast["peak_growth_mb"], ref["peak_growth_mb"]
    return (
        f"at seq_len {seq} full-fast grew {grew:.0f} MB, "
        f"{grew / one:.1f} times one [batch, seq_len, hidden] tensor "
        f"({one:.0f} MB: the input, q, k, v, the attention output and its merged copy are each "
        f"that size), while nn.MultiheadAttention grew {ref_mb:.0f} MB "
        f"({ref_mb / scores:.1f} times one [batch, heads, L, L] score tensor of "
        f"{scores:.0f} MB); the target needs those activation-sized tensors to stay under a "
        f"tenth of what nn.MultiheadAttention keeps",
        f"seq_len {seq} 时{FAST} 的内存增长了 {grew:.0f} MB，是一个 [batch, seq_len, hidden] "
        f"张量（{one:.0f} MB：输入、q、k、v、注意力输出和合并各头后的副本都是这么大）的 "
        f"{grew / one:.1f} 倍；nn.MultiheadAttention 增长了 {ref_mb:.0f} MB，是一个 "
        f"{scores:.0f} MB 的 [batch, heads, L, L] 分数张量的 {ref_mb / scores:.1f} 倍。目标要求这些"
        f"与激活值同样大小的张量加起来，不到 nn.MultiheadAttention 所占内存的十分之一",
    )


def _masked(results: dict, masked: dict, target: Target) -> Text:
    c = results["config"]
    seq = masked["seq_len"]
    mask_mb = c["batch"] * seq**2 / 2**20  # one [batch, 1, L, L] boolean mask
    grew, plain = masked["peak_growth_mb"], masked["unmasked_mb"]
    return (
        f"at seq_len {seq} full-fast grew {grew:.0f} MB with a [batch, 1, 1, L] padding mask "
        f"and {plain:.0f} MB without; the mask expanded to [batch, 1, L, L] would be "
        f"{mask_mb:.0f} MB as booleans and four times that as the kernel's float copy",
        f"seq_len {seq} 时，带 [batch, 1, 1, L] 填充掩码的{FAST} 内存增长 {grew:.0f} MB，"
        f"不带掩码时 {plain:.0f} MB；掩码若扩展成 [batch, 1, L, L]，布尔型就有 {mask_mb:.0f} MB，"
        f"算子转成的浮点副本又是它的四倍",
    )


SAVING = 0.9
"""A causal call that takes less than this share of its non-causal time saved time; up to
``1 / SAVING`` of it, the two are the same within a shared machine's noise."""


def causal_saving(share: float) -> Text:
    """What a causal call's time, as a ``share`` of its non-causal call's, says about the kernel:
    a saving only below ``SAVING``, never at a share of 1 within the noise.

    >>> causal_saving(0.55)[0]
    'the kernel skips the blocks above the diagonal'
    >>> causal_saving(1.0)[0]
    'no saving measured: the same time within the noise (a tenth either way)'
    """
    if share < SAVING:
        return "the kernel skips the blocks above the diagonal", "算子跳过了对角线以上的块"
    if share <= 1 / SAVING:
        return (
            "no saving measured: the same time within the noise (a tenth either way)",
            "没有测出省下的时间：在噪声（上下一成）之内两者用时相同",
        )
    return (
        "slower than without the mask: handling the mask cost more than any skipped block saved",
        "比不带掩码时还慢：处理掩码的开销超过了跳过的块省下的时间",
    )


def _causal(results: dict, row: dict, target: Target) -> Text:
    fwd, seq = results["forward"], row["seq_len"]
    fc, fp = pick(fwd, "full-fast", seq, True), pick(fwd, "full-fast", seq)
    tc, tp = pick(fwd, "torch", seq, True), pick(fwd, "torch", seq)
    share = fc["median_ms"] / fp["median_ms"]
    torch_share = tc["median_ms"] / tp["median_ms"]
    skip = causal_saving(share)
    short = seq < 512
    return (
        f"at seq_len {seq} full-fast causal takes {fc['median_ms']:.1f} ms "
        f"({share:.2f} of its non-causal time: {skip[0]}), nn.MultiheadAttention with the causal "
        f"mask {tc['median_ms']:.1f} ms ({torch_share:.2f} of its non-causal time)"
        + (
            "; at this short length fixed per-call costs are a large share of both" if short else ""
        ),
        f"seq_len {seq} 时，带因果掩码的{FAST} 用时 {fc['median_ms']:.1f} ms（是不带掩码时的 "
        f"{share:.2f}：{skip[1]}），带因果掩码的 nn.MultiheadAttention 用时 "
        f"{tc['median_ms']:.1f} ms"
        f"（是它不带掩码时的 {torch_share:.2f}）"
        + ("；这么短的长度下，每次调用的固定开销在两者中都占了很大比重" if short else ""),
    )


def _decode(results: dict, d: dict, target: Target) -> Text:
    wide = next((r for r in results.get("hf_decode", []) if r["seq_len"] == d["seq_len"]), None)
    than_hf = (
        ("", "")
        if wide is None
        else (
            f"; at this length and width (a quarter of the key/value heads) mha's step takes "
            f"{wide['ratio_vs_hf']:.2f} of the time of transformers' LlamaAttention's "
            "(the table against transformers)",
            f"；同样的长度和宽度下（键/值头是四分之一），mha 的一步用时是 transformers 的 "
            f"LlamaAttention 的 {wide['ratio_vs_hf']:.2f}（见与 transformers 对照的表）",
        )
    )
    return (
        f"one cached step takes {d['cache_ms']:.2f} ms against {d['recompute_ms']:.2f} ms for "
        f"the whole causal forward (medians of the same rounds); its attention kernel alone "
        f"takes {d['sdpa_ms']:.2f} ms and its four projections of one position "
        f"{d['projections_ms']:.2f} ms, so a step that cost only its kernels would reach "
        f"{d['speedup_of_kernels']:.0f}x; {_step_rest(d['other_ms'])[0]}" + than_hf[0],
        f"带缓存的一步用时 {d['cache_ms']:.2f} ms，整个因果前向计算用时 "
        f"{d['recompute_ms']:.2f} ms（同一批轮次的中位数）；其中注意力算子单独计时 "
        f"{d['sdpa_ms']:.2f} ms，一个位置的四个投影 {d['projections_ms']:.2f} ms，一步若只花在"
        f"这些算子上，加速比会是 {d['speedup_of_kernels']:.0f} 倍；{_step_rest(d['other_ms'])[1]}"
        + than_hf[1],
    )


def _step_rest(other_ms: float) -> Text:
    """What a decode step spends beyond its kernel and projections, said (a negative one is
    noise: ``rest_of_step``)."""
    if other_ms < 0:
        return rest_of_step(other_ms)
    return (
        f"the rest ({other_ms:.2f} ms) is mha's own work (checks, the cache's bookkeeping, the "
        "head split and merge) and whatever the kernels lose inside a step against alone",
        f"其余的 {other_ms:.2f} ms 是 mha 自己的工作（检查、缓存的记账、拆分与合并各头），"
        "加上算子在一步之中比单独计时慢的那部分",
    )


def _hf_decode(results: dict, row: dict, target: Target) -> Text:
    return (
        f"mha's step takes {row['mha_us']:.0f} us against transformers' {row['hf_us']:.0f} us "
        "(medians of the same rounds); at this size a step is mostly the per-call cost of Python "
        "(checks, the rotary angles, the cache's bookkeeping), not arithmetic",
        f"mha 的一步用时 {row['mha_us']:.0f} us，transformers 的 {row['hf_us']:.0f} us（同一批"
        "轮次的中位数）；这么小的层，一步的用时主要是 Python 每次调用的固定开销（检查、旋转角度、"
        "缓存的记账），不是算术",
    )


def _hf_generate(results: dict, row: dict, target: Target) -> Text:
    return (
        f"the swapped model generates {row['mha_tokens_s']:.0f} tokens/s against transformers' "
        f"own {row['hf_tokens_s']:.0f} (medians of the same rounds); a swapped layer's step "
        "runs more Python than transformers' own (its checks of the input, the mask and the "
        "cache), a large share of a step at this size",
        f"换上 mha 的模型每秒生成 {row['mha_tokens_s']:.0f} 个位置，transformers 自己的是 "
        f"{row['hf_tokens_s']:.0f} 个（同一批轮次的中位数）；换上的一层每一步比 transformers "
        "自己的多跑一些 Python（检查输入、掩码和缓存），在这么小的尺寸下占一步的很大比重",
    )


def _mla_cache(results: dict, row: dict, target: Target) -> Text:
    return (
        f"the latent cache holds {row['cache_bytes_per_position']:.0f} bytes per position, not "
        "kv_lora_rank + qk_rope_head_dim numbers: it holds something else than the latent and "
        "the rotary key part",
        f"潜在向量缓存每个位置存了 {row['cache_bytes_per_position']:.0f} 字节，不是 "
        "kv_lora_rank + qk_rope_head_dim 个数：它存了潜在向量和旋转键之外的东西",
    )


def _absorb(results: dict, row: dict, target: Target) -> Text:
    wins = [r["seq_len"] for r in results["mla_absorb"] if r["speedup"] >= 1]
    return (
        f"at seq_len {row['seq_len']} absorbed decoding takes {row['absorbed_ms']:.2f} ms against "
        f"{row['expanded_ms']:.2f} ms expanded; absorbing saves the up-projection of the whole "
        "cache at each step and pays for wider keys and a per-head multiplication of the query"
        + (f"; it wins from seq_len {wins[0]} on" if wins else "; it won at no length measured"),
        f"seq_len {row['seq_len']} 时吸收的解码用时 {row['absorbed_ms']:.2f} ms，展开的用时 "
        f"{row['expanded_ms']:.2f} ms；吸收省下了每一步把整个缓存升维的计算，代价是更宽的键和每个头"
        "对查询多做一次乘法"
        + (f"；从 seq_len {wins[0]} 起它更快" if wins else "；测过的长度里它都不更快"),
    )


def _gqa(results: dict, row: dict, target: Target) -> Text:
    return (
        "the cache holds more than kv_heads heads of keys and values",
        "缓存里存的键和值多于 kv_heads 个头",
    )


# ---- the targets ------------------------------------------------------------------------------


def _forward_time(seq: int, bound: float) -> Target:
    return Target(
        name=(
            "full-fast forward time / nn.MultiheadAttention at seq_len {seq_len}",
            "seq_len {seq_len} 时{FAST} 前向用时 / nn.MultiheadAttention",
        ),
        metric="ratio_vs_torch",
        op="<=",
        bound=bound,
        row=Row("forward", seq_len=seq),
        reason=_over_torch,
    )


def _gemm_fraction(seq: int) -> Target:
    return Target(
        name=(
            "full-fast forward fraction of the same-run GEMM rate at seq_len {seq_len}",
            "seq_len {seq_len} 时{FAST} 前向达到同一次运行里 GEMM 速率的比例",
        ),
        metric="fraction_of_gemm",
        op=">=",
        bound=0.85,
        row=Row("forward", seq_len=seq),
        reason=_gemm,
    )


GQA_CACHE = Target(
    name=(
        "GQA cache memory, kv_heads = {kv_heads} of {heads} heads, / full heads",
        "分组查询注意力的缓存内存（{heads} 个头中 kv_heads = {kv_heads}）/ "
        "键/值头数与查询头数相同时",
    ),
    metric="cache_ratio_vs_full",
    op="<=",
    bound=0.25,
    row=Row("gqa", impl=None, kv_share=4),
    reason=_gqa,
    label=(" (saves 3/4)", "（省下 3/4）"),
)

TARGETS = (
    _forward_time(1024, 0.72),
    _forward_time(2048, 0.66),
    _gemm_fraction(1024),
    _gemm_fraction(2048),
    _gemm_fraction(4096),
    Target(
        name=(
            "full-fast peak memory growth / nn.MultiheadAttention at seq_len {seq_len}",
            "seq_len {seq_len} 时{FAST} 峰值内存增长 / nn.MultiheadAttention",
        ),
        metric="ratio_vs_torch",
        op="<=",
        bound=0.1,
        row=Row("memory", seq_len=4096),
        reason=_memory,
    ),
    Target(
        name=(
            "full-fast peak memory growth with a [batch, 1, 1, L] padding mask / without, "
            "at seq_len {seq_len}",
            "seq_len {seq_len} 时{FAST} 带 [batch, 1, 1, L] 填充掩码与不带掩码的峰值内存增长之比",
        ),
        metric="ratio_vs_unmasked",
        op="<=",
        bound=1.1,
        row=Row("memory_masked", seq_len=4096),
        reason=_masked,
    ),
    Target(
        name=(
            "full-fast causal forward time / nn.MultiheadAttention causal at seq_len {seq_len}",
            "seq_len {seq_len} 时{FAST} 因果前向用时 / nn.MultiheadAttention 因果前向用时",
        ),
        metric="ratio_vs_torch",
        op="<=",
        bound=0.3,
        row=Row("forward", causal=True, seq_len=2048),
        reason=_causal,
    ),
    Target(
        name=(
            "KV-cache decoding speed-up per position at seq_len {seq_len}",
            "seq_len {seq_len} 时 KV 缓存解码每个位置的加速比",
        ),
        metric="speedup",
        op=">=",
        bound=100,
        row=Row("decode", impl=None, seq_len=1024),
        reason=_decode,
    ),
    Target(
        name=(
            "one decoding step of a small layer, mha / the transformers LlamaAttention (eager), "
            "{seq_len} positions held",
            "小层的一步解码，mha / transformers 的 LlamaAttention（eager），"
            "缓存里有 {seq_len} 个位置",
        ),
        metric="ratio_vs_hf",
        op="<=",
        bound=1.0,
        row=Row("hf_decode", impl=None, seq_len=32),
        reason=_hf_decode,
    ),
    Target(
        name=(
            "greedy generation of one prompt, time per token, attention swapped for mha / the "
            "transformers model unswapped",
            "一个提示的贪心生成，每个位置的用时，注意力换成 mha 的 / transformers 自己的",
        ),
        metric="ratio_vs_hf",
        op="<=",
        bound=1.1,
        row=Row("hf_generate", impl=None),
        reason=_hf_generate,
    ),
    GQA_CACHE,
    Target(
        name=(
            "MLA cache bytes per position / the formula (kv_lora_rank + qk_rope_head_dim)",
            "MLA 缓存每个位置的字节数 / 公式（kv_lora_rank + qk_rope_head_dim）",
        ),
        metric="cache_vs_formula",
        op="==",
        bound=1.0,
        row=Row("mla_absorb", impl=None, seq_len=4096),
        reason=_mla_cache,
        label=(" (exactly)", "（恰好相等）"),
    ),
    Target(
        name=(
            "MLA decoding, expanded time / absorbed time at seq_len {seq_len}",
            "seq_len {seq_len} 时 MLA 解码展开用时 / 吸收用时",
        ),
        metric="speedup",
        op=">=",
        bound=1.0,
        row=Row("mla_absorb", impl=None, seq_len=4096),
        reason=_absorb,
    ),
)
"""Every target, in the order the report and the page list them."""


def evaluate(results: dict, targets=TARGETS) -> list[Checked]:
    """Each target checked against ``results``; one whose section the run did not measure is left
    out, one whose length it did not measure is listed as not checked."""
    checked: list[Checked] = []
    for target in targets:
        row = target.row.find(results)
        if row is None:
            measured = target.row.lengths(results)
            if target.row.seq_len is None or not measured:
                continue
            name = tuple(n.format(seq_len=target.row.seq_len, FAST=FAST) for n in target.name)
            checked.append(Checked(target, name, None, None, None, tuple(measured)))
            continue
        value = row[target.metric]
        met = target.met(value)
        name = target.name[0].format(**row), target.name[1].format(**row, FAST=FAST)
        why = None if met else target.reason(results, row, target)
        checked.append(Checked(target, name, value, met, why))
    return checked
