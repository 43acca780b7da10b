"""Search stays in the reader's language, finds the site's own terms and ranks the page first.

Each language has its own search index, ``search/search_index.json`` for English and
``zh/search/search_index.json`` for Chinese, and each page loads its language's
(``mha_site/search_language.py``). The Chinese index is cut by jieba with a user dictionary
written at build time from the glossary and the page titles (``mha_site/search_dictionary.py``), so
逐行走读 is one word, not 逐 / 行走 / 读; the page's script ``docs/assets/search.js`` cuts a
Chinese query into the same words before Material's search worker sees it (转置 is searched as
转置, not as 转).

The first tests read the built index files and the dictionary. The browser tests (marked
``browser``; they skip or fail like ``tests/test_browser.py``, whose ``browser`` fixture they use)
type glossary terms into the search box of a page of each language and check that every result is
in that language and that every page of that language using the term is found; that the page
teaching a term (``TEACHES``) is among the first three results, that each of those three uses the
term, and that 80% of the pages using it are found; and that the script cuts every term of the
glossary as the index does. Which pages use a term is read from the built pages' article text,
code included (search indexes it): a Chinese term anywhere in it, an English one at the start of a
word (``x.contiguous()`` uses contiguous, ``is_contiguous`` does not: search matches the start of a
word, and ``_`` does not end one).
"""

from __future__ import annotations

import bisect
import functools
import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from support import LANGUAGES, ROOT, Tab, mkdocs_config, nav_pages, page_path, screenshot

from mha_site.languages import DEFAULT
from mha_site.markdown import CHINESE, HAN
from mha_site.search_dictionary import glossary_terms

PAGES = nav_pages()
ARTICLE = re.compile(r'<article class="md-content__inner[^"]*">(.*?)</article>', re.S)
CONFIG = re.compile(r'<script id="__config" type="application/json">(.*?)</script>', re.S)
TAG = re.compile(r"<[^>]+>")
# what search leaves out: the pictures (mha_site/pictures.py) and the line under each title that
# links the pages a chapter needs and the notation page (mha_site/notation_link.py)
EXCLUDED = re.compile(r"<(svg|p) data-search-exclude.*?</\1>", re.S)
PICTURE_TITLE = re.compile(r"<svg data-search-exclude[^>]*>\s*<title[^>]*>([^<]+)</title>")
GLOSSARY = ROOT / "docs" / "zh" / "glossary.md"

# Terms of the glossary, searched by a reader of each language; each list ends with the other
# language's words, which the pages of this language hold too (code, the glossary table).
QUERIES = {
    "en": [
        "stride",
        "contiguous",
        "mask",
        "projection",
        "transpose",
        "view",
        "broadcast",
        "步长",
        "连续",
    ],
    "zh": [
        "步长",
        "连续",
        "掩码",
        "投影",
        "转置",
        "注意力",
        "逐行走读",
        "查询",
        "stride",
        "contiguous",
        "transpose",
    ],
}
# Pages that use a term in inline code (``.transpose``) or a table cell (the glossary's) alone,
# which search must find as it finds prose, in both languages. Found, they were easy to miss: with
# one use each they came 16th to 18th of 18 pages for transpose, and Material shows ten results
# until the list is scrolled.
IN_CODE_OR_TABLES = {"transpose": {"glossary.md", "heads.md", "performance.md"}}
START_PAGE = "walkthrough.md"  # two folders deep in zh/: the index is found relative to the page
# The page that teaches each term (the glossary's, in each language; rotary for "rotary position
# embedding", which the English pages write as rotary embeddings): a search for the term shows it
# among the first TOP pages, each of those pages uses the term, and at least FOUND of the pages
# that use it are found.
TEACHES = {
    "zh": {
        "转置": "walkthrough.md",
        "掩码": "masks.md",
        "缓存": "cache.md",
        "旋转位置编码": "rope.md",
        "多头潜在注意力": "mla.md",
        "分组查询注意力": "gqa.md",
        "环形注意力": "ring.md",
        "步长": "walkthrough.md",
        "缩放": "walkthrough.md",
        "软上限": "softcap.md",
        "注意力汇点": "sinks.md",
        "块内注意力": "chunked.md",
        "门控": "gate.md",
        "长因子": "longrope.md",
        "温度调节": "nope.md",
    },
    "en": {
        "transpose": "walkthrough.md",
        "mask": "masks.md",
        "cache": "cache.md",
        "rotary": "rope.md",
        "multi-head latent attention": "mla.md",
        "grouped-query attention": "gqa.md",
        "ring attention": "ring.md",
        "stride": "walkthrough.md",
        "scaling": "walkthrough.md",
        "soft-capping": "softcap.md",
        "attention sink": "sinks.md",
        "chunk": "chunked.md",
        "gate": "gate.md",
        "LongRoPE": "longrope.md",
        "NoPE": "nope.md",
        "temperature tuning": "nope.md",
    },
}
TOP = 3
FOUND = 0.8


