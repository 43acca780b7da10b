"""Every symbol a reader meets on a page has one meaning: the one the notation page gives it, or
the page's own "On this page" box, which the notation page lists too.

The checker reads a page as a reader meets it: its math, the Greek letters of its prose and of
the comments of the code it shows (included code too), and the one-letter names of that code.
The rules, in every language:

1. A *symbol* is a letter of the page's math (``$...$``, ``$$...$$``; hidden set-up and HTML
   comments are not read), Latin or Greek (``\\beta``, ``\\ell``, or written ``β``), with its
   subscript if it has one: ``$d_h$`` is ``d_h``, ``$h_{kv}$`` is ``h_kv``, ``$m_\\text{new}$`` is
   ``m_new``, ``$W^{(i)}_{uk}$`` is ``W_uk`` (and the superscript's ``i``). A decorated letter is a
   symbol of its own: ``$\\tilde z_t$`` is ``z̃_t``. Letters juxtaposed are a product, one symbol
   each (``$QK^\\top$`` is ``Q`` and ``K``). Commands (``\\sqrt``, ``\\max``, ``\\sum``,
   ``\\partial``) and the words of ``\\text{...}``, ``\\mathrm{...}`` and ``\\operatorname{...}``
   are not symbols, nor is ``^\\top`` (transposed) or a code name written with ``\\_``. A Greek
   letter in prose or in a comment of the code shown (``# θ_j / λ_j``) is a symbol too; the
   summation signs Σ and Π are not.
2. The notation page *defines* the symbols of the first cell of each row of its tables (Sizes,
   Index letters, Weights, Other symbols): the *global* symbols.
3. A page's *box* is an admonition titled "On this page" (``!!! note "On this page"``; in Chinese
   ``"本页记号"``), before the first use of any of its symbols: every symbol written in it is
   defined on that page. Those that are not global are the page's *own*.
4. A subscripted symbol ``X_y`` is defined where ``X_y`` itself is, or where ``X`` is and ``y`` is
   an index: digits, or letters each of them defined (``k_t``, ``Q_i``, ``R_{t-s}``).
5. One letter, one meaning. The notation page's table of page letters (``#page-letters``) has one
   row per letter: its symbols, what they mean, and the pages whose boxes define them; a page's own
   symbols are exactly those of the rows that link it. A page's own symbol may not mean something
   a global one means: not a bare letter that is the base of a global symbol (``$p$`` beside the
   global ``$p_t$``), not a symbol rule 4 already reads as global (``$c_t$``: channel ``c`` at
   ``t``; ``$L_0$``).
6. Code says it too. A one-letter name of the code a page shows (or a one-letter ``code`` span of
   its prose) whose letter the page's math uses must be one of that symbol's spellings in code: the
   one-letter code spans of its row on the notation page (``$h$`` is `heads_num`, so ``h = 2`` on
   a page whose math writes $h$ is a second meaning). A page's box may name the one-letter code
   names it quotes from other projects (nanoGPT's `B`, `T`, `C`).
7. One orientation. Positions are rows multiplied on the right (``$x W_q$``): a matrix followed by
   a vector (``$R_s q$``, ``$W_{uk} c_t$``, ``$W_o [o_0; ...]$``) or a vector transposed before a
   matrix (``$q^\\top W$``) is the other convention. A head's block of a matrix is written
   ``W_q^{(i)}``, never ``W_q^i`` (a power).
"""

from __future__ import annotations

import ast
import io
import itertools
import re
import tokenize
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from mha_site.languages import DOCS, LANGUAGES, ROOT
from mha_site.markdown import (
    INCLUDE_LINE,
    code_block_lines,
    fences,
    snippets_options,
)

