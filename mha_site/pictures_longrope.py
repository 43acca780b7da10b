"""The picture of the chapter longrope: each pair's wavelength, plain RoPE and LongRoPE's factors.

``longrope-wavelengths``: the page's run, ``RotaryEmbedding(96, scaling=...)`` with Phi-3-mini's
sizes (48 pairs, base 10000, a trained context of 4096 stretched to 131072) and the page's
made-up lists ``SHORT`` and ``LONG``, beside ``RotaryEmbedding(96)``: for each pair ``j``, the
positions one full turn takes, ``2π / inv_freq[j]``, on a log scale, for the plain frequencies,
the short factors' (``inv_freq``) and the long factors' (``long_inv_freq``), between the lines of
the trained context and of the stretched one. ``tests/test_chapter_pictures.py`` checks that
these are the modules the page builds.
"""

from __future__ import annotations

import functools
import math

from mha_site.languages import tr
from mha_site.picture_style import HEADS_LIGHT, NEUTRAL_LIGHT, SMALL, Svg

ROTARY_DIMS = 96  # Phi-3-mini's heads, every channel rotating: 48 pairs
PAIRS = ROTARY_DIMS // 2
SHORT = [1 + 0.6 * (j / 47) ** 2 for j in range(PAIRS)]  # the page's lists, 1 .. 1.6
LONG = [12 ** (j / 47) for j in range(PAIRS)]  # 1 .. 12
TRAINED, STRETCHED = 4096, 131072  # L_0 and L_max
SCALING = {
    "rope_type": "longrope",
    "short_factor": SHORT,
    "long_factor": LONG,
    "original_max_position_embeddings": TRAINED,
    "factor": STRETCHED / TRAINED,
}
WIDTH, HEIGHT = 250.0, 210.0  # the plot area
LEFT, TOP = 44.0, 40.0
DECADES = range(7)  # 10 ** 0 .. 10 ** 6 positions
SUP = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


@functools.cache
def run():
    """The page's ``plain`` and ``rope``: ``RotaryEmbedding(96)`` and the LongRoPE one."""
    from mha.rope import RotaryEmbedding

    return RotaryEmbedding(ROTARY_DIMS), RotaryEmbedding(ROTARY_DIMS, scaling=SCALING)


def wavelengths() -> dict[str, list[float]]:
    """Positions per full turn of each pair: plain, with the short factors, with the long ones."""
    plain, rope = run()
    return {
        name: (2 * math.pi / freq.double()).tolist()
        for name, freq in (
            ("plain", plain.inv_freq),
            ("short", rope.inv_freq),
            ("long", rope.long_inv_freq),
        )
    }


def px(pair: float) -> float:
    return LEFT + WIDTH * pair / (PAIRS - 1)


def py(positions: float) -> float:
    return TOP + HEIGHT * (1 - math.log10(positions) / DECADES[-1])


