"""Fixtures of the site tests: one strict build, reused while its inputs are unchanged, and that
site served on 127.0.0.1; ``--page NAME``, the checks of one page.

The build is cached in ``build/site/<digest>/`` (git-ignored), the digest a hash of everything the
build reads (``SITE_INPUTS``, contents and names, and the installed packages' versions): a change
to any of them gives another digest, so a stale build is never used; a fresh clone has none and
builds once. ``MHA_SITE=DIR`` points the tests at a site built elsewhere (``mkdocs build -d DIR``)
and builds nothing; ``MHA_SITE_CACHE=0`` builds again whatever the cache holds.

A build starts in the background as soon as the tests are collected, and the tests that read the
site run last: the build (one core) runs while the tests that need no site run (on the other).
``tests/test_docs_build.py`` checks the build; the browser tests read the same site, in one
Chromium. Importing ``support`` loads the tests' one hypothesis profile.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support import (
    CHROMIUM_ARGS,
    ROOT,
    chromium_path,
    imports_transformers,
    missing_browser,
    nav_pages,
    url_prefix,
)

SITE_FIXTURES = {"site_build", "built_site", "site_url"}
# What ``mkdocs build`` reads from the checkout: the pages and their assets, the package whose code
# and docstrings they include, the build's code, its configuration; pyproject.toml and the
# constraints decide what is installed (the installed versions are hashed too).
SITE_INPUTS = ("docs", "mha", "mha_site", "mkdocs.yml", "pyproject.toml", "requirements")
CACHE = ROOT / "build" / "site"
CACHE_KEPT = 3  # digests kept in the cache (the newest), for switching between branches


def site_digest() -> str:
    """A hash of every file the build reads (its path and its bytes; compiled bytecode aside), of
    the installed distributions' names and versions, and of the Python that builds."""
    digest = hashlib.sha256(sys.version.encode())
    for top in SITE_INPUTS:
        paths = [ROOT / top] if (ROOT / top).is_file() else sorted((ROOT / top).rglob("*"))
        for path in paths:
            if "__pycache__" in path.parts or path.suffix == ".pyc" or not path.is_file():
                continue
            digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    installed = sorted(
        f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()
    )
    digest.update("\n".join(installed).encode())
    return digest.hexdigest()[:20]


@dataclass(frozen=True)
class Build:
    """The outcome of ``mkdocs build --strict`` into ``site``; ``output`` is None for a site built
    elsewhere (``MHA_SITE``)."""

    site: Path
    returncode: int
    output: str | None


