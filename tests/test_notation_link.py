"""Every page links to the notation page under its title (``mha_site/notation_link.py``).

The step is called on fake pages (nothing is built): the line, in the page's language, comes right
under the title with a link relative to the page; the notation page itself gets none; a ``# `` line
inside code is not a title; every real page has a title for the line to go under.
"""

from __future__ import annotations

from types import SimpleNamespace

import markdown
import pytest
from material.plugins.search.plugin import Parser as SearchParser
from support import LANGUAGES

from mha_site import notation_link, plugin
from mha_site.languages import doc_pages

PAGE = """# Masks { #masks }

A mask says which keys each query may attend to.

```python
# not a title
```
"""


def fake_page(src_uri: str):
    """What the step reads of a MkDocs page: its source path, language folder first."""
    return SimpleNamespace(file=SimpleNamespace(src_uri=src_uri))


def run(src_uri: str, markdown: str = PAGE) -> str:
    return notation_link.on_page_markdown(markdown, page=fake_page(src_uri), config=None)


def test_english_page_gets_the_english_line_under_its_title():
    lines = run("en/exercises.md").splitlines()
    assert lines[:5] == [
        "# Masks { #masks }",
        "",
        "Symbols and sizes: see [Notation](notation.md).",
        "{ data-search-exclude }",
        "",
    ], lines[:5]
    assert lines[5] == "A mask says which keys each query may attend to.", lines[5]


def test_chinese_page_gets_the_chinese_line_under_its_title():
    lines = run("zh/exercises.md", PAGE.replace("# Masks", "# 掩码")).splitlines()
    assert lines[:3] == ["# 掩码 { #masks }", "", "符号与尺寸见[记号](notation.md)。"], lines[:3]


def test_the_line_is_added_once_and_the_rest_is_unchanged():
    out = run("en/exercises.md")
    assert out.count("[Notation](notation.md)") == 1, out
    line = "Symbols and sizes: see [Notation](notation.md).\n{ data-search-exclude }\n\n"
    assert out.replace(line, "") == PAGE, out


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_notation_page_gets_no_line(language):
    assert run(f"{language}/notation.md") == PAGE


def test_a_page_in_a_subfolder_links_up():
    assert "[Notation](../notation.md)" in run("en/guide/masks.md")


def test_a_hash_line_in_code_is_not_the_title():
    page = "```python\n# a comment\n```\n\n# Title { #t }\n\nText.\n"
    lines = run("en/t.md", page).splitlines()
    assert lines[4:7] == ["# Title { #t }", "", "Symbols and sizes: see [Notation](notation.md)."]


def test_a_page_without_title_is_left_as_it_is_with_a_warning(caplog):
    with caplog.at_level("WARNING"):
        assert run("en/t.md", "Text only.\n") == "Text only.\n"
    assert "no '# ' title" in caplog.text, caplog.text


def test_the_line_renders_as_a_paragraph_that_search_leaves_out():
    html = markdown.markdown(run("zh/exercises.md"), extensions=["attr_list", "fenced_code"])
    line = '<p data-search-exclude>符号与尺寸见<a href="notation.md">记号</a>。</p>'
    assert line in html, html
    parser = SearchParser()  # what Material's search indexes of a page
    parser.feed(html)
    parser.close()
    indexed = "".join("".join(s.title) + "".join(s.text) for s in parser.data)
    assert "Masks" in indexed and "A mask says" in indexed, indexed
    assert "记号" not in indexed, indexed


def test_every_page_of_the_site_has_a_title_for_the_line():
    missing = [
        str(path)
        for path in doc_pages()
        if path.name != notation_link.NOTATION
        and notation_link.with_link(path.read_text(encoding="utf-8"), "en", "x.md") is None
    ]
    assert not missing, missing


def test_the_step_is_registered_in_the_plugin():
    assert notation_link in plugin.STEPS, plugin.STEPS


def test_a_chapter_names_the_pages_it_builds_on_before_the_notation_link():
    """``routes.NEEDS``: each page with its own title, in the page's language."""
    en = run("en/cache-size.md").splitlines()[2]
    assert en == (
        "You need: [Grouped-query attention](gqa.md), [Sliding window](window.md), "
        "[Attention in chunks](chunked.md) and [Multi-head latent attention](mla.md). "
        "Symbols and sizes: see [Notation](notation.md)."
    ), en
    zh = run("zh/window.md", PAGE.replace("# Masks", "# 滑动窗口")).splitlines()[2]
    needs = "先读：[掩码](masks.md)、[KV 缓存与逐位置生成](cache.md)。"
    assert zh == needs + "符号与尺寸见[记号](notation.md)。", zh
