"""The one way infra's commands write records: idempotent, acknowledged by all replicas.

Replay, imports and the benchmarks append to chains; a lost or duplicated-out-of-order record
would break one, so every writer here is idempotent with acks=all (the recorder's sender has its
own, tuned for the agent's hot path).
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaProducer

from rolltape.schemas.clients import KafkaConnection


def chain_producer(connection: KafkaConnection, **overrides: Any) -> AIOKafkaProducer:
    """An idempotent, acks=all producer for records that extend a chain; not started yet (the
    caller starts and stops it). `overrides` are for batching and sizes: overriding `acks` or
    `enable_idempotence` would give up what this exists to guarantee."""
    settings: dict[str, Any] = {
        "enable_idempotence": True,
        "acks": "all",
        "linger_ms": 5,
        "max_request_size": 4 * 1024 * 1024,
    }
    settings.update(overrides)
    return connection.producer(**settings)
