"""The job book and status routing: what is due, missed ticks, retries with backoff, queues,
and the recursion guard."""

from __future__ import annotations

import asyncio
import os
import re
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel

from rolltape.producers.cron import (
    CRON_RUN_ENV,
    CronRecursionError,
    Expire,
    Fire,
    JobBook,
    RunOutcome,
    backoff_s,
    guard_against_recursion,
    open_channel,
    run_id,
    settle,
)
from rolltape.producers.cron._runs import as_outcome, load_runner, mark_cron_run, unmark_cron_run
from rolltape.schemas import (
    GENESIS_HASH,
    CronJob,
    CronRun,
    JobAction,
    JobState,
    RetryPolicy,
    RunStatus,
    read_event,
    seal,
)

_NS = 1_000_000_000
T0 = int(datetime(2026, 11, 25, 9, 0, tzinfo=UTC).timestamp()) * _NS
_PRODUCER = {"name": "test", "version": "0", "principal": "scheduler"}


def _job(**changes: object) -> CronJob:
    fields: dict[str, object] = {
        "job_id": "audit",
        "action": JobAction.CREATED,
        "state": JobState.ACTIVE,
        "schedule": "every 10m",
        "prompt": "audit the repository",
        "anchor_ns": T0,
        "retry": RetryPolicy(max_attempts=3, base_s=30, max_s=100),
        "timeout_s": 600,
    }
    return CronJob.model_validate({**fields, **changes})


class _Writer:
    """Revisions as a scheduler writes them: the next seq of the key, linked to its head."""

    def __init__(self, book: JobBook) -> None:
        self.book = book

    def write(self, key: str, payload: BaseModel, ts_ns: int) -> bool:
        head = self.book.heads.get(key)
        record, _ = seal(
            stream="jobs",
            session_id=key,
            seq=head.seq + 1 if head else 0,
            ts_ns=ts_ns,
            type="cron_job" if isinstance(payload, CronJob) else "cron_run",
            payload=payload.model_dump(mode="json"),
            prev_hash=head.hash if head else GENESIS_HASH,
            producer=_PRODUCER,
        )
        return self.book.apply(read_event(record))


def _running(job: CronJob, due_ns: int, attempt: int = 1) -> CronRun:
    return CronRun(
        job_id=job.job_id,
        run_id=run_id(job.job_id, due_ns),
        due_ns=due_ns,
        attempt=attempt,
        fired_ns=due_ns,
        status=RunStatus.RUNNING,
        session_id=f"cron.{job.job_id}.{attempt}",
        fired_by="here",
    )


def test_due__nothing_before_the_first_tick_then_one_run_for_it() -> None:
    book = JobBook()
    _Writer(book).write("audit", _job(), T0)
    assert book.due(T0 + 599 * _NS) == []
    [fire] = book.due(T0 + 600 * _NS)
    assert isinstance(fire, Fire)
    assert (fire.due_ns, fire.attempt) == (T0 + 600 * _NS, 1)


def test_due__ticks_missed_while_no_scheduler_ran_collapse_into_one_run_of_the_latest() -> None:
    book, writer = JobBook(), None
    writer = _Writer(book)
    job = _job()
    writer.write("audit", job, T0)
    first = T0 + 600 * _NS
    writer.write(run_id("audit", first), _running(job, first), first)
    done = settle(job, _running(job, first), RunOutcome(), first + _NS)
    writer.write(run_id("audit", first), done, first + _NS)
    # Down for five hours: 30 ticks missed, one run owed, for the latest.
    later = first + 5 * 3600 * _NS + 5 * _NS
    [fire] = book.due(later)
    assert isinstance(fire, Fire)
    assert fire.due_ns == first + 30 * 600 * _NS
    writer.write(run_id("audit", fire.due_ns), _running(job, fire.due_ns), later)
    assert book.due(later) == []  # running: no second run


def test_due__a_paused_or_removed_job_never_fires_and_resuming_owes_no_paused_ticks() -> None:
    book = JobBook()
    writer = _Writer(book)
    job = _job()
    writer.write("audit", job, T0)
    writer.write("audit", job.model_copy(update={"state": JobState.PAUSED}), T0 + _NS)
    assert book.due(T0 + 3600 * _NS) == []
    resumed = job.model_copy(update={"action": JobAction.RESUMED, "state": JobState.ACTIVE})
    writer.write("audit", resumed, T0 + 3600 * _NS)
    assert book.due(T0 + 3600 * _NS + 5 * _NS) == []
    [fire] = book.due(T0 + 4200 * _NS)
    assert isinstance(fire, Fire) and fire.due_ns == T0 + 4200 * _NS
    writer.write("audit", job.model_copy(update={"state": JobState.REMOVED}), T0 + 4300 * _NS)
    assert book.due(T0 + 99_000 * _NS) == []


def test_due__only_jobs_the_scheduler_owns() -> None:
    book = JobBook()
    writer = _Writer(book)
    writer.write("audit", _job(), T0)
    writer.write("other", _job(job_id="other"), T0)
    fires = book.due(T0 + 600 * _NS, owns=lambda job_id: job_id == "other")
    assert [f.job.job_id for f in fires] == ["other"]


def test_apply__an_older_or_repeated_revision_is_ignored() -> None:
    book = JobBook()
    job = _job()
    record, _ = seal(
        stream="jobs",
        session_id="audit",
        seq=0,
        ts_ns=T0,
        type="cron_job",
        payload=job.model_dump(mode="json"),
        prev_hash=GENESIS_HASH,
        producer=_PRODUCER,
    )
    assert book.apply(read_event(record))
    assert not book.apply(read_event(record))


