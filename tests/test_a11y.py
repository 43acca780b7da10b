"""The site meets WCAG 2.0 and 2.1, levels A and AA, as axe-core checks them in a real browser.

axe-core is installed from the npm registry by ``make setup`` into ``build/axe/`` (never committed,
never served with the site) and injected into each page. Checked, with zero violations allowed:

- every page of mkdocs.yml's nav (so a new page or picture is checked too), both languages, in the
  light and the dark scheme: the reader's system preference (``prefers-color-scheme``), which the
  palette in mkdocs.yml follows (``default`` and ``slate``);
- the same pages on a phone-sized screen, where wide formulas and tables scroll sideways;
- Material's widgets in their open state: search with results, the page a result leads to with
  the search term highlighted, and the language menu.

A failure lists, per page, each rule violated with its number of elements and a few of them. Rules
left out are listed below, each with its reason. Without Chromium, CJK fonts or axe-core these tests
skip with a reason; with ``MHA_REQUIRE_BROWSER=1`` (set by ``.ci/run``) they fail.
"""

from __future__ import annotations

import os

import pytest
from support import (
    LANGUAGES,
    ROOT,
    Tab,
    mkdocs_config,
    nav_pages,
    page_path,
    screenshot,
    type_search,
)

pytestmark = pytest.mark.browser

PAGES = nav_pages()
AXE = ROOT / "build" / "axe" / "axe.min.js"
WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
AXE_OPTIONS = {"runOnly": {"type": "tag", "values": WCAG_TAGS}, "resultTypes": ["violations"]}
SCHEMES = {"light": "default", "dark": "slate"}
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 800}
# Violations not counted, as (rule, CSS selector of the elements) -> reason. Each needs a reason.
PENDING: dict[tuple[str, str], str] = {}
SEARCH_TERMS = {"en": "stride", "zh": "注意力"}
# Transitions off: axe reads colours mid-fade otherwise (search results fade in).
NO_TRANSITIONS = "*, ::before, ::after { transition: none !important; animation: none !important }"


