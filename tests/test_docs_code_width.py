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


def test_a_doctest_blocks_output_is_text_its_code_is_measured():
    long = "y" * 81
    block = f"```python\n>>> print({long!r})\n{long}\n>>> x = 1\n```\n"
    assert too_wide(block) == [(2, 94)]  # the prompt line; its printed output passes


def test_a_string_a_snippet_writes_is_text_its_first_line_code():
    long = "z" * 81
    block = f'```python\nf = """{long}\n{long}\n"""\n{long}\n```\n'
    assert too_wide(block) == [(2, 88), (5, 81)]  # its opening line and the code after it


def test_the_text_of_other_blocks_is_measured():
    long = "w" * 81
    assert too_wide(f'```text\nf = """\n{long}\n"""\n>>> 1\n{long}\n```\n') == [(3, 81), (6, 81)]
