"""The API reference describes every parameter in both languages, and the zh page in Chinese.

The docstrings of ``mha`` are bilingual: English, then a last section ``中文:`` that says
the same in Chinese with the titles 参数：, 返回：, 异常： and 属性：
(``mha_site/docstring_language.py``, which also picks the page's language at build time). For
every public callable the API page documents (each ``:::`` object of ``docs/en/api.md``, and the
public methods a class defines, such as ``forward``; a class's ``__init__`` is merged into it),
read its signature with ``inspect.signature`` and check, in each language:

- a summary, and every parameter of the signature (``self`` aside) described, none extra;
- a Returns section when the callable returns something;
- the same exception types under Raises, in the same order;
- the Chinese in Chinese: every description has Chinese characters and no English phrase (three
  Latin words in a row, code aside), and uses the glossary's terms; the English without Chinese;
- the examples written once, in the English part, and shown on both pages, each comment in the
  page's language: an English comment has its Chinese twin, a ``>>> # 中文`` line above it.

The checker reads the docstrings as the build does (``in_language``, then griffe's Google parser).
The pages that show the package's code show each docstring in their language
(``source_in_language``), and nothing else changes. The built pages ``api/`` and ``zh/api/`` are
checked too (``built_problems``, given a built site): each object's parameter list lists the
signature's parameters, in the page's language.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import griffe

from mha_site import docstring_language as hook
from mha_site.checkers import glossary
from mha_site.languages import DEFAULT, LANGUAGES, ROOT
from mha_site.markdown import CHINESE, autodoc_identifiers

# Inline code, over lines too (a docstring's ``code`` may wrap).
CODE = re.compile(glossary.INLINE_CODE.pattern, re.DOTALL)
LINK_TARGET = re.compile(r"\]\[[^\]]*\]")
# Three Latin words in a row: an English phrase (a name such as ``MHA`` or ``dtype`` is one word).
ENGLISH_PHRASE = re.compile(r"[A-Za-z][\w'’-]*(?:[ \t\n,;:()]+[A-Za-z][\w'’-]*){2,}")
NO_RETURN = (None, "None", type(None), inspect.Signature.empty)
# The modules whose code pages show (included with --8<--), each docstring in the page's language.
SHOWN_MODULES = ("annotated", "pure", "checks", "interop")
# The Chinese titles of a shown docstring and the Google titles they stand for.
GOOGLE = {**hook.TITLES, "示例": "Examples"}
# A line of an example that is code, not only a comment: what a page must show of every example.
EXAMPLE_CODE = re.compile(r"^[ \t]*>>> (?![ \t]*#)", re.MULTILINE)


@dataclass
class Documented:
    """A callable as the API page documents it."""

    name: str  # mha.annotated.MHA.forward
    obj: object
    signature: inspect.Signature
    docstring: str


def api_identifiers(lang: str = DEFAULT) -> list[str]:
    """The objects the API page of ``lang`` documents (its ``:::`` lines)."""
    return autodoc_identifiers((ROOT / "docs" / lang / "api.md").read_text(encoding="utf-8"))


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


@functools.cache
def documented() -> tuple[Documented, ...]:
    """Every callable the API page documents: its ``:::`` objects and their public methods."""
    found = []
    for identifier in api_identifiers():
        obj = resolve(identifier)
        # A typing.Protocol is never built: no arguments (inspect shows Protocol's *args, **kwargs)
        protocol = inspect.isclass(obj) and getattr(obj, "_is_protocol", False)
        signature = inspect.Signature() if protocol else inspect.signature(obj)
        found.append(Documented(identifier, obj, signature, obj.__doc__ or ""))
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
    return tuple(found)


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


def without_comments(example: str) -> list[str]:
    """An example's lines without their comments, and without the lines that are only one."""
    lines = [
        (hook._comment(line)[0] if hook._comment(line)[1] else line)
        for line in example.splitlines()
    ]
    return [line for line in lines if line.strip() != ">>>"]


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
    if [without_comments(e) for e in en.examples] != [without_comments(e) for e in zh.examples]:
        found.append(f"{name}: the zh page would not show the English part's examples")
    english = hook.split(inspect.cleandoc(docstring))[0]
    found += [f"{name}: {problem}" for problem in hook.example_problems(hook.examples(english))]
    for lang, d in said.items():
        other = "zh" if lang == "en" else "en"
        comments = [hook._comment(line) for e in d.examples for line in e.splitlines()]
        found += [
            f"{name} ({lang}): the examples show the {other} comment {comment!r}"
            for _, comment, language in comments
            if language == other
        ]
    for what, text in zh.prose():
        if not CHINESE.search(text):
            found.append(f"{name} (zh): {what} has no Chinese: {text!r}")
        phrase = ENGLISH_PHRASE.search(without_code(text))
        if phrase:
            found.append(f"{name} (zh): {what} has English prose {phrase[0]!r}")
    for what, text in en.prose()[len(en.text) :]:  # the summary may name the 纯享版
        if CHINESE.search(text):
            found.append(f"{name} (en): {what} has Chinese: {text!r}")
    return found


