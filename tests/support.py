# ruff: noqa: E501
"""Everything the tests share, in one place: no test module imports another.

- **The site**: its languages (``mha_site.languages``), its pages and their URLs.
- **The browser**: how to find and start Chromium, a ``Tab`` that records errors and requests to
  other hosts, ``BrowserThreads`` that check pages ahead of their tests, screenshots
  (``make screenshots`` only), typing into the search box.
- **Oracles**: the design post's class verbatim (``DesignMHA``), an independent reference
  (``reference_attention``), where an error was raised (``raised_in_mha``); weights drawn so
  that nothing hides a mistake (``randomised``).
- **The implementations compared**: ``IMPLEMENTATIONS``, by name; ``each_implementation``.
- **Hypothesis**: one settings profile, loaded on import (``tests/conftest.py`` imports this).
- **Tolerances**: one per dtype, ``TOLERANCE``, and ``assert_close`` that uses it.

``DESIGN_SOURCE`` is the design post's code (the Chinese blog post the site starts from, as
quoted on the site's annotated page), copied character for character -- it is the seed this
project explains, NOT our code. It is kept as a string so no formatter can touch it, and executed
once to give ``DesignMHA``. Tests use it to show that a state_dict saved from the post's class
loads unchanged into ours, and that the shape-comment checker finds the post's wrong ``.view``
comment.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import threading
import types
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import torch
import torch.nn.functional as F
from hypothesis import settings
from hypothesis import strategies as st
from torch import Tensor

import mha.annotated
import mha.full
import mha.pure
from mha_site.languages import (
    LANGUAGES,
    ROOT,
    doc_pages,
    mkdocs_config,
    nav_pages,  # noqa: F401  (the tests take it from here)
)


# ---- The design post's code, verbatim (the seed we explain; not ours) --------------------------
def design_sizes(batch_size: int, seq_len: int, heads_num: int, head_size: int) -> dict[str, int]:
    """The design's dimension names and their sizes (``hidden_size = heads_num * head_size``)."""
    return {
        "batch_size": batch_size,
        "seq_len": seq_len,
        "heads_num": heads_num,
        "head_size": head_size,
        "hidden_size": heads_num * head_size,
    }


