"""The site's build code is one package, ``mha_site``, imported one way everywhere: MkDocs loads it
as the plugin ``mha-site`` (an entry point), the root ``conftest.py`` and the tests import it."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import mha_site
from mha.checks import check_sizes
from mha_site import plugin

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(m.name for m in pkgutil.iter_modules(mha_site.__path__))


@pytest.mark.parametrize("name", MODULES)
def test_each_module_imports_and_its_docstring_examples_run(name):
    module = importlib.import_module(f"mha_site.{name}")
    # docstring_language's docstring shows a docstring of mha, example included: it runs too.
    result = doctest.testmod(module, extraglobs={"check_sizes": check_sizes})
    assert result.failed == 0, result


def test_every_module_is_loaded_once_under_its_package_name():
    folder = Path(mha_site.__file__).parent
    files = sorted(folder.rglob("*.py"))
    names = [
        ".".join(("mha_site", *p.relative_to(folder).with_suffix("").parts)).removesuffix(
            ".__init__"
        )
        for p in files
    ]
    for name in names:
        if not name.endswith("__main__"):
            importlib.import_module(name)
    loaded: dict[Path, list[str]] = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) and Path(module.__file__).resolve()
        if path in files:
            loaded.setdefault(path, []).append(name)
    for path, loaded_as in loaded.items():
        assert loaded_as == [names[files.index(path)]], (path, loaded_as)
    assert {n for n in names if not n.endswith("__main__")} <= {
        n for v in loaded.values() for n in v
    }


def test_mkdocs_finds_the_plugin_by_its_entry_point():
    (found,) = [e for e in entry_points(group="mkdocs.plugins") if e.name == "mha-site"]
    assert found.load() is plugin.Site


def test_the_plugin_registers_every_event_function_of_every_step_with_its_priority():
    site = plugin.Site()
    for step in plugin.STEPS:
        for name, function in vars(step).items():
            if name.startswith("on_") and callable(function):
                assert function in getattr(site, name).methods, (step.__name__, name)


def test_every_module_with_event_functions_is_a_step():
    for name in MODULES:
        module = importlib.import_module(f"mha_site.{name}")
        events = [n for n, f in vars(module).items() if n.startswith("on_") and callable(f)]
        assert not events or module in plugin.STEPS, (
            f"mha_site.{name} has {events}: add it to STEPS"
        )


# The one file whose job is to load a module from its path: the shape checker imports the reader's
# own file (``python -m mha.shapecheck path/to/model.py::MHA``), which is in no package.
LOADS_A_READERS_FILE = ROOT / "mha" / "shapecheck" / "target.py"


def test_no_code_loads_a_module_from_its_file_or_edits_the_import_path():
    assert "spec_from_file_location" in LOADS_A_READERS_FILE.read_text(encoding="utf-8")
    sources = [
        *ROOT.glob("*.py"),
        *(ROOT / "mha_site").rglob("*.py"),
        *(ROOT / "tests").rglob("*.py"),
    ]
    sources += [*(ROOT / "mha").rglob("*.py")]
    this = Path(__file__).resolve()
    for path in sources:
        if path.resolve() in (this, LOADS_A_READERS_FILE):
            continue
        text = path.read_text(encoding="utf-8")
        for banned in ("spec_from_file_location", "sys.path.insert", "sys.path.append"):
            assert banned not in text, f"{path.relative_to(ROOT)} uses {banned}: import the package"
