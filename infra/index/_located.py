"""Readers that ask the read model where their sessions' records are, instead of scanning.

An export of ten sessions, a report on one task, a judge's world: each needs a few sessions'
records out of the whole log. The read model knows where every session's records lie on each
partition (`extents`), so such a reader reads those offset ranges only. It may do so only where
the read model has indexed every record the scan would read: each partition up to the end the
reader takes now. Where there is no read model, or it is behind, the reader scans as before and
says so in one line; both ways keep the same records, so the output is the same bytes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rolltape.infra._errors import ReadModelError
from rolltape.infra.index._store import IndexStore
from rolltape.infra.kafka.readback import Located, LogSpan, log_span, scan_line
from rolltape.infra.settings import Settings
from rolltape.projections import Narrowing
from rolltape.schemas import Stream, topic_name
from rolltape.schemas.clients import KafkaConnection, Partition


def store_url(settings: Settings) -> str:
    """The read model's address: `ROLLTAPE_INDEX_URL`, else the SQLite file under the state
    folder named after the topic prefix."""
    if settings.index_url:
        return settings.index_url
    return f"sqlite:{settings.state_dir / 'index' / f'{settings.topic_prefix}.sqlite3'}"


def existing_store(settings: Settings) -> IndexStore:
    """The store the settings name, for reading; a clear error where there is none yet."""
    return _existing(store_url(settings), settings.topic_prefix)


def _existing(url: str, prefix: str) -> IndexStore:
    from rolltape.infra.index import open_store

    if url.startswith("sqlite:") and not Path(url.removeprefix("sqlite:")).expanduser().exists():
        raise ReadModelError(
            f"no read model at {url.removeprefix('sqlite:')}: start the indexer "
            "(`rolltape serve index`), or build it once with `rolltape index rebuild`"
        )
    return open_store(url, prefix=prefix)


@contextlib.contextmanager
def reading_store(settings: Settings) -> Iterator[IndexStore]:
    """`existing_store`, closed on leaving."""
    store = existing_store(settings)
    try:
        yield store
    finally:
        store.close()


def unindexed(store: IndexStore, span: LogSpan) -> dict[Partition, int] | str:
    """Where each partition of `span` that the read model has not indexed to its end stops
    being indexed (a reader reads all from there on: the tail a scan would read too); or why
    the read model cannot stand in for a scan at all: it has indexed past a partition's end,
    so it is of another log (the topics were made anew)."""
    positions = store.positions()
    tails: dict[Partition, int] = {}
    for tp, end in sorted(span.ends.items()):
        at = positions.get((tp.topic, tp.partition), span.starts[tp])
        if at > end:
            return (
                f"the read model has indexed {tp.topic}[{tp.partition}] up to offset {at}, past "
                f"the log's end {end}: it is of topics made anew; `rolltape index rebuild`"
            )
        if at < end:
            tails[Partition(tp.topic, tp.partition)] = max(at, span.starts[tp])
    return tails


def tail_line(located: Located) -> str | None:
    """The one line a reader says when part of what it reads is the unindexed tail."""
    records = sum(located.span.ends[tp] - at for tp, at in located.tails.items())
    if not records:
        return None
    return (
        f"reading the log's last {records} record(s) as a scan: the read model has not indexed "
        "them yet (is `rolltape serve index` running?)"
    )


async def locate_sessions(
    settings: Settings,
    connection: KafkaConnection,
    streams: Sequence[Stream],
    narrowing: Narrowing,
    *,
    with_prefixes: Sequence[str] = (),
    say: Callable[[str], None] | None = None,
) -> Located | None:
    """Where the records of the sessions `narrowing` may pick lie on the streams' topics (and
    of every key starting with one of `with_prefixes`: the checkpoint logs an export's evidence
    needs); None where the reader must scan instead, after telling `say` why in one line."""

    def picked(store: IndexStore, topics: list[str]) -> list[str]:
        ids = store.picked_ids(narrowing, topics)
        for prefix in with_prefixes:
            ids.extend(store.prefixed_ids(prefix, topics))
        return ids

    return _said(await _locate(settings, connection, streams, picked), say)


async def locate_holding(
    settings: Settings,
    connection: KafkaConnection,
    types: Collection[str],
    *,
    say: Callable[[str], None] | None = None,
) -> Located | None:
    """Where the events-stream records of the sessions holding a record of one of `types` lie
    (the prompt events: the few sessions a prompt target's history is in, out of every
    session); None where the reader must scan, after telling `say` why. The unindexed tail is
    read whole, so a session recorded since the indexer last wrote is read too."""
    return _said(
        await _locate(
            settings, connection, [Stream.EVENTS], lambda store, _: store.holding_ids(types)
        ),
        say,
    )


def _said(found: Located | str, say: Callable[[str], None] | None) -> Located | None:
    line = scan_line(found) if isinstance(found, str) else tail_line(found)
    if line is not None and say is not None:
        say(line)
    return None if isinstance(found, str) else found


async def _locate(
    settings: Settings,
    connection: KafkaConnection,
    streams: Sequence[Stream],
    pick: Callable[[IndexStore, list[str]], list[str]],
) -> Located | str:
    span = await log_span(connection, streams, settings.topic_prefix)
    try:
        with reading_store(settings) as store:
            tails = unindexed(store, span)
            if isinstance(tails, str):
                return tails
            topics = [topic_name(s, settings.topic_prefix) for s in streams]
            ids = pick(store, topics)
            ranges = store.extents(ids, topics)
    except ReadModelError as exc:
        return str(exc)
    keys = frozenset(sid.encode() for sid in ids)
    return Located(span, {Partition(*tp): r for tp, r in ranges.items()}, keys, tails)


def _opened(url: str, prefix: str) -> IndexStore | str:
    """The store at `url`, or why there is none to read (a locator's answer, not an error)."""
    try:
        return _existing(url, prefix)
    except ReadModelError as exc:
        return str(exc)


@dataclass(frozen=True)
class IndexHeadLocator:
    """A `rolltape.producers.HeadLocator` over the read model at `url`: a resume starts reading
    the session's partition where the store says (`IndexStore.resume_offset`). Holds only the
    address, so it pickles to a sender process; each call opens the store and closes it."""

    url: str
    prefix: str

    def __call__(self, topic: str, partition: int, session_id: str) -> int | str:
        store = _opened(self.url, self.prefix)
        if isinstance(store, str):
            return store
        try:
            return store.resume_offset(session_id, topic, partition)
        finally:
            store.close()


@dataclass(frozen=True)
class IndexBlobLocator:
    """Where the chunks of some blobs lie on the blobs topic, by the read model at `url`
    (`IndexStore.blob_offsets`): what a judge restoring a world reads instead of the topic."""

    url: str
    prefix: str

    def __call__(self, digests: Collection[str]) -> dict[int, list[int]] | str:
        store = _opened(self.url, self.prefix)
        if isinstance(store, str):
            return store
        try:
            return store.blob_offsets(digests) or "it has none of these blobs"
        finally:
            store.close()


__all__ = [
    "IndexBlobLocator",
    "IndexHeadLocator",
    "existing_store",
    "locate_holding",
    "locate_sessions",
    "reading_store",
    "scan_line",
    "store_url",
    "tail_line",
    "unindexed",
]
