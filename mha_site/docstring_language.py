"""Build step and griffe extension: the API page shows each docstring in the page's language.

The docstrings of ``mha`` are bilingual. Each is written in English, Google style, and ends with a
section ``中文:`` that says the same in Chinese, in the same Google style with Chinese titles (a
full-width colon after each)::

    Multi-head attention.

    Args:
        hidden_size: model width, the last dimension of the input.

    Examples:
        >>> from mha.annotated import MHA
        >>> # 每个头的维度
        >>> MHA(hidden_size=20, heads_num=4).head_size  # the size of each head
        5

    中文:
        多头注意力。

        参数：
            hidden_size: 隐藏层维度，即输入最后一维的大小。

``help()`` shows both, English first. The examples are code: they are written once, in the English
part, and Sybil runs them once. Their comments are written in both languages, as in
``mha/annotated.py``: a comment line ``>>> # 中文`` says in Chinese what the English comment of the
next line says (at its end, or the next line's own ``>>> # English``). doctest skips a line that is
only a comment. When mkdocstrings loads the package, the griffe extension ``DocstringLanguage``
keeps one language in each docstring (``in_language``): for ``en`` the docstring without its
``中文:`` section and without the Chinese comment lines; for ``zh`` the Chinese section, its titles
mapped to Google's (参数 → Args, 返回 → Returns, 异常 → Raises, 属性 → Attributes), followed by the
English part's ``Examples:``, each Chinese comment in the place of the English one it translates
(``examples_in_language``).

mkdocs-static-i18n builds one language after the other and runs every ``on_config`` before each
build; mkdocstrings makes new handlers in its ``on_config``, so each build loads the package anew
(nothing loaded for ``en`` is reused for ``zh``). This hook's ``on_config`` runs before
mkdocstrings' and sets the extension's ``language`` option to the language being built.
"""

from __future__ import annotations

import io
import itertools
import re
import textwrap
import tokenize

import griffe
from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

from mha_site.languages import LANGUAGES, building, check

MARKER = "中文:"
# The Chinese part's section titles and the Google titles they stand for. Each is written with a
# full-width colon (参数：), as Chinese writes it.
TITLES = {"参数": "Args", "返回": "Returns", "异常": "Raises", "属性": "Attributes"}
COLON = "："
EXTENSION = "mha_site.docstring_language:DocstringLanguage"
# A section title: a line at the left margin that ends with a colon (the next line is indented).
TITLE = re.compile(r"^(?P<title>\S[^:：]*)[:：][ \t]*$")


def split(docstring: str) -> tuple[str, str | None]:
    """The English part and the Chinese part (dedented) of a docstring cleaned by ``inspect``.

    The Chinese part is ``None`` when the docstring has no ``中文:`` section.

    Raises:
        ValueError: the ``中文:`` section is not the last one, or there are two of them.
    """
    lines = docstring.splitlines()
    starts = [i for i, line in enumerate(lines) if line.rstrip() == MARKER]
    if not starts:
        return docstring.rstrip(), None
    if len(starts) > 1:
        raise ValueError(f"two {MARKER} sections in the docstring {lines[0]!r}")
    start = starts[0]
    body = lines[start + 1 :]
    outside = [line for line in body if line.strip() and not line[0].isspace()]
    if outside:
        raise ValueError(
            f"the {MARKER} section must be the last one, indented; got {outside[0]!r} after it "
            f"in the docstring {lines[0]!r}"
        )
    english = "\n".join(lines[:start]).rstrip()
    chinese = textwrap.dedent("\n".join(body)).strip("\n")
    return english, chinese


