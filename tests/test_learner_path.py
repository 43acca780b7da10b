"""The learner's path (issue 31): the walkthrough's main thread stays short enough to read straight
through, and the exercises reach past grouped-query attention into the chapters after it.

The main thread is what a reader reads without opening anything: the page less its code blocks
(fenced and hidden), its collapsed deep dives and solutions (``???`` blocks), HTML comments, math,
inline code and markup, as ``mha_site.markdown.main_thread`` cuts it; ``words`` counts English
words, and each Chinese character as one. Chinese takes about 1.6 characters per English word on
this site's pages (``python -m mha_site.words``), so its budget is the English one times 1.6.
"""

from __future__ import annotations

import re

import pytest

from mha_site.languages import DOCS, LANGUAGES
from mha_site.markdown import main_thread, words

BUDGET = {"en": 2200, "zh": int(2200 * 1.6)}


def main_thread_words(text: str) -> int:
    """How many words of ``text`` a reader reads straight through."""
    return words(main_thread(text))


def page(language: str, name: str) -> str:
    return (DOCS / language / f"{name}.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("language", sorted(BUDGET))
def test_the_walkthrough_main_thread_fits_its_budget(language):
    length = main_thread_words(page(language, "walkthrough"))
    assert 1000 < length <= BUDGET[language], length


def test_code_deep_dives_and_math_are_not_main_thread():
    prose = "Two words.\n"
    extra = (
        "```python\nx = [1, 2, 3]  # many words here\n```\n"
        '??? note "Deep dive: more"\n    Hidden words, many of them.\n\n'
        "<!-- a comment of words -->\n$$\nq k^\\top\n$$\n"
    )
    assert main_thread_words(prose + extra) == main_thread_words(prose) == 2
    assert main_thread_words(prose + "Three more words.\n") == 5


# The chapters after grouped-query attention that the exercises must reach: one exercise each
# links to the page (the device chapters: tiled attention or heads across devices).
CHAPTERS = {
    "rotary embeddings": ("rope.md",),
    "sliding window": ("window.md",),
    "multi-head latent attention": ("mla.md",),
    "beyond one device": ("tiled.md", "heads-split.md", "ring.md"),
}
EXERCISE = re.compile(r"^## \d+\. .*?$(?P<body>.*?)(?=^## )", re.M | re.S)


@pytest.mark.parametrize("language", sorted(BUDGET))
@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_an_exercise_with_a_checked_solution_covers_the_chapter(language, chapter):
    exercises = [m["body"] for m in EXERCISE.finditer(page(language, "exercises"))]
    assert len(exercises) >= 14, len(exercises)
    covering = [
        body
        for body in exercises
        if any(f"]({target}" in body for target in CHAPTERS[chapter])
        and "```python" in body
        and "assert " in body
    ]
    assert covering, f"no exercise with an asserted solution links to {CHAPTERS[chapter]}"


# MHA(hidden_size, heads_num) in the pages' code, where the head size hidden_size // heads_num
# equals heads_num (4 heads of 4) are allowed only here, each with why.
SAME_SIZES_ALLOWED = {
    ("math.md", 10, 3): "the design post's MHA(10, 3), not divisible: its error is the point",
    ("pitfalls.md", 10, 3): "the design post's MHA(10, 3), not divisible: its error is the point",
    ("walkthrough.md", 4, 2): "the memory pictures' run, small enough to number every element",
    ("heads-split.md", 64, 8): "the output of python -m mha.parallel, whose sizes are its own",
}
SIZES = re.compile(r"\bMHA\((?:hidden_size=)?(\d+), (?:heads_num=)?(\d+)(?P<rest>[,)][^\n]*)")


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_examples_sizes_are_all_different(language):
    """G6 of the learner's review: heads of the same number as their size (MHA(16, 4)) cannot tell
    heads from head size in a shape such as [1, 4, 2, 4]."""
    found = []
    for page in sorted((DOCS / language).glob("*.md")):
        for match in SIZES.finditer(page.read_text(encoding="utf-8")):
            hidden, heads = int(match[1]), int(match[2])
            if "head_size" in match["rest"] or hidden // heads != heads:
                continue
            if (page.name, hidden, heads) not in SAME_SIZES_ALLOWED:
                found.append(f"{page.name}: {match[0][:40]}")
    assert not found, found


# The newest chapters, which the learner's review found without a self-check (and the sliding
# window's, the page they build on): each ends with one, as the core's pages do.
NEWEST = (
    "window.md", "chunked.md", "softcap.md", "sinks.md", "gate.md", "nope.md", "longrope.md",
    "checked.md", "cache-size.md", "tiled.md", "heads-split.md", "ring.md",
    "rope.md", "mla.md", "today.md", "model.md", "pytorch.md",
)  # fmt: skip
QUIZ = re.compile(r"^## .*\{ #quiz \}$(?P<body>.*?)(?=^## )", re.M | re.S)


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("chapter", NEWEST)
def test_a_newest_chapter_ends_with_a_self_check_whose_answers_are_checked(language, chapter):
    found = QUIZ.search((DOCS / language / chapter).read_text(encoding="utf-8"))
    assert found, f"{language}/{chapter} has no '{{ #quiz }}' section"
    body = found["body"]
    questions = re.findall(r"^\*\*\d+\.\*\* ", body, re.M)
    answers = re.findall(r'^\?\?\? success "', body, re.M)
    assert len(questions) == len(answers) >= 3, (len(questions), len(answers))
    assert body.count("```python") >= 2 and "    assert " in body, "answers checked by code"
