"""Build step: code a reader can copy and paste, and run.

Two things go wrong when a reader copies a snippet with Material's copy button: a doctest-style
block (``>>>``) is copied with its prompts and its output lines, and a block from the middle of a
page needs names that earlier blocks defined. This hook fixes both at build time.

1. **Code only.** Material's copy button copies the ``data-copy`` attribute of the nearest
   element around the code when there is one (its supported override), else the code's text. For
   each doctest-style block the hook sets ``data-copy`` on the block's ``div.highlight`` to the
   code alone: prompts stripped, output and tracebacks dropped. Other blocks copy as they are.
2. **Copy as a runnable script.** Every Python block that Sybil runs gets a second button
   (``docs/assets/mha.js`` adds it beside Material's, with the icon this hook puts in the page's
   ``<head>``). It copies a script that runs on its own in a fresh interpreter: every Python block
   of the page above it, hidden set-up (``<!-- invisible-code-block: python -->``) included, in
   page order, since the last ``<!-- clear-namespace -->``, then the block itself. That is exactly
   what Sybil runs before the block, in the same namespace, so the script needs nothing else.

Pages and docstrings are read by the same Sybil parsers that run them as tests: the root
``conftest.py`` builds its Sybils from :func:`markdown_parsers` and :func:`docstring_parsers`, so
the scripts cannot drift from what the tests run, and ``tests/test_runnable.py`` runs every script.

Rules, for blocks that do not simply run:

- A doctest example that shows a ``Traceback`` raises that exception. In the block itself it
  stays bare, after a comment that says so: the script raises it, as the page shows. In the
  blocks above it (when a later block is copied) it is wrapped in ``try`` / ``except <Error>:
  pass``, so the script goes on; its effects up to the error are kept. A block must show its
  traceback last: code after the raising statement could not run, and the build warns.
- An include-only fence (``--8<-- "mha/x.py:section"``) shows the package's own code, which a
  script imports from ``mha``; Sybil only checks that the include resolves. It gets no runnable
  button and adds nothing to the scripts of later blocks. Its copy button copies the code shown.
- A block Sybil skips (``<!-- skip: ... -->``, conditional or not, or a ``# doctest: +SKIP``
  example) gets no runnable button, and what is skipped adds nothing to later scripts: the tests
  never ran it there.
- Docstring examples that mkdocstrings renders (the API page) are found in their module by the
  object heading above them. Sybil runs a module's docstring examples in the module's namespace,
  in file order, so their script starts with the module's imports and public names
  (``from mha.checks import check_input, check_sizes``), then the examples above them.
- ``>>> # comment`` lines, which Sybil and doctest do not collect, are not copied.

The scripts of a page share most of their text, so the page carries each distinct piece once,
in a ``<script type="application/json" id="__mha-runnable">`` in ``<head>``, and each block a
``data-mha-runnable`` list of piece numbers; the script is the pieces joined by a blank line
(:func:`join`), which ``mha.js`` repeats.
"""

from __future__ import annotations

import ast
import builtins
import doctest
import html
import importlib
import inspect
import json
import logging
import re
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from doctest import ELLIPSIS, NORMALIZE_WHITESPACE
from pathlib import Path
from urllib.parse import quote

from sybil import Document, Region, Sybil
from sybil.document import PythonDocStringDocument
from sybil.evaluators.skip import Skipper
from sybil.parsers.abstract import AbstractClearNamespaceParser
from sybil.parsers.markdown import ClearNamespaceParser, PythonCodeBlockParser, SkipParser
from sybil.parsers.rest import DocTestParser

from mha_site.docstring_language import comment_translations
from mha_site.languages import DEFAULT, page_language
from mha_site.markdown import INCLUDE_ONLY, include_targets, render_includes

log = logging.getLogger("mkdocs.plugins.mha_site.runnable")

DOCTEST_OPTIONS = ELLIPSIS | NORMALIZE_WHITESPACE