DESIGN_SOURCE = """\
import torch
import torch.nn as nn

#hidden_size:隐藏层维度
#head_num:注意力头数
#必须保证hidden_size可被head_num整除,否则会报错

class MHA(nn.Module):
    def __init__(self, hidden_size, heads_num):
        super().__init__() #python2环境则需改为super(MHA, self).__init__()
        self.hidden_size = hidden_size
        self.heads_num = heads_num
        self.head_size = hidden_size//heads_num

        # 线性变换矩阵
        # W_q(x)相当于x乘以[W_q_0,W_q_1,...,W_q_(heads_num-1)]矩阵,得到每个头的q值拼接后的结果
        # 同理W_k(x)和W_v(x)也相当于x乘以[W_k_0,W_k_1,...,W_k_(heads_num-1)]和[W_v_0,W_v_1,...,W_v_(heads_num-1)]矩阵,
        # 得到每个头的k值和v值拼接后的结果
        self.W_q = nn.Linear(hidden_size,hidden_size)
        self.W_k = nn.Linear(hidden_size,hidden_size)
        self.W_v = nn.Linear(hidden_size,hidden_size)

        self.W_o = nn.Linear(hidden_size,hidden_size)
    # x:输入序列，[batch_size, seq_len, hidden_size]
    def forward(self, x):
        q = self.W_q(x) # [batch_size, seq_len, hidden_size]
        k = self.W_k(x) # [batch_size, seq_len, hidden_size]
        v = self.W_v(x) # [batch_size, seq_len, hidden_size]

        # 将q、k、v分成多个头，每个头的维度为head_size
        q = q.view(q.size(0), q.size(1), self.heads_num, self.head_size) # [batch_size, heads_num, seq_len, head_size]
        k = k.view(k.size(0), k.size(1), self.heads_num, self.head_size) # [batch_size, heads_num, seq_len, head_size]
        v = v.view(v.size(0), v.size(1), self.heads_num, self.head_size) # [batch_size, heads_num, seq_len, head_size]

        # 翻转heads_num, seq_len维度，使得后续计算每个头更方便
        q = q.transpose(1,2) # [batch_size, heads_num, seq_len, head_size]
        k = k.transpose(1,2) # [batch_size, heads_num, seq_len, head_size]
        v = v.transpose(1,2) # [batch_size, heads_num, seq_len, head_size]

        # torch.matmul(q, k.transpose(-2,-1))相当于每个头的q值矩阵和k值矩阵的转置相乘得到每个头的注意力权重矩阵
        qk = torch.matmul(q, k.transpose(-2,-1))/torch.sqrt(torch.tensor(self.head_size, dtype = torch.float32))# [batch_size, heads_num, seq_len, seq_len]
        # 对每个头的注意力权重矩阵进行softmax归一化
        attn = torch.softmax(qk, dim=-1) # [batch_size, heads_num, seq_len, seq_len]

        # 将每个头的注意力权重矩阵和v值矩阵相乘得到每个头的输出矩阵
        out = torch.matmul(attn, v) # [batch_size, heads_num, seq_len, head_size]
        # 将每个头的输出矩阵拼接起来得到最终的输出矩阵
        # .contiguous() 时，PyTorch 会按照张量的逻辑形状，重新在内存中排列元素；返回一个新的、内存连续的张量
        # 如果省略 .contiguous()，直接执行 view 会抛出报错：
        # 核心原因：view 要求张量在内存中是连续的，否则无法按指定形状重塑。
        out = out.transpose(1,2).contiguous().view(out.size(0),out.size(2), self.hidden_size) # [batch_size, seq_len, hidden_size])
        # 最后通过线性变换矩阵W_o得到最终的输出
        out = self.W_o(out) # [batch_size, seq_len, hidden_size]

        return out
"""
# ---- end of the design post's code --------------------------------------------------------------


DESIGN_FILENAME = "<design post>"


def exec_module_source(source: str, filename: str) -> dict:
    """Execute module source text in a fresh module and return its namespace. The module is
    registered in ``sys.modules`` (as ``exec:FILENAME``, replacing an earlier one): a dataclass
    with string annotations looks its module up there."""
    module = types.ModuleType(f"exec:{filename}")
    sys.modules[module.__name__] = module
    exec(compile(source, filename, "exec"), module.__dict__)
    return module.__dict__


DesignMHA = exec_module_source(DESIGN_SOURCE, DESIGN_FILENAME)["MHA"]


# ---- Oracles ------------------------------------------------------------------------------------


def split_heads(t: Tensor, heads: int) -> Tensor:
    """``[batch, len, heads * head_size]`` -> ``[batch, heads, len, head_size]``, with ``unflatten``
    (the package uses ``view`` and ``transpose``)."""
    return t.unflatten(-1, (heads, -1)).movedim(-2, 1)


def merge_heads(t: Tensor) -> Tensor:
    """``[batch, heads, len, head_size]`` -> ``[batch, len, heads * head_size]``, with ``flatten``
    (the package uses ``transpose``, ``contiguous`` and ``view``)."""
    return t.movedim(1, -2).flatten(-2)


