"""The built site in a real browser: headless Chromium driven by Playwright, over 127.0.0.1 only.

Every page of both languages loads without a console or page error (the i18n plugin's missing
``/zh/sitemap.xml`` aside), its math is rendered, the language switch lands on the twin page
(these in the one visit of each page that axe's and the figures' checks share,
``tests/visits.py``), the copy button copies code only (no ``>>>``, no output) and the second
button a script that runs on its own, and no request leaves 127.0.0.1: Chromium resolves no
other host name (``--host-resolver-rules``), every request to another host is recorded, and a test
fails if there is one. Search is tested in ``tests/test_search.py``, the palette in
``tests/test_a11y.py``. Screenshots go to ``screenshots/`` (git-ignored), with ``make
screenshots`` only.

Without Chromium (or without CJK fonts, which Chinese needs to render) these tests skip with a
reason that says what to install; with ``MHA_REQUIRE_BROWSER=1`` (set by ``.ci/run``) they fail.
"""

from __future__ import annotations

import json

import pytest
from support import (
    LANGUAGES,
    NEXT_FRAME,
    ROOT,
    BrowserThreads,
    Tab,
    nav_pages,
    new_context,
    page_path,
    screenshot,
    switch_language,
)
from visits import BACK, probe

from mha_site.runnable import DOCSTRING_HEADER, parse, scripts

pytestmark = pytest.mark.browser

PAGES = nav_pages()

# The ``browser`` fixture (one Chromium for the whole session) is in tests/conftest.py; the ``Tab``
# that records errors and requests to other hosts is in tests/support.py.


@pytest.fixture(scope="module")
def context(browser):
    context = browser.new_context(
        viewport={"width": 1280, "height": 900}, permissions=["clipboard-read", "clipboard-write"]
    )
    yield context
    context.close()


@pytest.fixture(scope="module")
def tab(context, site_url):
    tab = Tab(context, site_url, search=False)
    yield tab
    assert not tab.outside, f"requests to other hosts: {tab.outside}"


def math_sizes(page) -> list[tuple[float, float]]:
    return page.eval_on_selector_all(
        "article math",
        "els => els.map(e => { const r = e.getBoundingClientRect(); return [r.width, r.height]; })",
    )


@probe(
    "load",
    states=("light", BACK),
    tests=("test_each_language_loads_clean_renders_its_math_and_switches_to_the_other",),
)
def check_page(tab: Tab, lang: str, page: str, state: str) -> None:
    """The page the tab shows is ``lang``'s ``page``, loaded without an error (by its address, or
    by the language menu of its twin: ``tests/visits.py``), titled, with its math rendered and
    its emphasis in the language's style; back from the twin (``BACK``), in its language."""
    p = tab.page
    assert p.url == tab.base + page_path(lang, page), p.url
    assert p.locator("html").get_attribute("lang") == lang
    if state == BACK:
        tab.assert_clean()
        return
    assert p.locator("article h1").first.inner_text().strip(), f"{lang}/{page} has no title"
    sizes = math_sizes(p)
    flat = [s for s in sizes if s[0] <= 0 or s[1] <= 0]
    assert not flat, f"{lang}/{page}: {len(flat)} of {len(sizes)} formulas are not rendered"
    # Chinese has no italic: a slanted CJK glyph is a faux italic, so zh emphasis stands upright.
    styles = set(
        p.eval_on_selector_all("article em", "es => es.map(e => getComputedStyle(e).fontStyle)")
    )
    assert styles <= ({"normal"} if lang == "zh" else {"italic"}), f"{lang}/{page}: em {styles}"
    if page in ("walkthrough.md", "api.md"):
        screenshot(p, f"{lang}-{page.removesuffix('.md')}.png")
    tab.assert_clean()


# Each table of the article: whether it scrolls sideways, and whether the line above it that
# says so (mha.js) shows.
TABLES = """() => [...document.querySelectorAll("article .md-typeset__scrollwrap")].map(wrap => {
    const note = wrap.previousElementSibling;
    // shown when its box is (a table in a closed deep dive is measured all the same)
    const hint = note && note.classList.contains("mha-scroll-hint") && !note.hidden;
    return [wrap.scrollWidth > wrap.clientWidth + 1, Boolean(hint),
            wrap.querySelector("th")?.textContent.trim() ?? ""];
})"""


@probe("tables", states=("light", "phone"), tests=("test_a_table_wider_than_the_page_says_so",))
def check_tables(tab: Tab, lang: str, page: str, state: str) -> list[str]:
    """The tables whose hint does not match: one that scrolls without it, or one that does not
    with it; with how many tables scroll."""
    tab.page.evaluate(NEXT_FRAME)  # after the resize handlers
    tables = tab.page.evaluate(TABLES)
    wrong = [
        f"{'scrolls without the hint' if scrolls else 'fits, with the hint'}: {head!r}"
        for scrolls, hint, head in tables
        if scrolls != hint
    ]
    return wrong


