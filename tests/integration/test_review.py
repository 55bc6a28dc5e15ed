"""Human review against a real broker, worker and read model, in Debian's headless Chromium: the
queues, a reviewer's login checked by the cluster, CSRF and origin checks on every form, human
verdicts and a preference recorded on the verdicts topic as the reviewer principal, chained,
read back by the read model (a judge version `human`, the judges' agreement with reviewers) and
used as a score source by `dataset export`."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.parse
from pathlib import Path
from typing import Any

from rolltape.infra.broker import PrincipalStore
from rolltape.producers import Recorder
from rolltape.producers.cron import JobBook, JobsLog
from rolltape.schemas import CronRun, Role, RunStatus, Stream, decode
from rolltape.schemas.privacy import KeyEncryptionKey
from tests.integration.conftest import Topics
from tests.integration.workers import WorkerProcess, payloads, read_all, wait_for
from tests.support.chromium import Watched, browser
from tests.support.cli import rolltape
from tests.support.console import ConsoleProcess, get, post

MARKUP_COMMENT = "<script>window.__pwned = 'comment'</script> said <b>nothing</b>"


def _record(topics: Topics, spool: Path) -> None:
    kek = KeyEncryptionKey.generate()
    with Recorder(
        topics.connection(Role.AGENT), topic_prefix=topics.prefix, spool_dir=spool, kek=kek
    ) as rec:
        for i, reply in enumerate(("It is 4.", "Two plus two is four, so 4.")):
            with rec.session(
                "add two and two", session_id=f"pair-{i}", group_id="adding", tags=["env=lab"]
            ) as s:
                s.turn("user", "what is 2 + 2?")
                s.turn("assistant", reply)
                s.reward(1.0)
        with rec.session("say nothing", session_id="empty", tags=["env=lab"]) as s:
            s.turn("user", "say something")
            s.turn("assistant", "")
        with rec.session("help carol", session_id="subject-carol", subject="carol") as s:
            s.turn("user", "my private question")
            s.turn("assistant", "a private answer")
        with rec.session("nightly digest", session_id="nightly-run", tags=["cron"]) as s:
            s.turn("user", "summarise the day")
            s.turn("assistant", "A quiet day.")
            s.reward(1.0)


def _route_to_review(topics: Topics) -> None:
    """The cron run of `nightly-run`, as its scheduler writes it once the runner asked for a
    person (the scheduler and its runner are tested in test_cron)."""

    async def main() -> None:
        log = JobsLog(
            topics.connection(Role.SCHEDULER), prefix=topics.prefix, principal="scheduler"
        )
        await log.start()
        try:
            now = time.time_ns()
            run = CronRun(
                job_id="nightly",
                run_id="nightly@20261203T000000Z",
                due_ns=now,
                attempt=1,
                fired_ns=now,
                status=RunStatus.NEEDS_HUMAN_REVIEW,
                session_id="nightly-run",
                reason="the digest names no source",
                fired_by="test",
            )
            await log.write(JobBook(), run.run_id, run.job_id, run)
        finally:
            await log.stop()

    asyncio.run(main())


def _password(topics: Topics, role: Role) -> str:
    principal = PrincipalStore(topics.settings.principals_file).for_role(role)
    assert principal is not None, f"broker up provisions a {role.value} principal"
    return principal.password.get_secret_value()


def _judged_and_indexed(topics: Topics, tmp_path: Path) -> dict[str, str]:
    """The sessions recorded, one routed to review, judged by a worker and indexed: the
    settings (as the environment) of a read model that holds them."""
    _record(topics, tmp_path / "spool")
    _route_to_review(topics)
    worker = WorkerProcess(topics, tmp_path).start()
    try:
        wait_for(
            topics, lambda records: len(payloads(records, "filter_outcome")) >= 5, worker=worker
        )
    finally:
        worker.stop()
    env = {**topics.env(), "ROLLTAPE_INDEX_URL": f"sqlite:{tmp_path / 'index.sqlite3'}"}
    built = rolltape(env, "index", "rebuild")
    assert built.returncode == 0, built.stderr
    return env


def test_a_reviewer_logs_in_records_verdicts_and_a_preference_that_queues_agreement_and_export_read(
    topics: Topics, tmp_path: Path
) -> None:
    env = _judged_and_indexed(topics, tmp_path)
    password = _password(topics, Role.REVIEWER)

    console = ConsoleProcess(env, tmp_path / "console.log")
    try:
        url = console.url
        _forms_refuse_forgery(url)
        with browser() as chromium:
            w = Watched(chromium)
            page = w.page
            page.goto(f"{url}/review")
            assert "empty" in page.locator("#queue-rejected").inner_text()
            assert "nightly-run" in page.locator("#queue-needs_human_review").inner_text()
            sampled = page.locator("#queue-accepted_sample").inner_text()
            assert "pair-0" in sampled and "pair-1" in sampled

            # Logins the cluster does not take, then the reviewer's.
            page.click("#log-in")
            _log_in(page, "reviewer", "not-the-password")
            assert "did not take" in page.locator("#refused").inner_text()
            _log_in(page, "nobody", "not-the-password")  # says no more than a wrong password
            assert "did not take" in page.locator("#refused").inner_text()
            _log_in(page, "agent", _password(topics, Role.AGENT))  # the cluster takes it
            assert "not a reviewer" in page.locator("#refused").inner_text()
            _log_in(page, "reviewer", password)
            page.wait_for_url(f"{url}/review")
            assert page.locator("#reviewer").inner_text() == "reviewer"

            # The rejected session, failed from its queue, with markup in the comment.
            page.click("#queue-rejected a:text('empty')")
            page.check("#review-form input[value=fail]")
            page.fill("#review-form input[name=score]", "0.1")
            page.fill("#review-form input[name=labels]", "empty-reply, Lazy")
            page.fill("#review-form textarea[name=comment]", MARKUP_COMMENT)
            page.click("#review-form button")
            _recorded(page)
            row = page.locator("#human-verdicts tbody tr").first.inner_text()
            assert "fail" in row and "empty-reply, lazy" in row and "rejected" in row, row
            assert MARKUP_COMMENT in row  # shown as text
            assert page.evaluate("window.__pwned") is None
            page.screenshot(path=str(tmp_path / "review-recorded.png"), full_page=True)

            # A subject's session takes no comment: it would be stored in clear.
            page.goto(f"{url}/sessions/subject-carol")
            page.check("#review-form input[value=fail]")
            page.fill("#review-form textarea[name=comment]", "she asked about her rent")
            page.click("#review-form button")
            assert "names a subject" in page.locator("main").inner_text()

            # A bad score is refused with what was wrong; nothing is written.
            page.goto(f"{url}/sessions/nightly-run?queue=needs_human_review")
            page.check("#review-form input[value=pass]")
            page.fill("#review-form input[name=score]", "7")
            page.click("#review-form button")
            assert "score" in page.content() and "less than or equal to 1" in page.content()
            page.goto(f"{url}/sessions/nightly-run?queue=needs_human_review")
            page.check("#review-form input[value=pass]")
            page.click("#review-form button")
            _recorded(page)

            # The two answers of a group compared: the longer one preferred, the other chosen
            # from the group's members the page lists.
            page.goto(f"{url}/sessions/pair-1")
            assert page.locator("#group-link").inner_text() == "adding"
            members = page.locator("#group-members tbody tr")
            assert members.count() == 1 and "pair-0" in members.first.inner_text()
            page.screenshot(path=str(tmp_path / "review-group.png"), full_page=True)
            page.check("#group-members input[value=pair-0]")
            page.check("#prefer-form input[value=this]")
            page.click("#prefer-form button")
            _recorded(page)
            assert "preferred over pair-0" in page.locator("#human-verdicts").inner_text()
            page.goto(f"{url}/review")
            page.screenshot(path=str(tmp_path / "review-queues.png"), full_page=True)
            page.click("form.who button")
            page.wait_for_url(f"{url}/review")
            assert page.locator("#reviewer").count() == 0
            assert not [e for e in w.errors if "Content Security Policy" in e], w.errors
    finally:
        assert console.stop() == 0, console.output()

    # The worker audits the reviewers' chains and commits their heads to signed checkpoints.
    worker = WorkerProcess(topics, tmp_path).start()
    try:
        wait_for(topics, lambda records: _human_heads_committed(records) >= 3, worker=worker)
    finally:
        worker.stop()

    # On the log: the reviewer's records, chained, on the verdicts topic.
    verified = rolltape(topics.env(), "log", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    humans = [
        env
        for env in (decode(r.value) for r in read_all(topics, (Stream.VERDICTS,)))
        if env["stream"] == "verdicts@human"
    ]
    assert sorted((r["session_id"], r["type"], r["seq"]) for r in humans) == [
        ("empty", "human_verdict", 0),
        ("nightly-run", "human_verdict", 0),
        ("pair-1", "human_preference", 0),
    ]
    assert {r["producer"]["principal"] for r in humans} == {"reviewer"}

    # The read model: the reviewed sessions leave the queues, the filter's agreement counted.
    rebuilt = rolltape(env, "index", "rebuild")
    assert rebuilt.returncode == 0, rebuilt.stderr
    console = ConsoleProcess(env, tmp_path / "console-2.log")
    try:
        status, _, body = get(f"{console.url}/review")
        assert status == 200
        assert "nightly-run" not in body and "/sessions/empty?queue=rejected" not in body
        assert "/sessions/subject-carol?queue=rejected" in body  # not reviewed: still waiting
        # The filter rejected what the reviewer failed and accepted what she passed.
        filter_row = re.search(r"<tr><td>filter</td>(.*?)</tr>", body)
        assert filter_row is not None, body
        cells = re.findall(r"<td[^>]*>([^<]*)</td>", filter_row.group(1))
        assert (cells[0], cells[1], cells[3:]) == ("2", "100.0%", ["1", "1", "0", "0"]), cells
        status, _, body = get(f"{console.url}/sessions/empty")
        assert "human:reviewer" in body
        status, _, body = get(f"{console.url}/sessions?reviewed=true")
        listed = set(re.findall(r'href="/sessions/([^"?]+)"', body))
        assert listed == {"empty", "nightly-run"}, listed  # a preference is no verdict
        status, _, body = get(
            f"{console.url}/sessions?judge_version=human&score=human&score_max=0.5"
        )
        assert set(re.findall(r'href="/sessions/([^"?]+)"', body)) == {"empty"}
    finally:
        assert console.stop() == 0, console.output()
    agreement = rolltape(
        env,
        "sessions",
        "sql",
        "SELECT judge, status FROM verdicts WHERE judge_version = 'human' ORDER BY session_id",
    )
    assert agreement.returncode == 0, agreement.stderr
    assert agreement.stdout.count("human:reviewer") == 2
    covered = rolltape(
        env, "sessions", "sql", "SELECT session_id FROM checkpoints WHERE chain = 'verdicts@human'"
    )
    assert covered.returncode == 0, covered.stderr
    assert all(sid in covered.stdout for sid in ("empty", "nightly-run", "pair-1")), covered.stdout

    # The export scores by the reviewers: the preference makes the one DPO pair.
    out = tmp_path / "dpo"
    exported = rolltape(
        env, "dataset", "export", "-f", "dpo", "--score", "human", "--out", str(out)
    )
    assert exported.returncode == 0, exported.stdout + exported.stderr
    rows = [
        json.loads(line) for f in sorted(out.glob("*.jsonl")) for line in f.read_text().splitlines()
    ]
    assert len(rows) == 1, rows
    assert rows[0]["chosen"][-1]["content"] == "Two plus two is four, so 4."
    # Only what the reviewers passed, as ShareGPT: the cron run, not the empty reply.
    passed = tmp_path / "passed"
    exported = rolltape(
        env, "dataset", "export", "-f", "sharegpt", "--reviewers", "passed", "--out", str(passed)
    )
    assert exported.returncode == 0, exported.stdout + exported.stderr
    manifest = json.loads((passed / ".rolltape" / "manifest.json").read_text())
    skipped = manifest["skipped"]
    assert (skipped["not_reviewed"], skipped["not_passed_by_reviewers"]) == (2, 1), manifest
    assert len((passed / "sharegpt-00000.jsonl").read_text().splitlines()) == 1

    # With its evidence: the reviewers' chains are checkpointed, so the pair checks offline.
    proven = tmp_path / "proven"
    exported = rolltape(
        env,
        "dataset",
        "export",
        "-f",
        "dpo",
        "--score",
        "human",
        "--evidence",
        "--out",
        str(proven),
    )
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert [
        json.loads(line) for line in (proven / "dpo-00000.jsonl").read_text().splitlines()
    ] == rows
    public = tmp_path / "judge.pub"
    shown = rolltape(topics.env(), "keys", "export", str(public))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    checked = rolltape(env, "dataset", "verify", str(proven), "--public-key", str(public))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _human_heads_committed(records: list[Any]) -> int:
    """The reviewed sessions whose human chain a signed checkpoint binds with its others."""
    bound = set()
    for r in records:
        env = decode(r.value)
        if env["type"] == "checkpoint":
            for leaf in env["payload"]["leaves"]:
                if leaf.get("stream") == "verdicts@human":
                    bound.add(leaf["session_id"])
    return len(bound)


def _recorded(page: Any) -> None:
    """The page a form led to says the review was recorded (else: what it says instead)."""
    page.wait_for_selector("#recorded, h1")
    assert page.locator("#recorded").count() == 1, page.locator("main").inner_text()


def _log_in(page: object, name: str, password: str) -> None:
    page.fill("#login input[name=name]", name)  # type: ignore[attr-defined]
    page.fill("#login input[name=password]", password)  # type: ignore[attr-defined]
    page.click("#login button")  # type: ignore[attr-defined]


def _forms_refuse_forgery(url: str) -> None:
    """A POST without the browser's CSRF token, with a stale one, or from another origin is
    refused before anything is read or written."""
    form = urllib.parse.urlencode({"verdict": "pass"}).encode()
    status, headers, body = post(f"{url}/sessions/empty/review", form)
    assert status == 403 and "CSRF" in body, (status, body)
    assert headers["Content-Security-Policy"].startswith("default-src 'none'")
    forged = urllib.parse.urlencode({"verdict": "pass", "csrf": "x" * 43}).encode()
    status, _, body = post(
        f"{url}/sessions/empty/review", forged, Cookie=f"rolltape_csrf={'y' * 43}"
    )
    assert status == 403 and "CSRF" in body, (status, body)
    status, _, body = post(
        f"{url}/login",
        forged,
        Cookie=f"rolltape_csrf={'x' * 43}",
        Origin="http://evil.example",
    )
    assert status == 403 and "not this console's" in body, (status, body)
    status, _, body = post(
        f"{url}/login",
        forged,
        Cookie=f"rolltape_csrf={'x' * 43}",
        **{"Sec-Fetch-Site": "same-site"},
    )
    assert status == 403 and "same-site" in body, (status, body)


def test_the_review_commands_show_the_queues_and_agreement_and_record_as_the_reviewer(
    topics: Topics, tmp_path: Path
) -> None:
    env = _judged_and_indexed(topics, tmp_path)

    shown = rolltape(env, "review", "queue", "--json")
    assert shown.returncode == 0, shown.stderr
    queues = json.loads(shown.stdout)["queues"]
    assert queues["needs_human_review"]["sessions"] == ["nightly-run"]
    assert sorted(queues["rejected"]["sessions"]) == ["empty", "subject-carol"]

    refused = rolltape(env, "review", "record", "subject-carol", "fail", "--comment", "her rent")
    assert refused.returncode == 2 and "names a subject" in refused.stderr, refused.stderr
    bad = rolltape(env, "review", "record", "empty", "maybe")
    assert bad.returncode == 2 and "verdict" in bad.stderr, bad.stderr
    missing = rolltape(env, "review", "prefer", "pair-0", "no-such-session")
    assert missing.returncode == 2 and "no session 'no-such-session'" in missing.stderr

    recorded = rolltape(env, "review", "record", "empty", "fail", "--label", "empty-reply")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert "verdicts@human seq 0" in recorded.stdout
    preferred = rolltape(env, "review", "prefer", "pair-1", "pair-0", "--comment", "explains")
    assert preferred.returncode == 0, preferred.stdout + preferred.stderr
    humans = [
        env_
        for env_ in (decode(r.value) for r in read_all(topics, (Stream.VERDICTS,)))
        if env_["stream"] == "verdicts@human"
    ]
    assert sorted((h["session_id"], h["type"], h["producer"]["principal"]) for h in humans) == [
        ("empty", "human_verdict", "reviewer"),
        ("pair-1", "human_preference", "reviewer"),
    ]

    assert rolltape(env, "index", "rebuild").returncode == 0
    agreed = rolltape(env, "review", "agreement", "--json")
    assert agreed.returncode == 0, agreed.stderr
    (row,) = json.loads(agreed.stdout)
    assert (row["judge"], row["both_fail"], row["sessions"]) == ("filter", 1, 1)


def test_a_worker_whose_filter_waits_for_review_decides_each_session_when_a_reviewer_judges_it(
    topics: Topics, tmp_path: Path
) -> None:
    _record(topics, tmp_path / "spool")
    filters = tmp_path / "filters.json"
    filters.write_text(json.dumps({"name": "reviewed", "require_review": True}))
    rewards = {"ROLLTAPE_REWARDS": '["final_reward"]', "ROLLTAPE_FILTERS_FILE": str(filters)}
    worker = WorkerProcess(topics, tmp_path, **rewards).start()
    env = {**topics.env(), "ROLLTAPE_INDEX_URL": f"sqlite:{tmp_path / 'index.sqlite3'}"}

    def decided(records: list[Any]) -> dict[str, dict[str, Any]]:
        return {
            e["session_id"]: e["payload"]
            for e in (decode(r.value) for r in records)
            if e["type"] == "filter_outcome"
        }

    try:
        # Every session ended and was judged. The one its own record rejects (an empty reply)
        # is decided at its end; the others wait for a person.
        judged = ("pair-0", "pair-1", "empty", "nightly-run")
        records = wait_for(
            topics,
            lambda records: all(payloads(records, "verdict", sid) for sid in judged),
            worker=worker,
        )
        early = decided(records)
        assert "empty" in early and not early["empty"]["accepted"], early
        assert not {"pair-0", "pair-1", "nightly-run"} & early.keys(), early
        assert rolltape(env, "index", "rebuild").returncode == 0
        shown = rolltape(env, "review", "queue", "--json")
        assert shown.returncode == 0, shown.stderr
        awaiting = json.loads(shown.stdout)["queues"]["awaiting_review"]["sessions"]
        assert {"pair-0", "pair-1", "nightly-run"} <= set(awaiting) and "empty" not in awaiting
        for sid, verdict in (("pair-0", "pass"), ("pair-1", "fail")):
            done = rolltape(env, "review", "record", sid, verdict)
            assert done.returncode == 0, done.stdout + done.stderr
        records = wait_for(
            topics,
            lambda records: {"pair-0", "pair-1"} <= decided(records).keys(),
            worker=worker,
        )
    finally:
        worker.stop()
    outcomes = decided(records)
    assert "nightly-run" not in outcomes  # still waiting: nobody has looked at it
    assert outcomes["pair-0"]["accepted"] and outcomes["pair-0"]["config"].startswith("reviewed@")
    codes = [r["code"] for r in outcomes["pair-1"]["reasons"]]
    assert not outcomes["pair-1"]["accepted"] and codes == ["reviewer_failed"], codes

    # A replay cannot wait for reviewers: it refuses, and says what to do.
    replay = rolltape({**env, **rewards}, "log", "replay", "--judge-version", "v2")
    assert replay.returncode == 2 and "require_review" in replay.stderr, replay.stderr
