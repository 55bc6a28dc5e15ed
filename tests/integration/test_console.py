"""The web console against a real broker, a real worker and indexer, in Debian's headless
Chromium: the list filtered and searched through its URL, a session's timeline, recorded markup
shown as text under a policy that runs no inline script, and a subject's content shown only
where the console holds the KEK, and as erased once it is."""

from __future__ import annotations

import json
import re
from pathlib import Path

from rolltape.infra.console import CONTENT_SECURITY_POLICY
from rolltape.producers import Recorder
from rolltape.schemas import Role
from rolltape.schemas.privacy import KeyEncryptionKey
from tests.integration.conftest import Topics
from tests.integration.workers import WorkerProcess, payloads, wait_for
from tests.support.chromium import Watched, browser
from tests.support.cli import rolltape
from tests.support.console import ConsoleProcess, get

MARKUP_TASK = "<script>window.__pwned = 'task'</script> fix the <b>parser</b>"
MARKUP_REPLY = "<img src=x onerror=\"window.__pwned = 'reply'\"> done & dusted"
MARKUP_RESULT = "</pre><script>window.__pwned = 'result'</script><pre>"
SUBJECT_WORD = "marmalade"
"""Said only in the subject's session: on no page of a console without the KEK."""


MARKUP_FILE = "<script>window.__pwned = 'file'</script>\n"


def _record(topics: Topics, spool: Path, kek: KeyEncryptionKey) -> None:
    workdir = spool.parent / "workdir"
    workdir.mkdir()
    with Recorder(
        topics.connection(Role.AGENT), topic_prefix=topics.prefix, spool_dir=spool, kek=kek
    ) as rec:
        for i in range(6):
            tags = ["env=shop" if i % 2 else "env=lab", f"batch=b{i // 3}"]
            with rec.session(f"count apples {i}", session_id=f"plain-{i}", tags=tags) as s:
                s.turn("user", f"how many apples in basket {i}?")
                call = s.tool_call("count", {"basket": i})
                s.tool_result(call, str(i * 3), duration_ms=2.5)
                if i == 4:
                    bad = s.tool_call("count", {"basket": "?"})
                    s.tool_result(bad, "no such basket", success=False, error="KeyError")
                s.turn("assistant", f"there are {i * 3} apples", reasoning="I counted them")
                s.reward(1.0 if i % 2 else 0.0)
        with rec.session(MARKUP_TASK, session_id="markup", tags=["env=lab"]) as s:
            s.turn("user", "what does the parser do?")
            call = s.tool_call("shell", {"cmd": "<script>alert(1)</script>"})
            s.tool_result(call, MARKUP_RESULT)
            s.turn("assistant", MARKUP_REPLY, reasoning="<i>thinking</i>")
        # A world recorded before and after the agent changed it.
        with rec.session("fix the adder", session_id="worldly", tags=["env=lab"]) as s:
            (workdir / "notes.txt").write_text("to do\n")
            (workdir / "adder.py").write_text("def add(a, b):\n    return a - b\n")
            s.world(workdir)
            s.turn("user", "fix the adder")
            (workdir / "notes.txt").unlink()
            (workdir / "adder.py").write_text("def add(a, b):\n    return a + b\n")
            (workdir / "page.html").write_text(MARKUP_FILE)
            s.world(workdir)
            s.turn("assistant", "fixed")
        # A reply with nothing in it: the filter rejects it.
        with rec.session("say nothing", session_id="empty") as s:
            s.turn("user", "say something")
            s.turn("assistant", "")
        for subject in ("alice", "bob"):
            with rec.session(
                f"help {subject}", session_id=f"subject-{subject}", subject=subject
            ) as s:
                s.turn("user", f"my {SUBJECT_WORD} question")
                s.turn("assistant", f"the {SUBJECT_WORD} answer")


