"""The Markdown of the pages, in one place: fenced code blocks and Sybil's hidden blocks
(``<!-- invisible-code-block: python -->``), snippet includes, Sybil's skip directives,
mkdocstrings' ``:::`` lines, Chinese text and pymdownx.snippets' options. The build steps, the root
``conftest.py``, the checkers and the tests read pages with these, so they all agree on what a
fence or an include is.

>>> [(f.line, f.language, f.body) for f in fences("text\\n```python\\nx = 1\\n```\\n")]
[(2, 'python', 'x = 1\\n')]
>>> include_targets('```python\\n--8<-- "mha/pure.py:forward"\\n```')
['mha/pure.py:forward']
>>> bool(CHINESE.search("形状 [b, s, d]")), bool(CHINESE.search("shape [b, s, d]"))
(True, False)
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mha_site.languages import ROOT, mkdocs_config

# -- Chinese text ---------------------------------------------------------------------------------

HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
"""Chinese characters (CJK Unified Ideographs, Extension A, Compatibility), for a ``[]`` class."""
CHINESE = re.compile(f"[{HAN}]")
"""One Chinese character: ``CHINESE.search(text)`` says whether ``text`` has Chinese in it."""
CHINESE_TEXT = "\u2e80-\u9fff\u3000-\u303f\uff00-\uffef\u2018\u2019\u201c\u201d"
"""The characters of Chinese prose, for a ``[...]`` class: Chinese characters and radicals, CJK and
full-width punctuation, and the curly quotes that Chinese text uses."""

# -- Snippet includes (pymdownx.snippets) ---------------------------------------------------------

INCLUDE_LINE = re.compile(r'^[ \t]*--8<--[ \t]+"(?P<target>[^"\n]+)"[ \t]*$', re.MULTILINE)
"""One include directive on a line of its own: ``--8<-- "mha/annotated.py:forward"``."""
INCLUDE_ONLY = re.compile(r'(?:[ \t]*--8<--[ \t]+"[^"\n]+"[ \t]*(?:\n|$))+')
"""A fence body made only of include directives (``INCLUDE_ONLY.fullmatch(body)``)."""
INCLUDE_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})python[ \t]*\n"
    r"(?P<body>(?:[ \t]*--8<--[ \t]+\"[^\"\n]+\"[ \t]*\n)+)"
    r"(?P=indent)(?P=fence)[ \t]*$",
    re.MULTILINE,
)
"""A python fence whose body is only include directives: the build replaces it with the code."""


def include_targets(text: str) -> list[str]:
    """The target of every include directive in ``text``: ``["mha/pure.py:forward", ...]``."""
    return INCLUDE_LINE.findall(text)


def snippets_options(config=None) -> dict:
    """pymdownx.snippets' options as mkdocs.yml gives them, base paths made absolute.

    ``config`` is MkDocs' config during a build; without it, mkdocs.yml is read.
    """
    if config is not None:
        if "pymdownx.snippets" not in config["markdown_extensions"]:
            raise LookupError("mkdocs.yml does not enable pymdownx.snippets")
        options = dict(config["mdx_configs"].get("pymdownx.snippets") or {})
        root = Path(config["config_file_path"]).resolve().parent
    else:
        for extension in mkdocs_config()["markdown_extensions"]:
            if isinstance(extension, dict) and "pymdownx.snippets" in extension:
                options = dict(extension["pymdownx.snippets"] or {})
                break
        else:
            raise LookupError("mkdocs.yml does not enable pymdownx.snippets")
        root = ROOT
    bases = options.get("base_path", ["."])
    options["base_path"] = [str(root / b) for b in ([bases] if isinstance(bases, str) else bases)]
    return options


def render_includes(directives: str, options: dict | None = None) -> str:
    """The code that include directives stand for, as the build includes it (dedented).

    A missing file or section raises ``pymdownx.snippets.SnippetMissingError``.
    """
    import markdown

    md = markdown.Markdown(
        extensions=["pymdownx.snippets"],
        extension_configs={"pymdownx.snippets": options or snippets_options()},
    )
    lines = md.preprocessors["snippet"].run(textwrap.dedent(directives).splitlines())
    return textwrap.dedent("\n".join(lines))


# -- Fenced code blocks ---------------------------------------------------------------------------

FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*(?:>[ \t]*)*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
"""The opening line of a fenced code block, inside a list, a tab or a quote too."""


@dataclass(frozen=True)
class Fence:
    """A fenced code block of a page."""

    line: int
    """The line number of its opening fence (1-based)."""
    indent: str
    """What comes before the fence on its line: spaces, or ``>`` in a quote."""
    info: str
    """The info string: ``python``, ``python title="x.py"``, ``text``, or empty."""
    body: str
    """The lines between the fences, ``indent`` removed."""
    start: int
    """The offset in the page's text of the opening line."""
    end: int
    """The offset just after the closing line (the end of the page for an unclosed fence)."""

    @property
    def language(self) -> str:
        """The first word of the info string: ``python``, ``text``, ``""`` (``python`` for
        ``{.python}`` too)."""
        return self.info.split(maxsplit=1)[0].strip("{}.") if self.info.strip() else ""