def randomised(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """``module`` with every parameter drawn from ``seed``, N(0, 0.3): the norms' and biases'
    too, so none is left at a value that hides a mistake (a norm of ones, a bias of zeros), and
    the scores are far from uniform, so a wrong mask or row shows."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.3)
    return module


def refused(call) -> str:
    """``"ValueError: ..."``: the type and message of the ``ValueError`` or ``TypeError`` that
    ``call()`` raises, ``""`` when it raises none; a forked rank returns it as a string, so a
    test can check every rank's message in the parent."""
    try:
        call()
    except (ValueError, TypeError) as error:
        return f"{type(error).__name__}: {error}"
    return ""


def reference_attention(m, x: Tensor) -> Tensor:
    """Multi-head self-attention written independently with ``F.scaled_dot_product_attention``.

    Uses only ``m``'s four linear layers and ``m.heads_num``; splits heads with ``unflatten`` and
    merges them with ``flatten`` instead of ``view``/``transpose``/``contiguous``, and lets SDPA
    choose its own scale (``1 / sqrt(head_size)``).
    """
    q, k, v = (split_heads(w(x), m.heads_num) for w in (m.W_q, m.W_k, m.W_v))
    return m.W_o(merge_heads(F.scaled_dot_product_attention(q, k, v)))


# The files of the full version and the checks they share (mha/full.py re-exports the others).
FULL_FILES = ("checks.py", "full.py", "masks.py", "cache.py", "norm.py")


def raised_in_mha(excinfo) -> bool:
    """The error of ``pytest.raises`` comes from a ``raise`` of the package's checks
    (``mha/checks.py``, or the full version's files: ``full.py``, ``masks.py``, ``cache.py``,
    ``norm.py``), not from deep inside torch. The statement matters: a
    torch function written in C adds no Python frame, so its error seems to come from the line
    of ``mha`` that called it."""
    entry = excinfo.traceback[-1]
    in_mha = entry.path.parent.name == "mha" and entry.path.name in FULL_FILES
    return in_mha and str(entry.statement).lstrip().startswith("raise ")


# ---- The implementations the tests compare ------------------------------------------------------

# Every MHA class of the package, by name. Each takes (hidden_size, heads_num), holds W_q, W_k,
# W_v and W_o, and maps to nn.MultiheadAttention (mha.interop). annotated and pure are the
# textbook code (bit for bit the same); full adds masks, a cache, grouped heads, bias and dropout.
IMPLEMENTATIONS = {"annotated": mha.annotated.MHA, "pure": mha.pure.MHA, "full": mha.full.MHA}
# The textbook two: what the design post's class is compared with, line by line.
TEXTBOOK = {name: IMPLEMENTATIONS[name] for name in ("annotated", "pure")}


def each_implementation(classes: dict[str, type] = IMPLEMENTATIONS):
    """Parametrize a test's ``MHA`` argument over ``classes`` (all by default), named by key."""
    return pytest.mark.parametrize("MHA", list(classes.values()), ids=list(classes))


# Autocast configurations: CPU bfloat16 here, CUDA float16 where a GPU is present.
AUTOCAST_CASES = [
    pytest.param("cpu", torch.bfloat16, id="cpu-bfloat16"),
    pytest.param(
        "cuda",
        torch.float16,
        id="cuda-float16",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    ),
]


# ---- Hypothesis: one profile, shared strategies -------------------------------------------------

# No deadline: a first call into torch (a kernel chosen, a module built) can take longer than
# hypothesis's 200 ms and would be reported as flaky. 30 examples per property; a test that needs
# more says so with @settings(max_examples=...), which keeps the rest of this profile. In CI
# (``CI`` set) hypothesis draws the same examples every run, so a red CI is reproducible.
settings.register_profile(
    "mha",
    deadline=None,
    max_examples=30,
    derandomize=bool(os.environ.get("CI")),
    print_blob=True,
)
settings.load_profile("mha")

seeds = st.integers(0, 2**16)  # for torch.manual_seed
dtypes = st.sampled_from([torch.float32, torch.float64])  # where ours equals a reference


# ---- Tolerances: one per dtype ------------------------------------------------------------------

# How far our output may be from an independent computation of the same thing (PyTorch's modules,
# the reference above, the other code path, the same model in float32) when the two differ only by
# rounding: |actual - expected| <= tol * (1 + |expected|), absolute near 0 and relative above 1, as
# rounding errors grow with the values (outputs here are O(1), gradients up to O(10)). Each value
# is a few times the largest difference measured over every such comparison of the tests (15,000,
# each property run with 300 examples), and far below what a real mistake gives (a wrong scale, a
# swapped axis or a missing mask change outputs by 1e-2 to 1):
# - float64: 1e-12 (measured 1.8e-15, on gradients of size 4);
# - float32: 2e-6, 16 units in the last place at 1 (measured 4.8e-7 on outputs, 1.9e-6 on gradients
#   of size 12: 1.6e-7 relative);
# - float16: 2e-2 (measured 2e-3 at size 3, one unit in the last place there); also what autocast
#   on CUDA is held to, which a machine without a GPU cannot measure;
# - bfloat16: 5e-2 (measured 1.6e-2 at size 3, one unit in the last place; 3e-3 against float32).
TOLERANCE = {torch.float64: 1e-12, torch.float32: 2e-6, torch.float16: 2e-2, torch.bfloat16: 5e-2}


def assert_close(
    actual: Tensor, expected: Tensor, dtype: torch.dtype | None = None, msg: str | None = None
) -> None:
    """``actual`` equals ``expected`` up to the rounding of ``dtype``, ``expected``'s dtype unless
    given (a float16 run compared with a float32 one gives ``torch.float16``): ``TOLERANCE``.
    ``msg`` says which case failed, before torch's report."""
    tol = TOLERANCE[dtype or expected.dtype]
    report = None if msg is None else (lambda default: f"{msg}: {default}")
    torch.testing.assert_close(actual, expected, atol=tol, rtol=tol, msg=report)


# ---- The site: pages and URLs -------------------------------------------------------------------


def url_prefix() -> str:
    """The path the site lives under, from ``site_url`` (GitHub Pages serves a project at
    ``/<repo>/``, and so do ``mkdocs serve`` and the browser tests): ``/mha/``."""
    path = urlsplit(mkdocs_config().get("site_url") or "").path
    return "/" + path.strip("/") + "/" if path.strip("/") else "/"


def page_path(lang: str, page: str) -> str:
    """The URL path of a page relative to the site root: ``zh/math/``, ``""`` for the en home."""
    prefix = "" if lang == LANGUAGES[0] else f"{lang}/"
    slug = "" if page == "index.md" else page.removesuffix(".md") + "/"
    return prefix + slug


def each_doc_page(test):
    """Parametrize ``test`` over ``doc_pages()``, each named by its path (``docs/zh/math.md``)."""
    pages = doc_pages()
    return pytest.mark.parametrize("page", pages, ids=[str(p.relative_to(ROOT)) for p in pages])(
        test
    )


# ---- The browser --------------------------------------------------------------------------------

SCREENSHOTS = ROOT / "screenshots"
# mkdocs.yml's palette: the reader's preference (``prefers-color-scheme``) -> Material's scheme.
SCHEMES = {"light": "default", "dark": "slate"}
# The screens the browser tests look at the site on.
SCREENS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 800}}
INSTALL = "install them with: apt-get install chromium fonts-noto-cjk"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    # Chromium resolves no host name but 127.0.0.1, so nothing leaves the machine; the tests still
    # record every request to another host (Tab) and fail on it. Unlike routing each request
    # through Playwright, this keeps the browser's HTTP cache, so a page load does not refetch
    # every stylesheet, script and font through Python.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]


