"""The glossary is the one list of Chinese terms, and the Chinese pages follow it.

``docs/zh/glossary.md`` holds a table ``| English | 中文 | 不用 | d2l-zh |``: for each concept, the
Chinese term the site uses, the variants it avoids (separated by 、, a variant that contains 、 in
“quotes”; — for none) and the term of the Chinese *Dive into Deep Learning* (d2l-zh), for its
readers. This checker parses that table and checks every other zh page against it: its prose and
the comments of its code blocks, and the Chinese comments and docstrings of the source files it
shows (included with ``--8<--`` or documented with ``::: mha.module.name``). It also holds the notes
that a table cannot: numbering from 0 (头 0, 行 0–19, not 第 0 个头), one notation for ranges (0–4),
and 评估模式 / 推理模式 kept apart.

What a reader reads as Chinese text is checked; code is not. Fenced code (but its comments), inline
code, link targets, ``{ #anchor }`` attributes and URLs are blanked before the check, so the
variable ``one_token``, the anchor ``{ #fused-kernel }`` and the English comments of
``mha/annotated.py`` (the zh pages never show them: ``mha_site/include_language.py``) pass. A
variant written in Latin letters (``token``, ``kernel``) is matched as a whole word, in any case,
with an optional plural ``s``.
"""

from __future__ import annotations

import ast
import functools
import io
import keyword
import re
import tokenize
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from mha_site.include_language import NEUTRAL, find_comment
from mha_site.languages import DEFAULT, ROOT
from mha_site.markdown import (
    CHINESE,
    INCLUDE_LINE,
    autodoc_identifiers,
    code_blocks,
    include_targets,
    snippets_options,
)
from mha_site.runnable import module_of

ZH = ROOT / "docs" / "zh"
EN = ROOT / "docs" / DEFAULT
GLOSSARY = "glossary.md"
NO_VARIANT = {"", "—", "-"}
# Words that contain an avoided variant but are right: 关键字参数 is a keyword argument, and
# 高速缓存行 is the written-out form of the avoided 缓存行.
LEGITIMATE = ("关键字参数", "高速缓存行")
COLUMNS = 4  # English, 中文, 不用, d2l-zh
MINIMUM_ROWS = 20
VARIANT = re.compile(r"“([^”]+)”|([^、“”]+)")

INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
ATTRIBUTES = re.compile(r"\{[ \t]*[#.:][^}]*\}")
URL = re.compile(r"<?https?://[^\s>)]+>?")
NOT_PROSE = (INLINE_CODE, LINK_TARGET, ATTRIBUTES, URL)
# Heads, positions, rows, columns, channels, sequences and column blocks are numbered from 0 and
# written 头 0、位置 2、行 0–19、列 19、通道 5i–5i+4、句子 0、列块 i: "第 0 个头" reads as the first
# or as the zeroth, "第 i 行" leaves the reader to guess whether i starts at 0 or 1. A number is
# digits, one letter, inline code (a docstring's ``i`` too) or math; "第 a 到第 b 行" is caught as a
# whole. 第 0 维 (a dimension, as PyTorch counts them) is not in the list; 层, 步, 对, 进程 and 块
# are, as the docstrings and the pages number them (层 ``i``, 步 0, 对 ``i``, 进程 ``rank``, 块 0).
NUMBER = r"(?:\$[^$\n]+\$|``[^`\n]+``|`[^`\n]+`|\d+|[A-Za-z])"
NUMBERED = r"(?:注意力头|头|位置|通道|列块|块|行|列(?!表)|句子|句|序列|层|步|对|进程)"
ORDINAL = re.compile(
    rf"第[ \t]*{NUMBER}(?:[ \t]*(?:到|至|–|-|~)[ \t]*第?[ \t]*{NUMBER})?"
    rf"[ \t]*(?:\*\*)?[ \t]*(?:个|条)?{NUMBERED}"
)
# A range of numbers is written 0–4 (an en dash): not 0 到 4, 0..4, 0 .. t or $0 \ldots 4$. A
# list in a formula ($0, \ldots, h-1$, with commas) is not a range.
RANGE = re.compile(r"\d+[ \t]*(?:到|至|\.\.|\\ldots|\\dots)(?![ \t]*,)[ \t]*[\w`$(]")
# A range with a code end is written 0–``q_len - 1`` (通道 `5*i`–`5*i+4`), the code in its own
# span: not ``0 .. q_len - 1``, a range inside one span, as the English docstrings write it.
CODE_RANGE = re.compile(r"(`+)[ \t]*\d+[ \t]*\.\.[^`\n]*\1")
# Eval mode (model.eval()) and inference mode (torch.inference_mode()) are different things: a
# sentence that names one term next to the other's API, without its own, has mixed them up.
MODES = {"评估模式": "inference_mode", "推理模式": ".eval()"}
OWN_API = {"评估模式": ".eval()", "推理模式": "inference_mode"}
SENTENCE = re.compile(r"[^。；！？]+")


