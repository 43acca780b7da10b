"""The site's pictures, drawn at build time from real runs and inlined as SVG.

A page asks for a picture with a marker, a line of its own (``mha_site/markers.py``):

    <!-- picture: view-split -->

Pictures come from generator modules beside this hook, ``mha_site/pictures_*.py``. Each defines
``PICTURES``, a dict from a picture's name to a function that takes the page's language (``"en"``
or ``"zh"``) and returns the picture as SVG markup (a string that starts with ``<svg``, with its
labels as ``<text>`` and a ``<title>`` for screen readers). The functions run ``mha`` (most of them
through ``mha.trace.record``), so a picture cannot drift from the code: nothing is committed.

The marker is replaced with ``<figure class="mha-figure" data-picture="NAME">`` holding
the SVG, which search leaves out (``data-search-exclude``). A marker naming no picture, or a
generator that fails, is logged as a warning, which fails ``mkdocs build --strict``.
``tests/test_pictures.py`` checks the pictures; the parity test counts the markers per page in
both languages.
"""

from __future__ import annotations

import functools

from mha_site import (
    pictures_cache,
    pictures_chunked,
    pictures_cross,
    pictures_fast,
    pictures_flow,
    pictures_gate,
    pictures_gqa,
    pictures_heads_split,
    pictures_heatmaps,
    pictures_longrope,
    pictures_memory,
    pictures_mla,
    pictures_nope,
    pictures_perf,
    pictures_ring,
    pictures_rope,
    pictures_sinks,
    pictures_softcap,
    pictures_tiled,
    pictures_why,
)

# The generator modules, one per line: a new one is imported and added here (the scaffold does it).
GENERATORS = (
    pictures_cache,
    pictures_chunked,
    pictures_cross,
    pictures_fast,
    pictures_flow,
    pictures_gate,
    pictures_gqa,
    pictures_heads_split,
    pictures_heatmaps,
    pictures_longrope,
    pictures_memory,
    pictures_mla,
    pictures_nope,
    pictures_perf,
    pictures_ring,
    pictures_rope,
    pictures_sinks,
    pictures_softcap,
    pictures_tiled,
    pictures_why,
)


@functools.cache
def generators() -> dict:
    """Every picture of every generator module in ``GENERATORS``, by name."""
    found: dict = {}
    for module in GENERATORS:
        for name, draw in module.PICTURES.items():
            if name in found:
                raise ValueError(f"picture {name!r} is defined twice ({module.__name__})")
            found[name] = draw
    return found


@functools.cache
def draw(name: str, language: str) -> str:
    """The SVG of picture ``name`` in ``language`` (drawn once per build and language)."""
    svg = generators()[name](language)
    if not svg.lstrip().startswith("<svg"):
        raise ValueError(f"picture {name!r} is not SVG markup")
    return svg


def figure(name: str, language: str) -> str:
    # Search leaves the picture out (Material's search skips an element with data-search-exclude):
    # its labels and the hover text of each heatmap cell (头 0，查询“猫”，键“坐”：0.15) were a third
    # of the zh search index, which every page loads, and no reader searches for them; the prose
    # around each picture says what it shows.
    svg = draw(name, language).replace("<svg", '<svg data-search-exclude=""', 1)
    return f'<figure class="mha-figure" data-picture="{name}">{svg}</figure>'
