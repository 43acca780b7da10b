"""The pictures of the site: drawn by mha_site/pictures_*.py at build time, checked against real
runs.

- Every picture is drawn in both languages as SVG that parses, with a ``<title>`` and real
  ``<text>`` labels, Chinese on zh and none on en.
- Every shape a picture writes, ``[2, 4, 3, 5]``, is the shape ``mha.trace.record`` records for
  the step the picture shows there, in order; every stride it writes is that step's stride.
- A picture drawn from another run than its page's says which in its own visible text, as the
  pages write a run (``MHA(4, 2)``, ``x [1, 3, 4]``); a picture of its page's run says nothing.
- Every picture's smallest text shows at 8 px or more on a 390 px phone, which shrinks a picture
  wider than its screen (font sizes are attributes, read from the SVG).
- Every ``<!-- picture: NAME -->`` on a page names a picture, every picture is used, and the built
  site holds each figure on the page of each language.
- In a real browser (marked ``browser``), every figure has a non-zero size in the light and the
  dark scheme, both languages, on a desktop and a 390 px phone, and the note of another run is
  shown inside it; screenshots go to ``screenshots/``.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import pytest
import torch
from support import (
    LANGUAGES,
    ROOT,
    SCHEMES,
    SCREENS,
    Tab,
    page_path,
    screenshot,
)
from visits import STATES as VISIT_STATES
from visits import probe

from mha.annotated import MHA
from mha.trace import record
from mha_site import markers as marker_grammar
from mha_site import picture_style as style
from mha_site import pictures
from mha_site.markdown import CHINESE

NAMES = sorted(pictures.generators())
SVG = "{http://www.w3.org/2000/svg}"
SHAPE = re.compile(r"\[\d+(?:, \d+)*\]")
STRIDE = re.compile(r"(?:stride|步长) (\(\d+(?:, \d+)*\))")

VIEW = "q.view(q.size(0), q.size(1), heads_num, head_size)"
SCORES = "torch.matmul(q, k.transpose(-2, -1))"
SCALED = SCORES + " / math.sqrt(head_size)"
SOFTMAX = "torch.softmax(qk, dim=-1)"
OUT = "torch.matmul(attn, v)"
CONTIGUOUS = "out.transpose(1, 2).contiguous()"
CONCAT = CONTIGUOUS + ".view(out.size(0), out.size(2), hidden_size)"
# The steps each picture draws, top to bottom ("x": the input), written here from the walkthrough,
# independently of the generators.
WALKTHROUGH = {
    "project": ["x", "W_q(x)"],
    "split-heads": ["W_q(x)", VIEW],
    "transpose-heads": [VIEW, "q.transpose(1, 2)"],
    "transpose-keys": ["k.transpose(1, 2)", "k.transpose(-2, -1)"],
    "scores": ["q.transpose(1, 2)", "k.transpose(-2, -1)", SCORES],
    "scale-softmax": [SCORES, SCALED, SOFTMAX],
    "weighted-sum": [SOFTMAX, "v.transpose(1, 2)", OUT],
    "transpose-back": [OUT, "out.transpose(1, 2)"],
    "contiguous": ["out.transpose(1, 2)", CONTIGUOUS],
    "merge-heads": [CONTIGUOUS, CONCAT],
    "output-projection": [CONCAT, "W_o(out)"],
}
# The memory pictures use a small run, MHA(4, 2) on one sequence of 3 positions (DRAWN below).
MEMORY = {
    "memory-view": ["W_q(x)", VIEW],
    "memory-transpose": [VIEW, "q.transpose(1, 2)"],
    "memory-contiguous": ["out.transpose(1, 2)", CONTIGUOUS],
}
OURS = ["forward-flow", *WALKTHROUGH, *MEMORY]
HEATMAPS = ["heatmap-none", "heatmap-causal", "heatmap-padding", "heatmap-window"]
BENCH = ["bench-time", "bench-memory", "bench-ratio"]

# The run each picture draws, (hidden_size, heads_num, x's shape), written here independently of
# the generators: the shapes tests below and tests/test_heatmaps.py check the drawings against
# fresh runs of these. None: no one run of MHA (the benchmark's measurements, over many lengths).
PAGE = (20, 4, (2, 3, 20))  # the walkthrough's set-up; the masks page's model and input
DRAWN = {
    **{name: PAGE for name in ["forward-flow", *WALKTHROUGH]},
    **{name: (4, 2, (1, 3, 4)) for name in MEMORY},
    **{name: (24, 4, (2, 6, 24)) for name in HEATMAPS},  # 2 sentences of 6 positions
    "heatmap-previous": (24, 4, (1, 6, 24)),  # hand-set heads: words, then one-hot positions
    **{name: None for name in BENCH},
    "transformer-block": PAGE,
    "rope-turns": None,  # no MHA: RotaryEmbedding(8) turning (1, 0) in each pair
    "mla-cache": None,  # no MHA: the MLA chapter's module and its LatentCache
    "tiled-running": None,  # no MHA: TiledAttention(4) on the tiled chapter's q, k, v
    "tiled-memory": None,  # the benchmark's tiled_memory
    "heads-split": None,  # no forward: MHA(20, 4, kv_heads=2)'s weights, split by heads_on_rank
    "ring-steps": None,  # no MHA: ring_schedule of 4 ranks, causal
    "ring-memory": None,  # the benchmark's parallel rows
    "ring-time": None,  # the benchmark's sequence_split rows
    "cross-weights": PAGE,  # the cross page's run: and a context [2, 7, 20] for keys and values
    "cache-grows": (20, 4, (2, 7, 20)),  # the cache page's: a prefill of 3, then 4 steps
    "gqa-groups": (20, 4, (6, 3, 20)),  # the gqa page's MHA(20, 4, kv_heads=2)
    "fast-memory": PAGE,  # the fast page's model and written_out on x and a context [2, 7, 20]
    "softcap-curve": PAGE,
    "sink-share": PAGE,
    "sink-sweep": PAGE,  # the same run, its head 0's sink logit set to -5 .. +5 in turn
    # the chunked page's MHA(24, 4) on 12 positions: causal, window=4, chunk=4
    **{name: (24, 4, (1, 12, 24)) for name in ("chunk-masks", "chunk-cache")},
    "gate-values": PAGE,
    "gate-sweep": PAGE,  # the same run, its gate rows' bias set to -8 .. +8 in turn
    "longrope-wavelengths": None,  # no MHA: the longrope page's RotaryEmbedding(96), 3 ways
    # the factor MHA(20, 4, temperature=(0.1, 8192)) applies at 260 positions up to 2 ** 20
    "temperature-factor": (20, 4, (1, 260, 20)),
}
# The run of each page that shows pictures (None: the benchmark's page). The scaffold's --picture
# adds its page here and its picture to DRAWN, both drawing the pages' own run.
PAGE_RUNS = {
    "walkthrough.md": PAGE,
    "heads.md": PAGE,
    "masks.md": PAGE,
    "performance.md": None,
    "why.md": PAGE,
    "rope.md": None,  # its snippets run RotaryEmbedding and MHA(32, 4, head_size 8)
    "window.md": None,  # its snippets run MHA(24, 4, window=3), the heatmap's, and smaller ones
    "mla.md": None,  # its snippets run MLA, not MHA
    "tiled.md": None,  # its snippets run TiledAttention on q, k, v, not MHA
    "heads-split.md": None,  # its snippets run MHA(20, 4, kv_heads=2) split over 2 ranks
    "ring.md": None,  # its snippets run ring_attention on q, k, v, not MHA
    "cross.md": PAGE,  # and a context [2, 7, 20]
    "cache.md": (20, 4, (2, 7, 20)),
    "gqa.md": (20, 4, (6, 3, 20)),  # with kv_heads=2
    "fast.md": PAGE,  # and a context [2, 7, 20]
    "softcap.md": PAGE,
    "sinks.md": PAGE,
    "chunked.md": (24, 4, (1, 12, 24)),  # with window=4 and chunk=4 beside it
    "gate.md": PAGE,
    "longrope.md": None,  # its snippets run RotaryEmbedding(96) and Phi-3's layers, not MHA
    "nope.md": PAGE,
}


def recorded(hidden_size: int, heads_num: int, x_shape: tuple[int, ...]):
    """The input and the steps of a fresh run, by expression (``self.`` dropped)."""
    torch.manual_seed(0)
    x = torch.randn(*x_shape)
    steps = record(MHA(hidden_size, heads_num), x)
    return x, steps, {s.expression.replace("self.", ""): s for s in steps}


def parse(name: str, language: str) -> ET.Element:
    return ET.fromstring(pictures.draw(name, language))


def texts(svg: ET.Element) -> list[str]:
    """The labels, in document order, each as its whole text (tspans joined)."""
    return ["".join(t.itertext()) for t in svg.iter(f"{SVG}text")]


def is_note(label: ET.Element) -> bool:
    return style.NOTE_CLASS in label.get("class", "").split()


def notes(svg: ET.Element) -> list[str]:
    """The labels that say which run the picture draws (``Run.note``)."""
    return ["".join(t.itertext()) for t in svg.iter(f"{SVG}text") if is_note(t)]


def drawing_labels(svg: ET.Element) -> list[str]:
    """The labels of the drawing itself, without the note of its run."""
    return ["".join(t.itertext()) for t in svg.iter(f"{SVG}text") if not is_note(t)]


def each_picture(test):
    cases = [(n, lang) for n in NAMES for lang in LANGUAGES]
    return pytest.mark.parametrize("name, language", cases, ids=[f"{n}-{g}" for n, g in cases])(
        test
    )


@each_picture
def test_picture_is_svg_with_title_and_labels(name, language):
    svg = parse(name, language)
    assert svg.tag == f"{SVG}svg", svg.tag
    assert svg.get("viewBox"), f"{name}: no viewBox, it would not scale"
    title = svg.find(f"{SVG}title")
    assert title is not None and title.text and title.text.strip(), f"{name}: no <title>"
    labels = texts(svg)
    assert labels and all(t.strip() for t in labels), f"{name}: empty <text>"


@each_picture
def test_labels_are_in_the_page_language(name, language):
    svg = parse(name, language)
    words = " ".join([*texts(svg), svg.find(f"{SVG}title").text])
    if language == "zh":
        assert CHINESE.search(words), f"{name}: no Chinese on the zh picture"
    else:
        assert not CHINESE.search(words), f"{name}: Chinese on the en picture: {words}"


@pytest.mark.parametrize("language", LANGUAGES)
def test_ids_are_unique_across_pictures(language):
    """Several pictures share one HTML page: an id used twice would label the wrong picture."""
    ids = [e.get("id") for n in NAMES for e in parse(n, language).iter() if e.get("id")]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def written_shapes_and_strides(svg: ET.Element):
    """Each written shape in order, and each written stride with the number of shapes before it."""
    shapes, strides = [], []
    for label in drawing_labels(svg):
        for stride in STRIDE.findall(label):
            strides.append((len(shapes) - 1, stride))
        shapes += SHAPE.findall(label)
    return shapes, strides


def shape_text(shape) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


@pytest.mark.parametrize("language", LANGUAGES)
def test_flow_writes_every_recorded_step(language):
    x, steps, _ = recorded(*DRAWN["forward-flow"])
    svg = parse("forward-flow", language)
    shapes, _ = written_shapes_and_strides(svg)
    assert shapes == [shape_text(s) for s in [x.shape, *(s.shape for s in steps)]], shapes
    labels = texts(svg)
    copies = [t for t in labels if t in ("copy", "复制")]
    assert len(copies) == sum(s.kind == "copy" for s in steps) == 1, copies
    views = [t for t in labels if re.split("[,，]", t)[0] in ("view", "视图")]
    assert len(views) == sum(s.kind == "view" for s in steps), views


@pytest.mark.parametrize(
    "name, shows, run",
    [(n, s, DRAWN[n]) for n, s in {**WALKTHROUGH, **MEMORY}.items()],
    ids=[*WALKTHROUGH, *MEMORY],
)
@pytest.mark.parametrize("language", LANGUAGES)
def test_written_shapes_and_strides_are_the_recorded_ones(name, shows, run, language):
    x, _, by_expression = recorded(*run)
    steps = [None if e == "x" else by_expression[e] for e in shows]
    expected = [shape_text(x.shape if s is None else s.shape) for s in steps]
    svg = parse(name, language)
    shapes, strides = written_shapes_and_strides(svg)
    assert shapes == expected, (name, shapes, expected)
    for index, stride in strides:
        assert stride == str(steps[index].stride), (name, shows[index], stride)
    title_shapes = set(SHAPE.findall(svg.find(f"{SVG}title").text))
    assert title_shapes <= set(expected), (name, title_shapes - set(expected))


def pages_showing(name: str) -> set[str]:
    return {page for (_, page), names in markers().items() if name in names}


def test_every_picture_and_page_has_a_known_run():
    """A new picture, or a picture on a new page, must be given its run here first."""
    assert set(DRAWN) == set(NAMES), set(DRAWN) ^ set(NAMES)
    for name in NAMES:
        assert pages_showing(name) <= set(PAGE_RUNS), (name, pages_showing(name))
    for page, run in PAGE_RUNS.items():
        if run is not None:  # the page's code makes that input
            for language in LANGUAGES:
                source = (ROOT / "docs" / language / page).read_text(encoding="utf-8")
                assert str(run[2]) in source, f"{language}/{page} runs no x of shape {run[2]}"


@each_picture
def test_a_picture_of_another_run_says_which(name, language):
    """The memory pictures draw MHA(4, 2) on x [1, 3, 4] on a page of MHA(20, 4) on [2, 3, 20]:
    a reader must be told, in the picture, in the form the pages write a run."""
    svg = parse(name, language)
    said = notes(svg)
    other = {DRAWN[name]} - {PAGE_RUNS[page] for page in pages_showing(name)} - {None}
    if not other:
        assert said == [], f"{name} draws its page's run, yet says {said}"
        return
    ((hidden_size, heads_num, x_shape),) = other
    assert len(said) == 1, f"{name} draws MHA({hidden_size}, {heads_num}) and must say so: {said}"
    note = said[0]
    assert f"MHA({hidden_size}, {heads_num})" in note, note
    assert re.search(rf"\bx (的形状为 )?{re.escape(shape_text(x_shape))}", note), note
    assert bool(CHINESE.search(note)) == (language == "zh"), f"{name}: not in {language}: {note}"
    desc = svg.find(f"{SVG}desc")
    assert desc is not None and note in desc.text, "screen readers read the note too"
    assert desc.get("id") in svg.get("aria-describedby", "").split(), svg.get("aria-describedby")


def test_memory_strips_are_the_storage():
    """The copy strip of the contiguous picture lists out_t's elements in index order."""
    torch.manual_seed(0)
    _, _, by_expression = recorded(*DRAWN["memory-contiguous"])
    out = torch.arange(12).view(by_expression[OUT].shape)
    order = " ".join(map(str, out.transpose(1, 2).flatten().tolist()))
    for language in LANGUAGES:
        svg = parse("memory-contiguous", language)
        assert any(t.endswith(order) for t in texts(svg)), texts(svg)
        # The strips' numbers (the offsets under them are smaller): out's memory, then the copy.
        cells = [t.text for t in svg.iter(f"{SVG}text") if t.get("font-size") == "12"]
        assert " ".join(cells[:12]) == " ".join(map(str, range(12))), cells[:12]
        assert " ".join(cells[12:24]) == order, cells[12:24]


