"""Markers: where a page asks the build for something drawn from a real run. One grammar for
every kind, a line of its own, the same in both languages:

    <!-- picture: split-heads -->
    <!-- bench-table: memory-masked -->
    <!-- shape-sheet: full -->
    <!-- route: class -->

``KINDS`` registers each kind: the names it knows, what replaces its marker, and when. A picture is
inlined SVG, put into the page's HTML (after the other steps changed it: the SVG is not Markdown);
a benchmark table or a shape sheet is Markdown, put into the page's Markdown before it is
rendered. A marker of another kind (a typo, ``<!-- pictures: x -->``), a name no kind knows, or a
drawing that fails is a warning, which fails ``mkdocs build --strict``. Sybil's own directives
(``<!-- skip: next -->``, ``<!-- invisible-code-block: python -->``) have the same shape: they are
listed in ``SYBIL`` and left alone.

>>> [(m["kind"], m["name"]) for m in MARKER.finditer("<!-- picture: split-heads -->")]
[('picture', 'split-heads')]
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from mha_site import pictures, pictures_perf, routes, shape_sheet
from mha_site.languages import page_language

log = logging.getLogger("mkdocs.plugins.mha_site.markers")

MARKER = re.compile(r"<!--[ \t]*(?P<kind>[a-z][a-z-]*):[ \t]*(?P<name>[^\s>]*)[^>]*?-->")
"""A marker, or anything of its shape (Sybil's directives too): ``<!-- KIND: NAME -->``."""
SYBIL = ("invisible-code-block", "skip")
"""Sybil's directives of the same shape, which are not ours."""


@dataclass(frozen=True)
class Kind:
    names: Callable[[], object]
    """The names this kind knows (a collection)."""
    render: Callable[[str, str], str]
    """What replaces a marker: ``render(name, language)``."""
    markdown: bool
    """True: replaced in the page's Markdown; False: in its HTML."""


KINDS = {
    "picture": Kind(lambda: pictures.generators(), pictures.figure, markdown=False),
    "bench-table": Kind(lambda: pictures_perf.TABLES, pictures_perf.table, markdown=True),
    "shape-sheet": Kind(lambda: shape_sheet.SHEETS, shape_sheet.table, markdown=True),
    "route": Kind(lambda: routes.ROUTES, routes.route_table, markdown=True),
}


def named(kind: str, text: str) -> list[str]:
    """The names of the markers of ``kind`` in ``text``, in order."""
    return [m["name"] for m in MARKER.finditer(text) if m["kind"] == kind]


def problems(text: str) -> list[str]:
    """What is wrong with the markers of a page's Markdown ``text``: unknown kinds and names, and
    markers that share their line with other text."""
    found = []
    for match in MARKER.finditer(text):
        kind, name = match["kind"], match["name"]
        if kind in SYBIL:
            continue
        if kind not in KINDS:
            found.append(f"unknown marker {match[0]!r}: the kinds are {', '.join(KINDS)}")
        elif name not in KINDS[kind].names():
            found.append(f"{match[0]!r} names no {kind}")
        else:
            start = text.rfind("\n", 0, match.start()) + 1
            end = text.find("\n", match.end())
            line = text[start : None if end < 0 else end]
            if line.strip() != match[0]:
                found.append(f"{match[0]!r} must be on a line of its own")
    return found


def replace(text: str, language: str, markdown: bool, where: str) -> str:
    """``text`` with the markers of the kinds replaced at this stage (Markdown or HTML)."""

    def one(match: re.Match) -> str:
        kind = KINDS.get(match["kind"])
        if kind is None or kind.markdown != markdown or match["name"] not in kind.names():
            return match[0]
        try:
            out = kind.render(match["name"], language)
        except Exception as error:  # any failure must fail the strict build, with its reason
            log.warning("%s: %s %r: %s", where, match["kind"], match["name"], error)
            return match[0]
        return "\n" + out + "\n" if markdown else out

    return MARKER.sub(one, text)


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    for problem in problems(markdown):
        log.warning("%s: %s", page.file.src_uri, problem)
    return replace(markdown, page_language(page), True, page.file.src_uri)


def on_page_content(html: str, page, **kwargs) -> str:
    return replace(html, page_language(page), False, page.file.src_uri)


def on_config(config, **kwargs):
    # A rebuild (mkdocs serve) after the package changed draws the pictures again.
    pictures.draw.cache_clear()
    pictures.generators.cache_clear()
    return config
