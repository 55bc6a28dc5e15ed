"""Create rolltape's topics idempotently, with the configs DESIGN.md asks for.

Existing topics keep their partition count: adding partitions would move sessions to other
partitions and break their total order, so a mismatch is reported, never "fixed".
"""

from __future__ import annotations

import asyncio
from enum import StrEnum

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from pydantic import BaseModel

from rolltape.infra.settings import Settings
from rolltape.schemas import TOPIC_SPECS, topic_name

_ALREADY_EXISTS = 36


class TopicAction(StrEnum):
    CREATED = "created"
    UNCHANGED = "unchanged"
    CONFIG_UPDATED = "config updated"


class TopicStatus(BaseModel):
    topic: str
    action: TopicAction
    partitions: int
    note: str = ""


async def ensure_topics(
    bootstrap: str, settings: Settings, *, timeout_s: float = 30.0
) -> list[TopicStatus]:
    """Create missing topics and align configs of existing ones; returns what was done."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000)
    )
    await admin.start()
    try:
        existing = {t["topic"]: t for t in await admin.describe_topics()}
        wanted = {topic_name(spec.stream, settings.topic_prefix): spec for spec in TOPIC_SPECS}
        missing = [name for name in wanted if name not in existing]
        statuses: list[TopicStatus] = []
        if missing:
            response = await admin.create_topics(
                [
                    NewTopic(
                        name=name,
                        num_partitions=settings.partitions,
                        replication_factor=settings.replication_factor,
                        topic_configs=dict(wanted[name].configs),
                    )
                    for name in missing
                ]
            )
            for name, code, *rest in response.topic_errors:
                if code not in (0, _ALREADY_EXISTS):
                    raise RuntimeError(
                        f"creating topic {name} failed with error code {code}: {rest}"
                    )
            statuses += [
                TopicStatus(topic=n, action=TopicAction.CREATED, partitions=settings.partitions)
                for n in missing
            ]
        present = [name for name in wanted if name in existing]
        if present:
            described = await admin.describe_configs(
                [
                    ConfigResource(ConfigResourceType.TOPIC, name, dict(wanted[name].configs))
                    for name in present
                ]
            )
            current: dict[str, dict[str, str]] = {}
            for response in described:
                for _code, _msg, _rtype, name, entries in response.resources:
                    current[name] = {entry[0]: entry[1] for entry in entries}
            drifted = [
                n
                for n in present
                if any(current.get(n, {}).get(k) != v for k, v in wanted[n].configs.items())
            ]
            if drifted:
                await admin.alter_configs(
                    [
                        ConfigResource(ConfigResourceType.TOPIC, n, dict(wanted[n].configs))
                        for n in drifted
                    ]
                )
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
    finally:
        await admin.close()


def ensure_topics_sync(bootstrap: str, settings: Settings) -> list[TopicStatus]:
    return asyncio.run(ensure_topics(bootstrap, settings))


async def delete_topics(bootstrap: str, prefix: str, *, timeout_s: float = 30.0) -> list[str]:
    """Delete every rolltape topic under `prefix` (benchmarks and scratch runs clean up after
    themselves); returns the names deleted. Never call it on a prefix that holds real sessions."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000)
    )
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        names = [topic_name(spec.stream, prefix) for spec in TOPIC_SPECS]
        doomed = [n for n in names if n in existing]
        if doomed:
            await admin.delete_topics(doomed)
        return doomed
    finally:
        await admin.close()


async def ensure_plain_topics(
    bootstrap: str, names: list[str], *, partitions: int, replication_factor: int
) -> None:
    """Create internal topics (the worker's judge requests and results) if missing. They must
    have as many partitions as the raw topics: results return to their session's partition."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = {t["topic"]: t for t in await admin.describe_topics()}
        for name in names:
            if name in existing and len(existing[name]["partitions"]) != partitions:
                raise RuntimeError(
                    f"topic {name} has {len(existing[name]['partitions'])} partitions, the raw "
                    f"topics {partitions}; delete it so the worker can recreate it"
                )
        missing = [n for n in names if n not in existing]
        if missing:
            response = await admin.create_topics(
                [NewTopic(n, partitions, replication_factor) for n in missing]
            )
            for name, code, *rest in response.topic_errors:
                if code not in (0, _ALREADY_EXISTS):
                    raise RuntimeError(
                        f"creating topic {name} failed with error code {code}: {rest}"
                    )
    finally:
        await admin.close()


def ensure_plain_topics_sync(
    bootstrap: str, names: list[str], *, partitions: int, replication_factor: int
) -> None:
    asyncio.run(
        ensure_plain_topics(
            bootstrap, names, partitions=partitions, replication_factor=replication_factor
        )
    )


async def delete_prefixed_topics(bootstrap: str, prefix: str) -> list[str]:
    """Delete every topic whose name starts with `prefix.` or `prefix-` (a scratch run's raw
    topics and its worker's internal ones). Only for prefixes made up for one run."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        doomed = [
            t
            for t in await admin.list_topics()
            if t.startswith(f"{prefix}.") or t.startswith(f"{prefix}-")
        ]
        if doomed:
            await admin.delete_topics(doomed)
        return doomed
    finally:
        await admin.close()
