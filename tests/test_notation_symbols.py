"""Every symbol a reader meets has one meaning, given by the notation page or by the page's own "On
this page" box (the rules: ``mha_site/checkers/notation_symbols.py``).

The site passes. Then the checker is run on the notation page as it was on 2026-12-05
(``BEFORE``, its tables as they stood) and on the very lines the learner's review quoted that day
(``../shared/reviews/2026-12-05-learner.md``, A1 to A3): each item must be reported, so the checker
is shown to catch what a reader caught, not only planted faults.
"""

from __future__ import annotations

import pytest

from mha_site.checkers.notation_symbols import (
    NOTATION,
    box_symbols,
    check,
    is_defined,
    notation_tables,
    orientation_problems,
    problems,
    read_notation,
    symbols,
    table_problems,
)
from mha_site.languages import DOCS, LANGUAGES

BEFORE = r"""
## Sizes { #sizes }

| Symbol | Name in code | Meaning | Running example |
|---|---|---|---|
| $B$ | `batch_size` | sequences in a batch | 2 |
| $L$ | `seq_len` | positions in a sequence | 3 |
| $d$ | `hidden_size` | channels of one position: $d = h \cdot d_h$ | 20 |
| $h$ | `heads_num` | heads (query heads) | 4 |
| $d_h$ | `head_size` | channels of one head: $d_h = d / h$ | 5 |
| $h_{kv}$ | `kv_heads` | the same count in formulas | 4 |

## Index letters { #index-letters }

| Letter | Runs over | Range in the running example |
|---|---|---|
| $b$ | the sequences of the batch | 0–1 |
| $s$ | query positions | 0–2 (`q_len` 3) |
| $t$ | key and value positions | 0–2 (`k_len` 3); 0–6 against the context |
| $i$ | heads | 0–3 |
| $c$ | channels within a head | 0–4 |
| $r$ | channels of a position: $r = i \cdot d_h + c$ | 0–19 |
| $u$ | key positions too | as $t$ |

## Weights { #weights }

| Symbol | In code | Size | Meaning |
|---|---|---|---|
| $W_q$, $b_q$ | `W_q.weight.T`, `W_q.bias` | $d \times d$, $d$ | queries: $q = x W_q + b_q$ |
| $W_k$, $W_v$, $b_k$, $b_v$ | `W_k.weight.T`, `W_v.weight.T` | $d \times d$ | keys and values |
| $W_o$, $b_o$ | `W_o.weight.T`, `W_o.bias` | $d \times d$, $d$ | the output projection |
| $W_q^i$ | `W_q.weight[5*i:5*i+5].T` | $d \times d_h$ | head $i$'s block |
| $x_t$ | `x[b, t]` | $d$ | one position of one sequence, a row |

## Other symbols { #symbols }

| Symbol | Meaning | Taught on |
|---|---|---|
| $x$, $X$ | one position of the input; all positions stacked | [Intuition and math](math.md) |
| $q$, $k$, $v$ | one query, key, value of one head | [Intuition and math](math.md) |
| $Q$, $K$, $V$ | one head's queries, keys and values stacked | [Intuition and math](math.md) |
| $z$ | one query's scaled scores | [Walkthrough](walkthrough.md) |
| $p_t$, $p_u$ | one query's attention weight on key $t$ | [Walkthrough](walkthrough.md) |
| $o$, $y$ | one query's output of a head; a position's output | [Intuition and math](math.md) |
| $e$ | Euler's number | [Why attention](why.md) |
| $m$, $m_\text{new}$ | the online softmax's running maximum | [Tiled attention](tiled.md#blocks) |
| $T$ | one block of key positions | [Tiled attention](tiled.md#blocks) |
| $w$ | the window | [Sliding window](window.md) |
| $g$ | query heads per key/value head | [Grouped-query attention](gqa.md) |
| $d_r$ | channels of a head that rotary embeddings turn | [Rotary embeddings](rope.md) |
| $R$ | a rotary rotation | [Rotary embeddings](rope.md#distance) |
| $n$ | a number of decoding steps | [KV cache](cache.md) |
| $N$ | layers in a model | [How big is the cache?](cache-size.md) |

## Letters of one page { #page-letters }

| Page | Letters | Meaning there |
|---|---|---|
| [Walkthrough](walkthrough.md) | $a$ | an axis of a tensor (strides) |
| [Dropout and the fast path](fast.md) | $p$ | the dropout probability, `dropout_p` |
| [Rotary embeddings](rope.md) | $j$, $a_0$, $a_1$ | a pair; the pair's two numbers |
| [LongRoPE: a factor per pair](longrope.md) | $j$, $L_0$, $L_\text{max}$ | a pair; the contexts |
| [Multi-head latent attention](mla.md) | $c_t$, $W_{uk}$, $W_{uv}$ | latent; up-projections |
| [Attention in chunks](chunked.md) | $C$ | the chunk size, `chunk` |
| [Gating each head's output](gate.md) | $W_g$ | the gate's projection |
| [Layers without rotation](nope.md) | $f$ | `floor_scale` |
| [Exercises](exercises.md) | $j$ | a key/value head |
| [Glossary](glossary.md) | $A$, $C$, $j$ | GEMM's matrices; a RoPE pair |
"""