BUTTON_TITLE = {"en": "Copy as a runnable script", "zh": "复制为可运行脚本"}
# The first lines of a script whose block has code above it, and the line just before the block.
HEADER = {
    "en": "# The page's set-up and the blocks above the one you copied come first, in page\n"
    "# order: the site's tests run them the same way.",
    "zh": "# 本页的准备代码和你复制的代码块之前的各块按页面顺序排在前面，\n"
    "# 网站的测试也是这样运行的。",
}
DOCSTRING_HEADER = {
    "en": "# The docstring examples of {module} run in its namespace, in file order:\n"
    "# its imports and names come first, then the examples above this one.",
    "zh": "# {module} 的文档字符串示例在这个模块的命名空间里按文件顺序运行：\n"
    "# 先导入模块里的名字，再运行这个示例之前的各个示例。",
}
MARKER = {"en": "# The block you copied:", "zh": "# 你复制的代码块："}
RAISES = {
    "en": "# raises {error}, as the page shows",
    "zh": "# 这一行抛出 {error}，与页面所示相同",
}
SHOWN = {"en": "  # the error the page shows", "zh": "  # 页面上展示的错误"}

# Material's icon for the button, from the installed theme (never copied into this repository).
ICON = ".icons/material/clipboard-play-outline.svg"
DATA_ID = "__mha-runnable"


# -- Parsing: the parsers Sybil runs the pages with (the root conftest.py uses these) ----------


def is_include(region: Region) -> bool:
    """A code region whose body is only ``--8<--`` include directives."""
    return isinstance(region.parsed, str) and INCLUDE_ONLY.fullmatch(region.parsed) is not None


class PythonOrIncludeBlockParser(PythonCodeBlockParser):
    """Python code blocks run as usual; include-only blocks get ``include_evaluator``."""

    def __init__(self, include_evaluator: Callable | None = None, **options) -> None:
        super().__init__(**options)
        self.include_evaluator = include_evaluator

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in super().__call__(document):
            if is_include(region):
                region.evaluator = self.include_evaluator
            yield region


def markdown_parsers(include_evaluator: Callable | None = None) -> list:
    """The parsers of the site's pages: Python blocks (and includes), skips, namespace clears."""
    return [
        PythonOrIncludeBlockParser(include_evaluator, doctest_optionflags=DOCTEST_OPTIONS),
        SkipParser(),
        ClearNamespaceParser(),
    ]


def check_include(example) -> None:
    """Resolve an include fence as the site build does; it must give code that compiles."""
    source = str(example.parsed)
    for target in include_targets(source):
        if re.search(r":\d", target):
            raise AssertionError(f"include {target!r} by line numbers: use a named section")
    code = render_includes(source)
    if not code.strip():
        raise AssertionError(f"include renders empty: {source.strip()}")
    compile(code, source.strip(), "exec")


def sybils(root: Path) -> tuple[Sybil, ...]:
    """The Sybils of the pages (``docs/``), the docstrings (``mha/`` and the site's build code,
    ``mha_site/``) and the README, under ``root``: the root ``conftest.py`` collects them, and
    :func:`parse` reads pages the same way. Include-only fences are checked by
    :func:`check_include` instead of being run."""
    docs = Sybil(
        parsers=markdown_parsers(check_include), path=str(root / "docs"), patterns=["*.md"]
    )
    docstrings = [
        Sybil(parsers=docstring_parsers(), path=str(root / package), patterns=["*.py"])
        for package in ("mha", "mha_site")
    ]
    # The README's usage example is code a reader copies first: it runs too.
    readme_blocks = PythonOrIncludeBlockParser(check_include, doctest_optionflags=DOCTEST_OPTIONS)
    readme = Sybil(parsers=[readme_blocks, SkipParser()], path=str(root), filenames=["README.md"])
    return docs, *docstrings, readme


# -- A page's blocks, as Sybil runs them -------------------------------------------------------


@dataclass
class Statement:
    """What Sybil runs of a block: a code block whole, or one doctest example."""

    code: str  # without prompts or trailing newline
    raises: str | None = None  # the exception a doctest example shows: "RuntimeError"
    skipped: bool = False


