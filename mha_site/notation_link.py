"""Build step: every page links to the notation page, right under its title; a chapter also names
the pages it builds on there ("You need: ...", from ``routes.NEEDS``).

The notation page (``notation.md``) gives each symbol, size and index letter of the site one
meaning. Rather than a line written on every page (and forgotten on the next one), this step puts
one short line under each page's title (its first ``# `` heading outside code), in the page's
language, with a link relative to the page. The notation page itself gets none. The line is left
out of the search index (Material's ``data-search-exclude``), so a page's search preview still
begins with its own text.

>>> page = "# Masks { #masks }\\n\\nA mask says ...\\n"
>>> print(with_link(page, "en", "notation.md"))
# Masks { #masks }
<BLANKLINE>
Symbols and sizes: see [Notation](notation.md).
{ data-search-exclude }
<BLANKLINE>
A mask says ...
<BLANKLINE>
"""

from __future__ import annotations

import logging
import posixpath
import re

from mkdocs.plugins import event_priority

from mha_site import routes
from mha_site.languages import page_language, page_path, tr
from mha_site.markdown import code_block_lines

log = logging.getLogger("mkdocs.plugins.mha_site.notation_link")

NOTATION = "notation.md"
"""The notation page, in each language's folder."""
TITLE = re.compile(r"^# \S")
"""A page's title: an ATX heading of level 1."""
NOT_SEARCHED = "{ data-search-exclude }"
"""attr_list's attribute on the line's paragraph: Material's search leaves the paragraph out."""


def line(language: str, link: str, needs: str | None = None) -> str:
    """The line that links to the notation page, in ``language``, with the link ``link``; after
    ``needs`` (``routes.needs_line``: the pages this one builds on) if given."""
    notation = tr(
        language,
        f"Symbols and sizes: see [Notation]({link}).",
        f"符号与尺寸见[记号]({link})。",
    )
    return notation if needs is None else needs + tr(language, " ", "") + notation


def with_link(markdown: str, language: str, link: str, needs: str | None = None) -> str | None:
    """``markdown`` with the notation line (after ``needs``) right under its title, or ``None``
    without a title."""
    lines = markdown.splitlines(keepends=True)
    in_code = code_block_lines(markdown)
    for i, text in enumerate(lines):
        if i not in in_code and TITLE.match(text):
            added = "\n" + line(language, link, needs) + "\n" + NOT_SEARCHED + "\n\n"
            head = "".join(lines[: i + 1])
            head = head if head.endswith("\n") else head + "\n"
            rest = "".join(lines[i + 1 :]).lstrip("\n")
            return head + added + rest
    return None


@event_priority(-50)  # after the other steps' Markdown (includes, pictures): the line comes last
def on_page_markdown(markdown: str, page, **kwargs) -> str:
    path = page_path(page)
    if path == NOTATION:
        return markdown
    link = posixpath.relpath(NOTATION, posixpath.dirname(path) or ".")
    language = page_language(page)
    linked = with_link(markdown, language, link, routes.needs_line(language, path))
    if linked is None:
        log.warning("%s: no '# ' title, so no link to the notation page", page.file.src_uri)
        return markdown
    return linked
