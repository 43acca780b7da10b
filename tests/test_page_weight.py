"""Page weight: every page of both languages, with everything it loads, stays under 1.5 MB.

A page's weight is what a first visit transfers: the response bodies of the page and of every
request it makes while loading (stylesheets, scripts, fonts, images, the search index
the search worker fetches). The test server sends files as they are; GitHub Pages, where the site
is published, sends text (HTML, CSS, JavaScript, JSON, SVG, XML) gzip-compressed, so each text
body is counted at its gzip size (level 6, as ``gzip`` does by default) and fonts and images as
they are. The budget applies to that transferred total and to the uncompressed total alike (a
host that does not compress sends the uncompressed bytes). Routing every request (to abort any
that would leave 127.0.0.1) turns off the browser's HTTP cache, so every page is weighed as a
first visit. The search index is counted as the server sends it, but the page's search worker is
handed an index without documents: building the real one (Lunr, in the worker) costs half a
second of CPU per page and weighs nothing.

The table, heaviest page first, is printed (``pytest -s``) and written to
``screenshots/page-weights.txt`` (git-ignored).
"""

from __future__ import annotations

import gzip
import json
from urllib.parse import urlsplit

import pytest
from support import LANGUAGES, ROOT, nav_pages, page_path

pytestmark = [pytest.mark.browser, pytest.mark.slow]

BUDGET = 1_500_000  # bytes: issue 10, "the heaviest page with everything it loads under 1.5 MB"
REPORT = ROOT / "screenshots" / "page-weights.txt"


TEXT = ("html", "css", "js", "json", "svg", "xml", "txt")
INDEX = "/search/search_index.json"


# The index bodies the server sent, by URL: the worker got an empty one instead (see above).
sent_bodies: dict[str, bytes] = {}


def empty_index(body: bytes) -> bytes:
    """The search index with its configuration and no documents."""
    return json.dumps({**json.loads(body), "docs": []}).encode()


def weigh(page, responses: list, url: str, known: dict) -> dict[str, tuple[int, int]]:
    """(uncompressed, transferred) bytes per URL that loading ``url`` in ``page`` fetches, page
    included; ``responses`` is the list the page's ``response`` listener appends to. ``known``
    keeps each URL's sizes once worked out: the test server sends a file the same each time, and
    most of what a page loads (stylesheets, scripts, fonts, the search index) every page loads."""
    responses.clear()
    # Everything a first visit loads has arrived once the page has loaded, its fonts are ready and
    # the search worker has fetched the index (the last request; waiting for network idle instead
    # gives the same bytes and costs half a second of idle time per page)
    with page.expect_response(lambda r: urlsplit(r.url).path.endswith(INDEX)) as index:
        answer = page.goto(url, wait_until="load")
    index.value.finished()
    page.evaluate("document.fonts.ready.then(() => true)")
    assert answer is not None and answer.ok, f"{url}: {answer and answer.status}"
    sizes: dict[str, tuple[int, int]] = {}
    for response in responses:
        if response.status >= 300:  # redirects and errors carry no resource (errors: test_browser)
            continue
        if response.url not in known:
            body = sent_bodies.get(response.url) or response.body()
            sent = len(gzip.compress(body, 6)) if kind(response.url) in TEXT else len(body)
            known[response.url] = (len(body), sent)
        size, sent = known[response.url]
        old = sizes.get(response.url, (0, 0))
        sizes[response.url] = (old[0] + size, old[1] + sent)
    return sizes


def kind(url: str) -> str:
    suffix = urlsplit(url).path.rsplit(".", 1)[-1] if "." in urlsplit(url).path else "html"
    return {"woff": "font", "woff2": "font", "js": "js", "css": "css", "json": "json"}.get(
        suffix, "html" if suffix in ("html", "/") or url.endswith("/") else suffix
    )


def test_every_page_with_what_it_loads_is_under_the_budget(browser, site_url):
    outside: list[str] = []
    context = browser.new_context(viewport={"width": 1280, "height": 900})

    def route(route):
        url = route.request.url
        if urlsplit(url).hostname == "127.0.0.1" and urlsplit(url).path.endswith(INDEX):
            response = route.fetch()
            sent_bodies[url] = response.body()
            route.fulfill(response=response, body=empty_index(sent_bodies[url]))
        elif urlsplit(url).hostname == "127.0.0.1":
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", route)  # also disables the HTTP cache: every page is a first visit
    page = context.new_page()
    page.set_default_timeout(20_000)
    responses: list = []
    page.on("response", lambda response: responses.append(response))
    rows, known = [], {}
    try:
        for lang in LANGUAGES:
            for name in nav_pages():
                path = page_path(lang, name)
                sizes = weigh(page, responses, site_url + path, known)
                by_kind: dict[str, int] = {}
                for url, (_, sent) in sizes.items():
                    by_kind[kind(url)] = by_kind.get(kind(url), 0) + sent
                heaviest = max(sizes, key=lambda url: sizes[url][1])
                raw = sum(size for size, _ in sizes.values())
                sent = sum(sent for _, sent in sizes.values())
                rows.append((sent, raw, f"{lang}/{name}", len(sizes), by_kind, heaviest))
    finally:
        context.close()
    assert not outside, f"requests to other hosts: {outside}"
    rows.sort(reverse=True)
    kinds = sorted({k for row in rows for k in row[4]})
    lines = [
        "bytes a first visit transfers (text gzip-compressed as GitHub Pages sends it), by kind",
        f"{'page':<24} {'sent':>9} {'unzipped':>9} {'requests':>8} "
        + " ".join(f"{k:>9}" for k in kinds)
        + "  largest file",
    ]
    for sent, raw, name, count, by_kind, heaviest in rows:
        cells = " ".join(f"{by_kind.get(k, 0):>9}" for k in kinds)
        largest = urlsplit(heaviest).path.removeprefix(urlsplit(site_url).path)
        lines.append(f"{name:<24} {sent:>9} {raw:>9} {count:>8} {cells}  {largest}")
    lines.append(
        f"budget: {BUDGET} bytes per page, everything it loads included, sent and unzipped alike"
    )
    table = "\n".join(lines)
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text(table + "\n", encoding="utf-8")
    print("\n" + table)
    assert len(rows) == len(LANGUAGES) * len(nav_pages()), len(rows)
    sent, _, name, *_ = rows[0]
    assert sent < BUDGET, f"{name} transfers {sent} bytes, over the {BUDGET} budget:\n{table}"
    _, raw, name, *_ = max(rows, key=lambda row: row[1])
    assert raw < BUDGET, (
        f"{name} loads {raw} bytes uncompressed, over the {BUDGET} budget:\n{table}"
    )
