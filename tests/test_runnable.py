"""The "Copy as a runnable script" scripts run on their own, and copies hold code only.

``mha_site/runnable.py`` builds, for every Python block of the site that Sybil runs, a script: the
page's blocks above it (hidden set-up included) and then the block. Here every script of both
languages runs in a fresh namespace, a block that shows a traceback raises that exception, one
script per page runs outside the repository in a process of its own (forked from a fresh
interpreter that imported only torch), and the built site carries exactly these scripts.
The rules themselves (prompts, tracebacks, includes, skips, namespace clears) are checked on
small pages written here.
"""

from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys
import unittest
from dataclasses import dataclass
from functools import cache
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support import LANGUAGES, ROOT, page_path
from sybil import Sybil

from mha_site.runnable import (
    BUTTON_TITLE,
    DATA_ID,
    HEADER,
    MARKER,
    code_only,
    join,
    markdown_parsers,
    module_examples,
    normalized,
    parse,
    parts,
    scripts,
)

PAGES = sorted(p for lang in LANGUAGES for p in (ROOT / "docs" / lang).glob("*.md"))


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT / "docs"))


def language(page: Path) -> str:
    return page.parent.name


@cache
def runnable_blocks(page: Path):
    """(blocks, scripts) of a page, parsed as the build parses it."""
    blocks = parse(page.read_text(encoding="utf-8"), str(page))
    return blocks, scripts(blocks, language(page))


def run_expecting(
    script: str, name: str, raises: str | None, namespace: dict | None = None
) -> None:
    """exec the script in ``namespace`` (a fresh one by default); it raises ``raises`` (by name)
    or nothing."""
    namespace = {"__name__": "__main__"} if namespace is None else namespace
    code = compile(script, name, "exec")
    if raises is None:
        exec(code, namespace)
        return
    with pytest.raises(Exception) as caught:
        exec(code, namespace)
    assert type(caught.value).__name__ == raises.rsplit(".", 1)[-1], caught.value


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_runnable_script_runs_in_a_fresh_namespace(page):
    """Every script of the page, each as if in a fresh namespace, in one pass per namespace.

    A block's script is the header, the blocks above it in its namespace (``as_earlier``), the
    marker, and the block itself (``as_itself``); header and marker are comments. So the scripts of
    a namespace share their beginnings: running its blocks in order in one fresh namespace runs
    each script exactly, one block after another, instead of running the first blocks again for
    every later script. The text run is checked to be each script's code, so what runs here is
    what a reader copies.
    """
    blocks, page_scripts = runnable_blocks(page)
    lang = language(page)
    namespaces: dict[int, dict] = {}
    above: dict[int, list[str]] = {}
    for index, block in enumerate(blocks):
        namespace = namespaces.setdefault(block.namespace, {"__name__": "__main__"})
        earlier = above.setdefault(block.namespace, [])
        if index not in page_scripts.ids:
            run_expecting(block.as_earlier(lang), f"{page_id(page)}:{block.line}", None, namespace)
            earlier.append(block.as_earlier(lang))
            continue
        itself = block.as_itself(lang)
        pieces = parts(HEADER[lang], earlier, itself, lang)
        expected = join(pieces, list(range(len(pieces))))
        assert page_scripts.script(index) == expected, f"{page_id(page)}:{block.line}"
        run_expecting(itself, f"{page_id(page)}:{block.line}", block.raises, namespace)
        earlier.append(block.as_earlier(lang))


def sample() -> list[tuple[Path, int]]:
    """One script per page, the last of the page (the longest), languages taking turns; and the
    first script that ends in a traceback."""
    chosen = []
    for number, name in enumerate(sorted({p.name for p in PAGES})):
        page = ROOT / "docs" / LANGUAGES[number % len(LANGUAGES)] / name
        _, page_scripts = runnable_blocks(page)
        if page_scripts.ids:
            chosen.append((page, max(page_scripts.ids)))
    for page in PAGES:
        blocks, page_scripts = runnable_blocks(page)
        raising = [i for i in page_scripts.ids if blocks[i].raises]
        if raising:
            chosen.append((page, raising[0]))
            break
    return chosen


