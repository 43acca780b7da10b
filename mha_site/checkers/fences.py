"""Every python-looking code block in docs/ is collected by Sybil, and no skip hides one silently.

Sybil runs a fence only when its info string is exactly ``python``: a block tagged ``py``,
``Python``, ``python3``, ``python title="x"``, ``python hl_lines="2"`` or ``~~~ python`` would be
shown on the site and never run. So this checker reads each page as Markdown does (fences inside
admonitions, tabs and lists included, a fence nested in a longer fence is content) and demands
that the Sybil of the root ``conftest.py`` collects every python-looking block, hidden
``<!-- invisible-code-block: python -->`` blocks included, and nothing else.

The rule for includes: implementation code is shown with a plain ```` ```python ```` fence whose
body is only ``--8<-- "mha/file.py:section"`` lines. Sybil collects it too (so it is counted like
any other python block), but checks that the include resolves to code that compiles instead of
running the directive (see ``conftest.py``). A fence that mixes an include with other code fails.

``<!-- skip: next -->`` without a reason makes Sybil report the next block as passed although it
never ran: every ``skip: next`` and ``skip: start`` must give a reason (``"why"`` or ``if(...)``).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from sybil.evaluators.skip import Skipper
from sybil.parsers.abstract import AbstractClearNamespaceParser

from mha_site.languages import DOCS, ROOT, doc_pages
from mha_site.markdown import (
    INCLUDE_LINE,
    SKIP,
    SKIP_DIRECTIVE,
    Fence,
    Hidden,
    code_blocks,
    fences,
)
from mha_site.runnable import sybils

# Languages whose blocks are Python code, as Pygments and Markdown users spell them.
PYTHON_LIKE = {
    "py",
    "py2",
    "py3",
    "python",
    "python2",
    "python3",
    "pycon",
    "pyi",
    "ipython",
    "ipython3",
}


def is_python_like(block: Fence) -> bool:
    """``py``, ``Python``, ``python title="x"``, ``{.python}``: the first word names Python."""
    return block.language.lower() in PYTHON_LIKE


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def opening(text: str, block: Fence) -> str:
    """The first line of a block: its opening fence, or the hidden block's comment."""
    return text.splitlines()[block.line - 1].strip()


def python_blocks(text: str) -> list[Fence]:
    """Python-looking fences, and hidden code blocks outside fences, in page order."""
    return [block for block in code_blocks(text) if is_python_like(block)]


@cache
def root_sybil():
    """The Sybil that pytest uses for docs/ (the root conftest.py collects it)."""
    return sybils(ROOT)[0]


def collected_regions(path: Path) -> list:
    """Sybil's code regions of a page (skip and clear-namespace directives left out)."""
    document = root_sybil().parse(path)
    return [
        region
        for _, region in document.regions
        if not isinstance(region.evaluator, Skipper)
        and region.evaluator is not AbstractClearNamespaceParser.evaluate
    ]


def fence_problems(path: Path) -> list[str]:
    """Blocks Sybil misses or collects wrongly, mixed includes, reasonless skips: one line each."""
    text = path.read_text(encoding="utf-8")
    name = path.relative_to(path.parents[1]) if path.is_relative_to(DOCS) else path.name
    blocks = python_blocks(text)
    regions = collected_regions(path)
    problems = []
    for block in blocks:
        if not any(block.start <= r.start < block.end for r in regions):
            problems.append(f"{name}:{block.line}: `{opening(text, block)}` is not run by Sybil")
        if isinstance(block, Hidden):
            continue
        lines = [ln for ln in block.body.splitlines() if ln.strip()]
        includes = [ln for ln in lines if INCLUDE_LINE.match(ln)]
        if includes and len(includes) != len(lines):
            problems.append(f"{name}:{block.line}: a fence mixes an --8<-- include with code")
    for region in regions:
        if not any(b.start <= region.start < b.end for b in blocks):
            line = line_of(text, region.start)
            problems.append(f"{name}:{line}: Sybil runs code that is not a python block")
    spans = [(f.start, f.end) for f in fences(text)]
    for match in SKIP.finditer(text):
        if any(s <= match.start() < e for s, e in spans):
            continue  # markup shown in a code block, not a directive
        line = line_of(text, match.start())
        directive = SKIP_DIRECTIVE.fullmatch(match[0])
        if directive is None:
            problems.append(f"{name}:{line}: malformed skip directive {match[0]!r}")
        elif directive["action"] in ("next", "start") and not directive["reason"]:
            problems.append(f"{name}:{line}: {match[0]!r} gives no reason; Sybil would pass it")
    return problems


def check() -> list[str]:
    """Every fence problem of the site's pages."""
    return [problem for page in doc_pages() for problem in fence_problems(page)]
