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
def browser() -> Iterator[Any]:
    """Debian's Chromium, headless, closed afterwards (a test that needs it fails, never
    skips, where it is not installed)."""
    from playwright.sync_api import sync_playwright

    if shutil.which("chromium") is None:
        pytest.fail("Debian's chromium is not installed: scripts/test.sh installs it (apt-get)")
    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=shutil.which("chromium"),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            yield chromium
        finally:
            chromium.close()


class Watched:
    """A page, with every console error, page error and policy violation it raised."""

    def __init__(self, chromium: Any, *, width: int = 1280, height: int = 1000) -> None:
        self.page = chromium.new_page(viewport={"width": width, "height": height})
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def rows(self, table: str = "#sessions") -> list[str]:
        return [
            t.strip()
            for t in self.page.locator(
                f"{table} tbody tr:not(.none) td:first-child"
            ).all_inner_texts()
        ]


@contextmanager
def opened(path: Path, *, width: int = 1280, height: int = 2400) -> Iterator[tuple[Any, list[str]]]:
    """(the page at `path`, the errors it raised so far), the browser closed afterwards."""
    with browser() as chromium:
        watched = Watched(chromium, width=width, height=height)
        watched.page.goto(path.as_uri())
        yield watched.page, watched.errors
