"""Build step: render the pages' LaTeX as MathML at build time, so no page loads a math library.

Pages write math as LaTeX (``$...$`` inline, ``$$...$$`` on their own lines).
``pymdownx.arithmatex`` in generic mode wraps it as ``<span class="arithmatex">\\(...\\)</span>``
and ``<div class="arithmatex">\\[...\\]</div>``; this hook replaces each wrapper with the MathML
that ``latex2mathml`` makes of it. Browsers render MathML natively: nothing is fetched from a CDN.
A formula that does not convert is logged as a warning, which fails ``mkdocs build --strict``.
"""

from __future__ import annotations

import html
import logging
import re

from latex2mathml.converter import convert

log = logging.getLogger("mkdocs.plugins.mha_site.mathml")

# arithmatex generic output; the LaTeX inside is HTML-escaped.
ARITHMATEX = re.compile(
    r'<(?P<tag>span|div) class="arithmatex">\s*'
    r"(?:\\\((?P<inline>.*?)\\\)|\\\[(?P<block>.*?)\\\])"
    r"\s*</(?P=tag)>",
    re.DOTALL,
)
# Inline math as it is left in heading text (table of contents, page title).
INLINE = re.compile(r"\\\((.*?)\\\)")


# LaTeX writes an underscore in text as \_ (``\text{hidden\_size}``); latex2mathml keeps the
# backslash in the <mtext> it makes, and the page showed "hidden\_size".
ESCAPED_UNDERSCORE = re.compile(r"(<mtext>[^<]*?)\\_")


def latex_to_mathml(latex: str, display: str) -> str:
    r"""Convert one formula; ``display`` is ``"inline"`` or ``"block"``.

    Examples:
        >>> "hidden_size</mtext>" in latex_to_mathml(r"\sqrt{\text{hidden\_size}}", "inline")
        True
    """
    mathml = convert(latex.strip(), display=display)
    while ESCAPED_UNDERSCORE.search(mathml):
        mathml = ESCAPED_UNDERSCORE.sub(r"\1_", mathml)
    return mathml


def on_page_content(html_text: str, page, **kwargs) -> str:
    def replace(match: re.Match) -> str:
        block = match.group("block") is not None
        latex = html.unescape(match.group("block") if block else match.group("inline"))
        try:
            mathml = latex_to_mathml(latex, "block" if block else "inline")
        except Exception as error:  # latex2mathml raises many types; report them all
            log.warning(
                "%s: cannot convert LaTeX %r to MathML: %s", page.file.src_uri, latex, error
            )
            return match.group(0)
        if block:
            return f'<div class="mha-math">{mathml}</div>'
        return mathml

    html_text = ARITHMATEX.sub(replace, html_text)
    # Headings with math: the table of contents repeats their text, arithmatex's \(...\) included.
    for item in walk(page.toc.items if page.toc else []):
        item.title = INLINE.sub(lambda m: inline_mathml(m), item.title)
    # The page title (the tab's <title>, the nav's entry when mkdocs.yml gives none) is plain
    # text: keep the LaTeX source, without delimiters. Page.title is a weak_property that a plugin
    # may overwrite (MkDocs sets it so from the nav); it is read here after render(), so it is
    # the metadata's title, or the first heading's.
    title = page.title
    if title and INLINE.search(title):
        page.title = INLINE.sub(lambda m: html.unescape(m[1]).strip(), title)
    return html_text


def inline_mathml(match: re.Match) -> str:
    return latex_to_mathml(html.unescape(match[1]), "inline")


def walk(items):
    for item in items:
        yield item
        yield from walk(item.children)