@pytest.mark.parametrize("page", PAGES)
def test_a_table_wider_than_the_page_says_so(visits, page):
    """Every table at the desktop's width (1280 px) and the phone's (390 px), both languages:
    one that scrolls sideways has the line above it that says so, one that fits has none."""
    for lang in LANGUAGES:
        for state in ("light", "phone"):
            wrong = visits.result("tables", state, lang, page)
            if isinstance(wrong, Exception):
                raise wrong
            assert not wrong, f"{lang}/{page} ({state}): {wrong}"


@pytest.mark.parametrize("page", PAGES)
def test_each_language_loads_clean_renders_its_math_and_switches_to_the_other(visits, page):
    """``check_page`` in each language, the second reached by the first's language menu, and
    back (the visit of ``tests/visits.py``)."""
    for lang in LANGUAGES:
        visits.result("load", "light", lang, page)
    visits.result("load", BACK, LANGUAGES[0], page)


def test_browser_threads_give_each_test_its_jobs_value_or_error(browser, site_url):
    """A job's values reach the tests that ask for them, whichever thread ran it; a job that
    raises, or ends, fails each of its keys it had not yielded; a key taken already is run for
    again."""

    def run(tab: Tab, job: str):
        yield (job, "lang"), tab.open("zh", "index.md").locator("html").get_attribute("lang")
        if job == "broken":
            raise RuntimeError("the page broke")
        if job == "fine":
            yield (job, "path"), tab.page.url.removeprefix(site_url)

    threads = BrowserThreads(
        ["fine", "broken", "short"],
        keys=lambda job: [(job, "lang"), (job, "path")],
        start=lambda browser: Tab(new_context(browser), site_url, search=False),
        run=run,
    )
    try:
        assert threads.result("broken", ("broken", "lang")) == "zh"
        with pytest.raises(RuntimeError, match="the page broke"):
            threads.result("broken", ("broken", "path"))
        with pytest.raises(AssertionError, match="ended without yielding this key"):
            threads.result("short", ("short", "path"))
        for _ in range(2):  # the second time, the job runs again
            assert threads.result("fine", ("fine", "path"), timeout=60) == "zh/"
    finally:
        threads.close()


@pytest.mark.page("index.md")
@pytest.mark.parametrize("lang", LANGUAGES)
def test_home_page_math_is_rendered_as_mathml(tab, lang):
    p = tab.open(lang, "index.md")
    sizes = math_sizes(p)
    assert sizes, f"no <math> on the {lang} home page"
    block = p.locator("article .mha-math math").first
    box = block.bounding_box()
    assert box and box["width"] > 100 and box["height"] > 20, box  # a displayed fraction
    screenshot(p, f"{lang}-home.png")
    tab.assert_clean()


@pytest.mark.parametrize("lang", LANGUAGES)
def test_a_missing_address_shows_the_404_page_of_its_language(tab, lang):
    """The server sends the root's 404 page for every missing address, as GitHub Pages does; under
    zh/ it goes on to the Chinese one (header, menu and search in Chinese)."""
    prefix = "" if lang == LANGUAGES[0] else f"{lang}/"
    p = tab.page
    answer = p.goto(f"{tab.base}{prefix}no-such-page/", wait_until="load")
    assert answer is not None and answer.status == 404, answer and answer.status
    if prefix:
        p.wait_for_url(f"{tab.base}{prefix}404.html")
    heading = {"en": "404 – Not found", "zh": "404 – 页面不存在"}[lang]
    assert p.locator("article h1").first.text_content() == heading
    assert p.locator("html").get_attribute("lang") == lang


@pytest.mark.page("math.md")
@pytest.mark.parametrize("lang", LANGUAGES)
def test_math_is_drawn_with_the_self_hosted_math_font(tab, lang):
    p = tab.open(lang, "math.md")
    loaded = p.evaluate(
        """async () => {
            const faces = await document.fonts.load('16px "Noto Sans Math"', "\u221a");
            return faces.map(f => f.status);
        }"""
    )
    assert loaded == ["loaded"], f"{lang}: Noto Sans Math did not load from the site: {loaded}"
    family = p.eval_on_selector("article math", "e => getComputedStyle(e).fontFamily")
    assert family.startswith('"Noto Sans Math"'), family
    tab.assert_clean()


