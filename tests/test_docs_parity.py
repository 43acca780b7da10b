"""The English and the Chinese site say the same thing: parity of pages, headings, code and figures.

A page missing in one language would silently fall back to the other (mkdocs-static-i18n), and a
translation drifts unnoticed; so, page by page, both languages must have:

- the same pages (every file under ``docs/en`` has its twin under ``docs/zh`` and back);
- the same headings: same level, same explicit ``{ #anchor }``, same order (every heading must have
  an explicit anchor, so links survive translation; anchors are unique within a page);
- the same code blocks (fences and hidden code comments), line for line: only comments may
  differ (``#`` comments in Python and shell blocks; a comment-only line may be added or dropped).
  String literals, assert messages included, stay identical on purpose: both pages run the same
  test, and a reader who copies either gets the same code and, on failure, the same message, which
  names the tensors involved rather than telling a story (the explanation is the comment's job);

- the same figures (image sources), includes (``--8<--`` lines), mkdocstrings directives
  (``::: mha.x``) and skip directives;
- the same admonitions (kind and type, nesting) and content tabs, in the same order.

The drift tests at the end show the check failing on a copy of ``docs/`` with one thing changed.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# The hook that shows included code in one language reads comments the same way.
from mha_site.include_language import find_comment

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
LANGUAGES = ("en", "zh")

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
HEADING = re.compile(r"^[ \t]*(?P<level>#{1,6})[ \t]+(?P<text>.*?)[ \t]*#*[ \t]*$")
ANCHOR = re.compile(r"\{[^}]*#(?P<anchor>[\w.:-]+)[^}]*\}\s*$")
HIDDEN_START = re.compile(
    r"^[ \t]*<!--[ \t]*(?:invisible-)?code(?:-block)?[ \t]*:[ \t]*(\S+)[ \t]*$"
)
# Figures: Markdown images, <img>, and pictures drawn by mha_site/pictures.py
# (<!-- picture: NAME -->).
IMAGE = re.compile(
    r"!\[[^\]]*\]\((?P<src>[^)\s]+)|<img\b[^>]*\bsrc=[\"'](?P<img>[^\"']+)"
    r"|<!--\s*picture:\s*(?P<picture>[\w.-]+)\s*-->"
)
ADMONITION = re.compile(r"^(?P<indent>[ \t]*)(?P<kind>!!!|\?\?\?\+?)[ \t]+(?P<type>[\w-]+)")
TAB = re.compile(r"^(?P<indent>[ \t]*)===\+?[ \t]+[\"']")
SKIP = re.compile(r"<!--[ \t]*skip:[ \t]*(\w+)")
DIRECTIVE = re.compile(r"^[ \t]*:::[ \t]+\S+")
COMMENTED_LANGUAGES = {"python", "py", "pycon", "bash", "sh", "shell", "console"}


@dataclass
class Skeleton:
    """What must be identical in both languages, extracted from one page."""

    headings: list[tuple[int, str]] = field(default_factory=list)
    unanchored: list[str] = field(default_factory=list)
    code: list[tuple[str, list[str]]] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    includes: list[str] = field(default_factory=list)
    directives: list[str] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)  # admonitions, tabs, skips


def strip_comment(line: str, quote: str | None) -> tuple[str, str | None]:
    """Remove a ``#`` comment outside strings; ``quote`` carries an open triple quote over lines."""
    start, quote = find_comment(line, quote)
    return line[:start].rstrip(), quote


def code_lines(language: str, body: str) -> list[str]:
    """The lines of a block that must match across languages (comments dropped where allowed)."""
    if language.lower() not in COMMENTED_LANGUAGES:
        return [line.rstrip() for line in body.splitlines()]
    lines, quote = [], None
    for line in body.splitlines():
        code, quote = strip_comment(line, quote)
        if code or not line.strip():  # keep blank lines, drop comment-only lines
            lines.append(code)
    return lines


def skeleton(text: str) -> Skeleton:
    s = Skeleton()
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        hidden = HIDDEN_START.match(line)
        if fence and not (fence["fence"][0] == "`" and "`" in fence["info"]):
            info = fence["info"].strip()
            body = []
            i += 1
            while i < len(lines):
                close = FENCE.match(lines[i])
                if (
                    close
                    and close["fence"][0] == fence["fence"][0]
                    and len(close["fence"]) >= len(fence["fence"])
                    and not close["info"].strip()
                ):
                    break
                body.append(lines[i][len(fence["indent"]) :])
                i += 1
            language = info.split()[0].lstrip("{.") if info else ""
            s.code.append((info, code_lines(language, "\n".join(body))))
            s.includes += [b.strip() for b in body if b.strip().startswith("--8<--")]
        elif hidden:
            body = []
            i += 1
            while i < len(lines) and "-->" not in lines[i]:
                body.append(lines[i])
                i += 1
            s.code.append((f"hidden {hidden[1]}", code_lines(hidden[1], "\n".join(body))))
        else:
            heading = HEADING.match(line)
            if heading:
                anchor = ANCHOR.search(heading["text"])
                level = len(heading["level"])
                if anchor:
                    s.headings.append((level, anchor["anchor"]))
                else:
                    s.unanchored.append(line.strip())
            s.figures += [m["src"] or m["img"] or m["picture"] for m in IMAGE.finditer(line)]
            if line.strip().startswith("--8<--"):
                s.includes.append(line.strip())
            if DIRECTIVE.match(line):
                s.directives.append(line.strip())
            if m := ADMONITION.match(line):
                s.blocks.append(f"{len(m['indent'])}{m['kind']} {m['type']}")
            if m := TAB.match(line):
                s.blocks.append(f"{len(m['indent'])}=== tab")
            s.blocks += [f"skip: {m[1]}" for m in SKIP.finditer(line)]
        i += 1
    return s


