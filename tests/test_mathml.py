"""LaTeX becomes MathML at build time (``mha_site/mathml.py``), in the text, in the table of
contents, and, as its LaTeX source without delimiters, in the page's title.

The site's own pages take their titles from the nav, so the last case is checked on a small site
built here: a page whose first heading holds math and whose title comes from that heading.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from mha_site import mathml


def test_a_formula_becomes_mathml_and_an_escaped_underscore_a_plain_one():
    out = mathml.latex_to_mathml(r"\text{hidden\_size} \times W_o", "inline")
    assert out.startswith("<math") and "<msub>" in out, out
    assert "hidden_size</mtext>" in out, out


def test_a_heading_with_math_gives_a_plain_title_and_mathml_in_the_contents(tmp_path: Path):
    hook = Path(mathml.__file__)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("Home\n", encoding="utf-8")
    (tmp_path / "docs" / "project.md").write_text(
        "# Project with $W_o$\n\n## Scale by $\\sqrt{d}$\n\nText $x$.\n", encoding="utf-8"
    )
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: t\n"
        "markdown_extensions:\n  - toc\n  - pymdownx.arithmatex:\n      generic: true\n"
        f"hooks:\n  - {hook}\n",
        encoding="utf-8",
    )
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "-q", "-d", str(tmp_path / "site")],
        cwd=tmp_path,
        check=True,
    )
    page = (tmp_path / "site" / "project" / "index.html").read_text(encoding="utf-8")
    title = re.search(r"<title>(.*?)</title>", page, re.S)[1]
    assert title.startswith("Project with W_o"), title
    assert "\\(" not in title and "<math" not in title, title
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "Project with W_o" in home, "the nav shows the title of the page"
    assert "\\(" not in page, "no LaTeX delimiter is left on the page"
    assert page.count("<math") >= 3, "the heading, the contents' entry and the text"