def test_the_console_lists_filters_searches_and_shows_sessions_with_recorded_markup_as_text(
    topics: Topics, tmp_path: Path
) -> None:
    kek = KeyEncryptionKey.generate()
    kek_file = tmp_path / "kek.bin"
    kek_file.write_bytes(kek.secret)
    kek_file.chmod(0o600)
    _record(topics, tmp_path / "spool", kek)
    worker = WorkerProcess(topics, tmp_path).start()
    try:
        wait_for(
            topics,
            lambda records: len(payloads(records, "filter_outcome")) >= 8,
            worker=worker,
        )
    finally:
        worker.stop()
    with_kek = {**topics.env(), "ROLLTAPE_KEK_FILE": str(kek_file)}
    without = {**topics.env(), "ROLLTAPE_KEK_FILE": str(tmp_path / "absent.bin")}
    # A stricter filter re-judges history as version "strict": a reward of 0.5 at least.
    strict = tmp_path / "strict.json"
    strict.write_text('{"name": "strict", "min_reward": 0.5}')
    replayed = rolltape(
        {**topics.env(), "ROLLTAPE_FILTERS_FILE": str(strict)},
        "log",
        "replay",
        "--judge-version",
        "strict",
        timeout=300,
    )
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    first, second = tmp_path / "v1.txt", tmp_path / "v2.txt"
    first.write_text("You are a careful assistant.")
    second.write_text("You are a careful assistant. <script>window.__pwned = 'prompt'</script>")
    for file, extra in (
        (first, ["--promote", "initial"]),
        (second, ["--rationale", "<b>bolder</b>"]),
    ):
        added = rolltape(topics.env(), "prompts", "add", "policy", "--file", str(file), *extra)
        assert added.returncode == 0, added.stdout + added.stderr
    erased = rolltape(with_kek, "privacy", "erase", "--subject", "bob", timeout=180)
    assert erased.returncode == 0, erased.stdout + erased.stderr
    store = {"ROLLTAPE_INDEX_URL": f"sqlite:{tmp_path / 'index.sqlite3'}"}
    built = rolltape({**without, **store}, "index", "rebuild")
    assert built.returncode == 0, built.stderr

    console = ConsoleProcess({**without, **store}, tmp_path / "console.log")
    keyed = ConsoleProcess({**with_kek, **store}, tmp_path / "keyed.log")
    try:
        with browser() as chromium:
            _list_filter_and_search(Watched(chromium), console.url, tmp_path)
            _session_page(Watched(chromium), console.url, tmp_path)
            _markup_stays_text(Watched(chromium), console.url, tmp_path)
            _subject_content(Watched(chromium), console.url, keyed.url, tmp_path)
            _versions(Watched(chromium), console.url, tmp_path)
            _worlds(Watched(chromium), console.url, tmp_path)
            _prompts(Watched(chromium), console.url, tmp_path)
        _answers_and_headers(console.url)
    finally:
        assert console.stop() == 0, console.output()
        assert keyed.stop() == 0, keyed.output()


def _list_filter_and_search(w: Watched, url: str, shots: Path) -> None:
    page = w.page
    page.goto(f"{url}/sessions")
    everything = w.rows()
    # Eleven recorded sessions, and the two prompt versions' (each version is a session).
    assert len(everything) == 13 and "plain-3" in everything
    assert page.locator("#count").inner_text().startswith("13 sessions match")
    # The charts are images the console draws: each loaded, of the sessions the filters leave.
    widths = page.eval_on_selector_all("img.chart", "els => els.map(e => e.naturalWidth)")
    assert widths == [420, 420, 420]
    status, headers, svg = get(f"{url}/charts/tools.svg")
    assert status == 200 and headers["Content-Type"].startswith("image/svg+xml")
    assert "count: 1 of 7 calls failed" in svg and "count: 6 of 7 calls succeeded" in svg
    assert "shell: 1 of 1 calls succeeded" in svg and "shell: 0" not in svg
    _, _, svg = get(f"{url}/charts/tools.svg?env=shop")
    assert (
        "count: 3 of 3 calls succeeded" in svg and "calls failed" not in svg and "shell" not in svg
    )
    _, _, svg = get(f"{url}/charts/rewards.svg")
    assert "3 with reward 0 to 0.1" in svg and "3 with reward 0.9 to 1" in svg
    page.screenshot(path=shots / "list.png", full_page=True)

    # A choice applies at once (the script submits the form); the URL holds only the filter.
    page.select_option("select[name=outcome]", "rejected")
    page.wait_for_url(re.compile(r"outcome=rejected"))
    assert page.url == f"{url}/sessions?outcome=rejected"
    rejected = w.rows()
    assert "empty" in rejected and "plain-1" not in rejected
    # The address is the view: opened afresh, it shows the same sessions.
    page.goto(page.url)
    assert w.rows() == rejected

    # Text filters apply on Enter, beside the choice already made; each shows as a chip.
    page.goto(f"{url}/sessions")
    page.fill("input[name=env]", "shop")
    page.press("input[name=env]", "Enter")
    page.wait_for_url(re.compile(r"env=shop"))
    assert sorted(w.rows()) == ["plain-1", "plain-3", "plain-5"]
    page.select_option("select[name=tool_failed]", "true")
    page.wait_for_url(re.compile(r"tool_failed=true"))
    assert w.rows() == []  # plain-4's failed call is in the lab
    page.click("a.chip >> text=env = shop")
    assert w.rows() == ["plain-4"]

    # Search: every word, in the sessions the filters leave.
    page.goto(f"{url}/sessions")
    page.fill("input[type=search]", "basket 4")
    page.press("input[type=search]", "Enter")
    page.wait_for_url(re.compile(r"q=basket"))
    hits = w.rows("#hits")
    assert hits and set(hits) == {"plain-4"}
    page.screenshot(path=shots / "search.png", full_page=True)

    # Paging: two at a time, every session once.
    seen: list[str] = []
    page.goto(f"{url}/sessions?limit=3")
    while True:
        seen.extend(w.rows())
        nxt = page.locator("#next")
        if nxt.count() == 0:
            break
        nxt.click()
    assert sorted(seen) == sorted(everything)
    assert w.errors == []