def chromium_path() -> str | None:
    """``$MHA_CHROMIUM`` if set, else Debian's /usr/bin/chromium, else ``chromium`` on the PATH."""
    if "MHA_CHROMIUM" in os.environ:
        candidates = [os.environ["MHA_CHROMIUM"]]
    else:
        candidates = ["/usr/bin/chromium", shutil.which("chromium")]
    return next((c for c in candidates if c and Path(c).is_file()), None)


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    if chromium_path() is None:
        where = os.environ.get("MHA_CHROMIUM", "/usr/bin/chromium")
        return f"no Chromium found ({where}); {INSTALL}"
    try:
        fonts = subprocess.run(["fc-list"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        fonts = ""
    if "CJK" not in fonts:
        return f"no CJK font (Chinese would render as boxes); {INSTALL}"
    return None


# Material's search: the page fetches its language's index (search/search_index.json) and posts
# it to the search worker, which builds a Lunr index of its documents, about 0.3 s of CPU a page
# load (20 zh pages loaded in one tab: 19-23 s of CPU with the index, 15-16 s without). A tab
# that searches nothing hands the worker the index without its documents: the page still fetches
# the index and the worker still starts, so a missing or broken index still fails the page.
EMPTY_SEARCH = """(() => {
    const post = Worker.prototype.postMessage;
    Worker.prototype.postMessage = function (message, ...rest) {
        if (message && message.type === 0 && Array.isArray(message.data?.docs)) {
            window.mhaSearchDocs = message.data.docs.length;  // what the page sent, for the tests
            message = { ...message, data: { ...message.data, docs: [] } };
        }
        return post.call(this, message, ...rest);
    };
})()"""


class Tab:
    """One browser page that records console errors, page errors, failed and outside requests.

    Outside requests are those of every page and worker of the tab's context to a host other
    than 127.0.0.1; Chromium cannot resolve such a host (CHROMIUM_ARGS), so each one fails too.
    A tab made with ``search=False`` searches nothing: its search worker gets no documents
    (``EMPTY_SEARCH``; ``tests/test_search.py`` shows what it leaves out).
    """

    def __init__(self, context, base: str, search: bool = True):
        self.base = base
        self.outside: list[str] = []
        self.errors: list[str] = []
        context.on("request", self._request)
        self.page = context.new_page()
        if not search:
            self.page.add_init_script(script=EMPTY_SEARCH)
        self.page.set_default_timeout(10_000)
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))
        self.page.on("response", self._response)

    def _request(self, request):
        url = request.url.removeprefix("blob:")  # a blob's URL starts with its page's origin
        if not url.startswith("data:") and urlsplit(url).hostname != "127.0.0.1":
            self.outside.append(request.url)

    @staticmethod
    def _known(url: str) -> bool:
        # Material fetches sitemap.xml beside each alternate language; i18n writes only one.
        return urlsplit(url).path.endswith("/sitemap.xml")

    def _console(self, message):
        if message.type == "error" and not self._known(message.location.get("url", "")):
            self.errors.append(f"console: {message.text} ({message.location.get('url')})")

    def _response(self, response):
        if response.status >= 400 and not self._known(response.url):
            self.errors.append(f"HTTP {response.status}: {response.url}")

    def open(self, lang: str, page: str):
        self.errors.clear()
        response = self.page.goto(self.base + page_path(lang, page), wait_until="load")
        assert response is not None and response.ok, (
            f"{lang}/{page}: {response and response.status}"
        )
        return self.page

    def at(self, lang: str, page: str):
        """The page, opened unless the tab shows it already (as the test before left it), with
        the errors recorded so far forgotten."""
        if self.page.url != self.base + page_path(lang, page):
            return self.open(lang, page)
        self.errors.clear()
        return self.page

    def assert_clean(self):
        assert not self.outside, f"requests to other hosts: {self.outside}"
        assert not self.errors, "\n".join(self.errors)


