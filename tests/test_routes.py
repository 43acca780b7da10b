"""The two routes of the home page and the "You need" line of each chapter (``mha_site/routes.py``):
every page they name exists in each language, nothing is needed before it is in the menu, a route
reads its pages after what they need, and every chapter says what it needs."""

from __future__ import annotations

import re

import pytest
from test_reading_guide import guide, rows

from mha_site.languages import DOCS, LANGUAGES, nav_pages
from mha_site.routes import NEEDS, ROUTES, minutes, needs_line, route_table, source, title

MENU = nav_pages()
# The chapters that name no page they build on, each with why.
STARTS = {
    "index.md": "the home page",
    "why.md": "the first page of the first route",
    "exercises.md": "each exercise names the page it practises",
}


def kinds() -> dict[str, str]:
    """Each page's kind (core, optional, reference) in the home page's reading guide."""
    return {row["page"]: row["kind"] for row in rows(guide("en"))}


def test_every_page_named_is_a_page_of_the_menu_with_a_title_in_each_language():
    named = {page for route in ROUTES.values() for page in route}
    named |= set(NEEDS) | {need for needs in NEEDS.values() for need in needs}
    for page in sorted(named):
        assert page.partition("#")[0] in MENU, page
        for lang in LANGUAGES:
            assert title(lang, page) and source(lang, page), (lang, page)


def test_nothing_is_needed_that_comes_later_in_the_menu():
    later = [
        f"{page} needs {need}"
        for page, needs in NEEDS.items()
        for need in needs
        if MENU.index(need) >= MENU.index(page)
    ]
    assert not later, later


@pytest.mark.parametrize("route", ROUTES)
def test_a_route_has_about_ten_pages_each_after_what_it_needs_of_the_route(route):
    pages = ROUTES[route]
    assert 8 <= len(pages) <= 11, pages
    for at, page in enumerate(pages):
        for need in NEEDS.get(page, ()):
            if need in pages:
                assert pages.index(need) < at, f"{route}: {page} before {need}"


def test_every_chapter_names_what_it_needs():
    guide = kinds()
    assert set(guide) == set(MENU) - {"index.md"}, sorted(set(MENU) ^ set(guide))
    chapters = [page for page in MENU if guide.get(page) != "reference"]
    silent = [page for page in chapters if page not in NEEDS and page not in STARTS]
    assert not silent, silent


@pytest.mark.parametrize("lang", LANGUAGES)
def test_a_route_table_lists_its_pages_with_their_minutes_and_the_total(lang):
    for route, pages in ROUTES.items():
        table = route_table(route, lang)
        rows = re.findall(r"^\| (\d+) \| \[[^\]]+\]\(([\w.#-]+)\) \| (\d+) \|$", table, re.M)
        assert [(int(n), page) for n, page, _ in rows] == list(enumerate(pages, start=1)), table
        spent = [int(m) for *_, m in rows]
        assert spent == [minutes(lang, page) for page in pages] and min(spent) >= 1, spent
        assert f" {sum(spent)} " in table.splitlines()[-1], table


def test_the_minutes_grow_with_the_prose_and_the_code_shown_not_with_what_is_collapsed():
    short = minutes("en", "window.md")
    assert minutes("en", "walkthrough.md") > 2 * short, short  # 6,000 words against 900
    # the walkthrough's deep dives and hidden set-up are most of its words, and not read
    whole = len(re.findall(r"\w+", source("en", "walkthrough.md")))
    assert minutes("en", "walkthrough.md") < whole / 200, whole


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_home_page_shows_both_routes(lang):
    home = (DOCS / lang / "index.md").read_text(encoding="utf-8")
    for route in ROUTES:
        assert home.count(f"<!-- route: {route} -->") == 1, route


def test_the_you_need_line_links_each_page_by_its_own_title():
    assert needs_line("en", "why.md") is None
    line = needs_line("zh", "gqa.md")
    assert line == "先读：[注意力头相互独立](heads.md)、[KV 缓存与逐位置生成](cache.md)。", line
