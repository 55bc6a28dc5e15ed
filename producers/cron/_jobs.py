"""Creating, changing and removing cron jobs: each change is the job's next revision on the
jobs topic, carrying its whole definition."""

from __future__ import annotations

import re
import time
from types import TracebackType
from typing import Self

from pydantic import Field

from rolltape.producers._errors import ProducerError
from rolltape.producers.cron._book import JobBook
from rolltape.producers.cron._channels import open_channel
from rolltape.producers.cron._log import JobsLog, read_book
from rolltape.producers.cron._runs import guard_against_recursion, load_runner
from rolltape.producers.cron._schedule import parse_schedule
from rolltape.schemas import JOB_ID_PATTERN, CronJob, JobAction, JobDefinition, JobState
from rolltape.schemas.clients import KafkaConnection


class JobSpec(JobDefinition):
    """What `rolltape cron add` asks for: a job's definition, and the id it should have
    (None: one made from the prompt)."""

    prompt: str = Field(min_length=1)
    job_id: str | None = None


class JobError(ProducerError, ValueError):
    """A job change that cannot be made; the message says why and what to do."""


def job_id_from(prompt: str, taken: set[str]) -> str:
    """A readable id from the prompt's first words, made unique among `taken`."""
    words = re.findall(r"[a-z0-9]+", prompt.lower())[:4]
    base = "-".join(words)[:40].strip("-") or "job"
    candidate, n = base, 2
    while candidate in taken:
        candidate, n = f"{base}-{n}", n + 1
    return candidate


class CronJobs:
    """Job administration against the jobs topic (`async with CronJobs(...) as jobs:`)."""

    def __init__(self, connection: KafkaConnection, *, prefix: str, principal: str) -> None:
        self._connection = connection
        self._prefix = prefix
        self._log = JobsLog(connection, prefix=prefix, principal=principal)
        self.book = JobBook()

    async def __aenter__(self) -> Self:
        await self._log.start()
        try:
            await self.refresh()
        except BaseException:
            await self._log.stop()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._log.stop()

    async def refresh(self) -> JobBook:
        self.book = await read_book(self._connection, prefix=self._prefix)
        return self.book

    def _validate(self, spec: JobSpec) -> None:
        parse_schedule(spec.schedule, spec.timezone)  # ScheduleError says what is accepted
        if spec.deliver is not None:
            open_channel(spec.deliver)
        if spec.runner is not None:
            load_runner(spec.runner)

    async def add(self, spec: JobSpec) -> CronJob:
        guard_against_recursion("create a cron job")
        self._validate(spec)
        live = {j for j, job in self.book.jobs.items() if job.state != JobState.REMOVED}
        job_id = spec.job_id or job_id_from(spec.prompt, set(self.book.jobs))
        if not re.match(JOB_ID_PATTERN, job_id):
            raise JobError(f"job id {job_id!r} must match {JOB_ID_PATTERN}")
        if job_id in live:
            raise JobError(f"job {job_id!r} exists: remove it first or choose another --id")
        fields = spec.model_dump(exclude={"job_id"})
        job = CronJob(
            job_id=job_id,
            action=JobAction.CREATED,
            state=JobState.ACTIVE,
            anchor_ns=time.time_ns() // 1_000_000_000 * 1_000_000_000,  # whole seconds
            **fields,
        )
        await self._log.write(self.book, job_id, job_id, job)
        return job

    async def _change(self, job_id: str, action: JobAction, state: JobState) -> CronJob:
        guard_against_recursion(f"change cron job {job_id!r}")
        job = self.book.jobs.get(job_id)
        if job is None or job.state == JobState.REMOVED:
            known = ", ".join(
                sorted(j for j, d in self.book.jobs.items() if d.state != JobState.REMOVED)
            )
            raise JobError(f"no job {job_id!r} (jobs: {known or 'none'}); see `rolltape cron list`")
        changed = job.model_copy(update={"action": action, "state": state})
        await self._log.write(self.book, job_id, job_id, changed)
        return changed

    async def pause(self, job_id: str) -> CronJob:
        return await self._change(job_id, JobAction.PAUSED, JobState.PAUSED)

    async def resume(self, job_id: str) -> CronJob:
        return await self._change(job_id, JobAction.RESUMED, JobState.ACTIVE)

    async def remove(self, job_id: str) -> CronJob:
        return await self._change(job_id, JobAction.REMOVED, JobState.REMOVED)
