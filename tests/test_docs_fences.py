"""Every python-looking code block in docs/ is collected by Sybil, and no skip hides one silently.

Sybil runs a fence only when its info string is exactly ``python``: a block tagged ``py``,
``Python``, ``python3``, ``python title="x"``, ``python hl_lines="2"`` or ``~~~ python`` would be
shown on the site and never run. So this test reads each page as Markdown does (fences inside
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

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from sybil.evaluators.skip import Skipper
from sybil.parsers.abstract import AbstractClearNamespaceParser

from mha_site.runnable import sybils

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))

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
FENCE = re.compile(r"^(?P<indent>[ \t]*(?:>[ \t]*)*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
HIDDEN = re.compile(
    r"<!--[ \t]*(?:invisible-)?code(?:-block)?[ \t]*:[ \t]*(?P<lang>[^\n]*?)[ \t]*\n.*?-->",
    re.DOTALL,
)
SKIP_COMMENT = re.compile(r"<!--[ \t-]*skip\b[^\n]*?-->")
INCLUDE_LINE = re.compile(r'^[ \t]*--8<--[ \t]+"[^"\n]+"[ \t]*$')


def is_python_like(info: str) -> bool:
    """``py``, ``Python``, ``python title="x"``, ``{.python}``: the first word names Python."""
    word = re.split(r"[\s{}]", info.strip().lstrip("{").lstrip("."), maxsplit=1)[0]
    return word.lower() in PYTHON_LIKE


@dataclass(frozen=True)
class Block:
    """A python-looking block of a page: a fence or a hidden code comment."""

    start: int  # offset of its first character
    end: int  # offset just after it
    line: int
    opening: str  # the fence line or the comment's first line
    body: str


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def fences(text: str) -> list[tuple[int, int, str, str]]:
    """All top-level fences as Markdown sees them: (start, end, info, body)."""
    found = []
    offset = 0
    current = None  # (start, fence, info, body_start)
    for line in text.splitlines(keepends=True):
        match = FENCE.match(line.rstrip("\r\n"))
        if current is None:
            if match and not (match["fence"][0] == "`" and "`" in match["info"]):
                current = (offset, match["fence"], match["info"].strip(), offset + len(line))
        elif (
            match
            and match["fence"][0] == current[1][0]
            and len(match["fence"]) >= len(current[1])
            and not match["info"].strip()
        ):
            start, _, info, body_start = current
            found.append((start, offset + len(line), info, text[body_start:offset]))
            current = None
        offset += len(line)
    if current is not None:  # an unclosed fence runs to the end of the page
        start, _, info, body_start = current
        found.append((start, len(text), info, text[body_start:]))
    return found


def python_blocks(text: str) -> list[Block]:
    """Python-looking fences plus hidden code blocks outside fences, in page order."""
    spans = fences(text)
    blocks = [
        Block(s, e, line_of(text, s), text[s : text.index("\n", s)].strip(), body)
        for s, e, info, body in spans
        if is_python_like(info)
    ]
    for match in HIDDEN.finditer(text):
        inside_fence = any(s <= match.start() < e for s, e, _, _ in spans)
        if not inside_fence and is_python_like(match["lang"]):
            first = text[match.start() : text.index("\n", match.start())]
            blocks.append(
                Block(match.start(), match.end(), line_of(text, match.start()), first, "")
            )
    return sorted(blocks, key=lambda b: b.start)


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
            problems.append(f"{name}:{block.line}: `{block.opening}` is not run by Sybil")
        lines = [ln for ln in block.body.splitlines() if ln.strip()]
        includes = [ln for ln in lines if INCLUDE_LINE.match(ln)]
        if includes and len(includes) != len(lines):
            problems.append(f"{name}:{block.line}: a fence mixes an --8<-- include with code")
    for region in regions:
        if not any(b.start <= region.start < b.end for b in blocks):
            line = line_of(text, region.start)
            problems.append(f"{name}:{line}: Sybil runs code that is not a python block")
    spans = fences(text)
    for match in SKIP_COMMENT.finditer(text):
        if any(s <= match.start() < e for s, e, _, _ in spans):
            continue  # markup shown in a code block, not a directive
        line = line_of(text, match.start())
        directive = re.match(r"<!--[ \t]*skip:[ \t]*(\w+)(?:[ \t]+(.*?))?[ \t]*-->", match[0])
        if directive is None:
            problems.append(f"{name}:{line}: malformed skip directive {match[0]!r}")
        elif directive[1] in ("next", "start") and not directive[2]:
            problems.append(f"{name}:{line}: {match[0]!r} gives no reason; Sybil would pass it")
    return problems


def test_docs_has_pages():
    assert len(PAGES) >= 2, f"no Markdown pages found under {DOCS}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_every_python_block_is_collected_by_sybil(page):
    problems = fence_problems(page)
    assert not problems, "\n".join(problems)


def test_collected_examples_count_matches_python_blocks_per_page():
    counts = {}
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        blocks = python_blocks(text)
        regions = collected_regions(page)
        collected = [b for b in blocks if any(b.start <= r.start < b.end for r in regions)]
        counts[str(page.relative_to(DOCS))] = (len(blocks), len(collected))
    wrong = {page: c for page, c in counts.items() if c[0] != c[1]}
    assert not wrong, f"(python blocks, collected by Sybil) differ: {wrong}"


# The checker itself, on temporary pages.

GOOD = """# Page { #page }