NOTATION = "notation.md"
BOX_TITLES = ("On this page", "本页记号")
GLOBAL_TABLES = ("sizes", "index-letters", "weights", "symbols")
LOCAL_TABLE = "page-letters"
BOX_OPEN = re.compile(r'^(?P<indent>[ \t]*)(?:!!!|\?\?\?\+?)[ \t]+[\w-]+[ \t]+"(?P<title>[^"]*)"')
MATH = re.compile(r"\$\$.*?\$\$|\$(?:[^$\n]|\n(?![ \t]*\n))+?\$", re.S)
"""Display math, and inline math, which may run on over a line break (not a blank line)."""
COMMENT = re.compile(r"<!--.*?-->", re.S)
HEADING = re.compile(r"^#{2,6} .*\{ *#(?P<anchor>[\w-]+) *\}", re.M)
GREEK_NAMES = (
    "alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi "
    "pi rho sigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Phi Psi Omega"
).split()
GREEK_LETTERS = "αβγδεεζηθθικλμνξπρστυφφχψωΓΔΘΛΞΦΨΩ"
GREEK = dict(zip(GREEK_NAMES, GREEK_LETTERS, strict=True)) | {"ell": "ℓ"}
GREEK_COMMAND = re.compile(
    r"\\(" + "|".join(sorted(GREEK, key=len, reverse=True)) + r")(?![A-Za-z])"
)
DECORATION = re.compile(r"\\(tilde|hat|bar)\s*(?:\{\s*([^{}\s])\s*\}|\s([^{}\s]))")
MARKS = {"tilde": "\u0303", "hat": "\u0302", "bar": "\u0304"}
LETTER = "A-Za-z\u0370-\u03ff\u2113"
PROSE_GREEK = re.compile(r"(?P<symbol>[α-ωΓΔΘΛΞΦΨΩℓ](?:_(?:\{[^{}\s]*\}|[A-Za-z0-9]))?)")
"""A Greek letter of prose or a code comment, with its subscript (``θ_j``); not Σ or Π."""
SUPERSCRIPT_LABEL = re.compile(r"\^\{?\\(?:text|mathrm)\{[^{}]*\}\}?|\^\{?\\prime\}?|'")
"""A superscript that labels (``^\\text{long}``) and a prime: the letter stays the same symbol."""
TEXT_SUBSCRIPT = re.compile(r"_\\(?:text|mathrm)\{([A-Za-z]+)\}")
WORDS = re.compile(r"\\(?:text|mathrm|operatorname|texttt|mathtt|mathbb|begin|end)\{[^{}]*\}")
CODE_NAME = re.compile(r"[A-Za-z]+(?:\\_[A-Za-z0-9]+)+")
TRANSPOSE = re.compile(r"\^(?:T\b|\{T\}|\\top\b|\{\\top\})")
COMMAND = re.compile(r"\\[A-Za-z]+")
SYMBOL = re.compile(
    rf"(?P<base>[{LETTER}][\u0300-\u036f]?)(?P<sup>\^(?:\{{[^{{}}]*\}}|[A-Za-z0-9]))?"
    r"(?:_(?P<sub>\{[^{}]*\}|[A-Za-z0-9]))?(?P<sup2>\^(?:\{[^{}]*\}|[A-Za-z0-9]))?"
)
TABLE_ROW = re.compile(r"^\|(?P<cells>.*)\|[ \t]*$")
PAGE_LINK = re.compile(r"\]\((?P<page>[\w-]+\.md)")
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
INDEX = re.compile(r"[A-Za-z0-9+\-*/(),']+")


def _plain(math: str) -> str:
    """The math without what rule 1 does not read, Greek commands as their letters."""
    body = SUPERSCRIPT_LABEL.sub("", math.strip("$"))  # λ^\text{short}_j is λ_j
    body = TEXT_SUBSCRIPT.sub(r"_{\1}", body)
    body = CODE_NAME.sub(" ", WORDS.sub(" ", body))
    body = DECORATION.sub(lambda m: (m[2] or m[3]) + MARKS[m[1]], body)
    body = GREEK_COMMAND.sub(lambda m: GREEK[m[1]], body)
    return COMMAND.sub(" ", TRANSPOSE.sub("ᵀ", body))


