"""``python -m mha_site.scaffold`` starts a chapter: twin pages that pass the parity checker, in the
nav after the page named, with their Chinese title in nav_translations."""

from __future__ import annotations

import shutil

import pytest
import yaml

from mha_site import scaffold
from mha_site.checkers import parity
from mha_site.languages import ROOT, nav_pages


@pytest.fixture
def copy(tmp_path):
    shutil.copytree(ROOT / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("assets"))
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    return tmp_path


def test_the_scaffold_writes_twin_pages_and_both_nav_entries(copy):
    before = (copy / "mkdocs.yml").read_text(encoding="utf-8")
    written = scaffold.scaffold("planted", "A planted chapter", "示例章节", "gqa", root=copy)
    assert [p.relative_to(copy).as_posix() for p in written] == [
        "docs/en/planted.md",
        "docs/zh/planted.md",
        "mkdocs.yml",
    ]
    after = (copy / "mkdocs.yml").read_text(encoding="utf-8")
    # Only two lines are added: the comments and the rest of the file stay as they were.
    assert sorted(set(after.splitlines()) - set(before.splitlines())) == [
        "            A planted chapter: 示例章节",
        "      - A planted chapter: planted.md",
    ]
    config = yaml.safe_load(after)
    files = nav_pages(config["nav"])
    assert files[files.index("gqa.md") + 1] == "planted.md"
    (i18n,) = [p["i18n"] for p in config["plugins"] if isinstance(p, dict) and "i18n" in p]
    (zh,) = [lang for lang in i18n["languages"] if lang["locale"] == "zh"]
    assert zh["nav_translations"]["A planted chapter"] == "示例章节"
    assert parity.problems(copy / "docs") == []
    assert (
        (copy / "docs/zh/planted.md")
        .read_text(encoding="utf-8")
        .startswith("# 示例章节 { #planted }\n")
    )


def test_a_title_with_a_colon_is_quoted_so_mkdocs_yml_still_parses(copy):
    title = 'Planted: a "chapter"'
    scaffold.scaffold("planted", title, "示例：章节", "gqa", root=copy)
    config = yaml.safe_load((copy / "mkdocs.yml").read_text(encoding="utf-8"))
    files = nav_pages(config["nav"])
    assert files[files.index("gqa.md") + 1] == "planted.md"
    (i18n,) = [p["i18n"] for p in config["plugins"] if isinstance(p, dict) and "i18n" in p]
    (zh,) = [lang for lang in i18n["languages"] if lang["locale"] == "zh"]
    assert zh["nav_translations"][title] == "示例：章节"


def test_the_scaffold_refuses_a_bad_slug_an_unknown_page_and_an_existing_page(copy):
    with pytest.raises(ValueError, match=r"slug must be .* got 'Planted'"):
        scaffold.scaffold("Planted", "A planted chapter", "示例章节", "gqa", root=copy)
    with pytest.raises(ValueError, match=r"--after must name a page .* got 'no-such-page'"):
        scaffold.scaffold("planted", "A planted chapter", "示例章节", "no-such-page", root=copy)
    with pytest.raises(ValueError, match=r"docs/en/masks.md exists already"):
        scaffold.scaffold("masks", "Masks", "掩码", "gqa", root=copy)
    assert not (copy / "docs/en/planted.md").exists()


def test_the_scaffolded_pages_run_as_doc_tests(copy):
    scaffold.scaffold("planted", "A planted chapter", "示例章节", "gqa", root=copy)
    for language in ("en", "zh"):
        text = (copy / "docs" / language / "planted.md").read_text(encoding="utf-8")
        code = text.split("```python\n", 1)[1].split("```", 1)[0]
        exec(compile(code, f"{language}/planted.md", "exec"), {})


def test_with_a_picture_the_scaffold_registers_a_generator_that_draws_a_real_run(copy):
    shutil.copytree(
        ROOT / "mha_site", copy / "mha_site", ignore=shutil.ignore_patterns("__pycache__")
    )
    (copy / "tests").mkdir()
    shutil.copy(ROOT / "tests/test_pictures.py", copy / "tests/test_pictures.py")
    scaffold.scaffold(
        "planted", "A planted chapter", "示例章节", "gqa", picture="planted-slopes", root=copy
    )
    registry = (copy / "mha_site/pictures.py").read_text(encoding="utf-8")
    head, generators = registry.split("GENERATORS = (", 1)
    assert "    pictures_planted,\n" in head and "    pictures_planted,\n" in generators
    runs = (copy / "tests/test_pictures.py").read_text(encoding="utf-8")
    drawn, page_runs = runs.split("DRAWN = {", 1)[1].split("PAGE_RUNS = {", 1)
    assert '    "planted-slopes": PAGE,\n}' in drawn and '    "planted.md": PAGE,\n}' in page_runs
    for language in ("en", "zh"):
        page = (copy / "docs" / language / "planted.md").read_text(encoding="utf-8")
        assert page.count("<!-- picture: planted-slopes -->\n") == 1
    assert parity.problems(copy / "docs") == []
    namespace: dict = {}
    source = (copy / "mha_site/pictures_planted.py").read_text(encoding="utf-8")
    exec(compile(source, "pictures_planted.py", "exec"), namespace)
    for language, said in (("en", "The output has the shape"), ("zh", "输出的形状与输入相同")):
        svg = namespace["PICTURES"]["planted-slopes"](language)
        assert svg.startswith("<svg") and said in svg and "[2, 3, 20]" in svg, svg
