"""How long each page's main thread is: the prose a reader reads straight through, less its code,
its collapsible blocks (deep dives, solutions, answers), math and markup (``markdown.main_thread``),
counted by ``markdown.words`` (English words; Chinese characters one each).

``python -m mha_site.words`` prints, per page of the nav, the main thread and the whole page in
each language: the figures a restructuring of a page reports before and after.
"""

from __future__ import annotations

from mha_site.languages import DOCS, LANGUAGES, nav_pages
from mha_site.markdown import main_thread, words


def lengths(language: str, page: str) -> tuple[int, int]:
    """(main thread, whole page) of ``page`` in ``language``, by ``markdown.words``."""
    text = (DOCS / language / page).read_text(encoding="utf-8")
    return words(main_thread(text)), words(text)


def table() -> str:
    header = "page".ljust(18) + "".join(
        f"{lang + ' main':>10}{lang + ' all':>9}" for lang in LANGUAGES
    )
    rows = [header]
    for page in nav_pages():
        cells = "".join(
            f"{main:>10}{whole:>9}" for main, whole in (lengths(lang, page) for lang in LANGUAGES)
        )
        rows.append(page.ljust(18) + cells)
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
