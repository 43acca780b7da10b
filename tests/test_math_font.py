"""The math font the site serves is cut down to its math, and draws every character of it.

``mha_site/math_font.py`` replaces the font copied into the site with a subset of the set-up font
(``docs/assets/fonts/noto-sans-math.woff2``) holding the characters of the built pages' math.
These tests read the built pages on their own (an HTML parser, not the hook's code) and check the
served font against them: every character of every ``<math>`` element, each one-letter ``<mi>``
in the italic form a browser draws it with, and the radical of ``<msqrt>``. That the browser
loads and uses the font is checked in ``tests/test_browser.py``.
"""

from __future__ import annotations

import io
import unicodedata
from html.parser import HTMLParser

import pytest
from support import ROOT

fonttools = pytest.importorskip("fontTools.ttLib", reason="fonttools is in the docs extra")

FONT = "assets/fonts/noto-sans-math.woff2"
SOURCE = ROOT / "docs" / FONT


def load(data: bytes):
    return fonttools.TTFont(io.BytesIO(data))


class MathText(HTMLParser):
    """The characters a browser draws the ``<math>`` elements of a page with."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.depth = 0  # inside how many <math>
        self.mi: list[str] | None = None  # the text of the open <mi>, if it is drawn math-auto
        self.chars: set[str] = set()

    def handle_starttag(self, tag, attrs):
        if tag == "math":
            self.depth += 1
        if tag == "msqrt" and self.depth:
            self.chars.add("\u221a")
        if tag == "mi" and self.depth:
            self.mi = [] if "mathvariant" not in dict(attrs) else None

    def handle_endtag(self, tag):
        if tag == "math":
            self.depth -= 1
        if tag == "mi" and self.mi is not None:
            text = "".join(self.mi)
            if len(text) == 1 and (form := italic(text)):
                self.chars.add(form)
            self.mi = None

    def handle_data(self, data):
        if self.depth:
            self.chars.update(data)
            if self.mi is not None:
                self.mi.append(data)


def italic(char: str) -> str | None:
    """The MATHEMATICAL ITALIC character of a Latin or Greek letter (italic h is PLANCK
    CONSTANT), as Unicode names them; None for other characters."""
    name = unicodedata.name(char, "")
    for prefix in ("LATIN ", "GREEK "):
        if name.startswith(prefix) and " LETTER " in name:
            case, _, letter = name.removeprefix(prefix).partition(" LETTER ")
            if char == "h":
                return "\u210e"
            try:
                return unicodedata.lookup(f"MATHEMATICAL ITALIC {case} {letter}")
            except KeyError:
                return None
    return None


@pytest.fixture(scope="module")
def math_chars(built_site) -> set[str]:
    parser = MathText()
    for page in sorted(built_site.rglob("*.html")):
        parser.feed(page.read_text(encoding="utf-8"))
    assert parser.depth == 0, "unbalanced <math> elements"
    return parser.chars


@pytest.fixture(scope="module")
def fonts(built_site):
    assert SOURCE.is_file(), f"{SOURCE} missing: `make setup` installs it from the npm registry"
    return load(SOURCE.read_bytes()), load((built_site / FONT).read_bytes())


def test_the_site_has_math_to_check(math_chars):
    # Letters, digits, operators and brackets of the home page's and math page's formulas.
    for char in "QKVx0=(\u2211\u221a\U0001d465":
        assert char in math_chars, f"{char!r} not found in the built pages' math"


def test_served_font_draws_every_character_of_the_sites_math(fonts, math_chars):
    full, served = fonts
    full_cmap, served_cmap = full.getBestCmap(), served.getBestCmap()
    missing = sorted(c for c in math_chars if ord(c) in full_cmap and ord(c) not in served_cmap)
    assert not missing, f"characters of the site's math missing from the served font: {missing}"
    # The math font itself draws them all (none falls back to another font).
    other = sorted(c for c in math_chars if ord(c) not in full_cmap and not c.isspace())
    assert not other, f"characters of the site's math the math font does not have: {other}"


def test_served_font_is_a_small_woff2_with_its_math_table_and_names(built_site, fonts):
    full, served = fonts
    data = (built_site / FONT).read_bytes()
    assert data[:4] == b"wOF2", "not a WOFF2 font"
    assert len(data) < SOURCE.stat().st_size / 5, (len(data), SOURCE.stat().st_size)
    assert "MATH" in served, "the MATH table (stretchy brackets, radicals, scripts) is gone"
    for name_id in (0, 1, 13, 14):  # copyright, family, licence, licence URL
        before, after = full["name"].getDebugName(name_id), served["name"].getDebugName(name_id)
        assert after == before, f"name {name_id}: {after!r}, the source font says {before!r}"


def test_served_font_keeps_the_stretched_forms_of_its_characters(fonts):
    """A bracket, a radical or a sum grows by switching to a larger variant or by assembling
    pieces (the MATH table's constructions): the subset keeps them all."""
    full, served = fonts

    def constructions(font) -> dict[str, tuple[int, int]]:
        variants = font["MATH"].table.MathVariants
        found = {}
        for coverage, items in (
            (variants.VertGlyphCoverage, variants.VertGlyphConstruction),
            (variants.HorizGlyphCoverage, variants.HorizGlyphConstruction),
        ):
            for glyph, item in zip(coverage.glyphs if coverage else [], items or [], strict=True):
                parts = item.GlyphAssembly.PartRecords if item.GlyphAssembly else []
                found[glyph] = (item.VariantCount, len(parts))
        return found

    full_cmap, served_cmap = full.getBestCmap(), served.getBestCmap()
    full_forms, served_forms = constructions(full), constructions(served)
    checked = 0
    for code, glyph in served_cmap.items():
        expected = full_forms.get(full_cmap[code])
        if expected:
            checked += 1
            assert served_forms.get(glyph) == expected, (chr(code), served_forms.get(glyph))
    assert checked >= 4, f"only {checked} stretchy characters in the served font"  # ( ) [ ] √ ∑


def test_source_font_is_left_whole():
    full = load(SOURCE.read_bytes())
    assert len(full.getBestCmap()) > 2000, "the set-up font must stay whole: it is the source"
