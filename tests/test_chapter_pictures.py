"""The pictures of the chapters cross, cache and gqa draw their page's own run, and the rope
picture's numbers are the rotation's.

Each test runs the page's own code blocks (hidden set-up included) up to the block the picture
draws, and compares every number and shape the picture writes with the tensors that code made:

- ``cross-weights``: head 0 of sequence 0 of the cross page's ``weights``, one cell per query and
  key, ``q_len`` × ``k_len`` (3 × 7, not a square), and the shapes of ``q``, ``k``, ``weights``;
- ``cache-grows``: the cache page's prefill and decoding steps on a fresh ``KVCache``: per call,
  the shapes of ``cache.keys`` and of the weights, its queries, one key appended per step and the
  causal mask's hidden cells;
- ``gqa-groups``: the gqa page's ``k`` and ``k_rep``: which key/value head each query head reads
  (``i // groups``) and the numbers printed in each key's box.

Every one of them fits a phone's column without being scaled down, and its Chinese labels follow
the glossary (no 第 before a number counted from 0, en-dash ranges, no avoided variant).
"""

from __future__ import annotations

import doctest
import math
import re
import xml.etree.ElementTree as ET

import pytest
import torch
from support import LANGUAGES, ROOT

from mha.full import KVCache
from mha_site import pictures
from mha_site.checkers import glossary
from mha_site.markdown import code_blocks
from mha_site.pictures_rope import POSITIONS

SVG = "{http://www.w3.org/2000/svg}"
SHAPE = re.compile(r"\[\d+(?:, \d+)*\]")
OURS = ("cross-weights", "cache-grows", "gqa-groups", "rope-turns")
# The width of the article on a 390 px phone (Material's margins taken off), measured in Chromium:
# a picture no wider is shown at its own size, its 11 px labels unscaled.
PHONE_COLUMN = 358


def run_page(language: str, page: str, anchor: str) -> dict:
    """The namespace of ``page``'s code blocks run in order, hidden set-up and doctests included
    (a doctest's examples run, their output unread; one that shows an error is left out), up to
    the first python block after the heading ``{ #anchor }`` that is not a doctest."""
    text = (ROOT / "docs" / language / page).read_text(encoding="utf-8")
    section = text.index(f"{{ #{anchor} }}")
    namespace: dict = {}
    with torch.random.fork_rng():
        for block in code_blocks(text):
            if block.language != "python":
                continue
            where = f"{language}/{page}:{block.line}"
            if block.body.lstrip().startswith(">>>"):
                for example in doctest.DocTestParser().get_examples(block.body):
                    if example.exc_msg is None:
                        exec(compile(example.source, where, "exec"), namespace)
                continue
            exec(compile(block.body, where, "exec"), namespace)
            if block.start > section:
                return namespace
    raise AssertionError(f"{language}/{page}: no python block after {{ #{anchor} }}")


def parse(name: str, language: str) -> ET.Element:
    return ET.fromstring(pictures.draw(name, language))


def labels(svg: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in svg.iter(f"{SVG}text")]


def shapes(svg: ET.Element) -> list[str]:
    return [shape for label in labels(svg) for shape in SHAPE.findall(label)]


def shape_of(t) -> str:
    return "[" + ", ".join(map(str, t)) + "]"


def painted(svg: ET.Element) -> list[tuple[str, bool]]:
    """Each rect's paint, in document order: its class (or its group's) and whether dashed."""
    found = []

    def walk(element: ET.Element, inherited: dict) -> None:
        paint = {**inherited, **{k: v for k, v in element.attrib.items() if k != "style"}}
        if element.tag == f"{SVG}rect":
            found.append((paint.get("class", ""), "stroke-dasharray" in paint))
        for child in element:
            walk(child, paint if element.tag == f"{SVG}g" else inherited)

    walk(svg, {})
    return found


# ---- cross ------------------------------------------------------------------------------------


@pytest.mark.parametrize("language", LANGUAGES)
def test_cross_weights_are_the_pages_rectangle(language):
    page = run_page(language, "cross.md", "shapes")
    weights = page["weights"][0, 0].detach()  # sequence 0, head 0: [q_len, k_len]
    assert weights.shape == (3, 7), weights.shape
    svg = parse("cross-weights", language)
    cells = {
        (int(g.get("data-q")), int(g.get("data-k"))): g
        for g in svg.iter(f"{SVG}g")
        if g.get("data-q") is not None
    }
    assert sorted(cells) == [(s, t) for s in range(3) for t in range(7)], sorted(cells)
    for (s, t), g in cells.items():
        want = f"{float(weights[s, t]):.2f}"
        assert g.find(f"{SVG}text").text == want, (s, t, want)
        assert g.find(f"{SVG}title").text.endswith(want), g.find(f"{SVG}title").text
    want = [shape_of(page[n].shape) for n in ("q", "k", "weights")]
    assert shapes(svg) == want, shapes(svg)
    assert set(SHAPE.findall(svg.find(f"{SVG}title").text)) <= set(want)


# ---- cache ------------------------------------------------------------------------------------