class Row(NamedTuple):
    english: str
    chinese: str
    avoided: tuple[str, ...]
    d2l: str  # the term of d2l-zh, "—" where it has none


class Hit(NamedTuple):
    where: str
    line: int
    variant: str
    term: str


# ---- the table ------------------------------------------------------------------------------


def split_variants(cell: str) -> tuple[str, ...]:
    """The variants of a cell, separated by 、; a quoted one may contain 、 (“键、值头”)."""
    return tuple(
        (quoted or plain).strip() for quoted, plain in VARIANT.findall(cell) if quoted or plain
    )


def parse_glossary(path: Path) -> list[Row]:
    """The rows of the first table in ``path`` (header and separator skipped); a ValueError for
    a row without its four cells."""
    rows: list[Row] = []
    in_table = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            if in_table:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not in_table:
            in_table = True  # the header row
            continue
        if set("".join(cells)) <= set("-: "):
            continue  # the separator row
        if len(cells) != COLUMNS:
            raise ValueError(f"{path}: expected {COLUMNS} cells, got {cells}")
        english, chinese, avoided, d2l = cells
        variants = () if avoided in NO_VARIANT else split_variants(avoided)
        rows.append(Row(english, chinese, variants, d2l))
    return rows


@functools.cache
def zh_rows() -> tuple[Row, ...]:
    """The rows of the zh glossary (read once)."""
    return tuple(parse_glossary(ZH / GLOSSARY))


def zh_pages() -> list[Path]:
    """The zh pages the glossary checks: all but the glossary itself."""
    return sorted(p for p in ZH.rglob("*.md") if p.name != GLOSSARY)


def variant_pattern(variant: str) -> re.Pattern:
    """A Chinese variant matches anywhere; a Latin one as a whole word, any case, plural too."""
    if variant.isascii():
        word = re.escape(variant)
        return re.compile(rf"(?<![A-Za-z0-9_]){word}s?(?![A-Za-z0-9_])", re.IGNORECASE)
    return re.compile(re.escape(variant))


def table_problems(rows: list[Row] | tuple[Row, ...]) -> list[str]:
    """What is wrong with the table itself: too few rows, a term twice, a variant that is part of
    a term (every right use of that term would then be reported)."""
    found = []
    if len(rows) < MINIMUM_ROWS:
        found.append(f"only {len(rows)} rows parsed from the zh glossary")
    for column in ("english", "chinese"):
        terms = [getattr(r, column) for r in rows]
        twice = sorted({t for t in terms if terms.count(t) > 1})
        if twice:
            found.append(f"{column} terms listed twice: {twice}")
    found += [
        f"the variant {v!r} of {row.chinese!r} is part of the term {r.chinese!r}"
        for row in rows
        for v in row.avoided
        for r in rows
        if variant_pattern(v).search(r.chinese)
    ]
    return found


# ---- what a reader reads ----------------------------------------------------------------------


def comment_of(line: str, quote: str | None) -> tuple[str, str | None]:
    """The ``#`` comment of a line of Python ("" if none), skipping strings; ``quote`` carries an
    open triple-quoted string from line to line."""
    start, quote = find_comment(line, quote)
    return line[start:], quote


def readable_markdown(text: str, inline_code: bool = False) -> list[str]:
    """The lines of a Markdown page as a reader reads them: prose without its link targets,
    attributes and URLs (and without its inline code unless ``inline_code``); of code blocks
    (fenced or hidden setup) only the comments."""
    out = text.splitlines()
    blanked = NOT_PROSE[1:] if inline_code else NOT_PROSE
    for i, line in enumerate(out):
        for pattern in blanked:
            line = pattern.sub(" ", line)
        out[i] = line
    for block in code_blocks(text):
        first = block.line - 1
        end = first + len(text[block.start : block.end].splitlines())
        out[first:end] = [""] * (end - first)
        quote: str | None = None
        for number, line in enumerate(block.body.splitlines(), start=block.line):
            out[number], quote = comment_of(line, quote)
    return out