def markers() -> dict[tuple[str, str], list[str]]:
    """The pictures each page asks for, by (language, page)."""
    found = {}
    for language in LANGUAGES:
        for path in sorted((ROOT / "docs" / language).rglob("*.md")):
            names = marker_grammar.named("picture", path.read_text(encoding="utf-8"))
            if names:
                found[language, path.relative_to(ROOT / "docs" / language).as_posix()] = names
    return found


def test_every_marker_names_a_picture_and_every_picture_is_used():
    pages = markers()
    for (language, page), names in pages.items():
        unknown = set(names) - set(NAMES)
        assert not unknown, f"{language}/{page}: no picture named {sorted(unknown)}"
    for language in LANGUAGES:
        used = {n for (lang, _), names in pages.items() if lang == language for n in names}
        assert set(NAMES) <= used, f"{language}: pictures no page shows: {set(NAMES) - used}"


def test_walkthrough_shows_our_pictures_in_both_languages():
    pages = markers()
    for language in LANGUAGES:
        shown = pages[language, "walkthrough.md"]
        assert sorted(shown) == sorted(OURS), (language, shown)
        assert shown[0] == "forward-flow", shown


def figures_in(html: str) -> dict[str, str]:
    found = re.findall(
        r'<figure class="mha-figure" data-picture="([\w.-]+)">(.*?)</figure>', html, re.S
    )
    return dict(found)


