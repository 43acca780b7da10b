"""The attention heatmaps (``mha_site/pictures_heatmaps.py``) show real runs.

Every drawn number equals, to the two decimals printed, the weight that a fresh run of the same
recipe gives (seeded embeddings per word id, a seeded ``mha.full.MHA(24, 4)``,
``need_weights=True``; for ``heatmap-previous``, heads of ``MHA(24, 4)`` set by hand to attend to
the position ``i`` back); every hatched cell is a weight of exactly 0, and exactly the cells the
mask removes are hatched. The labels are in the page's language, each page's snippet is the same
run, the colours keep each number readable in both schemes, the smallest label (here and on every
picture of the site) still reads on a 390 px phone, and the built site shows the three masks
pictures on both masks pages and the hand-set heads on both heads pages.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import pytest
import torch
from support import LANGUAGES, ROOT, assert_close

from mha.full import MHA, padding_mask
from mha_site import pictures_heatmaps as heatmaps
from mha_site.markdown import CHINESE, fences

SVG = "{http://www.w3.org/2000/svg}"
VARIANTS = ("none", "causal", "padding", "previous", "window")
NAMES = [f"heatmap-{v}" for v in VARIANTS]
MASKS_NAMES = NAMES[:3]  # the masks page's; heatmap-previous is on the heads page
WINDOW_NAMES = NAMES[4:]  # the sliding window's page


def fresh_run() -> dict[str, torch.Tensor]:
    """The recipe, written out again: the weights of the sequence each picture shows."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        table = 2 * torch.randn(10, 24)  # one vector per word id
        model = MHA(24, 4).eval()
    x = table[torch.tensor([[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 9, 9]])]  # [2, 6, 24]
    pad = padding_mask(torch.tensor([6, 3]), 6)
    with torch.no_grad():
        none = model(x, need_weights=True)[1]
        causal = model(x, is_causal=True, need_weights=True)[1]
        padded = model(x, attn_mask=pad, need_weights=True)[1]
        # a window of 3: the causal mask, less the keys 3 or more positions back (by hand)
        i, j = torch.arange(6)[:, None], torch.arange(6)[None]
        window = model(x, attn_mask=(j <= i) & (i - j < 3), need_weights=True)[1]
    previous = hand_set_run()
    # [heads, q_len, k_len]
    return {
        "none": none[0],
        "causal": causal[0],
        "padding": padded[1],
        "previous": previous,
        "window": window[0],
    }