def symbols(math: str) -> list[str]:
    """The symbols of one math span, in order (rule 1).

    >>> symbols(r"$q_h^\\top W^{(h)}_{uk}\\, c_n + m_\\text{new} + \\sqrt{d_h} + k\\_len$")
    ['q_h', 'W_uk', 'h', 'c_n', 'm_new', 'd_h']
    >>> symbols(r"$\\tilde z_t = \\beta_i + \\ell$")
    ['z̃_t', 'β_i', 'ℓ']
    """
    found = []
    for match in SYMBOL.finditer(_plain(math)):
        sub = (match["sub"] or "").strip("{}").replace(" ", "")
        found.append(unicodedata.normalize("NFC", match["base"] + (f"_{sub}" if sub else "")))
        for sup in (match["sup"], match["sup2"]):
            if sup:
                found += symbols(sup[1:].strip("{}").strip("()"))
    return found


def base(symbol: str) -> str:
    return symbol.partition("_")[0]


@dataclass
class Row:
    """A row of a notation table: its symbols, its one-letter spellings in code, its pages."""

    symbols: set[str]
    spellings: set[str]
    pages: set[str] = field(default_factory=set)
    line: int = 0
    taught: str = ""
    """The page that teaches a global symbol (the notation page's last column), or ""."""


@dataclass
class Notation:
    rows: list[Row]
    """The rows of the global tables."""
    local: list[Row]
    """The rows of the table of page letters."""

    @property
    def defined(self) -> set[str]:
        return {s for row in self.rows for s in row.symbols}

    def own(self, page: str) -> set[str]:
        """The symbols the table of page letters gives ``page``."""
        return {s for row in self.local if page in row.pages for s in row.symbols}


def tables(text: str) -> dict[str, list[tuple[int, list[str]]]]:
    """{section anchor: [(line, cells)]} of the body rows of each table of the page."""
    skipped = code_block_lines(text)
    anchor, found = "", {}
    for i, line in enumerate(text.splitlines()):
        heading = HEADING.match(line)
        if heading:
            anchor = heading["anchor"]
        row = TABLE_ROW.match(line)
        if i in skipped or row is None or set(row["cells"]) <= set("|-: "):
            continue
        found.setdefault(anchor, []).append((i + 1, [c.strip() for c in row["cells"].split("|")]))
    return {a: rows[1:] for a, rows in found.items()}  # the first row is the header


def cell_symbols(cell: str) -> set[str]:
    return {s for span in MATH.findall(cell) for s in symbols(span)}


def one_letter_spans(text: str) -> set[str]:
    return {span for span in CODE_SPAN.findall(text) if re.fullmatch(r"[A-Za-z]", span)}


def read_notation(text: str) -> Notation:
    """The notation page's tables (rules 2 and 5)."""
    found = tables(text)
    rows = [
        Row(
            cell_symbols(cells[0]),
            one_letter_spans(" ".join(cells[1:])),
            line=line,
            taught=(PAGE_LINK.findall(cells[-1]) or [""])[0],
        )
        for anchor in GLOBAL_TABLES
        for line, cells in found.get(anchor, [])
    ]
    rows = [row for row in rows if row.symbols]  # `kv_heads`, `q_len`: code names, no letter
    local = []
    for line, cells in found.get(LOCAL_TABLE, []):
        letters = 1 if PAGE_LINK.search(cells[0]) else 0  # (page, letters, meaning): the old form
        pages = set(PAGE_LINK.findall(" ".join(cells)))
        local.append(Row(cell_symbols(cells[letters]), one_letter_spans(cells[1]), pages, line))
    return Notation(rows, local)


def notation_tables(text: str) -> tuple[set[str], dict[str, set[str]]]:
    """(the global symbols, {page: its own symbols}) of the notation page."""
    notation = read_notation(text)
    pages = {page for row in notation.local for page in row.pages}
    return notation.defined, {page: notation.own(page) for page in pages}