@pytest.fixture(scope="module")
def axe_script(browser) -> str:
    if not AXE.is_file():
        reason = f"axe-core is not installed at {AXE.relative_to(ROOT)}; run `make setup`"
        if os.environ.get("MHA_REQUIRE_BROWSER") == "1":
            pytest.fail(f"MHA_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    return str(AXE)


@pytest.fixture(scope="module")
def tabs(browser, site_url, axe_script):
    """One tab per (screen, scheme), each reused for every page it opens; axe-core is in every
    page the tab opens (an init script: cheaper than adding it after each load)."""
    made: dict[tuple[str, str], Tab] = {}
    contexts = []

    def get(screen: str, scheme: str) -> Tab:
        if (screen, scheme) not in made:
            viewport = DESKTOP if screen == "desktop" else PHONE
            context = browser.new_context(viewport=viewport, color_scheme=scheme)
            context.add_init_script(path=axe_script)
            contexts.append(context)
            made[screen, scheme] = Tab(context, site_url)
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


def start_axe(p, axe_script: str) -> None:
    """Start axe's WCAG 2 A/AA check of the page as it is now; ``axe_result`` waits for it. It
    starts in the page's next task, so this returns at once and other tabs, each in its own
    renderer process, can check their pages meanwhile."""
    p.evaluate("document.fonts.ready")
    if not p.evaluate("typeof axe !== 'undefined'"):
        p.add_script_tag(path=axe_script)
    p.evaluate(
        "options => { window.mhaAxe = new Promise(go => setTimeout(go))"
        ".then(() => axe.run(document, options)); }",
        AXE_OPTIONS,
    )


def axe_result(p) -> list[dict]:
    """The violations found by the check ``start_axe`` started on the page, less the PENDING."""
    found = p.evaluate("() => window.mhaAxe")
    matches = "([target, selector]) => document.querySelector(target).matches(selector)"
    kept = []
    for violation in found["violations"]:
        pending = [sel for (rule, sel) in PENDING if rule == violation["id"]]
        nodes = [
            node
            for node in violation["nodes"]
            if not any(p.evaluate(matches, [node["target"][0], s]) for s in pending)
        ]
        if nodes:
            kept.append({**violation, "nodes": nodes})
    return kept


def axe_violations(p, axe_script: str) -> list[dict]:
    """axe's WCAG 2 A/AA violations on the page as it is now, less the PENDING ones."""
    start_axe(p, axe_script)
    return axe_result(p)


# The page checks: (screen, scheme, lang, page), each in the tab of its screen and scheme.
VARIANTS = (("desktop", "light"), ("desktop", "dark"), ("phone", "light"))


class PageChecks:
    """The page checks of the tests below, each run in its own tab. When a test checks a page,
    the checks of the same page in the other tabs that selected tests still want start too, so
    that the two cores run them side by side; each result waits, kept, for its own test, which
    asserts on it. A check whose start fails is left to its own test, which reports the error."""

    def __init__(self, tabs, axe_script: str, wanted: set[tuple[str, str, str, str]]):
        self.tabs, self.axe_script, self.wanted = tabs, axe_script, wanted
        self.running: dict[tuple[str, str], tuple[str, str, str, str]] = {}
        self.results: dict[tuple[str, str, str, str], list[dict]] = {}

    def tab(self, screen: str, scheme: str) -> Tab:
        """The tab, once the check running in it (if any) is done and its result kept."""
        check = self.running.pop((screen, scheme), None)
        if check is not None:
            try:
                self.results[check] = self._finish(check)
            except Exception:  # its own test runs it again and reports the error
                pass
        return self.tabs(screen, scheme)

    def _start(self, check: tuple[str, str, str, str]) -> None:
        screen, scheme, lang, page = check
        p = open_page(self.tab(screen, scheme), lang, page, scheme)
        start_axe(p, self.axe_script)
        self.running[screen, scheme] = check

    def _finish(self, check: tuple[str, str, str, str]) -> list[dict]:
        screen, scheme, lang, page = check
        p = self.tabs(screen, scheme).page
        found = axe_result(p)
        if screen == "desktop" and page == "walkthrough.md":
            # code-heavy: its colours, looked at in screenshots/
            p.locator("article div.highlight:has(.c1)").first.scroll_into_view_if_needed()
            screenshot(p, f"a11y-{lang}-walkthrough-{scheme}.png")
        return found

    def violations(self, screen: str, scheme: str, lang: str, page: str) -> list[dict]:
        check = (screen, scheme, lang, page)
        self.wanted.discard(check)
        if check not in self.results and self.running.get((screen, scheme)) != check:
            self._start(check)
        for other in VARIANTS:
            twin = (*other, lang, page)
            if twin in self.wanted and twin not in self.results and self.running.get(other) != twin:
                try:
                    self._start(twin)
                except Exception:  # its own test starts it again and reports the error
                    self.running.pop(other, None)
        if check in self.results:
            return self.results.pop(check)
        del self.running[screen, scheme]
        return self._finish(check)


@pytest.fixture(scope="module")
def page_checks(request, tabs, axe_script) -> PageChecks:
    """The page checks the selected tests of this module ask for."""
    wanted = set()
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "page" not in params or getattr(item, "module", None) is not request.module:
            continue
        if item.originalname == "test_page_has_no_wcag_violation":
            wanted.add(("desktop", params["scheme"], params["lang"], params["page"]))
        elif item.originalname == "test_page_on_a_phone_has_no_wcag_violation":
            wanted.add(("phone", "light", params["lang"], params["page"]))
    return PageChecks(tabs, axe_script, wanted)


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


def test_every_scheme_is_the_palette_of_mkdocs_yml():
    """The schemes these tests emulate are the ones the site offers, each for its preference."""
    palette = mkdocs_config()["theme"]["palette"]
    offered = {entry["media"]: entry["scheme"] for entry in palette}
    assert offered == {
        f"(prefers-color-scheme: {preference})": scheme for preference, scheme in SCHEMES.items()
    }, offered


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("page", PAGES)
def test_page_has_no_wcag_violation(page_checks, page, lang, scheme):
    found = page_checks.violations("desktop", scheme, lang, page)
    assert not found, report(found, f"{lang}/{page} ({scheme})")


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("page", PAGES)
def test_page_on_a_phone_has_no_wcag_violation(page_checks, page, lang):
    """390 px wide, light scheme (the colours are the desktop's, checked above in both schemes)."""
    found = page_checks.violations("phone", "light", lang, page)
    assert not found, report(found, f"{lang}/{page} (phone)")


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("lang", LANGUAGES)
def test_search_highlight_and_language_menu_have_no_wcag_violation(
    page_checks, axe_script, lang, scheme
):
    tab = page_checks.tab("desktop", scheme)
    term = SEARCH_TERMS[lang]

    p = open_page(tab, lang, "index.md", scheme)
    type_search(p, term)
    found = axe_violations(p, axe_script)
    assert not found, report(found, f"{lang} search for {term} ({scheme})")

    p = open_page(tab, lang, "walkthrough.md", scheme, query=f"?h={term}")
    assert p.locator("article mark[data-md-highlight]").count(), f"{term} is not highlighted"
    found = axe_violations(p, axe_script)
    assert not found, report(found, f"{lang}/walkthrough.md?h={term} ({scheme})")

    p.hover(".md-header .md-select")
    p.locator(".md-select__link[hreflang]").first.wait_for(state="visible")
    found = axe_violations(p, axe_script)
    assert not found, report(found, f"{lang}/walkthrough.md language menu ({scheme})")