# A fresh interpreter that imports torch, the one slow import, and the modules of transformers the
# scripts import (seconds each, again in every script otherwise; nothing of mha or the tests), and
# then runs each script it is given (a path a line, on stdin) in a process forked from itself, one
# per core at a time: as ``python script.py`` would, with the script's folder first on
# ``sys.path``, its output in ``script.out``, a traceback and exit status 1 if it raises. It
# answers "status path" for each.
FORKING_INTERPRETER = """
import importlib, os, re, runpy, sys, traceback
import torch

scripts = sys.stdin.read().splitlines()
imported = re.compile(r"^(?:from|import) (transformers[\\w.]*)", re.M)
for name in sorted({m for s in scripts for m in imported.findall(open(s).read())}):
    importlib.import_module(name)

def run(script):
    out = os.open(script[:-3] + ".out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(out, 1)
    os.dup2(out, 2)
    sys.argv, sys.path[0], status = [script], os.path.dirname(script), 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as done:
        status = done.code if isinstance(done.code, int) else 1
    except BaseException:
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)

def answer():
    pid, status = os.wait()
    print(os.waitstatus_to_exitcode(status), running.pop(pid), flush=True)

running = {}
for script in scripts:
    if len(running) == (os.cpu_count() or 2):
        answer()
    pid = os.fork()
    if pid == 0:
        run(script)
    running[pid] = script
while running:
    answer()
"""


def run_in_fresh_interpreters(cases: list[tuple[Path, int]], directory: Path) -> list[str]:
    """Run each script outside the repository in a process of its own, forked from a fresh
    interpreter that has imported torch and the scripts' modules of transformers, nothing of
    ``mha`` or the tests (``python script.py`` would import them again for each, seconds each);
    what went wrong, one line per script."""
    scripts = []
    for page, index in cases:
        blocks, page_scripts = runnable_blocks(page)
        where = f"{page_id(page)}:{blocks[index].line}"
        script = directory / f"{where.replace('/', '_').replace(':', '_')}.py"
        script.write_text(page_scripts.script(index), encoding="utf-8")
        scripts.append((script, where, blocks[index].raises))
    # mha is importable as the installed package; ROOT on the path covers a checkout without it.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", FORKING_INTERPRETER],
        input="".join(f"{script}\n" for script, _, _ in scripts),
        cwd=directory,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    statuses = dict(reversed(line.split(" ", 1)) for line in done.stdout.splitlines())
    failures = []
    for script, where, raises in scripts:
        status = statuses[str(script)]
        output = script.with_suffix(".out").read_text(encoding="utf-8")
        last = (output.strip().splitlines() or [""])[-1]
        if raises is None and status != "0":
            failures.append(f"{where} failed:\n{output[-2000:]}")
        if raises is not None and not (status == "1" and last.startswith(raises + ":")):
            failures.append(f"{where} should raise {raises}; exit {status}:\n{output[-2000:]}")
    return failures


@pytest.mark.slow  # a fresh interpreter per script: about 35 s
def test_sample_scripts_run_in_a_fresh_interpreter(tmp_path):
    """Each in a process of its own, outside the repository (``run_in_fresh_interpreters``)."""
    chosen = sample()
    assert len(chosen) >= 10, chosen
    failures = run_in_fresh_interpreters(chosen, tmp_path)
    assert not failures, "\n\n".join(failures)


def test_every_page_block_is_runnable_or_an_include():
    """Skips would lose their button: today no page skips a block, and every shown block that
    is not an include gets a script."""
    for page in PAGES:
        blocks, page_scripts = runnable_blocks(page)
        for index, block in enumerate(blocks):
            if block.visible and not block.include:
                assert index in page_scripts.ids, f"{page_id(page)}:{block.line} has no script"
            for problem in block.problems():
                pytest.fail(f"{page_id(page)}: {problem}")


# The built site carries these scripts, and copy texts without prompts.


@dataclass
class Rendered:
    attributes: dict
    code: str = ""


