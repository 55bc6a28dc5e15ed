"""Cron jobs and their runs, as records of the jobs topic.

The jobs topic is compacted and keyed by record: a job's key is its id, a run's key is its run
id (`<job id>@<tick>`), and both are written to the job's partition, so the scheduler that owns
a partition sees a job with all its runs in order. Every record is an envelope on the `jobs`
stream whose `seq` is the key's revision and whose `prev_hash` is the previous revision's hash:
compaction keeps each key's latest revision, which carries the whole state (a job's definition,
a run's status), so the job list and the failure and review queues are a projection of what the
topic holds at any time. The runs' own histories (what the agent did) are sessions on the events
topic, which is never compacted.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

#: Job ids are Kafka keys and part of run and session ids: lower-case, no `@`.
JOB_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
#: Run ids are `<job id>@<tick>`, the tick the run was due at (UTC, `YYYYMMDDTHHMMSSZ`).
RUN_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}@[0-9]{8}T[0-9]{6}Z$"


class JobAction(StrEnum):
    """What a job record changed."""

    CREATED = "created"
    UPDATED = "updated"
    PAUSED = "paused"
    RESUMED = "resumed"
    REMOVED = "removed"


class JobState(StrEnum):
    """Whether the scheduler fires a job: a paused job keeps its runs, a removed one is gone."""

    ACTIVE = "active"
    PAUSED = "paused"
    REMOVED = "removed"


class RetryPolicy(BaseModel):
    """Bounded exponential backoff: attempt n (from 1) waits `min(base_s * 2**(n-1), max_s)`
    before attempt n+1; a run whose last allowed attempt failed is a terminal failure."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(default=3, ge=1, le=100)
    base_s: float = Field(default=60.0, gt=0)
    max_s: float = Field(default=3600.0, gt=0)


class JobDefinition(BaseModel):
    """What a person defines about a job: what `rolltape cron add` asks for and every
    revision of the job carries. Written once, here, so a default (the timezone, the retry
    policy, the timeout) cannot differ between the request and the record."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schedule: str
    """As the user wrote it (`every 6h`, `daily at 09:00`, `*/5 * * * *`)."""
    timezone: str = "UTC"
    """IANA zone the schedule's clock times are read in (DST applies)."""
    prompt: str
    skills: tuple[str, ...] = ()
    workdir: str | None = None
    deliver: str | None = None
    """Where a run's result goes: `file:PATH`, `webhook:URL` or a registered channel."""
    runner: str | None = None
    """`module:function` that runs the job; None for the reference agent runner."""
    model: str | None = None
    """Logical model name the reference runner asks (settings bind it to an endpoint)."""
    retry: RetryPolicy = RetryPolicy()
    timeout_s: int = Field(default=3600, ge=1)
    """An attempt with no status this long after it fired failed (retryable): its runner hung
    or its scheduler stopped."""


class CronJob(JobDefinition):
    """Payload of a `cron_job` record: a job's whole definition after one change."""

    job_id: str = Field(pattern=JOB_ID_PATTERN)
    action: JobAction
    state: JobState
    anchor_ns: int
    """When the job was created: interval schedules tick at `anchor + k * interval`, and no
    tick before it is ever due."""


class RunStatus(StrEnum):
    """Where a run stands. `running` is written when the run fires; the others end an attempt."""

    RUNNING = "running"
    SUCCESS = "success"
    RETRYABLE_FAILURE = "retryable_failure"
    TERMINAL_FAILURE = "terminal_failure"
    NEEDS_HUMAN_REVIEW = "needs_human_review"


#: Statuses that end a run for good (a retryable failure with attempts left waits for a retry).
FINAL_STATUSES = frozenset(
    {RunStatus.SUCCESS, RunStatus.TERMINAL_FAILURE, RunStatus.NEEDS_HUMAN_REVIEW}
)


class CronRun(BaseModel):
    """Payload of a `cron_run` record: one run's state after an attempt fired or ended."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str = Field(pattern=JOB_ID_PATTERN)
    run_id: str = Field(pattern=RUN_ID_PATTERN)
    due_ns: int
    """The schedule tick this run is for (a run missed while no scheduler ran is the latest
    missed tick: missed ticks collapse into one run)."""
    attempt: int = Field(ge=1)
    fired_ns: int
    """When this attempt fired, by its scheduler's clock (timeouts count from it)."""
    status: RunStatus
    session_id: str
    """The attempt's session on the events topic (a fresh session per attempt)."""
    reason: str | None = None
    """Why the attempt failed or needs review, in the runner's words."""
    retry_at_ns: int | None = None
    """When the next attempt is due (retryable failures with attempts left)."""
    delivery: str | None = None
    """What the delivery channel did: `delivered`, or `failed: why`."""
    fired_by: str
    """The scheduler instance that fired the attempt."""
