"""Sybil: every ```python block of the site (both languages), of the README, and every docstring
example is a test.

A ```python fence whose body is only ``--8<-- "file:section"`` lines is an *include*: MkDocs
replaces it with that named section of the real file (pymdownx.snippets). Sybil does not run
the directive as Python; it checks that the include resolves, exactly as the build resolves it,
to non-empty code that compiles. The included code itself is tested by the package's tests and
docstrings. ``tests/test_docs_fences.py`` checks that every python-looking fence is collected here.

The Sybils come from ``mha_site.runnable``, which builds each block's "Copy as a runnable script"
at build time from the same parse: what a reader copies is what these tests run.
"""

from pathlib import Path

from sybil.sybil import SybilCollection

from mha_site.runnable import sybils

pytest_collect_file = SybilCollection(sybils(Path(__file__).resolve().parent)).pytest()