# A1: the review's lines, each with its page's box as it was (None: no box)
UNDEFINED = [
    ("sinks.md", None, r"and the head's sink logit $\beta_i$ (`sink_logits[i]`)", "β_i"),
    (
        "softcap.md",
        None,
        r"$$\tilde z_t = \text{softcap} \cdot \tanh(z_t / \text{softcap})$$",
        "z̃_t",
    ),
    (
        "gate.md",
        r"$W_g$ is the gate's projection",
        r"$$\tilde o_i = o_i \odot \sigma(x W_g)$$",
        "σ",
    ),
    (
        "gate.md",
        r"$W_g$ is the gate's projection",
        r"$$\tilde o_i = o_i \odot \sigma(x W_g)$$",
        "õ_i",
    ),
    (
        "fast.md",
        r"$p$ is the dropout probability",
        r"the running sum $\ell = \sum_t e^{z_t - m}$",
        "ℓ",
    ),
    ("tiled.md", None, r"the sum $\ell = \sum_t e^{z_t - m}$", "ℓ"),
    (
        "chunked.md",
        r"$C$ is the chunk size",
        r"$\sqrt{\tfrac{1}{d_h}\sum_c q_c^2 + \epsilon}$",
        "ε",
    ),
    ("rope.md", r"$j$ numbers pairs, $(a_0, a_1)$", r"Pair $j$ turns by $\theta_j$ radians", "θ_j"),
    (
        "rope.md",
        r"$j$ numbers pairs, $(a_0, a_1)$",
        r"write $\gamma(\mu) = 0.1\,\mu \ln \sigma + 1$",
        "γ",
    ),
    (
        "rope.md",
        r"$j$ numbers pairs, $(a_0, a_1)$",
        r"write $\gamma(\mu) = 0.1\,\mu \ln \sigma + 1$",
        "μ",
    ),
    ("longrope.md", r"$j$, $L_0$, $L_\text{max}$", "```python\nx = 1  # α cancels\n```", "α"),
    ("walkthrough.md", r"$a$ numbers the axes", r"is $p_t(\delta_{tu} - p_u)$", "δ_tu"),
]

# A2: one letter, two meanings, in the table of page letters once each is registered
TWICE = [
    (r"| [Dropout](fast.md) | $p$ | the dropout probability |", "$p$ is the letter of the global"),
    (r"| [MLA](mla.md) | $c_t$ | key $t$'s latent |", "$c_t$ already means something"),
    (r"| [LongRoPE](longrope.md) | $L_0$ | the trained context |", "$L_0$ already means something"),
    (r"| [Exercises](exercises.md) | $j$ | a key/value head |", "j has a second row"),
    (r"| [Glossary](glossary.md) | $C$ | GEMM's output |", "C has a second row"),
    (r"| [NoPE](nope.md) | $\alpha$ | `attn_scale` |", "α has a second row"),
    (r"| [Gate](gate.md) | $\sigma$ | the sigmoid |", "σ has a second row"),
    (r"| [Glossary](glossary.md) | $\beta$ | GEMM's scalar |", "β has a second row"),
    (r"| [Rotary embeddings](rope.md) | $a_0$ | a pair's first number |", "a has a second row"),
]
FIRST_ROWS = r"""| [LongRoPE](longrope.md) | $\alpha$ | the factor on cos and sin |
| [Rotary embeddings](rope.md) | $\sigma$ | the stretch factor |
| [Sinks](sinks.md) | $\beta_i$ | head $i$'s sink logit |
| [Rotary embeddings](rope.md) | $j$ | a pair of channels |
| [Attention in chunks](chunked.md) | $C$ | the chunk size |
| [Walkthrough](walkthrough.md) | $a$ | an axis |
"""