def is_defined(symbol: str, defined: set[str]) -> bool:
    """Rule 4: ``symbol`` is defined, or its base is and its subscript is an index."""
    if symbol in defined:
        return True
    letter, _, sub = symbol.partition("_")
    family = not re.fullmatch(r"[A-Za-z]", letter) and any(  # θ_j defined: θ_0, θ_1 are too
        base(s) == letter and re.fullmatch(r"[a-z]", s.partition("_")[2]) for s in defined
    )
    if not sub or (letter not in defined and not family):
        return False
    letters = re.findall(r"[A-Za-z]", sub)
    return INDEX.fullmatch(sub) is not None and all(x in defined for x in letters)


def table_problems(notation: Notation) -> list[str]:
    """Rule 5 on the table of page letters itself: one row per letter, none meaning a global."""
    found = []
    defined = notation.defined
    bases = {base(s) for s in defined}
    seen: dict[str, int] = {}
    for row in notation.local:
        letters = {base(s) for s in row.symbols}
        for letter in sorted(letters - bases):
            if letter in seen:
                found.append(
                    f"line {row.line}: {letter} has a second row (the first at line "
                    f"{seen[letter]}): one letter, one meaning; choose another letter"
                )
            seen.setdefault(letter, row.line)
        for symbol in sorted(row.symbols):
            if symbol in defined or is_defined(symbol, defined):
                found.append(
                    f"line {row.line}: ${symbol}$ already means something on the notation page's "
                    "tables: choose another letter"
                )
            elif "_" not in symbol and symbol in bases:
                means = sorted(s for s in defined if base(s) == symbol)
                found.append(
                    f"line {row.line}: ${symbol}$ is the letter of the global {means}: "
                    "choose another letter"
                )
    return found


# -- what a reader reads ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Use:
    line: int
    symbol: str
    where: str  # the span or the line it was read in


def prose_lines(text: str) -> list[str]:
    """The page's lines, with code blocks and HTML comments blanked (line numbers kept)."""
    skipped = code_block_lines(text)
    lines = text.splitlines(keepends=True)
    prose = "".join("\n" if i in skipped else line for i, line in enumerate(lines))
    return COMMENT.sub(lambda m: "\n" * m[0].count("\n"), prose).splitlines()


def math_spans(text: str) -> list[tuple[int, str]]:
    """(line from 1, span) of every math span of a page's prose."""
    prose = "\n".join(prose_lines(text))
    return [(prose.count("\n", 0, m.start()) + 1, m[0]) for m in MATH.finditer(prose)]


def visible_code(text: str, language: str, where: str) -> list[tuple[int, str]]:
    """(line, code) of every line of the python blocks the page shows, includes resolved (their
    line is the including block's), doctest output left out."""
    from mha_site.checkers.glossary import block_source

    found = []
    for block in fences(text):
        if block.language.lower() not in ("python", "py", "pycon"):
            continue
        body = block.body
        if INCLUDE_LINE.search(body):
            from mha_site.include_language import resolve_includes

            fence = "```python\n" + body + "```\n"
            body = resolve_includes(fence, language, snippets_options(), where)
            body = body.split("\n", 1)[1].rsplit("```", 1)[0]
            found += [(block.line + 1, line) for _, line in block_source(body)]
        else:
            found += [(block.line + 1 + offset, line) for offset, line in block_source(body)]
    return found


def code_tokens(code: list[tuple[int, str]]) -> tuple[list[Use], list[Use]]:
    """(one-letter names, Greek symbols of comments) of the code lines."""
    names, greek = [], []
    if not code:
        return names, greek
    source = "\n".join(line for _, line in code) + "\n"
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        tokens = []
    previous = ""
    for token in tokens:
        line = code[min(token.start[0], len(code)) - 1][0]
        if token.type == tokenize.NAME and len(token.string) == 1 and previous != ".":
            names.append(Use(line, token.string, token.line.strip()))
        elif token.type == tokenize.COMMENT:
            greek += [
                Use(line, m["symbol"], token.string) for m in PROSE_GREEK.finditer(token.string)
            ]
        previous = token.string
    return names, greek


