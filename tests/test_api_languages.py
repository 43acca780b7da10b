"""The API reference describes every parameter in both languages, and the zh page in Chinese.

The docstrings of ``mha`` are bilingual: English, then a last section ``中文:`` that says
the same in Chinese with the titles 参数, 返回, 引发 and 属性 (``mha_site/docstring_language.py``,
which also picks the page's language at build time). For every public callable the API
page documents (each ``:::`` object of ``docs/en/api.md``, and the public methods a
class defines, such as ``forward``; a class's ``__init__`` is merged into it), read its
signature with ``inspect.signature`` and check, in each language:

- a summary, and every parameter of the signature (``self`` aside) described, none extra;
- a Returns section when the callable returns something;
- the same exception types under Raises, in the same order;
- the Chinese in Chinese: every description has Chinese characters and no English phrase (three
  Latin words in a row, code aside), and uses the glossary's terms; the English without Chinese;
- the examples written once, in the English part, and shown on both pages.

The checker reads the docstrings as the build does (``in_language``, then griffe's Google parser);
mutated docstrings show it failing. The built pages ``api/`` and ``zh/api/`` are checked too: each
object's parameter table lists the signature's parameters, in the page's language.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import griffe
import pytest
from test_glossary import GLOSSARY, ZH, find_avoided, parse_glossary

ROOT = Path(__file__).resolve().parents[1]
LANGUAGES = ("en", "zh")
CJK = re.compile("[\u3400-\u9fff]")
DIRECTIVE = re.compile(r"^:::[ \t]+(\S+)", re.MULTILINE)
CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
LINK_TARGET = re.compile(r"\]\[[^\]]*\]")
# Three Latin words in a row: an English phrase (a name such as ``MHA`` or ``dtype`` is one word).
ENGLISH_PHRASE = re.compile(r"[A-Za-z][\w'’-]*(?:[ \t\n,;:()]+[A-Za-z][\w'’-]*){2,}")
NO_RETURN = (None, "None", type(None), inspect.Signature.empty)


from mha_site import docstring_language as hook  # noqa: E402


@dataclass
class Documented:
    """A callable as the API page documents it."""

    name: str  # mha.annotated.MHA.forward
    obj: object
    signature: inspect.Signature
    docstring: str


def api_identifiers(lang: str = "en") -> list[str]:
    return DIRECTIVE.findall((ROOT / "docs" / lang / "api.md").read_text(encoding="utf-8"))


def resolve(identifier: str) -> object:
    """The object named by a dotted path such as ``mha.annotated.MHA``."""
    parts = identifier.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            obj = getattr(obj, attribute)
        return obj
    raise LookupError(identifier)


def public_methods(cls: type) -> list[str]:
    """The public functions ``cls`` defines itself (not those it inherits from ``nn.Module``)."""
    return [
        name
        for name, member in vars(cls).items()
        if not name.startswith("_") and inspect.isfunction(member)
    ]


def documented() -> list[Documented]:
    """Every callable the API page documents: its ``:::`` objects and their public methods."""
    found = []
    for identifier in api_identifiers():
        obj = resolve(identifier)
        found.append(Documented(identifier, obj, inspect.signature(obj), obj.__doc__ or ""))
        if inspect.isclass(obj):
            for name in public_methods(obj):
                method = vars(obj)[name]
                signature = inspect.signature(method)
                signature = signature.replace(
                    parameters=[p for n, p in signature.parameters.items() if n != "self"]
                )
                found.append(
                    Documented(f"{identifier}.{name}", method, signature, method.__doc__ or "")
                )
    return found


DOCUMENTED = documented()


@dataclass
class Described:
    """What one language of a docstring says: the parts mkdocstrings renders."""

    summary: str = ""
    text: list[str] = field(default_factory=list)  # summary and description paragraphs
    params: dict[str, str] = field(default_factory=dict)
    returns: list[str] = field(default_factory=list)
    raises: list[tuple[str, str]] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)

    def prose(self) -> list[tuple[str, str]]:
        """Every piece of prose, named: ``("param x", "输入序列……")``."""
        return (
            [("summary", t) for t in self.text]
            + [(f"parameter {n}", d) for n, d in self.params.items()]
            + [("returns", d) for d in self.returns]
            + [(f"raises {t}", d) for t, d in self.raises]
        )


def describe(docstring: str, language: str) -> Described:
    """``docstring`` as the API page of ``language`` shows it, parsed by griffe (Google style)."""
    shown = hook.in_language(inspect.cleandoc(docstring), language)
    described = Described()
    for section in griffe.Docstring(shown).parse("google", warnings=False):
        kind = section.kind.value
        if kind == "text":
            described.text.append(section.value)
        elif kind == "parameters":
            described.params.update({p.name: p.description for p in section.value})
        elif kind == "returns":
            described.returns += [r.description for r in section.value]
        elif kind == "raises":
            described.raises += [(str(r.annotation), r.description) for r in section.value]
        elif kind == "examples":
            described.examples += [text for _, text in section.value]
    described.summary = described.text[0].split("\n\n")[0] if described.text else ""
    return described


def without_code(text: str) -> str:
    return LINK_TARGET.sub(" ", CODE.sub(" ", text))


def problems(name: str, signature: inspect.Signature, docstring: str) -> list[str]:
    """What the docstring of ``name`` fails to say in either language; empty when all is said."""
    if hook.split(inspect.cleandoc(docstring))[1] is None:
        return [f"{name}: no {hook.MARKER} section: the zh page would show the English"]
    try:
        said = {lang: describe(docstring, lang) for lang in LANGUAGES}
    except ValueError as error:
        return [f"{name}: {error}"]
    wanted = list(signature.parameters)
    found = []
    for lang, d in said.items():
        if not d.summary.strip():
            found.append(f"{name} ({lang}): no summary")
        # Google style writes variadic parameters as *args and **kwargs.
        params = {p.lstrip("*"): text for p, text in d.params.items()}
        missing = [p for p in wanted if not params.get(p, "").strip()]
        if missing:
            found.append(f"{name} ({lang}): parameters not described: {missing}")
        extra = [p for p in params if p not in wanted]
        if extra:
            found.append(f"{name} ({lang}): parameters not in the signature: {extra}")
        if signature.return_annotation not in NO_RETURN and not d.returns:
            found.append(f"{name} ({lang}): returns {signature.return_annotation}, no Returns")
    en, zh = said["en"], said["zh"]
    if [t for t, _ in en.raises] != [t for t, _ in zh.raises]:
        found.append(
            f"{name}: Raises differ: en {[t for t, _ in en.raises]}, zh {[t for t, _ in zh.raises]}"
        )
    if len(en.returns) != len(zh.returns):
        found.append(f"{name}: {len(en.returns)} returns in en, {len(zh.returns)} in zh")
    if en.examples != zh.examples:
        found.append(f"{name}: the zh page would not show the English part's examples")
    for what, text in zh.prose():
        if not CJK.search(text):
            found.append(f"{name} (zh): {what} has no Chinese: {text!r}")
        phrase = ENGLISH_PHRASE.search(without_code(text))
        if phrase:
            found.append(f"{name} (zh): {what} has English prose {phrase[0]!r}")
    for what, text in en.prose()[len(en.text) :]:  # the summary may name the 纯享版
        if CJK.search(text):
            found.append(f"{name} (en): {what} has Chinese: {text!r}")
    return found


@pytest.mark.parametrize("item", DOCUMENTED, ids=[d.name for d in DOCUMENTED])
def test_every_parameter_is_described_in_both_languages(item):
    found = problems(item.name, item.signature, item.docstring)
    assert not found, "\n".join(found)


def test_the_api_page_documents_every_public_callable_of_each_module():
    names = {d.name for d in DOCUMENTED}
    for module in {name.rsplit(".", 1)[0] for name in api_identifiers()}:
        for public in importlib.import_module(module).__all__:
            assert f"{module}.{public}" in names, f"{module}.{public} is not on the API page"
    assert api_identifiers("zh") == api_identifiers("en"), "the zh API page documents others"


def test_methods_and_the_documented_list_are_complete():
    """The list this test file checks holds the classes' methods (forward), not just the
    ``:::`` objects: a method without a docstring would be missing from the page itself."""
    names = [d.name for d in DOCUMENTED]
    assert "mha.annotated.MHA.forward" in names and "mha.pure.MHA.forward" in names, names
    for item in DOCUMENTED:
        assert item.docstring.strip(), f"{item.name} has no docstring: the API page omits it"


@pytest.mark.parametrize("item", DOCUMENTED, ids=[d.name for d in DOCUMENTED])
def test_chinese_part_uses_the_glossary_terms(item):
    chinese = hook.split(inspect.cleandoc(item.docstring))[1] or ""
    rows = parse_glossary(ZH / GLOSSARY)
    hits = find_avoided(chinese, rows, item.name)
    assert not hits, [f"{h.where}: {h.variant} → {h.term}" for h in hits]


def test_examples_are_written_once():
    """Sybil runs the docstrings' examples: each runs once, from the English part."""
    for item in DOCUMENTED:
        chinese = hook.split(inspect.cleandoc(item.docstring))[1] or ""
        assert ">>>" not in chinese, f"{item.name}: an example in the {hook.MARKER} part"


