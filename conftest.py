"""Sybil: every ```python block of the site (both languages) and every docstring example is a test."""

from doctest import ELLIPSIS, NORMALIZE_WHITESPACE

from sybil import Sybil
from sybil.parsers.markdown import ClearNamespaceParser, PythonCodeBlockParser, SkipParser
from sybil.parsers.rest import DocTestParser

OPTIONS = ELLIPSIS | NORMALIZE_WHITESPACE

docs = Sybil(
    parsers=[PythonCodeBlockParser(doctest_optionflags=OPTIONS), SkipParser(), ClearNamespaceParser()],
    path="docs",
    patterns=["*.md"],
)
docstrings = Sybil(parsers=[DocTestParser(optionflags=OPTIONS)], path="mha", patterns=["*.py"])

pytest_collect_file = (docs + docstrings).pytest()