def is_python(span: str) -> bool:
    try:
        ast.parse(span)
    except SyntaxError:
        return False
    return True


def reader_uses(text: str, language: str, where: str) -> tuple[list[Use], list[Use]]:
    """(the symbols a reader meets in order: math, Greek of prose and of code comments; the
    one-letter names of the code shown and of the prose's code spans)."""
    uses = [Use(line, s, span) for line, span in math_spans(text) for s in symbols(span)]
    names = []
    for number, line in enumerate(prose_lines(text), 1):
        plain = MATH.sub(" ", line)
        for span in CODE_SPAN.findall(plain):  # `h`, `KVCache(max_len=N)`: read as code
            if not is_python(span):  # `Meta-Llama-3-8B`, `L × block`: not code
                continue
            spans, _ = code_tokens([(number, span)])
            names += [Use(number, use.symbol, line.strip()) for use in spans]
        plain = CODE_SPAN.sub(" ", plain)
        uses += [Use(number, m["symbol"], line.strip()) for m in PROSE_GREEK.finditer(plain)]
    code_names, greek = code_tokens(visible_code(text, language, where))
    return sorted(uses + greek, key=lambda use: use.line), names + code_names


def box(text: str) -> tuple[int, list[str]]:
    """(the line of its title from 1, the lines) of the page's "On this page" box; (0, [])."""
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
            return i + 1, lines[i + 1 : j]
    return 0, []


def box_lines(text: str) -> list[str]:
    return box(text)[1]


def box_symbols(text: str) -> set[str]:
    """Every symbol written in the page's box."""
    return {s for _, span in math_spans("\n".join(box_lines(text))) for s in symbols(span)}


# -- rule 7 ----------------------------------------------------------------------------------------

MATRIX = re.compile(r"[WR]")
"""The bases of the site's matrices that multiply a position: weights and rotations."""
VECTOR = re.compile(r"[a-z\u03b1-\u03c9]")


def orientation_problems(math: str) -> list[str]:
    """Rule 7 on one math span: the other convention, or a head block written as a power."""
    found = []
    body = _plain(math)
    for match in re.finditer(r"W(?:_\{?[A-Za-z]+\}?)?\^(?P<index>[a-z])(?![A-Za-z])", math):
        found.append(f"W^{match['index']} reads as a power: write W^{{({match['index']})}}")
    tokens = list(SYMBOL.finditer(body))
    for here, after in itertools.pairwise(tokens):
        gap = body[here.end() : after.start()]
        column = body[after.end() : after.end() + 1] == "ᵀ"  # k^T: a row, transposed
        if gap.strip(" \\,;") or column:
            continue
        if MATRIX.fullmatch(here["base"]) and VECTOR.fullmatch(after["base"][0]):
            found.append(f"{here[0]} {after[0]}: a matrix before a vector (write the row first)")
    for match in re.finditer(r"(?P<matrix>[WR](?:_\{?[A-Za-z]+\}?)?(?:\^\{\(\w\)\})?)\s*\[", math):
        found.append(f"{match['matrix']} [ ... ]: a matrix before a stacked vector")
    for match in re.finditer(
        r"(?<![_A-Za-z\\])(?P<v>[a-z](?:_\{?\w+\}?)?)\^\\top\s*(?P<m>W|R)", math
    ):
        found.append(f"{match['v']}^T {match['m']}: a column vector before a matrix")
    return found


# -- one page --------------------------------------------------------------------------------------