# The checker fails on a docstring that leaves something out: mutations of check_sizes'.

SIZES = next(d for d in DOCUMENTED if d.name.endswith("check_sizes"))


def mutate(old: str, new: str) -> list[str]:
    docstring = inspect.cleandoc(SIZES.docstring)
    assert docstring.count(old) == 1, f"{old!r} is not once in check_sizes' docstring"
    return problems("check_sizes", SIZES.signature, docstring.replace(old, new))


def test_checker_passes_the_real_docstring():
    assert problems("check_sizes", SIZES.signature, SIZES.docstring) == []


def test_checker_catches_a_parameter_missing_in_chinese():
    found = mutate("\n        heads_num: 注意力头数，必须整除 ``hidden_size``。\n", "\n")
    assert any("(zh): parameters not described: ['heads_num']" in p for p in found), found


def test_checker_catches_a_parameter_missing_in_english():
    found = mutate(
        "\n    heads_num: number of attention heads; must divide ``hidden_size``.\n", "\n"
    )
    assert any("(en): parameters not described: ['heads_num']" in p for p in found), found


def test_checker_catches_a_parameter_not_in_the_signature():
    found = mutate("heads_num: 注意力头数", "num_heads: 注意力头数")
    assert any("(zh): parameters not in the signature: ['num_heads']" in p for p in found), found