def test_settle__retryable_failures_back_off_doubling_up_to_the_cap_then_turn_terminal() -> None:
    job = _job()
    assert [backoff_s(job.retry, n) for n in (1, 2, 3, 4)] == [30.0, 60.0, 100.0, 100.0]
    flaky = RunOutcome(status=RunStatus.RETRYABLE_FAILURE, reason="HTTP 429 from the model")
    first = settle(job, _running(job, T0), flaky, T0 + _NS)
    assert first.status == RunStatus.RETRYABLE_FAILURE
    assert first.retry_at_ns == T0 + _NS + 30 * _NS
    last = settle(job, _running(job, T0, attempt=3), flaky, T0)
    assert last.status == RunStatus.TERMINAL_FAILURE
    assert last.retry_at_ns is None
    assert last.reason == "HTTP 429 from the model (gave up after 3 attempts)"


@pytest.mark.parametrize(
    "status", [RunStatus.SUCCESS, RunStatus.TERMINAL_FAILURE, RunStatus.NEEDS_HUMAN_REVIEW]
)
def test_settle__final_statuses_keep_their_reason_and_never_retry(status: RunStatus) -> None:
    job = _job()
    outcome = RunOutcome(status=status, reason="why")
    settled = settle(job, _running(job, T0), outcome, T0)
    assert (settled.status, settled.reason, settled.retry_at_ns) == (status, "why", None)


def test_due__a_retry_fires_when_its_backoff_ends_with_the_next_attempt_and_the_same_tick() -> None:
    book = JobBook()
    writer = _Writer(book)
    job = _job()
    writer.write("audit", job, T0)
    due = T0 + 600 * _NS
    rid = run_id("audit", due)
    writer.write(rid, _running(job, due), due)
    failed = settle(
        job, _running(job, due), RunOutcome(status=RunStatus.RETRYABLE_FAILURE, reason="x"), due
    )
    writer.write(rid, failed, due)
    assert book.due(due + 29 * _NS) == []
    [retry] = book.due(due + 30 * _NS)
    assert isinstance(retry, Fire)
    assert (retry.due_ns, retry.attempt) == (due, 2)
    assert book.wake_at() == due + 30 * _NS


def test_queues__failures_and_reviews_list_runs_by_their_latest_status() -> None:
    book = JobBook()
    writer = _Writer(book)
    job = _job()
    writer.write("audit", job, T0)
    for n, status in enumerate(
        [RunStatus.TERMINAL_FAILURE, RunStatus.NEEDS_HUMAN_REVIEW, RunStatus.SUCCESS], start=1
    ):
        due = T0 + n * 600 * _NS
        writer.write(run_id("audit", due), _running(job, due), due)
        outcome = RunOutcome(status=status, reason=f"reason {n}")
        writer.write(run_id("audit", due), settle(job, _running(job, due), outcome, due), due)
    assert [r.reason for r in book.queue(RunStatus.TERMINAL_FAILURE)] == ["reason 1"]
    assert [r.reason for r in book.queue(RunStatus.NEEDS_HUMAN_REVIEW)] == ["reason 2"]


def test_due__an_attempt_with_no_status_past_the_timeout_expires() -> None:
    book = JobBook()
    writer = _Writer(book)
    job = _job()
    writer.write("audit", job, T0)
    due = T0 + 600 * _NS
    writer.write(run_id("audit", due), _running(job, due), due)
    assert book.due(due + 600 * _NS) == []
    [expire] = book.due(due + 601 * _NS)
    assert isinstance(expire, Expire) and expire.run.run_id == run_id("audit", due)


def test_guard__a_cron_run_cannot_create_jobs_in_process_or_in_a_subprocess(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    guard_against_recursion("create a cron job")  # outside a run: allowed
    token = mark_cron_run("audit@20261125T090000Z")
    try:
        with pytest.raises(CronRecursionError, match="inside cron run audit@20261125T090000Z"):
            guard_against_recursion("create a cron job")

        async def in_a_task() -> None:
            guard_against_recursion("create a cron job")

        with pytest.raises(CronRecursionError):
            asyncio.run(in_a_task())
    finally:
        unmark_cron_run(token)
    monkeypatch.setenv(CRON_RUN_ENV, "audit@20261125T090000Z")
    with pytest.raises(CronRecursionError, match="recursion guard"):
        guard_against_recursion("create a cron job")
    assert os.environ[CRON_RUN_ENV]


def test_runner_results__none_is_success_text_is_output_and_anything_else_is_refused() -> None:
    assert as_outcome(None) == RunOutcome()
    assert as_outcome("done") == RunOutcome(output="done")
    with pytest.raises(TypeError, match="not int"):
        as_outcome(3)


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("no_colon", "must be 'package.module:function'"),
        ("no.such.module:run", "cannot import 'no.such.module'"),
        ("json:nothing_here", "json has no function 'nothing_here'"),
        ("shutil:copyfile", "must take one argument"),
    ],
)
def test_load_runner__a_bad_spec_says_what_is_wrong(spec: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        load_runner(spec)


def test_open_channel__unknown_schemes_list_the_known_ones() -> None:
    with pytest.raises(ValueError, match=re.escape("use one of file:..., webhook:...")):
        open_channel("wecom:team")
    with pytest.raises(ValueError, match="http"):
        open_channel("webhook:ftp://x")