<!-- invisible-code-block: python
import math
-->

```python
assert math.sqrt(25) == 5, "sqrt"
```

!!! note "Nested"

    ```python
    >>> 2 + 3
    5
    ```

=== "Tab"

    ```python
    --8<-- "mha/pure.py:all"
    ```

````markdown
```py
shown as Markdown source, not code: not run and not counted
```
````

<!-- skip: next "shows an error on purpose" -->

```python
raise RuntimeError("skipped with a reason")
```
"""


def write_page(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text(text, encoding="utf-8")
    return path


def test_checker_accepts_a_good_page(tmp_path):
    page = write_page(tmp_path, GOOD)
    assert len(python_blocks(GOOD)) == 5, python_blocks(GOOD)
    assert fence_problems(page) == []


@pytest.mark.parametrize(
    "opening",
    [
        "```py",
        "```Python",
        "```python3",
        '```python title="mha.py"',
        '```python hl_lines="1"',
        "~~~Python",
        "``` python",
        "```{.python}",
        "```pycon",
    ],
)
def test_checker_catches_a_mistagged_fence(tmp_path, opening):
    closing = opening[:3]
    page = write_page(tmp_path, f"{GOOD}\n{opening}\nassert False, 'never runs'\n{closing}\n")
    problems = fence_problems(page)
    assert len(problems) == 1 and "is not run by Sybil" in problems[0], problems


def test_tilde_python_fence_is_collected(tmp_path):
    page = write_page(tmp_path, f"{GOOD}\n~~~python\nassert True, 'runs'\n~~~\n")
    assert len(python_blocks(page.read_text())) == 6
    assert fence_problems(page) == []


def test_checker_catches_a_mistagged_fence_in_an_admonition(tmp_path):
    text = f"{GOOD}\n!!! tip\n\n    ```Python\n    assert False, 'never runs'\n    ```\n"
    problems = fence_problems(write_page(tmp_path, text))
    assert len(problems) == 1 and "is not run by Sybil" in problems[0], problems


def test_checker_catches_a_mistagged_hidden_block(tmp_path):
    text = f"{GOOD}\n<!-- invisible-code-block: py\nassert False, 'never runs'\n-->\n"
    problems = fence_problems(write_page(tmp_path, text))
    assert len(problems) == 1 and "is not run by Sybil" in problems[0], problems


@pytest.mark.parametrize("directive", ["<!-- skip: next -->", "<!-- skip: start -->"])
def test_checker_catches_a_skip_without_reason(tmp_path, directive):
    end = "\n<!-- skip: end -->\n" if "start" in directive else ""
    text = f"{GOOD}\n{directive}\n\n```python\nassert False, 'never runs'\n```\n{end}"
    problems = fence_problems(write_page(tmp_path, text))
    assert len(problems) == 1 and "gives no reason" in problems[0], problems


def test_skip_shown_inside_a_code_block_is_not_a_directive(tmp_path):
    text = f"{GOOD}\n```markdown\n<!-- skip: next -->\n```\n"
    assert fence_problems(write_page(tmp_path, text)) == []


def test_checker_catches_an_include_mixed_with_code(tmp_path):
    text = f'{GOOD}\n```python\n--8<-- "mha/pure.py:all"\nassert True, "x"\n```\n'
    problems = fence_problems(write_page(tmp_path, text))
    assert any("mixes an --8<-- include" in p for p in problems), problems


def run_examples(path: Path) -> None:
    document = root_sybil().parse(path)
    for example in document:
        example.evaluate()


def test_include_fence_is_checked_not_executed(tmp_path):
    run_examples(write_page(tmp_path, '```python\n--8<-- "mha/annotated.py:forward"\n```\n'))


@pytest.mark.parametrize(
    "target", ["mha/annotated.py:no-such-section", "mha/missing.py:all", "mha/pure.py:3:9"]
)
def test_broken_include_fails(tmp_path, target):
    page = write_page(tmp_path, f'```python\n--8<-- "{target}"\n```\n')
    with pytest.raises(Exception):  # noqa: B017 -- SnippetMissingError or AssertionError
        run_examples(page)