def fences(text: str) -> Iterator[Fence]:
    """Every fenced code block of the Markdown ``text``, in order (CommonMark's rules: a block
    closes at a line of its indent with at least as many of the same fence characters)."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    i = 0
    while i < len(lines):
        opening = FENCE_OPEN.match(lines[i].rstrip("\n"))
        if opening is None or (opening["fence"][0] == "`" and "`" in opening["info"]):
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        closing = re.compile(
            re.escape(indent.rstrip()) + r"[ \t]*" + fence[0] + f"{{{len(fence)},}}" + r"[ \t]*$"
        )
        j = i + 1
        while j < len(lines) and not closing.match(lines[j].rstrip("\n")):
            j += 1
        body = "".join(
            line[len(indent) :] if line.startswith(indent) else line.lstrip(" \t>")
            for line in lines[i + 1 : j]
        )
        yield Fence(
            i + 1,
            indent,
            opening["info"].strip(),
            body,
            offsets[i],
            offsets[min(j + 1, len(lines))],
        )
        i = j + 1


def block_lines(text: str, block: Fence) -> range:
    """The indices (from 0) of the lines of ``text`` that ``block`` takes, its opening and closing
    lines included: ``text.splitlines()[i]`` for ``i`` in it."""
    return range(block.line - 1, block.line - 1 + len(text[block.start : block.end].splitlines()))


# -- Hidden code blocks (Sybil's invisible-code-block) --------------------------------------------

HIDDEN_OPEN = re.compile(
    r"^(?P<indent>[ \t]*)<!--+[ \t]*(?:invisible-)?code(?:-block)?[ \t]*:[ \t]*(?P<info>.*?)[ \t]*$"
)
"""The opening line of a hidden code block: ``<!-- invisible-code-block: python``."""


@dataclass(frozen=True)
class Hidden(Fence):
    """A hidden code block, ``<!-- invisible-code-block: python`` to the first ``-->``: Sybil runs
    it (set-up a page needs), the site does not show it. ``info`` is what follows the colon."""


def hidden_blocks(text: str) -> Iterator[Hidden]:
    """Every hidden code block of the Markdown ``text`` that is not inside a fenced code block (a
    fence may show one as Markdown source), in order.

    >>> page = "```python\\nx\\n```\\n<!-- invisible-code-block: python\\nx = 1\\n-->\\n"
    >>> [(h.line, h.language, h.body) for h in hidden_blocks(page)]
    [(4, 'python', 'x = 1\\n')]
    """
    lines = text.splitlines(keepends=True)
    fenced = {i for fence in fences(text) for i in block_lines(text, fence)}
    offset = 0
    for i, line in enumerate(lines):
        opening = HIDDEN_OPEN.match(line.rstrip("\n")) if i not in fenced else None
        if opening is not None:
            body_start = offset + len(line)
            close = text.find("-->", body_start)
            body_end = len(text) if close < 0 else close
            after = len(text) if close < 0 else text.find("\n", close) + 1 or len(text)
            indent = opening["indent"]
            body = "".join(
                piece[len(indent) :] if piece.startswith(indent) else piece.lstrip(" \t")
                for piece in text[body_start:body_end].splitlines(keepends=True)
            )
            yield Hidden(i + 1, indent, opening["info"], body, offset, after)
        offset += len(line)


def code_blocks(text: str) -> list[Fence]:
    """Every code block of the Markdown ``text``, fenced (``Fence``) or hidden (``Hidden``), in
    the order of the page."""
    return sorted([*fences(text), *hidden_blocks(text)], key=lambda block: block.start)


def code_block_lines(text: str) -> set[int]:
    """The indices (from 0) of the lines of ``text`` that its code blocks take, fenced or hidden,
    their opening and closing lines included."""
    return {i for block in code_blocks(text) for i in block_lines(text, block)}


# -- Directives: Sybil's skips, mkdocstrings' objects --------------------------------------------

SKIP = re.compile(r"<!--[ \t-]*skip\b[^\n]*?-->")
"""A skip comment of Sybil's, well formed or not: ``<!-- skip: next "why" -->``."""
SKIP_DIRECTIVE = re.compile(
    r"<!--[ \t]*skip:[ \t]*(?P<action>\w+)(?:[ \t]+(?P<reason>.*?))?[ \t]*-->"
)
"""A well-formed skip comment (``SKIP_DIRECTIVE.fullmatch``): its action (``next``, ``start``,
``end``) and its reason (``"why"`` or ``if(...)``; None when it gives none)."""
AUTODOC = re.compile(r"^[ \t]*:::[ \t]+(?P<identifier>[\w.]+)", re.MULTILINE)
"""An object mkdocstrings documents: ``::: mha.annotated.MHA``."""