def new_context(browser, screen: str = "desktop", scheme: str = "light", **options):
    """A browser context with ``screen``'s size, for a reader who prefers ``scheme``. Each page
    opens as on a first visit, in the preferred scheme: Material stores a scheme chosen with the
    palette toggle (``switch_scheme``), and each page forgets it before Material reads it."""
    context = browser.new_context(viewport=SCREENS[screen], color_scheme=scheme, **options)
    context.add_init_script(script="try { localStorage.clear() } catch (e) {}")
    return context


def page_tabs(page: str):
    """A module fixture: ``page`` of the site open in each language, each in a tab of its own
    (opened on first use), ``get(lang)`` giving its Playwright page; at the end, each tab has
    loaded without an error or a request to another host. A module takes it as
    ``pages = page_tabs("walkthrough.md")``."""

    @pytest.fixture(scope="module", name="pages")
    def pages(browser, site_url):
        context = browser.new_context(viewport=SCREENS["desktop"])
        tabs: dict[str, Tab] = {}

        def get(lang: str):
            if lang not in tabs:
                tabs[lang] = Tab(context, site_url, search=False)
                tabs[lang].open(lang, page)
            return tabs[lang].page

        yield get
        for tab in tabs.values():
            tab.assert_clean()
        context.close()

    return pages