def index_path(site: Path, lang: str) -> Path:
    prefix = "" if lang == DEFAULT else f"{lang}/"
    return site / prefix / "search" / "search_index.json"


def load_index(site: Path, lang: str) -> dict:
    return json.loads(index_path(site, lang).read_text(encoding="utf-8"))


def page_of(location: str) -> str:
    """``walkthrough/#split-heads`` -> ``walkthrough/``."""
    return location.split("#")[0]


def separator(site: Path) -> re.Pattern:
    return re.compile(load_index(site, DEFAULT)["config"]["separator"])


@functools.cache
def article_text(site: Path, lang: str, page: str) -> str:
    """The text search indexes: the article's, without what ``data-search-exclude`` leaves out."""
    source = (site / page_path(lang, page) / "index.html").read_text(encoding="utf-8")
    match = ARTICLE.search(source)
    assert match, f"{lang}/{page}: no article"
    return html.unescape(TAG.sub("", EXCLUDED.sub("", match.group(1))))


def uses(text: str, term: str) -> bool:
    """Whether ``text`` uses ``term``: a Chinese term anywhere, an English one at a word's start."""
    if CHINESE.search(term):
        return term in text
    words = r"\s+".join(map(re.escape, term.split()))  # a line of the HTML may end between them
    return re.search(rf"(?<![A-Za-z0-9_]){words}", text, re.IGNORECASE) is not None


def pages_using(site: Path, lang: str, term: str) -> set[str]:
    return {page for page in PAGES if uses(article_text(site, lang, page), term)}


def user_dictionary() -> tuple[Path, list[str], list[str]]:
    """The jieba user dictionary the build wrote: its path, words kept whole, words split."""
    search = next(p["search"] for p in mkdocs_config()["plugins"] if "search" in p)
    path = ROOT / search["jieba_dict_user"]
    kept, split = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        word, _, frequency = line.partition(" ")
        (split if frequency == "0" else kept).append(word)
    return path, kept, split


# --- The index files and the dictionary ---------------------------------------------------------


@pytest.mark.parametrize("lang", LANGUAGES)
def test_each_language_has_an_index_of_its_own_pages(built_site, lang, checked_pages):
    docs = load_index(built_site, lang)["docs"]
    locations = [doc["location"] for doc in docs]
    assert not [loc for loc in locations if loc.startswith(tuple(f"{la}/" for la in LANGUAGES))], (
        f"{lang}: locations must be relative to the language's root, with no language folder"
    )
    # Every page of the language is indexed (every page checked: all unless --page), under its
    # URL relative to the language's root, and nothing else is.
    indexed = {page_of(loc) for loc in locations}
    assert {page_path(DEFAULT, p) for p in checked_pages} <= indexed, (lang, sorted(indexed))
    assert indexed <= {page_path(DEFAULT, p) for p in PAGES}, (lang, sorted(indexed))
    # Each page's entry is the page of this language: its title is in the reader's language.
    titles = [doc["title"] for doc in docs if "#" not in doc["location"]]
    chinese = [title for title in titles if CHINESE.search(title)]
    assert chinese == (titles if lang == "zh" else []), (lang, titles)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_pages_load_the_index_of_their_language(built_site, lang, checked_pages):
    """Material fetches ``search/search_index.json`` relative to ``base`` in ``__config``."""
    for page in checked_pages:
        url = "http://127.0.0.1/mha/" + page_path(lang, page)
        source = (built_site / page_path(lang, page) / "index.html").read_text(encoding="utf-8")
        config = json.loads(CONFIG.search(source).group(1))
        fetched = urljoin(urljoin(url, config["base"]), "search/search_index.json")
        site_path = urlsplit(fetched).path.removeprefix("/mha/")
        assert built_site / site_path == index_path(built_site, lang), (lang, page, config["base"])