@dataclass
class Block:
    """A Python block of a page: a fence, or a hidden ``invisible-code-block``."""

    start: int  # offsets in the page's Markdown
    end: int
    line: int
    visible: bool
    source: str  # the fence's body, as shown on the site
    namespace: int  # how many namespace clears come before it
    include: bool = False
    doctest: bool = False
    statements: list[Statement] = field(default_factory=list)

    @property
    def runnable(self) -> bool:
        """Gets a runnable button: shown, run by Sybil, nothing of it skipped."""
        return (
            self.visible
            and not self.include
            and bool(self.statements)
            and not any(s.skipped for s in self.statements)
        )

    def copy_text(self) -> str:
        """What the copy button copies: for a doctest block, the code only."""
        if self.doctest:
            return "\n".join(s.code for s in self.statements)
        return self.source.rstrip("\n")

    def problems(self) -> list[str]:
        raising = [i for i, s in enumerate(self.statements) if s.raises]
        if raising and raising[-1] != len(self.statements) - 1:
            return [
                f"line {self.line}: code after the example that raises "
                f"{self.statements[raising[-1]].raises} could not run in a script; "
                "show the traceback last, or in a block of its own"
            ]
        return []

    def as_earlier(self, lang: str) -> str:
        """The block in the script of a later block: raising examples wrapped, skips left out."""
        return as_earlier(self.statements, lang)

    def as_itself(self, lang: str) -> str:
        """The block in its own script: its last raising example stays bare and raises."""
        return as_itself(self.statements, lang)

    @property
    def raises(self) -> str | None:
        """The exception this block's own script ends with, or None."""
        return self.statements[-1].raises if self.statements else None


def as_earlier(statements: list[Statement], lang: str) -> str:
    return "\n".join(wrapped(s, lang) for s in statements if not s.skipped)


def as_itself(statements: list[Statement], lang: str) -> str:
    last = len(statements) - 1
    lines = []
    for i, s in enumerate(statements):
        if s.raises and i == last:
            lines.append(RAISES[lang].format(error=s.raises) + "\n" + s.code)
        else:
            lines.append(wrapped(s, lang))
    return "\n".join(lines)


def wrapped(statement: Statement, lang: str) -> str:
    if not statement.raises:
        return statement.code
    name = statement.raises
    caught = name if isinstance(getattr(builtins, name, None), type) else "Exception"
    body = textwrap.indent(statement.code, "    ")
    return f"try:\n{body}\nexcept {caught}:{SHOWN[lang]}\n    pass"


def exception_name(example: doctest.Example) -> str | None:
    """``RuntimeError`` for an example whose expected output is a traceback ending in it."""
    if example.exc_msg is None:
        return None
    return example.exc_msg.strip().split(":", 1)[0].strip() or "Exception"


def parse(text: str, path: str = "<page>") -> list[Block]:
    """A page's Python blocks in order, each with what Sybil runs of it."""
    parsers = markdown_parsers()
    document = Document(text, path)
    for parser in parsers:  # as sybil.Document.parse does
        for region in parser(document):
            document.add(region)
    blocks = []
    for fence in parsers[0].codeblock_parser(document):  # fences and hidden code blocks
        blocks.append(
            Block(
                start=fence.start,
                end=fence.end,
                line=text.count("\n", 0, fence.start) + 1,
                visible="directive" not in fence.lexemes,
                source=str(fence.lexemes["source"]),
                namespace=0,
            )
        )
    blocks.sort(key=lambda b: b.start)

    namespace = 0
    skip_next = skipping = False
    for _, region in document.regions:
        if isinstance(region.evaluator, Skipper):
            action, _reason = region.parsed
            skip_next = action == "next"
            skipping = action == "start"
            continue
        skipped = skip_next or skipping
        skip_next = False
        if region.evaluator is AbstractClearNamespaceParser.evaluate:
            namespace += 0 if skipped else 1
            continue
        block = next(b for b in blocks if b.start <= region.start < b.end)
        block.namespace = namespace
        if is_include(region):
            block.include = True
        elif isinstance(region.parsed, doctest.Example):
            block.doctest = True
            block.statements.append(statement(region.parsed, skipped))
        else:
            block.statements.append(Statement(str(region.parsed).rstrip("\n"), None, skipped))
    return blocks