def _session_page(w: Watched, url: str, shots: Path) -> None:
    page = w.page
    page.goto(f"{url}/sessions?env=lab")
    page.click("text=plain-4")
    page.wait_for_url(f"{url}/sessions/plain-4")
    assert page.locator("h1").inner_text() == "count apples 4"
    assert "chains verified" in page.locator("#trust").inner_text()
    # The user's question, the turn that called the tools, the answer.
    roles = page.locator("#timeline article.message .role").all_inner_texts()
    assert [r.lower() for r in roles] == ["user", "assistant", "assistant"]
    failed = page.locator("#timeline .tool-call.failed")
    assert failed.count() == 1 and "no such basket" in failed.inner_text()
    assert "KeyError" in failed.inner_text()
    # Reasoning is folded until asked for.
    reasoning = page.locator("#timeline details.reasoning")
    assert (
        not reasoning.first.get_attribute("open")
        and not reasoning.first.locator("div").is_visible()
    )
    reasoning.first.locator("summary").click()
    assert reasoning.first.locator("div").inner_text() == "I counted them"
    assert "live accepted" in page.locator("#verdicts table").inner_text().replace("\t", " ")
    page.screenshot(path=shots / "session.png", full_page=True)
    page.click("text=As exported")
    sharegpt = json.loads(page.locator("#file-1").inner_text().splitlines()[0])
    assert sharegpt["conversations"][0]["value"] == "how many apples in basket 4?"
    page.click("#formats >> text=openai")
    assert page.url.endswith("/sessions/plain-4/export?format=openai")
    assert '"role": "assistant"' in page.locator("#file-1").inner_text().replace('":"', '": "')
    page.click("#formats >> text=dpo")
    assert "writes nothing of this session alone" in page.locator("#left-out").inner_text()
    page.goto(f"{url}/sessions/plain-4")
    page.click("text=Raw events")
    assert page.locator("details.raw").count() >= 7
    assert w.errors == []


def _markup_stays_text(w: Watched, url: str, shots: Path) -> None:
    page = w.page
    violations: list[str] = []
    page.on(
        "console", lambda m: violations.append(m.text) if "Content Security" in m.text else None
    )
    for path in ("/sessions", "/sessions/markup", "/sessions/markup/events"):
        response = page.goto(f"{url}{path}")
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert page.evaluate("window.__pwned") is None, path
        # Every script the page runs is the console's own file: none inline.
        sources = page.eval_on_selector_all("script", "els => els.map(e => e.src)")
        assert sources == [f"{url}/static/console.js"], path
        assert page.locator("main img:not(.chart)").count() == 0, path
    page.goto(f"{url}/sessions/markup")
    assert page.locator("h1").inner_text() == MARKUP_TASK
    assert MARKUP_REPLY in page.locator("#timeline").inner_text()
    assert MARKUP_RESULT in page.locator("#timeline .tool-call").inner_text()
    assert page.locator("#timeline b, #timeline i").count() == 0
    page.screenshot(path=shots / "markup.png", full_page=True)
    assert violations == [] and w.errors == []


