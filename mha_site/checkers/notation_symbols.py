"""Every math symbol of every page is defined: by the notation page, or by the page's own
"On this page" box, which the notation page lists too.

The rule, in every language:

1. A *symbol* is a Latin letter of the page's math (``$...$``, ``$$...$$``; code blocks, hidden
   set-up and HTML comments are not math), with its subscript if it has one: ``$d_h$`` is ``d_h``,
   ``$h_{kv}$`` is ``h_kv``, ``$m_\\text{new}$`` is ``m_new``, ``$W^h_{uk}$`` is ``W_uk`` (and the
   superscript's ``h``). Letters juxtaposed are a product, one symbol each (``$QK^\\top$`` is ``Q``
   and ``K``). Commands (``\\sqrt``, ``\\theta``, ``\\max``) and the words of ``\\text{...}``,
   ``\\mathrm{...}`` and ``\\operatorname{...}`` are not symbols, nor is ``^T`` (transposed) or a
   code name written with ``\\_`` (``k\\_len``).
2. The notation page *defines* the symbols of the first cell of each row of its tables (its
   "Symbol" and "Letter" columns).
3. A page's *box* is an admonition titled "On this page" (``!!! note "On this page"``; in Chinese
   ``"本页记号"``): every symbol written in it is defined on that page. The notation page's table
   of page-local letters (``#page-letters``) has a row per page with a box, the page's link in its
   first cell and in the second the very symbols of the box that the notation page does not
   define itself, as written (a box may recall global ones too; ``c_t`` in a box is the page's own
   even though ``c`` and ``t`` are global).
4. A subscripted symbol ``X_y`` is defined where ``X_y`` itself is, or where ``X`` is and ``y`` is
   an index: digits, or letters each of them defined (``k_t``, ``Q_i``, ``R_{t-s}``).
"""

from __future__ import annotations

import re
from pathlib import Path

from mha_site.languages import DOCS, LANGUAGES, ROOT
from mha_site.markdown import code_block_lines

NOTATION = "notation.md"
BOX_TITLES = ("On this page", "本页记号")
BOX_OPEN = re.compile(r'^(?P<indent>[ \t]*)(?:!!!|\?\?\?\+?)[ \t]+[\w-]+[ \t]+"(?P<title>[^"]*)"')
MATH = re.compile(r"\$\$.*?\$\$|\$(?:[^$\n]|\n(?![ \t]*\n))+?\$", re.S)
"""Display math, and inline math, which may run on over a line break (not a blank line)."""
COMMENT = re.compile(r"<!--.*?-->", re.S)
TEXT_SUBSCRIPT = re.compile(r"_\\(?:text|mathrm)\{([A-Za-z]+)\}")
WORDS = re.compile(r"\\(?:text|mathrm|operatorname|texttt|mathtt|mathbb|begin|end)\{[^{}]*\}")
CODE_NAME = re.compile(r"[A-Za-z]+(?:\\_[A-Za-z0-9]+)+")
TRANSPOSE = re.compile(r"\^(?:T\b|\{T\}|\\top\b|\{\\top\})")
COMMAND = re.compile(r"\\[A-Za-z]+")
ORPHAN_LABEL = re.compile(r"(?<![A-Za-z0-9}])_\{[A-Za-z]{2,}\}")
SYMBOL = re.compile(
    r"(?P<base>[A-Za-z])(?P<sup>\^(?:\{[^{}]*\}|[A-Za-z0-9]))?(?:_(?P<sub>\{[^{}]*\}|[A-Za-z0-9]))?"
)
TABLE_ROW = re.compile(r"^\|(?P<first>[^|\n]*)\|(?P<second>[^|\n]*)\|")
PAGE_LINK = re.compile(r"\]\((?P<page>[\w-]+\.md)")


def symbols(math: str) -> list[str]:
    """The symbols of one math span, in order (rule 1).

    >>> symbols(r"$q_h^\\top W^h_{uk}\\, c_n + m_\\text{new} + \\sqrt{d_h} + k\\_len$")
    ['q_h', 'W_uk', 'h', 'c_n', 'm_new', 'd_h']
    """
    body = TEXT_SUBSCRIPT.sub(r"_{\1}", math.strip("$"))
    body = CODE_NAME.sub(" ", WORDS.sub(" ", body))
    body = COMMAND.sub(" ", TRANSPOSE.sub(" ", body))
    body = ORPHAN_LABEL.sub(" ", body)  # \\ell_\\text{new}: the label of a Greek letter
    found = []
    for match in SYMBOL.finditer(body):
        sub = (match["sub"] or "").strip("{}").replace(" ", "")
        found.append(match["base"] + (f"_{sub}" if sub else ""))
        if match["sup"]:
            found += symbols(match["sup"][1:].strip("{}"))
    return found


