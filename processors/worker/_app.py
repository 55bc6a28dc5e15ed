"""The faust app: group membership and per-session state in a changelog-backed table; the raw
topics read in batches beside it.

Why one reader for both raw topics: a session's output chains (rules, verdicts, filtered) must
have one writer, and the training judge needs the session's events and metrics together. The
topics are co-partitioned by session id (the record key, murmur2 like the Java client), so one
worker owns all of a session.

How the work is split: faust assigns the partitions of the (empty) assignment topic, which has
as many partitions as the raw topics, and restores the state table's partitions with them. Once
they are restored, the `RawReader` reads the same partitions of the raw topics and the judge
results from the positions saved in the table, in batches (see `_reader` for why not a faust
agent). A rebalance first waits for the batch in hand, then takes the partitions away.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, cast

import faust
from aiokafka import AIOKafkaProducer
from pydantic import ValidationError

from rolltape.processors._judge_messages import JudgeRequest
from rolltape.processors._outputs import DeadLetter
from rolltape.processors._session import SessionProcessor
from rolltape.processors.audit import InputRecord, Position
from rolltape.processors.worker._config import WorkerConfig
from rolltape.processors.worker._group_positions import GroupPositions
from rolltape.processors.worker._judging import JudgeRunner
from rolltape.processors.worker._keys import KeySource
from rolltape.processors.worker._producers import OutputProducer
from rolltape.processors.worker._reader import RawReader
from rolltape.processors.worker._shell import Shell
from rolltape.processors.worker._states import ChangelogTable, MemoryStates
from rolltape.schemas import Stream, topic_name
from rolltape.schemas.clients import Fetched, KafkaConnection, key_partition

log = logging.getLogger("rolltape.processors.worker")

STATE_TABLE = "sessions"


def exit_for_a_supervisor() -> NoReturn:
    """What a stalled worker does unless told otherwise: exit with EX_TEMPFAIL (75), so the
    supervisor that started it (systemd, Kubernetes, a shell loop) starts a fresh one."""
    os._exit(75)


def create_app(
    config: WorkerConfig, *, on_stall: Callable[[], object] = exit_for_a_supervisor
) -> faust.App:
    """The worker's faust app: the assignment agent, the state table, the batch reader task,
    the judges agent and the timers (watchdog, idle checkpoints). `on_stall` replaces the
    process when it stops making progress with records waiting; how depends on who started
    it (`rolltape serve worker` starts itself again in place)."""
    app = faust.App(
        config.group_id,
        broker=config.connection.faust_broker(),
        broker_credentials=config.connection.faust_credentials(),
        store="memory://",
        datadir=_data_dir(config),
        topic_partitions=config.partitions,
        topic_replication_factor=config.replication_factor,
        topic_allow_declare=True,
        consumer_auto_offset_reset="earliest",
        web_enabled=False,
        producer_acks=-1,
        stream_wait_empty=False,
        table_standby_replicas=0,
        broker_session_timeout=config.session_timeout_s,
        broker_heartbeat_interval=config.session_timeout_s / 5,
    )
    assignment = _bytes_topic(app, config.assignment_topic)
    table = app.Table(
        STATE_TABLE,
        default=None,
        key_type=bytes,
        value_type=bytes,
        partitions=config.partitions,
        # The changelog partition of a session is the partition of its key, as on the raw topics.
        use_partitioner=True,
    )
    requests = _bytes_topic(app, config.judge_requests_topic)
    keys = config.keys() if config.keys is not None else None
    processing = config.processor
    if keys is not None:
        processing = dataclasses.replace(processing, keys=keys.keyring)
    processor = SessionProcessor(processing)
    signer = config.processor.signer

    runtime = _Runtime(config, processor, table, app, keys)

    @app.timer(interval=5.0)  # type: ignore[untyped-decorator]
    async def watchdog() -> None:
        if runtime.idle_s() < config.stall_after_s:
            return
        lag = await runtime.lag()
        if lag > 0:
            # A recovery that never completes after a rebalance (faust-streaming #175 was seen
            # here), or a batch that never returns. Outputs are resent from the outbox and
            # records skipped by offset, so a restart is safe: replace this process.
            log.error(
                "no progress for %.0fs with %d records waiting on owned partitions: restarting",
                runtime.idle_s(),
                lag,
            )
            logging.shutdown()
            on_stall()
        runtime.touch()  # idle with nothing to do: fine

    @app.timer(interval=min(signer.interval_s if signer else 30.0, 30.0))  # type: ignore[untyped-decorator]
    async def commit_idle_sessions() -> None:
        if signer is not None and runtime.has_shell():
            await (await runtime.shell()).commit_due()

    group_positions = GroupPositions(config.group_id)

    @app.timer(interval=2.0)  # type: ignore[untyped-decorator]
    async def commit_group_positions() -> None:
        # For Kafka's tools only (see _group_positions.py): the saved positions of the raw
        # partitions read now, committed to the worker's group as faust's member.
        if not (runtime.has_reader() and runtime.has_shell()):
            return
        reader, shell = await runtime.reader(), await runtime.shell()
        tps = reader.partitions(reader.owned)
        positions = {tp: at for tp in tps if (at := shell.saved_position(tp)) is not None}
        group_positions.forget(set(tps))
        await group_positions.commit(reader.client, _faust_member(app), positions)

    @app.task  # type: ignore[untyped-decorator]
    async def install_stack_dump() -> None:
        # `kill -USR1 <worker pid>` logs every asyncio task's stack: what a stuck worker awaits.
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, _log_task_stacks)

    @app.on_partitions_assigned.connect
    async def note_assignment(app: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        runtime.assigned_in = app.rebalancing_count

    def recovery_is_current() -> bool:
        """Whether the table's state is the recovery of the assignment in force: no rebalance
        has started since that assignment (a revocation counts one) and no newer assignment
        waits for its own recovery. faust calls the recovery callbacks before it checks that
        the generation it recovered is still the group's: reading then would go on while the
        next recovery writes older changelog records over the states being advanced."""
        return (
            runtime.assigned_in == app.rebalancing_count
            and not cast(Any, app.tables).recovery.signal_recovery_start.is_set()
        )

    @table.on_recover
    async def resume_owned_partitions() -> None:
        # Runs after the table is restored: send what sessions saved but may not have sent,
        # then read the owned partitions from the positions the table holds.
        if not recovery_is_current():
            log.info(
                "a recovery ended for an assignment a rebalance replaced; waiting for the next"
            )
            return
        shell = await runtime.shell()
        owned = runtime.owned_partitions()
        await shell.resend_outboxes(lambda key: runtime.partition_of(key) in owned)
        reader = await runtime.reader()
        tps = reader.partitions(owned)
        positions = {tp: at for tp in tps if (at := shell.saved_position(tp)) is not None}
        shell.owning(owned)
        if await reader.assign(owned, positions, unless=lambda: not recovery_is_current()):
            log.info("reading partitions %s of the raw topics", sorted(owned))

    @app.on_partitions_revoked.connect
    async def stop_reading(app: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        # Nothing written from here until the recovery that follows is done: the reader stops
        # after its batch (and with it the shell's owned partitions, which checkpoints write),
        # then a timer's commit in hand finishes. A write landing while a partition's next
        # owner (this worker again, or another) restores its state from the changelog would
        # leave that owner an older state than the log holds: a forked checkpoint log.
        if runtime.has_reader():
            await (await runtime.reader()).release()
        if runtime.has_shell():  # the states kept between batches may belong to others now
            shell = await runtime.shell()
            await shell.settle()
            shell.forget_states()

    @app.agent(assignment, concurrency=1)
    async def membership(stream: Any) -> None:
        # Nothing is ever written to the assignment topic: this agent makes faust assign its
        # partitions (and the table's with them), which the reader then reads.
        async for _ in stream:
            pass

    @app.task  # type: ignore[untyped-decorator]
    async def sessions() -> None:
        shell = await runtime.shell()
        reader = await runtime.reader()

        async def process(fetched: Sequence[Fetched]) -> None:
            await shell.process(
                [
                    shell.to_input(
                        m.partition.topic,
                        m.partition.partition,
                        m.offset,
                        m.key,
                        m.value,
                        m.timestamp_ms,
                    )
                    for m in fetched
                ]
            )

        try:
            await reader.run(process, max_records=config.batch_max, within_s=config.batch_within_s)
        finally:
            await runtime.stop()

    @app.agent(requests, concurrency=1)
    async def judges(stream: Any) -> None:
        producer = _output_producer(config)
        await producer.start()
        executor = config.judges() if config.judges is not None else None
        runner = JudgeRunner(
            executor,
            producer=producer,
            results_topic=config.judge_results_topic,
            keys=processing.keys,
        )
        try:
            async for events in stream.take_events(config.max_concurrent_judges, 0.05):
                batch, letters = [], []
                for e in events:
                    try:
                        batch.append(JudgeRequest.model_validate_json(e.message.value))
                    except ValidationError as exc:
                        at = Position(e.message.topic, e.message.partition, e.message.offset)
                        record = InputRecord(
                            "judge_requests", e.message.key, e.message.value or b"", at
                        )
                        letters.append(DeadLetter(record, "invalid_judge_request", str(exc)[:500]))
                await runner.handle(batch)
                if letters:
                    await Shell(processor, producer, MemoryStates(), config.topic_prefix).send(
                        letters
                    )
        finally:
            if executor is not None:
                await executor.aclose()
            await producer.stop()

    return app


class _Runtime:
    """The session agent's producer and shell, shared with the table's recovery callback (which
    may run before the agent's first batch)."""

    def __init__(
        self,
        config: WorkerConfig,
        processor: SessionProcessor,
        table: Any,
        app: faust.App,
        keys: KeySource | None,
    ) -> None:
        self.config, self.processor, self.table, self.app = config, processor, table, app
        self.keys = keys
        self._keys_started = False
        self._shell: Shell | None = None
        self._producer: OutputProducer | None = None
        self._reader: RawReader | None = None
        self._starting = asyncio.Lock()
        self._events_topic = topic_name(Stream.EVENTS, config.topic_prefix)
        self._metrics_topic = topic_name(Stream.METRICS, config.topic_prefix)
        self._verdicts_topic = topic_name(Stream.VERDICTS, config.topic_prefix)
        """Read for the reviewers' chains on it, which the worker audits and checkpoints."""
        self._last_progress = time.monotonic()
        self.assigned_in: int | None = None
        """faust's rebalance count when the assignment in force was made."""

    def touch(self) -> None:
        self._last_progress = time.monotonic()

    def idle_s(self) -> float:
        if self._shell is not None and self._shell.stats.last_batch_at > self._last_progress:
            self._last_progress = self._shell.stats.last_batch_at
        return time.monotonic() - self._last_progress

    async def lag(self) -> int:
        """Records on this worker's partitions of the raw topics past the saved positions."""
        if self._reader is None or self._shell is None:
            return 0
        return await self._reader.lag(self.owned_partitions(), self._shell.saved_position)

    def has_shell(self) -> bool:
        return self._shell is not None

    def has_reader(self) -> bool:
        return self._reader is not None

    async def shell(self) -> Shell:
        async with self._starting:  # the recovery callback and the reading task both ask
            if self._shell is None:
                if self.keys is not None and not self._keys_started:
                    await self.keys.start()
                    self._keys_started = True
                self._producer = _output_producer(self.config)
                await self._producer.start()
                self._shell = Shell(
                    self.processor,
                    self._producer,
                    ChangelogTable(self.table, self._producer),
                    self.config.topic_prefix,
                    requests_topic=self.config.judge_requests_topic,
                    results_topic=self.config.judge_results_topic,
                    partitions=self.config.partitions,
                    owned=self.reading,
                    keys=self.keys,
                )
            return self._shell

    async def reader(self) -> RawReader:
        async with self._starting:
            if self._reader is None:
                reader = RawReader(
                    self.config.connection,
                    (
                        self._events_topic,
                        self._metrics_topic,
                        self.config.judge_results_topic,
                        self._verdicts_topic,
                    ),
                )
                await reader.start()
                self._reader = reader
            return self._reader

    async def stop(self) -> None:
        if self._reader is not None:
            await self._reader.stop()
        if self._producer is not None:
            await self._producer.stop()
        if self.keys is not None and self._keys_started:
            await self.keys.stop()
            self._keys_started = False
        self._shell = self._producer = self._reader = None

    def reading(self) -> frozenset[int]:
        """The partitions the reader reads now (none from a revocation to the recovery's end)."""
        return self._reader.owned if self._reader is not None else frozenset()

    def owned_partitions(self) -> set[int]:
        return {
            tp.partition
            for tp in self.app.assignor.assigned_actives()
            if tp.topic == self.config.assignment_topic
        }

    def partition_of(self, key: bytes) -> int:
        """The partition of a session key, as the Java client and aiokafka place it."""
        return key_partition(key, self.config.partitions)


def _faust_member(app: faust.App) -> tuple[str, int] | None:
    """faust's member of the worker's group: (member id, generation), None before it joined."""
    try:
        coordinator = cast(Any, app.consumer)._thread._ensure_consumer()._coordinator
    except Exception:  # not started, or stopping
        return None
    member_id, generation = coordinator.member_id, coordinator.generation
    return (member_id, generation) if member_id else None


def _log_task_stacks() -> None:
    out = io.StringIO()
    for task in asyncio.all_tasks():
        print(f"--- {task.get_name()}", file=out)
        awaited: Any = task.get_coro()
        while awaited is not None:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)
            if frame is not None:
                print(
                    f"    {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}",
                    file=out,
                )
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None)
    log.warning("asyncio tasks:\n%s", out.getvalue())


