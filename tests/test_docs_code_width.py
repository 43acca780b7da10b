"""Code on the site fits its column: no line of a docs code block is wider than 80 characters (the
rule: ``mha_site/checkers/code_width.py``).
"""

from __future__ import annotations

from support import each_doc_page

from mha_site.checkers.code_width import LIMIT, too_wide
from mha_site.languages import ROOT


@each_doc_page
def test_code_lines_fit_the_column(page):
    wide = too_wide(page.read_text(encoding="utf-8"))
    assert not wide, f"{page.relative_to(ROOT)}: (line, width) over {LIMIT}: {wide}"


def test_checker_measures_lines_inside_fences_only():
    text = (
        "x" * 90
        + "\n\n```python\n"
        + "y" * 81
        + "\nok\n```\n\n    ```text\n    "
        + "z" * 80
        + "\n    ```\n"
    )
    assert too_wide(text) == [(4, 81)]


def test_chinese_characters_count_twice():
    assert too_wide("```python\n# " + "注" * 39 + "\n```\n") == []
    assert too_wide("```python\n# " + "注" * 40 + "\n```\n") == [(2, 82)]


def test_an_include_line_is_exempt():
    include = '--8<-- "mha/' + "x" * 80 + '.py:all"'
    assert too_wide(f"```python\n{include}\n# {'y' * 80}\n```\n") == [(3, 82)]
