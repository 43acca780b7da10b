"""Sybil: every ```python block of the site (both languages), of the README, and every docstring
example is a test.

A ```python fence whose body is only ``--8<-- "file:section"`` lines is an *include*: MkDocs
replaces it with that named section of the real file (pymdownx.snippets). Sybil does not run
the directive as Python; it checks that the include resolves, exactly as the build resolves it,
to non-empty code that compiles. The included code itself is tested by the package's tests and
docstrings. ``tests/test_docs_fences.py`` checks that every python-looking fence is collected here.

The parsers of the pages and of the docstrings come from ``hooks/runnable.py``, which builds each
block's "Copy as a runnable script" at build time from the same parse: what a reader copies is what
these tests run.
"""

import re
import textwrap
from pathlib import Path

import markdown
import yaml
from sybil import Sybil
from sybil.parsers.markdown import SkipParser
from sybil.sybil import SybilCollection

from hooks.runnable import DOCTEST_OPTIONS as OPTIONS
from hooks.runnable import PythonOrIncludeBlockParser, docstring_parsers, markdown_parsers

ROOT = Path(__file__).resolve().parent
INCLUDE_TARGET = re.compile(r'--8<--[ \t]+"([^"\n]+)"')


def snippets_config() -> dict:
    """pymdownx.snippets' options as mkdocs.yml gives them, base paths made absolute."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    for extension in config["markdown_extensions"]:
        if isinstance(extension, dict) and "pymdownx.snippets" in extension:
            options = dict(extension["pymdownx.snippets"] or {})
            break
    else:
        raise LookupError("mkdocs.yml does not enable pymdownx.snippets")
    bases = options.get("base_path", ["."])
    options["base_path"] = [str(ROOT / b) for b in ([bases] if isinstance(bases, str) else bases)]
    return options


def check_include(example) -> None:
    """Resolve an include fence as the site build does; it must give code that compiles."""
    source = str(example.parsed)
    for target in INCLUDE_TARGET.findall(source):
        if re.search(r":\d", target):
            raise AssertionError(f"include {target!r} by line numbers: use a named section")
    md = markdown.Markdown(
        extensions=["pymdownx.snippets"], extension_configs={"pymdownx.snippets": snippets_config()}
    )
    lines = md.preprocessors["snippet"].run(source.splitlines())
    code = textwrap.dedent("\n".join(lines))
    if not code.strip():
        raise AssertionError(f"include renders empty: {source.strip()}")
    compile(code, source.strip(), "exec")


# Include-only fences are checked by `check_include` instead of being run.
python_blocks = PythonOrIncludeBlockParser(check_include, doctest_optionflags=OPTIONS)
docs = Sybil(parsers=markdown_parsers(check_include), path="docs", patterns=["*.md"])
docstrings = Sybil(parsers=docstring_parsers(), path="mha", patterns=["*.py"])
# The README's usage example is code a reader copies first: it runs too.
readme = Sybil(parsers=[python_blocks, SkipParser()], path=".", filenames=["README.md"])

pytest_collect_file = SybilCollection((docs, docstrings, readme)).pytest()