def test_user_dictionary_is_generated_from_the_glossary_and_titles(built_site):
    path, kept, split = user_dictionary()
    assert "逐行走读" in kept, "the page title 逐行走读 is kept whole"
    assert "术语表" in kept and "步长" in kept and "连续" in kept and "掩码" in kept, kept
    # A term jieba cuts into words stays cut, so each word is found on its own: 注意力 inside it.
    assert "多头注意力" not in kept and "缩放点积注意力" not in kept, kept
    # A page's title that is a term, which jieba cuts into 块 / 内 / 注意力, is kept whole.
    assert "块内注意力" in kept, kept
    # A one-character term glued to a classifier or a preposition is split: 4 个头 -> 个 / 头.
    assert "个头" in split and "把头" in split, split
    if shutil.which("git"):
        ignored = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=ROOT)
        assert ignored.returncode == 0, f"{path} is generated at build time: it must be ignored"


def test_user_dictionary_is_the_same_on_a_second_call(tmp_path):
    """``mkdocs serve`` rebuilds in one process, after the search plugin loaded the file
    into jieba: the dictionary must come out the same, or a rebuild indexes the pages otherwise."""
    import jieba
    from mkdocs.config import load_config

    from mha_site import search_dictionary as hook

    config = load_config(str(ROOT / "mkdocs.yml"))
    docs = ROOT / "docs" / "zh"
    first = hook.user_dictionary(config, docs, "zh", ROOT)
    # What the search plugin does with the file: its "word 0" lines change jieba's global state.
    (tmp_path / "user.txt").write_text(first, encoding="utf-8")
    jieba.load_userdict(str(tmp_path / "user.txt"))
    second = hook.user_dictionary(config, docs, "zh", ROOT)
    assert second == first, (
        f"only in the first: {sorted(set(first.split(chr(10))) - set(second.split(chr(10))))}, "
        f"only in the second: {sorted(set(second.split(chr(10))) - set(first.split(chr(10))))}"
    )
    assert "个头 0" in first.splitlines(), "the test needs a dictionary that splits words"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_index_leaves_the_pictures_out(built_site, lang):
    """Every page loads its language's index: the pictures' labels and the hover text of each
    heatmap cell (头 0，查询“猫”，键“坐”：0.15) would be a third of it, and no one searches them."""
    texts = "".join(
        doc["title"] + doc["text"] for doc in load_index(built_site, lang)["docs"]
    ).replace("\u200b", "")
    titles = [
        html.unescape(title)
        for page in PAGES
        for title in PICTURE_TITLE.findall(
            (built_site / page_path(lang, page) / "index.html").read_text(encoding="utf-8")
        )
    ]
    assert len(titles) > 20, f"{lang}: only {len(titles)} pictures found"
    # A title the prose writes too (下面看前向时间随序列长度的变化) is indexed from the prose.
    prose = "".join(article_text(built_site, lang, page) for page in PAGES)
    indexed = [title for title in titles if title in texts and title not in prose]
    assert not indexed, f"{lang}: pictures in the search index: {indexed[:3]}"


def test_chinese_index_cuts_the_sites_terms_whole(built_site):
    split = separator(built_site)
    words: set[str] = set()
    starts_missed: dict[str, list[str]] = {}
    glossary = set(glossary_terms(GLOSSARY))
    terms = [term for term in glossary if len(term) > 1]
    for doc in load_index(built_site, "zh")["docs"]:
        for field in ("title", "text"):
            # Search drops the tags before it splits the words.
            pieces = [piece for piece in split.split(TAG.sub(" ", doc[field])) if piece]
            words.update(pieces)
            # Where a term occurs, a word of the index starts: a search for it finds the place,
            # unless the word it begins in is a term itself (缓存 in 高速缓存, 大小为 in 批大小为).
            text, starts, at = "", [], 0
            for piece in pieces:
                starts.append(at)
                text += piece
                at += len(piece)
            for term in terms:
                for match in re.finditer(re.escape(term), text):
                    word = bisect.bisect_right(starts, match.start()) - 1
                    if starts[word] != match.start() and pieces[word] not in glossary:
                        context = text[max(0, match.start() - 4) : match.end() + 4]
                        starts_missed.setdefault(term, []).append(f"{doc['location']}: {context}")
    assert "逐行走读" in words, "逐行走读 must be one word of the zh index"
    assert not {"个头", "各头", "把头", "对值"} & words, "one-character terms glued to a neighbour"
    assert len(terms) > 50, f"only {len(terms)} terms read from {GLOSSARY}"
    assert not starts_missed, "terms cut inside a word of the zh index:\n" + "\n".join(
        f"{term}: {where}" for term, where in starts_missed.items()
    )