def hand_set_run() -> torch.Tensor:
    """The hand-set heads, written out again: x is 18 random word channels, then the one-hot
    code of the position; head i's key of position j is the code of j, its query of position p
    is 12 times the code of max(p - i, 0). Causal mask. Returns ``[heads, q_len, k_len]``."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        words = torch.randn(1, 6, 18)
        model = MHA(24, 4, bias=False).eval()
    x = torch.cat([words, torch.eye(6).unsqueeze(0)], dim=-1)  # [1, 6, 24]
    query = torch.zeros(24, 24)
    key = torch.zeros(24, 24)
    for i in range(4):
        for p in range(6):
            query[6 * i + max(p - i, 0), 18 + p] = 12.0
            key[6 * i + p, 18 + p] = 1.0
    with torch.no_grad():
        model.W_q.weight.copy_(query)
        model.W_k.weight.copy_(key)
        return model(x, is_causal=True, need_weights=True)[1][0]


EXPECTED_MASKED = {
    "none": torch.zeros(6, 6, dtype=torch.bool),
    "causal": torch.ones(6, 6, dtype=torch.bool).triu(diagonal=1),
    "padding": (torch.arange(6) >= 3).expand(6, 6),  # keys 3, 4, 5 are padding
    "previous": torch.ones(6, 6, dtype=torch.bool).triu(diagonal=1),
    # above the diagonal, and 3 or more positions back
    "window": torch.ones(6, 6, dtype=torch.bool).triu(diagonal=1)
    | torch.ones(6, 6, dtype=torch.bool).tril(diagonal=-3),
}


@pytest.fixture(scope="module")
def fresh():
    return fresh_run()


def svg_of(name: str, language: str) -> ET.Element:
    return ET.fromstring(heatmaps.PICTURES[name](language))


def cells(root: ET.Element) -> dict[tuple[int, int, int], ET.Element]:
    found = {}
    for g in root.iter(f"{SVG}g"):
        if "cell" in g.get("class", "").split() and g.get("data-head") is not None:
            key = (int(g.get("data-head")), int(g.get("data-q")), int(g.get("data-k")))
            assert key not in found, f"cell {key} drawn twice"
            found[key] = g
    return found


def texts(element: ET.Element, cls: str) -> list[str]:
    return [t.text for t in element.iter(f"{SVG}text") if cls in t.get("class", "").split()]


# ---- the generator ----------------------------------------------------------------------------


def test_the_pictures_are_the_five_variants():
    assert sorted(heatmaps.PICTURES) == sorted(NAMES), sorted(heatmaps.PICTURES)


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("name", NAMES)
def test_generator_draws_svg_with_a_title_and_text(name, language):
    markup = heatmaps.PICTURES[name](language)
    assert markup.startswith("<svg"), markup[:40]
    root = ET.fromstring(markup)  # well-formed XML
    assert root.tag == f"{SVG}svg", root.tag
    assert root.get("viewBox"), "a viewBox, so the picture scales"
    # drawn through picture_style.Svg: scaled down to the page by mha.css, as every picture
    assert "mha-picture" in root.get("class", "").split(), root.get("class")
    title = root.find(f"{SVG}title")
    assert title is not None and title.text, "a <title> for screen readers"
    assert root.get("aria-labelledby") == title.get("id"), root.get("aria-labelledby")
    labels = texts(root, "head-label")
    word = {"en": "head", "zh": "头"}[language]
    assert labels == [f"{word} {i}" for i in range(4)], labels
    colours = [
        t.get("class").split()[1]
        for t in root.iter(f"{SVG}text")
        if "head-label" in t.get("class", "")
    ]
    assert colours == ["mha-t0", "mha-t1", "mha-t2", "mha-t3"], "each head in its site colour"
    assert len(cells(root)) == 4 * 6 * 6, len(cells(root))
    for g in cells(root).values():
        assert g.find(f"{SVG}title").text, "each cell names its weight on hover"


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_token_labels_are_in_the_pages_language(variant, language):
    root = svg_of(f"heatmap-{variant}", language)
    want = heatmaps.tokens(variant, language)
    for head in root.iter(f"{SVG}g"):
        if head.get("class") != "head":
            continue
        assert texts(head, "key") == want, texts(head, "key")
        assert texts(head, "query") == want, texts(head, "query")
    title = root.find(f"{SVG}title").text
    heading = texts(root, "heading")[0]
    if language == "zh":
        assert all(CHINESE.search(t) for t in want), want
        assert CHINESE.search(title) and CHINESE.search(heading), (title, heading)
    else:
        assert not any(CHINESE.search(t) for t in want), want
        assert not CHINESE.search(title) and not CHINESE.search(heading), (title, heading)
    first = {"en": "a", "zh": "一只"}[language] if variant != "padding" else None
    if variant == "previous":  # another run than its page's: it says which
        note = texts(root, "mha-run-note")
        assert note == [
            {
                "en": "Drawn for MHA(24, 4) on x [1, 6, 24]",
                "zh": "本图画的是 MHA(24, 4)，x 的形状为 [1, 6, 24]",
            }[language]
        ], note
    if first:
        assert want[0] == first, want


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_drawn_weight_equals_a_fresh_run(variant, language, fresh):
    weights = fresh[variant]
    assert weights.shape == (4, 6, 6), weights.shape
    drawn = cells(svg_of(f"heatmap-{variant}", language))
    for (head, q, k), g in drawn.items():
        if "masked" in g.get("class").split():
            continue
        shown = g.find(f"{SVG}text").text
        want = f"{float(weights[head, q, k]):.2f}"
        assert shown == want, (variant, head, q, k, shown, want)
        assert g.find(f"{SVG}title").text.endswith(want), g.find(f"{SVG}title").text


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_masked_cells_are_exactly_the_masks_zeros(variant, language, fresh):
    weights = fresh[variant]
    drawn = cells(svg_of(f"heatmap-{variant}", language))
    masked = torch.zeros(4, 6, 6, dtype=torch.bool)
    for (head, q, k), g in drawn.items():
        if "masked" in g.get("class").split():
            masked[head, q, k] = True
            assert g.find(f"{SVG}text") is None, "a masked cell prints no number"
    assert torch.equal(masked, EXPECTED_MASKED[variant].expand(4, 6, 6)), variant
    assert (weights[masked] == 0).all(), weights[masked]
    assert (weights[~masked] > 0).all(), "every weight the mask keeps is positive here"
    assert_close(weights.sum(dim=-1), torch.ones(4, 6))


def test_the_generator_leaves_the_random_state_alone():
    heatmaps.setup.cache_clear()
    heatmaps.setup_previous.cache_clear()
    heatmaps.run.cache_clear()
    before = torch.random.get_rng_state()
    heatmaps.PICTURES["heatmap-none"]("en")
    heatmaps.PICTURES["heatmap-previous"]("en")
    assert torch.equal(torch.random.get_rng_state(), before), "the seed leaked out"


def test_each_hand_set_head_looks_its_offset_back(fresh):
    """Head i gives each query p its largest weight on key max(p - i, 0), at least 0.96."""
    weights = fresh["previous"]
    want = torch.tensor([[max(p - i, 0) for p in range(6)] for i in range(4)])
    assert torch.equal(weights.argmax(dim=-1), want), weights.argmax(dim=-1)
    assert weights.amax(dim=-1).min() > 0.96, weights.amax(dim=-1)


def test_both_languages_show_the_same_numbers():
    for name in NAMES:
        en, zh = cells(svg_of(name, "en")), cells(svg_of(name, "zh"))
        assert en.keys() == zh.keys(), name
        for key in en:
            a, b = en[key].find(f"{SVG}text"), zh[key].find(f"{SVG}text")
            assert (a is None) == (b is None) and (a is None or a.text == b.text), (name, key)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_number_contrasts_with_its_cell(scheme):
    """WCAG AA for small text, 4.5:1, for every weight from 0 to 1 (axe skips SVG text)."""
    worst = min(heatmaps.contrast(*heatmaps.cell_colours(i / 1000, scheme)) for i in range(1001))
    assert worst >= 4.5, (scheme, worst)


# ---- the page ---------------------------------------------------------------------------------


def snippet(language: str, page: str = "masks.md", after: str = "heatmap-padding") -> str:
    """The first python block after the marker of picture ``after`` (or after the heading with
    anchor ``after``) on ``page``."""
    text = (ROOT / "docs" / language / page).read_text(encoding="utf-8")
    marker = f"<!-- picture: {after} -->" if after.startswith("heatmap-") else f"{{ #{after} }}"
    rest = text.split(marker, 1)[1]
    return next(block.body for block in fences(rest) if block.language == "python")


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_pages_snippet_is_the_run_behind_the_pictures(language):
    namespace = {"torch": torch, "MHA": MHA, "padding_mask": padding_mask}
    with torch.random.fork_rng():
        exec(snippet(language), namespace)  # our own page's code
    pictures = heatmaps.run()
    assert torch.equal(namespace["w_none"][0], pictures["none"][0])
    assert torch.equal(namespace["w_causal"][0], pictures["causal"][0])
    assert torch.equal(namespace["w_pad"][1], pictures["padding"][0])


@pytest.mark.parametrize("language", LANGUAGES)
def test_heads_pages_snippet_is_the_run_behind_the_hand_set_heads(language):
    namespace = {"torch": torch, "math": math}
    with torch.random.fork_rng():
        exec(snippet(language, "heads.md", "a-head-learns"), namespace)  # our own page's code
    assert torch.equal(namespace["w"][0], heatmaps.run()["previous"][0])


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize(
    "page, want",
    [("masks.md", MASKS_NAMES), ("heads.md", NAMES[3:4]), ("window.md", WINDOW_NAMES)],
)
def test_pages_place_the_heatmaps(page, want, language):
    text = (ROOT / "docs" / language / page).read_text(encoding="utf-8")
    found = re.findall(r"<!--\s*picture:\s*(heatmap-[\w-]+)\s*-->", text)
    assert found == want, found


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize(
    "page, names", [("masks", MASKS_NAMES), ("heads", NAMES[3:4]), ("window", WINDOW_NAMES)]
)
def test_built_pages_show_the_heatmaps(built_site, page, names, language):
    path = built_site / (page if language == "en" else f"zh/{page}") / "index.html"
    html = path.read_text(encoding="utf-8")
    for name in names:
        figure = re.search(
            rf'<figure class="mha-figure" data-picture="{name}">(<svg.*?</svg>)</figure>',
            html,
            re.S,
        )
        assert figure, f"{path}: no figure {name}"
        root = ET.fromstring(figure[1])
        variant = name.removeprefix("heatmap-")
        want = heatmaps.tokens(variant, language)
        assert texts(root, "query")[:6] == want, texts(root, "query")[:6]
    assert "<!-- picture:" not in html, "a marker was left unreplaced"
