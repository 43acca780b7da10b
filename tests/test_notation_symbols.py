"""Every math symbol of every page is defined by the notation page or by the page's own "On this
page" box, which the notation page lists too (the rules: ``mha_site/checkers/notation_symbols.py``).
Planted faults show the checker failing; the real pages pass."""

from __future__ import annotations

import pytest

from mha_site.checkers.notation_symbols import (
    NOTATION,
    box_symbols,
    check,
    is_defined,
    notation_tables,
    problems,
    symbols,
)
from mha_site.languages import DOCS, LANGUAGES

PAGE = """# Planted { #planted }

Query $s$ scores key $t$: $z_t = q \\cdot k_t / \\sqrt{d_h}$.

```python
x = "$y$ in code is not math"
```
"""


def tables(language: str = "en"):
    return notation_tables((DOCS / language / NOTATION).read_text(encoding="utf-8"))


def test_the_site_defines_every_symbol_it_writes():
    assert check() == []


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_notation_page_defines_its_tables_letters(language):
    """Guard against a checker that passes because it reads no definitions."""
    defined, local = tables(language)
    assert {"B", "L", "d", "h", "d_h", "b", "s", "t", "i", "c", "r", "W_q", "z", "m"} <= defined
    assert local["rope.md"] == {"j", "a_0", "a_1"}, local
    assert "j" not in defined, "a page's own letter is not global"


def test_a_planted_undefined_letter_is_caught_with_its_line():
    defined, _ = tables()
    assert problems(PAGE, defined, None) == []
    planted = PAGE.replace("$z_t = ", "$\\lambda = f(z_t) = ")
    found = problems(planted, defined, None)
    assert len(found) == 1 and found[0].startswith("line 3: $f$ is defined neither"), found


def test_a_subscript_must_be_an_index_or_defined_whole():
    defined, _ = tables()
    assert is_defined("k_t", defined) and is_defined("Q_i", defined)
    assert is_defined("R_t-s", defined) and is_defined("o_0", defined)
    assert not is_defined("k_j", defined), "j is no index letter of the notation page"
    assert not is_defined("W_uk", defined), "a word subscript must be defined whole"
    planted = PAGE.replace("k_t / ", "k_j / ")
    assert any("$k_j$" in p for p in problems(planted, defined, None))


def test_a_box_defines_its_letters_only_when_the_notation_page_lists_them():
    defined, _ = tables()
    boxed = PAGE.replace(
        "Query $s$", '!!! note "On this page"\n    $f$ is a planted function.\n\nQuery $s$'
    ).replace("$z_t = ", "$f(z_t) = ")
    assert box_symbols(boxed) == {"f"}
    assert problems(boxed, defined, {"f"}) == []
    unlisted = problems(boxed, defined, None)
    assert len(unlisted) == 1 and "listed on notation.md#page-letters as []" in unlisted[0]
    assert problems(PAGE, defined, {"f"}) == [
        "notation.md#page-letters lists ['f'], but the page has no box"
    ]


def test_the_chinese_box_title_counts_too():
    boxed = '!!! note "本页记号"\n    $f$ 是随便写的函数。\n\n$f(z_t)$\n'
    assert box_symbols(boxed) == {"f"}


@pytest.mark.parametrize(
    ("math", "expected"),
    [
        ("$QK^\\top$", ["Q", "K"]),
        ("$W^i_{uk} c_t$", ["W_uk", "i", "c_t"]),
        ("$m_\\text{new} = \\max(m, z_t)$", ["m_new", "m", "z_t"]),
        ("$\\ell_\\text{new} = \\ell\\, e^{m}$", ["e", "m"]),
        ("$\\sqrt{\\text{hidden\\_size}} + k\\_len$", []),
        ("$X \\in \\mathbb{R}^{L \\times d}$", ["X", "L", "d"]),
        ("$\\theta_j = \\text{base}^{-2j/d_r}$", ["j", "j", "d_r"]),
    ],
)
def test_symbols_are_letters_with_their_subscripts(math, expected):
    assert symbols(math) == expected
