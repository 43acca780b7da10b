"""Start a new chapter, twin pages and their nav entries::

    python -m mha_site.scaffold SLUG "English title" "中文标题" --after PAGE

It writes the twin pages ``docs/en/SLUG.md`` and ``docs/zh/SLUG.md`` (the same heading anchor, the
same code block, each in its language) and adds the page to mkdocs.yml twice: to ``nav``, after
``PAGE`` (``masks`` puts it after ``masks.md``, in the same section), and to the i18n plugin's
``nav_translations`` (the English title and its Chinese). mkdocs.yml is edited as text, so its
comments stay. The new pages pass the strict build and the tests as they are; write them from
there (CONTRIBUTING.md says what the tests then ask of them).

With ``--picture NAME`` it also starts the chapter's picture: a generator module
``mha_site/pictures_SLUG.py`` whose picture ``NAME`` is drawn from a real run of ``mha``,
registered in ``mha_site.pictures.GENERATORS``, the marker ``<!-- picture: NAME -->`` on both
pages, and the picture's run in ``tests/test_pictures.py`` (``DRAWN``, ``PAGE_RUNS``).
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

## Recap {{ #summary }}

- Three to five things the reader can now do.
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

- 三到五条：读完本页，读者能做什么。
""",
}


GENERATOR = '''\
"""The pictures of the chapter {slug}: drawn at build time from a real run of ``mha``."""

from __future__ import annotations

import functools

import torch

from mha_site.languages import tr
from mha_site.picture_style import FONT, PAGE_RUN, Svg, shape_text


@functools.cache
def run():
    """The pages' own run: ``MHA(20, 4)`` on ``x`` of shape ``[2, 3, 20]``, and its output."""
    from mha.annotated import MHA

    torch.manual_seed(0)
    model = MHA(PAGE_RUN.hidden_size, PAGE_RUN.heads_num)
    x = torch.randn(*PAGE_RUN.x_shape)
    return x, model(x)


def {function}(language: str) -> str:
    x, out = run()
    title = tr(
        language,
        f"The output has the shape of the input: {{shape_text(out.shape)}}.",
        f"输出的形状与输入相同：{{shape_text(out.shape)}}。",
    )
    svg = Svg("{name}", title)
    label = f"x {{shape_text(x.shape)}} → MHA → out {{shape_text(out.shape)}}"
    svg.text(4, 4 + FONT, label, code=True)
    return str(svg)


PICTURES = {{"{name}": {function}}}
'''


def add_generator(pictures_source: str, module: str) -> str:
    """``mha_site/pictures.py``'s text with ``module`` imported and added to ``GENERATORS`` (both
    lists, one name a line, stay sorted)."""
    out = pictures_source
    for head in ("from mha_site import (\n", "GENERATORS = (\n"):
        start = out.find(head)
        if start < 0:
            raise ValueError(f"mha_site/pictures.py has no {head.strip()!r} list")
        start += len(head)
        end = out.index(")", start)
        names = sorted({*re.findall(r"^[ \t]+(\w+),$", out[start:end], re.M), module})
        out = out[:start] + "".join(f"    {name},\n" for name in names) + out[end:]
    return out


def add_runs(test_source: str, slug: str, name: str) -> str:
    """``tests/test_pictures.py``'s text with the picture and its page in its tables of runs
    (``DRAWN``, ``PAGE_RUNS``), both drawing the pages' own run, ``PAGE``: the run the generator
    draws. A contributor who draws another run changes these two lines, and the test checks it."""
    out = test_source
    for head, line in (
        ("DRAWN = {\n", f'    "{name}": PAGE,\n'),
        ("PAGE_RUNS = {\n", f'    "{slug}.md": PAGE,\n'),
    ):
        start = out.find(head)
        if start < 0:
            raise ValueError(f"tests/test_pictures.py has no {head.strip()!r} table")
        end = out.index("\n}", start) + 1
        out = out[:end] + line + out[end:]
    return out


def with_picture(page: str, name: str) -> str:
    """A scaffolded page with the picture's marker after its first code block."""
    end = page.index("```\n", page.index("```python")) + 4
    return page[:end] + f"\n<!-- picture: {name} -->\n" + page[end:]