def chinese_text(source: str) -> list[str]:
    """The lines of a Python file reduced to their Chinese text ("" elsewhere): the comments and
    the lines of strings (docstrings) that hold Chinese characters."""
    out = [""] * len(source.splitlines())
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and CHINESE.search(token.string):
            out[token.start[0] - 1] = token.string
        elif token.type == tokenize.STRING:
            for offset, line in enumerate(token.string.splitlines()):
                if CHINESE.search(line):
                    out[token.start[0] - 1 + offset] = line
    return out


def readable_lines(text: str, kind: str, inline_code: bool = False) -> list[str]:
    """``text`` reduced to what the glossary checks: a ``markdown`` page or a ``python`` source."""
    if kind == "python":
        return chinese_text(text)
    return readable_markdown(text, inline_code)


# ---- the checks -------------------------------------------------------------------------------


def find_avoided(text: str, rows, where: str, kind: str = "markdown") -> list[Hit]:
    """Every avoided variant in the readable part of ``text``, with its line and the term to use."""
    patterns = [(variant_pattern(v), v, row.chinese) for row in rows for v in row.avoided]
    hits = []
    for number, line in enumerate(readable_lines(text, kind), start=1):
        for word in LEGITIMATE:
            line = line.replace(word, "")
        for pattern, variant, term in patterns:
            if pattern.search(line):
                hits.append(Hit(where, number, variant, term))
    return hits


def find_ordinals(text: str, where: str, kind: str = "markdown") -> list[Hit]:
    """Numbered things counted with 第: write 头 0、位置 i、行 0–19、通道 5i–5i+4 instead."""
    lines = readable_lines(text, kind, inline_code=True)
    return [
        Hit(where, number, found.group(0), "头 0、位置 i、行 0–19、列 19、句子 0")
        for number, line in enumerate(lines, start=1)
        for found in ORDINAL.finditer(line)
    ]


def find_ranges(text: str, where: str, kind: str = "markdown") -> list[Hit]:
    """Ranges of numbers written other than with an en dash (0 到 4, 0..4): write 0–4. Code is
    not prose: inline code is left out, in a docstring's ``literals`` too, but for a range written
    inside one span (``0 .. n``): write 0–``n``."""
    lines = readable_lines(text, kind, inline_code=True)
    return [
        Hit(where, number, found.group(0), "0–4, 0–``n - 1``")
        for number, line in enumerate(lines, start=1)
        for found in [*RANGE.finditer(INLINE_CODE.sub(" ", line)), *CODE_RANGE.finditer(line)]
    ]


def find_mixed_modes(text: str, where: str, kind: str = "markdown") -> list[Hit]:
    """Sentences that call model.eval() 推理模式, or torch.inference_mode() 评估模式."""
    hits = []
    for number, line in enumerate(readable_lines(text, kind, inline_code=True), start=1):
        for sentence in SENTENCE.findall(line):
            for term, other_api in MODES.items():
                mixed = other_api in sentence and OWN_API[term] not in sentence
                if term in sentence and mixed:
                    right = next(t for t, api in OWN_API.items() if api == other_api)
                    hits.append(Hit(where, number, term, right))
    return hits


# The comments of a zh page's code blocks are Chinese, or code: a comment without Chinese passes
# when, with its shapes ([batch_size, q_len, 20]), inline code and identifier-like words
# (q_len, float32, torch.softmax, docs/assets) taken out, every word of two or more Latin letters
# left is a name of the page's code (an identifier that is not a keyword or an attribute, or a
# word of a string literal: the "# cat" of a list of words) or True, False, None. Single letters
# pass (m, e, T: math). So "# block 1 raises m" and "# 0 to 6" are caught, "# [batch_size,
# steps]", "# k_len = src_len" and "# need_weights=True" pass. A docstring (a string statement)
# without Chinese is caught too: string literals are the same in both languages (the parity
# checker), so a docstring cannot be translated: write it as a comment. Tool directives (noqa,
# type:, fmt:) and Material's annotations (# (1)!) pass.
COMMENTED = {"python", "py", "pycon", "bash", "sh", "shell", "console"}
SHAPE = re.compile(r"\[[^\]]*\]")
ANNOTATION = re.compile(r"#[ \t]*\(\d+\)!?")
IDENTIFIER_LIKE = re.compile(r"[\w.]*(?:[_\d]|\w[./]\w)[\w./]*")
WORD = re.compile(r"[A-Za-z]{2,}")
CONSTANTS = {"True", "False", "None"}
PROMPT = re.compile(r"^[ \t]*(?:>>>|\.\.\.)(?: |$)")


