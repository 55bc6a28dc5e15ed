"""The scheduler: fires due jobs of the partitions it owns, runs them, routes their outcome.

Schedulers share the jobs topic's partitions through one consumer group, so each job has one
owner at a time. A scheduler that is given a partition reads it from the start to its current
end before it fires anything there: it then knows every run the previous owner claimed (a run
is claimed by writing it as `running` and waiting for the broker's acknowledgement before it
starts). Partitions are handed over only after the previous owner gave them up (Kafka's eager
rebalance: revocation completes before assignment), and the owner never has a claim in flight
then, since it claims from the same loop that polls. What is due comes from the book alone
(`JobBook.due`): the latest missed tick, never one run per missed tick.

Offsets are never committed. A partition is read from its start the first time this process is
given it; one it held before and is given back (a rebalance revokes every partition and hands
most of them back) is read on from where its folding stopped: the book still holds every
revision up to there, and the topic has no tombstones, so what compaction removed since is only
revisions the records after that point supersede.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rolltape.producers._errors import NotStartedError
from rolltape.producers._recorder import Recorder
from rolltape.producers.cron._book import Expire, Fire, JobBook
from rolltape.producers.cron._channels import Delivery, DeliveryError, open_channel
from rolltape.producers.cron._log import JobsLog, fold_record, instance_name
from rolltape.producers.cron._routing import (
    RunOutcome,
    attempt_session_id,
    run_id,
    settle,
    tick_label,
)
from rolltape.producers.cron._runs import (
    CronRunContext,
    Runner,
    as_outcome,
    load_runner,
    mark_cron_run,
    unmark_cron_run,
)
from rolltape.schemas import FINAL_STATUSES, CronJob, CronRun, RunStatus, Stream, topic_name
from rolltape.schemas.clients import GroupMember, KafkaClientError, KafkaConnection, Partition

_log = logging.getLogger("rolltape.producers.cron")
_NS = 1_000_000_000
_SESSION_STATUS = {
    RunStatus.SUCCESS: "completed",
    RunStatus.NEEDS_HUMAN_REVIEW: "completed",
    RunStatus.RETRYABLE_FAILURE: "failed",
    RunStatus.TERMINAL_FAILURE: "failed",
}


@dataclass(frozen=True)
class Owned:
    """The partitions an assignment gave a scheduler: those it reads from the start (new to
    it) and those it reads on from where it stood (given back)."""

    from_start: tuple[int, ...]
    read_on: tuple[int, ...]

    def line(self) -> str:
        def listed(parts: tuple[int, ...]) -> str:
            return ", ".join(map(str, parts)) or "none"

        return (
            f"owns partitions {listed(tuple(sorted(self.from_start + self.read_on)))} "
            f"(read from the start: {listed(self.from_start)}; "
            f"read on from where it stood: {listed(self.read_on)})"
        )


class _Ownership:
    """The scheduler's `Ownership`: a partition it loses stops firing here; one it gains is
    read from the start before its jobs fire (the book must hold every revision first)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    async def revoked(self, partitions: list[Partition]) -> None:
        await self._scheduler._give_up(partitions)

    async def assigned(self, partitions: list[Partition]) -> None:
        await self._scheduler._take(partitions)