# Resolves once the page has laid out and painted a frame (after a resize, say).
NEXT_FRAME = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def switch_scheme(p, scheme: str) -> None:
    """Switch the page to ``scheme`` in place with the palette toggle, as a reader does."""
    p.locator("form[data-md-component=palette] label:visible").first.click()
    p.wait_for_function(
        "scheme => document.body.dataset.mdColorScheme === scheme"
        " && !document.body.hasAttribute('data-md-color-switching')",
        arg=SCHEMES[scheme],
    )


def switch_language(tab: Tab, there: str, landing: str) -> None:
    """Pick ``there`` in the header's language menu, as a reader does; wait for ``landing`` to
    load (the errors recorded from its load on)."""
    tab.errors.clear()
    tab.page.hover(".md-header .md-select")
    tab.page.click(f'.md-header .md-select__link[hreflang="{there}"]')
    tab.page.wait_for_url(landing)


def screenshot(target, name: str, full_page: bool = False) -> None:
    """Save ``screenshots/NAME`` of a page or of one element, when screenshots are asked for.

    Screenshots are for a reviewer's eyes, not assertions: ``make screenshots`` (or
    ``MHA_SCREENSHOTS=1``) writes them; the test command runs the same checks without them.
    """
    if os.environ.get("MHA_SCREENSHOTS") != "1":
        return
    SCREENSHOTS.mkdir(exist_ok=True)
    options = {"full_page": True} if full_page else {}
    target.screenshot(path=str(SCREENSHOTS / name), **options)


def type_search(p, query: str):
    """Type ``query`` into the page's search box; return the result items once the first shows."""
    box = p.locator("input.md-search__input")
    box.click()
    box.fill(query)
    box.press("End")  # Material searches on keyup
    results = p.locator(".md-search-result__item")
    results.first.wait_for()
    return results