# A2, in code: (page, its box as it was, math the page writes, the code or prose)
IN_CODE = [
    (
        "fast.md",
        "$p$ is the dropout probability",
        "$1 - p$",
        "```python\np = torch.exp(z)\n```",
        "p",
    ),
    ("heads.md", None, "$d_h$", "```python\nh = 2\n```", "h"),
    ("heads.md", None, "$d_h$", "```python\nd = hand_set.head_size\n```", "d"),
    (
        "walkthrough.md",
        "$a$ numbers the axes",
        "$a + 1$",
        "```python\na = torch.arange(24)\n```",
        "a",
    ),
    (
        "cache.md",
        None,
        "$n$ steps",
        "`KVCache(max_len=n)` allocates a buffer `n` positions long",
        "n",
    ),
    ("checked.md", None, "$x$", "```python\ncache = KVCache(max_len=N, static=True)\n```", "N"),
    ("heads-split.md", None, "$W_o$", "with head `h`'s output", "h"),
    ("shapecheck.md", None, "$x$", "nanoGPT writes `(B, nh, T, hs)`: `B` is the batch", "B"),
]

# A3: the other orientation, and the head index written as a power
ORIENTATION = [
    r"$$(R_s q)^\top (R_t k) = q^\top R_s^\top R_t\, k = q^\top R_{t-s}\, k .$$",
    r"Head $i$'s key part without position is $W^i_{uk} c_t$",
    r"$$q_i^\top W^i_{uk}\, c_t = \bigl(W^{i\top}_{uk} q_i\bigr)^\top c_t :$$",
    r"$y = W_o [o_0; o_1; o_2; o_3] = \sum_i W_o^{(i)} o_i$",
    r"(c) A sum (an all-reduce): $y = \sum_i W_o^{(i)} o_i$ is a sum over heads",
    r"Cut $W_o$ into row blocks $W_o^i$ of height $d_h$",
]


def page(box: str | None, body: str) -> str:
    head = f'!!! note "On this page"\n    {box}\n\n' if box else ""
    return f"# A page {{ #page }}\n\n{head}{body}\n"


def test_the_site_gives_every_symbol_one_meaning():
    assert check() == []


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_notation_page_defines_its_tables_letters(language):
    """Guard against a checker that passes because it reads no definitions."""
    notation = read_notation((DOCS / language / NOTATION).read_text(encoding="utf-8"))
    assert {"B", "L", "d", "h", "d_h", "b", "s", "t", "i", "c", "r", "W_q", "z", "m", "ℓ"} <= (
        notation.defined
    )
    assert notation.own("rope.md") == {"j", "θ_j", "a_0", "a_1", "σ", "γ", "μ"}
    assert notation.own("sinks.md") == {"β_i"}
    assert "j" not in notation.defined, "a page's own letter is not global"
    spelled = {s for row in notation.rows if "h" in row.symbols for s in row.spellings}
    assert spelled == set(), "h is `heads_num` in code, never a one-letter h"
    assert table_problems(notation) == []


@pytest.mark.parametrize(("name", "box", "body", "symbol"), UNDEFINED)
def test_the_reviews_undefined_symbols_are_caught(name, box, body, symbol):
    before = read_notation(BEFORE)
    found = problems(page(box, body), before, before.own(name) or None, "en", f"docs/en/{name}")
    assert any(f"${symbol}$ is defined neither" in p for p in found), found


@pytest.mark.parametrize(("row", "said"), TWICE)
def test_the_reviews_letters_with_two_meanings_are_caught(row, said):
    tables = BEFORE.split("| [Walkthrough](walkthrough.md) | $a$ |")[0]
    assert table_problems(read_notation(tables + FIRST_ROWS)) == []
    found = table_problems(read_notation(tables + FIRST_ROWS + row + "\n"))
    assert any(said in p for p in found), found


