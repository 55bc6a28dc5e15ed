"""The read model's store contract, met by SQLite and by a real PostgreSQL server started from
Debian's packages: rows merged whatever order partitions come in, a batch from a stale
position refused, every filter and the cursor, search, erasure leaving no text in the store's
files, read-only SQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from rolltape.infra.index import (
    TABLE_NAMES,
    IndexStore,
    PositionConflictError,
    QueryError,
    SessionFilter,
    StoreVersionError,
    open_store,
)
from rolltape.projections.index import Record, fold_batch, keyed_subject
from rolltape.schemas import DataKeyRecord, Stream
from tests.support.index_log import Log

HASH = keyed_subject(b"k" * 32)
SECRET_WORD = "zanzibarquokka"
"""Said only in the subject session: found in no store file once the session is erased."""


class Store:
    """A store under test, where its bytes are kept, and how its server lets go of old WAL."""

    def __init__(self, url: str, files: Path, flush: Callable[[], None] = lambda: None) -> None:
        self.url = url
        self.files = files
        self.flush = flush
        """Have the server drop WAL it no longer needs (PostgreSQL keeps old segments' bytes
        until a checkpoint after a switch: an operator's setting, see docs/read-model.md)."""
        self.opened: list[IndexStore] = []

    def open(self, prefix: str = "rolltape") -> IndexStore:
        store = open_store(self.url, prefix=prefix)
        self.opened.append(store)
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        store = Store(f"sqlite:{tmp_path / 'index.sqlite3'}", tmp_path)
    else:
        from tests.support.postgres import fresh_database

        server = request.getfixturevalue("postgres_server")

        def flush() -> None:
            import psycopg

            with psycopg.connect(server.url, autocommit=True) as conn:
                conn.execute("SELECT pg_switch_wal()")
                conn.execute("CHECKPOINT")

        store = Store(fresh_database(server.url), server.data_dir, flush)
    try:
        yield store
    finally:
        store.close()


def sessions_log(partitions: int = 2) -> tuple[Log, list[Record]]:
    log = Log(partitions)
    records: list[Record] = []
    for i in range(10):
        sid = f"s{i}"
        ev = Stream.EVENTS
        records += [
            log.record(
                ev,
                sid,
                "session_started",
                {
                    "task": f"task {i % 3}",
                    "tags": [f"env=e{i % 2}", "batch=b1"],
                    **({"group_id": "g-first"} if i < 3 else {}),
                },
            ),
            log.record(
                ev, sid, "turn", {"role": "user", "content": f"please count word{i} apples"}
            ),
            log.record(
                ev, sid, "tool_call", {"id": "c1", "name": "shell", "arguments": {"cmd": "ls"}}
            ),
            log.record(
                ev, sid, "tool_result", {"call_id": "c1", "content": "out", "success": i % 2 == 0}
            ),
            log.record(ev, sid, "reward", {"value": i / 10}),
        ]
        if i != 9:
            records.append(log.record(ev, sid, "session_ended", {"status": "completed"}))
        records.append(
            log.record(
                Stream.FILTERED,
                sid,
                "filter_outcome",
                {
                    "filter_version": "1",
                    "config": "c",
                    "accepted": i % 2 == 0,
                    "reasons": [] if i % 2 == 0 else [{"code": "tool_failed", "message": "m"}],
                    "status": "completed",
                    "turns": 1,
                    "tool_calls": 1,
                },
            )
        )
        records.append(
            log.record(
                Stream.VERDICTS,
                sid,
                "verdict",
                {"judge": "llm:q", "judge_version": "v2", "status": "ok", "scores": {"q": i / 10}},
                chain="verdicts@v2",
            )
        )
    records.append(
        log.record(
            Stream.RULES,
            "s3",
            "rule_evaluation",
            {
                "epoch": 1,
                "rules_version": "1",
                "ruleset": "r",
                "no_data": False,
                "fired": ["R1"],
                "top_class": "tuning",
                "rules": {},
            },
        )
    )
    return log, records


def index(store: IndexStore, records: Sequence[Record], batch: int = 7) -> None:
    for start in range(0, len(records), batch):
        chunk = records[start : start + batch]
        changes = fold_batch(chunk, store.heads, HASH)
        stored = store.positions()
        store.apply(
            changes,
            expected={(r.topic, r.partition): stored.get((r.topic, r.partition)) for r in chunk},
        )


def dump(store: IndexStore) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, sorted (the texts by their columns, not the store's own)."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    cur = store.conn.cursor()
    for table in TABLE_NAMES:
        columns = "session_id, seq, kind, text" if table == "texts" else "*"
        cur.execute(f"SELECT {columns} FROM {table}")
        out[table] = sorted(
            tuple(bool(v) if isinstance(v, bool) else v for v in row) for row in cur.fetchall()
        )
    return out


def test_rows_are_the_same_whatever_order_the_partitions_and_batches_come_in(
    where: Store, tmp_path: Path
) -> None:
    _, records = sessions_log()
    by_partition = sorted(records, key=lambda r: (r.partition, r.topic, r.offset))
    reverse = sorted(records, key=lambda r: (-r.partition, r.topic, r.offset))
    first = where.open()
    index(first, by_partition, batch=5)
    other = open_store(f"sqlite:{tmp_path / 'other.sqlite3'}", prefix="rolltape")
    try:
        index(other, reverse, batch=13)
        assert dump(first) == dump(other)
    finally:
        other.close()
    assert first.count() == 10


def test_a_batch_from_a_stale_position_is_refused_and_writes_nothing(where: Store) -> None:
    _, records = sessions_log()
    store = where.open()
    index(store, records[:20])
    before = dump(store)
    stale = records[:3]
    with pytest.raises(PositionConflictError, match="another indexer took it over"):
        store.apply(
            fold_batch(stale, store.heads, HASH),
            expected={(stale[0].topic, stale[0].partition): None},
        )
    assert dump(store) == before


def test_every_filter_finds_what_it_names(where: Store) -> None:
    _, records = sessions_log()
    store = where.open()
    index(store, records)

    def ids(**given: Any) -> list[str]:
        return sorted(
            s.session_id for s in store.list_sessions(SessionFilter(**given), limit=100).sessions
        )

    assert ids(tags=("env=e1",)) == ["s1", "s3", "s5", "s7", "s9"]
    assert ids(tags=("env",), task="task 0") == ["s0", "s3", "s6", "s9"]
    assert ids(status="running") == ["s9"]
    assert ids(accepted=False, tool="shell", tool_failed=True) == ["s1", "s3", "s5", "s7", "s9"]
    assert ids(tool_failed=False) == ["s0", "s2", "s4", "s6", "s8"]
    assert ids(reason="tool_failed", tags=("env=e1",), reward_min=0.5) == ["s5", "s7", "s9"]
    assert ids(judge_version="v2", score="q", score_max=0.25) == ["s0", "s1", "s2"]
    assert ids(
        judge_version="v2", judge="llm:q", verdict_status="ok", score="q", score_min=0.85
    ) == ["s9"]
    assert ids(accepted=True, judge_version="v2") == []  # the filter ran under the live version
    assert ids(rule="R1") == ["s3"]
    assert ids(group_id="g-first") == ["s0", "s1", "s2"]
    assert store.holding_ids({"session_ended", "no_such_type"}) == [f"s{i}" for i in range(9)]
    assert store.holding_ids({"session_ended"}, chain="filtered") == []
    assert ids(id_prefix="s1") == ["s1"]
    assert ids(chain="broken") == []
    first = store.list_sessions(limit=1).sessions[0]
    assert ids(since_ms=first.started_ms) == [first.session_id]


def test_pages_cover_every_session_once_newest_first(where: Store) -> None:
    _, records = sessions_log()
    store = where.open()
    index(store, records)
    seen: list[str] = []
    cursor = None
    while True:
        page = store.list_sessions(limit=3, cursor=cursor)
        seen += [s.session_id for s in page.sessions]
        if page.cursor is None:
            break
        cursor = page.cursor
    assert sorted(seen) == [f"s{i}" for i in range(10)] and len(seen) == 10
    started = [store.session(s).started_ms for s in seen]  # type: ignore[union-attr]
    assert started == sorted(started, reverse=True)
    with pytest.raises(QueryError, match="cursor"):
        store.list_sessions(cursor="not-a-cursor")


def test_a_session_shows_whole(where: Store) -> None:
    _, records = sessions_log()
    store = where.open()
    index(store, records)
    s = store.session("s3")
    assert s is not None
    assert (s.task, s.status, s.events, s.chain, s.accepted) == (
        "task 0",
        "completed",
        6,
        "ok",
        False,
    )
    assert s.tags == ("batch=b1", "env=e1") and s.rewards == {"reward": 0.3}
    assert [(c.chain, c.events) for c in s.chains] == [
        ("events", 6),
        ("filtered", 1),
        ("rules", 1),
        ("verdicts@v2", 1),
    ]
    assert [(v.judge_version, v.scores) for v in s.verdicts] == [("v2", {"q": 0.3})]
    assert [(f.judge_version, f.reasons) for f in s.filters] == [("live", ("tool_failed",))]
    assert [(r.rule, r.epoch) for r in s.rule_firings] == [("R1", 1)]
    assert [(t.name, t.success) for t in s.tool_calls] == [("shell", False)]
    assert store.session("nobody") is None


def test_a_list_sorts_by_start_or_reward_and_its_cursor_pages_each_order_exactly(
    where: Store,
) -> None:
    log, records = sessions_log()
    records.append(log.record(Stream.EVENTS, "s10", "session_started", {"task": "no reward"}))
    store = where.open()
    index(store, records)

    def walk(sort: str, page_size: int = 3) -> list[str]:
        seen: list[str] = []
        cursor = None
        while True:
            page = store.list_sessions(limit=page_size, cursor=cursor, sort=sort)  # type: ignore[arg-type]
            seen += [s.session_id for s in page.sessions]
            if page.cursor is None:
                return seen
            cursor = page.cursor

    newest = walk("newest")
    assert len(newest) == 11 and walk("oldest") == newest[::-1]
    # Rewards are i / 10 for s0..s9; s10 has none and comes last either way.
    assert walk("reward_high") == [f"s{i}" for i in range(9, -1, -1)] + ["s10"]
    assert walk("reward_low", page_size=4) == [f"s{i}" for i in range(10)] + ["s10"]
    cursor = store.list_sessions(limit=2, sort="reward_high").cursor
    assert cursor is not None
    with pytest.raises(QueryError, match="in this order"):
        store.list_sessions(limit=2, cursor=cursor, sort="newest")


def test_search_finds_words_and_a_subjects_erasure_takes_its_text_out_of_the_files(
    where: Store,
) -> None:
    log, records = sessions_log()
    sid = "subject-1"
    key = DataKeyRecord(session_id=sid, subject="alice", key_id="0" * 16, wrapped="v1.k.x", ts_ns=1)
    records += [
        log.raw(Stream.KEYS, f"{sid}/{'0' * 16}".encode(), key.value()),
        log.record(Stream.EVENTS, sid, "session_started", {"task": f"say {SECRET_WORD}"}),
        log.record(
            Stream.EVENTS,
            sid,
            "turn",
            {"role": "assistant", "content": f"{SECRET_WORD} twice {SECRET_WORD}"},
        ),
    ]
    store = where.open()
    index(store, records)
    assert {h.session_id for h in store.search("count apples word4")} == {"s4"}
    assert {h.session_id for h in store.search("apples", SessionFilter(tags=("env=e0",)))} == {
        "s0",
        "s2",
        "s4",
        "s6",
        "s8",
    }
    hit = store.search(SECRET_WORD)[0]
    assert hit.session_id == sid and "<" not in hit.snippet
    assert store.session(sid).subject_hash == HASH("alice")  # type: ignore[union-attr]
    assert _files_holding(where.files, SECRET_WORD.encode())  # it was in the files before

    index(store, [log.raw(Stream.KEYS, sid.encode(), None)])  # the data key's tombstone
    assert store.search(SECRET_WORD) == []
    assert store.session(sid).erased  # type: ignore[union-attr]
    assert [s.session_id for s in store.list_sessions(SessionFilter(erased=True)).sessions] == [sid]
    assert sid not in {
        s.session_id for s in store.list_sessions(SessionFilter(erased=False)).sessions
    }
    assert store.count(SessionFilter(erased=False)) == store.count() - 1
    store.close()
    where.flush()
    assert _files_holding(where.files, SECRET_WORD.encode()) == []


def _files_holding(folder: Path, needle: bytes) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_the_charts_counts_cover_the_sessions_a_filter_leaves(where: Store) -> None:
    _, records = sessions_log()
    store = where.open()
    index(store, records)
    bins = store.reward_bins(SessionFilter())
    assert [b.sessions for b in bins] == [1] * 10
    assert (bins[0].low, round(bins[-1].high, 9)) == (0.0, 0.9)
    odd = store.reward_bins(SessionFilter(tags=("env=e1",)))  # 0.1, 0.3, ... 0.9
    assert sum(b.sessions for b in odd) == 5 and odd[0].sessions == odd[-1].sessions == 1
    assert (round(odd[0].low, 9), round(odd[-1].high, 9)) == (0.1, 0.9)
    assert store.reward_bins(SessionFilter(), name="nothing") == []
    (day,) = store.outcomes_by_day(SessionFilter())
    assert (day.day_ms, day.accepted, day.rejected, day.unfiltered) == (0, 5, 5, 0)
    (shell,) = store.tool_failures(SessionFilter())
    assert (shell.tool, shell.calls, shell.failed) == ("shell", 10, 5)
    assert store.tool_failures(SessionFilter(tags=("env=e0",)))[0].failed == 0


def test_two_judge_versions_compare_by_outcome_verdict_and_score(where: Store) -> None:
    log, records = sessions_log()
    # v3 re-judges s0..s5: it rejects s0 and s2 (accepted live), accepts s1, s3 and s5
    # (rejected live), fails llm:q on s4 and scores s5 otherwise; s6..s9 it never judged.
    for i in range(6):
        sid = f"s{i}"
        accepted = i in (1, 3, 4, 5)
        records.append(
            log.record(
                Stream.FILTERED,
                sid,
                "filter_outcome",
                {
                    "filter_version": "1",
                    "config": "c",
                    "accepted": accepted,
                    "reasons": [] if accepted else [{"code": "reply_empty", "message": "m"}],
                    "status": "completed",
                    "turns": 1,
                    "tool_calls": 1,
                },
                chain="filtered@v3",
            )
        )
        verdict = {"judge": "llm:q", "judge_version": "v3", "status": "ok", "scores": {"q": i / 10}}
        if i == 4:
            verdict = {**verdict, "status": "failed"}
        if i == 5:
            verdict = {**verdict, "scores": {"q": 0.9}}
        records.append(log.record(Stream.VERDICTS, sid, "verdict", verdict, chain="verdicts@v3"))
    store = where.open()
    index(store, records)
    assert store.judge_versions() == ["live", "v2", "v3"]
    outcomes = store.compare_versions("live", "v3")
    assert (outcomes.judged_both, outcomes.only_a, outcomes.only_b) == (6, 4, 0)
    assert (outcomes.accepted_to_rejected, outcomes.rejected_to_accepted) == (2, 3)
    assert [(c.session_id, c.before, c.after) for c in outcomes.changes] == [
        ("s0", "accepted", "rejected"),
        ("s1", "rejected", "accepted"),
        ("s2", "accepted", "rejected"),
        ("s3", "rejected", "accepted"),
        ("s5", "rejected", "accepted"),
    ]
    assert outcomes.changes[0].task == "task 0"
    verdicts = store.compare_versions("v2", "v3")
    assert (verdicts.verdicts_compared, verdicts.verdicts_changed) == (6, 2)
    assert [(c.session_id, c.what, c.judge, c.before, c.after) for c in verdicts.changes] == [
        ("s4", "verdict", "llm:q", "ok", "failed"),
        ("s5", "score", "llm:q", "q 0.5", "q 0.9"),
    ]
    first = store.compare_versions("live", "v3", limit=2)
    assert len(first.changes) == 2 and first.truncated


def test_human_verdicts_fill_the_review_queues_and_count_each_judges_agreement(
    where: Store,
) -> None:
    log, records = sessions_log()
    live = [("s0", "a", "ok"), ("s0", "b", "failed"), ("s1", "a", "ok")]
    for sid, judge, status in live:
        verdict = {"judge": judge, "judge_version": "live", "status": status}
        records.append(log.record(Stream.VERDICTS, sid, "verdict", verdict))
    # s0 failed; s1 split (alice changed her mind to fail, bob passed); s2 passed; s3 failed.
    human = [
        ("s0", "alice", "fail", 0.2),
        ("s1", "alice", "pass", None),
        ("s1", "alice", "fail", None),
        ("s1", "bob", "pass", None),
        ("s2", "alice", "pass", None),
        ("s2", "bob", "pass", 0.8),
        ("s3", "bob", "fail", None),
    ]
    for sid, reviewer, verdict, score in human:
        review = {"reviewer": reviewer, "verdict": verdict, "score": score}
        records.append(
            log.record(
                Stream.VERDICTS,
                sid,
                "human_verdict",
                review,
                chain="verdicts@human",
                principal=reviewer,
            )
        )
    # A review naming a reviewer it was not written by counts for no one.
    forged = {"reviewer": "alice", "verdict": "pass"}
    records.append(
        log.record(
            Stream.VERDICTS, "s3", "human_verdict", forged, chain="verdicts@human", principal="bob"
        )
    )
    store = where.open()
    index(store, records)

    assert store.count(SessionFilter(reviewed=True)) == 4
    assert store.count(SessionFilter(reviewed=False)) == 6
    assert _ids(store, SessionFilter(disagreeing=True)) == ["s0"]
    assert _ids(store, SessionFilter(judge_version="human", verdict_status="failed")) == [
        "s3",
        "s1",
        "s0",
    ]
    scored = SessionFilter(judge_version="human", score="human", score_min=0.5)
    assert _ids(store, scored) == ["s2", "s1"]  # bob's 0.8 on s2, his pass (1.0) on s1
    agreement = {a.judge: a for a in store.judge_agreement()}
    assert sorted(agreement) == ["a", "b", "filter"]
    f = agreement["filter"]
    assert (f.both_pass, f.both_fail, f.judge_pass_human_fail, f.judge_fail_human_pass) == (
        1,
        1,
        1,
        0,
    )
    assert f.sessions == 3 and f.agreement == 2 / 3
    assert f.kappa == pytest.approx((2 / 3 - 4 / 9) / (1 - 4 / 9))
    assert (agreement["a"].judge_pass_human_fail, agreement["a"].sessions) == (1, 1)
    assert (agreement["b"].both_fail, agreement["b"].sessions) == (1, 1)

    accepted = SessionFilter(accepted=True, reviewed=False)
    sample = store.sampled_ids(accepted, 2, "seed")
    assert len(sample) == 2 and set(sample) <= {"s4", "s6", "s8"}
    assert store.sampled_ids(accepted, 2, "seed") == sample
    assert sorted(store.sampled_ids(accepted, 5, "seed")) == ["s4", "s6", "s8"]


def _ids(store: IndexStore, where: SessionFilter) -> list[str]:
    return [s.session_id for s in store.list_sessions(where, limit=100).sessions]


def test_sql_reads_and_never_writes_and_stops_a_query_past_its_limit(where: Store) -> None:
    _, records = sessions_log()
    store = where.open()
    index(store, records)
    result = store.sql("SELECT session_id, status FROM sessions WHERE status IS NULL")
    assert result.columns == ("session_id", "status") and result.rows == (("s9", None),)
    assert store.sql("SELECT session_id FROM sessions", max_rows=4).truncated
    for write in (
        "DELETE FROM sessions",
        "UPDATE sessions SET task = 'x'",
        "DROP TABLE sessions",
        "CREATE TABLE x (a INT)",
    ):
        with pytest.raises(QueryError, match="reads and never writes"):
            store.sql(write)
    with pytest.raises(QueryError):
        store.sql("SELECT 1; DELETE FROM sessions")
    with pytest.raises(QueryError, match="time limit"):
        store.sql(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
            timeout_s=0.2,
        )
    assert store.count() == 10


def test_a_store_of_another_prefix_is_refused_with_what_to_do(where: Store) -> None:
    where.open().close()
    with pytest.raises(StoreVersionError, match="rebuild"):
        where.open(prefix="other")
