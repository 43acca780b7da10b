"""The glossary is the one list of Chinese terms, and the Chinese pages follow it.

``docs/zh/glossary.md`` holds a table ``| English | 中文 | 不用 |``: for each concept, the Chinese
term the site uses and the variants it avoids (separated by 、, or — for none). These tests parse
that table and check every other zh page against it, prose and code comments alike, including the
source files a page pulls in with ``--8<--``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
ZH = ROOT / "docs" / "zh"
EN = ROOT / "docs" / "en"
GLOSSARY = "glossary.md"
NO_VARIANT = {"", "—", "-"}
# Words that contain an avoided variant but mean something else: 关键字参数 is a keyword argument.
LEGITIMATE = ("关键字参数",)
INCLUDE = re.compile(r'-{2}8<-{2}\s+"([^"]+)"')


class Row(NamedTuple):
    english: str
    chinese: str
    avoided: tuple[str, ...]


class Hit(NamedTuple):
    where: str
    line: int
    variant: str
    term: str


def parse_glossary(path: Path) -> list[Row]:
    """The rows of the first table in ``path`` (header and separator skipped)."""
    rows: list[Row] = []
    in_table = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            if in_table:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not in_table:
            in_table = True  # the header row
            continue
        if set("".join(cells)) <= set("-: "):
            continue  # the separator row
        assert len(cells) == 3, f"{path}: expected 3 cells, got {cells}"
        english, chinese, avoided = cells
        variants = () if avoided in NO_VARIANT else tuple(v.strip() for v in avoided.split("、"))
        rows.append(Row(english, chinese, variants))
    return rows


def find_avoided(text: str, rows: list[Row], where: str) -> list[Hit]:
    """Every occurrence of an avoided variant in ``text``, with its line and the preferred term."""
    hits = []
    for number, line in enumerate(text.splitlines(), start=1):
        for word in LEGITIMATE:
            line = line.replace(word, "")
        for row in rows:
            for variant in row.avoided:
                if variant in line:
                    hits.append(Hit(where, number, variant, row.chinese))
    return hits


def included_files(page: Path) -> list[Path]:
    """Source files that ``page`` includes with pymdownx.snippets (``--8<-- "path:section"``)."""
    names = {m.group(1).split(":")[0] for m in INCLUDE.finditer(page.read_text(encoding="utf-8"))}
    return sorted(ROOT / name for name in names)


def page_texts(page: Path) -> list[tuple[str, str]]:
    """(where, text) for the page itself and for every file it includes."""
    texts = [(str(page.relative_to(ROOT)), page.read_text(encoding="utf-8"))]
    for path in included_files(page):
        where = f"{path.relative_to(ROOT)} (included by {page.name})"
        texts.append((where, path.read_text(encoding="utf-8")))
    return texts


ZH_ROWS = parse_glossary(ZH / GLOSSARY)
ZH_PAGES = sorted(p for p in ZH.rglob("*.md") if p.name != GLOSSARY)


def test_glossary_table_is_well_formed():
    assert len(ZH_ROWS) >= 20, f"only {len(ZH_ROWS)} rows parsed from the zh glossary"
    english = [r.english for r in ZH_ROWS]
    chinese = [r.chinese for r in ZH_ROWS]
    assert len(set(english)) == len(english), f"duplicate English terms: {english}"
    assert len(set(chinese)) == len(chinese), f"duplicate Chinese terms: {chinese}"


def test_en_glossary_has_the_same_rows():
    assert parse_glossary(EN / GLOSSARY) == ZH_ROWS


def test_no_avoided_variant_is_part_of_a_term():
    # Otherwise every correct use of that term would be reported as a variant.
    variants = [v for row in ZH_ROWS for v in row.avoided]
    clashes = [(v, r.chinese) for v in variants for r in ZH_ROWS if v in r.chinese]
    assert clashes == [], clashes


@pytest.mark.parametrize("page", ZH_PAGES, ids=lambda p: p.name)
def test_zh_page_uses_no_avoided_variant(page):
    hits = [hit for where, text in page_texts(page) for hit in find_avoided(text, ZH_ROWS, where)]
    report = "\n".join(f"{h.where}:{h.line}: {h.variant!r}, write {h.term!r}" for h in hits)
    assert hits == [], f"avoided variants (see docs/zh/glossary.md):\n{report}"


@pytest.mark.parametrize("row", ZH_ROWS, ids=lambda r: r.english)
def test_chinese_term_is_used_on_a_zh_page(row):
    used_on = [p.name for p in ZH_PAGES if row.chinese in p.read_text(encoding="utf-8")]
    assert used_on, f"{row.chinese!r} ({row.english}) appears on no zh page but the glossary"


def test_a_page_with_an_avoided_variant_fails(tmp_path):
    page = tmp_path / "draft.md"
    page.write_text(
        "# 草稿\n\n先给注意力分数加上遮罩，再做 softmax。\n\n"
        "```python\nx = x.transpose(1, 2)  # 翻转两个维度\n```\n",
        encoding="utf-8",
    )
    hits = find_avoided(page.read_text(encoding="utf-8"), ZH_ROWS, page.name)
    assert [(h.line, h.variant, h.term) for h in hits] == [(3, "遮罩", "掩码"), (6, "翻转", "转置")]


def test_a_legitimate_word_containing_a_variant_passes():
    assert find_avoided("用关键字参数 need_weights=False 调用。", ZH_ROWS, "x") == []
    assert [h.term for h in find_avoided("查询和关键字", ZH_ROWS, "x")] == ["键"]


def test_head_alone_in_compounds_passes_and_the_avoided_variant_does_not():
    # 注意力头 is the term; 头 alone is fine in compounds and once the context is clear.
    assert find_avoided("每个头的维度是 5，头数是 4，这就是多头注意力。", ZH_ROWS, "x") == []
    hits = find_avoided("每个注意力头部都有自己的投影。", ZH_ROWS, "x")
    assert [(h.variant, h.term) for h in hits] == [("注意力头部", "注意力头")]


def test_the_heads_page_names_the_term_in_its_title():
    title = (ZH / "heads.md").read_text(encoding="utf-8").splitlines()[0]
    assert "注意力头" in title, title