def join(pieces: list[str], ids: list[int]) -> str:
    """A script from its pieces: mha.js does the same."""
    return "\n\n".join(pieces[i] for i in ids) + "\n"


@dataclass
class Scripts:
    """Runnable scripts of one page in one language, as pieces shared between blocks."""

    pieces: list[str] = field(default_factory=list)
    ids: dict = field(default_factory=dict)  # block (its index in ``parse`` order) -> pieces

    def add(self, key, parts: list[str]) -> None:
        numbers = []
        for text in parts:
            if text not in self.pieces:
                self.pieces.append(text)
            numbers.append(self.pieces.index(text))
        self.ids[key] = numbers

    def script(self, key) -> str:
        return join(self.pieces, self.ids[key])


def parts(header: str, above: list[str], itself: str, lang: str) -> list[str]:
    """A script's parts: the header, the code above (if any), the marker, the block."""
    above = [text for text in above if text.strip()]
    if not above:
        return [itself]
    return [header, *above, MARKER[lang], itself]


def scripts(blocks: list[Block], lang: str, into: Scripts | None = None) -> Scripts:
    """The script of every runnable block: the blocks above it (same namespace), then it."""
    result = into or Scripts()
    for index, block in enumerate(blocks):
        if block.runnable:
            above = [b.as_earlier(lang) for b in blocks[:index] if b.namespace == block.namespace]
            result.add(index, parts(HEADER[lang], above, block.as_itself(lang), lang))
    return result


# -- Docstring examples (the API page): run by Sybil in their module's namespace ---------------


def docstring_parsers() -> list:
    """The parsers of the package's docstrings (the root conftest.py uses these)."""
    return [DocTestParser(optionflags=DOCTEST_OPTIONS)]


@dataclass
class ModuleExamples:
    """The docstring examples of one module, as Sybil runs them: in file order, one namespace,
    the module's own."""

    name: str  # mha.checks
    imports: str  # what a script imports to stand in for the module's namespace
    groups: list[list[Statement]]  # the examples of each docstring that has some

    def find(self, codes: list[str], after: tuple[int, int] = (0, 0)) -> tuple[int, int] | None:
        """(docstring, first example) where ``codes`` appear in a row, preferring ``after``."""
        found = [
            (g, first)
            for g, group in enumerate(self.groups)
            for first in range(len(group))
            if [s.code for s in group[first : first + len(codes)]] == codes
        ]
        later = [place for place in found if place >= after]
        return (later or found or [None])[0]

    def script_parts(self, place: tuple[int, int], count: int, lang: str) -> list[str]:
        group, first = place
        statements = self.groups[group]
        above = [as_earlier(g, lang) for g in self.groups[:group]]
        above.append(as_earlier(statements[:first], lang))
        itself = as_itself(statements[first : first + count], lang)
        above = [text for text in above if text.strip()]
        header = DOCSTRING_HEADER[lang].format(module=self.name)
        return [header, self.imports, *above, MARKER[lang], itself]


def module_imports(source: str, name: str) -> str:
    """The module's imports (relative ones made absolute) and its public names."""
    tree = ast.parse(source)
    package = name.rpartition(".")[0]
    lines = []
    public = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            lines.append(ast.unparse(node))
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = ".".join(filter(None, [base, node.module]))
                node = ast.ImportFrom(module=module, names=node.names, level=0)
            lines.append(ast.unparse(node))
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            public = list(ast.literal_eval(node.value))
    if not public:
        public = [
            node.name
            for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and not node.name.startswith("_")
        ]
    if public:
        lines.append(f"from {name} import {', '.join(public)}")
    return "\n".join(lines)


def module_examples(path: Path, name: str, lang: str = DEFAULT) -> ModuleExamples:
    """The docstring examples of the module at ``path``, parsed as the root conftest.py does, their
    comments in ``lang`` as its API page shows them (``comment_translations``)."""
    document = PythonDocStringDocument.parse(str(path), *docstring_parsers())
    spans = [(start, end) for start, end, _ in document.extract_docstrings(document.text)]
    shown = comment_translations(document.text) if lang == "zh" else {}
    groups: dict[tuple[int, int], list[Statement]] = {}
    for _, region in document.regions:
        example = region.parsed
        span = next(span for span in spans if span[0] <= region.start < span[1])
        said = statement(example)
        said.code = shown.get(said.code, said.code)
        groups.setdefault(span, []).append(said)
    imports = module_imports(document.text, name)
    return ModuleExamples(name, imports, [groups[k] for k in sorted(groups)])