@pytest.mark.page("walkthrough.md")
def test_language_switch_keeps_the_section(tab):
    first, last = LANGUAGES[0], LANGUAGES[-1]
    p = tab.open(first, "walkthrough.md")
    p.goto(tab.base + page_path(first, "walkthrough.md") + "#split-heads")
    for here, there in ((first, last), (last, first)):
        # the second switch starts from the section the first one landed on
        assert p.url == tab.base + page_path(here, "walkthrough.md") + "#split-heads", p.url
        switch_language(tab, there, tab.base + page_path(there, "walkthrough.md") + "#split-heads")
        assert p.locator("html").get_attribute("lang") == there
    tab.assert_clean()


# The two copy buttons of a code block: Material's copies code only (no prompts, no output), the
# second copies the block as a script that runs on its own (mha_site/runnable.py).
RUNNABLE_TITLE = {"en": "Copy as a runnable script", "zh": "复制为可运行脚本"}


def page_scripts(lang: str, page: str):
    """The page's blocks and scripts, parsed from its Markdown as the build parses it."""
    source = ROOT / "docs" / lang / page
    blocks = parse(source.read_text(encoding="utf-8"), str(source))
    return blocks, scripts(blocks, lang)


def clipboard_after(p, click) -> str:
    p.evaluate("navigator.clipboard.writeText('')")
    click()
    p.wait_for_function("async () => (await navigator.clipboard.readText()) !== ''")
    return p.evaluate("navigator.clipboard.readText()")


@pytest.mark.page("walkthrough.md")
@pytest.mark.parametrize("lang", LANGUAGES)
def test_copy_buttons_copy_code_only_and_a_runnable_script(tab, lang):
    blocks, runnable = page_scripts(lang, "walkthrough.md")
    p = tab.open(lang, "walkthrough.md")
    rendered = p.locator("article div.highlight[data-mha-runnable]")
    assert rendered.count() == len(runnable.ids), "a runnable block without its button data"
    order = sorted(runnable.ids)  # rendered in page order
    # A doctest-style block that shows a traceback: both buttons.
    n = next(n for n, i in enumerate(order) if blocks[order[n]].raises)
    block, index = rendered.nth(n), order[n]
    block.scroll_into_view_if_needed()
    block.hover()
    copy = block.locator("button.md-code__button[data-md-type=copy]")
    copied = clipboard_after(p, copy.click)
    assert ">>>" not in copied and "Traceback" not in copied, copied
    assert copied == blocks[index].copy_text(), copied
    button = block.locator("nav.md-code__nav > button.md-code__button[data-mha-type=runnable]")
    assert button.get_attribute("title") == RUNNABLE_TITLE[lang]
    assert button.get_attribute("aria-label") == RUNNABLE_TITLE[lang]
    script = clipboard_after(p, button.click)
    assert script == runnable.script(index), script[-500:]
    assert ">>>" not in script, script
    # Keyboard: Tab reaches the button of the next block, Enter copies.
    block, index = rendered.nth(n + 1), order[n + 1]
    block.locator("button[data-md-type=copy]").focus()
    p.keyboard.press("Tab")
    focused = p.evaluate("document.activeElement.dataset.mhaType")
    assert focused == "runnable", focused
    assert clipboard_after(p, lambda: p.keyboard.press("Enter")) == runnable.script(index)
    # A block inside a deep dive (a collapsed details block): opened, its buttons work the same.
    n = rendered.evaluate_all("blocks => blocks.findIndex(b => b.closest('details') !== null)")
    assert n >= 0, "the walkthrough has no code in a deep dive"
    block = rendered.nth(n)
    assert not block.is_visible(), "a deep dive starts collapsed"
    block.evaluate("b => b.closest('details').querySelector('summary').click()")
    block.hover()
    button = block.locator("nav.md-code__nav > button.md-code__button[data-mha-type=runnable]")
    assert clipboard_after(p, button.click) == runnable.script(order[n])
    # A plain block: Material's button copies it as it is.
    plain = next(n for n, i in enumerate(order) if not blocks[i].doctest)
    block = rendered.nth(plain)
    block.hover()
    copied = clipboard_after(p, block.locator("button[data-md-type=copy]").click)
    assert copied == blocks[order[plain]].source.rstrip("\n"), copied
    tab.assert_clean()


@pytest.mark.page("api.md")
def test_docstring_examples_on_the_api_page_get_both_buttons(tab):
    for lang in LANGUAGES:
        p = tab.open(lang, "api.md")
        block = p.locator("article div.highlight[data-mha-runnable]").last
        block.scroll_into_view_if_needed()
        block.hover()
        copied = clipboard_after(p, block.locator("button[data-md-type=copy]").click)
        assert copied and ">>>" not in copied, copied
        button = block.locator("button[data-mha-type=runnable]")
        assert button.get_attribute("title") == RUNNABLE_TITLE[lang]
        script = clipboard_after(p, button.click)
        assert script.startswith(DOCSTRING_HEADER[lang].split("{")[0]), script[:200]
        assert script.rstrip().endswith(copied.splitlines()[-1]), script[-200:]
    tab.assert_clean()


