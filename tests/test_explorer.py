"""The walkthrough's shape explorer agrees with a real forward pass for any sizes, both languages.

``docs/assets/explorer.js`` shows every step of ``mha.annotated.MHA.forward`` from the steps the
build recorded (``mha_site.explorer``: shapes as dimension names, strides as products of them,
contiguity and kinds as recorded, also where a size is 1). Those steps are checked here against
``mha.trace.record`` (the real tensors' ``stride()`` and ``is_contiguous()``) at many sizes, every
size that can be 1 among them, for the annotated and the pure ``MHA``; and a real browser types
sizes into the built page (a seeded random list of cases, with batch 1, sequence 1, one head, one
channel per head and sizes that do not divide) and reads every row of the table: its expression,
shape, strides, contiguity and kind must be those ``mha.trace.record`` records for the same sizes,
in the same order. Where ``hidden_size`` is not divisible by ``heads_num``, the page shows no
shape and says why: on the English page the words of ``str(error)`` of ``MHA(hidden_size,
heads_num)``, on the Chinese page a Chinese sentence with the same numbers. A Markdown test keeps
the explorer's block the same in both languages (ids, inputs, placeholders of its messages).
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re

import pytest
import torch
from support import LANGUAGES, ROOT, Tab, page_path, page_tabs, screenshot

import mha.pure
from mha.annotated import MHA
from mha.trace import record
from mha_site import explorer

NAMES = ("batch_size", "seq_len", "hidden_size", "heads_num")
INPUT_IDS = dict(
    zip(
        NAMES,
        ("explorer-batch-size", "explorer-seq-len", "explorer-hidden-size", "explorer-heads-num"),
        strict=True,
    )
)
KIND_WORDS = {
    "en": {"view": "view", "copy": "copy", "new": "new", True: "yes", False: "no"},
    "zh": {"view": "视图", "copy": "复制", "new": "新张量", True: "是", False: "否"},
}
Row = tuple[str, str, str, bool, str]  # expression, shape, strides (as the site writes them),
# contiguous, kind


def cases() -> list[tuple[int, int, int, int]]:
    """(batch_size, seq_len, hidden_size, heads_num): edge cases first, then seeded random ones,
    a third of them with a hidden_size that heads_num does not divide."""
    fixed = [
        (1, 1, 1, 1),
        (1, 3, 20, 4),
        (2, 1, 12, 3),
        (3, 4, 6, 1),
        (2, 3, 7, 7),
        (2, 5, 10, 3),
        (1, 1, 9, 4),
    ]
    rng = random.Random(9)
    drawn = []
    while len(drawn) < 10:
        b, s, h = rng.randint(1, 5), rng.randint(1, 9), rng.randint(1, 8)
        if len(drawn) % 3 == 2:
            d = rng.randint(h + 1, 64)
            if d % h == 0:
                continue
        else:
            d = h * rng.randint(1, 8)
        drawn.append((b, s, d, h))
    return fixed + drawn


CASES = cases()


def written(numbers) -> str:
    return "[" + ", ".join(map(str, numbers)) + "]"


def expected_rows(b: int, s: int, d: int, h: int, cls: type = MHA) -> list[Row]:
    """The row of each step mha.trace.record gives for ``cls(d, h)`` on ``[b, s, d]``."""
    steps = record(cls(d, h), torch.randn(b, s, d))
    return [
        (
            f"{step.target} = {step.expression}" if step.target else step.expression,
            written(step.shape),
            written(step.stride),
            step.contiguous,
            step.kind,
        )
        for step in steps
    ]


def built_rows(b: int, s: int, d: int, h: int) -> list[Row]:
    """The row of each step as the build wrote them for explorer.js, read at these sizes the way
    it reads them: names to sizes, a stride to the product of its names' sizes, and what ``ones``
    holds for the sizes that are 1 in place of the step's own."""
    data = explorer.steps()
    sizes = {"batch_size": b, "seq_len": s, "hidden_size": d, "heads_num": h, "head_size": d // h}
    ones = ",".join(name for name in data["sizes"] if sizes[name] == 1)
    rows = []
    for step in data["steps"]:
        step = step | step.get("ones", {}).get(ones, {})
        target = f"{step['target']} = " if step["target"] else ""
        rows.append(
            (
                target + step["expression"],
                written(sizes[name] for name in step["shape"]),
                written(math.prod(sizes[name] for name in names) for names in step["stride"]),
                step["contiguous"],
                step["kind"],
            )
        )
    return rows


def python_error(d: int, h: int) -> str:
    with pytest.raises(ValueError) as error:
        MHA(d, h)
    return str(error.value)


# --- The Markdown block --------------------------------------------------------------------------

BLOCK = re.compile(r'^<div class="mha-explorer".*?^</div>\n(?=\n)', re.DOTALL | re.MULTILINE)


def block(lang: str) -> str:
    text = (ROOT / "docs" / lang / "walkthrough.md").read_text(encoding="utf-8")
    found = BLOCK.findall(text)
    assert len(found) == 1, f"{lang}/walkthrough.md: {len(found)} explorer blocks"
    assert re.search(r"^## .*\{ #explorer \}$", text, re.MULTILINE), f"{lang}: no #explorer"
    return found[0]


def test_explorer_block_is_the_same_in_both_languages_but_its_words():
    skeletons = {}
    for lang in LANGUAGES:
        html = block(lang)
        ids = re.findall(r'\bid="([^"]+)"', html)
        inputs = re.findall(r'<input id="([^"]+)" name="([^"]+)"', html)
        labels = re.findall(r'<label for="([^"]+)"><code>([^<]+)</code></label>', html)
        data = dict(re.findall(r'\bdata-([\w-]+)="([^"]*)"', html))
        placeholders = {k: sorted(set(re.findall(r"\{(\w+)\}", v))) for k, v in data.items()}
        assert inputs == [(i, n) for n, i in INPUT_IDS.items()], f"{lang}: inputs {inputs}"
        assert labels == [(i, n) for n, i in INPUT_IDS.items()], f"{lang}: labels {labels}"
        assert set(data) == {
            *("positive", "empty", "divisible", "summary"),
            *("view", "copy", "new", "yes", "no"),
        }, data
        assert data["view"] == KIND_WORDS[lang]["view"], data
        assert (data["yes"], data["no"]) == (KIND_WORDS[lang][True], KIND_WORDS[lang][False])
        skeletons[lang] = (ids, inputs, re.findall(r"<(/?\w+)", html), placeholders)
    assert skeletons["en"] == skeletons["zh"], skeletons


# --- The steps the build writes ------------------------------------------------------------------


@pytest.mark.parametrize("sizes", [c for c in CASES if c[2] % c[3] == 0], ids=str)
def test_the_built_steps_are_the_recorded_ones_at_any_sizes(sizes):
    assert built_rows(*sizes) == expected_rows(*sizes)


def test_every_size_that_can_be_1_changes_only_what_the_recorder_says():
    # Each of the four sizes at 1, alone and together: strides, contiguity and kinds follow the
    # recorder there too (.contiguous() returns the tensor itself at seq_len 1 or heads_num 1).
    for b, s, h, dh in itertools.product((1, 4), (1, 2), (1, 3), (1, 6)):
        assert built_rows(b, s, h * dh, h) == expected_rows(b, s, h * dh, h), (b, s, h, dh)


PURE_CASES = [(2, 3, 20, 4), (1, 1, 9, 3), (3, 1, 8, 1), (2, 5, 7, 7)]


@pytest.mark.parametrize("sizes", PURE_CASES, ids=str)
def test_the_pure_mha_makes_the_tensors_the_explorer_shows(sizes):
    # The pure MHA writes its expressions otherwise; its tensors' layouts are the same.
    def layouts(rows):
        return sorted(row[1:] for row in rows)

    assert layouts(built_rows(*sizes)) == layouts(expected_rows(*sizes, cls=mha.pure.MHA))


def test_a_transpose_changes_strides_only_and_contiguous_copies_unless_a_size_is_1():
    # What the walkthrough's paragraph above the explorer tells the reader to look for.
    def row(rows, expression):
        return next(r for r in rows if r[0] == expression)

    for b, s, d, h in [(2, 3, 20, 4), (2, 1, 20, 4), (2, 3, 20, 1)]:
        rows = built_rows(b, s, d, h)
        split = row(rows, "q = q.view(q.size(0), q.size(1), self.heads_num, self.head_size)")
        moved = row(rows, "q = q.transpose(1, 2)")
        copied = row(rows, "out.transpose(1, 2).contiguous()")
        stride = json.loads(split[2])
        stride[1], stride[2] = stride[2], stride[1]
        assert (moved[4], json.loads(moved[2])) == ("view", stride), (moved, split)
        assert copied[4] == ("copy" if s > 1 and h > 1 else "view"), (b, s, d, h, copied)
        assert moved[3] is (s == 1 or h == 1), (b, s, d, h, moved)


# --- In a browser --------------------------------------------------------------------------------


pages = page_tabs("walkthrough.md")  # the page in each language, a tab each


def set_sizes(page, sizes: tuple[int | str, ...]) -> None:
    for name, value in zip(NAMES, sizes, strict=True):
        page.fill(f"#{INPUT_IDS[name]}", str(value))


def shown_rows(page) -> list[tuple[str, ...]]:
    """Each row's cells as the page shows them, then its data-kind and data-contiguous."""
    return [
        tuple(row)
        for row in page.eval_on_selector_all(
            "#explorer-table tbody tr",
            "rows => rows.map(r => [...r.cells].map(c => c.textContent.trim())"
            ".concat([r.dataset.kind, r.dataset.contiguous]))",
        )
    ]


def shown(row: Row, lang: str) -> tuple[str, ...]:
    """``row`` as the page in ``lang`` shows it (see shown_rows)."""
    expression, shape, stride, contiguous, kind = row
    words = KIND_WORDS[lang]
    flags = (kind, str(contiguous).lower())
    return (expression, shape, stride, words[contiguous], words[kind], *flags)


@pytest.mark.browser
@pytest.mark.page("walkthrough.md")
def test_labels_name_the_sizes_and_the_defaults_are_the_walkthroughs(pages):
    page = pages("en")
    for name, input_id in INPUT_IDS.items():
        assert page.locator(f"label[for={input_id}]").inner_text().strip() == name
        assert page.locator(f"#{input_id}").is_visible()
    rows = shown_rows(page)
    assert rows == [shown(r, "en") for r in expected_rows(2, 3, 20, 4)], rows


@pytest.mark.browser
@pytest.mark.page("walkthrough.md")
@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("sizes", CASES, ids=lambda c: "b{}-s{}-d{}-h{}".format(*c))
def test_explorer_shows_the_recorded_shapes_or_the_error(pages, lang, sizes):
    page = pages(lang)
    set_sizes(page, sizes)
    b, s, d, h = sizes
    status = page.locator("#explorer-status").inner_text().strip()
    if d % h:
        message = python_error(d, h)
        assert page.locator("#explorer-table").is_hidden(), "shapes shown for an invalid size"
        assert shown_rows(page) == [], shown_rows(page)
        if lang == "en":
            assert status == message, (status, message)
        else:
            assert re.findall(r"\d+", status) == re.findall(r"\d+", message), (status, message)
            assert "整除" in status, status
        return
    want = [shown(row, lang) for row in expected_rows(b, s, d, h)]
    assert page.locator("#explorer-table").is_visible()
    assert shown_rows(page) == want
    assert want[-1][1] in status, status


@pytest.mark.browser
@pytest.mark.page("walkthrough.md")
@pytest.mark.parametrize("name", ["hidden_size", "heads_num"])
def test_a_size_that_is_not_a_positive_int_is_refused_in_the_packages_words(pages, name):
    page = pages("en")
    sizes = dict(zip(NAMES, (2, 3, 20, 4), strict=True)) | {name: 0}
    set_sizes(page, tuple(sizes.values()))
    with pytest.raises(ValueError) as error:
        MHA(sizes["hidden_size"], sizes["heads_num"])
    assert page.locator("#explorer-status").inner_text().strip() == str(error.value)
    assert page.locator(f"#{INPUT_IDS[name]}").get_attribute("aria-invalid") == "true"
    assert page.locator("#explorer-table").is_hidden()


@pytest.mark.browser
@pytest.mark.page("walkthrough.md")
def test_keyboard_steps_a_size_and_the_shapes_follow(pages):
    page = pages("en")
    set_sizes(page, (2, 3, 20, 4))
    page.focus(f"#{INPUT_IDS['heads_num']}")
    page.keyboard.press("ArrowUp")  # 5 heads of 4
    assert page.input_value(f"#{INPUT_IDS['heads_num']}") == "5"
    assert [r[1] for r in shown_rows(page)] == [r[1] for r in expected_rows(2, 3, 20, 5)]
    page.keyboard.press("ArrowUp")  # 6 heads: 20 % 6 = 2
    assert page.locator("#explorer-status").inner_text().strip() == python_error(20, 6)


@pytest.mark.browser
@pytest.mark.page("walkthrough.md")
@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_explorer_fits_a_phone(browser, site_url, lang, scheme):
    context = browser.new_context(viewport={"width": 390, "height": 800}, color_scheme=scheme)
    try:
        tab = Tab(context, site_url, search=False)
        page = tab.page
        page.goto(site_url + page_path(lang, "walkthrough.md") + "#explorer", wait_until="load")
        set_sizes(page, (3, 4, 24, 6))
        explorer = page.locator("#shape-explorer")
        box = explorer.bounding_box()
        assert box and box["width"] > 0 and box["height"] > 0, box
        # Only the table's own box may be wider than the screen: it scrolls sideways, and is a
        # keyboard stop while it does (mha.js).
        overflow = page.evaluate(
            """() => [...document.querySelectorAll('#shape-explorer, #shape-explorer *')]
                .filter(e => e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0)
                .map(e => e.tagName + '.' + e.className)"""
        )
        assert set(overflow) <= {"DIV.mha-explorer__scroll"}, f"{lang} {scheme}: {overflow}"
        scroll = page.locator("#shape-explorer .mha-explorer__scroll")
        assert scroll.get_attribute("tabindex") == ("0" if overflow else None), overflow
        assert box["x"] + box["width"] <= 390, box
        column = page.locator("#explorer-table tbody th").first.bounding_box()
        assert column and column["width"] >= 100, f"{lang}: expressions squeezed to {column}"
        screenshot(explorer, f"explorer-{lang}-{scheme}-390.png")
        tab.assert_clean()
    finally:
        context.close()
