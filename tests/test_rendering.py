"""``mha_site/rendering.py``: a box that closes before its code, prose indented into a code block
and a table row short of cells each fail the strict build, named (the site's own strict build is
``test_docs_build``'s)."""

from __future__ import annotations

import logging

import markdown

from mha_site.rendering import NoIndentedCode, boxes_closed_early, short_rows

CLOSED_EARLY = """\
Some text.

??? note "Deep dive: what runs"
    The native path, recorded:

```python
x = 1
```

    The hint, indented as the box's text was.
"""

HELD = CLOSED_EARLY.replace("```python\nx = 1\n```", "    ```python\n    x = 1\n    ```")


def test_a_fence_at_the_boxs_column_after_its_colon_is_reported_and_one_inside_is_not():
    assert boxes_closed_early(CLOSED_EARLY) == [(3, '??? note "Deep dive: what runs"')]
    assert boxes_closed_early(HELD) == []


def test_a_box_that_ends_without_a_colon_and_a_fence_inside_a_fence_are_not_reported():
    prose = CLOSED_EARLY.replace("recorded:", "recorded.")
    assert boxes_closed_early(prose) == []
    shown = "````markdown\n" + CLOSED_EARLY + "````\n"
    assert boxes_closed_early(shown) == []


def render(text: str, caplog) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mkdocs.plugins.mha_site.rendering"):
        markdown.markdown(text, extensions=["admonition", "pymdownx.details", NoIndentedCode()])
    return [record.getMessage() for record in caplog.records]


def test_prose_indented_into_a_code_block_is_reported_with_its_first_line(caplog):
    warned = render(CLOSED_EARLY, caplog)
    assert len(warned) == 1, warned
    assert 'renders as code: "The hint, indented as the box\'s text was."' in warned[0]
    assert render(HELD, caplog) == []


TABLE = """\
| family | `bias` | `chunk` |
|---|---|---|
| Llama | `a | b` | no |
| Llama 4 | yes |
"""


def test_a_table_row_short_of_its_headers_cells_is_reported_and_code_bars_are_not_borders():
    assert short_rows(TABLE) == [(4, 2, 3)]
    assert short_rows(TABLE.replace("| yes |", "| yes | `attention_chunk_size` |")) == []
    assert short_rows("```\n" + TABLE + "```\n") == []
