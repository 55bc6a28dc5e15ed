"""`rolltape bench console`: how fast the console's pages come, from the server and in a browser.

The read model holds `sessions` synthetic sessions (the sessions of `bench index`, folded into a
SQLite store) and one real session of `events` events, written to a scratch prefix on the
broker and indexed from it by a rebuild, as `serve index` would. The console is served in this
process, on loopback. Two pages are timed:

- the sessions list with three filters (a tag, a status, the filter's outcome: `bench index`'s
  list query, here with its count, the page and the HTML), drawn from the sessions (seeded);
- the big session's page: its row from the read model, its records read from the log at the
  offsets the read model holds, folded, and the timeline rendered.

Server time is the request's round trip on loopback (with the console's own `Server-Timing`
beside it); browser time is Chromium's (Debian's, headless, driven by Playwright) from the start
of navigation to the load event, the list's three charts included (they are images the console
draws from the same filters). p50 and p95 over `requests` askings each.
"""

from __future__ import annotations

import asyncio
import random
import re
import shutil
import statistics
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

from rolltape.infra.bench._figures import Figures, machine_line
from rolltape.infra.bench._load import write_agent_sessions
from rolltape.infra.bench._machine import machine
from rolltape.infra.bench.index import index_records, synthetic_records
from rolltape.infra.settings import Settings
from rolltape.schemas import Role

GOAL_LIST_P95_MS = 200.0
GOAL_SESSION_P95_MS = 500.0
BIG_SESSION = "bench-0"
"""The real session's id (`write_agent_sessions` names its first session so)."""


class ConsoleFigures(Figures):
    machine: str
    sessions: int
    session_events: int
    requests: int
    list_server_p50_ms: float
    list_server_p95_ms: float
    list_app_p50_ms: float
    """The console's own time for the list (its `Server-Timing`), median."""
    list_browser_p50_ms: float | None
    list_browser_p95_ms: float | None
    """To the load event, the three charts (images the console draws) included."""
    list_ready_p95_ms: float | None
    """To DOMContentLoaded: the list itself shown, its charts still loading."""
    session_server_p50_ms: float
    session_server_p95_ms: float
    session_app_p50_ms: float
    session_browser_p50_ms: float | None
    session_browser_p95_ms: float | None
    session_ready_p95_ms: float | None
    list_page_bytes: int
    """The largest list page asked for (some filter draws match no session)."""
    session_page_bytes: int
    browser: str
    """What timed the browser figures: Chromium's version, or why there are none."""

    def lines(self) -> Iterator[str]:
        yield machine_line(
            self.machine,
            f"{self.sessions:,} sessions in the read model (SQLite), one of {self.session_events:,} "
            f"events on the broker; {self.requests} requests per page (p50 / p95)",
        )
        yield f"browser: {self.browser}"
        yield (
            f"    list, three filters: server {self.list_server_p50_ms:7.1f} / "
            f"{self.list_server_p95_ms:7.1f} ms (the console's own {self.list_app_p50_ms:.1f}), "
            f"browser {_pair(self.list_browser_p50_ms, self.list_browser_p95_ms)} ms "
            f"(p95 {_one(self.list_ready_p95_ms)} ms to the list shown, charts still loading; "
            f"{self.list_page_bytes / 1e3:,.0f} kB; goal p95 <= {GOAL_LIST_P95_MS:g}: "
            f"{_met(self.list_server_p95_ms, self.list_browser_p95_ms, GOAL_LIST_P95_MS)})"
        )
        yield (
            f"    session of {self.session_events:,} events: server "
            f"{self.session_server_p50_ms:7.1f} / {self.session_server_p95_ms:7.1f} ms (the "
            f"console's own {self.session_app_p50_ms:.1f}), browser "
            f"{_pair(self.session_browser_p50_ms, self.session_browser_p95_ms)} ms "
            f"(p95 {_one(self.session_ready_p95_ms)} ms to DOMContentLoaded; "
            f"{self.session_page_bytes / 1e3:,.0f} kB; goal p95 <= {GOAL_SESSION_P95_MS:g}: "
            f"{_met(self.session_server_p95_ms, self.session_browser_p95_ms, GOAL_SESSION_P95_MS)})"
        )


def _pair(p50: float | None, p95: float | None) -> str:
    if p50 is None or p95 is None:
        return "-"
    return f"{p50:7.1f} / {p95:7.1f}"