def block_source(body: str) -> list[tuple[int, str]]:
    """(offset, line) of the lines of a block that are code: a doctest block's (one that opens
    with a prompt) prompt lines without their prompt (its output is not code), every line of
    another block."""
    lines = body.splitlines()
    first = next((line for line in lines if line.strip()), "")
    if not PROMPT.match(first):  # code (its docstrings may hold examples), not a session
        return list(enumerate(lines))
    return [
        (i, PROMPT.sub("", line, count=1)) for i, line in enumerate(lines) if PROMPT.match(line)
    ]


def code_names(source: str) -> set[str]:
    """The names of Python ``source``: its identifiers (not keywords, not attributes after a
    dot) and the words of its short string literals; what a comment without Chinese may name."""
    names: set[str] = set()
    previous = ""
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            name = token.type == tokenize.NAME and not keyword.iskeyword(token.string)
            if name and previous != ".":
                names.add(token.string)
            elif token.type == tokenize.STRING and len(WORD.findall(token.string)) <= 3:
                # a key or a value ("mat", "sliding_attention"), not a sentence: the words of an
                # error message are not names a comment may use
                names.update(WORD.findall(token.string))
            if token.type not in (tokenize.COMMENT, tokenize.NL):
                previous = token.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # a block that does not tokenize to its end: the names read so far
    return names


def is_code_comment(comment: str, names: set[str]) -> bool:
    """Whether a comment without Chinese is only code: a shape, a formula, names of the page's
    code (see above), or a tool directive."""
    comment = comment.strip()
    if NEUTRAL.fullmatch(comment) or ANNOTATION.fullmatch(comment):
        return True
    rest = IDENTIFIER_LIKE.sub(" ", INLINE_CODE.sub(" ", SHAPE.sub(" ", comment.lstrip("#"))))
    return all(word in names or word in CONSTANTS for word in WORD.findall(rest))