def chinese_part(item: Documented) -> str:
    """The ``中文:`` part of ``item``'s docstring ("" when it has none)."""
    return hook.split(inspect.cleandoc(item.docstring))[1] or ""


def glossary_hits(item: Documented) -> list[glossary.Hit]:
    """The glossary's avoided variants in the Chinese part of ``item``'s docstring."""
    return glossary.find_avoided(chinese_part(item), glossary.zh_rows(), item.name)


def coverage_problems() -> list[str]:
    """Public callables the API page leaves out, callables without a docstring (the page would
    omit them), and a zh API page that documents other objects than the en one."""
    names = {d.name for d in documented()}
    found = []
    for module in sorted({name.rsplit(".", 1)[0] for name in api_identifiers()}):
        imported = importlib.import_module(module)
        for public in imported.__all__:
            # A name re-exported from another module (mha.full's KVCache) is documented once,
            # under the module that defines it
            home = getattr(getattr(imported, public), "__module__", module)
            if f"{home}.{public}" not in names:
                found.append(f"{home}.{public} is not on the API page")
    for language in LANGUAGES[1:]:
        if api_identifiers(language) != api_identifiers():
            found.append(f"docs/{language}/api.md documents other objects than docs/{DEFAULT}'s")
    found += [
        f"{d.name} has no docstring: the API page omits it"
        for d in documented()
        if not d.docstring.strip()
    ]
    return found