# --- In the browser -----------------------------------------------------------------------------


# Material's messages with its search worker: SETUP posts the index, QUERY a query, RESULT
# answers (0, 2 and 3 in Material 9, as docs/assets/search.js reads them). This script runs before
# the page's, so it sees what search.js sends on: a QUERY marked ``probe`` is kept in
# window.__mhaProbed, not sent; and it keeps the location of each result of the last answer (the
# first of each page's group: Material shows one item a page) in window.__mhaResult.
PROBE = """(() => {
    const post = Worker.prototype.postMessage;
    Worker.prototype.postMessage = function (message, ...options) {
        if (message && message.type === 0 && window.__mhaSearchWorker !== this) {
            window.__mhaSearchWorker = this;
            this.addEventListener("message", ({ data }) => {
                if (data && data.type === 3)
                    window.__mhaResult = data.data.items.map(group => group[0].location);
            });
        }
        if (message && message.type === 2 && message.probe) {
            window.__mhaProbed = message.data;
            return;
        }
        return post.call(this, message, ...options);
    };
})()"""
# Each query as the page's script sends it to the worker (the page has posted the index).
PROBE_QUERIES = """queries => queries.map(query => {
    Worker.prototype.postMessage.call(
        window.__mhaSearchWorker, { type: 2, data: query, probe: true });
    return window.__mhaProbed;
})"""


@pytest.fixture(scope="module")
def search_page(browser, site_url):
    """A tab that keeps the HTTP cache (the index is fetched once per language) and records any
    request to another host (``Tab``: Chromium itself cannot resolve one)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(script=PROBE)
    tab = Tab(context, site_url)
    tab.page.set_default_timeout(15_000)
    yield tab.page
    context.close()
    assert not tab.outside, f"requests to other hosts: {tab.outside}"


SCROLL_TO_THE_END = """list => new Promise(done => {
    list.scrollTop = 0;
    requestAnimationFrame(() => requestAnimationFrame(() => {
        list.scrollTop = list.scrollHeight;
        done();
    }));
})"""


def type_query(page, site_url: str, lang: str, query: str) -> int:
    """Type ``query`` into the search box of a page of ``lang``, as a reader does; the number of
    results search shows, once the worker has answered."""
    start = site_url + page_path(lang, START_PAGE)
    box = page.locator("input.md-search__input")
    meta = page.locator(".md-search-result__meta")
    if page.url != start:
        page.goto(start, wait_until="load")
    else:  # the page of the last search, in this language: empty the box, as a reader would
        box.fill("")
        box.press("End")
        placeholder = json.loads(page.locator("#__config").text_content())["translations"][
            "search.result.placeholder"
        ]
        page.wait_for_function(
            "([el, text]) => el.textContent.trim() === text",
            arg=[meta.element_handle(), placeholder],
        )
    translations = json.loads(page.locator("#__config").text_content())["translations"]
    box.click()
    box.fill(query)
    box.press("End")  # Material searches on keyup
    none = translations["search.result.none"]
    page.wait_for_function(  # the worker answered: a count, or none
        "([el, none]) => /\\d/.test(el.textContent) || el.textContent.trim() === none",
        arg=[meta.element_handle(), none],
    )
    text = meta.inner_text().strip()
    return 0 if text == none else int(re.search(r"\d+", text)[0])


def search(page, site_url: str, lang: str, query: str) -> list[str]:
    """Search ``query`` from a page of ``lang``; every result link, relative to the site root."""
    count = type_query(page, site_url, lang, query)
    items = page.locator(".md-search-result__item")
    scrollwrap = page.locator(".md-search__scrollwrap")
    for _ in range(20):  # Material renders 10 results, then more as the list scrolls
        shown = items.count()
        if shown >= count:
            break
        # Back to the top first, then to the end a frame later: Material renders the next batch
        # on a scroll that reaches the end, and a list already scrolled to its end may not fire
        # that again. Then wait until more results show.
        scrollwrap.evaluate(SCROLL_TO_THE_END)
        page.wait_for_function(
            "([selector, shown]) => document.querySelectorAll(selector).length > shown",
            arg=[".md-search-result__item", shown],
        )
    assert items.count() == count, f"{query}: {items.count()} results shown of {count}"
    hrefs = page.eval_on_selector_all(
        ".md-search-result__item a.md-search-result__link", "links => links.map(a => a.href)"
    )
    return [href.removeprefix(site_url) for href in hrefs]


def result_locations(page, site_url: str, lang: str, query: str) -> list[str]:
    """Search ``query`` as ``search`` does, the list left unscrolled: the location of each result
    the worker sent, relative to the language's root, one a page, in the order search shows them."""
    count = type_query(page, site_url, lang, query)
    locations = page.evaluate("() => window.__mhaResult")
    assert len(locations) == count, f"{query}: {count} results shown, {len(locations)} sent"
    return locations


