"""The site meets WCAG 2.0 and 2.1, levels A and AA, as axe-core checks them in a real browser.

axe-core is installed from the npm registry by ``make setup`` into ``build/axe/`` (never committed,
never served with the site) and injected into each page. Checked, with zero violations allowed:

- every page of mkdocs.yml's nav (so a new page or picture is checked too), both languages, in the
  light and the dark scheme of the palette in mkdocs.yml (``default`` and ``slate``): each page
  opens in the light scheme (a light ``prefers-color-scheme``) and is checked, then the palette
  toggle switches it to dark in place and it is checked again (a second load of the page would
  cost as much as a check; the dark palette is the one a dark preference gets, pinned below);
- the same pages on a phone-sized screen, where wide formulas and tables scroll sideways: after the
  two schemes, the page switches back to light and the window narrows to a phone's width in
  place (Material's layout follows the width through its CSS and its resize handlers; another
  load of the page would cost as much as a check);
- Material's widgets in their open state: search with results, the page a result leads to with
  the search term highlighted, and the language menu.

Each check runs every WCAG 2 A/AA rule over what its state changes, and no rule twice over what
it does not: the colour rules take most of axe's time (about three quarters of it on the English
pages, timed by a run of each kind of rules on each page), and they lay out the whole page
whatever part of it they look at.

- light, on the desktop: every rule, the whole page;
- dark: the colour rules (axe's ``cat.color``: contrast, links told apart by colour) over the
  whole page, and every rule over the palette toggle, whose other label now shows; the switch
  changes nothing else in the page;
- phone: every rule but the colour rules over the whole page, the colour rules over all but the
  article (its colours do not depend on the width: the site's CSS has no media query, Material's
  changes the article's sizes only; they are checked on the desktop in both schemes);
- a widget open: every rule over the widget (the search dialog, the highlighted terms, the
  language menu); the page behind it is the page's own check.

The pages are checked in the visits of ``tests/visits.py`` (one load of each page, which the
load, math, switch and figure checks share), in tabs that search nothing (``support.Tab(search=
False)``: the page's search worker gets no documents, 0.3 s of CPU saved a load); the widgets, in
tabs that search.

A failure lists, per page, each rule violated with its number of elements and a few of them. Rules
left out are listed below, each with its reason. Without Chromium, CJK fonts or axe-core these tests
skip with a reason; with ``MHA_REQUIRE_BROWSER=1`` (set by ``.ci/run``) they fail.
"""

from __future__ import annotations

import os

import pytest
from support import (
    LANGUAGES,
    NEXT_FRAME,
    ROOT,
    SCHEMES,
    SCREENS,
    BrowserThreads,
    Tab,
    mkdocs_config,
    nav_pages,
    new_context,
    page_path,
    screenshot,
    switch_scheme,
    type_search,
)
from visits import NO_TRANSITIONS, probe

pytestmark = pytest.mark.browser

PAGES = nav_pages()
AXE = ROOT / "build" / "axe" / "axe.min.js"
WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
# The rules of a run: every WCAG rule, the colour rules among them, or all the others.
RULES = ("every", "colour", "others")
# What each state's check runs: (context, rules) runs, a context as axe.run takes it (None: the
# whole page). See the module's docstring for why each state checks what it checks.
EVERYTHING = [(None, "every")]
RUNS = {
    "light": EVERYTHING,
    "dark": [(None, "colour"), ({"include": [["form[data-md-component=palette]"]]}, "every")],
    "phone": [(None, "others"), ({"exclude": [["article"]]}, "colour")],
    "search": [({"include": [[".md-search"]]}, "every")],
    "highlight": [({"include": [["article mark[data-md-highlight]"]]}, "every")],
    "menu": [({"include": [[".md-header .md-select"]]}, "every")],
}
# axe.run's options for each kind of rules, worked out in the page from axe's own rule list.
AXE_RUN = """async ([runs, tags]) => {
    const wcag = axe.getRules(tags).filter(rule => !rule.tags.includes("experimental"));
    const colour = wcag.filter(rule => rule.tags.includes("cat.color")).map(rule => rule.ruleId);
    const only = values => ({ runOnly: { type: "rule", values }, resultTypes: ["violations"] });
    const rules = {
        every: only(wcag.map(rule => rule.ruleId)),
        colour: only(colour),
        others: only(wcag.map(rule => rule.ruleId).filter(id => !colour.includes(id))),
    };
    const violations = [];
    for (const [context, kind] of runs) {
        const found = await axe.run(context ?? document, rules[kind]);
        violations.push(...found.violations);
    }
    return violations;
}"""
# The checks, per kind: a page on the desktop screen in each scheme, then on the phone screen,
# one after the other in one load of the page; Material's widgets, open, in a scheme.
STATES = {
    "page": ("light", "dark", "phone"),
    "widgets": ("search", "highlight", "menu"),
}
WORKERS = 2  # browsers checking pages side by side: one per core of the machines this runs on
# Violations not counted, as (rule, CSS selector of the elements) -> reason. Each needs a reason.
PENDING: dict[tuple[str, str], str] = {}
SEARCH_TERMS = {"en": "stride", "zh": "注意力"}


