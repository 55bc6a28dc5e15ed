"""What a sender is given and what it counts: `SenderConfig` and `SenderStats`.

Why a module of its own: both cross process boundaries as they are (the sharded sender pickles
the config to each sender process, and each process reports its counters back over the socket),
so they are plain dataclasses that import nothing of the sender's machinery.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from rolltape.producers._errors import RejectedEvent
from rolltape.schemas.clients import KafkaConnection


@dataclass
class SenderStats:
    """The counters behind a flush result: sealed - acked - spooled is what is still in flight.
    Only the sender side writes them (the sharded sender as sums over its shards); recording
    threads read them without a lock. `rejected_events` accumulate until a flush raises them."""

    sealed: int = 0
    acked: int = 0
    spooled: int = 0
    rejected: int = 0
    mode: str = "direct"
    rejected_events: list[RejectedEvent] = field(default_factory=list)


SPOOL_MAX_BYTES: Final = 1 << 30
"""The spool's default size limit (1 GiB): the Recorder's and `ROLLTAPE_SPOOL_MAX_BYTES`'s."""
SPOOL_AFTER_S: Final = 2.0
"""How long without an acknowledgement, with records waiting, before new records spool."""
BATCH_WINDOW_S: Final = 0.02
"""How long events gather before the chainer seals them as one batch."""


class HeadLocator(Protocol):
    """Where a resuming writer may start reading a session's partition: an offset at or before
    the session's first record there (every record of it lies at or after), or, where it cannot
    say, why (the writer then reads the partition from its start). Kafka has no index by key;
    the read model is one (`rolltape.infra.index.IndexHeadLocator`). Picklable: it travels in
    the config to each sender process."""

    def __call__(self, topic: str, partition: int, session_id: str) -> int | str: ...


@dataclass
class SenderConfig:
    """What a sender needs to run, built once by the Recorder. Kept picklable: the sharded
    sender sends it to each sender process as is."""

    connection: KafkaConnection | None
    topic_prefix: str
    producer_info: dict[str, str]
    spool_dir: Path
    spool_max_bytes: int
    spool_after_s: float = SPOOL_AFTER_S
    """How long without an acknowledgement, with records waiting, before new records spool."""
    batch_window_s: float = BATCH_WINDOW_S
    """How long events gather in the queue before the chainer seals them as one batch: while
    recording goes on, the chainer wakes on this timer and record calls never pay for waking
    it (see Sender._chainer). Flush and close cut a window short; 0 seals at once."""
    outbox_limit: int = 20_000
    """Sealed records waiting for the producer; past it the chainer pauses (the queue absorbs)."""
    max_record_bytes: int = 1_000_000
    linger_ms: int = 5
    max_batch_bytes: int = 1_048_000
    chain_batch: int = 2_000
    send_chunk: int = 5_000
    head_locator: HeadLocator | None = None
    """Where a resume starts reading the session's partition (None: at its start)."""
