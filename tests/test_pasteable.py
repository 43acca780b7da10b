"""A snippet a reader copies needs nothing of the site's build package (``mha_site``, which
``pip install`` does not install): no visible block imports it, and none uses a name that a hidden
block made with it (window.md's ``plain`` and ``x`` did, and raised ``NameError`` pasted alone).
The names of the sizes that a page's hidden set-up gives (``batch_size``, ...) are plain numbers,
stated on the page; they are not this test's concern."""

from __future__ import annotations

import ast

import pytest

from mha_site.languages import DOCS, LANGUAGES
from mha_site.markdown import Hidden, code_blocks

# Pages whose visible code reads the site's own data, each with why.
EXEMPT = {
    "cache-size.md": "its calculator and the published configurations are the site's "
    "(mha_site/cache_size.py, which the page's explorer runs too)",
}
# The site's own measurements: a block that asserts what a page says was measured reads them from
# the benchmark's results file, which a reader of the page has in the repository.
MEASUREMENTS = ("mha_site.pictures_perf",)
PAGES = [page for lang in LANGUAGES for page in sorted((DOCS / lang).glob("*.md"))]


def parsed(block) -> ast.Module | None:
    lines = block.body.splitlines()
    if any(line.startswith(">>> ") for line in lines):
        lines = [line[4:] for line in lines if line.startswith((">>> ", "... "))]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def from_site(module: str) -> bool:
    return module.startswith("mha_site") and module not in MEASUREMENTS


def imports_site(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(from_site(a.name) for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and from_site(node.module or ""):
            return True
    return False


def site_names(tree: ast.Module) -> set[str]:
    """The names a block imports from ``mha_site``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if from_site(a.name)}
        elif isinstance(node, ast.ImportFrom) and from_site(node.module or ""):
            names |= {a.asname or a.name for a in node.names}
    return names


def stored(tree: ast.Module) -> set[str]:
    names = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    names |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return names


def problems(text: str) -> list[str]:
    """What the visible blocks of a page need of ``mha_site``."""
    found = []
    site_made: set[str] = set()  # names the hidden blocks that import mha_site assign
    visible: set[str] = set()  # names a visible block assigned already
    for block in code_blocks(text):
        if block.language.lower() != "python":
            continue
        tree = parsed(block)
        if tree is None:
            continue
        if isinstance(block, Hidden):
            if imports_site(tree):
                site_made |= (stored(tree) | site_names(tree)) - visible
            continue
        if imports_site(tree):
            found.append(f"line {block.line}: imports mha_site")
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        needed = (used & site_made) - visible - stored(tree)
        if needed:
            found.append(f"line {block.line}: uses {sorted(needed)}, made by a hidden block")
        visible |= stored(tree)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_visible_snippet_needs_nothing_of_the_sites_build_package(page):
    if page.name in EXEMPT:
        pytest.skip(EXEMPT[page.name])
    found = problems(page.read_text(encoding="utf-8"))
    assert not found, f"{page.parent.name}/{page.name}: " + "; ".join(found)


def test_window_md_as_it_was_is_caught():
    before = """<!-- invisible-code-block: python
from mha_site.pictures_heatmaps import setup

plain, x = setup()
-->

```python
out = plain(x)
```
"""
    assert problems(before) == ["line 7: uses ['plain', 'x'], made by a hidden block"]
    assert problems("```python\nfrom mha_site import pictures_chunked\n```\n") == [
        "line 1: imports mha_site"
    ]