@pytest.mark.parametrize(("name", "box", "math", "code", "letter"), IN_CODE)
def test_the_reviews_one_letter_names_with_another_meaning_are_caught(
    name, box, math, code, letter
):
    before = read_notation(BEFORE)
    text = page(box, f"Here {math}.\n\n{code}")
    found = problems(text, before, before.own(name) or None, "en", f"docs/en/{name}")
    assert any(f"`{letter}` in code is not" in p for p in found), found


def test_a_page_may_name_the_letters_it_quotes():
    before = read_notation(BEFORE)
    text = page("nanoGPT's code writes `B` for $B$", "`B` is the batch")
    assert not any("in code" in p for p in problems(text, before, None))


@pytest.mark.parametrize("math", ORIENTATION)
def test_the_reviews_other_orientation_is_caught(math):
    assert orientation_problems(math.split("$", 1)[1].rsplit("$", 1)[0].join("$$"))


@pytest.mark.parametrize(
    "math",
    [
        r"$q R_s R_t^\top k^\top = q R_{s-t}\, k^\top$",
        r"$q_i R_{s-t} W^{(i)\top}_{uk} \kappa_t^\top$",
        r"$y = [o_0, o_1]\, W_o = \sum_i o_i W_o^{(i)}$",
        r"$q = x W_q + b_q$",
    ],
)
def test_rows_multiplied_on_the_right_pass(math):
    assert orientation_problems(math) == []


def test_a_box_defines_its_letters_only_when_the_notation_page_lists_them():
    defined, _ = notation_tables(BEFORE)
    boxed = page("$f$ is a planted function.", "$f(z_t)$")
    assert box_symbols(boxed) == {"f"}
    assert problems(boxed, defined, {"f"}) == []
    unlisted = problems(boxed, defined, None)
    assert len(unlisted) == 1 and "listed on notation.md#page-letters as []" in unlisted[0]
    assert problems(page(None, "$z_t$"), defined, {"f"}) == [
        "notation.md#page-letters lists ['f'], but the page has no box"
    ]


def test_the_chinese_box_title_counts_too():
    boxed = '!!! note "本页记号"\n    $f$ 是随便写的函数。\n\n$f(z_t)$\n'
    assert box_symbols(boxed) == {"f"}


def test_a_subscript_must_be_an_index_or_defined_whole():
    defined, _ = notation_tables(BEFORE)
    assert is_defined("k_t", defined) and is_defined("Q_i", defined)
    assert is_defined("R_t-s", defined) and is_defined("o_0", defined)
    assert not is_defined("k_j", defined), "j is no index letter of the notation page"
    assert not is_defined("W_uk", defined), "a word subscript must be defined whole"
    assert is_defined("θ_0", defined | {"θ_j"}), "θ_j defined: θ_0 is one of them"


@pytest.mark.parametrize(
    ("math", "expected"),
    [
        ("$QK^\\top$", ["Q", "K"]),
        ("$W^{(i)}_{uk} c_t$", ["W_uk", "i", "c_t"]),
        ("$m_\\text{new} = \\max(m, z_t)$", ["m_new", "m", "z_t"]),
        ("$\\ell_\\text{new} = \\ell\\, e^{m}$", ["ℓ_new", "ℓ", "e", "m"]),
        ("$\\sqrt{\\text{hidden\\_size}} + k\\_len$", []),
        ("$X \\in \\mathbb{R}^{L \\times d}$", ["X", "L", "d"]),
        ("$\\theta_j = \\text{base}^{-2j/d_r}$", ["θ_j", "j", "d_r"]),
        ("$\\theta'_j = \\theta_j / \\lambda^\\text{long}_j$", ["θ_j", "θ_j", "λ_j"]),
        ("$\\tilde z_t + \\hat o + \\varepsilon$", ["z̃_t", "ô", "ε"]),
        ("$\\partial p_t / \\partial z_u$", ["p_t", "z_u"]),
    ],
)
def test_symbols_are_letters_with_their_subscripts(math, expected):
    assert symbols(math) == expected
