"""The glossary is the one list of Chinese terms, and the Chinese pages follow it (the rules:
``mha_site/checkers/glossary.py``): these tests run the checker on every zh page, pin the terms the
site depends on, and feed it planted faults.
"""

from __future__ import annotations

import re

import pytest

from mha_site.checkers.glossary import (
    EN,
    GLOSSARY,
    NO_VARIANT,
    ROOT,
    ZH,
    Row,
    chinese_text,
    find_avoided,
    find_english_comments,
    find_mixed_modes,
    find_ordinals,
    find_ranges,
    first_use_unglossed,
    hits_on,
    included_files,
    parse_glossary,
    report,
    table_problems,
    teaching_pages,
    variant_pattern,
    zh_pages,
    zh_rows,
)
from mha_site.languages import nav_pages
from mha_site.markdown import CHINESE

ZH_ROWS = zh_rows()
ZH_PAGES = zh_pages()


def test_glossary_table_is_well_formed():
    assert len(ZH_ROWS) >= 20, f"only {len(ZH_ROWS)} rows parsed from the zh glossary"
    english = [r.english for r in ZH_ROWS]
    chinese = [r.chinese for r in ZH_ROWS]
    assert len(set(english)) == len(english), f"duplicate English terms: {english}"
    assert len(set(chinese)) == len(chinese), f"duplicate Chinese terms: {chinese}"


def test_en_glossary_has_the_same_rows():
    assert parse_glossary(EN / GLOSSARY) == list(ZH_ROWS)


def test_no_avoided_variant_is_part_of_a_term():
    # Otherwise every correct use of that term would be reported as a variant.
    clashes = [
        (v, r.chinese)
        for row in ZH_ROWS
        for v in row.avoided
        for r in ZH_ROWS
        if variant_pattern(v).search(r.chinese)
    ]
    assert clashes == [], clashes


def test_glossary_has_the_shape_and_kernel_terms():
    terms = {r.chinese: r.avoided for r in ZH_ROWS}
    assert {"批维度", "通道", "位置", "算子"} <= set(terms), sorted(terms)
    assert {"批次维度", "批量维度"} <= set(terms["批维度"]), terms["批维度"]
    assert {"词元", "token"} <= set(terms["位置"]), terms["位置"]
    assert {"内核", "核函数", "kernel"} <= set(terms["算子"]), terms["算子"]


@pytest.mark.parametrize("page", ZH_PAGES, ids=lambda p: p.name)
def test_zh_page_uses_no_avoided_variant(page):
    hits = hits_on(page, lambda text, where, kind: find_avoided(text, ZH_ROWS, where, kind))
    assert hits == [], f"avoided variants (see docs/zh/glossary.md):\n{report(hits)}"


@pytest.mark.parametrize("page", ZH_PAGES, ids=lambda p: p.name)
def test_zh_page_numbers_from_0(page):
    hits = hits_on(page, find_ordinals)
    assert hits == [], f"write 头 0、行 0–19 (see docs/zh/glossary.md#notes):\n{report(hits)}"


@pytest.mark.parametrize("page", ZH_PAGES, ids=lambda p: p.name)
def test_zh_page_writes_ranges_with_an_en_dash(page):
    hits = hits_on(page, find_ranges)
    assert hits == [], f"write 0–4 (see docs/zh/glossary.md#notes):\n{report(hits)}"


@pytest.mark.parametrize("page", ZH_PAGES, ids=lambda p: p.name)
def test_zh_page_keeps_eval_mode_and_inference_mode_apart(page):
    hits = hits_on(page, find_mixed_modes)
    assert hits == [], f"评估模式 is model.eval(), 推理模式 torch.inference_mode():\n{report(hits)}"


@pytest.mark.parametrize("page", ZH_PAGES, ids=lambda p: p.name)
def test_zh_page_comments_are_chinese_or_code(page):
    hits = hits_on(page, find_english_comments)
    assert hits == [], f"comments in Chinese (see docs/zh/glossary.md#notes):\n{report(hits)}"