def statement(example: doctest.Example, skipped: bool = False) -> Statement:
    skipped = skipped or bool(example.options.get(doctest.SKIP))
    return Statement(example.source.rstrip("\n"), exception_name(example), skipped)


def example_codes(text: str) -> list[str]:
    """The code of each example of a doctest-style text, prompts stripped."""
    return [e.source.rstrip("\n") for e in doctest.DocTestParser().get_examples(text)]


def code_only(text: str) -> str:
    """The code of a doctest-style text: prompts stripped, output and tracebacks dropped."""
    return "\n".join(example_codes(text))


# -- The build ---------------------------------------------------------------------------------

HIGHLIGHT = re.compile(
    r'<div class="(?P<classes>(?:[^"]*\s)?highlight(?:\s[^"]*)?)"(?P<attributes>[^>]*)>'
    r"(?P<body>.*?<code[^>]*>(?P<code>.*?)</code>)",
    re.DOTALL,
)
TAG = re.compile(r"<[^>]+>")


def normalized(code: str) -> str:
    return "\n".join(line.rstrip() for line in code.strip("\n").splitlines())


def attribute(value: str) -> str:
    """An HTML attribute value; line breaks as ``&#10;``, so no other hook's regex sees them."""
    return html.escape(value, quote=True).replace("\n", "&#10;")


# mkdocstrings' heading of a documented object: <h2 id="mha.annotated.MHA" class="doc doc-heading">
OBJECT_HEADING = re.compile(r'<h[1-6]\b(?=[^>]*\bclass="doc doc-heading)[^>]*\bid="(?P<id>[\w.]+)"')


def module_of(object_id: str, root: Path) -> tuple[Path, str] | None:
    """The source file and module name of ``mha.annotated.MHA.forward``: the longest prefix
    that is a module under ``root``, or, for a name a package re-exports
    (``mha.parallel.ring_schedule``), the module under ``root`` that defines it
    (``mha/parallel/ring.py``, ``mha.parallel.ring``)."""
    parts = object_id.split(".")
    for end in range(len(parts), 0, -1):
        base = root.joinpath(*parts[:end])
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return _defined_in(path, parts[:end], parts[end:], root)
    return None


def _defined_in(path: Path, module: list[str], names: list[str], root: Path) -> tuple[Path, str]:
    """Where ``names`` of ``module`` (found at ``path``) are defined: a package's ``__init__.py``
    re-exports what its modules define, and its ``__module__`` may name the package (the API
    page's anchors), so the source file says."""
    if path.name != "__init__.py" or not names:
        return path, ".".join(module)
    found = getattr(importlib.import_module(".".join(module)), names[0], None)
    try:
        source = Path(inspect.getsourcefile(inspect.unwrap(found)) or "").resolve()
    except TypeError:  # not a class or function: a constant, say
        return path, ".".join(module)
    if not source.is_file() or not source.is_relative_to(root.resolve()):
        return path, ".".join(module)
    dotted = source.relative_to(root.resolve()).with_suffix("").parts
    return source, ".".join(dotted[:-1] if dotted[-1] == "__init__" else dotted)


