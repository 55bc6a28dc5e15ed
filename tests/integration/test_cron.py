"""Cron on a real broker: one fire per due tick with two schedulers, one run for ticks missed
while no scheduler ran, statuses routed to their queues with reasons, delivery, and the
recursion guard."""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from aiokafka.partitioner import DefaultPartitioner

from rolltape.infra import open_recorder
from rolltape.infra.commands.cron import cron_jobs, open_scheduler
from rolltape.infra.kafka.readback import read_records
from rolltape.producers.cron import JobBook, JobSpec, run_id
from rolltape.schemas import CronRun, RetryPolicy, RunStatus, Stream, read_event
from rolltape.schemas.clients import ModelEndpoint
from tests.integration.conftest import Topics
from tests.support.cli import rolltape
from tests.support.openai_server import Completion, OpenAICompatibleServer, Reply
from tests.support.waiting import wait_until, wait_until_async

CLI = [sys.executable, "-m", "rolltape.infra"]
ROOT = Path(__file__).resolve().parents[2]
_NS = 1_000_000_000


def _cli(topics: Topics, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "cron", *args],
        env={**topics.env(), "COLUMNS": "200"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _add(topics: Topics, *specs: JobSpec) -> JobBook:
    async def main() -> JobBook:
        async with cron_jobs(topics.settings) as jobs:
            for spec in specs:
                await jobs.add(spec)
            return jobs.book

    return asyncio.run(main())


def _book(topics: Topics) -> JobBook:
    async def main() -> JobBook:
        async with cron_jobs(topics.settings) as jobs:
            return jobs.book

    return asyncio.run(main())


def _run_revisions(topics: Topics) -> list[CronRun]:
    """Every run revision the topic holds, in log order per partition (no compaction yet)."""

    async def main() -> list[CronRun]:
        out = []
        async for record in read_records(topics.reader, [Stream.JOBS], prefix=topics.prefix):
            envelope = read_event(record.value)
            if envelope.type == "cron_run":
                out.append(CronRun.model_validate(envelope.payload))
        return out

    return asyncio.run(main())


def _ids_on_every_partition(partitions: int, per_partition: int) -> list[str]:
    """Job ids that land `per_partition` on each partition (the default partitioner's murmur2)."""
    partitioner = DefaultPartitioner()
    ids: dict[int, list[str]] = {p: [] for p in range(partitions)}
    n = 0
    while any(len(v) < per_partition for v in ids.values()):
        job_id = f"job-{n}"
        p = partitioner(job_id.encode(), list(range(partitions)), list(range(partitions)))
        if len(ids[p]) < per_partition:
            ids[p].append(job_id)
        n += 1
    return sorted(i for v in ids.values() for i in v)


class _Scheduler:
    """`rolltape serve cron` as a user starts it, in the repository root."""

    def __init__(self, topics: Topics, log: Path) -> None:
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            [*CLI, "serve", "cron"],
            env={**topics.env(), "COLUMNS": "200"},
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.path = log

    def exited(self) -> str | None:
        code = self.proc.poll()
        return None if code is None else f"a scheduler exited with {code}:\n{self.path.read_text()}"

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        try:
            assert self.proc.wait(60) == 0
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self._log.close()
        return self.path.read_text()


def test_two_schedulers__fire_every_due_tick_exactly_once_and_share_the_jobs(
    topics: Topics, tmp_path: Path
) -> None:
    job_ids = _ids_on_every_partition(topics.settings.partitions, 2)
    _add(
        topics,
        *(
            JobSpec(
                job_id=job_id,
                schedule="every 1s",
                prompt=f"report for {job_id}",
                runner="tests.integration.cron_runners:answer",
            )
            for job_id in job_ids
        ),
    )

    def fires(done: Callable[[list[CronRun]], bool], what: str) -> list[CronRun]:
        return wait_until(
            lambda: [r for r in _run_revisions(topics) if r.status == RunStatus.RUNNING],
            done,
            what=what,
            every_s=0.5,
            abort=lambda: first.exited() or (second.exited() if second else None),
            describe=lambda fired: repr(
                sorted(Counter((r.job_id, r.fired_by) for r in fired).items())
            ),
        )

    second: _Scheduler | None = None
    first = _Scheduler(topics, tmp_path / "a.log")
    fires(lambda fired: {r.job_id for r in fired} == set(job_ids), "the first to fire every job")
    second = _Scheduler(topics, tmp_path / "b.log")  # joins: the partitions are shared out
    fired = fires(lambda fired: len({r.fired_by for r in fired}) == 2, "the second to fire too")
    before = Counter(r.job_id for r in fired)

    def twice_more(fired: list[CronRun]) -> bool:
        now = Counter(r.job_id for r in fired)
        return all(now[job] >= before[job] + 2 for job in job_ids)

    fires(twice_more, "every job to fire twice more once both schedulers fire")
    logs = [first.stop(), second.stop()]

    revisions = _run_revisions(topics)
    fired = [r for r in revisions if r.status == RunStatus.RUNNING]
    claims = Counter((r.run_id, r.attempt) for r in fired)
    assert claims and max(claims.values()) == 1, [k for k, n in claims.items() if n > 1]
    sessions = Counter(r.session_id for r in fired)
    assert max(sessions.values()) == 1
    assert {r.job_id for r in fired} == set(job_ids)
    # Both fired, each only jobs it owned at the time: no tick of a job twice. (A handover may
    # collapse ticks into one late run, as a missed schedule does; how many depends on how fast
    # the group moves the partitions, which is not this test's to bound.)
    assert len({r.fired_by for r in fired}) == 2, logs
    # The first read every partition from the start once; those the rebalance gave it back it
    # read on from where it stood (and still fired no tick twice: the claims above).
    owns = [line for line in logs[0].splitlines() if "owns partitions" in line]
    assert "read on from where it stood: none" in owns[0], owns
    assert any("read from the start: none" in line for line in owns[1:]), owns
    book = _book(topics)
    for job_id in job_ids:
        ticks = sorted(r.due_ns for r in book.runs_of(job_id))
        gaps = {(b - a) // _NS for a, b in itertools.pairwise(ticks)}
        # Collapsed after a handover, never repeated.
        assert min(gaps, default=1) >= 1, (job_id, gaps)
        assert all(r.status == RunStatus.SUCCESS for r in book.runs_of(job_id)[:-1])
    started: Counter[str] = Counter()
    for chain in topics.verify().reports():
        if chain.session_id.startswith("cron."):
            assert not chain.breaks, chain
            started[chain.session_id] += 1
    finished = {r.session_id for r in book.runs.values() if r.status == RunStatus.SUCCESS}
    assert finished <= set(started)


def _shifted_clock(shift: list[int]) -> Callable[[], int]:
    return lambda: time.time_ns() + shift[0]


def _run_scheduler(
    topics: Topics, clock: Callable[[], int], until: Callable[[JobBook], bool]
) -> JobBook:
    """A scheduler in this process until `until(book)` holds, and then until it has looked at
    what is due twice more: room for a wrong second fire, which the book then shows."""

    async def main() -> JobBook:
        recorder = open_recorder(topics.settings)
        scheduler = open_scheduler(topics.settings, recorder=recorder, clock=clock)
        looks = _count_looks(scheduler.book)
        stop = asyncio.Event()
        task = asyncio.create_task(scheduler.run(stop))

        def stopped() -> str | None:
            if not task.done():
                return None
            return "the scheduler was cancelled" if task.cancelled() else repr(task.exception())

        try:
            await wait_until_async(
                lambda: scheduler.book,
                until,
                what="the runs the test waits for",
                abort=stopped,
                describe=lambda book: repr({k: str(r.status) for k, r in book.runs.items()}),
            )
            seen = looks[0]
            await wait_until_async(
                lambda: looks[0],
                lambda n: n >= seen + 2,  # the look under way may predate the last status
                what="the scheduler to look at what is due twice more",
                abort=stopped,
            )
        finally:
            stop.set()
            await task
            await recorder.aclose()
        return scheduler.book

    return asyncio.run(main())


def _count_looks(book: JobBook) -> list[int]:
    """Counts the scheduler's passes over what is due (each calls `book.due` once)."""
    looks = [0]
    due = book.due

    def counted(*args: Any, **kwargs: Any) -> Any:
        looks[0] += 1
        return due(*args, **kwargs)

    book.due = counted  # type: ignore[method-assign]
    return looks


def test_restarted_scheduler__owes_one_run_for_the_ticks_it_missed(topics: Topics) -> None:
    [job_id] = _ids_on_every_partition(1, 1)
    _add(
        topics,
        JobSpec(
            job_id=job_id,
            schedule="every 1h",
            prompt="hourly digest",
            runner="tests.integration.cron_runners:answer",
        ),
    )
    anchor = _book(topics).jobs[job_id].anchor_ns
    shift = [3600 * _NS + _NS]  # just after the first tick
    book = _run_scheduler(topics, _shifted_clock(shift), lambda b: len(b.runs) >= 1)
    assert [r.due_ns for r in book.runs_of(job_id)] == [anchor + 3600 * _NS]
    # The scheduler is down for five ticks; restarted, it owes one run: the latest tick.
    shift[0] = 6 * 3600 * _NS + 30 * 60 * _NS
    book = _run_scheduler(
        topics,
        _shifted_clock(shift),
        lambda b: sum(r.status == RunStatus.SUCCESS for r in b.runs.values()) >= 2,
    )
    runs = book.runs_of(job_id)
    assert [r.due_ns for r in runs] == [anchor + 3600 * _NS, anchor + 6 * 3600 * _NS]
    assert [r.status for r in runs] == [RunStatus.SUCCESS, RunStatus.SUCCESS]


class _Hook(BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, object]]] = []
    status = 200

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.received.append(json.loads(body))
        self.send_response(_Hook.status)
        self.end_headers()
        self.wfile.write(b"quota exceeded" if _Hook.status != 200 else b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Hook.received = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()


def test_statuses__failures_and_reviews_land_in_their_queues_with_reasons_and_are_delivered(
    topics: Topics, tmp_path: Path, webhook: str
) -> None:
    delivered = tmp_path / "out" / "runs.jsonl"
    fast_retry = RetryPolicy(max_attempts=3, base_s=0.2, max_s=0.3)
    _add(
        topics,
        JobSpec(
            job_id="ok",
            schedule="every 2s",
            prompt="ok",
            runner="tests.integration.cron_runners:answer",
            deliver=f"file:{delivered}",
        ),
        JobSpec(
            job_id="flaky",
            schedule="every 1h",
            prompt="flaky",
            retry=fast_retry,
            runner="tests.integration.cron_runners:flaky",
        ),
        JobSpec(
            job_id="expired",
            schedule="every 1h",
            prompt="expired",
            runner="tests.integration.cron_runners:credentials_expired",
        ),
        JobSpec(
            job_id="review",
            schedule="every 1h",
            prompt="review",
            runner="tests.integration.cron_runners:wants_review",
            deliver=webhook,
        ),
        JobSpec(
            job_id="guard",
            schedule="every 1h",
            prompt="guard",
            deliver=f"file:{delivered}",
            runner="tests.integration.cron_runners:schedules_more",
        ),
    )
    _Hook.status = 500
    shift = [3600 * _NS + _NS]
    _run_scheduler(
        topics,
        _shifted_clock(shift),
        lambda b: (
            sum(
                r.status
                in (RunStatus.SUCCESS, RunStatus.TERMINAL_FAILURE, RunStatus.NEEDS_HUMAN_REVIEW)
                for r in b.runs.values()
            )
            >= 5
        ),
    )
    failures = [json.loads(line) for line in _cli(topics, "failures", "--json").stdout.splitlines()]
    by_job = {f["job_id"]: f for f in failures}
    assert by_job["flaky"]["status"] == "terminal_failure"
    assert by_job["flaky"]["attempt"] == 3
    assert by_job["flaky"]["reason"] == (
        "ConnectionError: HTTP 429 from the model: rate limited (gave up after 3 attempts)"
    )
    assert by_job["expired"]["reason"] == "API key expired"
    assert by_job["review"]["delivery"].startswith("failed: ")
    assert "HTTP 500: quota exceeded" in by_job["review"]["delivery"]
    reviews = [json.loads(line) for line in _cli(topics, "review", "--json").stdout.splitlines()]
    assert [(r["job_id"], r["reason"]) for r in reviews] == [
        ("review", "two open PRs edit the same file")
    ]
    assert [h["status"] for h in _Hook.received] == ["needs_human_review"]
    lines = [json.loads(line) for line in delivered.read_text().splitlines()]
    by_job_line = {line["job_id"]: line for line in lines}
    assert by_job_line["ok"]["output"].startswith("answer for ok@")
    # The recursion guard: the run's subprocess could not create a job.
    guard = by_job_line["guard"]["output"]
    assert guard.startswith("exit 2:") and "recursion guard" in guard, guard
    assert set(_book(topics).jobs) == {"ok", "flaky", "expired", "review", "guard"}
    # Each attempt was a fresh session, tagged with its job and run.
    flaky_runs = [
        r for r in _run_revisions(topics) if r.job_id == "flaky" and r.status == "running"
    ]
    assert [r.session_id.rsplit(".", 1)[1] for r in flaky_runs] == ["1", "2", "3"]
    listing = _cli(topics, "list")
    assert "flaky" in listing.stdout and "terminal_failure" in listing.stdout


def test_cli__add_refuses_a_bad_schedule_and_lists_what_is_accepted(topics: Topics) -> None:
    done = _cli(topics, "add", "--schedule", "every other tuesday", "--task", "x")
    assert done.returncode == 2
    assert "cannot read schedule 'every other tuesday'" in done.stderr
    assert "every 6h" in done.stderr and "daily at 09:00" in done.stderr
    added = _cli(
        topics,
        "add",
        "--schedule",
        "daily at 09:00",
        "--task",
        "Summarise CI",
        "--id",
        "ci",
        "--runner",
        "tests.integration.cron_runners:answer",
    )
    assert added.returncode == 0, added.stderr
    assert "added job ci: cron '0 9 * * *' (UTC); next run" in added.stdout
    assert _cli(topics, "pause", "ci").returncode == 0
    assert "paused" in _cli(topics, "list").stdout
    missing = _cli(topics, "pause", "nope")
    assert missing.returncode == 2 and "no job 'nope' (jobs: ci)" in missing.stderr
    run = run_id("ci", 0)
    assert run == "ci@19700101T000000Z"


def test_default_runner__the_reference_agent_does_the_job_in_its_workdir(
    topics: Topics, tmp_path: Path
) -> None:
    work = tmp_path / "repo"
    work.mkdir()
    (work / "TODO.md").write_text("- ship the release notes\n")

    def agent(body: dict[str, object]) -> Reply:
        messages = body["messages"]
        assert isinstance(messages, list)
        if not any(m["role"] == "tool" for m in messages):
            return Completion(tool_calls=[("c1", "read_file", json.dumps({"path": "TODO.md"}))])
        return Completion(content="One open item: ship the release notes.")

    delivered = tmp_path / "digest.jsonl"
    with OpenAICompatibleServer(agent) as server:
        models = {"agent": ModelEndpoint(base_url=server.base_url, model="local")}
        settings = topics.settings.model_copy(update={"models": models})
        _add(
            topics,
            JobSpec(
                job_id="digest",
                schedule="every 1h",
                prompt="Summarise TODO.md",
                skills=("files",),
                workdir=str(work),
                deliver=f"file:{delivered}",
            ),
            JobSpec(job_id="nomodel", schedule="every 1h", prompt="x", model="missing"),
        )
        shift = [3600 * _NS + _NS]
        book = _run_scheduler(
            Topics(topics.prefix, settings),
            _shifted_clock(shift),
            lambda b: sum(r.status != RunStatus.RUNNING for r in b.runs.values()) >= 2,
        )
    [digest] = book.runs_of("digest")
    assert digest.status == RunStatus.SUCCESS, digest.reason
    assert json.loads(delivered.read_text())["output"] == "One open item: ship the release notes."
    [nomodel] = book.runs_of("nomodel")
    assert nomodel.status == RunStatus.TERMINAL_FAILURE
    assert "no endpoint is bound to model 'missing' (bound: agent)" in (nomodel.reason or "")
    chain = [r for r in topics.verify(digest.session_id).reports() if r.stream == "events"]
    assert chain and not chain[0].breaks and chain[0].ended


def test_to_env__a_jobs_good_runs_become_items_an_environment_runs(
    topics: Topics, tmp_path: Path
) -> None:
    _add(
        topics,
        JobSpec(
            job_id="prs",
            schedule="every 1h",
            prompt="List the open PRs",
            skills=("files",),
            runner="tests.integration.cron_runners:scored",
        ),
    )
    shift = [3600 * _NS + _NS]
    moved: list[bool] = []

    def two_runs(book: JobBook) -> bool:
        first_done = (
            len(book.runs) == 1 and next(iter(book.runs.values())).status == RunStatus.SUCCESS
        )
        if first_done and not moved:  # once: asked again before the next run shows, the clock
            moved.append(True)  # must not jump a second hour (that made a third run due)
            shift[0] += 3600 * _NS  # the next tick comes due
        return sum(r.status == RunStatus.SUCCESS for r in book.runs.values()) >= 2

    _run_scheduler(topics, _shifted_clock(shift), two_runs)
    items = tmp_path / "items.jsonl"
    done = _cli(topics, "to-env", "prs", "--min-reward", "0.5", "-o", str(items))
    assert done.returncode == 0, done.stderr
    assert "wrote 1 item(s)" in done.stdout and "below_min_reward 1" in done.stdout
    [item] = [json.loads(line) for line in items.read_text().splitlines()]
    assert item["data"]["prompt"] == "List the open PRs"
    assert item["data"]["reference"] == "The open PRs are 12 and 14 (run 1)"
    assert item["data"]["source"]["score"] == 0.9 and item["data"]["skills"] == ["files"]
    # Without a read model the whole log was read, and said; with one, only the runs' sessions
    # are, and the items are the same bytes.
    assert "reading the whole log, not the read model: no read model at" in done.stderr
    store = f"sqlite:{tmp_path / 'index.sqlite3'}"
    indexed = {**topics.env(), "ROLLTAPE_INDEX_URL": store, "COLUMNS": "200"}
    assert rolltape(indexed, "index", "rebuild").returncode == 0
    located = rolltape(indexed, "cron", "to-env", "prs", "--min-reward", "0.5", "-o", f"{items}.2")
    assert located.returncode == 0 and "reading the whole log" not in located.stderr
    assert located.stdout == done.stdout.replace(str(items), f"{items}.2")
    assert Path(f"{items}.2").read_bytes() == items.read_bytes()

    def model(body: dict[str, object]) -> Reply:
        return Completion(content="Open PRs: 12 and 14.")

    with OpenAICompatibleServer(model) as server:
        models = {"agent": ModelEndpoint(base_url=server.base_url, model="local").to_config()}
        evaluated = subprocess.run(
            [*CLI, "env", "evaluate", f"jsonl:{items}", "--split", "train"],
            env={**topics.env(), "ROLLTAPE_MODELS": json.dumps(models), "COLUMNS": "200"},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert evaluated.returncode == 0, evaluated.stderr
    assert "1 items, 1 scored" in evaluated.stdout and "passed 1 (100%)" in evaluated.stdout