def _one(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _met(server: float, browser: float | None, goal: float) -> str:
    worst = server if browser is None else max(server, browser)
    return "met" if worst <= goal else "MISSED"


def _percentiles(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[max(0, int(len(ordered) * 0.95) - 1)]


def _list_urls(base: str, requests: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    urls = []
    for _ in range(requests):
        params = {
            "env": f"e{rng.randrange(7)}",
            "status": rng.choice(("completed", "failed")),
            "outcome": "accepted" if rng.random() < 0.8 else "rejected",
        }
        urls.append(f"{base}/sessions?{urlencode(params)}")
    return urls


def _get(url: str) -> tuple[float, float, int]:
    """(round trip ms, the console's own ms, bytes) of one GET."""
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        body = r.read()
        timing = r.headers.get("Server-Timing", "")
        if r.status != 200:
            raise RuntimeError(f"{url} answered {r.status}")
    ms = (time.perf_counter() - t) * 1000
    found = re.search(r"dur=([0-9.]+)", timing)
    return ms, float(found.group(1)) if found else 0.0, len(body)


def _server(urls: list[str]) -> tuple[float, float, float, int]:
    _get(urls[0])  # warm: templates compiled, connections made
    trips, own, size = [], [], 0
    for url in urls:
        ms, app, got = _get(url)
        trips.append(ms)
        own.append(app)
        size = max(size, got)
    p50, p95 = _percentiles(trips)
    return p50, p95, statistics.median(own), size


def _browser(executable: str, urls: list[str]) -> tuple[float, float, float]:
    """Chromium's time from navigation start to the load event, p50 and p95 over `urls`, and
    the p95 to DOMContentLoaded (the page's own HTML parsed and shown, before its images)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=executable, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = chromium.new_page()
            page.goto(urls[0])
            loaded, ready = [], []
            for url in urls:
                page.goto(url, wait_until="load")
                load, parsed = page.evaluate(
                    "(() => { const n = performance.getEntriesByType('navigation')[0];"
                    " return [n.loadEventEnd, n.domContentLoadedEventEnd]; })()"
                )
                loaded.append(float(load))
                ready.append(float(parsed))
            p50, p95 = _percentiles(loaded)
            return p50, p95, _percentiles(ready)[1]
        finally:
            chromium.close()


def _check_pages(list_url: str, session_url: str, events: int) -> None:
    """The pages timed are the real ones: the list holds sessions, and the session's page its
    whole timeline (every round's tool call), not a page saying it could not be read."""
    with urllib.request.urlopen(list_url, timeout=120) as r:
        listed = r.read().decode()
    with urllib.request.urlopen(session_url, timeout=120) as r:
        shown = r.read().decode()
    rounds = (events - 3) // 4
    calls = shown.count('<div class="tool-call')
    if '<a href="/sessions/bench-' not in listed or calls != rounds:
        raise RuntimeError(
            f"the console's pages are not what is timed: the session page shows {calls} of "
            f"{rounds} tool calls"
        )


class _Served:
    """The console served on loopback in a thread of this process until `stop()`."""

    def __init__(self, settings: Settings) -> None:
        from rolltape.infra.commands.console import ConsoleListening, serve_console

        self._ready = threading.Event()
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

        def ready(at: ConsoleListening) -> None:
            self.url = at.url.rstrip("/")
            self._ready.set()

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await serve_console(settings, self._stop, port=0, on_ready=ready)

        self._thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
        self._thread.start()
        if not self._ready.wait(60):
            raise RuntimeError("the console did not start")

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


def run_console_bench(
    settings: Settings, *, sessions: int = 100_000, events: int = 2_000, requests: int = 50
) -> ConsoleFigures:
    """Build the read model, write the big session, serve the console, time both pages.
    Needs a broker."""
    from rolltape.infra.broker import require_connection
    from rolltape.infra.commands.index import rebuild_index
    from rolltape.infra.kafka.topics import scratch_prefix

    require_connection(settings, Role.ADMIN)  # a clear error when there is no broker
    with (
        scratch_prefix(settings, "bench", partitions=1) as scratch,
        tempfile.TemporaryDirectory() as tmp,
    ):
        url = f"sqlite:{Path(tmp) / 'index.sqlite3'}"
        scoped = scratch.model_copy(update={"index_url": url, "state_dir": Path(tmp) / "state"})
        agent = require_connection(scratch, Role.AGENT)
        written = asyncio.run(write_agent_sessions(agent, scratch.topic_prefix, events, 1))
        asyncio.run(rebuild_index(scoped))
        index_records(
            url,
            synthetic_records(sessions, seed=0, prefix="synthetic"),
            prefix=scratch.topic_prefix,
        )
        served = _Served(scoped)
        try:
            lists = _list_urls(served.url, requests, seed=1)
            page = [f"{served.url}/sessions/{BIG_SESSION}"] * requests
            _check_pages(lists[0], page[0], written)
            l50, l95, l_app, l_bytes = _server(lists)
            s50, s95, s_app, s_bytes = _server(page)
            chromium = shutil.which("chromium")
            lb = sb = None
            browser = "no Chromium here (apt-get install chromium): browser figures left out"
            if chromium is not None:
                browser = "Chromium (Debian's, headless, driven by Playwright)"
                lb, sb = _browser(chromium, lists), _browser(chromium, page)
        finally:
            served.stop()
    return ConsoleFigures(
        machine=machine(),
        sessions=sessions + 1,
        session_events=written,
        requests=requests,
        list_server_p50_ms=l50,
        list_server_p95_ms=l95,
        list_app_p50_ms=l_app,
        list_browser_p50_ms=None if lb is None else lb[0],
        list_browser_p95_ms=None if lb is None else lb[1],
        list_ready_p95_ms=None if lb is None else lb[2],
        session_server_p50_ms=s50,
        session_server_p95_ms=s95,
        session_app_p50_ms=s_app,
        session_browser_p50_ms=None if sb is None else sb[0],
        session_browser_p95_ms=None if sb is None else sb[1],
        session_ready_p95_ms=None if sb is None else sb[2],
        list_page_bytes=l_bytes,
        session_page_bytes=s_bytes,
        browser=browser,
    )