PLANTED_PAGE = """# 草稿

<!-- invisible-code-block: python
words = ["the", "cat"]
-->

```python
def heads(x, block_size):
    \"\"\"Split x into heads.\"\"\"
    return x.view(2, 3, 4, 5)  # [batch_size, q_len, heads_num, head_size]

x = torch.zeros(2, 3, 20)  # [batch_size, q_len, 20]
y = x[:, :, :6]  # 0 to 6
z = x.sum()  # block 1 raises m
e = [x, x]  # the
f = heads(x, 4)  # block_size = 4，x.view 的结果
g = x.mean(-1)  # need_weights=True, q_len 3 = k_len 3
h = x.exp()  # e^(m - m_new)
```

```pycon
>>> x.shape  # the shape, printed
torch.Size([2, 3, 20])
```
"""


def test_an_english_comment_or_docstring_fails_and_code_passes():
    hits = find_english_comments(PLANTED_PAGE, "draft.md")
    assert [(h.line, h.variant) for h in hits] == [
        (9, '"""Split x into heads."""'),
        (13, "# 0 to 6"),
        (14, "# block 1 raises m"),
        (22, "# the shape, printed"),
    ], hits


def test_shapes_names_and_word_lists_pass_as_code():
    page = "```python\nwords = ['cat']\nw = words  # cat\n"
    page += "s = x.size()  # [batch_size, steps]\n```\n"
    assert find_english_comments(page, "x") == []
    assert [h.variant for h in find_english_comments(page.replace("# cat", "# dog"), "x")] == [
        "# dog"
    ]


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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("批次维度上做广播。", [("批次维度", "批维度")]),
        ("沿 batch 维拼接。", [("batch 维", "批维度")]),
        ("如果输入只有一个 token，", [("token", "位置")]),
        ("每个 Tokens 都有一个查询。", [("token", "位置")]),
        ("词元之间互相关注。", [("词元", "位置")]),
        ("融合 kernel 更快，", [("kernel", "算子")]),
        ("调用了两次内核。", [("内核", "算子")]),
        ("写一个核函数。", [("核函数", "算子")]),
    ],
    ids=["pici-weidu", "batch-wei", "token", "Tokens", "ciyuan", "kernel", "neihe", "hehanshu"],
)
def test_shape_and_kernel_variants_are_caught(text, expected):
    hits = find_avoided(text, ZH_ROWS, "x")
    assert [(h.variant, h.term) for h in hits] == expected, hits


def test_glossary_has_the_mask_cache_and_head_terms():
    terms = {r.chinese: r.avoided for r in ZH_ROWS}
    new = {
        "自注意力", "交叉注意力", "填充掩码", "因果掩码", "KV 缓存", "预填充", "解码", "生成",
        "分组查询注意力", "多查询注意力", "融合算子", "偏置", "设备", "广播", "屏蔽",
    }  # fmt: skip
    assert new <= set(terms), sorted(new - set(terms))
    assert "键值缓存" in terms["KV 缓存"], terms["KV 缓存"]
    assert "融合内核" in terms["融合算子"], terms["融合算子"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("先算键值缓存。", [("键值缓存", "KV 缓存")]),
        ("把 KV cache 清空。", [("KV cache", "KV 缓存")]),
        ("做一次 prefill。", [("prefill", "预填充")]),
        ("补齐掩码的形状。", [("补齐掩码", "填充掩码")]),
        ("遮蔽未来的键。", [("遮蔽", "屏蔽")]),
        ("线性层的偏差。", [("偏差", "偏置")]),
        ("自我注意力和互注意力。", [("自我注意力", "自注意力"), ("互注意力", "交叉注意力")]),
        ("群组查询注意力。", [("群组查询注意力", "分组查询注意力")]),
    ],
    ids=["jianzhi", "kv-cache", "prefill", "buqi", "zhebi", "piancha", "ziwo-hu", "qunzu"],
)
def test_mask_cache_and_head_variants_are_caught(text, expected):
    hits = find_avoided(text, ZH_ROWS, "x")
    assert [(h.variant, h.term) for h in hits] == expected, hits