class BackgroundBuild:
    """The site of the checkout as it is: the cached build of its digest, or ``mkdocs build
    --strict`` of the whole site running while the session goes on (never -q or -v: with either,
    known MkDocs bugs make a failing strict build exit 0), its output going to a file, so a full
    pipe never stalls it. A build that passes is moved into the cache, with its log, and its stamp
    (the digest and the exit status) is written last; a build whose inputs changed while it ran
    (an edit saved meanwhile) is used by this session but never cached."""

    def __init__(self):
        self.process = None
        given = os.environ.get("MHA_SITE")
        if given:
            site = Path(given).resolve()
            if not (site / "index.html").is_file():
                raise pytest.UsageError(f"MHA_SITE={given}: no built site there (no index.html)")
            self.done = Build(site, 0, None)
            return
        self.digest = site_digest()
        self.cached = CACHE / self.digest
        self.done = None if os.environ.get("MHA_SITE_CACHE") == "0" else self._from_cache()
        if self.done is not None:
            return
        CACHE.mkdir(parents=True, exist_ok=True)
        self.folder = Path(tempfile.mkdtemp(prefix=f".{self.digest}-", dir=CACHE))
        self.log = (self.folder / "build.log").open("w+", encoding="utf-8")
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
        self.site = self.folder / "site"
        command = [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--site-dir",
            str(self.site),
        ]
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=self.log, stderr=self.log
        )

    def _from_cache(self) -> Build | None:
        try:
            stamp = (self.cached / "stamp").read_text(encoding="utf-8").split()
            output = (self.cached / "build.log").read_text(encoding="utf-8")
        except OSError:
            return None
        if stamp != [self.digest, "0"]:
            return None
        os.utime(self.cached / "stamp")  # the newest, for pruning
        return Build(self.cached / "site", 0, output)

    def result(self) -> Build:
        if self.done is None:
            returncode = self.process.wait(timeout=300)
            self.log.seek(0)
            self.done = Build(self.site, returncode, self.log.read())
            if returncode == 0 and site_digest() == self.digest:
                self._cache()
        return self.done

    def _cache(self) -> None:
        """Move the build into ``build/site/<digest>`` (unless another session did meanwhile), the
        stamp written last, then prune the oldest digests."""
        self.log.close()
        (self.folder / "stamp").write_text(f"{self.digest} 0\n", encoding="utf-8")
        try:
            self.folder.rename(self.cached)
        except OSError:  # another session cached the same digest first: keep using ours
            return
        self.done = Build(self.cached / "site", 0, self.done.output)
        self.folder = None
        stamps = sorted(CACHE.glob("*/stamp"), key=lambda s: s.stat().st_mtime, reverse=True)
        hour_ago = time.time() - 3600  # a session may still serve an older one
        for old in stamps[CACHE_KEPT:]:
            if old.stat().st_mtime < hour_ago:
                shutil.rmtree(old.parent, ignore_errors=True)
        for left in CACHE.glob(".*"):  # a build a killed session left unfinished
            if left.stat().st_mtime < hour_ago:
                shutil.rmtree(left, ignore_errors=True)

    def close(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if not self.log.closed:
            self.log.close()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


BUILD = pytest.StashKey[BackgroundBuild]()


class BackgroundBench:
    """``python -m mha.bench --quick`` in a temporary folder, started with the session like the
    build: its fresh processes use the core the tests that need no site leave free."""

    def __init__(self):
        self.folder = Path(tempfile.mkdtemp(prefix="mha-bench-"))
        # mha is importable as the installed package; ROOT on the path covers a checkout without it.
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mha.bench", "--quick", "--no-progress"],
            cwd=self.folder,
            env={**os.environ, "PYTHONPATH": path},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def result(self) -> tuple[int, str, str, Path]:
        """Exit status, output, errors, and the folder it ran in."""
        out, err = self.process.communicate(timeout=300)
        return self.process.returncode, out, err, self.folder

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()
        shutil.rmtree(self.folder, ignore_errors=True)


BENCH = pytest.StashKey[BackgroundBench]()


# ---- --page: one page's checks ------------------------------------------------------------------


def pytest_addoption(parser):
    parser.addoption(
        "--page",
        action="append",
        default=[],
        metavar="NAME",
        help="run only the checks of this page of the site (rope or rope.md; repeatable): the "
        "tests parametrized by it or marked page(NAME), its snippets in every language, the tests "
        "that loop over checked_pages (which then hold only it), the build's own test (it asks for "
        "site_build) and the premises the checks rely on (marked premise)",
    )


def page_names() -> set[str]:
    """Every page of the site by its name in a language's folder: ``rope.md``, ``index.md`` ..."""
    return {
        p.relative_to(ROOT / "docs" / p.relative_to(ROOT / "docs").parts[0]).as_posix()
        for p in (ROOT / "docs").glob("*/**/*.md")
    }


def pages_of(value, name: str, known: set[str]) -> set[str]:
    """The pages a test's parameter names: a page (``rope.md``), its source (``docs/zh/rope.md``,
    a path), a page parameter's slug (``page="rope"``), or any of those in a tuple."""
    if isinstance(value, (tuple, list)):
        return set().union(*(pages_of(v, name, known) for v in value))
    if isinstance(value, Path):
        if value.is_absolute() and not value.resolve().is_relative_to(ROOT):
            return set()
        value = value.resolve().relative_to(ROOT).as_posix() if value.is_absolute() else str(value)
    if not isinstance(value, str):
        return set()
    parts = value.split("/")
    if len(parts) >= 3 and parts[0] == "docs" and "/".join(parts[2:]) in known:
        return {"/".join(parts[2:])}
    if value in known:
        return {value}
    if name == "page" and f"{value}.md" in known:
        return {f"{value}.md"}
    return set()


def item_pages(item, known: set[str]) -> set[str]:
    """The pages ``item`` checks: its page parameters, its ``page`` marks, or, for a snippet of a
    page (Sybil), the page it is on."""
    found = {name for mark in item.iter_markers("page") for name in mark.args}
    params = getattr(getattr(item, "callspec", None), "params", {})
    for name, value in params.items():
        found |= pages_of(value, name, known)
    path = Path(str(getattr(item, "path", "")))
    if path.suffix == ".md" and (ROOT / "docs") in path.parents:
        found |= pages_of(path, "", known)
    return found


def selected_pages(config) -> tuple[str, ...]:
    """The pages ``--page`` names, as ``rope.md``; a name that is no page is a usage error."""
    known = page_names()
    chosen = []
    for given in config.getoption("page"):
        parts = given.split("/")  # rope, rope.md, or a source: docs/zh/rope.md
        name = "/".join(parts[2:] if parts[0] == "docs" and len(parts) > 2 else parts)
        name = name.removesuffix(".md") + ".md"
        if name not in known:
            raise pytest.UsageError(f"--page {given}: no such page (docs/en/{name})")
        chosen.append(name)
    return tuple(dict.fromkeys(chosen))


def needs_site(item) -> bool:
    return not SITE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(config, items):
    """The tests that read the built site run last, each group in its order. Each is marked
    ``site``, and each that waits on the quick benchmark ``slow``, so that ``make quick``
    (``-m "not site and not browser and not slow"``) neither builds the site nor runs the bench.
    With ``--page``, only that page's checks are kept (see the option's help)."""
    for item in items:
        if needs_site(item):
            item.add_marker(pytest.mark.site)
        if imports_transformers(Path(str(item.path))):
            item.add_marker(pytest.mark.transformers)
        if "quick_bench" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    chosen = set(selected_pages(config))
    if chosen:
        known = page_names()
        kept, dropped = [], []
        for item in items:
            pages = item_pages(item, known)
            keep = (
                bool(pages & chosen)
                if pages
                else not {"checked_pages", "site_build"}.isdisjoint(
                    getattr(item, "fixturenames", ())
                )
                or item.get_closest_marker("premise") is not None
            )
            (kept if keep else dropped).append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    items[:] = [item for item in items if not needs_site(item)] + list(filter(needs_site, items))


def pytest_collection_finish(session):
    """Start the build now if a selected test reads the site (the deselected ones do not count)."""
    if not session.config.option.collectonly and any(map(needs_site, session.items)):
        session.config.stash[BUILD] = BackgroundBuild()
    if not session.config.option.collectonly and any(
        "quick_bench" in getattr(item, "fixturenames", ()) for item in session.items
    ):
        session.config.stash[BENCH] = BackgroundBench()


def pytest_unconfigure(config):
    for key in (BUILD, BENCH):
        started = config.stash.get(key, None)
        if started is not None:
            started.close()


@pytest.fixture(scope="session")
def checked_pages(request) -> tuple[str, ...]:
    """The pages of the nav a test that loops over pages checks: those ``--page`` names, or all."""
    return selected_pages(request.config) or tuple(nav_pages())


@pytest.fixture(scope="session")
def quick_bench(request) -> tuple[int, str, str, Path]:
    """The quick benchmark run started with the session: exit status, output, errors, folder."""
    bench = request.config.stash.get(BENCH, None)
    if bench is None:  # asked for without being planned (getfixturevalue): run it now
        bench = request.config.stash[BENCH] = BackgroundBench()
    return bench.result()


def the_build(config) -> Build:
    build = config.stash.get(BUILD, None)
    if build is None:  # asked for by a test that did not name it (getfixturevalue): build now
        build = config.stash[BUILD] = BackgroundBuild()
    return build.result()


@pytest.fixture(scope="session")
def site_build(request) -> Build:
    """``mkdocs build --strict`` of the whole site, once (or its cached result), started in the
    background when the tests were collected; skips for a site built elsewhere (``MHA_SITE``),
    whose log is not here."""
    build = the_build(request.config)
    if build.output is None:
        pytest.skip(f"MHA_SITE={os.environ['MHA_SITE']}: built elsewhere, its log is not here")
    return build


@pytest.fixture(scope="session")
def built_site(request) -> Path:
    """The directory of a site that built without a warning; fails the test otherwise."""
    build = the_build(request.config)
    if build.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed:\n{build.output}", pytrace=False)
    return build.site


class SiteHandler(SimpleHTTPRequestHandler):
    """Serves the site under its URL prefix, as GitHub Pages does; anything outside it is a 404,
    and a 404 sends the site's root ``404.html``, as GitHub Pages does for every missing address."""

    prefix = url_prefix()

    def send_error(self, code, message=None, explain=None):
        page = Path(self.directory) / "404.html"
        if code != 404 or not page.is_file():
            return super().send_error(code, message, explain)
        body = page.read_bytes()
        self.send_response(404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def translate_path(self, path):
        if not path.startswith(self.prefix):
            return str(Path(self.directory) / "-outside-the-site-prefix-")
        return super().translate_path("/" + path[len(self.prefix) :])

    def log_message(self, format, *args):
        pass


class SiteServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        """A browser that closed a connection mid-response (a tab closed, a page left before it
        loaded) is no error of the site: only other errors are printed."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@pytest.fixture(scope="session")
def site_url(built_site):
    """The built site served on 127.0.0.1 on a free port: ``http://127.0.0.1:N/mha/``."""
    handler = functools.partial(SiteHandler, directory=str(built_site))
    server = SiteServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}{SiteHandler.prefix}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for every browser test of the session (each test file opens its own
    contexts); skips with what to install, or fails under ``MHA_REQUIRE_BROWSER=1``."""
    reason = missing_browser()
    if reason:
        if os.environ.get("MHA_REQUIRE_BROWSER") == "1":
            pytest.fail(f"MHA_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def visits(request, browser, site_url):
    """Each page the selected tests want visited once, its probes looking in each state, ahead of
    those tests (``tests/visits.py``); the modules register their probes on import."""
    from visits import Visits

    visiting = Visits(request.session.items, site_url)  # (browser: its skip, or failure)
    yield visiting
    visiting.close()