def autodoc_identifiers(text: str) -> list[str]:
    """The objects the page ``text`` documents with mkdocstrings: ``["mha.annotated.MHA", ...]``."""
    return AUTODOC.findall(text)


# -- Collapsible blocks (pymdownx.details) and the main thread ----------------------------------

DETAILS_OPEN = re.compile(r'^(?P<indent>[ \t]*)\?\?\?\+?[ \t]+(?P<kind>[\w-]+)(?:[ \t]+"[^"]*")?')
"""The opening line of a collapsible block: ``??? note "Deep dive: ..."`` (``???+`` opens it)."""


def details_lines(text: str) -> set[int]:
    """The indices (from 0) of the lines of ``text`` inside collapsible blocks (``???``), their
    opening lines included: a block is the lines after its opening that are blank or indented
    deeper than it.

    >>> sorted(details_lines('a\\n??? note "More"\\n    b\\n\\n    c\\nd\\n'))
    [1, 2, 3, 4]
    """
    lines = text.splitlines()
    inside: set[int] = set()
    i = 0
    while i < len(lines):
        opening = DETAILS_OPEN.match(lines[i])
        if opening is None:
            i += 1
            continue
        depth = len(opening["indent"].expandtabs(4))
        j = i + 1
        while j < len(lines) and (
            not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > depth
        ):
            j += 1
        while j - 1 > i and not lines[j - 1].strip():  # trailing blank lines are not the block's
            j -= 1
        inside.update(range(i, j))
        i = j
    return inside


MAIN_THREAD_NOISE = re.compile(
    r"<!--.*?-->|^\$\$.*?^\$\$|`[^`\n]*`|\$[^$\n]+\$|\{[^}\n]*#[\w-]+[^}\n]*\}|<[^>\n]+>",
    re.DOTALL | re.MULTILINE,
)
"""What the main thread's word count leaves out of the prose: HTML comments and tags, display and
inline math, inline code, heading attributes (``{ #anchor }``)."""


def main_thread(text: str) -> str:
    """The prose a reader reads straight through: the page less its code blocks (fenced and
    hidden), its collapsible blocks (deep dives, solutions, answers), comments, math and markup.

    >>> main_thread('Two words.\\n```python\\nx = 1\\n```\\n??? note "More"\\n    hidden\\n')
    'Two words.\\n'
    """
    skipped = details_lines(text) | code_block_lines(text)
    kept = "".join(
        line for i, line in enumerate(text.splitlines(keepends=True)) if i not in skipped
    )
    return MAIN_THREAD_NOISE.sub(" ", kept)


def words(prose: str) -> int:
    """How long ``prose`` is to read: its words, and each Chinese character as one.

    >>> words("Scores are [2, 4, 3, 5]."), words("得分 scores 的形状")
    (6, 6)
    """
    return len(CHINESE.findall(prose)) + len(re.findall(r"[A-Za-z0-9][A-Za-z0-9_'-]*", prose))