def problems(
    text: str,
    defined: set[str] | Notation,
    listed: set[str] | None,
    language: str = "en",
    where: str = "page",
) -> list[str]:
    """What is wrong with one page (rules 1 to 7): each ``line N: ...``, or about its box."""
    notation = (
        defined if isinstance(defined, Notation) else Notation([Row(set(defined), set())], [])
    )
    defined = notation.defined
    box_line, _ = box(text)
    own = box_symbols(text)
    local = {s for s in own if not is_defined(s, defined)}
    found = []
    if local and (listed or set()) != local:
        found.append(
            f"the box's own symbols {sorted(local)} are listed on {NOTATION}#page-letters as "
            f"{sorted(listed or ())}: list them the same"
        )
    elif listed and not local:
        found.append(f"{NOTATION}#page-letters lists {sorted(listed)}, but the page has no box")
    known = defined | own
    uses, names = reader_uses(text, language, where)
    seen = set()
    for use in uses:
        if (use.line, use.symbol) in seen:
            continue
        seen.add((use.line, use.symbol))
        if not is_defined(use.symbol, known):
            found.append(
                f"line {use.line}: ${use.symbol}$ is defined neither on {NOTATION} nor in the "
                f'page\'s "On this page" box ({use.where[:60]})'
            )
        elif use.symbol in local and use.line < box_line:
            found.append(f"line {use.line}: ${use.symbol}$ is used before the box defines it")
    found += name_problems(text, notation, uses, names)
    for line, span in math_spans(text):
        found += [f"line {line}: {p} ({span.strip()[:60]})" for p in orientation_problems(span)]
    return found


def name_problems(text: str, notation: Notation, uses: list[Use], names: list[Use]) -> list[str]:
    """Rule 6: a one-letter name in code whose letter the page's math uses with another meaning."""
    own = Row({s for s in box_symbols(text) if not is_defined(s, notation.defined)}, set())
    quoted = one_letter_spans("\n".join(box_lines(text)))
    letters = {base(use.symbol) for use in uses if re.fullmatch(r"[A-Za-z]", base(use.symbol))}
    spelled = {s for row in notation.rows for s in row.spellings}
    bases = {base(s) for row in notation.rows for s in row.symbols}
    unspelled = bases - spelled  # h is `heads_num` everywhere: a one-letter h is never h
    found, seen = [], set()
    for use in names:
        if use.symbol in quoted or use.symbol in seen:
            continue
        if use.symbol not in letters and use.symbol not in unspelled:
            continue
        if any(base(s) == use.symbol for s in own.symbols):
            meaning = [own]  # the page's own letter: its box's meaning, not the global one
        else:
            meaning = [r for r in notation.rows if any(base(s) == use.symbol for s in r.symbols)]
        spellings = {s for row in meaning for s in row.spellings}
        if meaning and use.symbol not in spellings:
            seen.add(use.symbol)
            said = sorted(
                (s for row in meaning for s in row.symbols if base(s) == use.symbol), key=len
            )
            found.append(
                f"line {use.line}: `{use.symbol}` in code is not what the page's ${said[0]}$ "
                f"means ({NOTATION} spells it {sorted(spellings) or 'with no one-letter name'}): "
                f"rename it ({use.where[:60]})"
            )
    return found


def pages(language: str) -> list[Path]:
    return sorted((DOCS / language).glob("*.md"))


def check() -> list[str]:
    found = []
    for language in LANGUAGES:
        path = DOCS / language / NOTATION
        notation = read_notation(path.read_text(encoding="utf-8"))
        found += [f"{path.relative_to(ROOT)}#page-letters {p}" for p in table_problems(notation)]
        listed = {page for row in notation.local for page in row.pages}
        for page in pages(language):
            if page.name == NOTATION:
                continue
            text = page.read_text(encoding="utf-8")
            where = str(page.relative_to(ROOT))
            own = notation.own(page.name) if page.name in listed else None
            found += [f"{where}: {p}" for p in problems(text, notation, own, language, where)]
        for name in sorted(listed - {p.name for p in pages(language)}):
            found.append(f"docs/{language}/{NOTATION}#page-letters: {name} is no page")
    return found
