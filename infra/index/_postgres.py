"""The shared store: a PostgreSQL database (psycopg 3), for many hosts and many indexers.

One connection, in autocommit: a read (`positions`, `list_sessions`, `search`, ...) is a
statement of its own and never leaves a transaction open behind it (an idle transaction would
hold its tables' locks, and an erasure's `VACUUM FULL` would wait on it for ever). A write runs
in an explicit READ COMMITTED transaction that starts by taking a transaction-level advisory
lock, so two indexers' reads of the positions and their writes never interleave: the second
waits, then reads the positions the first committed.

Text is searched with a `tsvector` generated from it (the `simple` configuration: words
lowercased, no stemming, no stop words) and a GIN index. An erasure deletes the sessions' text
and, once committed, rewrites the table with `VACUUM FULL`, so that the deleted rows' bytes are
no longer in the store's files (a plain delete only marks them dead). ANALYZE keeps no
statistics of the text and its tsvector (a column's statistics hold samples of its values, and
pg_statistic would keep an erased session's words). The WAL still holds the text until its
segments are removed, which the server's operator decides: with `wal_recycle = off` (old
segments are deleted, not renamed for reuse with their bytes) a `pg_switch_wal()` and a
CHECKPOINT remove them, where no archive, replica or `wal_keep_size` holds them.

PostgreSQL's text cannot hold NUL, which JSON strings can: every string the store writes or
compares has its NUL replaced by U+FFFD (a space in searchable text), so one such record does
not stop the indexer.

Read-only SQL runs on the same connection, in a READ ONLY transaction with a statement timeout,
always rolled back, and through the extended protocol, which takes one statement only (a
`COMMIT; DELETE ...` cannot end the read-only transaction and write after it).
"""

from __future__ import annotations

import datetime
import decimal
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
import psycopg.errors
from psycopg.abc import Buffer
from psycopg.types.string import StrDumperUnknown

from rolltape.infra.index._queries import QueryError, SqlResult
from rolltape.infra.index._schema import POSTGRES, TABLE_NAMES
from rolltape.infra.index._store import IndexStore, Partition
from rolltape.projections.index import IndexChanges, TextRow

_WRITE_LOCK = 0x726F6C6C74617065
"""The advisory lock every write transaction takes ("rolltape" in ASCII, as a bigint)."""

_HEADLINE = 'StartSel="",StopSel="",MaxWords=24,MinWords=8'
"""ts_headline's options: a plain-text snippet of 8 to 24 words around the match."""

_WORDS_OF = "regexp_replace({}, '[[:space:][:punct:]]+', ' ', 'g')"
"""Text split into words at spaces and punctuation, as SQLite's unicode61 tokenizer splits it
(PostgreSQL's `simple` parser keeps paths, e-mail addresses and URLs whole: "parser" would not
find "src/parser.py"). Both stores match accents as written."""


