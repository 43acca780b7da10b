"""Every snippet a reader sees checks something: no test that asserts nothing (the rules:
``mha_site/checkers/asserts.py``).
"""

from __future__ import annotations

from support import each_doc_page

from mha_site.checkers.asserts import page_problems, snippets_without_a_check, weak_asserts
from mha_site.languages import ROOT


@each_doc_page
def test_no_assert_is_about_literals_or_checks_a_shape_with_not_equal(page):
    weak = weak_asserts(page.read_text(encoding="utf-8"))
    assert not weak, f"{page.relative_to(ROOT)}: {weak}"


def test_weak_assert_checker_catches_literals_and_not_equal_shapes():
    text = (
        "```python\nassert 10 // 3 == 3, 'floor'\nassert q.shape != (2, 4, 3, 5), q.shape\n"
        "assert q.shape == (2, 3, 4, 5), q.shape\n```\n\n"
        "<!-- invisible-code-block: python\nassert 2 + 2 == 4\n-->\n\n"
        "```python\n>>> assert 1 < 2\n```\n"
    )
    assert weak_asserts(text) == [
        "literals only: assert 10 // 3 == 3",
        "shape checked with !=: assert q.shape != (2, 4, 3, 5)",
        "literals only: assert 1 < 2",
        "literals only: assert 2 + 2 == 4",
    ]


@each_doc_page
def test_every_visible_snippet_checks_something(page):
    lines = snippets_without_a_check(page.read_text(encoding="utf-8"))
    assert not lines, f"{page.relative_to(ROOT)}: snippets at lines {lines} assert nothing"


def test_checker_catches_a_snippet_that_asserts_nothing():
    text = "# P\n\n```python\nx = 1\n```\n\n```python\nassert x == 1, x\n```\n"
    assert snippets_without_a_check(text) == [3]


def test_checker_accepts_doctests_includes_and_indented_fences():
    text = (
        '```python\n>>> 1 + 1\n2\n```\n\n```python\n--8<-- "mha/pure.py:all"\n```\n\n'
        "??? success \"Solution\"\n    ```python\n    assert True, 'x'\n    ```\n"
    )
    assert snippets_without_a_check(text) == []


def test_page_problems_name_the_file_and_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# P\n\n```python\nx = 1\n```\n\n```python\nassert 2 > 1\n```\n")
    found = page_problems(page)
    assert [p.split(": ", 1)[0] for p in found] == [f"{page}:3", f"{page}:7"], found
    assert "asserts nothing" in found[0] and "literals only: assert 2 > 1" in found[1], found
