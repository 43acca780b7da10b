"""The pictures of the chapters cross, cache, gqa, fast and longrope draw their page's own run, and
the rope picture's numbers are the rotation's.

Each test runs the page's own code blocks (hidden set-up included) up to the block the picture
draws, and compares every number and shape the picture writes with the tensors that code made:

- ``cross-weights``: head 0 of sequence 0 of the cross page's ``weights``, one cell per query and
  key, ``q_len`` × ``k_len`` (3 × 7, not a square), and the shapes of ``q``, ``k``, ``weights``;
- ``cache-grows``: the cache page's prefill and decoding steps on a fresh ``KVCache``: per call,
  the shapes of ``cache.keys`` and of the weights, its queries, one key appended per step and the
  causal mask's hidden cells;
- ``gqa-groups``: the gqa page's ``k`` and ``k_rep``: which key/value head each query head reads
  (``i // groups``) and the numbers printed in each key's box;
- ``fast-memory``: the fast page's ``written_out(x, context)`` and ``model(x, context)``, recorded
  with the page's own ``record``: each tensor an operation returns in new storage (the
  projections' ``addmm`` aside), its operation, shape and bytes, each path's count and total, and
  the bytes in tensors ending in ``q_len``, ``k_len`` (3, 7); every number the picture writes is
  one of these, and a picture of another run (a context of 6) or of a changed byte count fails;
- ``longrope-wavelengths``: the longrope page's ``plain`` and ``rope`` (``RotaryEmbedding(96)``
  with its made-up lists): the same frequencies, short and long, and the same scaling.

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
from torch.utils._pytree import tree_leaves

from mha.full import KVCache
from mha_site import pictures, pictures_fast, pictures_longrope
from mha_site.checkers import glossary
from mha_site.markdown import code_blocks
from mha_site.pictures_rope import POSITIONS

SVG = "{http://www.w3.org/2000/svg}"
SHAPE = re.compile(r"\[\d+(?:, \d+)*\]")
OURS = (
    "cross-weights",
    "cache-grows",
    "gqa-groups",
    "fast-memory",
    "rope-turns",
    "longrope-wavelengths",
)
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


# ---- fast -------------------------------------------------------------------------------------


def new_tensors(page: dict, call) -> list[tuple[str, str, int]]:
    """(operation, shape, bytes) of each tensor in new storage that ``call`` makes, recorded
    with the page's ``record``; the projections (``addmm``) left out."""
    found = []
    for name, args, kwargs, result in page["record"](call):
        inputs = [t for t in tree_leaves((args, kwargs)) if torch.is_tensor(t)]
        shared = {t.untyped_storage().data_ptr() for t in inputs}
        for t in filter(torch.is_tensor, tree_leaves(result)):
            if name != "addmm" and t.untyped_storage().data_ptr() not in shared:
                found.append((name, shape_of(t.shape), t.numel() * t.element_size()))
    return found