def sections(text: str) -> list[tuple[str, int, int]]:
    """The Google-style sections of ``text``: ``(title, first line, end line)``, lines counted
    from 0, a section running until the next title; the summary and description are not one."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        match = TITLE.match(line)
        following = next((nxt for nxt in lines[i + 1 :] if nxt.strip()), "")
        if match and following[:1].isspace():
            found.append((match["title"], i))
    return [
        (title, start, found[k + 1][1] if k + 1 < len(found) else len(lines))
        for k, (title, start) in enumerate(found)
    ]


def examples(english: str) -> str:
    """The ``Examples:`` section of the English part, as written, or ``""``."""
    lines = english.splitlines()
    for title, start, end in sections(english):
        if title == "Examples":
            return "\n".join(lines[start:end]).rstrip()
    return ""


def in_language(docstring: str, language: str) -> str:
    """``docstring`` as the API page of ``language`` shows it (see the module's docstring).

    A docstring without a ``中文:`` section is returned as it is, in both languages.

    Raises:
        ValueError: ``language`` is not ``en`` or ``zh``; or the Chinese part has a title other
            than 参数, 返回, 异常 and 属性, one with a half-width colon, or an example (``>>>``).
    """
    check(language)
    english, chinese = split(docstring)
    if chinese is None:
        return english
    if language == "en":
        return examples_in_language(english, "en")
    lines = chinese.splitlines()
    if any(line.lstrip().startswith(">>>") for line in lines):
        raise ValueError(
            f"the {MARKER} part of {english.splitlines()[0]!r} has an example: examples are "
            "written once, in the English part, and both pages show them"
        )
    for title, start, _ in sections(chinese):
        if title not in TITLES:
            raise ValueError(
                f"the {MARKER} part of {english.splitlines()[0]!r} has the section {title!r}; "
                f"expected one of {list(TITLES)}"
            )
        if not lines[start].rstrip().endswith(COLON):
            raise ValueError(
                f"the {MARKER} part of {english.splitlines()[0]!r} writes "
                f"{lines[start].strip()!r}: write {title}{COLON} with a full-width colon"
            )
        lines[start] = TITLES[title] + ":"
    shown = "\n".join(lines)
    code = examples_in_language(examples(english), "zh")
    return f"{shown}\n\n{code}" if code else shown


# ---- the examples' comments -----------------------------------------------------------------

# A line of an example: its prompt (>>> or ...) and its code.
PROMPT = re.compile(r"^(?P<indent>[ \t]*)(?P<prompt>>>>|\.\.\.)(?: (?P<code>.*))?$")


def _comment(line: str) -> tuple[str, str, str | None]:
    """A line split into what comes before its comment, its ``#`` comment ("" if none), and the
    comment's language (``comment_language`` of the included code); not a prompt line: ("", "",
    None)."""
    from mha_site.include_language import comment_language, find_comment  # imports this module

    match = PROMPT.match(line)
    if not match or not match["code"]:
        return "", "", None
    at, _ = find_comment(line)
    comment = line[at:].rstrip()
    return line[:at].rstrip(), comment, comment_language(comment) if comment else None


def _twin(line: str) -> bool:
    """``>>> # 中文``: a comment line in Chinese, the twin of the next line's English comment."""
    before, _, language = _comment(line)
    return language == "zh" and before.strip() == ">>>"


def examples_in_language(text: str, language: str) -> str:
    """``text`` (examples, or a docstring's English part) with its examples' comments in
    ``language``: each ``>>> # 中文`` line dropped (``en``), or put in the place of the English
    comment it translates (``zh``), the next line's comment at its end or the next line itself
    when that is a comment line. Code and output are never changed.

    >>> text = ">>> # 保留位置 0–3\\n>>> cache.crop(4)  # keep positions 0-3\\n>>> len(cache)\\n4"
    >>> examples_in_language(text, "zh").splitlines()
    ['>>> cache.crop(4)  # 保留位置 0–3', '>>> len(cache)', '4']
    >>> examples_in_language(text, "en").splitlines()
    ['>>> cache.crop(4)  # keep positions 0-3', '>>> len(cache)', '4']
    """
    lines = text.split("\n")
    shown: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not _twin(line):
            shown.append(line)
            i += 1
            continue
        i += 1
        if language == "en":
            continue
        following = lines[i] if i < len(lines) else ""
        before, _, said = _comment(following)
        if said != "en":  # nothing to translate: the checker reports it
            shown.append(line)
        elif before.strip() == ">>>":  # the next line is the English comment line
            shown.append(line)
            i += 1
        else:  # the English comment ends the next line
            shown.append(f"{before}  {_comment(line)[1]}")
            i += 1
    return "\n".join(shown)


def comment_translations(text: str) -> dict[str, str]:
    """Each example line of ``text`` whose English comment has a Chinese twin, its code as doctest
    reads it (prompt stripped), and the same line with the Chinese comment: what the zh page
    shows of it (``examples_in_language``).

    >>> comment_translations(">>> # 保留位置 0–3\\n>>> cache.crop(4)  # keep positions 0-3")
    {'cache.crop(4)  # keep positions 0-3': 'cache.crop(4)  # 保留位置 0–3'}
    """
    lines = text.split("\n")
    found = {}
    for line, following in itertools.pairwise(lines):
        before, _, said = _comment(following)
        if _twin(line) and said == "en" and before.strip() != ">>>":
            code = PROMPT.match(following)["code"].rstrip()
            found[code] = PROMPT.match(f"{before}  {_comment(line)[1]}")["code"]
    return found


