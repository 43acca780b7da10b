"""Fixtures of the site tests: one strict build per session, and that site served on 127.0.0.1.

The build starts in the background as soon as the tests are collected, and the tests that read the
site run last: the build (one core) runs while the tests that need no site run (on the other).
``tests/test_docs_build.py`` checks the build; the browser tests read the same site, in one
Chromium. Importing ``support`` loads the tests' one hypothesis profile.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support import CHROMIUM_ARGS, ROOT, chromium_path, missing_browser, url_prefix

SITE_FIXTURES = {"site_build", "built_site", "site_url"}


@dataclass(frozen=True)
class Build:
    """The outcome of ``mkdocs build --strict`` into ``site``."""

    site: Path
    returncode: int
    output: str


class BackgroundBuild:
    """``mkdocs build --strict`` of the whole site into a temporary folder, running while the
    session goes on (never -q or -v: with either, known MkDocs bugs make a failing strict build
    exit 0). Its output goes to a file, so a full pipe never stalls it."""

    def __init__(self):
        self.folder = Path(tempfile.mkdtemp(prefix="mha-site-"))
        self.log = (self.folder / "build.log").open("w+", encoding="utf-8")
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
        site = self.folder / "site"
        command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=self.log, stderr=self.log
        )
        self.site = site

    def result(self) -> Build:
        returncode = self.process.wait(timeout=300)
        self.log.seek(0)
        return Build(self.site, returncode, self.log.read())

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()
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


def needs_site(item) -> bool:
    return not SITE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(items):
    """The tests that read the built site run last, each group in its order. Each is marked
    ``site``, and each that waits on the quick benchmark ``slow``, so that ``make quick``
    (``-m "not site and not browser and not slow"``) neither builds the site nor runs the bench."""
    for item in items:
        if needs_site(item):
            item.add_marker(pytest.mark.site)
        if "quick_bench" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    items[:] = [item for item in items if not needs_site(item)] + list(filter(needs_site, items))


def pytest_collection_finish(session):
    """Start the build now if a selected test reads the site."""
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
def quick_bench(request) -> tuple[int, str, str, Path]:
    """The quick benchmark run started with the session: exit status, output, errors, folder."""
    bench = request.config.stash.get(BENCH, None)
    if bench is None:  # asked for without being planned (getfixturevalue): run it now
        bench = request.config.stash[BENCH] = BackgroundBench()
    return bench.result()


@pytest.fixture(scope="session")
def site_build(request) -> Build:
    """``mkdocs build --strict`` of the whole site, once per session, started in the background
    when the tests were collected."""
    build = request.config.stash.get(BUILD, None)
    if build is None:  # asked for by a test that did not name it (getfixturevalue): build now
        build = request.config.stash[BUILD] = BackgroundBuild()
    return build.result()


@pytest.fixture(scope="session")
def built_site(site_build) -> Path:
    """The directory of a site that built without a warning; fails the test otherwise."""
    if site_build.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed:\n{site_build.output}", pytrace=False)
    return site_build.site


class SiteHandler(SimpleHTTPRequestHandler):
    """Serves the site under its URL prefix, as GitHub Pages does; anything outside it is a 404."""

    prefix = url_prefix()

    def translate_path(self, path):
        if not path.startswith(self.prefix):
            return str(Path(self.directory) / "-outside-the-site-prefix-")
        return super().translate_path("/" + path[len(self.prefix) :])

    def log_message(self, format, *args):
        pass


@pytest.fixture(scope="session")
def site_url(built_site):
    """The built site served on 127.0.0.1 on a free port: ``http://127.0.0.1:N/mha/``."""
    handler = functools.partial(SiteHandler, directory=str(built_site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
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