def test_glossary_has_the_path_mode_and_memory_terms():
    terms = {r.chinese: r.avoided for r in ZH_ROWS}
    expected = {
        "评估模式": set(),
        "推理模式": set(),
        "逐步计算的路径": {"逐步写出的路径", "逐步写出的版本", "逐步计算的写法"},
        "math 实现": {"math 算子"},
        "行优先": {"行主序"},
        "键/值头": {"键、值头"},
        "权重文件": {"checkpoint"},
        "一页": {"一章"},
        "原文": {"设计稿"},
        "高速缓存": {"CPU 缓存", "缓存行"},
        "新张量": {"新建张量", "新建的张量"},
        "大小为 1 的维度": {"长度为 1 的维度"},
    }
    assert set(expected) <= set(terms), sorted(set(expected) - set(terms))
    for term, avoided in expected.items():
        assert avoided <= set(terms[term]), (term, terms[term])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("按逐步写出的路径计算。", [("逐步写出的路径", "逐步计算的路径")]),
        ("逐步计算的写法会存下权重。", [("逐步计算的写法", "逐步计算的路径")]),
        ("SDPA 选了 math 算子。", [("math 算子", "math 实现")]),
        ("元素按行主序排列。", [("行主序", "行优先")]),
        ("每个键、值头供两个查询头共用。", [("键、值头", "键/值头")]),
        ("加载纯享版的 checkpoint。", [("checkpoint", "权重文件")]),
        ("见掩码一章。", [("一章", "一页")]),
        ("设计稿里一步步算出的注意力。", [("设计稿", "原文")]),
        ("趁数据还在 CPU 缓存里。", [("CPU 缓存", "高速缓存")]),
        ("一次读一个缓存行。", [("缓存行", "高速缓存")]),
        ("每一步都新建一个张量。", [("新建一个张量", "新张量")]),
        ("用全连接层投影，再连结起来。", [("全连接层", "线性层"), ("连结", "拼接")]),
        ("掩蔽填充的位置。", [("掩蔽", "屏蔽")]),
        ("转置交换的是一个长度为 1 的维度。", [("长度为 1 的维度", "大小为 1 的维度")]),
    ],
    ids=[
        "xiechu", "xiefa", "math", "hangzhuxu", "dunhao", "checkpoint", "zhang", "shejigao",
        "cpu-cache", "cache-line", "xinjian", "d2l-linear-concat", "yanbi", "changdu",
    ],
)  # fmt: skip
def test_path_mode_and_memory_variants_are_caught(text, expected):
    hits = find_avoided(text, ZH_ROWS, "x")
    assert [(h.variant, h.term) for h in hits] == expected, hits


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("基线类从张量上读尺寸。", [("基线类", "基准类")]),
        ("每个查询头用哪个键值头？", [("键值头", "键/值头")]),
        ("内存顺序就是下标顺序。", [("下标顺序", "行优先")]),
        ("自定义的头维度，每头 64 维。", [("头维度", "每个头的维度"), ("每头", "每个头的维度")]),
        ("写出来的路径。", [("写出来的路径", "逐步计算的路径")]),
        ("完整写出分数。", [("完整写出", "逐步计算的路径")]),
        ("见符号表。", [("符号表", "记号")]),
        ("见逐步讲解、逐步追踪。", [("逐步讲解", "逐行走读"), ("逐步追踪", "逐行走读")]),
        ("两章里都有说明。", [("两章", "一页")]),
    ],
    ids=[
        "jixian", "jianzhitou", "xiabiao", "touweidu", "xiechulai", "wanzheng", "fuhao", "zoudu",
        "liangzhang",
    ],
)  # fmt: skip
def test_split_terms_are_caught(text, expected):
    # One word per concept (the zh review of 2026-12-01): the variants that had crept in.
    hits = find_avoided(text, ZH_ROWS, "x")
    assert [(h.variant, h.term) for h in hits] == expected, hits


def test_path_mode_and_memory_terms_pass_where_they_are_written_right():
    text = (
        "评估模式下走快速路径；逐步计算的路径存下注意力权重；math 实现；元素按行优先排列；"
        "每个键/值头供两个查询头共用；加载权重文件；见掩码一页；原文；趁数据还在 CPU 高速缓存里，"
        "一次读一个高速缓存行；投影的结果是新张量；线性层；拼接；屏蔽；"
        "序列长度为 1 时，转置交换的是一个大小为 1 的维度。"
    )
    assert find_avoided(text, ZH_ROWS, "x") == []


