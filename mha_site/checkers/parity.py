"""The English and the Chinese site say the same thing: parity of pages, headings, code and figures.

A page missing in one language would silently fall back to the other (mkdocs-static-i18n), and a
translation drifts unnoticed; so, page by page, every language must have what the default one has:

- the same pages (every file under ``docs/en`` has its twin under ``docs/zh`` and back);
- the same headings: same level, same explicit ``{ #anchor }``, same order (every heading must have
  an explicit anchor, so links survive translation; anchors are unique within a page);
- the same code blocks (fences and hidden code comments), line for line: only comments may
  differ (``#`` comments in Python and shell blocks; a comment-only line may be added or dropped).
  String literals, assert messages included, stay identical on purpose: both pages run the same
  test, and a reader who copies either gets the same code and, on failure, the same message, which
  names the tensors involved rather than telling a story (the explanation is the comment's job);
- the same figures (image sources, and the markers of pictures and benchmark tables), includes
  (``--8<--`` lines), mkdocstrings directives (``::: mha.x``) and skip directives;
- the same admonitions (kind and type, nesting) and content tabs, in the same order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from mha_site.include_language import find_comment
from mha_site.languages import DEFAULT, DOCS, LANGUAGES
from mha_site.markdown import (
    AUTODOC,
    SKIP,
    SKIP_DIRECTIVE,
    Hidden,
    block_lines,
    code_blocks,
    include_targets,
)
from mha_site.markers import MARKER, SYBIL

HEADING = re.compile(r"^[ \t]*(?P<level>#{1,6})[ \t]+(?P<text>.*?)[ \t]*#*[ \t]*$")
ANCHOR = re.compile(r"\{[^}]*#(?P<anchor>[\w.:-]+)[^}]*\}\s*$")
# Figures: Markdown images and <img>; and markers (mha_site/markers.py), what the build draws from
# a real run (<!-- picture: NAME -->, <!-- bench-table: NAME -->).
IMAGE = re.compile(r"!\[[^\]]*\]\((?P<src>[^)\s]+)|<img\b[^>]*\bsrc=[\"'](?P<img>[^\"']+)")
ADMONITION = re.compile(r"^(?P<indent>[ \t]*)(?P<kind>!!!|\?\?\?\+?)[ \t]+(?P<type>[\w-]+)")
TAB = re.compile(r"^(?P<indent>[ \t]*)===\+?[ \t]+[\"']")
COMMENTED_LANGUAGES = {"python", "py", "pycon", "bash", "sh", "shell", "console"}
PARTS = ("headings", "code", "figures", "includes", "directives", "blocks")
"""What must be identical in every language, in the order the problems are reported."""


@dataclass
class Skeleton:
    """What must be identical in every language, extracted from one page."""

    headings: list[tuple[int, str]] = field(default_factory=list)
    unanchored: list[str] = field(default_factory=list)
    code: list[tuple[str, list[str]]] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    includes: list[str] = field(default_factory=list)
    directives: list[str] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)  # admonitions, tabs, skips


def strip_comment(line: str, quote: str | None) -> tuple[str, str | None]:
    """Remove a ``#`` comment outside strings; ``quote`` carries an open triple quote over lines."""
    start, quote = find_comment(line, quote)
    return line[:start].rstrip(), quote


def code_lines(language: str, body: str) -> list[str]:
    """The lines of a block that must match across languages (comments dropped where allowed)."""
    if language.lower() not in COMMENTED_LANGUAGES:
        return [line.rstrip() for line in body.splitlines()]
    lines, quote = [], None
    for line in body.splitlines():
        code, quote = strip_comment(line, quote)
        if code or not line.strip():  # keep blank lines, drop comment-only lines
            lines.append(code)
    return lines


def skeleton(text: str) -> Skeleton:
    """The parts of the page ``text`` that every language must share."""
    s = Skeleton()
    blocks = {block.line - 1: block for block in code_blocks(text)}
    in_block: set[int] = set()
    for i, line in enumerate(text.splitlines()):
        if i in blocks:
            block = blocks[i]
            in_block.update(block_lines(text, block))
            if isinstance(block, Hidden):
                s.code.append((f"hidden {block.info}", code_lines(block.language, block.body)))
            else:
                s.code.append((block.info, code_lines(block.language, block.body)))
                s.includes += include_targets(block.body)
            continue
        if i in in_block:
            continue
        heading = HEADING.match(line)
        if heading:
            anchor = ANCHOR.search(heading["text"])
            if anchor:
                s.headings.append((len(heading["level"]), anchor["anchor"]))
            else:
                s.unanchored.append(line.strip())
        s.figures += [m["src"] or m["img"] for m in IMAGE.finditer(line)]
        s.figures += [
            f"{m['kind']}: {m['name']}" for m in MARKER.finditer(line) if m["kind"] not in SYBIL
        ]
        s.includes += include_targets(line)
        s.directives += [m["identifier"] for m in AUTODOC.finditer(line)]
        if m := ADMONITION.match(line):
            s.blocks.append(f"{len(m['indent'])}{m['kind']} {m['type']}")
        if m := TAB.match(line):
            s.blocks.append(f"{len(m['indent'])}=== tab")
        for m in SKIP.finditer(line):
            directive = SKIP_DIRECTIVE.fullmatch(m[0])
            s.blocks.append(f"skip: {directive['action']}" if directive else m[0])
    return s


def first_difference(a: list, b: list, language: str) -> str:
    """Where the default language's list ``a`` and ``language``'s ``b`` part, in words."""
    for n, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"item {n + 1}: {DEFAULT} {x!r} != {language} {y!r}"
    return f"{DEFAULT} has {len(a)} items, {language} has {len(b)}"


def problems(docs: Path = DOCS) -> list[str]:
    """Every difference between the languages of ``docs`` that the rules above forbid, one line
    each."""
    found = []
    files = {
        language: {
            p.relative_to(docs / language) for p in (docs / language).rglob("*") if p.is_file()
        }
        for language in LANGUAGES
    }
    default = files[DEFAULT]
    for language in LANGUAGES[1:]:
        found += [
            f"docs/{language}/{p} is missing (docs/{DEFAULT}/{p} exists)"
            for p in sorted(default - files[language])
        ]
        found += [
            f"docs/{DEFAULT}/{p} is missing (docs/{language}/{p} exists)"
            for p in sorted(files[language] - default)
        ]
    shared = set.intersection(*files.values())
    for page in sorted(p for p in shared if p.suffix == ".md"):
        sk = {
            language: skeleton((docs / language / page).read_text(encoding="utf-8"))
            for language in LANGUAGES
        }
        for language in LANGUAGES:
            for heading in sk[language].unanchored:
                found.append(f"docs/{language}/{page}: heading without {{ #anchor }}: {heading!r}")
            anchors = [a for _, a in sk[language].headings]
            for anchor in sorted({a for a in anchors if anchors.count(a) > 1}):
                found.append(f"docs/{language}/{page}: anchor #{anchor} used twice")
        for language in LANGUAGES[1:]:
            for part in PARTS:
                a, b = getattr(sk[DEFAULT], part), getattr(sk[language], part)
                if a != b:
                    found.append(f"{page}: {part} differ, {first_difference(a, b, language)}")
    return found


def check() -> list[str]:
    """Every parity problem of the site's pages."""
    return problems(DOCS)
