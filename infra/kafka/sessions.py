"""The one scanner of the log into sessions: every record read through the codec (hash
checked), counted, and filed under its session in a spill on disk.

Exports, reports, batch summaries, cron's review and the demo all read sessions this way, so
they leave out the same records (bytes that are not an envelope, envelopes whose content does
not match their hash) and count them the same way. Memory stays flat however long the log: the
records wait in the spill (`rolltape.infra.kafka.spill`) and come back a session at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Self, TypeVar

from rolltape.infra.kafka.keyring import keyring_if_any
from rolltape.infra.kafka.readback import Located, read_located, read_records
from rolltape.infra.kafka.spill import SessionRecords, Spill
from rolltape.infra.settings import Settings
from rolltape.processors.audit import CHECKPOINT_LOG_PREFIX
from rolltape.projections import Narrowing, checked_event, session_start
from rolltape.schemas import HUMAN_CHAIN, Stream, TypedEvent
from rolltape.schemas.clients import KafkaConnection

if TYPE_CHECKING:  # the crypto library loads only where sealed content is opened
    from rolltape.schemas.privacy import Access, Keyring

S = TypeVar("S", bound="SessionScan")


class SessionScan:
    """One scan's records filed by session, read up to the end offsets taken when the scan
    began. `keeps` decides which intact records are filed (the others are counted only). Close
    it (or use it as a context manager) to remove the spill."""

    def __init__(self, keeps: Callable[[TypedEvent], bool], keyring: Keyring | None = None) -> None:
        self.keeps = keeps
        self.keyring = keyring
        """Opens sealed content (`opened`); without one, events are as recorded."""
        self.spill = Spill()
        self.bounds: dict[str, dict[int, tuple[int, int]]] = {}
        """topic -> partition -> (first, end) offsets the scan read."""
        self.records = 0
        self.unreadable = 0
        """Records that are not envelopes (the live audit dead-lettered them)."""
        self.tampered = 0
        """Records whose content does not match their hash: left out, so their chain shows a
        gap."""
        self.by_key: dict[bytes | None, list[int]] = {}
        """Record key -> [records, unreadable, tampered]: what `source(picked)` sums."""

    def add(self, value: bytes, key: bytes | None = None) -> None:
        """Count one record (under its key too) and file it under its session when it is intact
        and kept."""
        self.records += 1
        counts = self.by_key.get(key)
        if counts is None:
            counts = self.by_key[key] = [0, 0, 0]
        counts[0] += 1
        env, problem = checked_event(value)
        if env is None:
            if problem == "tampered":
                self.tampered += 1
                counts[2] += 1
            else:
                self.unreadable += 1
                counts[1] += 1
            return
        if self.keeps(env):
            self.spill.add(env, value)

    def sessions(self, prefix: str = "") -> Iterator[SessionRecords]:
        """Every session filed whose id starts with `prefix`, by id, one at a time."""
        return self.spill.sessions(prefix)

    def session(self, session_id: str) -> SessionRecords | None:
        return self.spill.session(session_id)

    def picked(self, narrowing: Narrowing) -> Iterator[SessionRecords]:
        """The sessions filed that `narrowing` picks for sure, by id: the same whether the
        read model located them or a scan filed every session (`Narrowing.picks`)."""
        prefixes = narrowing.id_prefixes() or ("",)
        # Sorted, none inside another: each id comes once, and in order.
        outer = [p for p in prefixes if not any(p != q and p.startswith(q) for q in prefixes)]
        for prefix in outer:
            for session in self.spill.sessions(prefix):
                if narrowing.picks(session.session_id, session_start(session.events)):
                    yield session

    def opened(self, session: SessionRecords) -> tuple[SessionRecords | None, Access]:
        """The session with its sealed content opened by the scan's keyring, or None and why
        not: `erased` (its data key's tombstone was read) or `key unavailable` (no key, or no
        keyring). A reader of content leaves such a session out and counts it; it never reads
        the empty fields a sealed payload keeps in clear as if they were what was said."""
        given = [*session.events, *session.derived]  # verdicts about content are sealed too
        if not any("sealed" in e.payload for e in given):
            return session, "clear"
        if self.keyring is None:
            return None, "key unavailable"
        opened, access = self.keyring.open_events(given)
        if opened is None:
            return None, access
        events = opened[: len(session.events)]
        return SessionRecords(session.session_id, events, opened[len(session.events) :]), access

    def source(self, picked: Collection[str] | None = None) -> dict[str, Any]:
        """What was read: end offsets per partition and the counts of records left out; with
        `picked`, the counts of those sessions' records only (what a read of just those
        sessions, by the read model, counts the same)."""
        records, unreadable, tampered = self.records, self.unreadable, self.tampered
        if picked is not None:
            keys = {sid.encode() for sid in picked}
            sums = [sum(c[i] for k, c in self.by_key.items() if k in keys) for i in range(3)]
            records, unreadable, tampered = sums
        return {
            "topics": {
                topic: {str(p): end for p, (_, end) in sorted(parts.items())}
                for topic, parts in sorted(self.bounds.items())
            },
            "records_read": records,
            "unreadable_records": unreadable,
            "tampered_records": tampered,
        }

    def close(self) -> None:
        self.spill.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def scan_sessions(
    connection: KafkaConnection,
    streams: Iterable[Stream],
    scan: S,
    *,
    prefix: str,
    on_record: Callable[[int, int], None] | None = None,
    located: Located | None = None,
) -> S:
    """Read the streams' topics to their current ends into `scan` (with `located`, only the
    records the read model located, up to its span's ends); `on_record(read, total)` reports
    progress. On any error the scan is closed (its spill removed) and the error raised."""
    try:
        total = 0
        records = (
            read_records(connection, list(streams), prefix=prefix, bounds=scan.bounds)
            if located is None
            else read_located(connection, list(streams), located, prefix=prefix, bounds=scan.bounds)
        )
        async for record in records:
            if not total:
                total = (
                    sum(e - s for parts in scan.bounds.values() for s, e in parts.values())
                    if located is None
                    else sum(e - s for ranges in located.ranges.values() for s, e in ranges)
                )
            scan.add(record.value, record.key)
            if on_record is not None:
                on_record(scan.records, total)
    except BaseException:
        scan.close()
        raise
    return scan


LIVE_STREAMS = (Stream.EVENTS, Stream.METRICS, Stream.RULES, Stream.VERDICTS, Stream.FILTERED)
"""A session's live chains: what `rolltape report` and the console read of it."""
_LIVE = {s.value for s in LIVE_STREAMS} | {HUMAN_CHAIN}
"""The live chains, and the reviewers' (a human verdict stands whatever the judge version)."""


def _reported(env: TypedEvent) -> bool:
    """A record of a live chain of a session (a checkpoint log is not a session)."""
    return env.stream in _LIVE and not env.session_id.startswith(CHECKPOINT_LOG_PREFIX)


async def read_sessions(
    connection: KafkaConnection,
    prefix: str,
    keys_from: Settings | None = None,
    *,
    located: Located | None = None,
) -> dict[str, list[TypedEvent]]:
    """Every session's usable events on the live chains (tampered records left out), each
    chain's events in the order they were read (with `located`, the sessions the read model
    located only). With `keys_from`, sessions recorded with a subject are opened with the keys
    topic and that machine's KEK; one that cannot be opened (erased, no key) stays sealed, and
    the report leaves it out saying so."""
    keyring = None if keys_from is None else await keyring_if_any(connection, keys_from)
    scan = SessionScan(_reported, keyring)
    with await scan_sessions(
        connection, LIVE_STREAMS, scan, prefix=prefix, located=located
    ) as scan:
        out = {}
        for recorded in scan.sessions():
            opened, _ = scan.opened(recorded)
            session = opened or recorded
            out[session.session_id] = [*session.events, *session.derived]
        return out