def test_the_d2l_column_maps_its_terms_to_ours():
    # The terms a reader of d2l-zh knows, each mapped to the one the site uses instead.
    ours = {r.d2l: r.chinese for r in ZH_ROWS if r.d2l not in NO_VARIANT}
    expected = {"批量大小": "批大小", "词元": "位置", "掩蔽": "屏蔽", "全连接层": "线性层"}
    assert {k: ours.get(k) for k in expected} == expected, ours
    assert all(r.d2l for r in ZH_ROWS), "every row has a d2l-zh cell (— for none)"
    # Where d2l-zh uses another word, that word is one of the variants the pages avoid, or a
    # different concept the notes explain.
    explained = {"有效长度", "预测", "编码器－解码器注意力", "头", "线性投影", "上溢"}
    other = {r.d2l for r in ZH_ROWS if r.d2l not in NO_VARIANT | {r.chinese}}
    avoided = {v for r in ZH_ROWS for v in r.avoided}
    assert other - avoided <= explained, sorted(other - avoided - explained)


def test_mask_cache_and_head_terms_pass_where_they_are_written_right():
    text = (
        "自注意力和交叉注意力；填充掩码屏蔽填充的位置；先预填充，再逐个生成，每步解码一个位置，"
        "KV 缓存随之变长；分组查询注意力和多查询注意力；融合算子；偏置；设备。"
    )
    assert find_avoided(text, ZH_ROWS, "x") == []


def test_shape_and_kernel_terms_pass_where_they_are_written_right():
    text = (
        "批维度上做广播。序列长度为 1 时只有一个位置。融合算子的调用次数更少。每个通道属于一个头。"
    )
    assert find_avoided(text, ZH_ROWS, "x") == []


def test_code_inline_code_links_and_anchors_are_not_prose():
    text = (
        "## 融合算子 { #fused-kernel }\n\n"
        "见[这里](pytorch.md#fused-kernel)，调用 `one_token.transpose(1, 2)`，"
        "参见 https://example.org/kernel。\n\n"
        "```python\n"
        "one_token = torch.randn(2, 4, 1, 5)\n"
        'kernel = "token"  # 只有一个位置\n'
        "```\n\n"
        "<!-- invisible-code-block: python\ntoken = 1\n-->\n"
    )
    assert find_avoided(text, ZH_ROWS, "x") == []


def test_a_comment_in_a_code_block_is_checked_but_a_string_is_not():
    text = '```python\nx = "# token"  # 每个 token 一行\ny = 2  # fused kernel\n```\n'
    hits = find_avoided(text, ZH_ROWS, "x")
    assert [(h.line, h.variant) for h in hits] == [(2, "token"), (3, "kernel")], hits


def test_included_source_files_are_checked_in_their_chinese_text_only():
    source = (
        '"""A docstring may say token and kernel.\n\n中文:\n    每个词元一个查询。\n"""\n'
        "# 每个 token 一个查询\n"
        "# One query per token\n"
        "x = 1  # 融合内核\n"
        "y = 2  # fused kernel\n"
    )
    hits = find_avoided(source, ZH_ROWS, "mha/x.py", "python")
    # 融合内核 is reported twice: as 内核 (write 算子) and as itself (write 融合算子)
    expected = [(4, "词元"), (6, "token"), (8, "内核"), (8, "融合内核")]
    assert [(h.line, h.variant) for h in hits] == expected, hits


def test_included_annotated_source_is_checked_in_its_chinese_comments_and_docstrings():
    source = (ROOT / "mha" / "annotated.py").read_text(encoding="utf-8")
    readable = chinese_text(source)
    comments = [line for line in readable if line.lstrip().startswith("#")]
    assert len(comments) >= 20, f"only {len(comments)} Chinese comments found"
    assert len(readable) - readable.count("") > len(comments), "no Chinese docstring line found"
    assert all(CHINESE.search(line) for line in readable if line), "English text slipped in"


def test_the_api_page_is_checked_in_the_docstrings_it_documents():
    files = {p.relative_to(ROOT).as_posix() for p in included_files(ZH / "api.md")}
    assert {"mha/annotated.py", "mha/pure.py", "mha/checks.py"} <= files, files


