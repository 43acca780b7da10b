"""Consistency checkers: code that reads the pages and the package and reports where they disagree
(a shape comment that is false, a zh page that drifted from its en twin, a glossary term used
against the glossary, ...). They are code, not tests: ``make check`` runs them all in under a
minute (``python -m mha_site.checkers``), and the tests call them and check that each catches a
planted fault.

Each checker is a module with ``check() -> list[str]``: one line per problem, naming the file (and
line) and what to change; an empty list when all is well. ``CHECKERS`` registers them, in the order
``make check`` runs them.
"""

from __future__ import annotations

import importlib

CHECKERS: tuple[str, ...] = (
    "markers",
    "fences",
    "asserts",
    "code_width",
    "parity",
    "glossary",
    "prose_shapes",
    "notation_symbols",
    "shape_table",
    "api_languages",
    "shape_comments",
    "options",
)
"""The checker modules of this package, by name, in the order they run."""


def load(name: str):
    """The checker module ``name`` (one of ``CHECKERS``)."""
    if name not in CHECKERS:
        raise ValueError(f"checker must be one of {CHECKERS}, got {name!r}")
    return importlib.import_module(f"{__name__}.{name}")