def _bytes_topic(app: faust.App, *names: str) -> Any:
    """Topics read as raw bytes: rolltape parses and verifies records itself. They are created by
    `broker up` / the worker's setup, never declared by faust."""
    return app.topic(
        *names,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        internal=False,
    )


def _data_dir(config: WorkerConfig) -> str:
    name = f"{config.group_id}-data"
    if config.data_dir is None:
        return name
    config.data_dir.mkdir(parents=True, exist_ok=True)
    return str(config.data_dir / name)


def _output_producer(config: WorkerConfig) -> OutputProducer:
    def make(connection: KafkaConnection) -> AIOKafkaProducer:
        return connection.chain_producer(
            linger_ms=1,
            max_batch_size=1 << 20,
            max_request_size=4 << 20,
        )

    return OutputProducer.for_roles(
        config.connection, config.judge_connection, config.topic_prefix, make
    )


def run_worker(
    config: WorkerConfig, *, on_stall: Callable[[], object] = exit_for_a_supervisor
) -> None:
    """Run until SIGINT/SIGTERM (blocks; owns the event loop)."""
    app = create_app(config, on_stall=on_stall)
    worker = faust.Worker(app, loglevel=config.log_level, quiet=True)
    # faust's startup spinner lowers the root logger to DEBUG whenever the level asked for is
    # WARNING or above (so that it spins on every record): every debug call of aiokafka and
    # faust then builds a record on the hot path, about a tenth of the worker's time. No
    # spinner, and the level asked for is the level in force.
    worker.spinner = None
    worker.execute_from_commandline()
