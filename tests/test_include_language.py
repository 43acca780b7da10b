"""Included code shows the comments of the page's language only (``mha_site/include_language.py``).

``mha/annotated.py`` holds every explanation twice, a Chinese comment then the English one. The
built zh pages show the Chinese comments and no English one, the en pages the reverse, and both
show every line of code, docstring and shape comment. The filter and the include resolution are
tested on their own too, and a missing file or section still fails.
"""

from __future__ import annotations

import html
import re
import textwrap
from pathlib import Path

import pytest
from mkdocs.exceptions import PluginError
from support import LANGUAGES, ROOT, page_path

from mha_site import docstring_language as docstrings
from mha_site import include_language as hook
from mha_site.markdown import CHINESE, include_targets, snippets_options

SHAPE = re.compile(r"#\s*\[[^\]]*\]\s*")
MARKER = re.compile(r"#\s*--8<--\s*\[(?P<kind>start|end):(?P<name>[^\]]+)\]")
HIGHLIGHT = re.compile(r'<div class="highlight[^"]*"[^>]*><pre>.*?<code>(?P<code>.*?)</code>', re.S)
SNIPPETS = snippets_options()  # mkdocs.yml's


# ---- What the reader sees on the built pages -----------------------------------------------------


def section_lines(path: Path, name: str) -> list[str]:
    """The lines of a named section of a source file, markers of nested sections dropped, dedented
    (read independently of pymdownx.snippets)."""
    lines, inside = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        marker = MARKER.search(line)
        if marker:
            if marker["name"] == name:
                inside = marker["kind"] == "start"
            continue
        if inside:
            lines.append(line)
    assert lines, f"no section {name!r} in {path}"
    return textwrap.dedent("\n".join(lines)).strip("\n").splitlines()


def is_comment_line(line: str) -> bool:
    return line.lstrip().startswith("#") and not SHAPE.fullmatch(line.strip())


def expected_lines(lines: list[str], lang: str) -> list[str]:
    """The section as a reader of ``lang`` should see it: the other language's comments gone, the
    docstrings in ``lang`` (``source_in_language``, tested with the API page)."""

    def other_language(line: str) -> bool:
        chinese = bool(CHINESE.search(line))
        return is_comment_line(line) and chinese != (lang == "zh")

    shown = docstrings.source_in_language("\n".join(lines) + "\n", lang).splitlines()
    return [line for line in shown if not other_language(line)]


def rendered_blocks(site: Path, lang: str, page: str) -> list[list[str]]:
    """The code blocks of a built page, as text lines."""
    text = (site / page_path(lang, page) / "index.html").read_text(encoding="utf-8")
    return [
        html.unescape(re.sub(r"<[^>]+>", "", m["code"])).rstrip("\n").splitlines()
        for m in HIGHLIGHT.finditer(text)
    ]


def includes(page: str) -> list[tuple[Path, str]]:
    """(file, section) of every include on the en source page (the zh page has the same ones)."""
    text = (ROOT / "docs" / "en" / page).read_text(encoding="utf-8")
    return [
        (ROOT / file, section) for file, section in (t.split(":") for t in include_targets(text))
    ]


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("page", ["annotated.md", "pure.md"])
def test_built_page_shows_every_code_line_and_only_its_language_comments(built_site, lang, page):
    blocks = rendered_blocks(built_site, lang, page)
    for path, section in includes(page):
        expected = expected_lines(section_lines(path, section), lang)
        if expected not in blocks:
            closest = next((b for b in blocks if b and b[0] == expected[0]), [])
            missing = [line for line in expected if line not in closest]
            extra = [line for line in closest if line not in expected]
            pytest.fail(f"{lang}/{page}, section {section!r}: missing {missing}, extra {extra}")


@pytest.mark.parametrize("lang", LANGUAGES)
def test_annotated_page_keeps_no_comment_of_the_other_language(built_site, lang):
    blocks = rendered_blocks(built_site, lang, "annotated.md")
    comments = [line.strip() for block in blocks for line in block if is_comment_line(line)]
    chinese = [c for c in comments if CHINESE.search(c)]
    english = [c for c in comments if not CHINESE.search(c)]
    if lang == "zh":
        assert english == [], english
        assert len(chinese) >= 10, f"only {len(chinese)} Chinese comments on the zh page"
        assert "中文:" not in str(blocks), "a docstring shows both languages"
    else:
        assert chinese == [], chinese
        assert len(english) >= 10, f"only {len(english)} English comments on the en page"
        chinese_text = [line for block in blocks for line in block if CHINESE.search(line)]
        assert chinese_text == [], f"Chinese in the en page's code: {chinese_text}"


def test_annotated_comments_are_chinese_then_english():
    """Each explanation in mha/annotated.py is Chinese comment lines, then English ones (a run of
    comment lines may hold several). A Chinese line without Chinese characters would show on the
    en page, an English line with some on the zh page."""
    source = (ROOT / "mha" / "annotated.py").read_text(encoding="utf-8").splitlines()
    blocks: list[list[tuple[int, str]]] = []
    previous = False
    for number, line in enumerate(source, start=1):
        comment = is_comment_line(line) and not MARKER.search(line)
        if comment:
            if not previous:
                blocks.append([])
            blocks[-1].append((number, "zh" if CHINESE.search(line) else "en"))
        previous = comment
    assert len(blocks) >= 10, f"only {len(blocks)} comment blocks found"
    for block in blocks:
        languages = "".join("z" if lang == "zh" else "e" for _, lang in block)
        assert re.fullmatch(r"(?:z+e+)+", languages), f"mha/annotated.py:{block[0][0]}: {languages}"


# ---- The filter ----------------------------------------------------------------------------------