# ---- the code pages show ----------------------------------------------------------------------


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
    """The module's code, every docstring emptied (``ast.dump``)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(
            node
        ):
            node.body[0] = ast.Expr(ast.Constant(""))
    return ast.dump(tree)


def shown_source_problems(module: str, lang: str) -> list[str]:
    """How the code of ``mha/<module>.py`` that a ``lang`` page shows differs from the package's
    other than in its docstrings, each shown as the API page of ``lang`` shows it."""
    source = (ROOT / "mha" / f"{module}.py").read_text(encoding="utf-8")
    shown = hook.source_in_language(source, lang)
    found = []
    if hook.MARKER in shown:
        found.append(f"{module}: a {hook.MARKER} part is left in the {lang} code")
    if len(EXAMPLE_CODE.findall(shown)) != len(EXAMPLE_CODE.findall(source)):
        found.append(f"{module} ({lang}): examples lost")
    before, after = ast.parse(source), ast.parse(shown)
    shown_docstrings = docstrings_of(after)
    titles = {f"{zh}{hook.COLON}": f"{google}:" for zh, google in GOOGLE.items()}
    for name, docstring in docstrings_of(before).items():
        expected = hook.in_language(docstring, lang)
        got = "\n".join(titles.get(line, line) for line in shown_docstrings[name].splitlines())
        if got != expected:
            found.append(f"{module}.{name} ({lang}):\n{got}\n---\n{expected}")
    if without_docstrings(after) != without_docstrings(before):
        found.append(f"{module}: code changed")
    return found


# ---- the built pages --------------------------------------------------------------------------

SECTION_KINDS = {
    "Parameters": "params",
    "参数": "params",
    "Returns": "returns",
    "返回": "returns",
    "Raises": "raises",
    "异常": "raises",
}


@dataclass
class Rendered:
    """One object on a built API page: its section items per kind, and its prose."""

    params: dict[str, str] = field(default_factory=dict)  # name -> description (no code)
    returns: list[str] = field(default_factory=list)
    raises: list[tuple[str, str]] = field(default_factory=list)
    prose: list[str] = field(default_factory=list)  # text outside code, sections included

    def descriptions(self) -> list[str]:
        return list(self.params.values()) + self.returns + [d for _, d in self.raises]


class ApiPage(HTMLParser):
    """Reads mkdocstrings' output: headings with the object's id, section titles, and each
    section's items (``docstring_section_style: list``): ``<li class="doc-section-item">``, whose
    head names the parameter (in ``<b>``) or the type (its first ``<code>``), then ``–`` and a
    ``doc-md-description``."""

    def __init__(self):
        super().__init__()
        self.objects: dict[str, Rendered] = {}
        self.current: Rendered | None = None
        self.kind: str | None = None
        self.in_title = False
        self.title = ""
        self.code = 0  # depth inside <code>/<pre>
        self.item: dict[str, list[str]] | None = None  # per part: [text without code, full text]
        self.part: str | None = None  # "head", "name" (in <b>), "type" (first code), "desc"
        self.typed = False  # the head's first <code> seen
        self.nested = 0  # depth of <li> (and of <div> in the description) inside the item

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag in ("h2", "h3", "h4") and "doc-heading" in classes and attrs.get("id"):
            self.current = self.objects.setdefault(attrs["id"], Rendered())
            self.kind = None
        elif tag == "span" and "doc-section-title" in classes:
            self.in_title, self.title = True, ""
        elif tag == "li" and "doc-section-item" in classes:
            self.item = {part: ["", ""] for part in ("name", "type", "desc")}
            self.part, self.typed, self.nested = "head", False, 0
        elif self.item is not None and tag in ("li", "div") and self.part == "desc":
            self.nested += 1
        elif self.item is not None and tag == "div" and "doc-md-description" in classes:
            self.part = "desc"
        elif self.item is not None and tag == "b" and self.part == "head":
            self.part = "name"
        if tag in ("code", "pre"):
            self.code += 1
            if self.item is not None and self.part == "head" and not self.typed:
                self.part, self.typed = "type", True

    def handle_endtag(self, tag):
        if tag == "article":  # the page's content ends: the footer is no object's
            self.current = None
        elif tag == "span" and self.in_title:
            self.in_title = False
            self.kind = SECTION_KINDS.get(self.title.strip().rstrip(":：").strip())
        if tag in ("code", "pre"):
            self.code -= 1
            if self.part == "type" and not self.code:
                self.part = "head"
        if self.item is None:
            return
        if tag == "b" and self.part == "name":
            self.part = "head"
        elif tag in ("li", "div") and self.part == "desc" and self.nested:
            self.nested -= 1
        elif tag == "div" and self.part == "desc":
            self.part = None
        elif tag == "li":
            self.entry({k: " ".join(v[0].split()) for k, v in self.item.items()}, self.item)
            self.item = self.part = None

    def entry(self, text: dict[str, str], item: dict[str, list[str]]):
        """One item of a section: ``text`` without code per part, ``item`` with it."""
        if self.current is None:
            return
        full = {k: " ".join(v[1].split()) for k, v in item.items()}
        if self.kind == "params":
            self.current.params[full["name"]] = text["desc"]
        elif self.kind == "returns":
            self.current.returns.append(text["desc"])
        elif self.kind == "raises":
            self.current.raises.append((full["type"], text["desc"]))

    def handle_data(self, data):
        if self.in_title:
            self.title += data
        if self.item is not None and self.part in ("name", "type", "desc"):
            self.item[self.part][1] += data
            if not self.code:
                self.item[self.part][0] += data
        if self.current is not None and not self.code and not self.in_title:
            self.current.prose.append(data)


def rendered(site: Path, lang: str) -> dict[str, Rendered]:
    """The objects of the built API page of ``lang`` in ``site``, by id."""
    page = site / ("" if lang == DEFAULT else f"{lang}/") / "api" / "index.html"
    parser = ApiPage()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.objects


def built_parameter_problems(site: Path) -> list[str]:
    """Each documented object on the built API page of every language, its parameter list the
    signature's parameters, each described, the same exceptions, its descriptions in the page's
    language."""
    pages = {lang: rendered(site, lang) for lang in LANGUAGES}
    found = []
    for item in documented():
        wanted = list(item.signature.parameters)
        on = {lang: pages[lang].get(item.name) for lang in LANGUAGES}
        for lang, obj in on.items():
            where = f"{page_path(lang)}: {item.name}"
            if obj is None:
                found.append(f"{where} is not on the page")
                continue
            listed = [p.lstrip("*") for p in obj.params]
            if listed != wanted:
                found.append(f"{where}: parameters {listed}, the signature has {wanted}")
            if not all(d.strip() for d in obj.params.values()):
                found.append(f"{where}: a parameter without description: {obj.params}")
        en, zh = on["en"], on["zh"]
        if en is None or zh is None:
            continue
        if [t for t, _ in en.raises] != [t for t, _ in zh.raises]:
            found.append(f"{item.name}: Raises differ: en {en.raises}, zh {zh.raises}")
        found += [
            f"zh/api: {item.name}: {text!r} is not Chinese"
            for text in zh.descriptions()
            if not CHINESE.search(text)
        ]
        found += [
            f"api: {item.name}: {text!r} is not English"
            for text in en.descriptions()
            if CHINESE.search(text)
        ]
    return found


def built_english_prose(site: Path) -> list[str]:
    """English phrases in the prose of the built zh API page's objects."""
    found = []
    for name, obj in rendered(site, "zh").items():
        phrase = ENGLISH_PHRASE.search(" ".join(" ".join(obj.prose).split()))
        if phrase:
            found.append(f"zh/api: {name}: English prose {phrase[0]!r}")
    return found


def built_problems(site: Path) -> list[str]:
    """Every problem of the built API pages of ``site``."""
    return built_parameter_problems(site) + built_english_prose(site)


def page_path(lang: str) -> str:
    """The API page of ``lang``, as its problems name it: ``api``, ``zh/api``."""
    return "api" if lang == DEFAULT else f"{lang}/api"


# ---- all of it --------------------------------------------------------------------------------


def check() -> list[str]:
    """Every docstring of the API page said in both languages (an example in the Chinese part
    included), the page complete, and the code pages show each docstring in their language (the
    built pages need a build: ``built_problems``)."""
    found = coverage_problems()
    for item in documented():
        found += problems(item.name, item.signature, item.docstring)
        found += [
            f"{h.where}: {h.variant!r}, write {h.term!r} (docs/zh/glossary.md)"
            for h in glossary_hits(item)
        ]
    for module in SHOWN_MODULES:
        for lang in LANGUAGES:
            found += shown_source_problems(module, lang)
    return found
