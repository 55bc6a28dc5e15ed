"""Create rolltape's topics idempotently, with their configs (docs/contracts.md, trust domains).

Existing topics keep their partition count: adding partitions would move sessions to other
partitions and break their total order, so a mismatch is reported, never "fixed".
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

from rolltape.infra._errors import InfraError
from rolltape.infra.broker import (
    PrincipalStore,
    create_acls,
    min_insync_for,
    principal_store,
    replication_factor,
    require_connection,
    role_acls,
)
from rolltape.infra.settings import Settings
from rolltape.schemas import TOPIC_SPECS, Role, topic_name
from rolltape.schemas.clients import (
    KafkaClientError,
    KafkaConnection,
    KafkaUnavailableError,
    alter_topic_configs,
    create_topics,
    describe_configs,
)


class TopicError(InfraError):
    """A topic could not be created, or exists in a shape rolltape cannot use; the message
    says which and what to do."""


class TopicAction(StrEnum):
    """What provisioning did to one topic. Partition counts are never among the changes: a
    mismatch stays, reported in `TopicStatus.note`."""

    CREATED = "created"
    UNCHANGED = "unchanged"
    CONFIG_UPDATED = "config updated"


class TopicStatus(BaseModel):
    """One topic after `ensure_topics`, as `broker up` lists it: `partitions` is the count the
    topic has, which may differ from the settings' (then `note` says so)."""

    topic: str
    action: TopicAction
    partitions: int
    note: str = ""


