"""Cron wired to settings: the scheduler's connection and principal, the agent's recorder;
the jobs `rolltape cron` adds, changes and lists, and the scheduler `rolltape serve cron` runs."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from rolltape.infra import open_recorder
from rolltape.infra.broker import require_connection, scheduler_group
from rolltape.infra.commands.export import collect_narrowed
from rolltape.infra.settings import Settings
from rolltape.producers import Recorder
from rolltape.producers.agent import DEFAULT_MODEL
from rolltape.producers.cron import (
    CRON_RUN_ENV,
    CronJobs,
    JobBook,
    JobError,
    JobSpec,
    Owned,
    Runner,
    Scheduler,
    agent_runner,
    guard_against_recursion,
)
from rolltape.producers.environments import Item
from rolltape.projections import Narrowing, fold
from rolltape.schemas import (
    FINAL_STATUSES,
    LIVE_JUDGE_VERSION,
    CronJob,
    CronRun,
    JobState,
    RetryPolicy,
    Role,
    RunStatus,
)

__all__ = [
    "DEFAULT_MODEL",
    "CronJob",
    "CronRun",
    "JobBook",
    "JobLine",
    "JobSpec",
    "RetryPolicy",
    "RunStatus",
    "ToEnvReport",
    "ValidationError",
    "add_job",
    "change_job",
    "cron_items",
    "cron_jobs",
    "failure_queue",
    "guard_against_recursion",
    "job_book",
    "job_lines",
    "job_runs",
    "open_scheduler",
    "review_queue",
    "serve_scheduler",
]


def cron_jobs(settings: Settings) -> CronJobs:
    """Job administration as the scheduler principal (`async with cron_jobs(s) as jobs:`)."""
    connection = require_connection(settings, Role.SCHEDULER)
    return CronJobs(
        connection, prefix=settings.topic_prefix, principal=_principal(settings, Role.SCHEDULER)
    )


def job_book(settings: Settings) -> JobBook:
    """The jobs and their runs as the jobs topic holds them now."""

    async def main() -> JobBook:
        async with cron_jobs(settings) as jobs:
            return jobs.book

    return asyncio.run(main())


def add_job(settings: Settings, spec: JobSpec) -> tuple[CronJob, JobBook]:
    """Create the job `spec` describes: the job as recorded, and the book with it."""

    async def main() -> tuple[CronJob, JobBook]:
        async with cron_jobs(settings) as jobs:
            return await jobs.add(spec), jobs.book

    return asyncio.run(main())


def change_job(
    settings: Settings, action: Literal["pause", "resume", "remove"], job_id: str
) -> CronJob:
    """Pause, resume or remove a job: the job as it is after."""

    async def main() -> CronJob:
        async with cron_jobs(settings) as jobs:
            method = {"pause": jobs.pause, "resume": jobs.resume, "remove": jobs.remove}[action]
            return await method(job_id)

    return asyncio.run(main())


@dataclass(frozen=True)
class JobLine:
    """A job as `rolltape cron list` shows it: its next run (None unless it is active) and its
    last run (None before the first)."""

    job: CronJob
    next_due_ns: int | None
    last: CronRun | None


def job_lines(book: JobBook, *, removed: bool = False) -> list[JobLine]:
    """Every job of `book` by id (the removed ones too with `removed`)."""
    jobs = sorted(
        (j for j in book.jobs.values() if removed or j.state != JobState.REMOVED),
        key=lambda j: j.job_id,
    )
    return [
        JobLine(
            job=job,
            next_due_ns=book.next_due(job.job_id) if job.state == JobState.ACTIVE else None,
            last=runs[-1] if (runs := book.runs_of(job.job_id)) else None,
        )
        for job in jobs
    ]


def job_runs(book: JobBook, job_id: str) -> list[CronRun]:
    """A job's runs, oldest first (JobError when there is no such job)."""
    if job_id not in book.jobs:
        raise JobError(f"no job {job_id!r}; see `rolltape cron list`")
    return book.runs_of(job_id)


def failure_queue(book: JobBook, job_id: str | None = None) -> list[CronRun]:
    """Runs that failed for good, runs waiting for a retry and runs whose delivery failed (of
    `job_id` only, when given), by due time."""
    queue = [
        r
        for r in book.runs.values()
        if r.status in (RunStatus.TERMINAL_FAILURE, RunStatus.RETRYABLE_FAILURE)
        or (r.delivery or "").startswith("failed")
    ]
    return sorted(
        (r for r in queue if job_id is None or r.job_id == job_id), key=lambda r: r.due_ns
    )


def review_queue(book: JobBook, job_id: str | None = None) -> list[CronRun]:
    """Runs whose runner said a person must look (of `job_id` only, when given)."""
    return [
        r for r in book.queue(RunStatus.NEEDS_HUMAN_REVIEW) if job_id is None or r.job_id == job_id
    ]