class BrowserThreads:
    """Jobs done ahead of the tests that ask for their results, by ``count`` headless Chromiums,
    each driven from a thread of its own (Playwright's sync API wants one instance per thread).

    A tab driven from the test's own thread idles whenever that thread waits on another tab, so
    one thread per core keeps both cores of the machines this runs on busy. Each thread starts its
    browser, makes its tab with ``start(browser)``, then takes jobs in the order given; a job runs
    as ``run(tab, job)``, which yields ``(key, value)`` pairs; ``keys(job)`` are the keys it is
    to yield. Each value waits, kept, for the test that asks for it with ``result``; a job that
    raises (or ends) gives its error to each of its keys not yet yielded, and ``result`` raises
    it. A test that asks for a key its job will not yield again (the job was not given, or the
    key was taken already) puts the job first. If no browser starts, each test raises why.
    """

    def __init__(
        self,
        jobs: list[Hashable],
        keys: Callable[[Hashable], list[Hashable]],
        start: Callable[[object], Tab],
        run: Callable[[Tab, Hashable], Iterable[tuple[Hashable, object]]],
        count: int = 2,
    ):
        self.jobs, self.keys, self.start, self.run = list(jobs), keys, start, run
        self.results: dict[Hashable, object] = {}
        self.pending: dict[Hashable, set] = {}  # running jobs: the keys they have yet to yield
        self.tabs: list[Tab] = []
        self.changed = threading.Condition()
        self.closing = False
        self.failure: BaseException | None = None  # why a thread's browser did not start
        # No more browsers than jobs (one at least: a test may ask for a job not given)
        count = max(1, min(count, len(self.jobs)))
        self.threads = [threading.Thread(target=self._work, daemon=True) for _ in range(count)]
        for thread in self.threads:
            thread.start()

    def result(self, job: Hashable, key: Hashable, timeout: float = 600):
        """The value ``job`` yielded under ``key``, once it has; raises what the job raised."""
        with self.changed:
            coming = key in self.results or key in self.pending.get(job, ()) or job in self.jobs
            if not coming:
                self.jobs.insert(0, job)
                self.changed.notify_all()
            done = self.changed.wait_for(
                lambda: key in self.results or not any(t.is_alive() for t in self.threads),
                timeout,
            )
            if key not in self.results and self.failure is not None:
                raise self.failure
            assert key in self.results, f"{key}: no browser thread checked it" + (
                "" if done else f" in {timeout} s"
            )
            value = self.results.pop(key)
        if isinstance(value, BaseException):
            raise value
        return value

    def close(self) -> None:
        """Stop the threads once their jobs are done; fails if their tabs made a request to
        another host."""
        with self.changed:
            self.closing = True
            self.changed.notify_all()
        for thread in self.threads:
            thread.join(timeout=600)
        outside = [url for tab in self.tabs for url in tab.outside]
        assert not outside, f"requests to other hosts: {outside}"

    def _next(self) -> Hashable | None:
        with self.changed:
            self.changed.wait_for(lambda: self.jobs or self.closing)
            if not self.jobs:
                return None
            job = self.jobs.pop(0)
            self.pending[job] = set(self.keys(job))
            return job

    def _put(self, job: Hashable, key: Hashable, value: object) -> None:
        with self.changed:
            self.results[key] = value
            self.pending[job].discard(key)
            self.changed.notify_all()

    def _work(self) -> None:
        from playwright.sync_api import sync_playwright

        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=chromium_path(), args=CHROMIUM_ARGS
                )
                tab = self.start(browser)
                self.tabs.append(tab)
                while (job := self._next()) is not None:
                    try:
                        for key, value in self.run(tab, job):
                            self._put(job, key, value)
                        error = AssertionError(f"{job} ended without yielding this key")
                    except BaseException as raised:  # each test of the job reports it
                        error = raised
                    with self.changed:
                        for key in self.pending.pop(job):
                            self.results[key] = error
                        self.changed.notify_all()
                browser.close()
        except BaseException as error:  # the browser did not start: the other thread goes on
            with self.changed:
                self.failure = error
                self.changed.notify_all()


# ---- which tests import transformers ----------------------------------------------------------

# A module a test module imports: ``import x``, ``from x import`` (at any indentation), or
# ``pytest.importorskip("x")``
IMPORTS = re.compile(
    r"^[ \t]*(?:from|import)[ \t]+([\w.]+)|importorskip\(\s*[\"']([\w.]+)", re.MULTILINE
)


@functools.cache
def imports_transformers(path: Path) -> bool:
    """Whether the test module at ``path`` imports transformers anywhere (at its top, in a test,
    in a helper), itself or through another test module (``import test_transformers``): its
    tests are marked ``transformers`` and run in both environments (make test, make compat)."""
    if path.suffix != ".py" or not path.is_file():
        return False
    for statement, skip in IMPORTS.findall(path.read_text(encoding="utf-8")):
        top = (statement or skip).partition(".")[0]
        local = path.with_name(f"{top}.py")
        if top == "transformers" or (local != path and imports_transformers(local)):
            return True
    return False