@pytest.fixture(scope="module")
def axe_script(browser) -> str:
    if not AXE.is_file():
        reason = f"axe-core is not installed at {AXE.relative_to(ROOT)}; run `make setup`"
        if os.environ.get("MHA_REQUIRE_BROWSER") == "1":
            pytest.fail(f"MHA_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    return str(AXE)


def axe_context(browser, axe_script: str, screen: str = "desktop", scheme: str = "light"):
    """A context (``support.new_context``) whose every page has axe-core: an init script, cheaper
    than adding it after each load."""
    context = new_context(browser, screen, scheme)
    context.add_init_script(path=axe_script)
    return context


@pytest.fixture(scope="module")
def tabs(browser, site_url, axe_script):
    """One tab per (screen, scheme) preference, each reused for every page it opens."""
    made: dict[tuple[str, str], Tab] = {}
    contexts = []

    def get(screen: str, scheme: str) -> Tab:
        if (screen, scheme) not in made:
            context = axe_context(browser, axe_script, screen, scheme)
            contexts.append(context)
            made[screen, scheme] = Tab(context, site_url, search=False)
        return made[screen, scheme]

    yield get
    for tab in made.values():
        assert not tab.outside, f"requests to other hosts: {tab.outside}"
    for context in contexts:
        context.close()


def open_page(tab: Tab, lang: str, page: str, scheme: str, query: str = ""):
    p = tab.open(lang, page) if not query else tab.page
    if query:
        p.goto(tab.base + page_path(lang, page) + query, wait_until="load")
    p.add_style_tag(content=NO_TRANSITIONS)
    shown = p.locator("body").get_attribute("data-md-color-scheme")
    assert shown == SCHEMES[scheme], f"{lang}/{page}: the {scheme} preference shows {shown}"
    return p


def axe_violations(p, axe_script: str, state: str) -> list[dict]:
    """axe's WCAG 2 A/AA violations of the page as it is now in ``state`` (its RUNS), less the
    PENDING ones."""
    p.evaluate("document.fonts.ready")
    if not p.evaluate("typeof axe !== 'undefined'"):
        p.add_script_tag(path=axe_script)
    found = p.evaluate(AXE_RUN, [RUNS[state], WCAG_TAGS])
    matches = "([target, selector]) => document.querySelector(target).matches(selector)"
    kept = []
    for violation in found:
        pending = [sel for (rule, sel) in PENDING if rule == violation["id"]]
        nodes = [
            node
            for node in violation["nodes"]
            if not any(p.evaluate(matches, [node["target"][0], s]) for s in pending)
        ]
        if nodes:
            kept.append({**violation, "nodes": nodes})
    return kept


@probe(
    "a11y",
    states=STATES["page"],
    tests=("test_page_has_no_wcag_violation", "test_page_on_a_phone_has_no_wcag_violation"),
    init_script=str(AXE),
)
def look(tab: Tab, lang: str, page: str, state: str) -> list[dict]:
    """The page's violations in ``state``, as the visit (``tests/visits.py``) left it: light
    and dark on the desktop screen, then light on the phone screen, in one load of the page."""
    p = tab.page
    found = axe_violations(p, str(AXE), state)
    if page == "walkthrough.md" and state != "phone":
        # code-heavy: its colours, looked at in screenshots/
        p.locator("article div.highlight:has(.c1)").first.scroll_into_view_if_needed()
        screenshot(p, f"a11y-{lang}-walkthrough-{state}.png")
    return found


def check_widgets(tab: Tab, axe_script: str, lang: str, scheme: str):
    """Check Material's widgets open, in ``scheme``: search with results, the page a result leads
    to with the term highlighted, the language menu. Yields each state with its violations."""
    p, term = tab.page, SEARCH_TERMS[lang]
    p.set_viewport_size(SCREENS["desktop"])
    for page, query in (("index.md", ""), ("walkthrough.md", f"?h={term}")):
        open_page(tab, lang, page, "light", query)
        if scheme != "light":
            switch_scheme(p, scheme)
        if not query:
            type_search(p, term)
            yield "search", axe_violations(p, axe_script, "search")
    assert p.locator("article mark[data-md-highlight]").count(), f"{term} is not highlighted"
    yield "highlight", axe_violations(p, axe_script, "highlight")
    p.hover(".md-header .md-select")
    p.locator(".md-select__link[hreflang]").first.wait_for(state="visible")
    yield "menu", axe_violations(p, axe_script, "menu")


CHECKS = {"widgets": check_widgets}


class PageChecks:
    """The widgets' checks the selected tests ask for, run ahead of them by ``WORKERS`` browsers
    side by side (``support.BrowserThreads``), in the order the tests ask; each result waits,
    kept, for its own test, which asserts on it. A job (kind, lang, scheme) that fails fails each
    of its tests. (The pages' checks run in the visits of ``tests/visits.py``.)"""

    def __init__(self, site_url: str, axe_script: str, jobs: list[tuple[str, str, str]]):
        def run(tab: Tab, job: tuple[str, str, str]):
            kind, lang, target = job
            for state, found in CHECKS[kind](tab, axe_script, lang, target):
                yield (kind, state, lang, target), found

        self.threads = BrowserThreads(
            jobs,
            keys=lambda job: [(job[0], state, *job[1:]) for state in STATES[job[0]]],
            start=lambda browser: Tab(axe_context(browser, axe_script), site_url),
            run=run,
            count=WORKERS,
        )

    def violations(self, kind: str, state: str, lang: str, target: str) -> list[dict]:
        """axe's WCAG 2 A/AA violations, less the PENDING ones, of the page ``target`` (or of the
        widgets in the scheme ``target``) in ``state``."""
        assert state in STATES[kind], f"no {state} check of {kind}"
        return self.threads.result((kind, lang, target), (kind, state, lang, target))


@pytest.fixture(scope="module")
def page_checks(request, browser, site_url, axe_script) -> PageChecks:
    """The checks the selected tests of this module ask for, in their order."""
    kinds = {
        "test_search_highlight_and_language_menu_have_no_wcag_violation": ("widgets", "scheme"),
    }
    jobs = []
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if getattr(item, "module", None) is not request.module or item.originalname not in kinds:
            continue
        kind, target = kinds[item.originalname]
        if (kind, params["lang"], params[target]) not in jobs:
            jobs.append((kind, params["lang"], params[target]))
    checks = PageChecks(site_url, axe_script, jobs)
    yield checks
    checks.threads.close()


def report(violations: list[dict], where: str) -> str:
    """Per rule: its id, number of elements, impact and what it asks; a few elements; an example."""
    lines = [f"{where}: {len(violations)} WCAG 2 A/AA rules violated"]
    for v in sorted(violations, key=lambda v: -len(v["nodes"])):
        targets = [" ".join(map(str, n["target"])) for n in v["nodes"][:3]]
        more = f" (+{len(v['nodes']) - 3} more)" if len(v["nodes"]) > 3 else ""
        lines.append(f"  {v['id']} ×{len(v['nodes'])} [{v['impact']}] {v['help']}")
        lines.append(f"    at {'; '.join(targets)}{more}")
        checks = v["nodes"][0].get("any") or v["nodes"][0].get("all") or []
        if checks and checks[0].get("message"):
            lines.append(f"    e.g. {checks[0]['message']}")
    return "\n".join(lines)


@pytest.mark.premise
def test_every_scheme_is_the_palette_of_mkdocs_yml():
    """The schemes these tests emulate are the ones the site offers, each for its preference."""
    palette = mkdocs_config()["theme"]["palette"]
    offered = {entry["media"]: entry["scheme"] for entry in palette}
    assert offered == {
        f"(prefers-color-scheme: {preference})": scheme for preference, scheme in SCHEMES.items()
    }, offered


# What Material shows of the palette: the body's colours, the toggle's label shown (the one that
# switches to the other scheme), the colours it gives the browser.
PALETTE = """() => ({
    body: [...document.body.attributes].map(a => `${a.name}=${a.value}`),
    toggle: [...document.querySelectorAll("form[data-md-component=palette] label")].map(
        label => label.checkVisibility()),
    meta: [...document.querySelectorAll("meta[name=theme-color], meta[name=color-scheme]")].map(
        meta => meta.content),
})"""


@pytest.mark.premise
@pytest.mark.parametrize("lang", LANGUAGES)
def test_characterisation_the_toggle_switches_to_the_palette_a_dark_preference_gets(tabs, lang):
    """Characterisation of Material's palette (another project's behaviour, pinned because the page
    checks rely on it): a page switched to dark with the toggle shows what a reader whose system
    prefers dark gets when the page opens, so checking the one checks the other."""
    preferred = open_page(tabs("desktop", "dark"), lang, "index.md", "dark").evaluate(PALETTE)
    p = open_page(tabs("desktop", "light"), lang, "index.md", "light")
    switch_scheme(p, "dark")
    assert p.evaluate(PALETTE) == preferred
    screenshot(p, f"{lang}-home-dark.png")


# Where Material's layout puts things: the boxes of the header, the drawer button, the sidebars
# and the article, and which of them show.
LAYOUT = """() => [".md-header", "label.md-header__button[for=__drawer]", ".md-sidebar--primary",
    ".md-sidebar--secondary", "article", ".md-footer"].map(selector => {
        const e = document.querySelector(selector);
        const box = e.getBoundingClientRect();
        return [selector, e.checkVisibility(), box.x, box.width, box.height];
    })"""


@pytest.mark.premise
@pytest.mark.parametrize("lang", LANGUAGES)
def test_characterisation_a_page_narrowed_in_place_lays_out_as_one_loaded_narrow(tabs, lang):
    """Characterisation of Material's layout (another project's behaviour, pinned because the page
    checks rely on it): the phone check narrows a page checked on the desktop in place, which
    gives the layout a phone gets when the page opens at its width."""
    narrow = tabs("phone", "light")
    opened = open_page(narrow, lang, "shapes.md", "light").evaluate(LAYOUT)
    p = open_page(tabs("desktop", "light"), lang, "shapes.md", "light")
    switch_scheme(p, "dark")
    switch_scheme(p, "light")
    p.set_viewport_size(SCREENS["phone"])
    p.evaluate(NEXT_FRAME)
    try:
        assert p.evaluate(LAYOUT) == opened
    finally:
        p.set_viewport_size(SCREENS["desktop"])


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("page", PAGES)
def test_page_has_no_wcag_violation(visits, axe_script, page, lang, scheme):
    found = visits.result("a11y", scheme, lang, page)
    assert not found, report(found, f"{lang}/{page} ({scheme})")


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("page", PAGES)
def test_page_on_a_phone_has_no_wcag_violation(visits, axe_script, page, lang):
    """390 px wide, light scheme (the colours are the desktop's, checked above in both schemes)."""
    found = visits.result("a11y", "phone", lang, page)
    assert not found, report(found, f"{lang}/{page} (phone)")


@pytest.mark.page("index.md", "walkthrough.md")
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("lang", LANGUAGES)
def test_search_highlight_and_language_menu_have_no_wcag_violation(page_checks, lang, scheme):
    term = SEARCH_TERMS[lang]
    where = {
        "search": f"{lang} search for {term}",
        "highlight": f"{lang}/walkthrough.md?h={term}",
        "menu": f"{lang}/walkthrough.md language menu",
    }
    for state in STATES["widgets"]:
        found = page_checks.violations("widgets", state, lang, scheme)
        assert not found, report(found, f"{where[state]} ({scheme})")


# A fault of each kind planted where each state's check looks: (state, where, HTML) -> the rule
# that must report it. Faint text is a colour fault, an empty button a fault of another rule.
FAINT = '<span style="color:#d0d0d0;background:#ffffff">faint</span>'
EMPTY = "<button></button>"
PLANTED = {
    ("light", "article", FAINT): "color-contrast",
    ("light", "article", EMPTY): "button-name",
    ("dark", "article", FAINT): "color-contrast",
    ("dark", "form[data-md-component=palette]", EMPTY): "button-name",
    ("phone", ".md-header", FAINT): "color-contrast",
    ("phone", "article", EMPTY): "button-name",
    ("search", ".md-search", FAINT): "color-contrast",
    ("search", ".md-search", EMPTY): "button-name",
    ("highlight", "article mark[data-md-highlight]", FAINT): "color-contrast",
    ("menu", ".md-header .md-select", EMPTY): "button-name",
}


@pytest.mark.premise
def test_each_state_checks_what_it_changes_and_catches_a_fault_planted_there(tabs, axe_script):
    """RUNS at work: each state's check finds a fault planted where its state changes the page
    (and the colour rules are the ones axe files under cat.color)."""
    p = open_page(tabs("desktop", "light"), "en", "shapes.md", "light", "?h=stride")
    colour = p.evaluate(
        "tags => axe.getRules(tags).filter(r => r.tags.includes('cat.color')).map(r => r.ruleId)",
        WCAG_TAGS,
    )
    assert sorted(colour) == ["color-contrast", "link-in-text-block"], colour
    missed = []
    for (state, where, html), rule in PLANTED.items():
        p.evaluate(
            "([where, html]) => document.querySelector(where).insertAdjacentHTML("
            "'beforeend', `<span id=mha-planted>${html}</span>`)",
            [where, html],
        )
        found = {v["id"] for v in axe_violations(p, axe_script, state)}
        p.evaluate("document.getElementById('mha-planted').remove()")
        if rule not in found:
            missed.append(f"{state}: {rule} planted in {where}, found {sorted(found)}")
    assert not missed, "\n".join(missed)