def serve_scheduler(
    settings: Settings,
    *,
    max_concurrent: int,
    max_iterations: int,
    on_write: Callable[[CronRun], None],
    on_owned: Callable[[Owned], None] | None = None,
) -> Scheduler:
    """The scheduler of `rolltape serve cron`: jobs that name no runner run the reference agent
    with at most `max_iterations` model calls. Nothing started from this process may create
    jobs (CRON_RUN_ENV is set)."""
    os.environ[CRON_RUN_ENV] = "scheduler"
    return open_scheduler(
        settings,
        default_runner=agent_runner(settings.models, max_iterations=max_iterations),
        max_concurrent=max_concurrent,
        on_write=on_write,
        on_owned=on_owned,
    )


def open_scheduler(
    settings: Settings,
    *,
    recorder: Recorder | None = None,
    default_runner: Runner | None = None,
    **options: Any,
) -> Scheduler:
    """A scheduler in the prefix's scheduler group; its runs record as the agent principal.
    Jobs that name no runner run the reference agent (`rolltape.producers.agent`) with the
    endpoints of ROLLTAPE_MODELS."""
    connection = require_connection(settings, Role.SCHEDULER)
    return Scheduler(
        connection,
        recorder or open_recorder(settings),
        prefix=settings.topic_prefix,
        group_id=scheduler_group(settings.topic_prefix),
        principal=_principal(settings, Role.SCHEDULER),
        default_runner=default_runner or agent_runner(settings.models),
        **options,
    )


def _principal(settings: Settings, role: Role) -> str:
    """The envelope's principal on an unauthenticated cluster (else the SASL user wins)."""
    return settings.principal if settings.principal != "anonymous" else role.value


class ToEnvReport(BaseModel):
    """What `cron to-env` turns a job's runs into: the items, and how many runs were left out
    by reason (still_open, not_successful, no_session, no_score, below_min_reward), so no run
    goes missing silently."""

    items: list[Item]
    skipped: dict[str, int]


async def cron_items(
    settings: Settings,
    job_id: str,
    *,
    min_reward: float | None,
    include_failures: bool,
    score: str = "reward",
    say: Callable[[str], None] | None = None,
) -> ToEnvReport:
    """A job's runs as environment items (`rolltape cron to-env`): each successful run (and,
    with `include_failures`, each failed one) whose session scores at least `min_reward`, with
    the job's prompt, skills and workdir, the answer a successful run gave as the reference, and
    where it came from."""
    async with cron_jobs(settings) as admin:
        book = admin.book
    job = book.jobs.get(job_id)
    if job is None:
        raise JobError(f"no job {job_id!r}; see `rolltape cron list`")
    runs = book.runs_of(job_id)
    if not runs:
        return ToEnvReport(items=[], skipped={})
    # Only the runs' sessions are read (where the read model says they lie; `say` is told when
    # the whole log is read instead).
    asked = tuple(sorted({run.session_id for run in runs}))
    with await collect_narrowed(
        settings, LIVE_JUDGE_VERSION, Narrowing(sessions=asked), say=say
    ) as collected:
        items: list[Item] = []
        skipped: Counter[str] = Counter()
        for run in runs:
            if run.status not in FINAL_STATUSES:
                skipped["still_open"] += 1
                continue
            success = run.status == RunStatus.SUCCESS
            if not success and not include_failures:
                skipped["not_successful"] += 1
                continue
            recorded = collected.session(run.session_id)
            if recorded is None or not recorded.events:
                skipped["no_session"] += 1
                continue
            session, access = collected.opened(recorded)
            if session is None:
                skipped[access.replace(" ", "_")] += 1  # erased, key_unavailable
                continue
            trajectory = fold(session.events, session.derived)
            reward = trajectory.score(score)
            if min_reward is not None and reward is None:
                skipped["no_score"] += 1
                continue
            if min_reward is not None and reward is not None and reward < min_reward:
                skipped["below_min_reward"] += 1
                continue
            answers = [
                m.content for m in trajectory.messages if m.role == "assistant" and m.content
            ]
            items.append(
                Item(
                    item_id=run.run_id.replace("@", "-").lower()[:64],
                    split="train",
                    data={
                        "prompt": job.prompt,
                        "skills": list(job.skills),
                        "workdir": job.workdir,
                        "reference": answers[-1] if success and answers else None,
                        "source": {
                            "job_id": job_id,
                            "run_id": run.run_id,
                            "session_id": run.session_id,
                            "status": run.status.value,
                            "reason": run.reason,
                            "score": reward,
                        },
                    },
                )
            )
    return ToEnvReport(items=items, skipped=dict(sorted(skipped.items())))
