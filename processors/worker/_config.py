"""What a worker needs to know: where Kafka is, which topics and group, and the processor config
its pure step runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, InstanceOf

from rolltape.processors._processor_config import ProcessorConfig
from rolltape.processors.worker._judging import JudgeExecutor
from rolltape.processors.worker._keys import KeySource
from rolltape.schemas import DEFAULT_PARTITIONS, DEFAULT_PREFIX, software_version
from rolltape.schemas.clients import KafkaConnection


class WorkerConfig(BaseModel):
    """What a worker needs to know: where Kafka is, which topics and group, the processor
    config its pure step runs, and how it batches."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    connection: KafkaConnection
    """The processor principal's connection: the consumer group, its internal topics and the
    rules, filtered and dead-letter chains."""
    judge_connection: KafkaConnection | None = None
    """The judge principal's connection, for the verdicts chain and the LLM judges' own
    conversations (None: the processor's, on clusters that do not separate them)."""
    topic_prefix: str = DEFAULT_PREFIX
    app_id: str | None = None
    """The consumer group and the prefix of the changelog topics (default `<prefix>-worker`).
    Workers with the same id share the partitions. One group per topic prefix: it is the only
    writer of the output chains."""
    partitions: int = Field(default=DEFAULT_PARTITIONS, ge=1)
    """Partitions of the raw topics (the state changelog is created with as many)."""
    replication_factor: int = Field(default=1, ge=1)
    processor: InstanceOf[ProcessorConfig] = Field(
        default_factory=lambda: ProcessorConfig(software_version=software_version())
    )
    """What the pure step runs (rules, filters, judges, principals, writers, the checkpoint
    signer): built once from settings by whoever starts the worker, the same config replay and
    imports build, so no field is mapped twice."""
    judges: Callable[[], JudgeExecutor] | None = None
    """Builds the judge runtime (in the worker's process, when its judge agent starts): what
    runs the judges' specs and records their sessions. None: judges requested by the processor
    config get error verdicts saying this worker runs none."""
    keys: Callable[[], KeySource] | None = None
    """Builds the follower of the keys topic (in the worker's process) whose keyring opens the
    content of sessions naming a subject, for the filters and judges. None: such content is not
    opened (the sessions are filtered out as `content_unavailable`)."""
    max_concurrent_judges: int = Field(default=8, ge=1)
    """Judge requests the judge agent takes at once."""
    batch_max: int = Field(default=1000, ge=1)
    """Records processed between two saves of the touched sessions' state."""
    batch_within_s: float = Field(default=0.02, gt=0)
    """How long a batch waits to fill before it is processed (bounds added latency)."""
    session_timeout_s: float = Field(default=10.0, ge=1)
    """How soon the group notices a dead worker and hands its partitions to the others."""
    stall_after_s: float = Field(default=30.0, gt=0)
    """A worker whose partitions have unprocessed records but which processed nothing for this
    long restarts itself (a recovery that never completes, a stuck batch)."""
    log_level: str = "warning"
    data_dir: Path | None = None
    """Where faust keeps its local folder (`<group>-data`); None: the current directory, as
    faust does. The table lives in memory and its changelog, so nothing in it must survive."""

    @property
    def group_id(self) -> str:
        return self.app_id or f"{self.topic_prefix}-worker"

    @property
    def judge_requests_topic(self) -> str:
        return f"{self.group_id}-judge-requests"

    @property
    def assignment_topic(self) -> str:
        """Empty, with as many partitions as the raw topics: faust assigns its partitions, and
        the worker reads the same partitions of the raw topics."""
        return f"{self.group_id}-assignment"

    @property
    def judge_results_topic(self) -> str:
        return f"{self.group_id}-judge-results"
