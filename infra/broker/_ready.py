"""Is a broker answering? A metadata round trip, not a TCP connect: a listening socket on a
broker that is still loading its log does not serve requests yet."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from rolltape.schemas.clients import KafkaConnection


async def broker_answers(connection: KafkaConnection, timeout_s: float = 3.0) -> bool:
    """True when a metadata request over `connection` (authenticated, when it has credentials)
    gets a reply within `timeout_s`."""
    client = connection.client(request_timeout_ms=int(timeout_s * 1000))
    quiet = logging.getLogger("aiokafka")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        await asyncio.wait_for(client.bootstrap(), timeout_s)
        return True
    except Exception:  # any failure means "not answering yet"; callers retry or report
        return False
    finally:
        with contextlib.suppress(Exception):
            await client.close()
        quiet.setLevel(level)


def broker_answers_sync(connection: KafkaConnection, timeout_s: float = 3.0) -> bool:
    """`broker_answers` for synchronous callers (`broker up`, `broker status`, the managed
    broker's start-up wait); it runs its own event loop, so never from inside a running one."""
    return asyncio.run(broker_answers(connection, timeout_s))


async def cluster_brokers(connection: KafkaConnection, timeout_s: float = 3.0) -> int:
    """How many brokers the cluster's metadata lists now (0 when it does not answer)."""
    client = connection.client(request_timeout_ms=int(timeout_s * 1000))
    quiet = logging.getLogger("aiokafka")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        await asyncio.wait_for(client.bootstrap(), timeout_s)
        await asyncio.wait_for(client.force_metadata_update(), timeout_s)
        return len(client.cluster.brokers())
    except Exception:  # not answering yet: the caller retries
        return 0
    finally:
        with contextlib.suppress(Exception):
            await client.close()
        quiet.setLevel(level)


def cluster_brokers_sync(connection: KafkaConnection, timeout_s: float = 3.0) -> int:
    """`cluster_brokers` for synchronous callers (the managed cluster's start-up wait)."""
    return asyncio.run(cluster_brokers(connection, timeout_s))