async def ensure_topics(
    connection: KafkaConnection, settings: Settings, *, timeout_s: float = 30.0
) -> list[TopicStatus]:
    """Create missing topics and align configs of existing ones; returns what was done.

    A cluster that answered but has a node down or coming back (the controller moving, a
    request sent to a node that is not ready) is asked again until `timeout_s`: a worker started
    while one node of three restarts must not exit. A cluster that does not answer at all is
    reported at once."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        answered: list[bool] = []
        try:
            return await _ensure_topics(connection, settings, timeout_s, answered)
        except KafkaUnavailableError:
            if not answered or asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(1.0)


async def _ensure_topics(
    connection: KafkaConnection, settings: Settings, timeout_s: float, answered: list[bool]
) -> list[TopicStatus]:
    doing = f"creating the topics of prefix {settings.topic_prefix} on {connection}"
    async with connection.started(
        connection.admin(request_timeout_ms=int(timeout_s * 1000)), doing
    ) as admin:
        answered.append(True)
        existing = {t["topic"]: t for t in await admin.describe_topics()}
        replicas = replication_factor(settings)
        durable = {"min.insync.replicas": str(min_insync_for(replicas))}
        wanted = {
            topic_name(spec.stream, settings.topic_prefix): {**spec.configs, **durable}
            for spec in TOPIC_SPECS
        }
        missing = [name for name in wanted if name not in existing]
        statuses: list[TopicStatus] = []
        if missing:
            await create_topics(
                admin,
                missing,
                partitions=settings.partitions,
                replication_factor=replicas,
                configs=wanted,
            )
            statuses += [
                TopicStatus(topic=n, action=TopicAction.CREATED, partitions=settings.partitions)
                for n in missing
            ]
        present = [name for name in wanted if name in existing]
        if present:
            current = await describe_configs(admin, "topic", present)
            drifted = [
                n
                for n in present
                if any(current.get(n, {}).get(k) != v for k, v in wanted[n].items())
            ]
            if drifted:
                await alter_topic_configs(admin, {n: wanted[n] for n in drifted})
            for name in present:
                parts = len(existing[name]["partitions"])
                note = ""
                if parts != settings.partitions:
                    note = (
                        f"has {parts} partitions, settings say {settings.partitions}; left as is "
                        "(repartitioning would break per-session order)"
                    )
                action = TopicAction.CONFIG_UPDATED if name in drifted else TopicAction.UNCHANGED
                statuses.append(TopicStatus(topic=name, action=action, partitions=parts, note=note))
        order = list(wanted)
        return sorted(statuses, key=lambda s: order.index(s.topic))


def ensure_topics_sync(connection: KafkaConnection, settings: Settings) -> list[TopicStatus]:
    """`ensure_topics` for synchronous callers; it runs its own event loop, so never call it
    from inside a running one."""
    return asyncio.run(ensure_topics(connection, settings))


async def delete_topics(
    connection: KafkaConnection, prefix: str, *, timeout_s: float = 30.0
) -> list[str]:
    """Delete every rolltape topic under `prefix` (benchmarks and scratch runs clean up after
    themselves); returns the names deleted. Never call it on a prefix that holds real sessions."""
    doing = f"deleting the topics of prefix {prefix} on {connection}"
    async with connection.started(
        connection.admin(request_timeout_ms=int(timeout_s * 1000)), doing
    ) as admin:
        existing = set(await admin.list_topics())
        names = [topic_name(spec.stream, prefix) for spec in TOPIC_SPECS]
        doomed = [n for n in names if n in existing]
        if doomed:
            await admin.delete_topics(doomed)
        return doomed


async def ensure_plain_topics(
    connection: KafkaConnection, names: list[str], *, partitions: int, replication_factor: int
) -> None:
    """Create internal topics (the worker's judge requests and results) if missing. They must
    have as many partitions as the raw topics: results return to their session's partition."""
    doing = f"creating the worker's internal topics on {connection}"
    async with connection.started(connection.admin(), doing) as admin:
        existing = {t["topic"]: t for t in await admin.describe_topics()}
        for name in names:
            if name in existing and len(existing[name]["partitions"]) != partitions:
                raise TopicError(
                    f"topic {name} has {len(existing[name]['partitions'])} partitions, the raw "
                    f"topics {partitions}; delete it so the worker can recreate it"
                )
        missing = [n for n in names if n not in existing]
        if missing:
            await create_topics(
                admin, missing, partitions=partitions, replication_factor=replication_factor
            )


def ensure_plain_topics_sync(
    connection: KafkaConnection, names: list[str], *, partitions: int, replication_factor: int
) -> None:
    """`ensure_plain_topics` for synchronous callers (the worker's setup); it runs its own
    event loop, so never call it from inside a running one."""
    asyncio.run(
        ensure_plain_topics(
            connection, names, partitions=partitions, replication_factor=replication_factor
        )
    )


async def delete_prefixed_topics(connection: KafkaConnection, prefix: str) -> list[str]:
    """Delete every topic whose name starts with `prefix.` or `prefix-` (a scratch run's raw
    topics and its worker's internal ones). Only for prefixes made up for one run."""
    doing = f"deleting the topics of the scratch prefix {prefix} on {connection}"
    async with connection.started(connection.admin(), doing) as admin:
        doomed = [
            t
            for t in await admin.list_topics()
            if t.startswith(f"{prefix}.") or t.startswith(f"{prefix}-")
        ]
        if doomed:
            await admin.delete_topics(doomed)
        return doomed


class PartitionHealth(BaseModel):
    """Partitions that are not fully replicated: `offline` (no leader: unreadable, unwritable)
    and `under_replicated` (fewer in-sync replicas than replicas: writes with acks=all wait on
    min ISR), as `topic/partition`."""

    offline: list[str] = []
    under_replicated: list[str] = []
    partitions: int = 0
    """Partitions looked at (every topic this connection may describe)."""


async def partition_health(connection: KafkaConnection) -> PartitionHealth:
    """How the partitions of every topic `connection` may describe are replicated now."""
    doing = f"describing the topics on {connection}"
    async with connection.started(connection.admin(), doing) as admin:
        topics = await admin.describe_topics()
    health = PartitionHealth()
    for topic in sorted(topics, key=lambda t: t["topic"]):
        for part in sorted(topic["partitions"], key=lambda p: p["partition"]):
            name = f"{topic['topic']}/{part['partition']}"
            health.partitions += 1
            if part["leader"] < 0:
                health.offline.append(name)
            elif len(part["isr"]) < len(part["replicas"]):
                health.under_replicated.append(name)
    return health


def until_healthy(connection: KafkaConnection, within_s: float = 120.0) -> bool:
    """Whether the cluster reaches no offline and no under-replicated partition within
    `within_s` (asked every 2 s; a node still coming back may refuse an answer meanwhile)."""
    deadline = time.monotonic() + within_s
    while True:
        with contextlib.suppress(KafkaClientError):
            health = asyncio.run(partition_health(connection))
            if not health.offline and not health.under_replicated:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(2)


async def active_controller(connection: KafkaConnection) -> int:
    """The node id of the cluster's active controller (what a fault test kills first)."""
    async with connection.started(connection.admin(), f"describing {connection}") as client:
        described: Any = await client.describe_cluster()
        return int(described["controller_id"])


def provision(settings: Settings) -> list[TopicStatus]:
    """Make `settings.topic_prefix` ready to record to: its topics, and where rolltape keeps the
    cluster's principals (the managed broker, or ROLLTAPE_PRINCIPALS_FILE), every principal's ACLs
    on them. Idempotent; `broker up`, the demo and the worker's setup call it."""
    admin = require_connection(settings, Role.ADMIN)
    statuses = ensure_topics_sync(admin, settings)
    store = principal_store(settings)
    if store is not None and admin.principal is not None:
        asyncio.run(grant_prefix(admin, store, settings.topic_prefix, settings.worker_group))
    return statuses


async def grant_prefix(
    admin: KafkaConnection, store: PrincipalStore, prefix: str, worker_group: str
) -> int:
    """Install every known principal's ACLs on `prefix`'s topics and remember the prefix (a
    principal added later gets its ACLs on every remembered prefix)."""
    grants = {p.name: role_acls(p.role, prefix, worker_group) for p in store.principals()}
    created = await create_acls(admin, grants)
    store.remember_prefix(prefix, worker_group)
    return created


@contextlib.contextmanager
def scratch_prefix(settings: Settings, stem: str, *, partitions: int) -> Iterator[Settings]:
    """Settings for a fresh topic prefix `<stem><random>`, provisioned like a real one (topics,
    and every principal's ACLs where rolltape keeps principals) and deleted afterwards, with the
    worker's internal topics: benchmarks never mix their records with real sessions."""
    prefix = f"{stem}{uuid.uuid4().hex[:10]}"
    # Pinned to the cluster and principals file in use now, so the scratch settings also work
    # with another state folder (a receiver's) and in child processes.
    store = principal_store(settings)
    scratch = settings.model_copy(
        update={
            "topic_prefix": prefix,
            "partitions": partitions,
            "worker_id": None,
            "bootstrap": require_connection(settings, Role.ADMIN).bootstrap,
            "principals_file": store.path if store is not None else None,
        }
    )
    provision(scratch)
    try:
        yield scratch
    finally:
        asyncio.run(delete_prefixed_topics(require_connection(scratch, Role.ADMIN), prefix))