def test_checker_catches_different_exceptions():
    found = mutate("ValueError: 某个尺寸不是正数", "RuntimeError: 某个尺寸不是正数")
    assert any("Raises differ" in p and "RuntimeError" in p for p in found), found


def test_checker_catches_english_left_in_the_chinese_part():
    found = mutate("隐藏层维度，即输入最后一维的大小。", "model width, the last dimension.")
    assert any("parameter hidden_size has no Chinese" in p for p in found), found
    found = mutate("隐藏层维度，即输入最后一维的大小。", "隐藏层维度, the model width.")
    assert any("English prose 'the model width'" in p for p in found), found


def test_checker_catches_a_docstring_without_chinese():
    english = inspect.cleandoc(SIZES.docstring).split(hook.MARKER)[0]
    found = problems("check_sizes", SIZES.signature, english)
    assert found == [f"check_sizes: no {hook.MARKER} section: the zh page would show the English"]


def test_checker_catches_an_example_in_the_chinese_part():
    found = mutate("    参数:\n", "    >>> check_sizes(4, 2)\n\n    参数:\n")
    assert any("has an example" in p for p in found), found


def test_chinese_titles_map_to_google_sections_and_others_fail():
    zh = hook.in_language(inspect.cleandoc(SIZES.docstring), "zh")
    assert "\nArgs:\n" in zh and "\nRaises:\n" in zh and "参数:" not in zh, zh
    assert zh.rstrip().endswith("TypeError: hidden_size must be an int, got float (20.0)"), zh
    with pytest.raises(ValueError, match="has the section '注意'"):
        hook.in_language("Sum.\n\n中文:\n    求和。\n\n    注意:\n        小心。", "zh")
    with pytest.raises(ValueError, match="must be the last one"):
        hook.in_language("Sum.\n\n中文:\n    求和。\n\nArgs:\n    a: x.", "zh")


def test_english_page_drops_the_chinese_part():
    en = hook.in_language(inspect.cleandoc(SIZES.docstring), "en")
    assert hook.MARKER not in en and not CJK.search(en), en


# Pages that show the package's code (the annotated and the pure MHA) can show each docstring in
# their language: ``source_in_language``. Only docstrings change, each as the API page shows it.

GOOGLE = {
    "参数": "Args",
    "返回": "Returns",
    "引发": "Raises",
    "属性": "Attributes",
    "示例": "Examples",
}


def docstrings_of(tree: ast.Module) -> dict[str, str]:
    """The docstrings of a module's classes and functions, by qualified name."""
    found = {}

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                found[name] = ast.get_docstring(child) or ""
                walk(child, name + ".")

    walk(tree, "")
    return found


def without_docstrings(tree: ast.Module) -> str:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(
            node
        ):
            node.body[0] = ast.Expr(ast.Constant(""))
    return ast.dump(tree)


@pytest.mark.parametrize("module", ["annotated", "pure", "checks", "interop"])
@pytest.mark.parametrize("lang", LANGUAGES)
def test_source_in_language_changes_only_the_docstrings(module, lang):
    source = (ROOT / "mha" / f"{module}.py").read_text(encoding="utf-8")
    shown = hook.source_in_language(source, lang)
    assert hook.MARKER not in shown, f"{module}: a {hook.MARKER} part is left in the {lang} code"
    assert shown.count(">>>") == source.count(">>>"), f"{module} ({lang}): examples lost"
    before, after = ast.parse(source), ast.parse(shown)
    shown_docstrings = docstrings_of(after)
    for name, docstring in docstrings_of(before).items():
        expected = hook.in_language(docstring, lang)
        got = shown_docstrings[name]
        titles = {f"{zh}:": f"{google}:" for zh, google in GOOGLE.items()}
        got = "\n".join(titles.get(line, line) for line in got.splitlines())
        assert got == expected, f"{module}.{name} ({lang}):\n{got}\n---\n{expected}"
    assert without_docstrings(after) == without_docstrings(before), f"{module}: code changed"


