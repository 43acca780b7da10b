"""The reading routes and what each chapter builds on, in one place.

Two reasons bring readers here: the design post's class (they found it, and want each line and
shape of it understood) and today's models (they want the layer that Llama, Qwen or DeepSeek
run). ``ROUTES`` gives each its pages in reading order, about ten; the home page shows both
(the ``route`` marker of ``mha_site/markers.py``), each page with the minutes it takes, worked
out from the page itself (``minutes``). Every other page is reference, for when a route leads to
it.

``NEEDS`` names, for each chapter, the pages it builds on: the build writes them under the
chapter's title ("You need: ..."; ``mha_site/notation_link.py``), in the page's language, with
each page's own title. ``tests/test_routes.py`` checks that each of them comes earlier in the
menu, and that a route reads its pages after what they need.

>>> minutes_of(words=1000, code_lines=30, language="en")  # 5 min of prose, 2 of code
7
"""

from __future__ import annotations

import functools
import math
import re

from mha_site.include_language import resolve_includes
from mha_site.languages import DOCS, tr
from mha_site.markdown import (
    Hidden,
    code_blocks,
    details_lines,
    main_thread,
    snippets_options,
    words,
)

ROUTES: dict[str, tuple[str, ...]] = {
    # the design post's class: its math, every line and shape of it, what goes wrong, the heads
    # (with the core's self-check), a check of one's own copy
    "class": (
        "why.md",
        "math.md",
        "annotated.md",
        "walkthrough.md",
        "shapes.md",
        "pitfalls.md",
        "heads.md",
        "shapecheck.md",
    ),
    # today's models: the class grown into the layer that Llama, Qwen, Mistral and DeepSeek run
    "today": (
        "masks.md",
        "cache.md",
        "gqa.md",
        "rope.md",
        "today.md",
        "window.md",
        "chunked.md",
        "mla.md",
        "cache-size.md",
    ),
}

NEEDS: dict[str, tuple[str, ...]] = {
    "math.md": ("why.md",),
    "annotated.md": ("math.md",),
    "walkthrough.md": ("annotated.md",),
    "shapes.md": ("walkthrough.md",),
    "pitfalls.md": ("walkthrough.md",),
    "shapecheck.md": ("shapes.md",),
    "heads.md": ("walkthrough.md",),
    "masks.md": ("walkthrough.md",),
    "cache.md": ("masks.md",),
    "cross.md": ("masks.md",),
    "gqa.md": ("heads.md", "cache.md"),
    "fast.md": ("masks.md",),
    "full.md": ("cache.md", "cross.md", "gqa.md", "fast.md"),
    "model.md": ("full.md",),
    "rope.md": ("cache.md",),
    "longrope.md": ("rope.md",),
    "today.md": ("gqa.md", "rope.md"),
    "softcap.md": ("today.md",),
    "sinks.md": ("today.md",),
    "gate.md": ("today.md",),
    "nope.md": ("rope.md", "today.md"),
    "window.md": ("masks.md", "cache.md"),
    "chunked.md": ("window.md",),
    "mla.md": ("gqa.md", "rope.md"),
    "checked.md": ("today.md",),
    "cache-size.md": ("gqa.md", "window.md", "chunked.md", "mla.md"),
    "tiled.md": ("walkthrough.md", "masks.md"),
    "heads-split.md": ("heads.md",),
    "ring.md": ("tiled.md",),
    "pytorch.md": ("masks.md", "fast.md"),
}

# Reading speed: English words, or Chinese characters (with the English words among them), a
# minute, and the seconds a line of code shown takes to read.
PER_MINUTE = {"en": 200, "zh": 300}
SECONDS_A_CODE_LINE = 4
TITLE = re.compile(r"^# (?P<title>.+?)(?:\s*\{[^}]*\})?\s*$", re.M)
HEADING = re.compile(r"^(?P<hashes>#{1,6}) .*\{[^}]*#(?P<id>[\w-]+)[^}]*\}\s*$")


def source(language: str, page: str) -> str:
    """The Markdown of ``page`` (``name.md``, or ``name.md#section``: that section alone)."""
    name, _, section = page.partition("#")
    text = (DOCS / language / name).read_text(encoding="utf-8")
    if not section:
        return text
    lines = text.splitlines(keepends=True)
    start = level = None
    for i, line in enumerate(lines):
        heading = HEADING.match(line)
        if heading and start is None and heading["id"] == section:
            start, level = i, len(heading["hashes"])
        elif heading and start is not None and len(heading["hashes"]) <= level:
            return "".join(lines[start:i])
    if start is None:
        raise LookupError(f"{language}/{name} has no section #{section}")
    return "".join(lines[start:])


@functools.cache
def title(language: str, page: str) -> str:
    """The title of ``page`` in ``language``: its ``# `` heading, less its attributes."""
    name = page.partition("#")[0]
    found = TITLE.search((DOCS / language / name).read_text(encoding="utf-8"))
    if found is None:
        raise LookupError(f"{language}/{name} has no '# ' title")
    return found["title"]


def minutes_of(words: int, code_lines: int, language: str) -> int:
    """Minutes to read ``words`` of prose and ``code_lines`` lines of code, rounded up."""
    return math.ceil(words / PER_MINUTE[language] + code_lines * SECONDS_A_CODE_LINE / 60)


def minutes(language: str, page: str) -> int:
    """Minutes to read ``page`` as a reader does: its main thread (``markdown.main_thread``: no
    collapsed deep dives, answers or hidden set-up) and the lines of the code blocks it shows
    open, included code as the page shows it."""
    text = resolve_includes(source(language, page), language, snippets_options(), page)
    collapsed = details_lines(text)
    shown = sum(
        len(block.body.splitlines())
        for block in code_blocks(text)
        if not isinstance(block, Hidden) and block.line - 1 not in collapsed
    )
    return minutes_of(words(main_thread(text)), shown, language)


def route_table(name: str, language: str) -> str:
    """The route ``name`` as a Markdown table: each page, linked with its title, and its
    minutes; the total under it."""
    header = tr(language, "| # | Page | Minutes |", "| # | 页面 | 分钟 |")
    rows = [header, "|---|---|---|"]
    total = 0
    for number, page in enumerate(ROUTES[name], start=1):
        spent = minutes(language, page)
        total += spent
        name_of = title(language, page)
        if "#" in page:
            section = section_title(language, page)
            name_of = tr(language, f"{name_of}: {section}", f"{name_of}：{section}")
        rows.append(f"| {number} | [{name_of}]({page}) | {spent} |")
    rows.append("")
    rows.append(
        tr(
            language,
            f"About {total} minutes in all.",
            f"合计约 {total} 分钟。",
        )
    )
    return "\n".join(rows)


def section_title(language: str, page: str) -> str:
    """The heading of the section ``page`` (``name.md#id``) names, less its attributes."""
    first = source(language, page).splitlines()[0]
    return re.sub(r"\s*\{[^}]*\}\s*$", "", first.lstrip("#").strip())


def needs_line(language: str, page: str) -> str | None:
    """ "You need: ..." for ``page`` in ``language``, each page it builds on linked with its
    title; None for a page that builds on none."""
    needed = NEEDS.get(page, ())
    if not needed:
        return None
    links = [f"[{title(language, need)}]({need})" for need in needed]
    listed = links[0] if len(links) == 1 else ", ".join(links[:-1]) + " and " + links[-1]
    return tr(language, f"You need: {listed}.", "先读：" + "、".join(links) + "。")
