"""The English and the Chinese site say the same thing: parity of pages, headings, code and figures
(the rules: ``mha_site/checkers/parity.py``).

The drift tests at the end show the check failing on a copy of ``docs/`` with one thing changed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mha_site.checkers import parity
from mha_site.languages import LANGUAGES


def test_both_languages_exist():
    for lang in LANGUAGES:
        assert list((parity.DOCS / lang).glob("*.md")), f"no pages in docs/{lang}"


def test_languages_have_the_same_pages_headings_code_figures_and_includes():
    problems = parity.check()
    assert not problems, "\n".join(problems)


# The checker itself, on a small two-language tree in which one thing is then changed (its own
# pages, so these tests do not depend on the state of the real ones).


@pytest.fixture
def docs_copy(tmp_path) -> Path:
    copy = tmp_path / "docs"
    for lang in LANGUAGES:
        (copy / lang).mkdir(parents=True)
        shutil.copy(parity.DOCS / lang / "index.md", copy / lang / "index.md")
    (copy / "en" / "drift.md").write_text(
        "# Drift { #drift }\n\n## Split { #split-heads }\n\n"
        "![heads](../assets/heads.svg)\n\n"
        "```python\nx = 1  # one\nassert x == 1, x\n```\n\n!!! note\n\n    Text.\n",
        encoding="utf-8",
    )
    (copy / "zh" / "drift.md").write_text(
        "# 漂移 { #drift }\n\n## 拆分 { #split-heads }\n\n"
        "![多头](../assets/heads.svg)\n\n"
        "```python\n# 注释可以多一行\nx = 1  # 一\nassert x == 1, x\n```\n\n"
        "!!! note\n\n    文字。\n",
        encoding="utf-8",
    )
    return copy


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_checker_accepts_translated_text_and_comments(docs_copy):
    assert parity.problems(docs_copy) == []


def test_checker_catches_a_missing_page(docs_copy):
    (docs_copy / "zh" / "drift.md").unlink()
    assert parity.problems(docs_copy) == ["docs/zh/drift.md is missing (docs/en/drift.md exists)"]


def test_checker_catches_a_changed_heading_anchor(docs_copy):
    edit(docs_copy / "zh" / "drift.md", "{ #split-heads }", "{ #split }")
    problems = parity.problems(docs_copy)
    assert len(problems) == 1 and "drift.md: headings differ" in problems[0], problems


def test_checker_catches_a_heading_without_anchor(docs_copy):
    edit(docs_copy / "zh" / "drift.md", "## 拆分 { #split-heads }", "## 拆分")
    problems = parity.problems(docs_copy)
    assert any("heading without { #anchor }" in p for p in problems), problems


def test_checker_catches_a_changed_code_line(docs_copy):
    edit(docs_copy / "zh" / "drift.md", "x = 1  # 一", "x = 2  # 一")
    problems = parity.problems(docs_copy)
    assert len(problems) == 1 and "drift.md: code differ" in problems[0], problems


def test_checker_catches_a_changed_string_in_code(docs_copy):
    edit(docs_copy / "zh" / "drift.md", "assert x == 1, x", "assert x == 1, '# x'")
    problems = parity.problems(docs_copy)
    assert len(problems) == 1 and "drift.md: code differ" in problems[0], problems


def test_checker_catches_a_changed_figure(docs_copy):
    edit(docs_copy / "zh" / "drift.md", "../assets/heads.svg", "../assets/heads-zh.svg")
    problems = parity.problems(docs_copy)
    assert len(problems) == 1 and "drift.md: figures differ" in problems[0], problems


def test_checker_catches_a_changed_admonition(docs_copy):
    edit(docs_copy / "zh" / "drift.md", "!!! note", "!!! warning")
    problems = parity.problems(docs_copy)
    assert len(problems) == 1 and "drift.md: blocks differ" in problems[0], problems


def test_checker_catches_a_changed_include(docs_copy):
    for lang in LANGUAGES:
        edit(docs_copy / lang / "drift.md", "x = 1", '--8<-- "mha/pure.py:all"\nx = 1')
    edit(docs_copy / "zh" / "drift.md", "pure.py:all", "annotated.py:forward")
    problems = parity.problems(docs_copy)
    assert any("drift.md: includes differ" in p for p in problems), problems


def test_checker_catches_a_changed_mkdocstrings_directive(docs_copy):
    for lang in LANGUAGES:
        edit(docs_copy / lang / "drift.md", "!!! note", "::: mha.pure.MHA\n\n!!! note")
    edit(docs_copy / "zh" / "drift.md", "mha.pure.MHA", "mha.annotated.MHA")
    found = parity.problems(docs_copy)
    assert len(found) == 1 and "drift.md: directives differ" in found[0], found


@pytest.mark.parametrize("marker", ["picture: split-heads", "bench-table: memory"])
def test_checker_catches_a_changed_marker(docs_copy, marker):
    for lang in LANGUAGES:
        edit(docs_copy / lang / "drift.md", "!!! note", f"<!-- {marker} -->\n\n!!! note")
    edit(docs_copy / "zh" / "drift.md", marker, marker + "-zh")
    found = parity.problems(docs_copy)
    assert len(found) == 1 and "drift.md: figures differ" in found[0], found
