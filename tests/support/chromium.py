"""A page opened in Debian's headless Chromium (driven by Playwright), with every console error
and page error it raises collected: how the tests check the HTML pages rolltape writes."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


@contextmanager
def opened(path: Path, *, width: int = 1280, height: int = 2400) -> Iterator[tuple[Any, list[str]]]:
    """(the page at `path`, the errors it raised so far), the browser closed afterwards."""
    from playwright.sync_api import sync_playwright

    if shutil.which("chromium") is None:
        pytest.fail("Debian's chromium is not installed: scripts/test.sh installs it (apt-get)")
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=shutil.which("chromium"),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(path.as_uri())
            yield page, errors
        finally:
            browser.close()
