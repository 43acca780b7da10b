"""The strict build is a test: ``mkdocs build --strict`` passes, and the site it makes is complete.

mkdocs.yml sets every ``validation`` option to ``warn`` (omitted files, absolute links,
unrecognised links, anchors), so a broken link or anchor, a missing include, a formula that does
not convert or an orphan page fails here. The build runs once per session (``tests/conftest.py``).
"""

from __future__ import annotations

import re

import pytest
from support import LANGUAGES, nav_pages, page_path

from mha_site.markdown import CHINESE_TEXT

PAGES = nav_pages()
LEFTOVER_LATEX = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$\$|\\[A-Za-z]+\{")
NOT_PROSE = re.compile(r"<(pre|code|script|style|textarea|math)\b.*?</\1>", re.DOTALL)
ASSET = re.compile(r"<(?:script|img|iframe|source)\b[^>]*\bsrc=\"([^\"]+)\"|<link\b[^>]*>")
HREF = re.compile(r'\bhref="([^"]+)"')


def html_of(site, lang, page) -> str:
    return (site / page_path(lang, page) / "index.html").read_text(encoding="utf-8")


def all_html(site):
    return sorted(site.rglob("*.html"))


def test_strict_build_passes(site_build):
    assert site_build.returncode == 0, site_build.output
    warnings = [
        line for line in site_build.output.splitlines() if line.startswith(("WARNING", "ERROR"))
    ]
    assert not warnings, "\n".join(warnings)


def test_site_serves_its_own_math_font_and_its_license(built_site):
    fonts = built_site / "assets" / "fonts"
    font = fonts / "noto-sans-math.woff2"
    assert font.is_file(), f"{font} missing: `make setup` installs it from the npm registry"
    assert font.read_bytes()[:4] == b"wOF2", "not a WOFF2 font"
    assert (fonts / "LICENSE-noto-sans-math.txt").is_file(), "the font's license must ship with it"
    css = (built_site / "assets" / "mha.css").read_text(encoding="utf-8")
    assert 'url("fonts/noto-sans-math.woff2")' in css, "mha.css does not load the font"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_nav_page_is_built_in_each_language(built_site, lang):
    missing = [
        page for page in PAGES if not (built_site / page_path(lang, page) / "index.html").exists()
    ]
    assert not missing, f"{lang}: pages not built: {missing}"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_pages_declare_their_language(built_site, lang):
    for page in PAGES:
        assert f'<html lang="{lang}"' in html_of(built_site, lang, page), f"{lang}/{page}"


def test_zh_pages_have_chinese_interface_labels(built_site):
    home = html_of(built_site, "zh", "index.md")
    assert 'placeholder="搜索"' in home, "the zh search box is not labelled in Chinese"
    assert "切换到深色模式" in home, "the zh palette toggle is not labelled in Chinese"


def test_math_is_converted_to_mathml_everywhere(built_site):
    for lang in LANGUAGES:
        assert "<math" in html_of(built_site, lang, "index.md"), f"no MathML on {lang} home"
    for path in all_html(built_site):
        html = path.read_text(encoding="utf-8")
        assert 'class="arithmatex"' not in html, f"{path}: arithmatex output left unconverted"
        prose = NOT_PROSE.sub("", html)
        left = LEFTOVER_LATEX.search(prose)
        where = prose[left.start() - 60 : left.end() + 60] if left else ""
        assert left is None, f"{path}: LaTeX left in the page: {where!r}"


def test_pages_reference_no_other_host(built_site):
    """Scripts, styles, fonts, images: all served by the site itself (links to read are fine)."""
    for path in all_html(built_site):
        html = path.read_text(encoding="utf-8")
        for match in ASSET.finditer(html):
            url = match[1] or (HREF.search(match[0]) or [None, ""])[1]
            if match[0].startswith("<link") and re.search(r'rel="(canonical|alternate)"', match[0]):
                continue
            assert not re.match(r"(https?:)?//", url), f"{path}: loads {url} from another host"


def test_includes_render_the_real_code(built_site):
    for lang in LANGUAGES:
        annotated = re.sub(r"<[^>]+>", "", html_of(built_site, lang, "annotated.md"))
        assert "def forward(self, x: Tensor) -&gt; Tensor:" in annotated, lang
        assert "--8&lt;--" not in annotated and "--8<--" not in annotated, lang
        pure = re.sub(r"<[^>]+>", "", html_of(built_site, lang, "pure.md"))
        assert "class MHA(nn.Module):" in pure, lang


def test_api_reference_has_section_headings_in_each_language(built_site):
    en = re.sub(r"<[^>]+>", " ", html_of(built_site, "en", "api.md"))
    zh = re.sub(r"<[^>]+>", " ", html_of(built_site, "zh", "api.md"))
    for english, chinese in [("Parameters:", "参数"), ("Raises:", "异常"), ("Returns:", "返回")]:
        assert english in en, f"en API page lacks {english!r}"
        assert chinese in zh and english not in zh, f"zh API page says {english!r}, not {chinese!r}"
    assert "mha.annotated.MHA" in en and "mha.annotated.MHA" in zh


def test_no_line_break_inside_chinese_text(built_site):
    """A line break in Chinese prose would show as a space (mha_site/cjk_breaks.py removes them)."""
    inside = re.compile(f"[{CHINESE_TEXT}][ \\t]*\\n[ \\t]*[{CHINESE_TEXT}]")
    for path in sorted((built_site / "zh").rglob("*.html")):
        prose = NOT_PROSE.sub("<code/>", path.read_text(encoding="utf-8"))
        found = inside.search(prose)
        assert found is None, f"{path}: line break inside Chinese text: {found and found[0]!r}"