class CodeBlocks(HTMLParser):
    """The page's ``div.highlight`` blocks (attributes and code) and the runnable data."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks: list[Rendered] = []
        self.data = None
        self._in_data = self._in_code = self._want_code = False

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "div" and "highlight" in (attributes.get("class") or "").split():
            self.blocks.append(Rendered(attributes))
            self._want_code = True  # the block's first <code>
        elif tag == "code" and self._want_code:
            self._in_code, self._want_code = True, False
        self._in_data = tag == "script" and attributes.get("id") == DATA_ID

    def handle_endtag(self, tag):
        self._in_code = self._in_code and tag != "code"

    def handle_data(self, data):
        if self._in_data:
            self.data = json.loads(data)
            self._in_data = False
        elif self._in_code:
            self.blocks[-1].code += data


def built_blocks(site: Path, page: Path) -> CodeBlocks:
    html_file = site / page_path(language(page), page.name) / "index.html"
    parser = CodeBlocks()
    parser.feed(html_file.read_text(encoding="utf-8"))
    return parser


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_built_page_carries_the_scripts_and_copy_texts(built_site, page):
    """Each block of the page, found on the built page in order: its copy text (doctest blocks)
    and its script are the ones computed here; a docstring example (API page) copies without
    prompts and its script runs, raising what the docstring shows."""
    blocks, page_scripts = runnable_blocks(page)
    built = built_blocks(built_site, page)
    pending = [(i, b) for i, b in enumerate(blocks) if b.visible and not b.include]
    docstring_examples = 0
    for rendered in built.blocks:
        attributes = rendered.attributes
        ids = [int(i) for i in attributes.get("data-mha-runnable", "").split()]
        if pending and normalized(rendered.code) == normalized(pending[0][1].source):
            index, block = pending.pop(0)
            assert attributes.get("data-copy") == (block.copy_text() if block.doctest else None)
            assert join(built.data["pieces"], ids) == page_scripts.script(index), block.line
        elif rendered.code.lstrip().startswith(">>>"):
            docstring_examples += 1
            assert attributes["data-copy"] == code_only(rendered.code), rendered.code
            assert ">>>" not in attributes["data-copy"], attributes["data-copy"]
            assert ids, f"a docstring example without a runnable script:\n{rendered.code}"
            shown = doctest.DocTestParser().get_examples(rendered.code)
            raises = shown[-1].exc_msg.split(":", 1)[0].strip() if shown[-1].exc_msg else None
            run_expecting(join(built.data["pieces"], ids), rendered.code[:60], raises)
        else:
            assert not ids and "data-copy" not in attributes, rendered.code
    assert not pending, f"blocks not found on the built page: {[b.line for _, b in pending]}"
    if page.name == "api.md":
        assert docstring_examples >= 5, docstring_examples
    if page_scripts.ids or docstring_examples:
        assert built.data["title"] == BUTTON_TITLE[language(page)]
    else:
        assert built.data is None


# The rules, on small pages.

PAGE = """# Page

<!-- invisible-code-block: python
import math
-->

```python
>>> x = math.sqrt(16)
>>> x
4.0
>>> for i in range(2):
...     x += i
>>> int("four")
Traceback (most recent call last):
...
ValueError: invalid literal for int() with base 10: 'four'
```

```python
>>> y = x * 2
>>> math.floor("a")
Traceback (most recent call last):
...
TypeError: must be real number, not str
```

```python
--8<-- "mha/pure.py:all"
```

<!-- skip: next "not on this machine" -->

```python
z = 1 / 0
```

```python
assert y == 10.0, y
```

<!-- clear-namespace -->

