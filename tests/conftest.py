"""Fixtures of the site tests: one strict build per session, and that site served on 127.0.0.1.

``tests/test_docs_build.py`` checks the build; the browser tests read the same site, in one
Chromium. Importing ``support`` loads the tests' one hypothesis profile.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support import CHROMIUM_ARGS, ROOT, chromium_path, missing_browser, url_prefix


@dataclass(frozen=True)
class Build:
    """The outcome of ``mkdocs build --strict`` into ``site``."""

    site: Path
    returncode: int
    output: str
    seconds: float


@pytest.fixture(scope="session")
def site_build(tmp_path_factory) -> Build:
    """``mkdocs build --strict`` of the whole site, once per session (never -q or -v: with either,
    known MkDocs bugs make a failing strict build exit 0)."""
    site = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
    start = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - start
    return Build(site, done.returncode, done.stdout + done.stderr, seconds)


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