def check_fast_memory(svg: ET.Element, page: dict) -> None:
    x, context = page["x"], page["context"]
    paths = [
        new_tensors(page, lambda: page["written_out"](x, context)),
        new_tensors(page, lambda: page["model"](x, context)),
    ]
    lengths = (page["q"].size(2), page["k"].size(2))
    assert lengths == (3, 7), lengths
    square = [b for _, s, b in paths[0] if s.endswith(f", {lengths[0]}, {lengths[1]}]")]
    assert len(square) == 3 and not [s for _, s, _ in paths[1] if s.endswith(", 3, 7]")]
    # in order: the rows' shapes, their bytes and their operations (the flash kernel's results
    # by their names in its schema)
    rows = paths[0] + paths[1]
    assert shapes(svg) == [shape_of(x.shape)] + [s for _, s, _ in rows], shapes(svg)
    written = [int(m[1]) for t in labels(svg) if (m := re.fullmatch(r"(\d+) (?:bytes|字节)", t))]
    assert written == [b for *_, b in rows], written
    flash = page["flash"]
    # the fast path: the flash kernel's two results, and the NaN check's sums around them (the
    # page's 7 keys are fewer than NAN_CHECKED_BELOW), each one number per query or key head
    checked = ["sum", "sum", "add", "sub", flash, flash, "add"]
    assert [op for op, *_ in paths[1]] == checked, paths[1]
    assert all(s.endswith(", 1]") for op, s, _ in paths[1][:4]), paths[1]
    results = iter(["output", "logsumexp"])  # the flash kernel's results by their names
    ops = [op for op, *_ in paths[0]] + [next(results) if op == flash else op for op in checked]
    bold = [t.text for t in svg.iter(f"{SVG}text") if t.get("font-weight") == "bold"]
    assert [b for b in bold if b in ops] == ops, bold
    # every number written: x's shape, k_len, each path's count and total, the rows, the lengths
    # and the bytes of the q_len x k_len tensors
    want = [*x.shape, lengths[1], *lengths, sum(square), sum(b for *_, b in paths[0])]
    for path in paths:
        want += [len(path), sum(b for *_, b in path)]
        want += [int(n) for _, s, b in path for n in [*re.findall(r"\d+", s), b]]
    found = [int(n) for t in labels(svg) for n in re.findall(r"\d+", t)]
    assert sorted(found) == sorted(want), (sorted(found), sorted(want))
    title = [int(n) for n in re.findall(r"\d+", svg.find(f"{SVG}title").text)]
    assert set(title) <= set(want), set(title) - set(want)
    # the bars of the q_len x k_len tensors, and only those, in the accent colour
    accent = [c for c, _ in painted(svg) if "mha-accent" in c]
    assert len(accent) == len(square), accent


@pytest.fixture(scope="module")
def fast_pages() -> dict:
    return {language: run_page(language, "fast.md", "memory") for language in LANGUAGES}


@pytest.mark.parametrize("language", LANGUAGES)
def test_fast_memory_is_the_pages_recorded_tensors(language, fast_pages):
    check_fast_memory(parse("fast-memory", language), fast_pages[language])


@pytest.mark.parametrize("language", LANGUAGES)
def test_fast_memory_check_fails_on_another_run(language, fast_pages):
    page = fast_pages[language]
    other = pictures_fast.run(context_len=6)  # k_len 6, not the page's 7
    with pytest.raises(AssertionError):
        check_fast_memory(ET.fromstring(pictures_fast.fast_memory_picture(language, other)), page)
    shown = pictures_fast.run()
    op, shape, nbytes = shown["written"][4]
    changed = {**shown, "written": [*shown["written"][:4], (op, shape, nbytes * 2)]}
    changed["written"] += shown["written"][5:]
    with pytest.raises(AssertionError):
        check_fast_memory(ET.fromstring(pictures_fast.fast_memory_picture(language, changed)), page)


def test_fast_memory_logsumexp_is_m_plus_log_ell(fast_pages):
    """What the picture says of the flash kernel's second result: per query, the running max
    m of the online softmax plus the log of its running sum, over all keys."""
    page = fast_pages["en"]
    (lse,) = [
        r[1]
        for n, *_, r in page["record"](lambda: page["model"](page["x"], page["context"]))
        if n == page["flash"]
    ]
    scores = page["scores"]  # the page's q k^T / sqrt(d_h), [2, 4, 3, 7]
    m = scores.amax(dim=-1)
    ell = torch.exp(scores - m.unsqueeze(-1)).sum(dim=-1)
    assert torch.allclose(lse, m + torch.log(ell), atol=1e-5), (lse, m + torch.log(ell))


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


# ---- longrope ---------------------------------------------------------------------------------


@pytest.mark.parametrize("language", LANGUAGES)
def test_longrope_picture_draws_the_pages_rotary_embeddings(language):
    page = run_page(language, "longrope.md", "switch")
    plain, rope = pictures_longrope.run()
    assert torch.equal(plain.inv_freq, page["plain"].inv_freq)
    assert torch.equal(rope.inv_freq, page["rope"].inv_freq)
    assert torch.equal(rope.long_inv_freq, page["rope"].long_inv_freq)
    assert rope.scaling == page["rope"].scaling, rope.scaling


# ---- all six ---------------------------------------------------------------------------------


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
