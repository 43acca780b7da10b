"""The pytest plugin of ``mha.shapecheck``: a test suite fails when a shape comment drifts.

Installed with ``mha`` (the ``pytest11`` entry point ``shapecheck``), or named in a
``conftest.py`` when ``mha`` is not installed as a package: ``pytest_plugins =
["mha.shapecheck.pytest_plugin"]``. Two ways to use it, each failing with the command's report:

- ``pytest --shapecheck "model.py::MHA"``: one more test per ``--shapecheck`` (repeatable), its
  value the arguments of ``python -m mha.shapecheck`` (``"model.py::MHA --init 'hidden_size=24,
  heads_num=6'"``);
- the fixture ``shapecheck``, a test of one's own: ``def test_shapes(shapecheck):
  shapecheck("model.py::MHA")``, with the arguments of ``mha.shapecheck.check``.

A test fails when a comment is wrong, when the target could not be run, and when nothing was
checked (a check of no comment proves nothing); comments not checked are listed in the report of
a failure, and do not fail on their own. Comments that look like a shape but are not understood
(``# b t d_ff``) are listed in a failure's report too, and a test that passes warns with them
(``ShapecheckWarning``): none is silent.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

import pytest

OPTION = "--shapecheck"


class ShapecheckFailure(Exception):
    """A check that is not ok; its message is the report."""


class ShapecheckWarning(UserWarning):
    """A check that passed with comments it did not understand; its message lists them."""


def _warn_unread(report: Any) -> None:
    """Warn with the comments ``report`` did not understand, if any (a check that passed)."""
    if report.not_understood:
        import warnings

        listed = "\n".join(str(f) for f in report.not_understood)
        count = len(report.not_understood)
        warnings.warn(
            ShapecheckWarning(f"{report.target}: {count} not understood:\n{listed}"), stacklevel=3
        )


def _arguments(value: str) -> argparse.Namespace:
    from mha.shapecheck.__main__ import parser

    command = parser()
    command.exit_on_error = False
    try:
        return command.parse_args(shlex.split(value))
    except (argparse.ArgumentError, SystemExit, ValueError) as error:
        raise pytest.UsageError(
            f"{OPTION} must be the arguments of python -m mha.shapecheck, such as "
            f"\"model.py::MHA --init 'hidden_size=24, heads_num=6'\", got {value!r} ({error})"
        ) from None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("shapecheck", "shape comments (mha.shapecheck)")
    group.addoption(
        OPTION,
        action="append",
        default=[],
        metavar="TARGET",
        help="check the shape comments of PATH::NAME against a run of it; the value takes the "
        "options of python -m mha.shapecheck (\"model.py::MHA --sizes 'nh=n_head'\"); repeatable",
    )


def pytest_configure(config: pytest.Config) -> None:
    for value in config.getoption(OPTION):
        _arguments(value)  # a bad value stops the session before any test runs


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    for value in config.getoption(OPTION):
        name = f"shapecheck[{value}]"  # its id too: no file holds this test
        items.append(ShapecheckItem.from_parent(session, name=name, nodeid=name, value=value))


class ShapecheckItem(pytest.Item):
    """The test ``--shapecheck VALUE`` adds."""

    def __init__(self, *, value: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.value = value

    def runtest(self) -> None:
        from mha.shapecheck.__main__ import run

        try:
            report = run(_arguments(self.value))
        except (TypeError, ValueError) as error:
            raise ShapecheckFailure(str(error)) from None
        if not report.ok:
            raise ShapecheckFailure(report.text())
        _warn_unread(report)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style=None) -> Any:
        if isinstance(excinfo.value, ShapecheckFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, self.name


@pytest.fixture
def shapecheck():
    """``shapecheck(target, init=None, inputs=None, sizes=None)``: ``mha.shapecheck.check``,
    failing the test with the report unless it is ok; returns the report."""
    from mha.shapecheck import check

    def run(target: Any, init: Any = None, inputs: Any = None, sizes: Any = None) -> Any:
        report = check(target, init=init, inputs=inputs, sizes=sizes)
        if not report.ok:
            pytest.fail(report.text(), pytrace=False)
        _warn_unread(report)
        return report

    return run
