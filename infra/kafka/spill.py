"""An export's scratch file: records filed by session, and chosen trajectories in export order,
sorted on disk so an export's memory stays flat however long the log is.

SQLite, from the standard library, does the sorting: its sorter merges runs through temporary
files once its cache is full, which is the external sort an export needs, with no hand-written
run files. The file lives in a temporary folder removed on close; nothing in it outlives the
export, and nothing in it is read by anyone else. Records are filed as the bytes they were read
as, intact (the codec checked them when they were filed) and with whether their bytes are
canonical, and become events again when their session is read back (`reread_event`: decoded and
typed, the checks not repeated): cheaper than pickling the event, which cost as much to write
as JSON costs to decode. Chosen trajectories are stored pickled.
"""

from __future__ import annotations

import pickle
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count, groupby
from pathlib import Path

from rolltape.projections import Chosen, SortKey
from rolltape.schemas import Stream, TypedEvent, reread_event

CACHE_KIB = 16 * 1024
"""SQLite's page cache and sorter memory (16 MiB): past it, pages and sort runs go to disk."""
_BATCH = 5000


@dataclass(frozen=True)
class SessionRecords:
    """One session's filed records: its events-stream events and its derived ones, in the order
    they were read."""

    session_id: str
    events: list[TypedEvent]
    derived: list[TypedEvent]


class Spill:
    """The scratch database: add records, then read them back a session at a time."""

    def __init__(self) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="rolltape-spill-")
        self._db = sqlite3.connect(Path(self._folder.name) / "spill.sqlite", isolation_level=None)
        for pragma in ("journal_mode=OFF", "synchronous=OFF", "temp_store=FILE"):
            self._db.execute(f"PRAGMA {pragma}")
        self._db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        self._db.execute(
            "CREATE TABLE records (session_id TEXT NOT NULL, events INTEGER NOT NULL, "
            "record BLOB NOT NULL, canonical INTEGER NOT NULL)"
        )
        self._pending: list[tuple[str, int, bytes, int]] = []
        self._indexed = False
        self._stores = count()

    def add(self, event: TypedEvent, record: bytes) -> None:
        """File one record under its session: the bytes `event` was read from (intact: the
        spill reads it back without checking it again)."""
        if self._indexed:
            raise RuntimeError("records are filed before the first read of the spill")
        if not event.intact:
            raise ValueError(f"{event!r} is not intact: the spill files checked records only")
        is_event = int(event.stream == Stream.EVENTS.value)
        self._pending.append((event.session_id, is_event, record, int(event.canonical)))
        if len(self._pending) >= _BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT INTO records VALUES (?, ?, ?, ?)", self._pending)
            self._db.execute("COMMIT")
            self._pending.clear()

    def _ready(self) -> None:
        if not self._indexed:
            self._flush()
            self._db.execute("CREATE INDEX records_by_session ON records (session_id)")
            self._indexed = True

    def sessions(self, prefix: str = "") -> Iterator[SessionRecords]:
        """Every session whose id starts with `prefix`, by id, one at a time."""
        self._ready()
        cursor = self._db.execute(
            "SELECT session_id, events, record, canonical FROM records WHERE session_id >= ? "
            "ORDER BY session_id, rowid",
            (prefix,),
        )
        for session_id, rows in groupby(cursor, key=lambda row: row[0]):
            if not session_id.startswith(prefix):
                break
            yield _session(session_id, rows)

    def session(self, session_id: str) -> SessionRecords | None:
        """One session's records, or None when none were filed."""
        self._ready()
        rows = self._db.execute(
            "SELECT session_id, events, record, canonical FROM records WHERE session_id = ? "
            "ORDER BY rowid",
            (session_id,),
        ).fetchall()
        return _session(session_id, iter(rows)) if rows else None

    def store(self) -> SpilledStore:
        """A fresh `ChosenStore` in this file (one per export run over these records)."""
        return SpilledStore(self._db, f"chosen_{next(self._stores)}")

    def close(self) -> None:
        self._db.close()
        self._folder.cleanup()


def _session(session_id: str, rows: Iterator[tuple[str, int, bytes, int]]) -> SessionRecords:
    events: list[TypedEvent] = []
    derived: list[TypedEvent] = []
    for _, is_event, blob, canonical in rows:
        event = reread_event(blob, canonical=bool(canonical))
        (events if is_event else derived).append(event)
    return SessionRecords(session_id, events, derived)


class SpilledStore:
    """A `ChosenStore` in a table of the spill, plus the evidence lines of the run's sessions."""

    def __init__(self, db: sqlite3.Connection, table: str) -> None:
        self._db = db
        self._table = table
        self._proofs = f"{table}_proofs"
        db.execute(f"CREATE TABLE {table} (a INTEGER, b TEXT, c TEXT, chosen BLOB NOT NULL)")
        db.execute(f"CREATE TABLE {self._proofs} (session_id TEXT PRIMARY KEY, line BLOB)")
        self._pending: list[tuple[int, str, str, bytes]] = []

    def add(self, key: SortKey, chosen: Chosen) -> None:
        self._pending.append((*key, pickle.dumps(chosen, protocol=5)))
        if len(self._pending) >= _BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._db.execute("BEGIN")
            self._db.executemany(f"INSERT INTO {self._table} VALUES (?, ?, ?, ?)", self._pending)
            self._db.execute("COMMIT")
            self._pending.clear()

    def ordered(self) -> Iterator[Chosen]:
        self._flush()
        cursor = self._db.execute(f"SELECT chosen FROM {self._table} ORDER BY a, b, c")
        for (blob,) in cursor:
            chosen = pickle.loads(blob)
            assert isinstance(chosen, Chosen)
            yield chosen

    def add_proof(self, session_id: str, line: bytes) -> None:
        """Keep a session's evidence line until the export writes it."""
        self._db.execute(f"INSERT INTO {self._proofs} VALUES (?, ?)", (session_id, line))

    def proof(self, session_id: str) -> bytes | None:
        row = self._db.execute(
            f"SELECT line FROM {self._proofs} WHERE session_id = ?", (session_id,)
        ).fetchone()
        return None if row is None else bytes(row[0])

    def proofs_except(self, written: set[str]) -> Iterator[bytes]:
        """The evidence lines of sessions not in `written`, by session id."""
        cursor = self._db.execute(f"SELECT session_id, line FROM {self._proofs} ORDER BY 1")
        for session_id, line in cursor:
            if session_id not in written:
                yield bytes(line)
