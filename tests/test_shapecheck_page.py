"""The page "Check your own copy" (``docs/*/shapecheck.md``) checks the design post's class exactly
as a reader pastes it: the text its first snippet writes to ``design.py`` is the post's code,
``DESIGN_SOURCE``, character for character, in both languages. (Sybil runs the page itself: the
reports it shows are what ``mha.shapecheck`` prints for that text.)"""

from __future__ import annotations

import ast

import pytest
from support import DESIGN_SOURCE, LANGUAGES, ROOT

from mha_site.markdown import fences


def pasted(language: str) -> list[str]:
    """The strings the python blocks of the page assign to ``post``."""
    text = (ROOT / "docs" / language / "shapecheck.md").read_text(encoding="utf-8")
    found = []
    for fence in fences(text):
        if fence.info != "python" or fence.body.lstrip().startswith(">>>"):
            continue
        for node in ast.walk(ast.parse(fence.body)):
            if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["post"]:
                found.append(ast.literal_eval(node.value))
    return found


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_page_pastes_the_design_posts_class_verbatim(language):
    assert pasted(language) == [DESIGN_SOURCE]