def example_problems(english: str) -> list[str]:
    """The examples' comments that a page would show in the other language: an English comment
    without its ``>>> # 中文`` twin above it (the zh page would show it), a Chinese comment that
    is not such a twin, or one with no English comment after it to stand for."""
    lines = english.split("\n")
    found = []
    for i, line in enumerate(lines):
        _, comment, language = _comment(line)
        if language == "en" and not (i and _twin(lines[i - 1])):
            found.append(f"the example comment {comment!r} has no Chinese twin (>>> # 中文) above")
        elif language == "zh" and not _twin(line):
            found.append(f"the Chinese comment of {line.strip()!r} is not a line of its own")
        elif _twin(line) and _comment(lines[i + 1] if i + 1 < len(lines) else "")[2] != "en":
            found.append(f"the Chinese comment {comment!r} has no English comment after it")
    return found


def _docstring_in_language(lines: list[str], language: str) -> list[str] | None:
    """The source lines of one docstring (opening to closing quotes) in ``language``, or ``None``
    when it is not bilingual or not laid out as ours are (closing quotes on their own line)."""
    closing = lines[-1]
    indent = closing[: len(closing) - len(closing.lstrip())]
    starts = [i for i, line in enumerate(lines) if line.rstrip("\n") == indent + MARKER]
    if len(lines) < 3 or closing.strip() not in ('"""', "'''") or len(starts) != 1:
        return None
    english = examples_in_language("".join(lines[: starts[0]]).rstrip(), "en") + "\n"
    if language == "en":
        return [*english.splitlines(keepends=True), closing]
    chinese = textwrap.dedent("".join(lines[starts[0] + 1 : -1])).strip("\n")
    code = examples(textwrap.dedent("".join(lines[1 : starts[0]])))
    if code:  # the English part's examples, under a Chinese title, their comments in Chinese
        chinese += f"\n\n示例{COLON}\n" + examples_in_language(code.split("\n", 1)[1], "zh")
    opening = lines[0][: lines[0].index(closing.strip()) + 3]
    shown = opening + textwrap.indent(chinese, indent).lstrip() + "\n"
    return [*shown.splitlines(keepends=True), closing]


def source_in_language(code: str, language: str) -> str:
    """``code`` with each bilingual docstring in ``language`` only, for a page that shows the code.

    ``en`` keeps the English part; ``zh`` the Chinese part, its titles as written (参数：, 返回：,
    异常：), then the English part's ``Examples:`` under 示例：, the examples' comments in the
    language (``examples_in_language``). The rest of the code is unchanged, and so is code
    that does not tokenize. The package's files stay bilingual; this is for display only.
    """
    if language not in LANGUAGES:
        return code
    lines = code.splitlines(keepends=True)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return code
    for token in reversed(tokens):  # from the end, so earlier line numbers stay valid
        if token.type == tokenize.STRING and token.start[0] != token.end[0]:
            first, last = token.start[0] - 1, token.end[0] - 1
            shown = _docstring_in_language(lines[first : last + 1], language)
            if shown is not None:
                lines[first : last + 1] = shown
    return "".join(lines)


class DocstringLanguage(griffe.Extension):
    """Keeps one language in every docstring griffe loads (``in_language``)."""

    def __init__(self, language: str = "en") -> None:
        self.language = check(language)

    def _select(self, obj: griffe.Object) -> None:
        docstring = obj.docstring
        if docstring is None:
            return
        docstring.value = in_language(docstring.value, self.language)
        docstring.__dict__.pop("parsed", None)  # parse the new value, not a cached old one

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        self._select(pkg)

    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        self._select(obj)


@event_priority(50)  # before mkdocstrings' on_config (0), which makes the handlers
def on_config(config, **kwargs):
    plugin = config.plugins.get("mkdocstrings")
    python = (plugin.config.handlers.get("python") or {}) if plugin else {}
    extensions = (python.get("options") or {}).get("extensions") or []
    for i, extension in enumerate(extensions):
        name = next(iter(extension)) if isinstance(extension, dict) else extension
        if str(name) == EXTENSION:
            extensions[i] = {name: {"language": building(config)}}
            return config
    raise PluginError(
        f"mha_site.docstring_language: add {EXTENSION} to the extensions of mkdocstrings' "
        "python handler in mkdocs.yml, or the zh API page shows the English docstrings"
    )
