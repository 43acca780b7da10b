"""The API reference describes every parameter in both languages, and the zh page in Chinese (the
rules: ``mha_site/checkers/api_languages.py``). Mutated docstrings and a mutated built page show
the checker failing.
"""

from __future__ import annotations

import inspect
import shutil

import pytest

from mha_site import docstring_language as hook
from mha_site.checkers import api_languages
from mha_site.checkers.api_languages import (
    SHOWN_MODULES,
    api_identifiers,
    built_english_prose,
    built_parameter_problems,
    chinese_part,
    coverage_problems,
    documented,
    glossary_hits,
    problems,
    shown_source_problems,
)
from mha_site.languages import LANGUAGES
from mha_site.markdown import CHINESE

DOCUMENTED = documented()


@pytest.mark.parametrize("item", DOCUMENTED, ids=[d.name for d in DOCUMENTED])
def test_every_parameter_is_described_in_both_languages(item):
    found = problems(item.name, item.signature, item.docstring)
    assert not found, "\n".join(found)


def test_the_api_page_documents_every_public_callable_of_each_module():
    found = coverage_problems()
    assert not found, "\n".join(found)


def test_methods_and_the_documented_list_are_complete():
    """The list this test file checks holds the classes' methods (forward), not just the
    ``:::`` objects: a method without a docstring would be missing from the page itself."""
    names = [d.name for d in DOCUMENTED]
    assert "mha.annotated.MHA.forward" in names and "mha.pure.MHA.forward" in names, names
    for item in DOCUMENTED:
        assert item.docstring.strip(), f"{item.name} has no docstring: the API page omits it"
    assert api_identifiers("zh") == api_identifiers("en"), "the zh API page documents others"


@pytest.mark.parametrize("item", DOCUMENTED, ids=[d.name for d in DOCUMENTED])
def test_chinese_part_uses_the_glossary_terms(item):
    hits = glossary_hits(item)
    assert not hits, [f"{h.where}: {h.variant} → {h.term}" for h in hits]


def test_coverage_checker_catches_a_callable_left_out(monkeypatch):
    monkeypatch.setattr(api_languages, "documented", lambda: DOCUMENTED[1:])
    found = coverage_problems()
    assert found == [f"{DOCUMENTED[0].name} is not on the API page"], found


def test_examples_are_written_once():
    """Sybil runs the docstrings' examples: each runs once, from the English part."""
    for item in DOCUMENTED:
        assert ">>>" not in chinese_part(item), f"{item.name}: an example in the {hook.MARKER} part"


# The checker fails on a docstring that leaves something out: mutations of check_sizes'.

SIZES = next(d for d in DOCUMENTED if d.name.endswith("check_sizes"))


def mutate(old: str, new: str) -> list[str]:
    docstring = inspect.cleandoc(SIZES.docstring)
    assert docstring.count(old) == 1, f"{old!r} is not once in check_sizes' docstring"
    return problems("check_sizes", SIZES.signature, docstring.replace(old, new))


def test_checker_passes_the_real_docstring():
    assert problems("check_sizes", SIZES.signature, SIZES.docstring) == []


def test_checker_catches_a_parameter_missing_in_chinese():
    found = mutate("\n        heads_num: 注意力头数，必须整除 ``hidden_size``。\n", "\n")
    assert any("(zh): parameters not described: ['heads_num']" in p for p in found), found


def test_checker_catches_a_parameter_missing_in_english():
    found = mutate(
        "\n    heads_num: number of attention heads; must divide ``hidden_size``.\n", "\n"
    )
    assert any("(en): parameters not described: ['heads_num']" in p for p in found), found


def test_checker_catches_a_parameter_not_in_the_signature():
    found = mutate("heads_num: 注意力头数", "num_heads: 注意力头数")
    assert any("(zh): parameters not in the signature: ['num_heads']" in p for p in found), found


def test_checker_catches_different_exceptions():
    found = mutate("ValueError: 某个尺寸不是正数", "RuntimeError: 某个尺寸不是正数")
    assert any("Raises differ" in p and "RuntimeError" in p for p in found), found


def test_checker_catches_english_left_in_the_chinese_part():
    found = mutate("隐藏层维度，即输入最后一维的大小。", "model width, the last dimension.")
    assert any("parameter hidden_size has no Chinese" in p for p in found), found
    found = mutate("隐藏层维度，即输入最后一维的大小。", "隐藏层维度, the model width.")
    assert any("English prose 'the model width'" in p for p in found), found


def test_checker_catches_a_docstring_without_chinese():
    english = inspect.cleandoc(SIZES.docstring).split(hook.MARKER)[0]
    found = problems("check_sizes", SIZES.signature, english)
    assert found == [f"check_sizes: no {hook.MARKER} section: the zh page would show the English"]


def test_checker_catches_an_example_in_the_chinese_part():
    found = mutate("    参数：\n", "    >>> check_sizes(4, 2)\n\n    参数：\n")
    assert any("has an example" in p for p in found), found