def test_heads_and_positions_are_numbered_from_0():
    bad = "第 0 个头只看位置 0；第 $i$ 个头；第 `i` 个位置；第 2 个注意力头。"
    assert [h.variant for h in find_ordinals(bad, "x")] == [
        "第 0 个头",
        "第 $i$ 个头",
        "第 `i` 个位置",
        "第 2 个注意力头",
    ]
    good = "头 0 只看位置 0；头 $i$ 的通道；第 1 维是头数；第 −1 维；第二个位置。"
    assert find_ordinals(good, "x") == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("第 $r$ 行算出通道 $r$。", "第 $r$ 行"),
        ("权重的第 19 列。", "第 19 列"),
        ("第 `5*i` 到 `5*i + 4` 个通道属于头 i。", "第 `5*i` 到 `5*i + 4` 个通道"),
        ("第 0 到 19 行是 W_q。", "第 0 到 19 行"),
        ("取第 $i d_h$ 到第 $(i+1) d_h - 1$ **行**。", "第 $i d_h$ 到第 $(i+1) d_h - 1$ **行"),
        ("第 0 句，头 2。", "第 0 句"),
        ("第 1 个句子。", "第 1 个句子"),
        ("第 1 条序列。", "第 1 条序列"),
        ("第 $i$ 个列块。", "第 $i$ 个列块"),
        ("缓存的第 ``i`` 行。", "第 ``i`` 行"),
        ("第 ``s`` 步，进程 0。", "第 ``s`` 步"),
        ("第 ``rank`` 个进程。", "第 ``rank`` 个进程"),
        ("第 i 对的频率。", "第 i 对"),
        ("传给第 ``i`` 层。", "第 ``i`` 层"),
        ("第 0 块的键。", "第 0 块"),
    ],
    ids=[
        *("row", "column", "channels", "rows", "rows-math", "ju", "juzi", "xulie", "lieKuai"),
        *("docstring-row", "step", "rank", "pair", "layer", "block"),
    ],
)
def test_rows_columns_channels_sequences_and_blocks_are_numbered_from_0(text, expected):
    assert [h.variant for h in find_ordinals(text, "x")] == [expected]


def test_numbers_written_after_the_noun_pass():
    good = (
        "行 0–19 是 W_q；列 19；通道 `5*i`–`5*i+4`；句子 0，头 2；序列 1；列块 $i$；"
        "第 0 维；第一列的列表；第 2 列表项；行 ``index[i]``；步 0；进程 ``rank``；对 ``i``；块 0。"
    )
    assert find_ordinals(good, "x") == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("通道 0 到 4 属于头 0。", "0 到 4"),
        ("位置 0..9。", "0..9"),
        ("位置 $0 .. t$ 的键。", "0 .. t"),
        ("键 $0 \\ldots s$。", "0 \\ldots s"),
        ("```python\nk = 1  # 通道 5 .. 9\n```\n", "5 .. 9"),
        ("对 1 至 128 的每个值。", "1 至 1"),
    ],
    ids=["dao", "dots", "dots-math", "ldots", "comment", "zhi"],
)
def test_a_range_not_written_with_an_en_dash_fails(text, expected):
    assert [h.variant for h in find_ranges(text, "x")] == [expected]


def test_ranges_with_an_en_dash_and_lists_in_formulas_pass():
    good = (
        "通道 0–4；行 0–19；位置 0–$t$；$i = 0, \\ldots, h-1$；"
        "$\\mathrm{head}_0, \\ldots, \\mathrm{head}_{h-1}$；权重介于 0 和 1 之间。"
        "`x[..., 0:5]` 是代码。"
    )
    assert find_ranges(good, "x") == []
    docstring = '"""中文:\n    查询 ``i`` 能看到键 0–``i``，``x[..., 0:5]`` 是代码。\n"""\n'
    assert find_ranges(docstring, "mha/x.py", "python") == []