def math_spans(text: str) -> list[tuple[int, str]]:
    """(line from 1, span) of every math span of a page's prose."""
    skipped = code_block_lines(text)
    lines = text.splitlines(keepends=True)
    prose = "".join("\n" if i in skipped else line for i, line in enumerate(lines))
    prose = COMMENT.sub(lambda m: "\n" * m[0].count("\n"), prose)
    return [(prose.count("\n", 0, m.start()) + 1, m[0]) for m in MATH.finditer(prose)]


def box_lines(text: str) -> list[str]:
    """The lines of the page's "On this page" box (rule 3); [] when it has none."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        opening = BOX_OPEN.match(line)
        if opening and opening["title"] in BOX_TITLES:
            depth = len(opening["indent"])
            j = i + 1
            while j < len(lines) and (
                not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > depth
            ):
                j += 1
            return lines[i + 1 : j]
    return []


def box_symbols(text: str) -> set[str]:
    """Every symbol written in the page's box."""
    return {s for _, span in math_spans("\n".join(box_lines(text))) for s in symbols(span)}


def notation_tables(text: str) -> tuple[set[str], dict[str, set[str]]]:
    """(the symbols the notation page defines, {page: its box's symbols} of #page-letters)."""
    defined: set[str] = set()
    local: dict[str, set[str]] = {}
    skipped = code_block_lines(text)
    for i, line in enumerate(text.splitlines()):
        row = TABLE_ROW.match(line)
        if i in skipped or row is None:
            continue
        link = PAGE_LINK.search(row["first"])
        cell = row["second"] if link else row["first"]
        found = {s for span in MATH.findall(cell) for s in symbols(span)}
        if link:
            local.setdefault(link["page"], set()).update(found)
        else:
            defined |= found
    return defined, local


def is_defined(symbol: str, defined: set[str]) -> bool:
    """Rule 4: ``symbol`` is defined, or its base is and its subscript is an index."""
    if symbol in defined:
        return True
    base, _, sub = symbol.partition("_")
    if not sub or base not in defined:
        return False
    letters = re.findall(r"[A-Za-z]", sub)
    return re.fullmatch(r"[A-Za-z0-9+\-*/(),']+", sub) is not None and all(
        letter in defined for letter in letters
    )


def problems(text: str, defined: set[str], listed: set[str] | None) -> list[str]:
    """What is wrong with one page: its undefined symbols (line: symbol), and a box whose symbols
    the notation page does not list as they are (``listed``: its row there; None, no row)."""
    own = box_symbols(text)
    local = own - defined
    found = []
    if local and listed != local:
        found.append(
            f"the box's own symbols {sorted(local)} are listed on {NOTATION}#page-letters as "
            f"{sorted(listed or ())}: list them the same"
        )
    elif listed and not local:
        found.append(f"{NOTATION}#page-letters lists {sorted(listed)}, but the page has no box")
    known = defined | own
    seen = set()
    for line, span in math_spans(text):
        for symbol in symbols(span):
            if not is_defined(symbol, known) and (line, symbol) not in seen:
                seen.add((line, symbol))
                found.append(
                    f"line {line}: ${symbol}$ is defined neither on {NOTATION} nor in the page's "
                    f'"On this page" box ({span.strip()[:60]})'
                )
    return found


def pages(language: str) -> list[Path]:
    return sorted((DOCS / language).glob("*.md"))


def check() -> list[str]:
    found = []
    for language in LANGUAGES:
        notation = (DOCS / language / NOTATION).read_text(encoding="utf-8")
        defined, local = notation_tables(notation)
        for page in pages(language):
            if page.name == NOTATION:
                continue
            text = page.read_text(encoding="utf-8")
            where = page.relative_to(ROOT)
            found += [f"{where}: {p}" for p in problems(text, defined, local.get(page.name))]
        for name in sorted(set(local) - {p.name for p in pages(language)}):
            found.append(f"docs/{language}/{NOTATION}#page-letters: {name} is no page")
    return found
