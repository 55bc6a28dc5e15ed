"""The read model's schema: its tables, and how each merges the rows a batch adds.

One text for both stores: SQLite and PostgreSQL read the same DDL and the same upserts
(`INSERT ... ON CONFLICT ... DO UPDATE`, which both speak), with the few words they spell
differently filled in by `Dialect`. docs/read-model.md documents every table and column; an
upgrade of `SCHEMA_VERSION` is a rebuild from the log, never a migration of facts by hand.

Every merge is order-free (see `rolltape.projections.index`): latest seq wins, offsets take
min and max, counts add up where the fold counted a record once, sets ignore a row they hold.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA_VERSION = 4
"""Bumped by any change of a table, of its indexes or of what the fold writes; a store of
another version is rebuilt (`rolltape index rebuild`). 4: sessions by group, and sessions by
the types of their records (a prompt target's history is read from the sessions that hold it)."""


@dataclass(frozen=True)
class Dialect:
    """What the two stores spell differently."""

    name: str
    param: str
    """The placeholder: `?` (sqlite3) or `%s` (psycopg)."""
    least: str
    greatest: str
    real: str
    """A float column's type."""


SQLITE = Dialect(name="sqlite", param="?", least="min", greatest="max", real="REAL")
POSTGRES = Dialect(
    name="postgresql", param="%s", least="LEAST", greatest="GREATEST", real="DOUBLE PRECISION"
)


_TABLES = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS positions (
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    next_offset BIGINT NOT NULL,
    last_ms BIGINT NOT NULL,
    records BIGINT NOT NULL,
    unreadable BIGINT NOT NULL,
    tampered BIGINT NOT NULL,
    PRIMARY KEY (topic, partition)
);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    kind TEXT,
    task TEXT,
    model TEXT,
    trainable BOOLEAN,
    linked_session_id TEXT,
    group_id TEXT,
    started_ms BIGINT,
    started_ns BIGINT,
    status TEXT,
    ended_ms BIGINT,
    end_seq BIGINT
);
CREATE INDEX IF NOT EXISTS sessions_newest ON sessions ((COALESCE(started_ms, -1)), session_id);
CREATE INDEX IF NOT EXISTS sessions_task ON sessions (task, (COALESCE(started_ms, -1)), session_id);
CREATE INDEX IF NOT EXISTS sessions_status
    ON sessions (status, (COALESCE(started_ms, -1)), session_id);
CREATE INDEX IF NOT EXISTS sessions_group ON sessions (group_id, session_id);
CREATE TABLE IF NOT EXISTS subjects (
    session_id TEXT PRIMARY KEY,
    subject_hash TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS subjects_hash ON subjects (subject_hash);
CREATE TABLE IF NOT EXISTS session_tags (
    session_id TEXT NOT NULL,
    tag TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (session_id, tag)
);
CREATE INDEX IF NOT EXISTS session_tags_tag ON session_tags (tag, session_id);
CREATE INDEX IF NOT EXISTS session_tags_key ON session_tags (key, value, session_id);
CREATE TABLE IF NOT EXISTS session_models (
    session_id TEXT NOT NULL,
    model TEXT NOT NULL,
    PRIMARY KEY (session_id, model)
);
CREATE INDEX IF NOT EXISTS session_models_model ON session_models (model, session_id);
CREATE TABLE IF NOT EXISTS chains (
    session_id TEXT NOT NULL,
    chain TEXT NOT NULL,
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    first_offset BIGINT NOT NULL,
    last_offset BIGINT NOT NULL,
    first_ms BIGINT NOT NULL,
    last_ms BIGINT NOT NULL,
    events BIGINT NOT NULL,
    head_seq BIGINT NOT NULL,
    head_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    PRIMARY KEY (session_id, chain)
);
CREATE INDEX IF NOT EXISTS chains_status ON chains (status, session_id);
CREATE TABLE IF NOT EXISTS chain_breaks (
    session_id TEXT NOT NULL,
    chain TEXT NOT NULL,
    reason TEXT NOT NULL,
    PRIMARY KEY (session_id, chain, reason)
);
CREATE TABLE IF NOT EXISTS event_types (
    session_id TEXT NOT NULL,
    chain TEXT NOT NULL,
    type TEXT NOT NULL,
    records BIGINT NOT NULL,
    PRIMARY KEY (session_id, chain, type)
);
CREATE INDEX IF NOT EXISTS event_types_type ON event_types (type, chain, session_id);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    chain TEXT NOT NULL,
    seq BIGINT NOT NULL,
    type TEXT NOT NULL,
    hash TEXT NOT NULL,
    partition INTEGER NOT NULL,
    "offset" BIGINT NOT NULL,
    broker_ms BIGINT NOT NULL,
    PRIMARY KEY (session_id, chain, seq)
);
CREATE TABLE IF NOT EXISTS rewards (
    session_id TEXT NOT NULL,
    name TEXT NOT NULL,
    value {real} NOT NULL,
    seq BIGINT NOT NULL,
    PRIMARY KEY (session_id, name)
);
CREATE INDEX IF NOT EXISTS rewards_value ON rewards (name, value);
CREATE TABLE IF NOT EXISTS verdicts (
    session_id TEXT NOT NULL,
    judge_version TEXT NOT NULL,
    judge TEXT NOT NULL,
    status TEXT NOT NULL,
    seq BIGINT NOT NULL,
    judge_session_id TEXT,
    PRIMARY KEY (session_id, judge_version, judge)
);
CREATE INDEX IF NOT EXISTS verdicts_judge ON verdicts (judge_version, judge, status);
CREATE TABLE IF NOT EXISTS verdict_scores (
    session_id TEXT NOT NULL,
    judge_version TEXT NOT NULL,
    judge TEXT NOT NULL,
    name TEXT NOT NULL,
    value {real} NOT NULL,
    seq BIGINT NOT NULL,
    PRIMARY KEY (session_id, judge_version, judge, name)
);
CREATE INDEX IF NOT EXISTS verdict_scores_value ON verdict_scores (judge_version, name, value);
CREATE TABLE IF NOT EXISTS filter_outcomes (
    session_id TEXT NOT NULL,
    judge_version TEXT NOT NULL,
    accepted BOOLEAN NOT NULL,
    status TEXT NOT NULL,
    turns INTEGER NOT NULL,
    tool_calls INTEGER NOT NULL,
    reward {real},
    filter_version TEXT NOT NULL,
    seq BIGINT NOT NULL,
    reasons_sealed BOOLEAN NOT NULL,
    PRIMARY KEY (session_id, judge_version)
);
CREATE INDEX IF NOT EXISTS filter_outcomes_accepted
    ON filter_outcomes (judge_version, accepted, session_id);
