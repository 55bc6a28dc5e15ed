"""`rolltape serve index`, `index status`, `index rebuild`: the read model kept, looked at,
rebuilt.

The indexer reads as the reader principal (every topic of the prefix, its own group), keys
subjects with the project's redaction secret (so a subject's hash is the one a redaction policy
writes on every host that shares the secret), and writes the store the settings name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from rolltape.infra._errors import ReadModelError
from rolltape.infra.broker import require_connection
from rolltape.infra.index import (
    INDEXED_STREAMS,
    Indexer,
    IndexStore,
    open_store,
    reading_store,
    store_url,
)
from rolltape.infra.index import IndexProgress as IndexProgress
from rolltape.infra.kafka.keyring import keys_follower_if_any
from rolltape.infra.keys import redaction_secret
from rolltape.infra.settings import Settings
from rolltape.projections.index import keyed_subject
from rolltape.schemas import Role, topic_name
from rolltape.schemas.clients import LogReader, group_members, partitions_of


def _indexer(settings: Settings, store: IndexStore, group_id: str) -> Indexer:
    connection = require_connection(settings, Role.READER)
    return Indexer(
        connection,
        store,
        prefix=settings.topic_prefix,
        group_id=group_id,
        subject_hash=keyed_subject(redaction_secret(settings)),
        batch_records=settings.index_batch_records,
        keys=keys_follower_if_any(connection, settings, erasures=False),
    )


async def serve_index(
    settings: Settings,
    stop: asyncio.Event,
    *,
    on_started: Callable[[str, str], None] | None = None,
    on_batch: Callable[[IndexProgress], None] | None = None,
) -> IndexProgress:
    """Keep the read model up to date until `stop` is set. `on_started(bootstrap, store)`
    hears where it reads and writes. Restarts go on from the store's positions."""
    store = open_store(store_url(settings), prefix=settings.topic_prefix)
    try:
        indexer = _indexer(settings, store, settings.index_group_id)
        if on_started is not None:
            on_started(indexer.connection.bootstrap, store.describe())
        return await indexer.run(stop, on_batch=on_batch)
    finally:
        store.close()


class PartitionLag(BaseModel):
    model_config = ConfigDict(frozen=True)

    topic: str
    partition: int
    indexed_to: int | None
    """The next offset the store will index (None: nothing indexed there yet)."""
    end: int
    lag: int
    last_ms: int | None
    """Broker time of the last record indexed there."""


class IndexStatus(BaseModel):
    model_config = ConfigDict(frozen=True)

    store: str
    schema_version: int
    sessions: int
    group: str
    members: int
    """Indexers in the group now."""
    partitions: tuple[PartitionLag, ...]
    lag: int
    last_ms: int | None
    unreadable: int
    tampered: int


async def index_status(settings: Settings) -> IndexStatus:
    """Where the read model stands against the log, partition by partition."""
    with reading_store(settings) as store:
        info = store.info()
    connection = require_connection(settings, Role.READER)
    topics = [topic_name(s, settings.topic_prefix) for s in INDEXED_STREAMS]
    partitions = await partitions_of(connection, topics)
    async with LogReader(connection) as reader:
        ends = await reader.end_offsets(partitions) if partitions else {}
    stored = {(p.topic, p.partition): p for p in info.positions}
    rows = []
    for p in sorted(ends):
        at = stored.get((p.topic, p.partition))
        indexed_to = None if at is None else at.next_offset
        rows.append(
            PartitionLag(
                topic=p.topic,
                partition=p.partition,
                indexed_to=indexed_to,
                end=ends[p],
                lag=max(0, ends[p] - (indexed_to or 0)),
                last_ms=None if at is None else at.last_ms,
            )
        )
    members = await group_members(connection, settings.index_group_id)
    times = [r.last_ms for r in rows if r.last_ms is not None]
    return IndexStatus(
        store=info.store,
        schema_version=info.schema_version,
        sessions=info.sessions,
        group=settings.index_group_id,
        members=members,
        partitions=tuple(rows),
        lag=sum(r.lag for r in rows),
        last_ms=max(times) if times else None,
        unreadable=sum(p.unreadable for p in info.positions),
        tampered=sum(p.tampered for p in info.positions),
    )


async def rebuild_index(
    settings: Settings,
    *,
    url: str | None = None,
    on_batch: Callable[[IndexProgress], None] | None = None,
) -> tuple[str, IndexProgress]:
    """Drop the read model at `url` (the settings' store unless given) and build it again from
    the log, up to the end offsets the log had when the rebuild got its partitions. Refused
    while indexers write the settings' store. Returns (store, progress)."""
    url = url or store_url(settings)
    connection = require_connection(settings, Role.READER)
    if url == store_url(settings):
        members = await group_members(connection, settings.index_group_id)
        if members:
            raise ReadModelError(
                f"{members} indexer(s) of group {settings.index_group_id} write this read model: "
                "stop them (`rolltape serve index`) before rebuilding it, or rebuild into "
                "another store with --store URL"
            )
    store = open_store(url, prefix=settings.topic_prefix, create=False)
    try:
        store.drop()
        store.create(settings.topic_prefix)
        indexer = _indexer(settings, store, f"{settings.index_group_id}-rebuild")
        progress = await indexer.run(asyncio.Event(), until_caught_up=True, on_batch=on_batch)
        return store.describe(), progress
    finally:
        store.close()