def test_built_pages_hold_each_figure(built_site, checked_pages):
    for (language, page), names in markers().items():
        if page not in checked_pages:
            continue
        html_path = built_site / page_path(language, page) / "index.html"
        html = html_path.read_text(encoding="utf-8")
        figures = figures_in(html)
        assert set(figures) == set(names), (language, page, set(names) ^ set(figures))
        assert html.count('<figure class="mha-figure"') == len(names), (language, page)
        for name, svg in figures.items():
            words = " ".join(re.findall(r">([^<>]+)<", svg))
            if language == "zh":
                assert CHINESE.search(words), f"zh/{page}: {name} has no Chinese"
            else:
                assert not CHINESE.search(words), f"en/{page}: {name} has Chinese"


# The width a picture gets on a 390 px phone: the screen less Material's content margins, 16 px a
# side (a picture wider than that is shrunk to it, mha.css), and the smallest text a reader should
# have to read there.
PHONE_WIDTH = SCREENS["phone"]["width"] - 2 * 16
SMALLEST_ON_PHONE = 8.0


def smallest_label_on_phone(root: ET.Element) -> tuple[float, str]:
    """The smallest text of a picture as a 390 px phone shows it, in px, and that text: its font
    size (its own ``font-size`` or its nearest ancestor's) times the picture's shrink factor,
    ``PHONE_WIDTH`` / the viewBox width when the picture is wider than that."""
    width = float(root.get("viewBox").split()[2])
    scale = min(1.0, PHONE_WIDTH / width)
    parents = {child: parent for parent in root.iter() for child in parent}
    for sheet in root.iter(f"{SVG}style"):  # a style sheet's size would beat the attribute
        assert "font-size" not in (sheet.text or ""), "text sizes are attributes, not CSS"
    shown = []
    for text in root.iter(f"{SVG}text"):
        sized = text
        while sized is not None and sized.get("font-size") is None:
            sized = parents.get(sized)
        label = "".join(text.itertext())
        assert sized is not None, f"no font-size for the text {label!r}"
        shown.append((float(sized.get("font-size")) * scale, label))
    return min(shown)


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_picture_reads_on_a_phone(language):
    """A phone shrinks a picture wider than its screen: every picture's layout (the heatmaps'
    squares, gaps, short words and two-line heading; the flow's, the heads' split, the tiled
    run's widths) keeps every label at 8 px or more there."""
    small = {}
    for name in NAMES:
        size, label = smallest_label_on_phone(parse(name, language))
        if size < SMALLEST_ON_PHONE:
            small[name] = (round(size, 2), label)
    assert not small, f"labels under {SMALLEST_ON_PHONE} px on a 390 px phone: {small}"


