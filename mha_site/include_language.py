"""Build step: included code shows the comments of the page's language only.

``mha/annotated.py`` explains each step twice: a full-line comment in Chinese (one or more lines
with Chinese characters), then the same in English (lines without). A page includes a section of
it with a ```` ```python ```` fence whose body is only ``--8<-- "file:section"`` lines. Here, before
Markdown runs, each such fence is resolved by pymdownx.snippets' own preprocessor with the options
mkdocs.yml gives it (as the root ``conftest.py`` resolves it for Sybil), the full-line comments of
the other language are dropped, and the code is written into the fence in place of the directive.
A Chinese reader reads the Chinese comments, an English reader the English ones.

Only full-line comments are dropped; code and trailing comments stay, and so do comments that are
in neither language (a shape such as ``# [batch_size, seq_len, hidden_size]``, ``# noqa``). The
bilingual docstrings show in the page's language too, as on the API page: that is
``source_in_language`` of ``mha_site/docstring_language.py``. A missing file or section fails the
build, as it does without this hook. The page's language is the language folder its source lives
in (``docs/zh/...``), else the language the i18n plugin is building.
"""

from __future__ import annotations

import re
import textwrap

from mkdocs.exceptions import PluginError
from pymdownx.snippets import SnippetMissingError

from mha_site.docstring_language import source_in_language
from mha_site.languages import LANGUAGES, page_language
from mha_site.markdown import CHINESE, INCLUDE_FENCE, render_includes, snippets_options

# A comment that belongs to no language: empty, a shape, a tool directive.
NEUTRAL = re.compile(r"#[ \t]*(?:\[[^\]]*\][ \t]*|(?:noqa|type:|fmt:|pragma|ruff:).*)?")


def comment_language(comment: str) -> str | None:
    """``"zh"`` for a comment with Chinese characters, ``"en"`` for one without, ``None`` for a
    comment in no language (``#``, ``# [batch_size, seq_len]``, ``# noqa: E501``)."""
    comment = comment.strip()
    if NEUTRAL.fullmatch(comment):
        return None
    return "zh" if CHINESE.search(comment) else "en"


def find_comment(line: str, quote: str | None = None) -> tuple[int, str | None]:
    """Where the ``#`` comment of a line of Python starts (``len(line)`` if it has none), skipping
    strings, and the triple-quoted string still open at the line's end, given ``quote``, the one
    open at its start. The parity and glossary tests read code comments with it too.

    >>> find_comment("s = '#'  # real", None)
    (9, None)
    >>> find_comment("doc = '''# not a comment", None)
    (24, "'''")
    """
    i = 0
    while i < len(line):
        if quote:
            if line.startswith(quote, i):
                i += len(quote)
                quote = None
                continue
            if line[i] == "\\":
                i += 1
        elif line[i] == "#":
            return i, None
        elif line[i] in "'\"":
            triple = line[i] * 3
            quote = triple if line.startswith(triple, i) else line[i]
            i += len(quote)
            continue
        i += 1
    return len(line), (quote if quote in ('"""', "'''") else None)


def keep_language(code: str, language: str) -> str:
    """``code`` without the full-line comments of the language other than ``language``.

    >>> keep_language("# 投影\\n# Project\\nq = W(x)  # [b, s, h]\\n", "zh")
    '# 投影\\nq = W(x)  # [b, s, h]\\n'
    """
    if language not in LANGUAGES:
        return code
    kept = []
    quote = None
    for line in code.splitlines(keepends=True):
        if quote is None and line.lstrip().startswith("#"):
            if comment_language(line) not in (None, language):
                continue
        else:
            _, quote = find_comment(line, quote)
        kept.append(line)
    return "".join(kept)


def in_language(code: str, language: str) -> str:
    """Python ``code`` as a reader of ``language`` sees it: the other language's full-line
    comments dropped, each bilingual docstring in ``language`` only."""
    return source_in_language(keep_language(code, language), language)


def resolve_includes(text: str, language: str, options: dict, where: str = "page") -> str:
    """Replace each include-only python fence of the Markdown ``text`` by the code it includes,
    keeping the comments of ``language``. A missing file or section raises ``PluginError``."""

    def inline(match: re.Match) -> str:
        indent, fence = match["indent"], match["fence"]
        try:
            code = render_includes(match["body"], options)
        except SnippetMissingError as error:
            raise PluginError(f"{where}: {error}") from error
        if not code.strip():
            directives = " ".join(textwrap.dedent(match["body"]).split())
            raise PluginError(f"{where}: include renders empty: {directives}")
        code = in_language(code.strip("\n") + "\n", language)
        body = "".join(indent + line if line.strip() else line for line in code.splitlines(True))
        return f"{indent}{fence}python\n{body}{indent}{fence}"

    return INCLUDE_FENCE.sub(inline, text)


def on_page_markdown(markdown_text: str, page, config, **kwargs) -> str:
    if "--8<--" not in markdown_text:
        return markdown_text
    try:
        options = snippets_options(config)
    except LookupError as error:
        raise PluginError(f"mha_site.include_language: {error}") from error
    return resolve_includes(markdown_text, page_language(page), options, page.file.src_uri)
