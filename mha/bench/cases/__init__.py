"""The cases: each module measures one thing, declares its progress steps and its results
sections, and writes its part of the printed report.

A case is a module with:

- ``SECTIONS``: the results file's sections it fills, each with its type (``list[Row]`` of a
  ``TypedDict``, or a number); ``mha.bench.results`` checks every file against them;
- ``steps(config) -> int``: how many progress steps its ``run`` takes (the run checks it);
- ``run(context) -> dict``: the measured sections, keyed as ``SECTIONS``;
- ``report(results) -> list[str]``: its lines of the printed report.

``CASES`` lists them in the order they run.
"""

from __future__ import annotations

from mha.bench.cases import (
    backward,
    decode,
    forward,
    generate,
    gqa,
    memory,
    mla,
    options,
    parallel,
    parts,
    rounding,
    transformers,
)
from mha.bench.context import Context

CASES = (
    forward,
    parts,
    backward,
    decode,
    generate,
    transformers,
    mla,
    gqa,
    options,
    memory,
    parallel,
    rounding,
)


def run(context: Context, cases=CASES) -> dict:
    """Every case's sections, measured in turn; each case must take the steps it declares."""
    sections = {}
    for case in cases:
        before = context.progress.done
        out = case.run(context)
        took = context.progress.done - before
        declared = case.steps(context.config)
        if took != declared:
            raise RuntimeError(f"{case.__name__} declared {declared} progress steps, took {took}")
        if set(out) != set(case.SECTIONS):
            raise RuntimeError(
                f"{case.__name__} returned {sorted(out)}, not {sorted(case.SECTIONS)}"
            )
        sections |= out
    return sections