def test_the_phone_measure_sees_a_picture_too_wide():
    """The measure itself: the same picture, twice as wide, shows its weights at half the size."""
    root = parse("heatmap-none", "en")
    size, _ = smallest_label_on_phone(root)
    _, _, width, height = root.get("viewBox").split()
    root.set("viewBox", f"0 0 {2 * float(width)} {height}")
    assert smallest_label_on_phone(root)[0] == pytest.approx(size / 2), "scaled by the width"
    assert smallest_label_on_phone(root)[0] < SMALLEST_ON_PHONE


# ---- in a real browser ---------------------------------------------------------------------

# The pages that show pictures, in either language (the markers say which).
PICTURE_PAGES = sorted({page for _, page in markers()})


@probe(
    "figures",
    states=tuple(VISIT_STATES),
    tests=("test_figures_render_in_both_schemes",),
    param="doc",
)
def check_figures(tab: Tab, language: str, doc: str, state: str) -> None:
    """Every figure of ``doc`` in ``state`` (``tests/visits.py``: light, then dark in place, on
    the desktop screen, then on the phone screen) has a box; the note of another run shows
    inside it; on a phone, it fits the screen."""
    screen, scheme = VISIT_STATES[state]
    page = tab.page
    names = markers().get((language, doc))
    assert names, f"{language}/{doc} shows no picture (its twin does)"
    shown = page.locator("body").get_attribute("data-md-color-scheme")
    assert shown == SCHEMES[scheme], (language, doc, shown)
    figures = page.locator(".mha-figure")
    # each figure's picture name, its drawing's box and its run's note, read in one call
    shown = figures.evaluate_all(
        """(figures, note) => figures.map(figure => {
            const svg = figure.querySelector("svg");
            const box = (e) => {
                const r = e.getBoundingClientRect();
                return {left: r.left, right: r.right, top: r.top, bottom: r.bottom,
                        width: r.width, height: r.height};
            };
            const said = svg && svg.querySelector("text." + note);
            return [figure.dataset.picture, svg && box(svg),
                    said && {text: said.textContent, ...box(said)}];
        })""",
        style.NOTE_CLASS,
    )
    assert len(shown) == len(names), (language, doc, len(shown))
    for i, name in enumerate(names):
        picture, box, note = shown[i]
        assert picture == name, (language, doc, i, picture)
        assert box and box["width"] > 0 and box["height"] > 0, (language, name, box)
        if DRAWN[name] in (None, PAGE_RUNS[doc]):
            assert note is None, (language, name, note)
        else:  # the note of another run is shown, inside the picture
            assert note and note["text"] in notes(parse(name, language)), (name, note)
            assert note["width"] > 0 and note["height"] > 0, (language, name, note)
            inside = (
                note["left"] >= box["left"] - 1
                and note["right"] <= box["right"] + 1
                and note["top"] >= box["top"] - 1
                and note["bottom"] <= box["bottom"] + 1
            )
            assert inside, (language, name, note, box)
        if screen == "phone":
            assert box["width"] <= SCREENS["phone"]["width"], (language, name, box)
        if doc == "walkthrough.md":
            screenshot(figures.nth(i), f"picture-{language}-{scheme}-{screen}-{name}.png")