CREATE TABLE IF NOT EXISTS filter_reasons (
    session_id TEXT NOT NULL,
    judge_version TEXT NOT NULL,
    code TEXT NOT NULL,
    seq BIGINT NOT NULL,
    PRIMARY KEY (session_id, judge_version, code, seq)
);
CREATE INDEX IF NOT EXISTS filter_reasons_code ON filter_reasons (judge_version, code);
CREATE TABLE IF NOT EXISTS rule_firings (
    session_id TEXT NOT NULL,
    judge_version TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    rule TEXT NOT NULL,
    PRIMARY KEY (session_id, judge_version, epoch, rule)
);
CREATE INDEX IF NOT EXISTS rule_firings_rule ON rule_firings (judge_version, rule, session_id);
CREATE TABLE IF NOT EXISTS decisions (
    session_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    epoch INTEGER NOT NULL,
    event_type TEXT NOT NULL,
    remedy_direction TEXT NOT NULL,
    cites TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE IF NOT EXISTS tool_calls (
    session_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    name TEXT,
    seq BIGINT,
    success BOOLEAN,
    duration_ms {real},
    result_seq BIGINT,
    PRIMARY KEY (session_id, call_id)
);
CREATE INDEX IF NOT EXISTS tool_calls_name ON tool_calls (name, success, session_id);
CREATE TABLE IF NOT EXISTS worlds (
    session_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    digest TEXT NOT NULL,
    files INTEGER NOT NULL,
    stored_bytes BIGINT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX IF NOT EXISTS worlds_digest ON worlds (digest);
CREATE TABLE IF NOT EXISTS blobs (
    sha256 TEXT NOT NULL,
    chunk INTEGER NOT NULL,
    chunk_sha256 TEXT NOT NULL,
    partition INTEGER NOT NULL,
    "offset" BIGINT NOT NULL,
    PRIMARY KEY (sha256, chunk, chunk_sha256)
);
CREATE TABLE IF NOT EXISTS judge_sessions (
    session_id TEXT NOT NULL,
    judge_session_id TEXT NOT NULL,
    PRIMARY KEY (session_id, judge_session_id)
);
CREATE TABLE IF NOT EXISTS checkpoints (
    session_id TEXT NOT NULL,
    chain TEXT NOT NULL,
    seq BIGINT NOT NULL,
    log TEXT NOT NULL,
    tree_size BIGINT NOT NULL,
    PRIMARY KEY (session_id, chain)
);
CREATE TABLE IF NOT EXISTS extents (
    session_id TEXT NOT NULL,
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    first_offset BIGINT NOT NULL,
    last_offset BIGINT NOT NULL,
    records BIGINT NOT NULL,
    PRIMARY KEY (session_id, topic, partition)
);
CREATE TABLE IF NOT EXISTS erased (
    session_id TEXT PRIMARY KEY
);
"""


def tables_ddl(dialect: Dialect) -> list[str]:
    """The statements that create the schema's tables and indexes (texts are the store's
    own: SQLite's FTS5, PostgreSQL's tsvector)."""
    text = _TABLES.replace("{real}", dialect.real)
    return [s.strip() for s in text.split(";") if s.strip()]


TABLE_NAMES: tuple[str, ...] = (
    "meta",
    "positions",
    "sessions",
    "subjects",
    "session_tags",
    "session_models",
    "chains",
    "chain_breaks",
    "event_types",
    "events",
    "rewards",
    "verdicts",
    "verdict_scores",
    "filter_outcomes",
    "filter_reasons",
    "rule_firings",
    "decisions",
    "tool_calls",
    "worlds",
    "blobs",
    "judge_sessions",
    "checkpoints",
    "erased",
    "extents",
    "texts",
)
"""Every table of the read model, as `rolltape sessions sql` may read them."""


def _latest(table: str, columns: tuple[str, ...], key: tuple[str, ...], seq: str = "seq") -> str:
    """An upsert where the row with the higher `seq` wins."""
    rest = [c for c in columns if c not in key]
    sets = ", ".join(f"{c} = excluded.{c}" for c in rest)
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({{params}}) "
        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {sets} "
        f"WHERE excluded.{seq} > {table}.{seq}"
    )


def _kept(table: str, columns: tuple[str, ...], key: tuple[str, ...]) -> str:
    """An insert of a set member (a row it holds already is kept as it is)."""
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({{params}}) "
        f"ON CONFLICT ({', '.join(key)}) DO NOTHING"
    )


_SESSION = (
    "session_id",
    "kind",
    "task",
    "model",
    "trainable",
    "linked_session_id",
    "group_id",
    "started_ms",
    "started_ns",
)

UPSERTS: dict[str, str] = {
    # A session's row is made by its start (an end indexed first leaves the start columns
    # empty, filled here).
    "sessions": (
        f"INSERT INTO sessions ({', '.join(_SESSION)}) VALUES ({{params}}) "
        "ON CONFLICT (session_id) DO UPDATE SET "
        + ", ".join(f"{c} = excluded.{c}" for c in _SESSION[1:])
        + " WHERE sessions.started_ms IS NULL"
    ),
    "session_ends": (
        "INSERT INTO sessions (session_id, status, ended_ms, end_seq) VALUES ({params}) "
        "ON CONFLICT (session_id) DO UPDATE SET status = excluded.status, "
        "ended_ms = excluded.ended_ms, end_seq = excluded.end_seq "
        "WHERE sessions.end_seq IS NULL OR excluded.end_seq > sessions.end_seq"
    ),
    "subjects": _kept("subjects", ("session_id", "subject_hash"), ("session_id",)),
    "tags": _kept("session_tags", ("session_id", "tag", "key", "value"), ("session_id", "tag")),
    "models": _kept("session_models", ("session_id", "model"), ("session_id", "model")),
    "chains": (
        "INSERT INTO chains (session_id, chain, topic, partition, first_offset, last_offset, "
        "first_ms, last_ms, events, head_seq, head_hash, status) VALUES ({params}) "
        "ON CONFLICT (session_id, chain) DO UPDATE SET "
        "first_offset = {least}(chains.first_offset, excluded.first_offset), "
        "last_offset = {greatest}(chains.last_offset, excluded.last_offset), "
        "first_ms = {least}(chains.first_ms, excluded.first_ms), "
        "last_ms = {greatest}(chains.last_ms, excluded.last_ms), "
        "events = chains.events + excluded.events, "
        "head_seq = excluded.head_seq, head_hash = excluded.head_hash, status = excluded.status"
    ),
    "chain_breaks": _kept(
        "chain_breaks", ("session_id", "chain", "reason"), ("session_id", "chain", "reason")
    ),
    "event_types": (
        "INSERT INTO event_types (session_id, chain, type, records) VALUES ({params}) "
        "ON CONFLICT (session_id, chain, type) DO UPDATE SET "
        "records = event_types.records + excluded.records"
    ),
    "events": _kept(
        "events",
        ("session_id", "chain", "seq", "type", "hash", "partition", '"offset"', "broker_ms"),
        ("session_id", "chain", "seq"),
    ),
    "rewards": _latest("rewards", ("session_id", "name", "value", "seq"), ("session_id", "name")),
    "verdicts": _latest(
        "verdicts",
        ("session_id", "judge_version", "judge", "status", "seq", "judge_session_id"),
        ("session_id", "judge_version", "judge"),
    ),
    "scores": _latest(
        "verdict_scores",
        ("session_id", "judge_version", "judge", "name", "value", "seq"),
        ("session_id", "judge_version", "judge", "name"),
    ),
    "filters": _latest(
        "filter_outcomes",
        (
            "session_id",
            "judge_version",
            "accepted",
            "status",
            "turns",
            "tool_calls",
            "reward",
            "filter_version",
            "seq",
            "reasons_sealed",
        ),
        ("session_id", "judge_version"),
    ),
    "filter_reasons": _kept(
        "filter_reasons",
        ("session_id", "judge_version", "code", "seq"),
        ("session_id", "judge_version", "code", "seq"),
    ),
    "rule_firings": _kept(
        "rule_firings",
        ("session_id", "judge_version", "epoch", "rule"),
        ("session_id", "judge_version", "epoch", "rule"),
    ),
    "decisions": _kept(
        "decisions",
        ("session_id", "seq", "epoch", "event_type", "remedy_direction", "cites"),
        ("session_id", "seq"),
    ),
    "tool_calls": (
        "INSERT INTO tool_calls (session_id, call_id, name, seq) VALUES ({params}) "
        "ON CONFLICT (session_id, call_id) DO UPDATE SET name = excluded.name, "
        "seq = excluded.seq WHERE tool_calls.seq IS NULL OR excluded.seq < tool_calls.seq"
    ),
    "tool_results": (
        "INSERT INTO tool_calls (session_id, call_id, success, duration_ms, result_seq) "
        "VALUES ({params}) ON CONFLICT (session_id, call_id) DO UPDATE SET "
        "success = excluded.success, duration_ms = excluded.duration_ms, "
        "result_seq = excluded.result_seq "
        "WHERE tool_calls.result_seq IS NULL OR excluded.result_seq > tool_calls.result_seq"
    ),
    "worlds": _kept(
        "worlds",
        ("session_id", "seq", "digest", "files", "stored_bytes"),
        ("session_id", "seq"),
    ),
    "blobs": (
        'INSERT INTO blobs (sha256, chunk, chunk_sha256, partition, "offset") VALUES ({params}) '
        "ON CONFLICT (sha256, chunk, chunk_sha256) DO UPDATE SET "
        'partition = excluded.partition, "offset" = excluded."offset" '
        'WHERE excluded."offset" > blobs."offset"'
    ),
    "judge_sessions": _kept(
        "judge_sessions", ("session_id", "judge_session_id"), ("session_id", "judge_session_id")
    ),
    "checkpoints": (
        "INSERT INTO checkpoints (session_id, chain, seq, log, tree_size) VALUES ({params}) "
        "ON CONFLICT (session_id, chain) DO UPDATE SET seq = excluded.seq, log = excluded.log, "
        "tree_size = excluded.tree_size WHERE excluded.seq > checkpoints.seq "
        "OR (excluded.seq = checkpoints.seq AND excluded.log < checkpoints.log)"
    ),
    "erased": _kept("erased", ("session_id",), ("session_id",)),
    "extents": (
        "INSERT INTO extents (session_id, topic, partition, first_offset, last_offset, records) "
        "VALUES ({params}) ON CONFLICT (session_id, topic, partition) DO UPDATE SET "
        "first_offset = {least}(extents.first_offset, excluded.first_offset), "
        "last_offset = {greatest}(extents.last_offset, excluded.last_offset), "
        "records = extents.records + excluded.records"
    ),
    "positions": (
        "INSERT INTO positions (topic, partition, next_offset, last_ms, records, unreadable, "
        "tampered) VALUES ({params}) ON CONFLICT (topic, partition) DO UPDATE SET "
        "next_offset = excluded.next_offset, "
        "last_ms = {greatest}(positions.last_ms, excluded.last_ms), "
        "records = positions.records + excluded.records, "
        "unreadable = positions.unreadable + excluded.unreadable, "
        "tampered = positions.tampered + excluded.tampered"
    ),
}
"""Table of `IndexChanges` -> the statement that merges one of its rows (`texts` are the
store's own)."""


def upsert(table: str, width: int, dialect: Dialect) -> str:
    """The merge statement of an `IndexChanges` table for `dialect`, for rows of `width`."""
    params = ", ".join([dialect.param] * width)
    return (
        UPSERTS[table]
        .replace("{params}", params)
        .replace("{least}", dialect.least)
        .replace("{greatest}", dialect.greatest)
    )
