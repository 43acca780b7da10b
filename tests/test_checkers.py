"""``make check`` (``python -m mha_site.checkers``) runs every consistency checker of the package:
none is left out, a problem fails the command, and an unknown name gets a clear error."""

from __future__ import annotations

import pkgutil

import pytest

from mha_site import checkers
from mha_site.checkers import __main__ as command


def test_every_checker_module_is_registered_and_has_check():
    modules = {m.name for m in pkgutil.iter_modules(checkers.__path__)} - {"__main__"}
    assert modules == set(checkers.CHECKERS)
    for name in checkers.CHECKERS:
        assert callable(checkers.load(name).check), name


def test_the_command_prints_each_problem_and_fails_on_any(monkeypatch, capsys):
    assert command.main(["markers"]) == 0
    assert capsys.readouterr().out.startswith("markers ")
    monkeypatch.setattr(checkers.load("markers"), "check", lambda: ["docs/en/x.md: planted"])
    assert command.main(["markers"]) == 1
    assert "  - docs/en/x.md: planted" in capsys.readouterr().out


def test_an_unknown_checker_is_named_in_the_error():
    with pytest.raises(ValueError, match=r"checker must be one of .*'markers'.*, got 'nope'"):
        checkers.load("nope")