def first_difference(a: list, b: list) -> str:
    for n, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"item {n + 1}: en {x!r} != zh {y!r}"
    return f"en has {len(a)} items, zh has {len(b)}"


def parity_problems(docs: Path) -> list[str]:
    """Every difference between docs/en and docs/zh that the rules above forbid, one line each."""
    problems = []
    en, zh = (
        {p.relative_to(docs / lang) for p in (docs / lang).rglob("*") if p.is_file()}
        for lang in LANGUAGES
    )
    problems += [f"docs/zh/{p} is missing (docs/en/{p} exists)" for p in sorted(en - zh)]
    problems += [f"docs/en/{p} is missing (docs/zh/{p} exists)" for p in sorted(zh - en)]
    for page in sorted(p for p in en & zh if p.suffix == ".md"):
        sk = {
            lang: skeleton((docs / lang / page).read_text(encoding="utf-8")) for lang in LANGUAGES
        }
        for lang in LANGUAGES:
            for heading in sk[lang].unanchored:
                problems.append(f"docs/{lang}/{page}: heading without {{ #anchor }}: {heading!r}")
            anchors = [a for _, a in sk[lang].headings]
            for anchor in sorted({a for a in anchors if anchors.count(a) > 1}):
                problems.append(f"docs/{lang}/{page}: anchor #{anchor} used twice")
        for part in ("headings", "code", "figures", "includes", "directives", "blocks"):
            a, b = getattr(sk["en"], part), getattr(sk["zh"], part)
            if a != b:
                problems.append(f"{page}: {part} differ, {first_difference(a, b)}")
    return problems


def test_both_languages_exist():
    for lang in LANGUAGES:
        assert list((DOCS / lang).glob("*.md")), f"no pages in docs/{lang}"


def test_languages_have_the_same_pages_headings_code_figures_and_includes():
    problems = parity_problems(DOCS)
    assert not problems, "\n".join(problems)


# The checker itself, on a small two-language tree in which one thing is then changed (its own
# pages, so these tests do not depend on the state of the real ones).


@pytest.fixture
def docs_copy(tmp_path) -> Path:
    copy = tmp_path / "docs"
    for lang in LANGUAGES:
        (copy / lang).mkdir(parents=True)
        shutil.copy(DOCS / lang / "index.md", copy / lang / "index.md")
    (copy / "en" / "drift.md").write_text(
        "# Drift { #drift }\n\n## Split { #split-heads }\n\n"
        "![heads](../assets/heads.svg)\n\n"
        "```python\nx = 1  # one\nassert x == 1, x\n```\n\n!!! note\n\n    Text.\n",
        encoding="utf-8",
    )
    (copy / "zh" / "drift.md").write_text(
        "# 漂移 { #drift }\n\n## 拆分 { #split-heads }\n\n"
        "![多头](../assets/heads.svg)\n\n"
        "```python\n# 注释可以多一行\nx = 1  # 一\nassert x == 1, x\n```\n\n"
        "!!! note\n\n    文字。\n",
        encoding="utf-8",
    )
    return copy


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_checker_accepts_translated_text_and_comments(docs_copy):
    assert parity_problems(docs_copy) == []


def test_checker_catches_a_missing_page(docs_copy):
    (docs_copy / "zh" / "drift.md").unlink()
    assert parity_problems(docs_copy) == ["docs/zh/drift.md is missing (docs/en/drift.md exists)"]


def test_checker_catches_a_changed_heading_anchor(docs_copy):
    edit(docs_copy / "zh" / "drift.md", "{ #split-heads }", "{ #split }")
    problems = parity_problems(docs_copy)
    assert len(problems) == 1 and "drift.md: headings differ" in problems[0], problems


def test_checker_catches_a_heading_without_anchor(docs_copy):
    edit(docs_copy / "zh" / "drift.md", "## 拆分 { #split-heads }", "## 拆分")
    problems = parity_problems(docs_copy)
    assert any("heading without { #anchor }" in p for p in problems), problems


def test_checker_catches_a_changed_code_line(docs_copy):
    edit(docs_copy / "zh" / "drift.md", "x = 1  # 一", "x = 2  # 一")
    problems = parity_problems(docs_copy)
    assert len(problems) == 1 and "drift.md: code differ" in problems[0], problems


def test_checker_catches_a_changed_string_in_code(docs_copy):
    edit(docs_copy / "zh" / "drift.md", "assert x == 1, x", "assert x == 1, '# x'")
    problems = parity_problems(docs_copy)
    assert len(problems) == 1 and "drift.md: code differ" in problems[0], problems


def test_checker_catches_a_changed_figure(docs_copy):
    edit(docs_copy / "zh" / "drift.md", "../assets/heads.svg", "../assets/heads-zh.svg")
    problems = parity_problems(docs_copy)
    assert len(problems) == 1 and "drift.md: figures differ" in problems[0], problems


def test_checker_catches_a_changed_admonition(docs_copy):
    edit(docs_copy / "zh" / "drift.md", "!!! note", "!!! warning")
    problems = parity_problems(docs_copy)
    assert len(problems) == 1 and "drift.md: blocks differ" in problems[0], problems


def test_checker_catches_a_changed_include(docs_copy):
    for lang in LANGUAGES:
        edit(docs_copy / lang / "drift.md", "x = 1", '--8<-- "mha/pure.py:all"\nx = 1')
    edit(docs_copy / "zh" / "drift.md", "pure.py:all", "annotated.py:forward")
    problems = parity_problems(docs_copy)
    assert any("drift.md: includes differ" in p for p in problems), problems