def longrope_wavelengths(language: str) -> str:
    waves = wavelengths()
    title = tr(
        language,
        "A full turn of each pair, in positions",
        "每一对转满一圈要多少个位置",
    )
    description = tr(
        language,
        f"For RotaryEmbedding({ROTARY_DIMS}) and the page's LongRoPE one (48 pairs, base 10000), "
        "the positions a full turn of each pair takes, on a log scale from 1 to a million, pair 0 "
        "at the left: plain frequencies dotted, the short factors' and the long factors' as lines; "
        f"dashed, the trained context of {TRAINED} and the stretched one of {STRETCHED}.",
        f"RotaryEmbedding({ROTARY_DIMS}) 和本页的 LongRoPE（48 对，底数 10000）："
        "每一对转满一圈要多少个位置，纵轴是对数刻度，1–1000000，横轴从左边的对 0 开始；"
        "点线是不缩放的频率，两条实线分别是短因子和长因子；"
        f"虚线是训练长度 {TRAINED} 和拉长后的 {STRETCHED}。",
    )
    svg = Svg("longrope-wavelengths", title, description)
    svg.text(4, 16, title, bold=True)
    bottom = TOP + HEIGHT
    for decade in DECADES:
        y = py(10.0**decade)
        svg.line(LEFT - 4, y, LEFT, y)
        label = "1" if decade == 0 else "10" + ("" if decade == 1 else str(decade).translate(SUP))
        svg.text(LEFT - 6, y + 4, label, size=SMALL, anchor="end")
    for pair in (0, 12, 24, 36, 47):
        svg.line(px(pair), bottom, px(pair), bottom + 4)
        svg.text(px(pair), bottom + 16, str(pair), size=SMALL, anchor="middle")
    svg.rect(LEFT, TOP, WIDTH, HEIGHT, cls="mha-sn", stroke=NEUTRAL_LIGHT)
    svg.text(LEFT + WIDTH / 2, bottom + 32, tr(language, "pair j", "对 j"), anchor="middle")
    svg.turned_text(12, TOP + HEIGHT / 2, tr(language, "positions per turn", "转一圈的位置数"))
    # the two contexts, labelled at the left, where the curves are still low
    for length, label in (
        (TRAINED, tr(language, f"L₀ = {TRAINED}, trained", f"L₀ = {TRAINED}，训练长度")),
        (STRETCHED, tr(language, f"Lₘₐₓ = {STRETCHED}", f"Lₘₐₓ = {STRETCHED}，拉长后")),
    ):
        y = py(length)
        svg.parts.append(
            f'<path d="M{LEFT:g},{y:.1f} L{LEFT + WIDTH:g},{y:.1f}" class="mha-accent"'
            ' fill="none" stroke="#c2185b" stroke-width="1.2" stroke-dasharray="5 3"/>'
        )
        svg.text(LEFT + 4, y - 5, label, cls="mha-accent", size=SMALL)
    # plain (dotted, neutral), short and long (the first two heads' colours), a dot per pair
    styles = {
        "plain": ("mha-sfg", "currentColor", ' stroke-dasharray="1 3"', "mha-fg", "currentColor"),
        "short": ("mha-s0", HEADS_LIGHT[0], "", "mha-t0", HEADS_LIGHT[0]),
        "long": ("mha-s1", HEADS_LIGHT[1], "", "mha-t1", HEADS_LIGHT[1]),
    }
    for name, (cls, stroke, dash, dot_cls, dot) in styles.items():
        d = " ".join(
            f"{'M' if j == 0 else 'L'}{px(j):.1f},{py(w):.1f}" for j, w in enumerate(waves[name])
        )
        svg.parts.append(
            f'<path d="{d}" class="{cls}" fill="none" stroke="{stroke}" stroke-width="1.5"{dash}/>'
        )
        if name != "plain":
            for j, w in enumerate(waves[name]):
                svg.parts.append(
                    f'<circle cx="{px(j):.1f}" cy="{py(w):.1f}" r="1.6" class="{dot_cls}"'
                    f' fill="{dot}"/>'
                )
    # the legend, one entry a line
    names = {
        "plain": tr(language, "plain RoPE, no factor", "不缩放，没有因子"),
        "short": tr(
            language,
            f"short factors, λⱼ from {min(SHORT):g} to {max(SHORT):g}",
            f"短因子，λⱼ 取 {min(SHORT):g}–{max(SHORT):g}",
        ),
        "long": tr(
            language,
            f"long factors, λⱼ from {min(LONG):g} to {max(LONG):g}",
            f"长因子，λⱼ 取 {min(LONG):g}–{max(LONG):g}",
        ),
    }
    for row, (name, (cls, stroke, dash, *_)) in enumerate(styles.items()):
        y = bottom + 52 + row * 18
        svg.parts.append(
            f'<path d="M{LEFT:g},{y - 4:g} L{LEFT + 24:g},{y - 4:g}" class="{cls}" fill="none"'
            f' stroke="{stroke}" stroke-width="1.5"{dash}/>'
        )
        svg.text(LEFT + 30, y, names[name], size=SMALL)
    return str(svg)


PICTURES = {"longrope-wavelengths": longrope_wavelengths}
