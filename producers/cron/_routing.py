"""How an attempt's outcome becomes the run's next state: status routing and backoff. Pure."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict

from rolltape.schemas import CronJob, CronRun, RetryPolicy, RunStatus

_NS = 1_000_000_000


class RunOutcome(BaseModel):
    """What a runner reports for one attempt. A runner that returns nothing succeeded; one
    that raises failed retryably (an exception is usually a flaky endpoint or a rate limit);
    a runner that knows better returns the status itself."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: RunStatus = RunStatus.SUCCESS
    reason: str | None = None
    output: str = ""
    """What the delivery channel receives (the agent's final answer)."""


def backoff_s(policy: RetryPolicy, attempt: int) -> float:
    """Seconds to wait after failed attempt `attempt` (from 1): doubling, capped."""
    return float(min(policy.base_s * 2 ** (attempt - 1), policy.max_s))


def settle(job: CronJob, run: CronRun, outcome: RunOutcome, now_ns: int) -> CronRun:
    """The run after its attempt ended with `outcome`: a retryable failure waits for the next
    attempt while attempts are left and becomes a terminal failure after the last one."""
    if outcome.status == RunStatus.RUNNING:
        raise ValueError("an attempt cannot end as 'running'")
    status, reason, retry_at = outcome.status, outcome.reason, None
    if status == RunStatus.RETRYABLE_FAILURE:
        if run.attempt < job.retry.max_attempts:
            retry_at = now_ns + int(backoff_s(job.retry, run.attempt) * _NS)
        else:
            status = RunStatus.TERMINAL_FAILURE
            reason = f"{reason or 'failed'} (gave up after {run.attempt} attempts)"
    return run.model_copy(update={"status": status, "reason": reason, "retry_at_ns": retry_at})


def tick_label(due_ns: int) -> str:
    """A tick as it appears in run ids: UTC, to the second."""
    return datetime.fromtimestamp(due_ns // _NS, UTC).strftime("%Y%m%dT%H%M%SZ")


def run_id(job_id: str, due_ns: int) -> str:
    """The run of `job_id` for the tick `due_ns`: the same tick gives the same id wherever it
    is fired, so a tick fired twice shows as one key written twice, never as two runs."""
    return f"{job_id}@{tick_label(due_ns)}"


def attempt_session_id(job_id: str, due_ns: int, attempt: int) -> str:
    """The fresh session an attempt records on the events topic."""
    return f"cron.{job_id}.{tick_label(due_ns)}.{attempt}"
