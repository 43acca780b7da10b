"""One visit of each page for the page checks of three modules: axe (``tests/test_a11y.py``), the
load, the math and the language switch (``tests/test_browser.py``), the figures
(``tests/test_pictures.py``).

A page load is most of what a page check costs but axe: those three modules loaded each page of
both languages nine times between them (axe twice, the switch three times, the figures four).
Here each page is loaded three times, as a reader goes: the English page by its address; in each
of its states a *probe* of each module that the selected tests want looks at it:

- ``light``: the desktop screen, the light scheme the context prefers;
- ``dark``: the palette toggle switches it in place (``support.switch_scheme``);
- ``phone``: the toggle back to light, and the window narrowed in place to a phone's width;
- ``phone-dark``: the toggle to dark at that width.

``tests/test_a11y.py`` shows that a page switched in place is the page a reader who prefers that
scheme, or who has that screen, gets when it opens (its characterisation tests). Then, back on the
desktop screen in the light scheme, the header's language menu switches to the Chinese twin (a
whole page load: no ``navigation.instant``), which goes through the same states, and the menu
switches back: the state ``back`` of the English page.

A module registers a probe (``probe``): the states it looks in, the tests that want it and the
parameter that names their page. A probe looks at the page as the state left it and returns a
value or raises; a test asks ``Visits.result`` for the value of its (probe, state, language,
page), and gets the error of its own probe only. Two browsers visit the pages side by side
(``support.BrowserThreads``), in the order the tests ask for them; the transitions are off (axe
reads colours mid-fade, and a box mid-transition), and the tabs search nothing
(``support.Tab(search=False)``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from support import (
    LANGUAGES,
    NEXT_FRAME,
    SCHEMES,
    SCREENS,
    BrowserThreads,
    Tab,
    new_context,
    page_path,
    switch_language,
    switch_scheme,
)

# Each state: (screen, scheme). The visit goes through them in this order, each page of each
# language, then comes back to the first page (``BACK``).
STATES = {
    "light": ("desktop", "light"),
    "dark": ("desktop", "dark"),
    "phone": ("phone", "light"),
    "phone-dark": ("phone", "dark"),
}
BACK = "back"
NO_TRANSITIONS = "*, ::before, ::after { transition: none !important; animation: none !important }"


@dataclass(frozen=True)
class Probe:
    """What a module looks at in each page it is wanted for: ``look(tab, lang, page, state)`` in
    each of ``states``, for the tests named ``tests``, whose parameter ``param`` names the page.
    ``init_script``: a script the visiting tabs load into every page (axe-core)."""

    look: Callable[[Tab, str, str, str], object]
    states: tuple[str, ...]
    tests: tuple[str, ...]
    param: str = "page"
    init_script: str | None = None


PROBES: dict[str, Probe] = {}


def probe(name: str, **options) -> Callable:
    """Register the decorated ``look(tab, lang, page, state)`` as the probe ``name``."""

    def register(look: Callable) -> Callable:
        PROBES[name] = Probe(look, **options)
        return look

    return register


class Visits:
    """The pages the selected tests want, visited ahead of them; ``result`` gives a probe's
    value in a state, or raises its error."""

    def __init__(self, items, site_url: str):
        self.base = site_url
        self.wanted: dict[str, list[str]] = {}  # page -> the probes wanted there, in order
        for item in items:
            params = getattr(getattr(item, "callspec", None), "params", {})
            for name, wanted in PROBES.items():
                if getattr(item, "originalname", None) in wanted.tests:
                    names = self.wanted.setdefault(params[wanted.param], [])
                    if name not in names:
                        names.append(name)
        # (a missing script is the probe's to report: axe's tests skip or fail without it)
        scripts = sorted({p.init_script for p in PROBES.values() if p.init_script})
        scripts = [script for script in scripts if Path(script).is_file()]

        def start(browser) -> Tab:
            context = new_context(browser)
            for script in scripts:
                context.add_init_script(path=script)
            return Tab(context, site_url, search=False)

        self.threads = BrowserThreads(
            list(self.wanted), keys=self.keys, start=start, run=self.visit
        )

    def keys(self, page: str) -> list[tuple[str, str, str, str]]:
        """The (probe, state, language, page) that visiting ``page`` yields, in order."""
        keys = []
        for name in self.wanted.get(page, list(PROBES)):
            states = PROBES[name].states
            for lang in LANGUAGES:
                keys += [(name, state, lang, page) for state in STATES if state in states]
            if BACK in states:
                keys.append((name, BACK, LANGUAGES[0], page))
        return keys

    def result(self, name: str, state: str, lang: str, page: str):
        return self.threads.result(page, (name, state, lang, page))

    def close(self) -> None:
        self.threads.close()  # fails on a request to another host

    def visit(self, tab: Tab, page: str):
        names = self.wanted.get(page, list(PROBES))
        wants = [(name, PROBES[name]) for name in names]
        for i, lang in enumerate(LANGUAGES):
            self.arrive(tab, lang, page, by_menu=i > 0)
            now = STATES["light"]
            for state, (screen, scheme) in STATES.items():
                looking = [(name, p) for name, p in wants if state in p.states]
                if not looking:
                    continue
                now = self.go(tab, now, (screen, scheme))
                for name, p in looking:
                    yield (name, state, lang, page), attempt(p.look, tab, lang, page, state)
            self.go(tab, now, STATES["light"])
        looking = [(name, p) for name, p in wants if BACK in p.states]
        if looking:
            first = LANGUAGES[0]
            self.arrive(tab, first, page, by_menu=True)
            for name, p in looking:
                yield (name, BACK, first, page), attempt(p.look, tab, first, page, BACK)

    def arrive(self, tab: Tab, lang: str, page: str, by_menu: bool) -> None:
        """``lang``'s ``page`` in the tab, light on the desktop screen: by its address, or by
        the header's language menu, as a reader picks the language (the errors recorded from
        the load on)."""
        p = tab.page
        if by_menu:
            switch_language(tab, lang, self.base + page_path(lang, page))
        else:
            tab.open(lang, page)
        p.add_style_tag(content=NO_TRANSITIONS)
        shown = p.locator("body").get_attribute("data-md-color-scheme")
        assert shown == SCHEMES["light"], f"{lang}/{page}: the light preference shows {shown}"

    @staticmethod
    def go(tab: Tab, now: tuple[str, str], then: tuple[str, str]) -> tuple[str, str]:
        """From the state ``now`` (screen, scheme) to ``then``, in place: the toggle, then the
        window's size."""
        if now[1] != then[1]:
            switch_scheme(tab.page, then[1])
        if now[0] != then[0]:
            tab.page.set_viewport_size(SCREENS[then[0]])
            tab.page.evaluate(NEXT_FRAME)  # laid out at the new width
        return then


def attempt(look: Callable, *args):
    """What ``look`` returns, or the error it raises (its test raises it; the others go on)."""
    try:
        return look(*args)
    except Exception as error:  # handed to the test that asks for it
        return error
