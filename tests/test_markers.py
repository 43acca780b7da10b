"""One marker grammar for pictures and benchmark tables (``mha_site/markers.py``): a marker of an
unknown kind, or naming nothing, fails the strict build; Sybil's directives are left alone."""

from __future__ import annotations

import logging

from mha_site import markers
from mha_site.checkers import markers as checker


class Page:
    def __init__(self, src_uri: str):
        self.file = type("File", (), {"src_uri": src_uri})()


def test_every_marker_of_the_site_is_known_and_on_a_line_of_its_own():
    assert checker.check() == []


def test_an_unknown_kind_a_name_that_is_nothing_and_a_marker_inside_a_line_are_caught():
    text = "\n".join(
        [
            "<!-- pictures: split-heads -->",  # a typo in the kind
            "<!-- picture: no-such-picture -->",
            "<!-- bench-table: no-such-table -->",
            "Text and <!-- picture: split-heads --> on one line.",
            "<!-- picture: split-heads -->",  # fine
            "<!-- skip: next -->",  # Sybil's
            "<!-- invisible-code-block: python -->",  # Sybil's
        ]
    )
    found = markers.problems(text)
    assert len(found) == 4, found
    assert "unknown marker" in found[0] and "pictures" in found[0]
    assert "names no picture" in found[1]
    assert "names no bench-table" in found[2]
    assert "line of its own" in found[3]


def test_the_build_step_warns_so_the_strict_build_fails(caplog):
    with caplog.at_level(logging.WARNING, logger="mkdocs"):
        out = markers.on_page_markdown("<!-- pictures: split-heads -->\n", page=Page("en/x.md"))
    assert out == "<!-- pictures: split-heads -->\n"
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "en/x.md" in caplog.text and "unknown marker" in caplog.text


def test_a_picture_is_put_into_the_html_and_a_table_into_the_markdown():
    page = Page("zh/performance.md")
    text = "<!-- picture: split-heads -->\n\n<!-- bench-table: machine -->\n"
    markdown = markers.on_page_markdown(text, page=page)
    assert markdown.startswith("<!-- picture: split-heads -->\n")
    assert "<!-- bench-table" not in markdown and "|" in markdown
    html = markers.on_page_content(markdown, page=page)
    assert html.startswith('<figure class="mha-figure" data-picture="split-heads"><svg')