def test_chinese_titles_map_to_google_sections_and_others_fail():
    zh = hook.in_language(inspect.cleandoc(SIZES.docstring), "zh")
    assert "\nArgs:\n" in zh and "\nRaises:\n" in zh and "参数：" not in zh, zh
    assert zh.rstrip().endswith("TypeError: hidden_size must be an int, got float (20.0)"), zh
    with pytest.raises(ValueError, match="has the section '注意'"):
        hook.in_language("Sum.\n\n中文:\n    求和。\n\n    注意:\n        小心。", "zh")
    with pytest.raises(ValueError, match="must be the last one"):
        hook.in_language("Sum.\n\n中文:\n    求和。\n\nArgs:\n    a: x.", "zh")
    with pytest.raises(ValueError, match="write 参数： with a full-width colon"):
        hook.in_language("Sum.\n\n中文:\n    求和。\n\n    参数:\n        a: 数。", "zh")


def test_checker_catches_the_raises_title_mkdocstrings_would_give():
    """异常：, not 引发： (mkdocstrings' own zh title): the old title is no title of ours."""
    found = mutate("    异常：\n", "    引发：\n")
    assert any("has the section '引发'" in p for p in found), found


# Examples are written once; their comments in both languages, the Chinese one a line of its own
# above the English one it translates (KVCache's examples: crop, then reorder).

KV_CACHE = next(d for d in DOCUMENTED if d.name == "mha.cache.KVCache")
CROP_ZH = "        >>> # 保留位置 0–3，比如要重新生成位置 4\n"


def test_each_page_shows_the_example_comments_of_its_language():
    docstring = inspect.cleandoc(KV_CACHE.docstring)
    zh, en = hook.in_language(docstring, "zh"), hook.in_language(docstring, "en")
    assert ">>> cache.crop(4)  # 保留位置 0–3，比如要重新生成位置 4\n" in zh, zh
    assert ">>> cache.reorder(torch.tensor([0, 0, 0]))  # 一个提示变成三束\n" in zh, zh
    assert "keep positions" not in zh and "three beams" not in zh, zh
    assert ">>> cache.crop(4)  # keep positions 0-3, say to generate position 4 again\n" in en
    assert not CHINESE.search(en), en


def test_checker_catches_an_example_comment_left_in_english():
    assert CROP_ZH in KV_CACHE.docstring
    found = problems(KV_CACHE.name, KV_CACHE.signature, KV_CACHE.docstring.replace(CROP_ZH, ""))
    assert any(
        "'# keep positions 0-3, say to generate position 4 again' has no Chinese" in p
        for p in found
    ), found
    assert any("(zh): the examples show the en comment" in p for p in found), found


def test_checker_catches_a_chinese_comment_with_nothing_to_translate():
    moved = KV_CACHE.docstring.replace(CROP_ZH, "").replace(
        "        >>> cache.keys.shape\n", CROP_ZH + "        >>> cache.keys.shape\n"
    )
    found = problems(KV_CACHE.name, KV_CACHE.signature, moved)
    assert any("has no English comment after it" in p for p in found), found


def test_english_page_drops_the_chinese_part():
    en = hook.in_language(inspect.cleandoc(SIZES.docstring), "en")
    assert hook.MARKER not in en and not CHINESE.search(en), en


# Pages that show the package's code (the annotated and the pure MHA) can show each docstring in
# their language: ``source_in_language``. Only docstrings change, each as the API page shows it.


@pytest.mark.parametrize("module", SHOWN_MODULES)
@pytest.mark.parametrize("lang", LANGUAGES)
def test_source_in_language_changes_only_the_docstrings(module, lang):
    found = shown_source_problems(module, lang)
    assert not found, "\n".join(found)


def test_shown_source_checker_catches_changed_code_and_lost_examples(monkeypatch):
    def renamed(code, lang):
        return code.replace("heads_num", "num_heads").replace(">>>", "")

    monkeypatch.setattr(hook, "source_in_language", renamed)
    found = shown_source_problems("pure", "en")
    assert "pure: code changed" in found and "pure (en): examples lost" in found, found


def test_source_in_language_leaves_code_that_does_not_tokenize():
    broken = 'def f():\n    """Sum.\n\n    中文:\n        求和。\n'
    assert hook.source_in_language(broken, "zh") == broken


# The built pages: each object's tables in the page's language.


def test_built_pages_describe_every_parameter_in_their_language(built_site):
    found = built_parameter_problems(built_site)
    assert not found, "\n".join(found)


def test_built_zh_page_has_no_english_prose_in_the_docstrings(built_site):
    found = built_english_prose(built_site)
    assert not found, "\n".join(found)


def test_built_page_checkers_catch_english_in_a_zh_section(built_site, tmp_path):
    for lang in LANGUAGES:
        api = built_site / ("" if lang == "en" else lang) / "api"
        shutil.copytree(api, tmp_path / ("" if lang == "en" else lang) / "api")
    page = tmp_path / "zh" / "api" / "index.html"
    html = page.read_text(encoding="utf-8")
    assert "隐藏层维度，即输入最后一维的大小" in html
    page.write_text(html.replace("隐藏层维度，即输入最后一维的大小", "the width of the model"))
    assert any("is not Chinese" in p for p in built_parameter_problems(tmp_path))
    assert any("English prose 'the width of the model" in p for p in built_english_prose(tmp_path))