def annotate(
    page_html: str, blocks: list[Block], lang: str, root: Path | None = None
) -> tuple[str, dict | None, list]:
    """Give the rendered blocks their copy text and script pieces.

    Page blocks are found in order by their code as written; other doctest-style blocks are
    docstring examples of the object whose mkdocstrings heading comes before them (in a module
    under ``root``). Returns the HTML, the page's data for mha.js (None if no block is runnable)
    and the page's visible blocks whose rendering was not found."""
    expected = [(i, b) for i, b in enumerate(blocks) if b.visible and not b.include]
    runnable = scripts(blocks, lang)
    headings = [(m.start(), m["id"]) for m in OBJECT_HEADING.finditer(page_html)]
    position = 0
    last_place: dict[str, tuple[int, int]] = {}

    def docstring_script(at: int, codes: list[str]) -> str | None:
        """The piece numbers of the script of a docstring example block, or None."""
        owner = [object_id for start, object_id in headings if start < at]
        found = module_of(owner[-1], root) if owner and root and codes else None
        if not found:
            return None
        module = module_examples(*found, lang)
        place = module.find(codes, last_place.get(module.name, (0, 0)))
        if place is None:
            return None
        last_place[module.name] = place
        key = ("docstring", at)
        runnable.add(key, module.script_parts(place, len(codes), lang))
        return " ".join(map(str, runnable.ids[key]))

    def replace(match: re.Match) -> str:
        nonlocal position
        shown = html.unescape(TAG.sub("", match["code"]))
        extra = ""
        if position < len(expected) and normalized(shown) == normalized(
            expected[position][1].source
        ):
            index, block = expected[position]
            position += 1
            if block.doctest:
                extra += f' data-copy="{attribute(block.copy_text())}"'
            if index in runnable.ids:
                numbers = " ".join(map(str, runnable.ids[index]))
                extra += f' data-mha-runnable="{numbers}"'
        elif shown.lstrip().startswith(">>>") and "data-copy=" not in match["attributes"]:
            codes = example_codes(shown)
            extra += f' data-copy="{attribute(chr(10).join(codes))}"'
            numbers = docstring_script(match.start(), codes)
            if numbers:
                extra += f' data-mha-runnable="{numbers}"'
        if not extra:
            return match[0]
        return f'<div class="{match["classes"]}"{match["attributes"]}{extra}>{match["body"]}'

    page_html = HIGHLIGHT.sub(replace, page_html)
    missing = [block for _, block in expected[position:]]
    data = None
    if runnable.ids:
        data = {"title": BUTTON_TITLE[lang], "pieces": runnable.pieces}
    return page_html, data, missing


_page_data: dict[str, dict] = {}


def on_page_content(html_text: str, page, config, **kwargs) -> str:
    path = page.file.abs_src_path
    if not path or not path.endswith(".md"):
        return html_text
    text = Path(path).read_text(encoding="utf-8")
    blocks = parse(text, path)
    for block in blocks:
        for problem in block.problems():
            log.warning("%s: %s", page.file.src_uri, problem)
    root = Path(config.config_file_path).parent  # mkdocstrings' paths: ["."]
    html_text, data, missing = annotate(html_text, blocks, page_language(page), root)
    for block in missing:
        log.warning(
            "%s: line %d: the rendered code of this python block is not on the page as written; "
            "it gets no copy text and no runnable button",
            page.file.src_uri,
            block.line,
        )
    if data:
        _page_data[page.file.abs_dest_path] = data
    else:
        _page_data.pop(page.file.abs_dest_path, None)
    return html_text


def icon_style(config) -> str:
    for directory in config.theme.dirs:
        svg = Path(directory) / ICON
        if svg.is_file():
            url = "data:image/svg+xml;charset=utf-8," + quote(
                svg.read_text(encoding="utf-8").replace("\n", ""), safe=""
            )
            return (
                f":root{{--mha-runnable-icon:url('{url}')}}"
                ".md-code__button[data-mha-type=runnable]:after{"
                "-webkit-mask-image:var(--mha-runnable-icon);mask-image:var(--mha-runnable-icon)}"
            )
    log.warning("the theme has no %s for the runnable-script button", ICON)
    return ""


def page_data_json(data: dict) -> str:
    """JSON that cannot end its ``<script>`` element early."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def on_post_page(output: str, page, config, **kwargs) -> str:
    # After the search plugin has indexed page.content: the scripts are not searchable text.
    data = _page_data.pop(page.file.abs_dest_path, None)
    if not data:
        return output
    head = (
        f"<style>{icon_style(config)}</style>"
        f'<script type="application/json" id="{DATA_ID}">{page_data_json(data)}</script>'
    )
    return output.replace("</head>", head + "</head>", 1)
