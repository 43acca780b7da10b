"""The transformers versions mha supports: one range, stated where users read it, and the tests
that import transformers found wherever they do it, so that ``make test`` runs them at both ends of
the range (the pin in ``.venv/``, the newest release in ``.venv-newest/``)."""

from __future__ import annotations

import re

from support import ROOT, imports_transformers


def transformers_requirements() -> dict[str, str]:
    """Each extra of ``pyproject.toml`` that names transformers, with its version specifier
    (read as text: ``tomllib`` is Python 3.11's, and mha supports 3.10)."""
    text = (ROOT / "pyproject.toml").read_text()
    extras = text.split("[project.optional-dependencies]")[1].split("\n[")[0]
    found = {}
    for extra, body in re.findall(r"^(\w+) = \[(.*?)^\]", extras, re.MULTILINE | re.DOTALL):
        for specifier in re.findall(r'^\s*"transformers([^"]*)"', body, re.MULTILINE):
            found[extra] = specifier
    return found


def pinned_transformers() -> str:
    """The version ``requirements/constraints.txt`` pins transformers to."""
    pins = (ROOT / "requirements" / "constraints.txt").read_text()
    return re.search(r"^transformers==(\S+)$", pins, re.MULTILINE).group(1)


def test_every_extra_names_one_transformers_range_starting_at_the_pin():
    requirements = transformers_requirements()
    assert set(requirements) == {"test", "docs"}
    pin = pinned_transformers()
    major, minor, _ = pin.split(".")
    assert set(requirements.values()) == {f">={major}.{minor}"}


def test_the_readme_states_that_range_and_the_pin():
    readme = (ROOT / "README.md").read_text()
    (specifier,) = set(transformers_requirements().values())
    assert f"transformers `{specifier}`" in readme
    assert f"from\n{pinned_transformers()}, the pin" in readme or (
        f"from {pinned_transformers()}, the pin" in readme
    )
    assert f"transformers `{specifier}`：" in readme  # the Chinese sentence states it too


def test_a_test_module_that_imports_transformers_any_way_is_marked_for_both_versions():
    tests = ROOT / "tests"
    marked = {p.name for p in tests.glob("test_*.py") if imports_transformers(p)}
    # directly (from transformers import ...), by pytest's importorskip, and
    # through another test module (test_matrix imports test_transformers' builders)
    assert {"test_transformers.py", "test_swap.py", "test_llama.py", "test_matrix.py"} <= marked
    # those that only name transformers in prose are not
    assert "test_today.py" not in marked and "test_compat.py" not in marked
