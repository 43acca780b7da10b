"""The pictures of the chapter heads-split: drawn at build time from a real run of ``mha``."""

from __future__ import annotations

import functools

import torch

from mha_site.languages import tr
from mha_site.picture_style import FONT, PAGE_RUN, Svg, shape_text


@functools.cache
def run():
    """The pages' own run: ``MHA(20, 4)`` on ``x`` of shape ``[2, 3, 20]``, and its output."""
    from mha.annotated import MHA

    torch.manual_seed(0)
    model = MHA(PAGE_RUN.hidden_size, PAGE_RUN.heads_num)
    x = torch.randn(*PAGE_RUN.x_shape)
    return x, model(x)


def heads_split_picture(language: str) -> str:
    x, out = run()
    title = tr(
        language,
        f"The output has the shape of the input: {shape_text(out.shape)}.",
        f"输出的形状与输入相同：{shape_text(out.shape)}。",
    )
    svg = Svg("heads-split", title)
    label = f"x {shape_text(x.shape)} → MHA → out {shape_text(out.shape)}"
    svg.text(4, 4 + FONT, label, code=True)
    return str(svg)


PICTURES = {"heads-split": heads_split_picture}
