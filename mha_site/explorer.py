"""Build step: the shape explorer's steps, from a real forward pass, as JSON in the page.

The walkthrough's explorer (``docs/assets/explorer.js``) lists every step of
``mha.annotated.MHA.forward`` for the sizes a reader types. It holds no list of its own: this step
runs ``mha.trace.record`` at the walkthrough's sizes (``PAGE_RUN``, all different, so each
dimension of a shape is named by its size: ``dims_of``) and writes each step as its target, its
expression, its shape as dimension names (``["batch_size", "heads_num", "seq_len",
"head_size"]``), its strides, whether it is contiguous and its kind. A stride is a product of
sizes, written as the names multiplied (``["seq_len", "heads_num", "head_size"]``; ``[]`` is 1):
the names come from a run at sizes that are distinct primes (``PRIMES``), where a stride factors
into them in one way only, and must give the strides of the run at the page's sizes too.

Strides, contiguity and kind can depend on the sizes: where ``seq_len`` or ``heads_num`` is 1 the
transposed output is already contiguous, and ``.contiguous()`` returns it, strides and all,
instead of a copy. So the forward pass is recorded again with every combination of
``batch_size``, ``seq_len``, ``heads_num`` and ``head_size`` set to 1 (at the primes and at the
page's sizes), and what changes there is written in ``ones``: the sizes that are 1, joined by
commas in the order of ``sizes``, to the fields that differ (``{"kind": "view", "stride": ...}``;
a stride differs when it is not the general one with the names that are 1 left out). Every run
must give the same steps with the shapes their names state, or the build fails.

The JSON goes into the ``<head>`` of each page with an explorer, after the search plugin has
indexed the page (``on_post_page``, like ``runnable``'s scripts), as
``<script type="application/json" id="__mha-explorer-steps">``: in the page itself, it works
offline, from a file and under ``mkdocs serve``, with no request to make and nothing to wait for.
"""

from __future__ import annotations

import functools
import itertools
import math
import re

import torch

from mha_site.picture_style import PAGE_RUN
from mha_site.runnable import page_data_json

DATA_ID = "__mha-explorer-steps"
EXPLORER = re.compile(r'<div class="mha-explorer"')

# The sizes a reader sets freely (hidden_size is heads_num * head_size), in the order of ``ones``.
FREE = ("batch_size", "seq_len", "heads_num", "head_size")


def _record(batch_size: int, seq_len: int, heads_num: int, head_size: int):
    """The recorded steps of the annotated ``MHA`` at these sizes, and the sizes by name."""
    from mha.annotated import MHA
    from mha.trace import named_sizes, record

    model = MHA(heads_num * head_size, heads_num)
    x = torch.randn(batch_size, seq_len, heads_num * head_size)
    return record(model, x), named_sizes(model, x)


# A distinct prime for each free size: a stride recorded at these sizes factors into them one way.
PRIMES = dict(zip(FREE, (2, 3, 5, 7), strict=True))


@functools.cache
def steps() -> dict:
    """The explorer's data: ``{"sizes": FREE, "steps": [{target, expression, shape, stride,
    contiguous, kind[, ones]}, ...]}``, from real runs (see the module's docstring)."""
    from mha.trace import dims_of

    page = dict(zip(FREE, _page_sizes(), strict=True))
    recorded, names = _record(**page)
    found = []
    for step in recorded:
        dims = dims_of(step.shape, names)
        if dims is None:
            raise ValueError(f"{step.expression}: shape {step.shape} is not named by {names}")
        found.append({"target": step.target, "expression": step.expression, "shape": list(dims)})
    written = [(s["target"], s["expression"]) for s in found]
    for entry, layout in zip(found, _layouts((), written), strict=True):
        entry.update(layout)
    for ones in _subsets(FREE):
        sizes = {name: 1 if name in ones else page[name] for name in FREE}
        again, names = _record(**sizes)
        if [(s.target, s.expression) for s in again] != written:
            raise ValueError(f"the forward pass at sizes {sizes} records other steps")
        for entry, step, layout in zip(found, again, _layouts(ones, written), strict=True):
            if tuple(names[d] for d in entry["shape"]) != step.shape:
                raise ValueError(f"{step.expression} at sizes {sizes}: shape {step.shape}")
            _check(layout, step, names)
            stride = [[n for n in p if n not in ones] for p in entry["stride"]]
            general = {**entry, "stride": stride}  # the sizes that are 1 left out
            changed = {key: value for key, value in layout.items() if general[key] != value}
            if changed:
                entry.setdefault("ones", {})[",".join(ones)] = changed
    return {"sizes": list(FREE), "steps": found}


def _layouts(ones: tuple[str, ...], written: list[tuple[str, str]]) -> list[dict]:
    """Each step's kind, contiguity and strides as products of sizes, from a run at ``PRIMES``
    with the sizes ``ones`` set to 1, checked against the run at the page's sizes."""
    sizes = {name: 1 if name in ones else prime for name, prime in PRIMES.items()}
    recorded, names = _record(**sizes)
    if [(s.target, s.expression) for s in recorded] != written:
        raise ValueError(f"the forward pass at sizes {sizes} records other steps")
    found = []
    for step in recorded:
        stride = [_factors(n, {k: v for k, v in sizes.items() if v > 1}) for n in step.stride]
        if stride and None in stride:
            raise ValueError(f"{step.expression} at sizes {sizes}: stride {step.stride}")
        layout = {"stride": stride, "contiguous": step.contiguous, "kind": step.kind}
        _check(layout, step, names)
        found.append(layout)
    return found


def _factors(n: int, primes: dict[str, int]) -> list[str] | None:
    """The names whose sizes multiply to ``n``, each as often as it divides it, in the order of
    ``primes``; ``None`` when ``n`` is not such a product."""
    names = []
    for name, prime in primes.items():
        while n % prime == 0:
            n //= prime
            names.append(name)
    return names if n == 1 else None


def _check(layout: dict, step, names: dict[str, int]) -> None:
    """Raise unless ``layout`` gives ``step``'s strides, contiguity and kind at sizes ``names``."""
    strides = tuple(math.prod(names[n] for n in p) for p in layout["stride"])
    if (strides, layout["contiguous"], layout["kind"]) != (
        step.stride,
        step.contiguous,
        step.kind,
    ):
        raise ValueError(
            f"{step.expression} at sizes {names}: stride {step.stride}, contiguous "
            f"{step.contiguous}, kind {step.kind}, not {strides}, {layout['contiguous']}, "
            f"{layout['kind']}"
        )


def _page_sizes() -> tuple[int, int, int, int]:
    """(batch_size, seq_len, heads_num, head_size) of the walkthrough's run."""
    batch_size, seq_len, hidden_size = PAGE_RUN.x_shape
    return batch_size, seq_len, PAGE_RUN.heads_num, hidden_size // PAGE_RUN.heads_num


def _subsets(names: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Every non-empty subset of ``names``, each in the order of ``names``."""
    return [c for n in range(1, len(names) + 1) for c in itertools.combinations(names, n)]


def on_post_page(output: str, page, config, **kwargs) -> str:
    # After the search plugin has indexed page.content: the steps are not searchable text.
    if not EXPLORER.search(output):
        return output
    script = f'<script type="application/json" id="{DATA_ID}">{page_data_json(steps())}</script>'
    return output.replace("</head>", script + "</head>", 1)
