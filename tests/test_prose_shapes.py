"""Every concrete shape the prose of an explanation page states names its tensor, and a snippet on
the same page asserts that this very tensor has that shape (the rules:
``mha_site/checkers/prose_shapes.py``). Planted faults show the checker failing.
"""

from __future__ import annotations

import pytest

from mha_site.checkers.prose_shapes import (
    CHAPTERS,
    PAGES,
    TABLE_ROW,
    TABLE_ROWS,
    asserted,
    check,
    claims,
    page,
    paragraphs,
    problems,
    split,
    transitions,
)
from mha_site.languages import LANGUAGES


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("name", PAGES + CHAPTERS)
def test_every_shape_in_prose_names_its_tensor_and_is_asserted(language, name):
    assert problems(page(language, name), exempt_table=name == "shapes") == []


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("name", PAGES)
def test_the_checker_finds_claims_and_asserts_on_every_page(language, name):
    """Guard against a checker that passes because it finds nothing."""
    prose, blocks = split(page(language, name), exempt_table=name == "shapes")
    minimum = {"math": 3, "walkthrough": 25, "shapes": 1}[name]
    assert len(claims(prose)) >= minimum
    assert len(asserted(blocks)) >= minimum


@pytest.mark.parametrize("language", LANGUAGES)
def test_only_the_shape_table_is_exempt(language):
    text = page(language, "shapes")
    rows = [line for line in text.splitlines() if TABLE_ROW.match(line)]
    assert len(rows) == TABLE_ROWS
    assert problems(text) != [], "without the exemption, the table rows are claims too"


@pytest.mark.parametrize("name", PAGES + CHAPTERS)
def test_both_languages_state_the_same_shapes_of_the_same_tensors(name):
    en, zh = (claims(split(page(language, name))[0]) for language in LANGUAGES)
    assert [c[:2] for c in zh] == [c[:2] for c in en]


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("name", PAGES)
def test_every_transition_written_backwards_is_caught(language, name):
    text = page(language, name)
    prose, _ = split(text)
    units = paragraphs(prose)
    code = "\n\n".join(f"```python\n{block}```" for block in split(text)[1])
    assert problems("\n\n".join(units) + "\n\n" + code, exempt_table=name == "shapes") == []
    swapped = 0
    for first, second in transitions(prose):
        if first.shape == second.shape:
            continue  # nothing to swap: the step keeps the shape
        unit = units[first.unit]
        a, b = unit[first.start : first.end], unit[second.start : second.end]
        backwards = (
            unit[: first.start] + b + unit[first.end : second.start] + a + unit[second.end :]
        )
        edited = "\n\n".join(backwards if i == first.unit else u for i, u in enumerate(units))
        assert problems(edited + "\n\n" + code, exempt_table=name == "shapes") != [], backwards
        swapped += 1
    assert swapped >= {"math": 0, "walkthrough": 10, "shapes": 0}[name]


def test_a_transition_written_backwards_fails():
    right = "Here `q_split` `[2, 3, 4, 5]` → `q` `[2, 4, 3, 5]`.\n"
    code = (
        "\n```python\nq_split = q\nq = q.transpose(1, 2)\n"
        "assert q_split.shape == (2, 3, 4, 5), q_split.shape\n"
        "assert q.shape == (2, 4, 3, 5), q.shape\n```\n"
    )
    assert problems(right + code) == []
    wrong = "Here `q_split` `[2, 4, 3, 5]` → `q` `[2, 3, 4, 5]`.\n"
    assert problems(wrong + code) == [
        "`q_split` [2, 4, 3, 5]: no snippet asserts q_split.shape == [2, 4, 3, 5]",
        "`q` [2, 3, 4, 5]: no snippet asserts q.shape == [2, 3, 4, 5]",
    ]


def test_a_transition_under_one_name_fails():
    # Both shapes were true of `q` at some point, so only distinct names make the order checkable.
    page_text = (
        "Here `q` `[2, 3, 4, 5]` → `q` `[2, 4, 3, 5]`.\n\n```python\n"
        "assert q.shape == (2, 3, 4, 5), q.shape\nq = q.transpose(1, 2)\n"
        "assert q.shape == (2, 4, 3, 5), q.shape\n```\n"
    )
    assert problems(page_text) == ["`q` [2, 3, 4, 5] → [2, 4, 3, 5]: one name"]


def test_a_shape_added_to_prose_is_caught():
    text = page("en", "walkthrough")
    assert problems(text + "\nSo the result is `[2, 3, 4, 7]`.\n") == [
        "[2, 3, 4, 7]: no tensor named before it in its paragraph"
    ]
    assert problems(text + "\nSo `out_c` is `[2, 3, 4, 7]`.\n") == [
        "`out_c` [2, 3, 4, 7]: no snippet asserts out_c.shape == [2, 3, 4, 7]"
    ]


def test_a_shape_asserted_for_another_tensor_does_not_count():
    page_text = (
        "`k_t` has the shape `[2, 4, 3, 5]`.\n\n```python\nassert q.shape == (2, 4, 3, 5)\n```\n"
    )
    assert problems(page_text) == [
        "`k_t` [2, 4, 3, 5]: no snippet asserts k_t.shape == [2, 4, 3, 5]"
    ]


def test_a_shape_only_in_a_text_block_does_not_count():
    page_text = "`t` has the shape `[4, 2]`.\n\n```text\n(4, 2)\n```\n"
    assert problems(page_text) == ["`t` [4, 2]: no snippet asserts t.shape == [4, 2]"]
    page_text += "\n```python\nassert t.shape == (4, 2), t.shape\n```\n"
    assert problems(page_text) == []


def test_doctest_output_and_torch_size_count():
    page_text = (
        "`t` is `(4, 2)` and `u[0]` is `[3, 5]`.\n\n"
        "```python\n>>> t.shape\ntorch.Size([4, 2])\n```\n\n"
        "```python\nassert u[0].shape == torch.Size([3, 5]), u.shape\n```\n"
    )
    assert problems(page_text) == []


def test_lists_in_other_code_spans_and_in_math_are_not_shapes():
    page_text = "`x[:, 1]`, `q.transpose(1, 2)` and `q[0, 0]` are code; $[0, 1]$ is math.\n"
    assert claims(split(page_text)[0]) == []


def test_a_name_binds_only_within_its_paragraph():
    page_text = "`q` is ready.\n\nThe result is `[2, 3]`.\n"
    assert [c.name for c in claims(split(page_text)[0])] == [None]


def test_the_whole_check_passes_and_catches_languages_that_differ(monkeypatch):
    assert check() == []
    import mha_site.checkers.prose_shapes as checker

    def drifted(language, name):
        text = page(language, name)
        if (language, name) == ("zh", "walkthrough"):
            return text + "\n`y` 是 `[2, 3, 20]`。\n"
        return text

    monkeypatch.setattr(checker, "page", drifted)
    found = check()
    n = len(claims(split(page("en", "walkthrough"))[0]))
    assert found == [f"docs/zh/walkthrough.md: {n + 1} shape claims, {n} in en"], found
