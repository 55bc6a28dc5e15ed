"""The judge's checkpoint logs: which chain heads go in, under which log, signed with which key.

One log per raw partition, so that a log has one writer (the worker that owns the partition)
and its state moves with the partition on a rebalance: the log's name is chosen so that it is
stored on that very partition of the worker's state table (`log_for_partition`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rolltape.schemas.clients import key_partition
from rolltape.schemas.trust import key_id

CHECKPOINT_VERSION: Final = "rolltape.checkpoint/1"
CHECKPOINT_LOG_PREFIX: Final = "checkpoints.p"
"""Session ids of this form are the judge's logs; a raw record using one is dead-lettered."""
CHECKPOINT_INTERVAL_S: Final = 30.0
"""How often, unless settings say otherwise, the heads of sessions still running are committed."""


@dataclass(frozen=True)
class CheckpointSigner:
    """The judge's signing key, and how often the heads of sessions still running are committed
    (sessions that end are committed in the batch they end in)."""

    key: Ed25519PrivateKey
    interval_s: float = CHECKPOINT_INTERVAL_S
    key_id: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_id", key_id(self.key.public_key()))


def raw_partition(session_id: str, partitions: int) -> int:
    """The partition of a session on the raw topics (the Java client's partitioner)."""
    return key_partition(session_id.encode(), partitions)


def log_for_partition(partition: int, partitions: int) -> str:
    """The checkpoint log of a raw partition: `checkpoints.p<N>.<k>` with the smallest k whose
    key the Java client's partitioner puts on partition N (where its state must live)."""
    if not 0 <= partition < partitions:
        raise ValueError(f"partition {partition} of {partitions}")
    k = 0
    while True:
        name = f"{CHECKPOINT_LOG_PREFIX}{partition}.{k}"
        if raw_partition(name, partitions) == partition:
            return name
        k += 1
