"""Build step: the site serves the math font cut down to the characters its math uses.

The math font, Noto Sans Math (SIL Open Font License, which allows subsetting), is installed at
set-up into ``docs/assets/fonts/noto-sans-math.woff2`` (``make setup``; git-ignored). That file
has about 3000 characters and weighs 270 KB: more than the rest of what the heaviest page
loaded (249 KB, text gzip-compressed; ``tests/test_page_weight.py``). The site's formulas
(MathML made by ``mha_site/mathml.py``; ``docs/assets/mha.css`` draws every ``<math>`` with this
font and nothing else) use about 70 of them.

After the build, this hook reads the text of every ``<math>`` element of every built page and
writes, in place of the copied font (same name, so ``mha.css`` is unchanged), a WOFF2 subset
holding those characters and what a browser draws them with:

- the mathematical italic form of each Latin and Greek letter (U+1D434...): a browser draws an
  ``<mi>`` of one letter in italic by switching to that character (MathML Core ``math-auto``);
- U+221A, the glyph of ``<msqrt>``, and U+2212, the minus a browser may draw for ``-``;
- where the math has a Greek letter, the whole Greek alphabet: FreeType's autohinter (Chromium
  on Linux) fits a script's letters to heights it measures on reference letters of that script
  (β θ δ ζ λ ξ, ...); without them δ is drawn a few pixels' shade differently;
- every other character the font draws with a glyph kept (U+210E and U+1D629 share one);
- fontTools's closure of them: their stretched and larger variants and the pieces of their
  assemblies (the ``MATH`` table, kept whole with every OpenType feature, such as the smaller
  forms of scripts).

With these, every character the site's math uses is drawn pixel for pixel as with the whole
font (measured in Chromium at 17 and 40 px), and every formula keeps its size.

The source font stays as it was, so a new formula never misses a glyph: the next build adds it.
Every name of the font is kept, its copyright and licence included; the licence file is copied
beside it as before. A subset is kept in ``build/math-font/`` (git-ignored) under a hash of the
source font and the characters, so builds that change no formula do not cut it again.
``tests/test_math_font.py`` checks that the served font holds every character of the site's math.
"""

from __future__ import annotations

import hashlib
import html
import io
import logging
import os
import re
from pathlib import Path

from mkdocs.plugins import event_priority

log = logging.getLogger("mkdocs.plugins.mha_site.math_font")

FONT = Path("assets") / "fonts" / "noto-sans-math.woff2"  # relative to docs/ and to the site
CACHE = Path("build") / "math-font"  # relative to mkdocs.yml; git-ignored
VERSION = b"2"  # bump when the way the subset is made changes
MATH = re.compile(r"<math\b.*?</math>", re.S)
TAG = re.compile(r"<[^>]+>")
ALWAYS = "\u221a\u2212"  # the radical of <msqrt>, the minus sign
GREEK = "".join(chr(c) for c in [*range(0x391, 0x3A2), *range(0x3A3, 0x3AA), *range(0x3B1, 0x3CA)])

_memo: dict[str, bytes] = {}


def italic(char: str) -> str | None:
    """The mathematical italic form of ``char`` (MathML Core's italic mapping), or None."""
    code = ord(char)
    if char == "h":
        return "\u210e"
    if 0x41 <= code <= 0x5A:
        return chr(0x1D434 + code - 0x41)
    if 0x61 <= code <= 0x7A:
        return chr(0x1D44E + code - 0x61)
    if 0x391 <= code <= 0x3A9 and code != 0x3A2:
        return chr(0x1D6E2 + code - 0x391)
    if 0x3B1 <= code <= 0x3C9:
        return chr(0x1D6FC + code - 0x3B1)
    others = {
        "\u0131": 0x1D6A4, "\u0237": 0x1D6A5, "\u03f4": 0x1D6F3, "\u2207": 0x1D6FB,
        "\u2202": 0x1D715, "\u03f5": 0x1D716, "\u03d1": 0x1D717, "\u03f0": 0x1D718,
        "\u03d5": 0x1D719, "\u03f1": 0x1D71A, "\u03d6": 0x1D71B,
    }  # fmt: skip
    return chr(others[char]) if char in others else None


def math_characters(site: Path) -> set[str]:
    """Every character of the text of the ``<math>`` elements of the built pages, with the
    characters a browser draws them with (see the module's docstring)."""
    chars = set(ALWAYS)
    for page in site.rglob("*.html"):
        for math in MATH.findall(page.read_text(encoding="utf-8")):
            chars.update(html.unescape(TAG.sub("", math)))
    if set(GREEK) & chars:
        chars.update(GREEK)  # the autohinter's reference letters (see the module's docstring)
    chars.update(form for char in list(chars) if (form := italic(char)))
    return chars


def subset(source: bytes, chars: set[str]) -> bytes:
    """The WOFF2 subset of the font ``source`` for ``chars`` (those it has)."""
    from fontTools import subset as fontsubset
    from fontTools.ttLib import TTFont

    font = TTFont(io.BytesIO(source), recalcTimestamp=False)  # the same bytes every build
    cmap = font.getBestCmap()
    glyphs = {cmap[ord(char)] for char in chars if ord(char) in cmap}
    options = fontsubset.Options()
    options.flavor = "woff2"
    options.layout_features = ["*"]  # every OpenType feature: ssty (scripts), variants
    options.name_IDs = ["*"]  # every name: copyright, licence, its URL
    options.name_languages = ["*"]
    options.notdef_outline = True
    subsetter = fontsubset.Subsetter(options)
    # Every character drawn with a kept glyph: a glyph serves more than one (U+210E, U+1D629).
    subsetter.populate(unicodes=sorted(code for code, glyph in cmap.items() if glyph in glyphs))
    subsetter.subset(font)
    out = io.BytesIO()
    font.save(out)
    return out.getvalue()


@event_priority(-300)  # after the i18n plugin built every language (its on_post_build)
def on_post_build(config, **kwargs):
    source_path = Path(config.docs_dir) / FONT
    target = Path(config.site_dir) / FONT
    if not source_path.is_file() or not target.is_file():
        return  # no font installed (`make setup`): tests/test_docs_build.py reports it
    source = source_path.read_bytes()
    chars = math_characters(Path(config.site_dir))
    digest = hashlib.sha256(VERSION + source + "".join(sorted(chars)).encode()).hexdigest()
    cache = Path(config.config_file_path).resolve().parent / CACHE / f"{digest[:32]}.woff2"
    data = _memo.get(digest)
    if data is None:
        try:
            data = cache.read_bytes()
        except OSError:  # not cut yet (or removed by a concurrent build): cut it
            data = subset(source, chars)
            cache.parent.mkdir(parents=True, exist_ok=True)
            for old in cache.parent.glob("*.woff2"):
                old.unlink(missing_ok=True)
            partial = cache.with_suffix(f".{os.getpid()}.tmp")
            partial.write_bytes(data)
            os.replace(partial, cache)  # whole or absent, for a build running beside this one
    _memo[digest] = data
    target.write_bytes(data)
    log.debug("math font: %d characters, %d of %d bytes", len(chars), len(data), len(source))