@pytest.mark.browser
@pytest.mark.parametrize("screen", SCREENS)
@pytest.mark.parametrize("doc", PICTURE_PAGES)
def test_figures_render_in_both_schemes(visits, doc, screen):
    """``check_figures`` in both languages, in the light and the dark scheme of the screen."""
    for language in LANGUAGES:
        for state, (on, _) in VISIT_STATES.items():
            if on == screen:
                visits.result("figures", state, language, doc)


def test_the_rope_picture_turns_each_pair_by_its_frequency_per_position():
    """Pair i of an 8-dim head turns by 10000 ** (-2i / 8) radians per position, written here from
    the definition, independently of mha.rope: the drawn points are (cos, sin) of that angle."""
    from mha_site.pictures_rope import turns

    drawn = turns()
    assert sorted(drawn) == [0, 1, 2, 3]
    for pair, points in drawn.items():
        for position, (a, b) in enumerate(points):
            angle = position * 10000.0 ** (-2 * pair / 8)
            assert (a, b) == pytest.approx((math.cos(angle), math.sin(angle)), abs=1e-6)


def test_the_mla_picture_draws_one_cell_per_number_of_a_real_run():
    """The MLA chapter's module (4 heads; keys of 6 + 4, values of 5; a latent of 8 and a rotary
    key part of 4), written here again: one position expands to 4 * (10 + 5) = 60 numbers, and
    its LatentCache holds 8 + 4 = 12: one cell each, in both languages."""
    from mha.mla import MLA, LatentCache

    m = MLA(
        32, 4, q_lora_rank=10, kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5
    )
    cache = LatentCache()
    with torch.no_grad():
        m(torch.randn(1, 1, 32), cache=cache)
    cached = cache.latent.size(-1) + cache.rope_keys.size(-1)
    expanded = 4 * (6 + 4 + 5)
    for language in LANGUAGES:
        svg = parse("mla-cache", language)
        cells = [e for e in svg.iter(f"{SVG}rect")]
        assert len(cells) == expanded + cached == 72, len(cells)
        title = svg.find(f"{SVG}title").text
        assert str(expanded) in title and str(cached) in title, title
