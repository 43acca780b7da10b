"""Build step: every box holds its content, no prose renders as code, every table row fills its
columns.

Three ways a page can look broken while building without a word (the first two seen on
``pytorch.md``, the third on ``today.md``):

- **A box that closes before its content.** A ``??? note`` box holds the lines indented under it;
  a fence that starts at the box's own column closes the box, and the code meant for it shows
  below, always open, under a box that holds only its introduction. Caught where it happens: a
  box's last paragraph ends with a colon (it introduces what follows) and the next block is a
  fence outside the box.
- **Prose indented as code.** A paragraph indented four spaces more than its box or list (after
  a blank line) is an indented code block to Markdown: monospace, back-ticks shown, copy button.
  The site's code is fenced, always; Python-Markdown's own parser reports every indented code
  block here, with the page and its first line, so the strict build fails.
- **A table row short of cells.** Markdown pads a row with fewer cells than the header with empty
  ones: the last column shows blank in that row, as if the fact were "nothing". Every row must
  have the header's number of cells (a ``|`` inside inline code or escaped is not a border).
"""

from __future__ import annotations

import logging
import re

from markdown import Extension
from markdown.blockprocessors import CodeBlockProcessor

from mha_site.markdown import FENCE_OPEN, code_block_lines

log = logging.getLogger("mkdocs.plugins.mha_site.rendering")

_page: list[str] = [""]
"""The page being converted (set before its Markdown is converted)."""

BOX = re.compile(r"^(?P<indent> *)(?:\?\?\?\+?|!!!) ")


def boxes_closed_early(markdown: str) -> list[tuple[int, str]]:
    """(line, box title) of each box whose text ends with a colon and whose next block is a fence
    at or left of the box's own column: the code it introduces is outside it."""
    lines = markdown.splitlines()
    code = code_block_lines(markdown)  # a fence's lines are code, not boxes
    found = []
    for number, line in enumerate(lines):
        box = BOX.match(line)
        if number in code or not box:
            continue
        column = len(box["indent"])
        last = None  # the box's last non-blank line
        for after in range(number + 1, len(lines)):
            text = lines[after]
            if not text.strip():
                continue
            if len(text) - len(text.lstrip(" ")) > column:
                last = text
                if FENCE_OPEN.match(text):  # a fence inside the box: it holds code
                    break
                continue
            fence_after = FENCE_OPEN.match(text)
            if fence_after and last is not None and last.rstrip().endswith((":", "：")):
                found.append((number + 1, line.strip()))
            break
    return found


CELL_BORDER = re.compile(r"(`+)(?:(?!\1).)*?\1|\\\||(\|)")


def cells(row: str) -> int:
    """The cells of a table row: its borders outside inline code, less one."""
    return sum(1 for m in CELL_BORDER.finditer(row.strip()) if m[2]) - 1


def short_rows(markdown: str) -> list[tuple[int, int, int]]:
    """(line, cells, header's cells) of each table row with another number of cells than its
    table's header. Tables in fences are content, not tables."""
    found = []
    header = None
    code = code_block_lines(markdown)
    for number, line in enumerate(markdown.splitlines(), start=1):
        text = line.strip()
        if number - 1 in code or not text.startswith("|"):
            header = None
            continue
        count = cells(text)
        if header is None:
            header = count
        elif count != header:
            found.append((number, count, header))
    return found


class _IndentedCode(CodeBlockProcessor):
    """Markdown's indented code block, reported: the site fences all its code."""

    def run(self, parent, blocks):
        first = blocks[0].strip().splitlines()[0] if blocks[0].strip() else ""
        log.warning(
            "%s: a paragraph indented 4 spaces past its box or list renders as code: %r; "
            "fence code, and indent a box's prose as far as the box's other lines",
            _page[0] or "a docstring",
            first[:80],
        )
        return super().run(parent, blocks)


class NoIndentedCode(Extension):
    def extendMarkdown(self, md):
        md.parser.blockprocessors.register(_IndentedCode(md.parser), "code", 80)


def on_config(config, **kwargs):
    if not any(isinstance(e, NoIndentedCode) for e in config.markdown_extensions):
        config.markdown_extensions.append(NoIndentedCode())
    return config


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    _page[0] = page.file.src_uri
    for number, title in boxes_closed_early(markdown):
        log.warning(
            "%s:%d: %s ends with a colon, and the fence after it starts at the box's column: "
            "the box closes before its code (indent the fence under the box)",
            page.file.src_uri,
            number,
            title,
        )
    for number, count, header in short_rows(markdown):
        log.warning(
            "%s:%d: a table row of %d cells under a header of %d: the others would show blank",
            page.file.src_uri,
            number,
            count,
            header,
        )
    return markdown
