"""The chrome of the zh pages is Chinese: what Material, Python-Markdown and mkdocstrings write in
English unless told (the footer's credit, the ¶ tooltip, the 404 page, the Raises title), the
performance tables' labels, and the API page's docstrings (their comments and their words).

The built site's tests read ``built_site`` (``tests/conftest.py``), so they are marked ``site``.
"""

from __future__ import annotations

import inspect
import re

import pytest
from support import nav_pages, page_path

from mha.bench import TARGETS
from mha_site import docstring_language as hook
from mha_site.checkers.api_languages import documented
from mha_site.pictures_perf import table

PAGES = nav_pages()
TAG = re.compile(r"<[^>]+>")
SWITCH = re.compile(r'<a href="([^"]+)" hreflang="(\w+)" class="md-select__link"')


def zh_html(site, page: str) -> str:
    return (site / page_path("zh", page) / "index.html").read_text(encoding="utf-8")


def test_no_zh_page_credits_material_in_english(built_site):
    found = [page for page in PAGES if "Made with" in zh_html(built_site, page)]
    assert not found, f"zh pages with the English footer credit: {found}"
    assert "本站用" in zh_html(built_site, "index.md")
    assert "Made with" in (built_site / "index.html").read_text(encoding="utf-8")


def test_no_zh_heading_has_the_english_permalink_tooltip(built_site):
    found = [page for page in PAGES if 'title="Permanent link"' in zh_html(built_site, page)]
    assert not found, f'zh pages with title="Permanent link": {found}'
    assert 'title="链接到此标题"' in zh_html(built_site, "api.md")
    en = (built_site / "index.html").read_text(encoding="utf-8")
    assert 'title="Permanent link"' in en, "the en pages keep Python-Markdown's tooltip"


def test_zh_404_page_is_chinese_and_the_root_one_is_english_and_chinese(built_site):
    zh = (built_site / "zh" / "404.html").read_text(encoding="utf-8")
    assert '<html lang="zh"' in zh and "页面不存在" in zh and "Not found" not in zh
    root = (built_site / "404.html").read_text(encoding="utf-8")
    assert '<html lang="en"' in root, "the zh build wrote over the root's 404 page"
    assert "404 – Not found" in root and '<p lang="zh">' in root and 'href="/mha/zh/"' in root


def test_each_404_page_switches_language_to_the_home_pages(built_site):
    # A missing address has no twin: the switch goes home, not to the last page the build rendered.
    for page in ("404.html", "zh/404.html"):
        html = (built_site / page).read_text(encoding="utf-8")
        switch = {lang: href for href, lang in SWITCH.findall(html)}
        assert switch == {"en": "/mha/", "zh": "/mha/zh/"}, (page, switch)


def test_zh_api_page_titles_raises_as_chinese_api_docs_do(built_site):
    text = TAG.sub(" ", zh_html(built_site, "api.md"))
    assert "引发" not in text and "异常：" in text


def test_zh_api_page_shows_the_example_comments_in_chinese(built_site):
    text = TAG.sub("", zh_html(built_site, "api.md"))
    assert "# 保留位置 0–3，比如要重新生成位置 4" in text and "# 一个提示变成三束" in text
    assert "keep positions 0-3" not in text.split('"pieces"')[0], "an English example comment"
    en = TAG.sub("", (built_site / "api" / "index.html").read_text(encoding="utf-8"))
    assert "# keep positions 0-3, say to generate position 4 again" in en
    assert "保留位置" not in en, "the en page shows a Chinese example comment"


def test_zh_performance_tables_label_the_attentions_and_the_implementation():
    mla = table("mla", "zh").splitlines()[0]
    assert "mla-expanded" not in mla and "MLA 展开" in mla and "普通注意力" in mla, mla
    assert "mla-expanded" in table("mla", "en").splitlines()[0]
    for target in TARGETS:
        assert "full-fast" not in target.name[1], target.name[1]
    assert "完整版 fast=True" in table("targets", "zh")


# The Chinese parts of the docstrings: the glossary's words and numbering (the glossary checker
# reads the ranges and ordinals; these are the words it has no row for).

AVOIDED = {
    "原帖": "原文",
    "检查点": "权重文件",
    "今天的开源模型": "当下/主流",
    "今天模型": "主流模型",
}
ITEMS = documented()


@pytest.mark.parametrize("item", ITEMS, ids=[d.name for d in ITEMS])
def test_chinese_docstrings_use_the_sites_words(item):
    chinese = hook.split(inspect.cleandoc(item.docstring))[1] or ""
    found = {word: use for word, use in AVOIDED.items() if word in chinese}
    assert not found, f"{item.name}: write {found}"
    assert not re.search(r"``\d+ \.\. ", chinese), f"{item.name}: write 0–``n - 1``"
    assert not re.search(r"第 ``[^`]+`` (?:个)?(?:行|层|步|进程|对)", chinese), item.name