class Scheduler:
    """`await Scheduler(...).run(stop)` until `stop` is set.

    `connection` authenticates as the scheduler (the jobs topic); runs record their sessions
    through `recorder`, which writes as an agent. `default_runner` runs jobs that name none.
    """

    def __init__(
        self,
        connection: KafkaConnection,
        recorder: Recorder,
        *,
        prefix: str,
        group_id: str,
        principal: str = "scheduler",
        default_runner: Runner | None = None,
        max_concurrent: int = 4,
        drain_s: float = 10.0,
        clock: Callable[[], int] = time.time_ns,
        on_start: Callable[[CronRun, int], None] | None = None,
        on_write: Callable[[CronRun], None] | None = None,
        on_owned: Callable[[Owned], None] | None = None,
    ) -> None:
        self.instance = instance_name()
        self.book = JobBook()
        self._connection = connection
        self._recorder = recorder
        self._topic = topic_name(Stream.JOBS, prefix)
        self._group_id = group_id
        self._log = JobsLog(connection, prefix=prefix, principal=principal)
        self._default_runner = default_runner
        self._slots = asyncio.Semaphore(max_concurrent)
        self._clock = clock
        self._drain_s = drain_s
        self._on_start = on_start
        self._on_write = on_write
        self._on_owned = on_owned
        self._ready: set[int] = set()
        self._loading: dict[Partition, int] = {}
        self._folded_to: dict[Partition, int] = {}
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        self._member: GroupMember | None = None
        self.fired = 0

    # -- ownership -------------------------------------------------------------------------------
    def owns(self, job_id: str) -> bool:
        return self._log.partition_of(job_id) in self._ready

    async def _give_up(self, revoked: list[Partition]) -> None:
        for tp in revoked:  # still assigned while revocation runs
            try:
                self._folded_to[tp] = await self.member.position(tp)
            except KafkaClientError:  # then it is read from the start when it comes back
                self._folded_to.pop(tp, None)
        partitions = {tp.partition for tp in revoked}
        self._ready -= partitions
        self._loading = {
            tp: end for tp, end in self._loading.items() if tp.partition not in partitions
        }
        await self._log.flush()

    async def _take(self, assigned: list[Partition]) -> None:
        if not assigned:
            return
        ends = await self.member.end_offsets(assigned)
        fresh = [tp for tp in assigned if tp not in self._folded_to]
        await self.member.seek_to_beginning(*fresh)
        for tp in assigned:
            if tp in self._folded_to:
                self.member.seek(tp, self._folded_to[tp])
            self._loading[tp] = ends[tp]
        owned = Owned(
            from_start=tuple(sorted(tp.partition for tp in fresh)),
            read_on=tuple(sorted(tp.partition for tp in assigned if tp not in fresh)),
        )
        _log.info("%s %s", self.instance, owned.line())
        if self._on_owned is not None:
            self._on_owned(owned)

    async def _check_loaded(self) -> None:
        for tp, end in list(self._loading.items()):
            if await self.member.position(tp) >= end:
                del self._loading[tp]
                self._ready.add(tp.partition)

    # -- the loop --------------------------------------------------------------------------------
    @property
    def member(self) -> GroupMember:
        if self._member is None:
            raise NotStartedError("the scheduler is not running: call run() first")
        return self._member

    async def run(self, stop: asyncio.Event) -> None:
        await self._log.start()
        try:
            self._member = await GroupMember(
                self._connection,
                group_id=self._group_id,
                topics=[self._topic],
                ownership=_Ownership(self),
            ).start()
            try:
                while not stop.is_set():
                    await self._poll(self._sleep_ms())
                    await self._check_loaded()
                    await self._act()
            finally:
                await self._drain()
                await self.member.stop()
        finally:
            await self._log.stop()

    async def _drain(self) -> None:
        """Let running attempts finish for `drain_s`; interrupt the rest, which are recorded
        as retryable failures, so the next scheduler retries them without waiting for the
        timeout."""
        tasks = list(self._in_flight.values())
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self._drain_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _sleep_ms(self) -> int:
        if self._loading:
            return 50
        wake = self.book.wake_at(self.owns, busy=self._in_flight)
        if wake is None:
            return 500
        # At least a millisecond: the poll must yield to the runs' tasks.
        return int(min(max((wake - self._clock()) / 1e6, 1), 500))

    async def _poll(self, timeout_ms: int) -> None:
        for record in await self.member.fetch(timeout_s=timeout_ms / 1000, max_records=10_000):
            where = f"{record.partition.topic}[{record.partition.partition}]@{record.offset}"
            fold_record(self.book, record.value, where)

    async def _act(self) -> None:
        """Claim every due run at once (one round trip for a burst of jobs due together). A
        claim the broker did not acknowledge started nothing: the next pass tries again."""
        actions = self.book.due(self._clock(), self.owns, busy=self._in_flight)
        if not actions:
            return
        done = await asyncio.gather(
            *(self._fire(a) if isinstance(a, Fire) else self._expire(a) for a in actions),
            return_exceptions=True,
        )
        for action, outcome in zip(actions, done, strict=True):
            if isinstance(outcome, KafkaClientError):
                _log.warning(
                    "could not write %s's run (%s); trying again", action.job.job_id, outcome
                )
            elif isinstance(outcome, BaseException):
                raise outcome

    async def _fire(self, fire: Fire) -> None:
        job = fire.job
        rid = run_id(job.job_id, fire.due_ns)
        if rid in self._in_flight:
            return
        run = CronRun(
            job_id=job.job_id,
            run_id=rid,
            due_ns=fire.due_ns,
            attempt=fire.attempt,
            fired_ns=self._clock(),
            status=RunStatus.RUNNING,
            session_id=attempt_session_id(job.job_id, fire.due_ns, fire.attempt),
            fired_by=self.instance,
        )
        await self._write(run)  # the claim
        self.fired += 1
        task = asyncio.create_task(self._execute(job, run), name=f"cron run {rid}")
        self._in_flight[rid] = task
        task.add_done_callback(lambda _: self._in_flight.pop(rid, None))

    async def _expire(self, expire: Expire) -> None:
        run = expire.run
        _log.warning(
            "%s: no status %d s after it fired: timed out", run.run_id, expire.job.timeout_s
        )
        outcome = RunOutcome(
            status=RunStatus.RETRYABLE_FAILURE,
            reason=f"timed out: no status {expire.job.timeout_s} s after it fired "
            f"(its runner hung or scheduler {run.fired_by} stopped)",
        )
        await self._finish(expire.job, run, outcome)

    # -- one attempt -----------------------------------------------------------------------------
    async def _execute(self, job: CronJob, run: CronRun) -> None:
        try:
            async with self._slots:
                outcome = await self._attempt(job, run)
        except asyncio.CancelledError:
            interrupted = RunOutcome(
                status=RunStatus.RETRYABLE_FAILURE,
                reason=f"interrupted: scheduler {self.instance} stopped",
            )
            await self._finish(job, run, interrupted)
            raise
        current = self.book.runs.get(run.run_id)
        if current is None or current.attempt != run.attempt or current.status != RunStatus.RUNNING:
            _log.warning(
                "%s attempt %d ended after it was settled elsewhere", run.run_id, run.attempt
            )
            return
        try:
            await self._finish(job, run, outcome)
        except KafkaClientError as exc:
            _log.error(
                "%s attempt %d ended (%s) but its status could not be written (%s); it will "
                "time out and be retried",
                run.run_id,
                run.attempt,
                outcome.status.value,
                exc,
            )

    async def _attempt(self, job: CronJob, run: CronRun) -> RunOutcome:
        try:
            runner = load_runner(job.runner) if job.runner else self._default_runner
        except ValueError as exc:
            return RunOutcome(status=RunStatus.TERMINAL_FAILURE, reason=str(exc))
        if runner is None:
            return RunOutcome(
                status=RunStatus.TERMINAL_FAILURE,
                reason="the job names no runner (--runner MODULE:FUNC) and the scheduler has "
                "no default runner",
            )
        workdir = Path(job.workdir).expanduser() if job.workdir else None
        if workdir is not None and not workdir.is_dir():
            return RunOutcome(
                status=RunStatus.TERMINAL_FAILURE, reason=f"workdir {workdir} is not a folder"
            )
        session = self._recorder.session(
            job.prompt,
            session_id=run.session_id,
            model=job.model,
            tags=[
                "cron",
                f"cron.job={job.job_id}",
                f"cron.run={run.run_id}",
                f"cron.attempt={run.attempt}",
                *(f"skill={skill}" for skill in job.skills),
            ],
            run_config={
                "cron": {
                    "job_id": job.job_id,
                    "run_id": run.run_id,
                    "attempt": run.attempt,
                    "due": tick_label(run.due_ns),
                    "skills": list(job.skills),
                    "workdir": job.workdir,
                    "deliver": job.deliver,
                }
            },
        )
        if self._on_start is not None:
            self._on_start(run, self._clock())
        context = CronRunContext(
            job=job,
            run_id=run.run_id,
            attempt=run.attempt,
            due_ns=run.due_ns,
            session=session,
            workdir=workdir,
        )
        token = mark_cron_run(run.run_id)
        try:
            with session:
                outcome = await self._call(runner, context, job.timeout_s)
                if not session.ended:
                    session.end(
                        _SESSION_STATUS[outcome.status],  # type: ignore[arg-type]
                        outcome={"cron_status": outcome.status.value},
                        error=outcome.reason,
                    )
        finally:
            unmark_cron_run(token)
        return outcome

    async def _call(self, runner: Runner, context: CronRunContext, timeout_s: int) -> RunOutcome:
        try:
            if inspect.iscoroutinefunction(runner):
                returned = await asyncio.wait_for(runner(context), timeout_s)
            else:
                returned = await asyncio.wait_for(asyncio.to_thread(runner, context), timeout_s)
                if inspect.isawaitable(returned):
                    returned = await asyncio.wait_for(returned, timeout_s)
            return as_outcome(returned)
        except TimeoutError:
            return RunOutcome(
                status=RunStatus.RETRYABLE_FAILURE, reason=f"timed out after {timeout_s} s"
            )
        except Exception as exc:  # a runner's failure is the run's, never the scheduler's
            return RunOutcome(
                status=RunStatus.RETRYABLE_FAILURE, reason=f"{type(exc).__name__}: {exc}"
            )

    async def _finish(self, job: CronJob, run: CronRun, outcome: RunOutcome) -> None:
        now = self._clock()
        settled = settle(job, run, outcome, now)
        if settled.status in FINAL_STATUSES and job.deliver:
            delivery = Delivery(
                job_id=job.job_id,
                run_id=run.run_id,
                attempt=run.attempt,
                status=settled.status,
                reason=settled.reason,
                output=outcome.output,
                session_id=run.session_id,
                due_ns=run.due_ns,
                ended_ns=now,
            )
            try:
                await open_channel(job.deliver).deliver(delivery)
                settled = settled.model_copy(update={"delivery": "delivered"})
            except (DeliveryError, ValueError) as exc:
                settled = settled.model_copy(update={"delivery": f"failed: {exc}"})
        await self._write(settled)

    async def _write(self, run: CronRun) -> None:
        await self._log.write(self.book, run.run_id, run.job_id, run)
        if self._on_write is not None:
            self._on_write(run)