```python
import math

w = math.pi
```
"""


def test_the_small_page_passes_under_sybil(tmp_path):
    """The rules below are about a page that Sybil itself passes, run with the same parsers."""
    page = tmp_path / "page.md"
    page.write_text(PAGE, encoding="utf-8")
    document = Sybil(parsers=markdown_parsers(lambda example: None)).parse(page)
    skipped = 0
    for example in document:
        try:
            example.evaluate()
        except unittest.SkipTest:
            skipped += 1
    assert skipped == 1, skipped


def test_prompts_and_output_are_not_copied():
    blocks = parse(PAGE)
    assert blocks[1].copy_text() == (
        'x = math.sqrt(16)\nx\nfor i in range(2):\n    x += i\nint("four")'
    )
    assert ">>>" not in blocks[2].copy_text() and "Traceback" not in blocks[2].copy_text()
    assert blocks[5].copy_text() == "assert y == 10.0, y"  # a plain block copies as it is
    assert code_only(">>> a = 1\n>>> a\n1\n>>> if a:\n...     a\n1\n") == "a = 1\na\nif a:\n    a"


def test_kinds_of_blocks():
    blocks = parse(PAGE)
    assert [b.visible for b in blocks] == [False, True, True, True, True, True, True]
    assert [b.include for b in blocks] == [False, False, False, True, False, False, False]
    assert [b.namespace for b in blocks] == [0, 0, 0, 0, 0, 0, 1]
    assert [s.raises for s in blocks[2].statements] == [None, "TypeError"]
    page_scripts = scripts(blocks, "en")
    # the include and the skipped block get no script; hidden blocks get no button
    assert sorted(page_scripts.ids) == [1, 2, 5, 6]


def test_a_traceback_is_raised_by_its_block_and_caught_above_later_blocks():
    blocks = parse(PAGE)
    page_scripts = scripts(blocks, "en")
    own = page_scripts.script(2)
    assert own.startswith(HEADER["en"]) and MARKER["en"] in own
    assert '# raises TypeError, as the page shows\nmath.floor("a")\n' in own
    run_expecting(own, "own", "TypeError")
    run_expecting(page_scripts.script(1), "first", "ValueError")
    later = page_scripts.script(5)
    assert 'try:\n    int("four")\nexcept ValueError:' in later
    assert 'try:\n    math.floor("a")\nexcept TypeError:' in later
    assert "1 / 0" not in later, "a skipped block adds nothing"
    assert "--8<--" not in later, "an include adds nothing"
    run_expecting(later, "later", None)
    # after a namespace clear, a script starts over
    assert page_scripts.script(6) == "import math\n\nw = math.pi\n"


def test_zh_scripts_differ_only_in_comments():
    blocks = parse(PAGE)
    en, zh = scripts(blocks, "en"), scripts(blocks, "zh")
    assert zh.script(2).startswith(HEADER["zh"])
    assert "# 这一行抛出 TypeError，与页面所示相同" in zh.script(2)

    def code(text):
        return [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]

    assert code(en.script(5).replace("  # the error the page shows", "")) == code(
        zh.script(5).replace("  # 页面上展示的错误", "")
    )


def test_code_after_a_traceback_in_the_same_block_is_reported():
    text = (
        "```python\n>>> 1 / 0\nTraceback (most recent call last):\n"
        "ZeroDivisionError: division by zero\n>>> 2\n2\n```\n"
    )
    (block,) = parse(text)
    assert block.problems() and "show the traceback last" in block.problems()[0]


def test_docstring_examples_run_in_their_module_namespace(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "mod.py").write_text(
        '''"""A module.

>>> twice(2)
4
"""

from __future__ import annotations

import math
from .helpers import helper

__all__ = ["twice"]


def twice(x):
    """Twice ``x``.

    >>> y = twice(math.pi)
    >>> twice("a") - 1
    Traceback (most recent call last):
    ...
    TypeError: unsupported operand type(s) for -: 'str' and 'int'
    """
    return 2 * x
''',
        encoding="utf-8",
    )
    module = module_examples(package / "mod.py", "pkg.mod")
    assert (
        module.imports == "import math\nfrom pkg.helpers import helper\nfrom pkg.mod import twice"
    )
    assert [[s.code for s in group] for group in module.groups] == [
        ["twice(2)"],
        ["y = twice(math.pi)", 'twice("a") - 1'],
    ]
    place = module.find(['twice("a") - 1'])
    assert place == (1, 1)
    parts = module.script_parts(place, 1, "en")
    script = join(parts, list(range(len(parts))))
    assert script.endswith(
        "twice(2)\n\ny = twice(math.pi)\n\n# The block you copied:\n\n"
        '# raises TypeError, as the page shows\ntwice("a") - 1\n'
    ), script
