"""The embedded store: one SQLite file (the standard library's sqlite3) under the state folder.

WAL journal, so readers (`rolltape sessions`, the console) read while an indexer writes, and a
kill of the indexer at any moment leaves the last committed transaction whole; `synchronous`
NORMAL is durable against a process that dies (only power loss may take the last transactions,
which the indexer then reads again from its positions). Text is searched with FTS5, its index
told to `secure-delete`, and the file with `secure_delete`: an erased session's text is
overwritten, not only unlinked from the tree, and the WAL is checkpointed and truncated after an
erasure so no old page keeps it.

Read-only SQL runs on a second connection opened read-only, behind an authorizer that allows
reading alone, and is interrupted past its time limit.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rolltape.infra.index._queries import QueryError, SqlResult
from rolltape.infra.index._schema import SQLITE, TABLE_NAMES
from rolltape.infra.index._store import IndexStore
from rolltape.projections.index import TextRow

_FTS_SECURE_DELETE = sqlite3.sqlite_version_info >= (3, 44, 0)
"""FTS5's `secure-delete` option (SQLite 3.44): a delete removes the row's terms from the
index at once."""

_READING = {
    sqlite3.SQLITE_SELECT,
    sqlite3.SQLITE_READ,
    sqlite3.SQLITE_FUNCTION,
    sqlite3.SQLITE_RECURSIVE,
}


class SQLiteStore(IndexStore):
    dialect = SQLITE

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.execute("PRAGMA busy_timeout = 60000")
        self.conn.execute("PRAGMA secure_delete = ON")
        self.conn.execute("PRAGMA foreign_keys = OFF")

    def describe(self) -> str:
        return f"sqlite:{self.path}"

    def _begin(self, cur: Any) -> None:
        # IMMEDIATE: the write lock is taken before the positions are read, so two indexers'
        # checks of one partition's position never interleave.
        cur.execute("BEGIN IMMEDIATE")

    def _commit(self, cur: Any) -> None:
        cur.execute("COMMIT")

    def _rollback(self, cur: Any) -> None:
        if self.conn.in_transaction:
            cur.execute("ROLLBACK")

    def _texts_ddl(self) -> list[str]:
        ddl = [
            "CREATE VIRTUAL TABLE IF NOT EXISTS texts USING fts5("
            "session_id UNINDEXED, seq UNINDEXED, kind UNINDEXED, text, "
            "tokenize = 'unicode61 remove_diacritics 0')",
        ]
        if _FTS_SECURE_DELETE:
            ddl.append("INSERT INTO texts (texts, rank) VALUES ('secure-delete', 1)")
        return ddl

    def _add_texts(self, cur: Any, rows: Sequence[TextRow]) -> None:
        cur.executemany(
            "INSERT INTO texts (session_id, seq, kind, text) SELECT ?, ?, ?, ? "
            "WHERE NOT EXISTS (SELECT 1 FROM erased WHERE session_id = ?)",
            [(*row, row.session_id) for row in rows],
        )

    def _erase_texts(self, cur: Any, session_ids: Sequence[str]) -> None:
        cur.executemany("DELETE FROM texts WHERE session_id = ?", [(sid,) for sid in session_ids])
        if not _FTS_SECURE_DELETE:
            # Before SQLite 3.44 a deleted row's terms stay in the index's segments until they
            # are merged: merge them all now (the freed pages are overwritten: secure_delete).
            cur.execute("INSERT INTO texts (texts) VALUES ('optimize')")
        self._erased_since_checkpoint = True

    _erased_since_checkpoint = False

    def apply(self, changes: Any, *, expected: Any) -> None:
        super().apply(changes, expected=expected)
        if self._erased_since_checkpoint:
            # The erased text's old pages may still be in the WAL: write them back and empty it.
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._erased_since_checkpoint = False

    def _search(
        self, cur: Any, words: list[str], where: str, params: list[Any], limit: int
    ) -> list[tuple[str, int, str, str]]:
        match = " ".join('"' + w.replace('"', '""') + '"' for w in words)
        cur.execute(
            "SELECT t.session_id, t.seq, t.kind, snippet(texts, 3, '', '', ' ... ', 16) "
            "FROM texts t JOIN sessions s ON s.session_id = t.session_id "
            f"WHERE texts MATCH ? AND {where} ORDER BY t.rank, t.session_id, t.seq LIMIT ?",
            [match, *params, limit],
        )
        return [(str(a), int(b), str(c), str(d)) for a, b, c, d in cur.fetchall()]

    def _drop_all(self, cur: Any) -> None:
        for table in TABLE_NAMES:
            cur.execute(f"DROP TABLE IF EXISTS {table}")

    def sql(self, query: str, *, max_rows: int = 1000, timeout_s: float = 10.0) -> SqlResult:
        reader = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        try:
            reader.set_authorizer(_reading_only)
            deadline = time.monotonic() + timeout_s
            reader.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
            try:
                cur = reader.execute(query)
                rows = cur.fetchmany(max_rows + 1)
            except (sqlite3.Warning, sqlite3.ProgrammingError) as exc:  # more than one statement
                raise QueryError(f"{exc} Give one SELECT statement.") from exc
            except sqlite3.DatabaseError as exc:
                if "interrupted" in str(exc):
                    raise QueryError(
                        f"the query ran past its time limit of {timeout_s:g} s: narrow it "
                        "(a WHERE on an indexed column, a LIMIT)"
                    ) from exc
                if "not authorized" in str(exc) or "readonly" in str(exc):
                    raise QueryError(
                        "the read model's SQL reads and never writes: give a SELECT over the "
                        "tables of docs/read-model.md"
                    ) from exc
                raise QueryError(f"the query failed: {exc}") from exc
            columns = tuple(d[0] for d in cur.description or ())
        finally:
            reader.close()
        return SqlResult(
            columns=columns,
            rows=tuple(tuple(r) for r in rows[:max_rows]),
            truncated=len(rows) > max_rows,
        )


def _reading_only(action: int, *_: Any) -> int:
    return sqlite3.SQLITE_OK if action in _READING else sqlite3.SQLITE_DENY