@pytest.mark.parametrize("language", LANGUAGES)
def test_cache_picture_is_the_pages_prefill_and_steps(language):
    page = run_page(language, "cache.md", "cache-grows")
    model, x, cache = page["model"], page["x"], page["cache"]
    # the page's calls again, on a fresh cache, asking for the weights
    fresh, want, queries = KVCache(), [], []
    with torch.no_grad():
        for start, end in [(0, 3), (3, 4), (4, 5), (5, 6), (6, 7)]:
            _, w = model(x[:, start:end], is_causal=True, cache=fresh, need_weights=True)
            want += [shape_of(fresh.keys.shape), shape_of(w.shape)]
            queries += [str(s) for s in range(start, end)]
    assert want[-2] == shape_of(cache.keys.shape) == "[2, 4, 7, 5]", want[-2]
    svg = parse("cache-grows", language)
    assert shapes(svg) == want, shapes(svg)
    small = [t for t in labels(svg) if t.isdigit()]
    assert small == [str(t) for t in range(7)] + queries, small  # key positions, then queries
    # one band per call, legend last: the prefill's 6 visible cells and each step's new key are
    # appended (head 0's colour), the keys held before are grey, the causal mask hides 3
    paints = painted(svg)[:-3]
    appended = sum("mha-h0" in c for c, _ in paints)
    held = sum("mha-n" in c for c, dashed in paints if not dashed)
    hidden = sum(dashed for _, dashed in paints)
    assert (appended, held, hidden) == (6 + 4, 3 + 4 + 5 + 6, 3), (appended, held, hidden)


# ---- gqa --------------------------------------------------------------------------------------


@pytest.mark.parametrize("language", LANGUAGES)
def test_gqa_picture_pairs_query_heads_with_the_pages_keys(language):
    page = run_page(language, "gqa.md", "groups")
    k, k_rep = page["k"].detach(), page["k_rep"].detach()
    groups = page["heads_num"] // page["kv_heads"]
    svg = parse("gqa-groups", language)
    assert shapes(svg) == [shape_of(page["q"].shape), shape_of(k_rep.shape), shape_of(k.shape)]
    printed = [t.text for t in svg.iter(f"{SVG}text") if "mha-code" in t.get("class", "")]
    numbers = [p for p in printed if not SHAPE.search(p)]

    heads = [", ".join(f"{v:.2f}" for v in k_rep[0, i, 0, :2].tolist()) for i in range(4)]
    kv = [", ".join(f"{v:.2f}" for v in k[0, j, 0, :2].tolist()) for j in range(2)]
    assert numbers == heads + kv, numbers
    assert heads == [kv[i // groups] for i in range(4)], "a group reads one key"
    word = {"en": "kv head", "zh": "键/值头"}[language]
    read = [int(m[1]) for t in labels(svg) if (m := re.fullmatch(rf"{word} (\d+)", t))]
    assert read == [i // groups for i in range(4)] + [0, 1], read


# ---- rope -------------------------------------------------------------------------------------


@pytest.mark.parametrize("language", LANGUAGES)
def test_rope_picture_states_each_pairs_angles_and_turn(language):
    """Pair j of an 8-dim head turns by θ_j = 10000 ** (-2j / 8) a position, written here from the
    definition: it reaches 5 θ_j at position 5, and a full turn takes 2π / θ_j positions."""
    found = [float(n) for t in labels(parse("rope-turns", language)) for n in number_in(t)]
    last = POSITIONS[-1]
    want = []
    for pair in range(4):
        theta = 10000.0 ** (-2 * pair / 8)
        want += [theta, last * theta, 2 * math.pi / theta]
    assert found == pytest.approx(want, rel=5e-3), found


def number_in(label: str) -> list[str]:
    """The stated number of a line under a pair (its angle, its angle at the last position, its
    turn), not the pair's own number, its dimensions or the positions' labels."""
    patterns = (
        r"^([\d.]+) rad / position$",
        r"^每个位置 ([\d.]+) 弧度$",
        r"^at position \d+: ([\d.]+) rad$",
        r"^位置 \d+：([\d.]+) 弧度$",
        r"^a full turn: ([\d.]+) positions$",
        r"^转满一圈：([\d.]+) 个位置$",
    )
    return [m[1] for p in patterns if (m := re.match(p, label))]


# ---- all four ---------------------------------------------------------------------------------


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("name", OURS)
def test_picture_fits_a_phone_unscaled(name, language):
    width = float(parse(name, language).get("viewBox").split()[2])
    assert width <= PHONE_COLUMN, (name, language, width)


@pytest.mark.parametrize("name", OURS)
def test_chinese_labels_follow_the_glossary(name):
    svg = parse(name, "zh")
    text = "\n".join([svg.find(f"{SVG}title").text, *labels(svg)])
    rows = glossary.zh_rows()
    hits = [
        *glossary.find_avoided(text, rows, name),
        *glossary.find_ordinals(text, name),
        *glossary.find_ranges(text, name),
    ]
    assert not hits, glossary.report(hits)
