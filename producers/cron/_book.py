"""The job book: the jobs topic folded into jobs, runs and what is due. Pure: no I/O, no clock.

Every key (a job id, a run id) holds its latest revision; a revision at or below the one held is
a redelivery or the scheduler's own write coming back, and is ignored. What is due follows from
the book alone, so two schedulers that read the same records agree, and a scheduler that starts
after missing ticks owes exactly one run per job (the latest missed tick).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from rolltape.producers.cron._schedule import Schedule, parse_schedule
from rolltape.schemas import (
    FINAL_STATUSES,
    CronJob,
    CronRun,
    JobAction,
    JobState,
    RunStatus,
    TypedEvent,
)

_NS = 1_000_000_000


@dataclass(frozen=True)
class Head:
    """A key's latest revision: the next one is `seq + 1` linked to `hash`."""

    seq: int
    hash: str


@dataclass(frozen=True)
class Fire:
    """One attempt to start: a new run for a due tick (attempt 1) or a retry."""

    job: CronJob
    due_ns: int
    attempt: int
    run: CronRun | None = None
    """The run a retry continues."""


@dataclass(frozen=True)
class Expire:
    """A running attempt with no status after the job's timeout: its scheduler stopped."""

    job: CronJob
    run: CronRun


@dataclass
class JobBook:
    """The jobs topic folded: every job and run at its latest revision, and each key's head, to
    which the next write of that key links. Feed it records with `apply` (in any order, twice
    is harmless); `due` and `wake_at` then tell a scheduler what to do and when to look again."""

    jobs: dict[str, CronJob] = field(default_factory=dict)
    runs: dict[str, CronRun] = field(default_factory=dict)
    heads: dict[str, Head] = field(default_factory=dict)
    _schedules: dict[str, Schedule] = field(default_factory=dict)
    _last_due: dict[str, int] = field(default_factory=dict)
    _open: dict[str, set[str]] = field(default_factory=dict)
    """Job id -> its runs that are not final (running or waiting for a retry)."""
    _resumed: dict[str, int] = field(default_factory=dict)
    """Job id -> when it was last resumed: ticks missed while it was paused are not owed."""

    def apply(self, envelope: TypedEvent) -> bool:
        """Fold one record; False when it is not newer than what the key holds."""
        head = self.heads.get(envelope.session_id)
        if head is not None and envelope.seq <= head.seq:
            return False
        payload = envelope.body
        if isinstance(payload, CronJob):
            self._set_job(payload)
            if payload.action == JobAction.RESUMED:
                self._resumed[payload.job_id] = envelope.ts_ns
        elif isinstance(payload, CronRun):
            self._set_run(payload)
        else:
            return False
        self.heads[envelope.session_id] = Head(envelope.seq, envelope.hash)
        return True

    def _set_job(self, job: CronJob) -> None:
        self.jobs[job.job_id] = job
        self._schedules[job.job_id] = parse_schedule(job.schedule, job.timezone)

    def _set_run(self, run: CronRun) -> None:
        self.runs[run.run_id] = run
        self._last_due[run.job_id] = max(self._last_due.get(run.job_id, 0), run.due_ns)
        pending = self._open.setdefault(run.job_id, set())
        if run.status in FINAL_STATUSES:
            pending.discard(run.run_id)
        else:
            pending.add(run.run_id)

    def schedule(self, job_id: str) -> Schedule:
        return self._schedules[job_id]

    def runs_of(self, job_id: str) -> list[CronRun]:
        return sorted((r for r in self.runs.values() if r.job_id == job_id), key=_run_order)

    def last_due(self, job_id: str) -> int | None:
        return self._last_due.get(job_id)

    def _owed_after(self, job: CronJob) -> int:
        """Ticks after this are owed: the job's creation, its last run's tick, its resumption."""
        return max(
            job.anchor_ns,
            self._last_due.get(job.job_id, 0),
            self._resumed.get(job.job_id, 0),
        )

    def next_due(self, job_id: str) -> int:
        job = self.jobs[job_id]
        return self._schedules[job_id].next_due(self._owed_after(job), job.anchor_ns)

    def queue(self, *statuses: RunStatus) -> list[CronRun]:
        """Runs whose latest status is one of `statuses`, oldest due first."""
        return sorted((r for r in self.runs.values() if r.status in statuses), key=_run_order)

    def due(
        self,
        now_ns: int,
        owns: Callable[[str], bool] = lambda _: True,
        busy: Collection[str] = (),
    ) -> list[Fire | Expire]:
        """What the owner of the jobs `owns` accepts must do now, in a stable order.

        A job fires the latest tick in (its last run's tick, now]: never one run per missed
        tick. While one of its runs is open (running, or a retryable failure waiting) no new
        tick fires; the missed ticks collapse into one run when it closes. Runs in `busy`
        (executing in this process) are left to their own timeout.
        """
        actions: list[Fire | Expire] = []
        for job_id in sorted(self.jobs):
            job = self.jobs[job_id]
            if job.state != JobState.ACTIVE or not owns(job_id):
                continue
            pending = [self.runs[r] for r in sorted(self._open.get(job_id, ()))]
            for run in pending:
                if run.run_id not in busy:
                    actions += self._settle_open(job, run, now_ns)
            if pending:
                continue
            tick = self._schedules[job_id].latest_due(self._owed_after(job), now_ns, job.anchor_ns)
            if tick is not None:
                actions.append(Fire(job=job, due_ns=tick, attempt=1))
        return actions

    def _settle_open(self, job: CronJob, run: CronRun, now_ns: int) -> Iterable[Fire | Expire]:
        if run.status == RunStatus.RUNNING:
            if now_ns - run.fired_ns > job.timeout_s * _NS:
                yield Expire(job=job, run=run)
        elif run.retry_at_ns is not None and run.retry_at_ns <= now_ns:
            yield Fire(job=job, due_ns=run.due_ns, attempt=run.attempt + 1, run=run)

    def wake_at(
        self, owns: Callable[[str], bool] = lambda _: True, busy: Collection[str] = ()
    ) -> int | None:
        """The earliest time something owned may become due (for the scheduler's sleep)."""
        times: list[int] = []
        for job_id, job in self.jobs.items():
            if job.state != JobState.ACTIVE or not owns(job_id):
                continue
            pending = [self.runs[r] for r in self._open.get(job_id, ())]
            for run in pending:
                if run.run_id in busy:
                    continue
                if run.status == RunStatus.RUNNING:
                    times.append(run.fired_ns + job.timeout_s * _NS + 1)
                elif run.retry_at_ns is not None:
                    times.append(run.retry_at_ns)
            if not pending:
                times.append(self.next_due(job_id))
        return min(times, default=None)


def _run_order(run: CronRun) -> tuple[int, str]:
    return run.due_ns, run.run_id