@pytest.fixture(scope="module")
def sharp_tab(browser, site_url):
    """A tab at twice the pixel density, for screenshots of small things such as icons."""
    context = browser.new_context(
        viewport={"width": 1000, "height": 800},
        device_scale_factor=2,
        permissions=["clipboard-read", "clipboard-write"],
    )
    tab = Tab(context, site_url, search=False)
    yield tab
    context.close()
    assert not tab.outside, f"requests to other hosts: {tab.outside}"


@pytest.mark.page("walkthrough.md")
@pytest.mark.parametrize("lang", LANGUAGES)
def test_screenshots_of_the_copy_buttons_in_light_and_dark_mode(sharp_tab, lang):
    """screenshots/{lang}-copy-buttons-{light,dark}[-focus].png: the two buttons of a block on
    hover, and with the runnable button focused from the keyboard."""
    p = sharp_tab.open(lang, "walkthrough.md")
    for scheme in ("default", "slate"):
        if p.locator("body").get_attribute("data-md-color-scheme") != scheme:
            p.locator("form[data-md-component=palette] label:visible").first.click()
            p.wait_for_function(f"document.body.dataset.mdColorScheme === '{scheme}'")
        # the 4th block a reader sees without opening a deep dive
        block = p.locator("article div.highlight[data-mha-runnable] >> visible=true").nth(3)
        block.scroll_into_view_if_needed()
        block.hover()
        button = block.locator("button[data-mha-type=runnable]")
        button.wait_for()
        icon = button.evaluate("b => getComputedStyle(b, '::after').maskImage")
        assert "data:image/svg+xml" in icon, icon
        copy = block.locator("button[data-md-type=copy]")
        assert button.bounding_box()["y"] == copy.bounding_box()["y"], "not beside the copy button"
        name = "light" if scheme == "default" else "dark"
        screenshot(block, f"{lang}-copy-buttons-{name}.png")
        copy.focus()
        p.keyboard.press("Tab")  # keyboard focus: the focus ring shows
        screenshot(block, f"{lang}-copy-buttons-{name}-focus.png")
    p.locator("form[data-md-component=palette] label:visible").first.click()  # back to light
    p.wait_for_function("document.body.dataset.mdColorScheme === 'default'")
    sharp_tab.assert_clean()


@pytest.mark.premise
@pytest.mark.parametrize("lang", LANGUAGES)
def test_a_tab_that_searches_nothing_loads_the_index_and_gives_its_worker_none(
    tab, built_site, lang
):
    """``Tab(search=False)``, the tabs of the page checks: the page fetches its language's index
    and posts all its documents towards the worker, which gets none, so search finds nothing (in
    a tab that searches, tests/test_search.py); the page loads clean."""
    index = built_site / page_path(lang, "index.md") / "search" / "search_index.json"
    p = tab.open(lang, "index.md")
    p.wait_for_function("() => window.mhaSearchDocs !== undefined")
    assert p.evaluate("window.mhaSearchDocs") == len(json.loads(index.read_bytes())["docs"])
    p.locator("input.md-search__input").click()
    p.locator("input.md-search__input").fill("attention" if lang == "en" else "注意力")
    p.locator("input.md-search__input").press("End")
    none = json.loads(p.locator("#__config").text_content())["translations"]["search.result.none"]
    p.wait_for_function(
        "text => document.querySelector('.md-search-result__meta').textContent.trim() === text",
        arg=none,
    )
    tab.assert_clean()


@pytest.mark.premise
def test_the_harness_records_and_fails_requests_to_other_hosts(tab):
    """A test of the harness (``support.Tab``), not of the site: the guard the other tests rely
    on is real. A request to another host, by a script or by an element the page gains, is
    recorded (and fails the test), and Chromium could not even resolve the host."""
    p = tab.open("en", "index.md")
    assert tab.outside == [], tab.outside
    for url, ask in (
        ("https://example.com/x.js", "url => fetch(url).catch(() => null)"),
        (
            "https://example.com/x.png",
            "url => document.querySelector('article').append(Object.assign("
            "document.createElement('img'), {src: url}))",
        ),
    ):
        with p.expect_event("requestfailed", lambda request, url=url: request.url == url) as ev:
            p.evaluate(ask, url)
        assert "ERR_NAME_NOT_RESOLVED" in (ev.value.failure or ""), ev.value.failure
        assert tab.outside == [url], tab.outside
        with pytest.raises(AssertionError, match="requests to other hosts"):
            tab.assert_clean()
        tab.outside.clear()