def language_of(relative_url: str) -> str:
    other = [lang for lang in LANGUAGES[1:] if relative_url.startswith(f"{lang}/")]
    return other[0] if other else DEFAULT


def result_pages(links: list[str], lang: str) -> list[str]:
    """The pages of ``links`` (``walkthrough.md``), each once, in the order search shows them;
    a link is relative to the site root or to the language's root."""
    prefix = "" if lang == DEFAULT else f"{lang}/"
    by_path = {page_path(DEFAULT, page): page for page in PAGES}
    paths = [page_of(re.sub(r"\?[^#]*", "", link)).removeprefix(prefix) for link in links]
    return list(dict.fromkeys(by_path[path] for path in paths))


CASES = [(lang, query) for lang, queries in QUERIES.items() for query in queries]


@pytest.mark.browser
@pytest.mark.parametrize(("lang", "query"), CASES, ids=[f"{la}-{q}" for la, q in CASES])
def test_search_stays_in_the_readers_language_and_finds_every_page(
    search_page, site_url, built_site, lang, query
):
    links = search(search_page, site_url, lang, query)
    if (lang, query) == ("zh", "注意力"):
        screenshot(search_page, "zh-search.png")
    elsewhere = [link for link in links if language_of(link) != lang]
    assert not elsewhere, f"a {lang} reader searching {query} got other languages: {elsewhere}"
    found = result_pages(links, lang)
    expected = pages_using(built_site, lang, query)
    assert expected, f"no {lang} page uses {query}: choose another term"
    named = set(IN_CODE_OR_TABLES.get(query, ()))
    assert named <= expected, f"{lang}: {sorted(named - expected)} no longer use {query}"
    missing = sorted(expected - set(found))
    assert not missing, f"{lang}: searching {query} misses pages that use it: {missing}"
    if "glossary.md" in named:
        # The glossary is boosted (its front matter): a term looked up shows it among the first
        # ten pages, which Material lists before its result list has to be scrolled.
        assert "glossary.md" in found[:10], f"{lang}: {query}: {found[:10]}"


def glossary_cut(text: str, term: str) -> list[str] | None:
    """The words the zh index cuts ``term`` into where the glossary's table, in ``text`` (the
    glossary's entries in the index), gives it alone; None if it does not."""
    chars = "\u200b?".join(map(re.escape, term))
    alone = re.search(f"(?<![{HAN}])(?<![{HAN}]\u200b){chars}(?!\u200b?[{HAN}])", text)
    return alone.group(0).split("\u200b") if alone else None


def query_words(posted: str, end: str) -> list[str]:
    """The Chinese words a query posted to the worker searches: a word of the index marked by
    ``end`` (``转置〇``, ``+旋转〇*``) is searched whole, any other Chinese character alone."""
    words = []
    for term in posted.split():
        body = term.lstrip("+").rstrip("*")
        words += [body.removesuffix(end)] if body.endswith(end) else re.findall(f"[{HAN}]", body)
    return words