class PostgresStore(IndexStore):
    dialect = POSTGRES
    conn: psycopg.Connection[tuple[Any, ...]]

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.adapters.register_dumper(str, _NulFreeStrDumper)
        self._erased_since_vacuum = False

    def describe(self) -> str:
        return _without_password(self.url)

    # -- transactions ----------------------------------------------------------------------------
    def _begin(self, cur: Any) -> None:
        # READ COMMITTED whatever the server's default: each statement after the lock sees what
        # the previous holder of the lock committed.
        cur.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        cur.execute(f"SELECT pg_advisory_xact_lock({_WRITE_LOCK})")

    # -- texts -------------------------------------------------------------------------------------
    def _texts_ddl(self) -> list[str]:
        # Made once (under the write lock, as `create` is): statistics target 0, ANALYZE keeps
        # no sample of the text (pg_statistic would keep an erased session's words).
        return [
            "DO $$ BEGIN IF to_regclass('texts') IS NULL THEN "
            "CREATE TABLE texts ("
            "session_id TEXT NOT NULL, seq BIGINT NOT NULL, kind TEXT NOT NULL, "
            "text TEXT NOT NULL, "
            f"tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', {_WORDS_OF.format('text')})) "
            "STORED, "
            "PRIMARY KEY (session_id, seq)); "
            "ALTER TABLE texts ALTER COLUMN text SET STATISTICS 0, "
            "ALTER COLUMN tsv SET STATISTICS 0; "
            "END IF; END $$",
            "CREATE INDEX IF NOT EXISTS texts_tsv ON texts USING GIN (tsv)",
        ]

    def _add_texts(self, cur: Any, rows: Sequence[TextRow]) -> None:
        # One statement for the batch; a text column cannot hold NUL, which search never needs.
        cur.execute(
            "INSERT INTO texts (session_id, seq, kind, text) "
            "SELECT r.session_id, r.seq, r.kind, r.text "
            "FROM unnest(%s::text[], %s::bigint[], %s::text[], %s::text[]) "
            "AS r(session_id, seq, kind, text) "
            "WHERE NOT EXISTS (SELECT 1 FROM erased e WHERE e.session_id = r.session_id) "
            "ON CONFLICT (session_id, seq) DO NOTHING",
            [
                [_nul_free(row.session_id) for row in rows],
                [row.seq for row in rows],
                [_nul_free(row.kind) for row in rows],
                [row.text.replace("\x00", " ") for row in rows],
            ],
        )

    def _erase_texts(self, cur: Any, session_ids: Sequence[str]) -> None:
        cur.execute(
            "DELETE FROM texts WHERE session_id = ANY(%s::text[])",
            [[_nul_free(sid) for sid in session_ids]],
        )
        self._erased_since_vacuum = True

    def apply(self, changes: IndexChanges, *, expected: Mapping[Partition, int | None]) -> None:
        super().apply(changes, expected=expected)
        if self._erased_since_vacuum or self._tasks_forgotten:
            self._vacuum_texts()

    def _vacuum_texts(self) -> None:
        """Rewrite `texts` into new files (VACUUM FULL), leaving out the rows deleted: the
        bytes of an erased session's text leave the store's files."""
        if self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            raise RuntimeError("VACUUM FULL runs outside a transaction")
        self.conn.execute("VACUUM FULL texts")
        if self._tasks_forgotten:  # the task's old row version, and the index on tasks
            self.conn.execute("VACUUM FULL sessions")
        self._erased_since_vacuum = self._tasks_forgotten = False

    def _search(
        self, cur: Any, words: list[str], where: str, params: list[Any], limit: int
    ) -> list[tuple[str, int, str, str]]:
        cur.execute(
            "SELECT t.session_id, t.seq, t.kind, "
            f"ts_headline('simple', t.text, q.query, '{_HEADLINE}') "
            f"FROM plainto_tsquery('simple', {_WORDS_OF.format('%s')}) AS q(query) "
            "JOIN texts t ON t.tsv @@ q.query "
            "JOIN sessions s ON s.session_id = t.session_id "
            f"WHERE {where} "
            "ORDER BY ts_rank(t.tsv, q.query) DESC, t.session_id, t.seq LIMIT %s",
            [" ".join(words), *params, limit],
        )
        return [(str(a), int(b), str(c), str(d)) for a, b, c, d in cur.fetchall()]

    def _drop_all(self, cur: Any) -> None:
        cur.execute(f"DROP TABLE IF EXISTS {', '.join(TABLE_NAMES)} CASCADE")

    # -- read-only SQL -----------------------------------------------------------------------------
    def sql(self, query: str, *, max_rows: int = 1000, timeout_s: float = 10.0) -> SqlResult:
        timeout_ms = max(1, round(timeout_s * 1000))
        cur = self.conn.cursor()
        rows: list[tuple[Any, ...]] = []
        try:
            cur.execute("BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY")
            cur.execute(f"SET LOCAL statement_timeout = {timeout_ms}")
            try:
                # stream(): the extended protocol (one statement only), rows read one by one
                # and the rest cancelled once there are more than max_rows.
                for row in cur.stream(query):
                    rows.append(row)
                    if len(rows) > max_rows:
                        break
                columns = tuple(d.name for d in cur.description or ())
            except psycopg.errors.ReadOnlySqlTransaction as exc:
                raise QueryError(_WRITES_REFUSED) from exc
            except psycopg.errors.ActiveSqlTransaction as exc:  # VACUUM and the like
                raise QueryError(_WRITES_REFUSED) from exc
            except psycopg.errors.QueryCanceled as exc:
                raise QueryError(
                    f"the query ran past its time limit of {timeout_s:g} s: narrow it "
                    "(a WHERE on an indexed column, a LIMIT)"
                ) from exc
            except psycopg.errors.SyntaxError as exc:
                if "multiple commands" in str(exc):
                    raise QueryError(
                        "you can only execute one statement at a time: give one SELECT statement"
                    ) from exc
                raise QueryError(f"the query failed: {_first_line(exc)}") from exc
            except psycopg.DatabaseError as exc:
                if self.conn.closed:
                    raise
                if exc.sqlstate is None and "EMPTY_QUERY" in str(exc):
                    # no statement at all (blank, or comments): no rows, as SQLite answers
                    return SqlResult(columns=(), rows=(), truncated=False)
                if exc.sqlstate is None and "didn't produce a result" in str(exc):
                    # stream() of a statement that returns no rows (SET, COMMIT, ...)
                    raise QueryError(
                        "the query failed: the statement returns no rows: give one SELECT statement"
                    ) from exc
                raise QueryError(f"the query failed: {_first_line(exc)}") from exc
        finally:
            cur.close()
            if not self.conn.closed:
                self.conn.rollback()
        return SqlResult(
            columns=columns,
            rows=tuple(tuple(_plain(v) for v in row) for row in rows[:max_rows]),
            truncated=len(rows) > max_rows,
        )


_WRITES_REFUSED = (
    "the read model's SQL reads and never writes: give a SELECT over the tables of "
    "docs/read-model.md"
)


class _NulFreeStrDumper(StrDumperUnknown):
    """psycopg's dumper of str, NUL (which PostgreSQL's text refuses) made U+FFFD."""

    def dump(self, obj: str) -> Buffer | None:
        return super().dump(_nul_free(obj))


def _nul_free(text: str) -> str:
    return text.replace("\x00", "\ufffd")


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _plain(value: Any) -> Any:
    """A value as a plain Python one (int, float, str, bool, None): numeric's Decimal becomes
    an int (integral) or a float, any other type its text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, decimal.Decimal):
        if value.is_finite() and value == value.to_integral_value():
            return int(value)
        return float(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    return str(value)


def _without_password(url: str) -> str:
    """The URL with no password, in its user part or in its query string."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, hosts = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}@{hosts}" if user else hosts
    query = "&".join(
        pair
        for pair in parts.query.split("&")
        if pair and urllib.parse.unquote(pair.split("=", 1)[0]).lower() != "password"
    )
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")
