"""The receiver's memory across restarts: which traces have sessions, which spans are recorded.

A trace's session chain is written by one receiver process, which holds the chain's head in
memory. After a restart that head is gone, so a trace seen before must never start its session
again (a second chain from seq 0 under the same session id is a fork): the journal knows every
trace's last session, and a trace that comes back continues in a new, linked session. It also
knows the span ids recorded lately, so a batch the exporter sends again after a restart is a
redelivery, not a duplicate. And it holds what was acknowledged but not recorded yet: GenAI log
records waiting for their span, spans waiting for their log records (`held`), so a restart
joins them as the first run would have.

A trace is journaled before its session's first record is sent; span ids after
their records are durable and before the batch is acknowledged. SQLite (WAL)
keeps both; span ids older than the redelivery window are pruned at start. Commits are
`synchronous=NORMAL` in WAL mode: durable when the receiver process dies (the case that matters:
the exporter then resends), not when the machine loses power, which is also what a
single-broker Kafka on the same machine promises (it leaves flushing to the page cache).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (
    trace_id TEXT PRIMARY KEY,
    generation INTEGER NOT NULL,
    session_id TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS spans (
    trace_id TEXT NOT NULL,
    span_ids TEXT NOT NULL,
    recorded_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS spans_of_trace ON spans (trace_id);
CREATE TABLE IF NOT EXISTS held (
    trace_id TEXT NOT NULL,
    item TEXT NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (trace_id, item)
) WITHOUT ROWID;
"""


class Journal:
    """The journal of one receiver, in the SQLite file at `path` (created with its folder).
    Opening it forgets span ids older than `redelivery_window_s`: an exporter resending a batch
    later than that would be recorded twice, so the window must outlast its retries."""

    def __init__(self, path: Path, redelivery_window_s: float = 86_400.0) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        # The worker processes of one receiver share the file: a writer waits for another's
        # transaction (a few milliseconds) instead of failing.
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._db.execute(
            "DELETE FROM spans WHERE recorded_at < ?", (time.time() - redelivery_window_s,)
        )

    def trace(self, trace_id: str) -> tuple[int, str] | None:
        """(generation, session id) of the trace's last session, if it ever had one."""
        return self.traces([trace_id]).get(trace_id)

    def traces(self, trace_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        """`trace` of many traces, in a query per `_CHUNK` of them (a batch's new traces: a
        query each was a tenth of what a batch cost)."""
        found: dict[str, tuple[int, str]] = {}
        for chunk in _chunks(trace_ids):
            rows = self._db.execute(
                "SELECT trace_id, generation, session_id FROM traces WHERE trace_id IN "
                f"({','.join('?' * len(chunk))})",
                chunk,
            )
            found.update({str(t): (int(g), str(sid)) for t, g, sid in rows})
        return found

    def recorded_spans(self, trace_ids: Sequence[str]) -> dict[str, set[str]]:
        """The span ids recorded of each of `trace_ids` (those with none are left out)."""
        found: dict[str, set[str]] = {}
        for chunk in _chunks(trace_ids):
            rows = self._db.execute(
                "SELECT trace_id, span_ids FROM spans WHERE trace_id IN "
                f"({','.join('?' * len(chunk))})",
                chunk,
            )
            for trace_id, ids in rows:
                found.setdefault(str(trace_id), set()).update(str(ids).split(","))
        return found

    def open_sessions(self, entries: Iterable[tuple[str, int, str]]) -> None:
        """Journal (trace, generation, session id) durably, before the sessions start."""
        with self._transaction():
            self._db.executemany("INSERT OR REPLACE INTO traces VALUES (?, ?, ?)", list(entries))

    def spans_recorded(self, spans: Iterable[tuple[str, str]]) -> None:
        """Journal (trace, span) pairs whose records are durable: one row per trace and batch
        (the span ids joined), since a batch is journaled whole."""
        self.settle(spans)

    def held(self) -> list[tuple[str, str, bytes]]:
        """(trace, item, body) of everything held: what a receiver that
        stopped had acknowledged without recording it yet."""
        rows = self._db.execute("SELECT trace_id, item, body FROM held ORDER BY trace_id, item")
        return [(str(t), str(i), bytes(b)) for t, i, b in rows]

    def settle(
        self,
        recorded: Iterable[tuple[str, str]],
        held: Iterable[tuple[str, str, bytes]] = (),
        released: Iterable[tuple[str, str]] = (),
    ) -> None:
        """In one transaction, once a batch's records are durable: the spans it recorded
        (`spans_recorded`), the items it holds from now on, and the held items it recorded
        (no longer held)."""
        by_trace: dict[str, list[str]] = {}
        for trace_id, span_id in recorded:
            by_trace.setdefault(trace_id, []).append(span_id)
        now = time.time()
        with self._transaction():
            self._db.executemany(
                "INSERT INTO spans VALUES (?, ?, ?)",
                [(t, ",".join(ids), now) for t, ids in by_trace.items()],
            )
            self._db.executemany("INSERT OR REPLACE INTO held VALUES (?, ?, ?)", list(held))
            self._db.executemany("DELETE FROM held WHERE trace_id = ? AND item = ?", list(released))

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def close(self) -> None:
        self._db.close()


_CHUNK = 500
"""Ids per query: under SQLite's limit on a statement's parameters in every version (999)."""


def _chunks(ids: Sequence[str]) -> Iterator[list[str]]:
    ids = list(ids)
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, et: object, exc: object, tb: object) -> None:
        self._db.execute("COMMIT" if exc is None else "ROLLBACK")
