"""Start a new chapter, twin pages and their nav entries::

    python -m mha_site.scaffold SLUG "English title" "中文标题" --after PAGE

It writes the twin pages ``docs/en/SLUG.md`` and ``docs/zh/SLUG.md`` (the same heading anchor, the
same code block, each in its language) and adds the page to mkdocs.yml twice: to ``nav``, after
``PAGE`` (``masks`` puts it after ``masks.md``, in the same section), and to the i18n plugin's
``nav_translations`` (the English title and its Chinese). mkdocs.yml is edited as text, so its
comments stay. The new pages pass the strict build and the tests as they are; write them from
there (CONTRIBUTING.md says what the tests then ask of them).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from mha_site.languages import LANGUAGES, ROOT

SLUG = re.compile(r"[a-z][a-z0-9-]*")

PAGES = {
    "en": """\
# {title} {{ #{slug} }}

What this page shows, and for whom: a sentence or two, conclusion first.

```python
import torch

from mha.annotated import MHA

torch.manual_seed(0)
x = torch.randn(2, 3, 20)  # [batch_size=2, seq_len=3, hidden_size=20]
assert MHA(hidden_size=20, heads_num=4)(x).shape == (2, 3, 20)
```

## Summary {{ #summary }}

- What a reader should take away.
""",
    "zh": """\
# {title} {{ #{slug} }}

先说结论：本页讲什么、写给谁看，一两句话。

```python
import torch

from mha.annotated import MHA

torch.manual_seed(0)
x = torch.randn(2, 3, 20)  # [batch_size=2, seq_len=3, hidden_size=20]
assert MHA(hidden_size=20, heads_num=4)(x).shape == (2, 3, 20)
```

## 小结 {{ #summary }}

- 读者应该记住的要点。
""",
}


def add_to_nav(config: str, slug: str, title: str, after: str) -> str:
    """mkdocs.yml's text with ``- title: slug.md`` in ``nav`` right after the entry of ``after``."""
    nav = config.index("\nnav:\n")
    entry = re.compile(rf"^(?P<indent>[ \t]*)- [^\n]*: {re.escape(after)}\.md[ \t]*\n", re.M)
    found = entry.search(config, nav)
    if found is None:
        raise ValueError(f"--after must name a page of mkdocs.yml's nav, got {after!r}")
    line = f"{found['indent']}- {title}: {slug}.md\n"
    return config[: found.end()] + line + config[found.end() :]


def add_translation(config: str, title: str, title_zh: str) -> str:
    """mkdocs.yml's text with ``title: title_zh`` at the end of ``nav_translations``."""
    block = re.search(
        r"^(?P<indent>[ \t]*)nav_translations:\n(?:(?P=indent)[ \t]+.*\n)+", config, re.M
    )
    if block is None:
        raise ValueError("mkdocs.yml has no nav_translations for the zh pages")
    last = block[0].rstrip("\n").rsplit("\n", 1)[-1]
    indent = last[: len(last) - len(last.lstrip())]
    line = f"{indent}{title}: {title_zh}\n"
    return config[: block.end()] + line + config[block.end() :]


def scaffold(slug: str, title: str, title_zh: str, after: str, root: Path = ROOT) -> list[Path]:
    """Write the twin pages and add them to mkdocs.yml under ``root``; the files written."""
    if not SLUG.fullmatch(slug):
        raise ValueError(f"slug must be lower-case letters, digits and dashes, got {slug!r}")
    titles = {"en": title, "zh": title_zh}
    pages = [root / "docs" / language / f"{slug}.md" for language in LANGUAGES]
    for page in pages:
        if page.exists():
            raise ValueError(f"{page.relative_to(root)} exists already: pick another slug")
    yml = root / "mkdocs.yml"
    config = add_translation(
        add_to_nav(yml.read_text(encoding="utf-8"), slug, title, after), title, title_zh
    )
    for language, page in zip(LANGUAGES, pages, strict=True):
        page.write_text(PAGES[language].format(title=titles[language], slug=slug), encoding="utf-8")
    yml.write_text(config, encoding="utf-8")
    return [*pages, yml]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_site.scaffold", description=__doc__)
    parser.add_argument("slug", help="the page's file name without .md: rope")
    parser.add_argument("title", help='its English title: "Rotary embeddings"')
    parser.add_argument("title_zh", help='its Chinese title: "旋转位置编码"')
    parser.add_argument("--after", required=True, help="the page it follows in the nav: gqa")
    args = parser.parse_args(argv)
    try:
        written = scaffold(args.slug, args.title, args.title_zh, args.after)
    except ValueError as error:
        parser.error(str(error))
    for path in written:
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
