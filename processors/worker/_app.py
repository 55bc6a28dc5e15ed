"""The faust app: one agent over the raw topics, per-session state in a changelog-backed table.

Why one agent for both raw topics: a session's output chains (rules, verdicts, filtered) must
have one writer, and the training judge needs the session's events and metrics together. The
topics are co-partitioned by session id (the record key, murmur2 like the Java client), so one
worker owns all of a session. Concurrency is 1 (faust issue #606: more can commit past an
unprocessed record).
"""

from __future__ import annotations

import importlib.metadata
import logging
from typing import Any

import faust
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import murmur2
from pydantic import ValidationError

from rolltape.processors._session import (
    DeadLetter,
    JudgeRequest,
    ProcessorConfig,
    SessionProcessor,
)
from rolltape.processors.audit import InputRecord
from rolltape.processors.worker._config import WorkerConfig
from rolltape.processors.worker._judging import JudgeRunner
from rolltape.processors.worker._shell import Shell
from rolltape.schemas import Stream, topic_name

log = logging.getLogger("rolltape.processors.worker")

STATE_TABLE = "sessions"


def software_version() -> str:
    try:
        return importlib.metadata.version("rolltape")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def create_app(config: WorkerConfig) -> faust.App:
    app = faust.App(
        config.group_id,
        broker=f"kafka://{config.bootstrap}",
        store="memory://",
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
    raw = _bytes_topic(
        app,
        topic_name(Stream.EVENTS, config.topic_prefix),
        topic_name(Stream.METRICS, config.topic_prefix),
        config.judge_results_topic,
    )
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
    processor = SessionProcessor(
        ProcessorConfig(
            rules=config.rules,
            filters=config.filters,
            principal=config.principal,
            software_version=software_version(),
            rewards=config.rewards,
            llm_judges=config.llm_judges,
        )
    )

    runtime = _Runtime(config, processor, table, app)

    @table.on_recover
    async def resend_saved_outputs() -> None:
        # Runs after the table is restored and before the streams resume.
        shell = await runtime.shell()
        owned = runtime.owned_partitions()
        await shell.resend_outboxes(lambda key: runtime.partition_of(key) in owned)

    @app.agent(raw, concurrency=1)
    async def sessions(stream: Any) -> None:
        shell = await runtime.shell()
        try:
            async for events in stream.take_events(config.batch_max, config.batch_within_s):
                records = [
                    shell.to_input(
                        e.message.topic,
                        e.message.partition,
                        e.message.offset,
                        e.message.key,
                        e.message.value,
                        int(e.message.timestamp * 1000),
                    )
                    for e in events
                ]
                await shell.process(records)
        finally:
            await runtime.stop()

    @app.agent(requests, concurrency=1)
    async def judges(stream: Any) -> None:
        producer = _output_producer(config)
        await producer.start()
        runner = JudgeRunner(
            producer,
            models=dict(config.models),
            topic_prefix=config.topic_prefix,
            results_topic=config.judge_results_topic,
            software_version=software_version(),
            max_concurrent=config.max_concurrent_judges,
        )
        try:
            async for events in stream.take_events(config.max_concurrent_judges, 0.05):
                batch, letters = [], []
                for e in events:
                    try:
                        batch.append(JudgeRequest.model_validate_json(e.message.value))
                    except ValidationError as exc:
                        record = InputRecord(
                            "judge_requests",
                            e.message.topic,
                            e.message.partition,
                            e.message.offset,
                            e.message.key,
                            e.message.value or b"",
                        )
                        letters.append(DeadLetter(record, "invalid_judge_request", str(exc)[:500]))
                await runner.handle(batch)
                if letters:
                    await Shell(processor, producer, table, config.topic_prefix).send(letters)
        finally:
            await producer.stop()

    return app


class _Runtime:
    """The session agent's producer and shell, shared with the table's recovery callback (which
    may run before the agent's first batch)."""

    def __init__(
        self, config: WorkerConfig, processor: SessionProcessor, table: Any, app: faust.App
    ) -> None:
        self.config, self.processor, self.table, self.app = config, processor, table, app
        self._shell: Shell | None = None
        self._producer: AIOKafkaProducer | None = None
        self._events_topic = topic_name(Stream.EVENTS, config.topic_prefix)

    async def shell(self) -> Shell:
        if self._shell is None:
            self._producer = _output_producer(self.config)
            await self._producer.start()
            self._shell = Shell(
                self.processor,
                self._producer,
                self.table,
                self.config.topic_prefix,
                requests_topic=self.config.judge_requests_topic,
                results_topic=self.config.judge_results_topic,
                flush_state=self.app.producer.flush,
            )
        return self._shell

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
        self._shell = self._producer = None

    def owned_partitions(self) -> set[int]:
        return {
            tp.partition
            for tp in self.app.assignor.assigned_actives()
            if tp.topic == self._events_topic
        }

    def partition_of(self, key: bytes) -> int:
        """The partition of a session key, as the Java client and aiokafka place it."""
        return int(murmur2(key) & 0x7FFFFFFF) % self.config.partitions


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


def _output_producer(config: WorkerConfig) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=config.bootstrap,
        enable_idempotence=True,
        acks="all",
        linger_ms=1,
        max_batch_size=1 << 20,
        max_request_size=4 << 20,
    )


def run_worker(config: WorkerConfig) -> None:
    """Run until SIGINT/SIGTERM (blocks; owns the event loop)."""
    app = create_app(config)
    worker = faust.Worker(app, loglevel=config.log_level, quiet=True)
    worker.execute_from_commandline()
