"""CONTRIBUTING.md stays true: every file and name it points to exists, and its scaffold command is
one the scaffold accepts."""

from __future__ import annotations

import re
import shlex

from mha_site import scaffold
from mha_site.checkers import CHECKERS
from mha_site.languages import ROOT

TEXT = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
# The files of the recipes' example (a chapter "alibi", a case "prefill"), which do not exist.
EXAMPLES = ("alibi", "prefill")
# The names the recipes add (a chapter, an option): a contributor who follows them must not
# collide with a test, so no test uses them for a planted chapter or option.
RECIPE_NAMES = ("alibi", "chunk_size")


def test_every_path_it_names_exists():
    paths = set(re.findall(r"`((?:mha|mha_site|docs|tests)/[\w./]*|[\w-]+\.(?:md|py|yml))`", TEXT))
    paths |= {f"mha_site/{p}" for p in re.findall(r"`(checkers/\w+\.py)`", TEXT)}
    assert len(paths) > 20, paths
    for path in sorted(paths):
        if any(example in path for example in EXAMPLES) or "*" in path:
            continue
        where = ROOT / path if "/" in path else next(ROOT.rglob(path), None)
        assert where is not None and where.exists(), f"CONTRIBUTING.md names {path}, which is gone"


def test_every_checker_it_names_is_registered():
    named = set(re.findall(r"`checkers/(\w+)\.py`", TEXT))
    assert named and named <= set(CHECKERS), named - set(CHECKERS)


def test_its_scaffold_command_is_accepted(monkeypatch):
    (line,) = [x for x in TEXT.splitlines() if "-m mha_site.scaffold" in x]
    argv = shlex.split(line)[3:]
    called = {}
    monkeypatch.setattr(scaffold, "scaffold", lambda *args: called.setdefault("args", args) and [])
    assert scaffold.main(argv) == 0
    assert called["args"] == ("alibi", "Linear biases", "线性偏置", "gqa", "alibi-slopes")


def test_no_other_test_reserves_the_names_the_recipes_add():
    """The scaffold's and the options checker's tests plant a chapter and an option of their own
    names: were they ``alibi`` and ``chunk_size``, following the recipe would break them."""
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        if path.name == "test_contributing.py":
            continue
        text = path.read_text(encoding="utf-8")
        for name in RECIPE_NAMES:
            assert f'"{name}' not in text, f"{path.name} uses the recipe's name {name!r}"