@pytest.mark.browser
def test_the_page_cuts_a_query_into_the_words_of_the_index(search_page, site_url, built_site):
    """docs/assets/search.js sends each term of the glossary (multi-word terms too: 旋转位置编码,
    多头潜在注意力) to the worker cut as the zh index cuts it, each word marked to be searched
    whole."""
    page = search_page
    if page.url != site_url + page_path("zh", START_PAGE):
        page.goto(site_url + page_path("zh", START_PAGE), wait_until="load")
    page.wait_for_function("() => window.__mhaSearchWorker")  # the page posted the index
    end = re.search(r'const END = "\\u(\w{4})"', (ROOT / "docs/assets/search.js").read_text())
    end = chr(int(end.group(1), 16))
    for lang in LANGUAGES:
        index = json.dumps(load_index(built_site, lang), ensure_ascii=False)
        assert end not in index, f"{end!r} is in the {lang} index: the script needs another END"
    terms = [term for term in dict.fromkeys(glossary_terms(GLOSSARY)) if len(term) > 1]
    terms += [term for term in TEACHES["zh"] if term not in terms]
    posted = dict(zip(terms, page.evaluate(PROBE_QUERIES, terms), strict=True))
    glossary = "".join(
        doc["text"]
        for doc in load_index(built_site, "zh")["docs"]
        if doc["location"].startswith("glossary/")
    )
    cuts = {term: glossary_cut(glossary, term) for term in terms}
    wrong = {
        term: (query, cuts[term])
        for term, query in posted.items()
        if query_words(query, end) != cuts[term]
    }
    assert not wrong, "\n".join(
        f"{t}: sent {q!r}, the index has {c}" for t, (q, c) in wrong.items()
    )
    # A term of one word is searched by its beginning; the words of a longer one are all required.
    assert posted["转置"] == f"转置{end}", posted["转置"]
    assert posted["旋转位置编码"] == f"+旋转{end}* +位置{end}* +编码{end}*", posted["旋转位置编码"]


RANKED = [(lang, term) for lang, terms in TEACHES.items() for term in terms]


@pytest.mark.browser
@pytest.mark.parametrize(("lang", "term"), RANKED, ids=[f"{la}-{t}" for la, t in RANKED])
def test_search_shows_the_page_that_teaches_a_term_among_the_first(
    search_page, site_url, built_site, lang, term
):
    found = result_pages(result_locations(search_page, site_url, lang, term), lang)
    users = pages_using(built_site, lang, term)
    first, teacher = found[:TOP], TEACHES[lang][term]
    at = f"{found.index(teacher) + 1}th" if teacher in found else "not at all"
    assert teacher in first, (
        f"{lang}: searching {term} shows {teacher}, which teaches it, {at}; the first ten: "
        f"{found[:10]}"
    )
    # The first results are about the term: none is there for a word that only begins like a
    # piece of it (转换 for 转置, 编译 for 旋转位置编码).
    assert set(first) <= users, (
        f"{lang}: searching {term}, {sorted(set(first) - users)} do not use it: {first}"
    )
    missed = sorted(users - set(found))
    assert len(users) - len(missed) >= FOUND * len(users), (
        f"{lang}: searching {term} finds {len(users) - len(missed)} of the {len(users)} pages "
        f"that use it; missed: {missed}"
    )


def test_dropping_redundant_word_breaks_keeps_every_word(built_site):
    """The zh index without the word breaks that sit beside a separator (search_language's
    REDUNDANT_BREAK) splits into the same words, by the index's own separator, tags dropped."""
    from mha_site.search_language import REDUNDANT_BREAK

    split = separator(built_site)
    words = lambda text: [w for w in split.split(re.sub(r"<[^>]+>", " ", text)) if w]  # noqa: E731
    index = json.loads((built_site / "zh" / "search" / "search_index.json").read_text("utf-8"))
    texts = [doc["text"] for doc in index["docs"]]
    assert not any(REDUNDANT_BREAK.search(t) for t in texts)  # the built index has none left
    head = "\u200b多头\u200b注意力\u200b，\u200b的\u200b <code>x</code>"
    sample = head + "\u200b论文\u200b（\u200bL\u200b）"
    assert words(REDUNDANT_BREAK.sub("", sample)) == words(sample)
    assert "\u200b论文" in REDUNDANT_BREAK.sub("", sample)  # beside a tag: kept


def test_a_code_block_is_indexed_by_its_names_and_words_each_once():
    """search_language's CODE_BLOCK: the names of a code block (two letters or more) and the
    words of its comments and strings stay searchable, once each; the code's punctuation, its
    one-letter names and HTML entities go."""
    from mha_site.search_language import CODE_BLOCK, code_words

    block = (
        '<pre><code>x = q.view(2, 3)  # [batch_size, 转置]\n"""纯享版\u200b的\u200b注意力"""\n'
        "y = x.masked_fill(m, 0) &gt; 1  # 转置\n</code></pre>"
    )
    assert CODE_BLOCK.sub(code_words, block) == (
        "<pre><code>view batch_size 转置 纯享版 的 注意力 masked_fill</code></pre>"
    )
