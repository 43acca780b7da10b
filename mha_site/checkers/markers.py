"""Every marker of every page (``<!-- picture: NAME -->``, ``<!-- bench-table: NAME -->``) is of a
known kind, names something that kind knows, and stands on a line of its own
(``mha_site.markers``): the strict build would fail otherwise, this says where without building."""

from __future__ import annotations

from mha_site.languages import ROOT, doc_pages
from mha_site.markers import problems


def check() -> list[str]:
    found = []
    for page in doc_pages():
        text = page.read_text(encoding="utf-8")
        for problem in problems(text):
            found.append(f"{page.relative_to(ROOT)}: {problem}")
    return found