def test_source_in_language_leaves_code_that_does_not_tokenize():
    broken = 'def f():\n    """Sum.\n\n    中文:\n        求和。\n'
    assert hook.source_in_language(broken, "zh") == broken


# The built pages: each object's tables in the page's language.

SECTION_KINDS = {
    "Parameters": "params",
    "参数": "params",
    "Returns": "returns",
    "返回": "returns",
    "Raises": "raises",
    "引发": "raises",
}


@dataclass
class Rendered:
    """One object on a built API page: its table rows per section kind, and its prose."""

    params: dict[str, str] = field(default_factory=dict)  # name -> description (no code)
    returns: list[str] = field(default_factory=list)
    raises: list[tuple[str, str]] = field(default_factory=list)
    prose: list[str] = field(default_factory=list)  # text outside code, tables included

    def descriptions(self) -> list[str]:
        return list(self.params.values()) + self.returns + [d for _, d in self.raises]


class ApiPage(HTMLParser):
    """Reads mkdocstrings' output: headings with the object's id, section titles, table rows."""

    def __init__(self):
        super().__init__()
        self.objects: dict[str, Rendered] = {}
        self.current: Rendered | None = None
        self.kind: str | None = None
        self.in_title = False
        self.title = ""
        self.code = 0  # depth inside <code>/<pre>
        self.cells: list[list[str]] | None = None  # per cell: [text without code, full text]
        self.in_cell = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag in ("h2", "h3", "h4") and "doc-heading" in classes and attrs.get("id"):
            self.current = self.objects.setdefault(attrs["id"], Rendered())
            self.kind = None
        elif tag == "span" and "doc-section-title" in classes:
            self.in_title, self.title = True, ""
        elif tag in ("code", "pre"):
            self.code += 1
        elif tag == "tr" and "doc-section-item" in classes:
            self.cells = []
        elif tag == "td" and self.cells is not None:
            self.cells.append(["", ""])
            self.in_cell = True

    def handle_endtag(self, tag):
        if tag == "article":  # the page's content ends: the footer is no object's
            self.current = None
        elif tag == "span" and self.in_title:
            self.in_title = False
            self.kind = SECTION_KINDS.get(self.title.strip().rstrip(":：").strip())
        elif tag in ("code", "pre"):
            self.code -= 1
        elif tag == "td":
            self.in_cell = False
        elif tag == "tr" and self.cells is not None:
            self.row([[" ".join(t.split()) for t in cell] for cell in self.cells])
            self.cells = None

    def row(self, cells):
        if self.current is None or not cells:
            return
        if self.kind == "params":
            self.current.params[cells[0][1]] = cells[2][0]
        elif self.kind == "returns":
            self.current.returns.append(cells[-1][0])
        elif self.kind == "raises":
            self.current.raises.append((cells[0][1], cells[1][0]))

    def handle_data(self, data):
        if self.in_title:
            self.title += data
        if self.in_cell and self.cells:
            self.cells[-1][1] += data
            if not self.code:
                self.cells[-1][0] += data
        if self.current is not None and not self.code and not self.in_title:
            self.current.prose.append(data)


def rendered(site: Path, lang: str) -> dict[str, Rendered]:
    page = site / ("" if lang == "en" else f"{lang}/") / "api" / "index.html"
    parser = ApiPage()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.objects


def test_built_pages_describe_every_parameter_in_their_language(built_site):
    pages = {lang: rendered(built_site, lang) for lang in LANGUAGES}
    for item in DOCUMENTED:
        on = {lang: pages[lang].get(item.name) for lang in LANGUAGES}
        for lang, obj in on.items():
            assert obj is not None, f"{lang}/api: {item.name} is not on the page"
            assert [p.lstrip("*") for p in obj.params] == list(item.signature.parameters), (
                lang,
                item.name,
                obj,
            )
            assert all(d.strip() for d in obj.params.values()), (lang, item.name, obj.params)
        assert [t for t, _ in on["en"].raises] == [t for t, _ in on["zh"].raises], item.name
        for text in on["zh"].descriptions():
            assert CJK.search(text), f"zh/api: {item.name}: {text!r} is not Chinese"
        for text in on["en"].descriptions():
            assert not CJK.search(text), f"api: {item.name}: {text!r} is not English"


def test_built_zh_page_has_no_english_prose_in_the_docstrings(built_site):
    for name, obj in rendered(built_site, "zh").items():
        text = " ".join(" ".join(obj.prose).split())
        phrase = ENGLISH_PHRASE.search(text)
        assert phrase is None, f"zh/api: {name}: English prose {phrase and phrase[0]!r}"
