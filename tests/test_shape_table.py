"""The shape table of docs/{en,zh}/shapes.md is true, cell by cell, in both languages (the rules:
``mha_site/checkers/shape_table.py``). The mutation tests feed the checker altered copies of the
page and show that each kind of edited cell is caught.
"""

from __future__ import annotations

import pytest
import torch

from mha_site.checkers.shape_table import (
    EXPECTED_ROWS,
    PAGE_SIZES,
    TENSORS,
    check,
    check_memory,
    check_table,
    normal,
    operation,
    page,
    parse_table,
    problems,
    recorded,
    replace_cell,
    run_rows,
    snippet_table,
)
from mha_site.languages import LANGUAGES


@pytest.mark.parametrize("language", LANGUAGES)
def test_shape_table_has_one_row_per_tensor(language):
    rows = parse_table(page(language))
    assert [r.tensor for r in rows] == TENSORS


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_cell_of_the_shape_table_matches_a_real_run(language):
    assert check_table(page(language), language) == []


@pytest.mark.parametrize("language", LANGUAGES)
def test_strides_and_memory_cells_match_the_recorder(language):
    rows = parse_table(page(language))
    _, env = run_rows(rows, PAGE_SIZES)
    assert check_memory(rows, language, env) == []
    assert [(r.strides, r.memory) for r in rows] != [("", "")] * len(rows)


def test_the_recorder_has_one_step_per_row_after_x():
    _, steps = recorded()
    assert len(steps) == EXPECTED_ROWS - 1, [s.expression for s in steps]


def test_every_row_after_x_does_what_its_recorded_step_does():
    rows = parse_table(page("en"))
    _, steps = recorded()
    assert [operation(r.expression) for r in rows[1:]] == [operation(s.expression) for s in steps]
    assert operation("k.transpose(-2, -1)") != operation("q.transpose(1, 2)")
    assert operation("scores * 2") != operation("scores / 2")


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_snippet_runs_the_table_of_the_page(language):
    text = page(language)
    assert [r.shapes() for r in snippet_table(text)] == [r.shapes() for r in parse_table(text)]


def test_a_cell_edited_only_in_the_snippet_is_caught():
    text = page("en")
    edited = text.replace('"q.transpose(1, 2)",\n', '"q.transpose(1, 3)",\n', 1)
    assert edited != text
    snippet = [r.shapes() for r in snippet_table(edited)]
    assert snippet != [r.shapes() for r in parse_table(edited)]


def test_shape_tables_are_identical_across_languages():
    assert normal("en") == normal("zh")


def test_a_memory_cell_in_the_other_language_is_caught():
    rows = parse_table(page("en"))
    assert check_memory(rows, "zh") != []


@pytest.mark.parametrize("language", LANGUAGES)
def test_shape_table_runs_the_whole_forward_pass(language):
    rows = parse_table(page(language))
    _, env = run_rows(rows, PAGE_SIZES)
    assert rows[0].tensor == "x" and rows[-1].tensor == "y"
    assert torch.equal(env["y"], env["model"](env["x"]))


# (row number from 1, column, replacement): one edit per kind of cell, each plausible-looking.
MUTATIONS = [
    (8, "concrete", "[2, 3, 4, 5]"),  # the transpose forgotten
    (5, "symbolic", "[batch_size, heads_num, seq_len, head_size]"),  # the design's wrong comment
    (11, "symbolic", "[batch_size, heads_num, seq_len, head_size]"),  # k_t not transposed
    (12, "concrete", "[2, 4, 3, 5]"),
    (18, "expression", "out_c.view(out_t.size(0), out_t.size(2), hidden_size)"),  # size(2) after
    (8, "expression", "q"),  # step dropped, shapes kept
    (15, "tensor", "attn"),  # result stored under the wrong name
    (19, "concrete", "[2, 20]"),
    (8, "strides", "(60, 20, 5, 1)"),  # a transpose taken for a copy
    (11, "strides", "(60, 5, 20, 1)"),  # k_t's last two strides not swapped
    (12, "strides", "(36, 9, 1, 3)"),
    (1, "strides", "(60, 20)"),
    (5, "memory", (False, "view")),  # a view taken for non-contiguous
    (8, "memory", (True, "view")),  # the transpose taken for contiguous
    (16, "memory", (True, "view")),
    (17, "memory", (True, "view")),  # .contiguous() taken for never copying
    (18, "memory", (True, "copy")),  # the merging view taken for a copy
    (2, "memory", (True, "view")),  # a projection taken for a view
    (1, "memory", (False, "new")),
    (14, "expression", "torch.softmax(qk, dim=-2)"),  # same shape, other operation
]


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize(("number", "column", "replacement"), MUTATIONS)
def test_an_edited_cell_is_caught(language, number, column, replacement):
    text = page(language)
    edited = replace_cell(text, number, column, replacement, language)
    assert edited != text
    assert check_table(edited, language) != []


def test_mutate_without_change_keeps_the_table_valid():
    text = page("en")
    row = parse_table(text)[7]
    assert replace_cell(text, 8, "concrete", row.concrete) == text
    assert check_table(replace_cell(text, 8, "memory", (False, "view"))) == []


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_deleted_row_is_caught(language):
    text = page(language)
    line = next(x for x in text.splitlines(keepends=True) if x.startswith("| `out_c` |"))
    assert check_table(text.replace(line, ""), language) != []


def test_the_whole_check_passes_and_catches_a_snippet_out_of_step():
    assert check() == []
    text = page("zh")
    edited = text.replace('"q.transpose(1, 2)",\n', '"q.transpose(1, 3)",\n', 1)
    assert problems(edited, "zh") == [
        "the snippet's TABLE is not the table (its first four columns)"
    ]