CODE = '''\
def f(x):
    """A docstring.

    # A line of the docstring that looks like a comment.
    """
    # 投影：一次算出所有头的查询
    # (以及键)
    # Project: every head's query at once
    # (and key)
    q = W(x)  # [batch_size, seq_len, hidden_size]
    # [batch_size, seq_len, heads_num, head_size]
    y = q  # 尾注释 stays, trailing English stays too
    #
    return y  # noqa: E501
'''


def test_zh_keeps_the_chinese_comments_and_every_code_line():
    kept = hook.keep_language(CODE, "zh").splitlines()
    dropped = [line for line in CODE.splitlines() if line not in kept]
    assert dropped == ["    # Project: every head's query at once", "    # (and key)"], dropped


def test_en_keeps_the_english_comments_and_every_code_line():
    kept = hook.keep_language(CODE, "en").splitlines()
    dropped = [line for line in CODE.splitlines() if line not in kept]
    assert dropped == ["    # 投影：一次算出所有头的查询", "    # (以及键)"], dropped


def test_docstrings_are_untouched_even_where_a_line_starts_with_a_hash():
    assert "    # A line of the docstring that looks like a comment." in hook.keep_language(
        CODE, "zh"
    )
    single = "x = '''\n# not a comment\n'''\n"
    assert hook.keep_language(single, "zh") == single


def test_comments_in_no_language_stay_in_both():
    for comment in ("#", "# [batch_size, seq_len]", "# noqa: E501", "# type: ignore"):
        assert hook.comment_language(comment) is None, comment
    assert hook.comment_language("# 投影") == "zh"
    assert hook.comment_language("# Project") == "en"


def test_an_unknown_language_keeps_everything():
    assert hook.keep_language(CODE, "fr") == CODE
    assert hook.keep_language(CODE, None) == CODE


BILINGUAL = '''\
def f(x):
    """Add one.

    中文:
        加一。
    """
    # 加一
    # Add one
    return x + 1
'''


@pytest.mark.parametrize(
    ("lang", "kept", "dropped"),
    [
        ("en", ["Add one.", "# Add one"], ["中文:", "加一"]),
        ("zh", ["加一。", "# 加一"], ["Add one"]),
    ],
)
def test_docstrings_show_in_the_page_language_too(lang, kept, dropped):
    shown = hook.in_language(BILINGUAL, lang)
    assert all(text in shown for text in kept), shown
    assert not any(text in shown for text in dropped), shown
    assert "    return x + 1\n" in shown, shown


# ---- Resolving the includes ----------------------------------------------------------------------

SOURCE = """\
import math

# --8<-- [start:body]
def g(x):
    # 加一
    # Add one
    return x + 1  # [batch_size]
# --8<-- [end:body]
"""


@pytest.fixture
def project(tmp_path) -> dict:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(SOURCE, encoding="utf-8")
    return {**SNIPPETS, "base_path": [str(tmp_path)]}


def test_an_include_fence_is_replaced_by_the_code_of_the_page_language(project):
    page = 'Text.\n\n```python\n--8<-- "pkg/m.py:body"\n```\n\nMore text.\n'
    zh = hook.resolve_includes(page, "zh", project)
    en = hook.resolve_includes(page, "en", project)
    body = "def g(x):\n    # {}\n    return x + 1  # [batch_size]\n"
    assert zh == f"Text.\n\n```python\n{body.format('加一')}```\n\nMore text.\n", zh
    assert en == f"Text.\n\n```python\n{body.format('Add one')}```\n\nMore text.\n", en


def test_an_indented_include_fence_keeps_its_indentation(project):
    page = '??? note "N"\n\n    ```python\n    --8<-- "pkg/m.py:body"\n    ```\n'
    out = hook.resolve_includes(page, "en", project)
    expected = "    def g(x):\n        # Add one\n        return x + 1  # [batch_size]\n"
    assert out == f'??? note "N"\n\n    ```python\n{expected}    ```\n', out


def test_other_fences_are_left_alone(project):
    page = (
        '```python\nx = 1  # one\n--8<-- "pkg/m.py:body"\n```\n\n'
        '```text\n--8<-- "pkg/m.py:body"\n```\n'
    )
    assert hook.resolve_includes(page, "zh", project) == page


@pytest.mark.parametrize("target", ["pkg/m.py:no-such-section", "pkg/missing.py:body"])
def test_a_missing_file_or_section_fails(project, target):
    page = f'```python\n--8<-- "{target}"\n```\n'
    with pytest.raises(PluginError, match="could not be"):
        hook.resolve_includes(page, "zh", project, "zh/x.md")


class Page:
    def __init__(self, src_uri: str):
        self.file = type("File", (), {"src_uri": src_uri})()


def test_the_page_language_is_its_language_folder_else_the_default():
    from mha_site.languages import page_language

    assert page_language(Page("en/annotated.md")) == "en"
    assert page_language(Page("zh/annotated.md")) == "zh"
    assert page_language(Page("annotated.md")) == "en"


def test_the_hook_reads_the_snippets_options_of_mkdocs_yml(project):
    config = {
        "markdown_extensions": ["pymdownx.snippets"],
        "mdx_configs": {"pymdownx.snippets": {**SNIPPETS, "base_path": ["."]}},
        "config_file_path": str(Path(project["base_path"][0]) / "mkdocs.yml"),
        "plugins": {},
    }
    page = '```python\n--8<-- "pkg/m.py:body"\n```\n'
    out = hook.on_page_markdown(page, page=Page("zh/x.md"), config=config)
    assert "# 加一" in out and "Add one" not in out, out
    with pytest.raises(PluginError, match=r"zh/x\.md"):
        hook.on_page_markdown(
            '```python\n--8<-- "pkg/m.py:gone"\n```\n', page=Page("zh/x.md"), config=config
        )
