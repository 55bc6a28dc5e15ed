"""Is a broker answering? A metadata round trip, not a TCP connect: a listening socket on a
broker that is still loading its log does not serve requests yet."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from rolltape.schemas.clients import KafkaConnection


@contextlib.asynccontextmanager
async def _bootstrapped(connection: KafkaConnection, timeout_s: float) -> AsyncIterator[Any]:
    """A client that has fetched the cluster's metadata within `timeout_s`, with aiokafka's own
    connection errors kept quiet (a broker still starting is expected here); closed after."""
    client = connection.client(request_timeout_ms=int(timeout_s * 1000))
    quiet = logging.getLogger("aiokafka")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        await asyncio.wait_for(client.bootstrap(), timeout_s)
        yield client
    finally:
        with contextlib.suppress(Exception):
            await client.close()
        quiet.setLevel(level)


async def broker_answers(connection: KafkaConnection, timeout_s: float = 3.0) -> bool:
    """True when a metadata request over `connection` (authenticated, when it has credentials)
    gets a reply within `timeout_s`."""
    try:
        async with _bootstrapped(connection, timeout_s):
            return True
    except Exception:  # any failure means "not answering yet"; callers retry or report
        return False


def broker_answers_sync(connection: KafkaConnection, timeout_s: float = 3.0) -> bool:
    """`broker_answers` for synchronous callers (`broker up`, `broker status`, the managed
    broker's start-up wait); it runs its own event loop, so never from inside a running one."""
    return asyncio.run(broker_answers(connection, timeout_s))


async def cluster_brokers(connection: KafkaConnection, timeout_s: float = 3.0) -> int:
    """How many brokers the cluster's metadata lists now (0 when it does not answer)."""
    try:
        async with _bootstrapped(connection, timeout_s) as client:
            await asyncio.wait_for(client.force_metadata_update(), timeout_s)
            return len(client.cluster.brokers())
    except Exception:  # not answering yet: the caller retries
        return 0


def cluster_brokers_sync(connection: KafkaConnection, timeout_s: float = 3.0) -> int:
    """`cluster_brokers` for synchronous callers (the managed cluster's start-up wait)."""
    return asyncio.run(cluster_brokers(connection, timeout_s))