def test_a_range_inside_one_code_span_fails():
    """The English docstrings write ``0 .. q_len - 1``; the Chinese part writes 0–``q_len - 1``."""
    docstring = '"""中文:\n    查询 ``i`` 能看到键 ``0 .. i``。\n"""\n'
    assert [h.variant for h in find_ranges(docstring, "mha/x.py", "python")] == ["``0 .. i``"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("推理模式下（`model.eval()`）什么都不丢弃。", [("推理模式", "评估模式")]),
        ("在评估模式（`torch.inference_mode()`）下运行。", [("评估模式", "推理模式")]),
    ],
    ids=["tuili-eval", "pinggu-inference"],
)
def test_eval_mode_and_inference_mode_mixed_up_fail(text, expected):
    hits = find_mixed_modes(text, "x")
    assert [(h.variant, h.term) for h in hits] == expected, hits


def test_eval_mode_and_inference_mode_named_right_pass():
    good = (
        "评估模式下（`model.eval()`）什么都不丢弃。推理模式（`torch.inference_mode()`）不记录梯度。"
        "评估模式（`model.eval()`）加上推理模式（`torch.inference_mode()`）走快速路径。"
    )
    assert find_mixed_modes(good, "x") == []


def test_the_heads_page_names_the_term_in_its_title():
    title = (ZH / "heads.md").read_text(encoding="utf-8").splitlines()[0]
    assert "注意力头" in title, title


def test_a_table_with_a_term_twice_or_a_variant_inside_a_term_fails():
    rows = [*ZH_ROWS, Row("head", "注意力头", ("头",), "—")]
    found = table_problems(rows)
    assert "chinese terms listed twice: ['注意力头']" in found, found
    assert any("the variant '头' of '注意力头' is part of the term" in p for p in found), found
    assert table_problems(ZH_ROWS[:3])[0] == "only 3 rows parsed from the zh glossary"


def test_a_row_without_its_four_cells_fails(tmp_path):
    path = tmp_path / "glossary.md"
    path.write_text("| English | 中文 | 不用 | d2l-zh |\n|---|---|---|---|\n| head | 头 | — |\n")
    with pytest.raises(ValueError, match="expected 4 cells"):
        parse_glossary(path)


def test_chunked_attention_is_never_called_tiled_attention() -> None:
    """块内注意力 names Llama 4's chunked attention, 分块注意力 only the tiled one (tiled.md):
    a zh line or docstring line about Llama 4's chunks or chunk layers says 块内注意力."""
    clash = re.compile(r"Llama 4 ?的?分块注意力|分块注意力层|分块层|分块的层|分块的缓存")
    files = [*sorted((ROOT / "mha").glob("*.py")), *sorted((ROOT / "docs" / "zh").glob("*.md"))]
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if clash.search(line)
    ]
    assert not hits, "\n".join(hits)


# The chapters after the full MHA, which the review found without the English (the core pages
# give it where they define a term, checked by reading); a term that is English already is left.
NEWER = nav_pages()[nav_pages().index("full.md") + 1 :]
TAUGHT_BY_NEWER = [
    (term, english, page)
    for term, english, page in teaching_pages()
    if page in NEWER and english.lower() not in term.lower()
]


@pytest.mark.parametrize(("term", "english", "page"), TAUGHT_BY_NEWER, ids=lambda value: str(value))
def test_the_chapter_that_teaches_a_term_gives_its_english_at_first_use(term, english, page):
    """On the newer chapter that the glossary's definition links first, the term's first use is
    followed by its English in parentheses: 注意力汇点（attention sink）. A reader meets both, and
    the zh search finds the page by the English term."""
    text = (ZH / page).read_text(encoding="utf-8")
    after = first_use_unglossed(term, english, text)
    assert after is None, f"zh/{page}: {term} first used without （{english}）: {term}{after}"


def test_the_newer_chapters_teach_terms_of_the_glossary():
    pages = {page for _, _, page in TAUGHT_BY_NEWER}
    assert {"sinks.md", "softcap.md", "window.md", "mla.md", "ring.md"} <= pages, pages


def test_a_block_whose_docstring_holds_an_example_is_code_and_its_comments_are_read():
    """The blocks of included code hold docstrings with examples: they are code, not a session,
    so an English trailing comment of theirs is found (14 on full.md and model.md were missed)."""
    code = 'def f(x):\n    """例子：\n\n    >>> f(1)\n    1\n    """\n    return x  # the input\n'
    page = f"```python\n{code}```\n"
    assert [h.variant for h in find_english_comments(page, "x")] == ["# the input"]
