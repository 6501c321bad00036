"""A real browser for the report's page: Debian's ``chromium``, headless, driven by playwright.

The page is opened from disk (``file://``) as a person would open it; every network request, console
message and page error is recorded, so a test can assert the page fetched nothing and logged no error.
Chromium gets the flags a machine with a closed network needs (no background networking, no component
updates, no sync, no QUIC) and a fresh profile each time.

``KCOMPACT_REQUIRE_BROWSER=1`` (set by ``.ci/run``) turns a missing chromium or playwright from a skip
into a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("KCOMPACT_CHROMIUM", "/usr/bin/chromium")
REQUIRE_BROWSER = "KCOMPACT_REQUIRE_BROWSER"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
VIEWPORT: Any = {"width": 1280, "height": 900}  # playwright's ViewportSize
SCREENSHOTS: list[Path] = []
"""Screenshots the run saved, named at its end (``tests/report/conftest.py``) for a person to look at."""


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        return f"no chromium at {CHROMIUM} (apt-get install -y chromium, or set KCOMPACT_CHROMIUM)"
    return None


def require_browser() -> None:
    """Skip the test when there is no browser, or fail it under ``KCOMPACT_REQUIRE_BROWSER=1``."""
    missing = browser_missing()
    if missing is None:
        return
    if os.environ.get(REQUIRE_BROWSER) == "1":
        pytest.fail(f"{REQUIRE_BROWSER}=1 but {missing}")
    pytest.skip(f"the report's browser test needs chromium and playwright: {missing}")


@dataclass
class Visit:
    """A page opened in the browser, and what happened while it loaded."""

    page: Any
    requests: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)


@contextmanager
def open_page(html_file: Path, profile: Path) -> Iterator[Visit]:
    """Open ``html_file`` in headless chromium (a fresh profile at ``profile``) and wait for it to load.

    Yields:
        The visit: the playwright page, the URLs requested, the console errors and page errors.
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        context = driver.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=FLAGS, viewport=VIEWPORT,
            offline=True)
        try:
            page = context.new_page()
            visit = Visit(page)
            page.on("request", lambda request: visit.requests.append(request.url))
            page.on("console", lambda message: visit.console_errors.append(message.text)
                    if message.type == "error" else None)
            page.on("pageerror", lambda error: visit.console_errors.append(str(error)))
            page.goto(html_file.resolve().as_uri(), wait_until="load")
            page.wait_for_timeout(300)  # plotly draws in the load event's task; let it settle
            yield visit
        finally:
            context.close()