def docstring_lines(source: str) -> list[int]:
    """The lines (from 1) of the string statements without Chinese in Python ``source``, which
    does not parse: none."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        and not CHINESE.search(node.value.value)
    ]


def find_english_comments(text: str, where: str, kind: str = "markdown") -> list[Hit]:
    """Comments and docstrings of a zh page's code blocks that are neither Chinese nor code (the
    rule above). Included code is read as the page shows it (``mha_site/include_language.py``
    keeps the Chinese full-line comments, and every trailing one): a page with includes is
    reported with its includes resolved, its lines counted in that text."""
    if kind != "markdown":
        return []
    if INCLUDE_LINE.search(text):
        from mha_site.include_language import resolve_includes

        text = resolve_includes(text, "zh", snippets_options(), where)
        where = f"{where} (includes resolved)"
    blocks = [b for b in code_blocks(text) if b.language.lower() in COMMENTED]
    sources = {b.start: block_source(b.body) for b in blocks}
    names = set()
    for lines in sources.values():
        names |= code_names("\n".join(line for _, line in lines) + "\n")
    hits = []
    for block in blocks:
        quote: str | None = None
        lines = sources[block.start]
        for offset, line in lines:
            start, quote = find_comment(line, quote)
            comment = line[start:]
            if comment and not CHINESE.search(comment) and not is_code_comment(comment, names):
                hits.append(Hit(where, block.line + 1 + offset, comment.strip(), "中文注释"))
        if block.language.lower() in ("python", "py", "pycon"):
            source = "\n".join(line for _, line in lines) + "\n"
            for number in docstring_lines(source):
                offset = lines[number - 1][0]
                docstring = lines[number - 1][1].strip()
                hits.append(Hit(where, block.line + 1 + offset, docstring, "中文的 # 注释"))
    return sorted(hits, key=lambda hit: hit.line)


def find_avoided_in_glossary(text: str, where: str, kind: str = "markdown") -> list[Hit]:
    """``find_avoided`` with the rows of the zh glossary."""
    return find_avoided(text, zh_rows(), where, kind)


FINDERS: dict[str, tuple[Callable[..., list[Hit]], str]] = {
    "variants": (find_avoided_in_glossary, "avoided variants (see docs/zh/glossary.md)"),
    "ordinals": (find_ordinals, "write 头 0、行 0–19 (see docs/zh/glossary.md#notes)"),
    "ranges": (find_ranges, "write 0–4 (see docs/zh/glossary.md#notes)"),
    "modes": (find_mixed_modes, "评估模式 is model.eval(), 推理模式 torch.inference_mode()"),
    "comments": (find_english_comments, "comment in Chinese (see docs/zh/glossary.md#notes)"),
}
"""The checks of a page, by name: the finder (``find(text, where, kind)``) and what to do."""


# ---- the pages and the files they show ----------------------------------------------------------


def module_file(dotted: str) -> Path:
    """The source file of ``mha.checks.check_sizes``, or of a name a package re-exports
    (``mha.parallel.ring_attention``: ``mha/parallel/ring.py``): ``mha_site.runnable.module_of``."""
    found = module_of(dotted, ROOT)
    if found is None:
        raise LookupError(f"no source file for {dotted}")
    return found[0]


def included_files(page: Path) -> list[Path]:
    """Source files that ``page`` shows: included with pymdownx.snippets (``--8<-- "path:section"``)
    or documented with mkdocstrings (``::: mha.module.name``)."""
    text = page.read_text(encoding="utf-8")
    paths = {ROOT / target.split(":")[0] for target in include_targets(text)}
    paths |= {module_file(identifier) for identifier in autodoc_identifiers(text)}
    return sorted(paths)


def page_texts(page: Path) -> list[tuple[str, str, str]]:
    """(where, text, kind) for the page itself and for every file it includes."""
    texts = [(str(page.relative_to(ROOT)), page.read_text(encoding="utf-8"), "markdown")]
    for path in included_files(page):
        where = f"{path.relative_to(ROOT)} (included by {page.name})"
        texts.append((where, path.read_text(encoding="utf-8"), "python"))
    return texts


def hits_on(page: Path, find) -> list[Hit]:
    """What ``find(text, where, kind)`` reports in every text of a zh page a reader reads."""
    return [hit for where, text, kind in page_texts(page) for hit in find(text, where, kind)]


def report(hits: list[Hit]) -> str:
    return "\n".join(f"{h.where}:{h.line}: {h.variant!r}, write {h.term!r}" for h in hits)


def unused_terms(rows, pages: list[Path]) -> list[Row]:
    """The rows whose Chinese term appears on none of ``pages``."""
    texts = [p.read_text(encoding="utf-8") for p in pages]
    return [row for row in rows if not any(row.chinese in text for text in texts)]


def check() -> list[str]:
    """Every glossary problem: of the table, of its English twin, and of every zh page."""
    rows = zh_rows()
    found = table_problems(rows)
    if parse_glossary(EN / GLOSSARY) != list(rows):
        found.append(f"docs/{DEFAULT}/{GLOSSARY}: its table differs from docs/zh/{GLOSSARY}'s")
    pages = zh_pages()
    for page in pages:
        texts = page_texts(page)
        for find, advice in FINDERS.values():
            hits = [hit for where, text, kind in texts for hit in find(text, where, kind)]
            found += [f"{line} ({advice})" for line in report(hits).splitlines()]
    found += [
        f"docs/zh/{GLOSSARY}: {row.chinese!r} ({row.english}) is used on no other zh page"
        for row in unused_terms(rows, pages)
    ]
    return found


# ---- the English term at first use ------------------------------------------------------------

ENTRY = re.compile(
    r"^- \*\*(?P<term>[^*]+)\*\*\{ #[\w-]+ \}(?P<body>(?:(?!^- \*\*|^#|^```).)*)", re.M | re.S
)
ENTRY_LINK = re.compile(r"\]\((?P<page>[\w-]+\.md)(?:#[\w-]+)?\)")
EMPHASIS = re.compile(r"\*\*|[“”]")


def english_name(row: Row) -> str:
    """The English term of a row, less its explanation in parentheses (``attention sink``)."""
    return row.english.split(" (")[0].strip()


def teaching_pages() -> list[tuple[str, str, str]]:
    """(term, its English, page) for each term of the zh glossary's definitions, with the page its
    definition links first: the page that teaches it."""
    rows = {row.chinese: row for row in zh_rows()}
    found = []
    for entry in ENTRY.finditer((ZH / GLOSSARY).read_text(encoding="utf-8")):
        link = ENTRY_LINK.search(entry["body"])
        if entry["term"] in rows and link:
            found.append((entry["term"], english_name(rows[entry["term"]]), link["page"]))
    return found


def first_use_unglossed(term: str, english: str, text: str) -> str | None:
    """What follows the first use of ``term`` in the prose of the zh page ``text`` (headings left
    out), when it is not the English term in full-width parentheses; None when it is."""
    lines = [line for line in readable_markdown(text, inline_code=True) if not line.startswith("#")]
    prose = EMPHASIS.sub("", "\n".join(lines))
    at = prose.find(term)
    if at < 0:
        return "(never used)"
    after = prose[at + len(term) : at + len(term) + 80]
    gloss = re.match(r"\s*（([^）]*)）", after)
    if gloss and english.lower() in gloss[1].lower():
        return None
    return after[:30].replace("\n", " ")