def add_to_nav(config: str, slug: str, title: str, after: str) -> str:
    """mkdocs.yml's text with ``- title: slug.md`` in ``nav`` right after the entry of ``after``."""
    nav = config.index("\nnav:\n")
    entry = re.compile(rf"^(?P<indent>[ \t]*)- [^\n]*: {re.escape(after)}\.md[ \t]*\n", re.M)
    found = entry.search(config, nav)
    if found is None:
        raise ValueError(f"--after must name a page of mkdocs.yml's nav, got {after!r}")
    line = f"{found['indent']}- {_yaml_key(title)}: {slug}.md\n"
    return config[: found.end()] + line + config[found.end() :]


def _yaml_key(text: str) -> str:
    """``text`` as a YAML mapping key: quoted when it holds ``": "`` (a title with a colon)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"' if ": " in text else text


def add_translation(config: str, title: str, title_zh: str) -> str:
    """mkdocs.yml's text with ``title: title_zh`` at the end of ``nav_translations``."""
    block = re.search(
        r"^(?P<indent>[ \t]*)nav_translations:\n(?:(?P=indent)[ \t]+.*\n)+", config, re.M
    )
    if block is None:
        raise ValueError("mkdocs.yml has no nav_translations for the zh pages")
    last = block[0].rstrip("\n").rsplit("\n", 1)[-1]
    indent = last[: len(last) - len(last.lstrip())]
    line = f"{indent}{_yaml_key(title)}: {title_zh}\n"
    return config[: block.end()] + line + config[block.end() :]


def scaffold(
    slug: str, title: str, title_zh: str, after: str, picture: str | None = None, root: Path = ROOT
) -> list[Path]:
    """Write the twin pages and add them to mkdocs.yml under ``root`` (with ``picture``: its
    generator module too, registered); the files written."""
    if not SLUG.fullmatch(slug):
        raise ValueError(f"slug must be lower-case letters, digits and dashes, got {slug!r}")
    titles = {"en": title, "zh": title_zh}
    pages = [root / "docs" / language / f"{slug}.md" for language in LANGUAGES]
    generator = root / "mha_site" / f"pictures_{slug.replace('-', '_')}.py"
    for page in [*pages, *([generator] if picture else [])]:
        if page.exists():
            raise ValueError(f"{page.relative_to(root)} exists already: pick another slug")
    if picture is not None and not SLUG.fullmatch(picture):
        raise ValueError(f"picture must be lower-case letters, digits and dashes, got {picture!r}")
    yml = root / "mkdocs.yml"
    config = add_translation(
        add_to_nav(yml.read_text(encoding="utf-8"), slug, title, after), title, title_zh
    )
    written = [*pages, yml]
    if picture is not None:
        registry = root / "mha_site" / "pictures.py"
        registered = add_generator(registry.read_text(encoding="utf-8"), generator.stem)
        runs = root / "tests" / "test_pictures.py"
        with_runs = add_runs(runs.read_text(encoding="utf-8"), slug, picture)
        function = picture.replace("-", "_") + "_picture"
        generator.write_text(
            GENERATOR.format(slug=slug, name=picture, function=function), encoding="utf-8"
        )
        registry.write_text(registered, encoding="utf-8")
        runs.write_text(with_runs, encoding="utf-8")
        written += [generator, registry, runs]
    for language, page in zip(LANGUAGES, pages, strict=True):
        text = PAGES[language].format(title=titles[language], slug=slug)
        page.write_text(with_picture(text, picture) if picture else text, encoding="utf-8")
    yml.write_text(config, encoding="utf-8")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_site.scaffold", description=__doc__)
    parser.add_argument("slug", help="the page's file name without .md: rope")
    parser.add_argument("title", help='its English title: "Rotary embeddings"')
    parser.add_argument("title_zh", help='its Chinese title: "旋转位置编码"')
    parser.add_argument("--after", required=True, help="the page it follows in the nav: gqa")
    parser.add_argument("--picture", metavar="NAME", help="start a picture too: rope-angles")
    args = parser.parse_args(argv)
    try:
        written = scaffold(args.slug, args.title, args.title_zh, args.after, args.picture)
    except ValueError as error:
        parser.error(str(error))
    for path in written:
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
