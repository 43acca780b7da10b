"""Every python-looking code block in docs/ is collected by Sybil, and no skip hides one silently
(the rules: ``mha_site/checkers/fences.py``). Temporary pages show the checker failing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mha_site.checkers.fences import (
    collected_regions,
    fence_problems,
    python_blocks,
    root_sybil,
)
from mha_site.languages import DOCS, doc_pages

PAGES = doc_pages()


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