def _subject_content(w: Watched, url: str, keyed_url: str, shots: Path) -> None:
    page = w.page
    page.goto(f"{url}/sessions/subject-alice")
    assert "no key-encryption key" in page.locator("#sealed").inner_text()
    assert SUBJECT_WORD not in page.content()
    page.goto(f"{url}/sessions")
    assert SUBJECT_WORD not in page.content()
    page.goto(f"{keyed_url}/sessions/subject-alice")
    assert f"my {SUBJECT_WORD} question" in page.locator("#timeline").inner_text()
    page.goto(f"{keyed_url}/sessions/subject-bob")
    assert "erased" in page.locator("#sealed").inner_text()
    assert page.locator("#erased").count() == 1 and SUBJECT_WORD not in page.content()
    page.goto(f"{keyed_url}/sessions?erased=true")
    assert w.rows() == ["subject-bob"]
    page.screenshot(path=shots / "erased.png", full_page=True)
    assert w.errors == []


def _versions(w: Watched, url: str, shots: Path) -> None:
    page = w.page
    page.goto(f"{url}/sessions")
    page.click("nav >> text=Judge versions")
    # The live version against the other one, at once: the strict filter took out the sessions
    # without a reward of 0.5 (the subjects' it could not open, holding no KEK).
    summary = page.locator("#summary").inner_text()
    assert "accepted by live, rejected by strict\t5" in summary, summary
    assert "judged by live only\t2" in summary, summary
    assert sorted(w.rows("#changes")) == ["markup", "plain-0", "plain-2", "plain-4", "worldly"]
    page.click("#changes >> text=plain-2")
    page.wait_for_url(f"{url}/sessions/plain-2")
    outcomes = page.locator("#verdicts table").inner_text()
    assert "strict" in outcomes and "rejected" in outcomes and "low_reward" in outcomes, outcomes
    page.goto(f"{url}/versions")
    page.screenshot(path=shots / "versions.png", full_page=True)
    status, _, body = get(f"{url}/versions?a=live&b=nope")
    assert status == 400 and "no session was judged under version &#39;nope&#39;" in body
    assert w.errors == []


def _worlds(w: Watched, url: str, shots: Path) -> None:
    page = w.page
    page.goto(f"{url}/sessions/worldly")
    links = page.locator("#worlds a")
    assert links.count() == 2
    links.nth(1).click()  # the world after, against the world before
    diff = page.locator("#diff")
    changes = diff.locator(".change .tool-head").all_inner_texts()
    assert changes == ["adder.py changed", "notes.txt removed", "page.html added"], changes
    assert "-    return a - b\n+    return a + b" in diff.locator("pre").first.inner_text()
    assert page.evaluate("window.__pwned") is None
    page.screenshot(path=shots / "world-diff.png", full_page=True)
    page.click("#entries >> text=page.html")
    assert page.locator("#contents").inner_text() == MARKUP_FILE.rstrip("\n") or (
        page.locator("#contents").inner_text() == MARKUP_FILE
    )
    assert page.evaluate("window.__pwned") is None and page.locator("main script").count() == 0
    status, _, body = get(f"{url}/worlds/{'0' * 64}")
    assert status == 404 and "not on the" in body
    status, _, _ = get(f"{url}/worlds/not-a-digest")
    assert status == 400
    assert w.errors == []


def _prompts(w: Watched, url: str, shots: Path) -> None:
    page = w.page
    page.goto(f"{url}/sessions")
    page.click("nav >> text=Prompts")
    assert w.rows("#targets") == ["policy"]
    page.click("#targets >> text=policy")
    lineage = page.locator("#lineage tbody tr").all_inner_texts()
    assert len(lineage) == 2 and "champion" in lineage[0] and "initial" in lineage[0]
    assert "<b>bolder</b>" in lineage[1] and page.locator("#lineage b").count() == 0
    assert page.locator("#champion pre").inner_text() == "You are a careful assistant."
    assert "No round was judged yet." in page.locator("#rounds").inner_text()
    assert page.evaluate("window.__pwned") is None
    page.screenshot(path=shots / "prompts.png", full_page=True)
    status, _, body = get(f"{url}/prompts/nope")
    assert status == 404 and "no prompt target &#39;nope&#39;" in body
    assert w.errors == []


def _answers_and_headers(url: str) -> None:
    status, _, body = get(f"{url}/sessions?status=done")
    assert status == 400 and "the URL parameter &#39;status&#39;" in body
    status, _, body = get(f"{url}/sessions/nobody")
    assert status == 404 and "no session &#39;nobody&#39;" in body
    # A page elsewhere that rebinds its name to loopback gets nothing.
    status, headers, body = get(f"{url}/sessions", Host="attacker.example:80")
    assert status == 421 and headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert "attacker" not in body
    status, headers, _ = get(f"{url}/sessions")
    assert status == 200 and headers["Cache-Control"] == "no-store"
    assert headers["X-Frame-Options"] == "DENY"
