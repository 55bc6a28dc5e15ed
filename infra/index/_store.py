"""The read model's store: one port, two stores (SQLite, PostgreSQL), one contract.

`IndexStore` holds everything both stores share: the schema's statements, applying a batch's
rows with its positions in one transaction, and every query, over a DB-API connection whose
placeholder and spellings come from its `Dialect`. A store adds how it connects, how it keeps
searchable text (SQLite's FTS5, PostgreSQL's tsvector) and how it runs read-only SQL within a
time limit. `tests/integration/test_index_store.py` is the contract each must meet.

Positions are the indexer's tracking records (eventsourcing's term): a batch's rows and the
offsets it was read up to are committed together, and only where the stored offsets are still
those the indexer read from (`apply(..., expected=)`): an indexer that lost a partition to
another in a rebalance, and still holds a batch of it, cannot write it twice
(`PositionConflictError`).
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from rolltape.infra._errors import ReadModelError
from rolltape.infra.index._compare import VersionComparison, compare_versions, judge_versions
from rolltape.infra.index._facets import (
    DayOutcomes,
    RewardBin,
    ToolFailures,
    outcomes_by_day,
    reward_bins,
    tool_failures,
)
from rolltape.infra.index._queries import (
    SORTS,
    ChainInfo,
    CheckpointInfo,
    DecisionInfo,
    FilterInfo,
    Page,
    PositionInfo,
    QueryError,
    RuleFiring,
    SearchHit,
    SessionDetail,
    SessionFilter,
    SessionSummary,
    Sort,
    SqlResult,
    StoreInfo,
    ToolCallInfo,
    VerdictInfo,
    WorldInfo,
    decode_cursor,
    encode_cursor,
)
from rolltape.infra.index._review import JudgeAgreement, judge_agreement, sampled_ids
from rolltape.infra.index._schema import SCHEMA_VERSION, Dialect, tables_ddl, upsert
from rolltape.infra.kafka.readback import merged_ranges
from rolltape.projections import Narrowing
from rolltape.projections.index import ChainHead, ChainKey, IndexChanges, TextRow
from rolltape.schemas import HUMAN_JUDGE_VERSION, LIVE_JUDGE_VERSION, Stream

PAGE_MAX = 1000
"""The most sessions one page holds."""


class StoreVersionError(ReadModelError):
    """The store was built by another schema version: rebuild it from the log."""


class PositionConflictError(ReadModelError):
    """A partition's stored position is not where this indexer read it from: another indexer
    took it over (its batch is dropped; the new owner indexes it)."""


Partition = tuple[str, int]


class IndexStore(abc.ABC):
    """A read model's store. Open one with `open_store` (infra/index/__init__.py)."""

    dialect: Dialect
    conn: Any
    """The DB-API connection."""

    # -- what each store does its own way --------------------------------------------------------
    @abc.abstractmethod
    def describe(self) -> str:
        """Where the store is (`sqlite:<path>`, `postgresql://host/db`), never a password."""

    @abc.abstractmethod
    def _texts_ddl(self) -> list[str]: ...

    @abc.abstractmethod
    def _add_texts(self, cur: Any, rows: Sequence[TextRow]) -> None: ...

    @abc.abstractmethod
    def _erase_texts(self, cur: Any, session_ids: Sequence[str]) -> None:
        """Remove the sessions' text, so that its bytes leave the store's files."""

    @abc.abstractmethod
    def _search(
        self, cur: Any, words: list[str], where: str, params: list[Any], limit: int
    ) -> list[tuple[str, int, str, str]]: ...

    @abc.abstractmethod
    def sql(self, query: str, *, max_rows: int = 1000, timeout_s: float = 10.0) -> SqlResult:
        """Run read-only SQL over the documented schema: a statement that writes is refused
        and one that runs past `timeout_s` is stopped (`QueryError` either way)."""

    @abc.abstractmethod
    def _begin(self, cur: Any) -> None:
        """Start a write transaction that holds the positions it reads until it ends."""

    @abc.abstractmethod
    def _drop_all(self, cur: Any) -> None: ...

    def close(self) -> None:
        self.conn.close()

    # -- schema ------------------------------------------------------------------------------------
    def create(self, prefix: str) -> None:
        """Make the schema where there is none; StoreVersionError where a store of another
        version (or of another topic prefix) is there."""
        cur = self.conn.cursor()
        meta = self._meta(cur)
        if meta is not None and meta.get("schema_version") == str(SCHEMA_VERSION):
            self._check_meta(meta, prefix)
            return  # made already: no DDL, no write lock, for every reader that opens it
        self._begin(cur)
        try:
            for statement in [*tables_ddl(self.dialect), *self._texts_ddl()]:
                cur.execute(statement)
            meta = dict(self._fetch(cur, "SELECT key, value FROM meta"))
            if not meta:
                cur.executemany(
                    f"INSERT INTO meta (key, value) VALUES ({self._marks(2)})",
                    [("schema_version", str(SCHEMA_VERSION)), ("prefix", prefix)],
                )
            self._commit(cur)
        except BaseException:
            self._rollback(cur)
            raise
        self._check_meta(meta, prefix)

    def _meta(self, cur: Any) -> dict[str, str] | None:
        """The store's `meta` rows; None where there is no schema yet."""
        try:
            return dict(self._fetch(cur, "SELECT key, value FROM meta"))
        except Exception:  # no such table: the DB-API's errors differ by store
            self._rollback(cur)
            return None

    def _check_meta(self, meta: Mapping[str, str], prefix: str) -> None:
        if meta and meta.get("schema_version") != str(SCHEMA_VERSION):
            raise StoreVersionError(
                f"the read model in {self.describe()} is of schema version "
                f"{meta.get('schema_version')}, this rolltape writes version {SCHEMA_VERSION}: "
                "rebuild it from the log with `rolltape index rebuild`"
            )
        if meta and meta.get("prefix") != prefix:
            raise StoreVersionError(
                f"the read model in {self.describe()} indexes the topics of prefix "
                f"{meta.get('prefix')!r}, not {prefix!r}: give each prefix a store of its own "
                "(ROLLTAPE_INDEX_URL), or rebuild this one with `rolltape index rebuild`"
            )

    def drop(self) -> None:
        """Remove every table (a rebuild then makes them again)."""
        cur = self.conn.cursor()
        self._begin(cur)
        try:
            self._drop_all(cur)
            self._commit(cur)
        except BaseException:
            self._rollback(cur)
            raise

    # -- the indexer's side ----------------------------------------------------------------------
    def positions(self) -> dict[Partition, int]:
        """The next offset to index of every partition indexed so far."""
        rows = self._fetch(
            self.conn.cursor(), "SELECT topic, partition, next_offset FROM positions"
        )
        return {(str(t), int(p)): int(o) for t, p, o in rows}

    def heads(self, keys: Iterable[ChainKey]) -> dict[ChainKey, ChainHead]:
        """The stored heads of these chains (those never indexed are absent)."""
        wanted = sorted(set(keys))
        heads: dict[ChainKey, ChainHead] = {}
        cur = self.conn.cursor()
        by_session: dict[str, set[str]] = {}
        for sid, chain in wanted:
            by_session.setdefault(sid, set()).add(chain)
        sids = sorted(by_session)
        for start in range(0, len(sids), 500):
            chunk = sids[start : start + 500]
            rows = self._fetch(
                cur,
                "SELECT session_id, chain, head_seq, head_hash, status FROM chains "
                f"WHERE session_id IN ({self._marks(len(chunk))})",
                chunk,
            )
            for sid, chain, seq, head, status in rows:
                if chain in by_session[sid]:
                    heads[(sid, chain)] = ChainHead(int(seq), str(head), str(status))
        return heads

    def apply(self, changes: IndexChanges, *, expected: Mapping[Partition, int | None]) -> None:
        """Write a batch's rows and positions in one transaction, provided every partition's
        stored position is still `expected[partition]` (None: never indexed);
        PositionConflictError otherwise, and nothing is written."""
        cur = self.conn.cursor()
        self._begin(cur)
        try:
            self._check_positions(cur, expected)
            for table, rows in changes.tables():
                if table == "texts":
                    self._add_texts(cur, rows)
                    continue
                cur.executemany(upsert(table, len(rows[0]), self.dialect), rows)
                if table == "erased":
                    self._erase_texts(cur, sorted({row.session_id for row in rows}))
            if changes.sessions or changes.erased:
                self._forget_erased_tasks(cur, changes)
            self._commit(cur)
        except BaseException:
            self._rollback(cur)
            raise

    def _forget_erased_tasks(self, cur: Any, changes: IndexChanges) -> None:
        """An erased session's task is content too: gone from its row, whichever of the start
        and the erasure was indexed first."""
        sids = sorted(
            {r.session_id for r in changes.sessions} | {r.session_id for r in changes.erased}
        )
        for start in range(0, len(sids), 500):
            chunk = sids[start : start + 500]
            cur.execute(
                "UPDATE sessions SET task = NULL WHERE task IS NOT NULL AND session_id IN "
                f"(SELECT session_id FROM erased WHERE session_id IN ({self._marks(len(chunk))}))",
                chunk,
            )
            if cur.rowcount > 0:
                self._tasks_forgotten = True

    _tasks_forgotten = False
    """An erased session's task was taken out of `sessions` since the store last made sure its
    old bytes left the files (PostgreSQL's old row versions keep them until a rewrite)."""

    def _check_positions(self, cur: Any, expected: Mapping[Partition, int | None]) -> None:
        if not expected:
            return
        stored = {
            (str(t), int(p)): int(o)
            for t, p, o in self._fetch(cur, "SELECT topic, partition, next_offset FROM positions")
        }
        for partition, at in expected.items():
            if stored.get(partition) != at:
                raise PositionConflictError(
                    f"{partition[0]}[{partition[1]}] stands at {stored.get(partition)} in the "
                    f"read model, not at {at} where this indexer read it from: another indexer "
                    "took it over"
                )

    # -- where records lie (the readers' side) -------------------------------------------------
    def picked_ids(self, narrowing: Narrowing, topics: Sequence[str]) -> list[str]:
        """The sessions with records on `topics` that `narrowing` may pick: every one it picks,
        and a sealed session's where the task is asked (the reader decides once it opened it;
        see `Narrowing.picks`)."""
        p = self.dialect.param
        conds = [f"e.topic IN ({self._marks(len(topics))})"]
        params: list[Any] = list(topics)
        exact = narrowing.exact_ids()
        if exact is not None:
            conds.append(f"e.session_id IN ({self._marks(len(exact))})")
            params.extend(exact)
        elif narrowing.sessions:
            prefixes = [x for x in narrowing.id_prefixes()]
            if "" not in prefixes:
                conds.append(
                    "("
                    + " OR ".join(f"substr(e.session_id, 1, {len(x)}) = {p}" for x in prefixes)
                    + ")"
                )
                params.extend(prefixes)
        for tag in narrowing.tags:
            conds.append(
                f"e.session_id IN (SELECT t.session_id FROM session_tags t WHERE t.tag = {p})"
            )
            params.append(tag)
        if narrowing.tasks or narrowing.since_ns is not None or narrowing.until_ns is not None:
            started = ["1 = 1"]
            if narrowing.tasks:
                started.append(
                    f"(s.task IS NULL OR s.task IN ({self._marks(len(narrowing.tasks))}))"
                )
                params.extend(narrowing.tasks)
            if narrowing.since_ns is not None:
                started.append(f"s.started_ns >= {p}")
                params.append(narrowing.since_ns)
            if narrowing.until_ns is not None:
                started.append(f"s.started_ns < {p}")
                params.append(narrowing.until_ns)
            conds.append(
                f"e.session_id IN (SELECT s.session_id FROM sessions s WHERE {' AND '.join(started)})"
            )
        rows = self._fetch(
            self.conn.cursor(),
            f"SELECT DISTINCT e.session_id FROM extents e WHERE {' AND '.join(conds)} "
            "ORDER BY e.session_id",
            params,
        )
        return [str(sid) for (sid,) in rows if narrowing.picks_id(str(sid))]

    def holding_ids(self, types: Collection[str], chain: str = "events") -> list[str]:
        """The sessions whose chain `chain` holds a record of one of `types` (the prompt
        events: which sessions a prompt target's history lies in)."""
        if not types:
            return []
        rows = self._fetch(
            self.conn.cursor(),
            "SELECT DISTINCT session_id FROM event_types WHERE chain = "
            f"{self.dialect.param} AND type IN ({self._marks(len(types))}) ORDER BY session_id",
            [chain, *sorted(types)],
        )
        return [str(sid) for (sid,) in rows]

    def prefixed_ids(self, prefix: str, topics: Sequence[str]) -> list[str]:
        """The record keys on `topics` that start with `prefix` (the checkpoint logs)."""
        rows = self._fetch(
            self.conn.cursor(),
            f"SELECT DISTINCT session_id FROM extents WHERE topic IN ({self._marks(len(topics))}) "
            f"AND substr(session_id, 1, {len(prefix)}) = {self.dialect.param} ORDER BY session_id",
            [*topics, prefix],
        )
        return [str(sid) for (sid,) in rows]

    def extents(
        self, session_ids: Iterable[str], topics: Sequence[str]
    ) -> dict[Partition, list[tuple[int, int]]]:
        """Where the records keyed by `session_ids` lie on `topics`: per partition, the offset
        ranges [first, last + 1) holding them, merged where they overlap or touch, in order."""
        sids = sorted(set(session_ids))
        spans: dict[Partition, list[tuple[int, int]]] = {}
        cur = self.conn.cursor()
        for start in range(0, len(sids), 500):
            chunk = sids[start : start + 500]
            rows = self._fetch(
                cur,
                "SELECT topic, partition, first_offset, last_offset FROM extents "
                f"WHERE topic IN ({self._marks(len(topics))}) "
                f"AND session_id IN ({self._marks(len(chunk))})",
                [*topics, *chunk],
            )
            for topic, partition, first, last in rows:
                spans.setdefault((str(topic), int(partition)), []).append(
                    (int(first), int(last) + 1)
                )
        return {where: merged_ranges(ranges) for where, ranges in sorted(spans.items())}

    def first_offset(self, session_id: str, topic: str, partition: int) -> int | None:
        """The offset of the first record keyed by `session_id` on that partition, if indexed."""
        p = self.dialect.param
        rows = self._fetch(
            self.conn.cursor(),
            "SELECT first_offset FROM extents "
            f"WHERE session_id = {p} AND topic = {p} AND partition = {p}",
            [session_id, topic, partition],
        )
        return int(rows[0][0]) if rows else None

    def resume_offset(self, session_id: str, topic: str, partition: int) -> int:
        """Where a resuming writer may start reading that partition for the session's head: its
        first record's offset, or, where the session has none indexed there, the offset the
        read model has indexed up to (every record of the session lies at or after it)."""
        first = self.first_offset(session_id, topic, partition)
        if first is not None:
            return first
        return self.positions().get((topic, partition), 0)

    def blob_offsets(self, digests: Iterable[str]) -> dict[int, list[int]]:
        """Partition -> the offsets of the latest record of every chunk of these blobs."""
        wanted = sorted(set(digests))
        found: dict[int, set[int]] = {}
        cur = self.conn.cursor()
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            rows = self._fetch(
                cur,
                f'SELECT partition, "offset" FROM blobs WHERE sha256 IN ({self._marks(len(chunk))})',
                chunk,
            )
            for partition, offset in rows:
                found.setdefault(int(partition), set()).add(int(offset))
        return {p: sorted(offsets) for p, offsets in sorted(found.items())}

    # -- queries -----------------------------------------------------------------------------------
    def count(self, where: SessionFilter | None = None) -> int:
        sql, params = self._where(where or SessionFilter())
        rows = self._fetch(
            self.conn.cursor(), f"SELECT COUNT(*) FROM sessions s WHERE {sql}", params
        )
        return int(rows[0][0])

    def list_sessions(
        self,
        where: SessionFilter | None = None,
        *,
        limit: int = 50,
        cursor: str | None = None,
        sort: Sort = "newest",
    ) -> Page:
        """A page of the sessions that match, in the order `sort` (newest start first unless
        given; the reward sorts read the reward `where.reward` names, `reward` by default)."""
        if not 1 <= limit <= PAGE_MAX:
            raise QueryError(f"a page holds 1 to {PAGE_MAX} sessions, not {limit}")
        if sort not in SORTS:
            raise QueryError(f"a list is sorted {', '.join(SORTS)}, not {sort!r}")
        where = where or SessionFilter()
        sql, params = self._where(where)
        p = self.dialect.param
        name = where.reward or "reward"
        descending = sort in ("newest", "reward_high")
        if sort in ("newest", "oldest"):
            key, key_params = "COALESCE(s.started_ms, -1)", []
        else:  # sessions without the reward last, either way
            missing = _NO_REWARD if descending else -_NO_REWARD
            key = (
                "COALESCE((SELECT r.value FROM rewards r WHERE r.session_id = s.session_id "
                f"AND r.name = {p}), {-missing!r})"
            )
            key_params = [name]
        if cursor is not None:
            at, sid = decode_cursor(cursor, sort)
            beyond = "<" if descending else ">"
            sql += f" AND ({key} {beyond} {p} OR ({key} = {p} AND s.session_id {beyond} {p}))"
            params += [*key_params, at, *key_params, at, sid]
        order = "DESC" if descending else "ASC"
        rows = self._fetch(
            self.conn.cursor(),
            f"SELECT {_SUMMARY_COLUMNS} FROM sessions s WHERE {sql} "
            f"ORDER BY {key} {order}, s.session_id {order} "
            f"LIMIT {int(limit) + 1}",
            [*params, *key_params],
        )
        more = len(rows) > limit
        rows = rows[:limit]
        summaries = self._summaries(rows, where.judge_version)
        last = summaries[-1] if more and summaries else None
        if last is None:
            return Page(sessions=tuple(summaries), cursor=None)
        if sort in ("newest", "oldest"):
            at_key: float = -1 if last.started_ms is None else last.started_ms
        else:
            value = last.rewards.get(name)
            at_key = value if value is not None else (-_NO_REWARD if descending else _NO_REWARD)
        return Page(sessions=tuple(summaries), cursor=encode_cursor(sort, at_key, last.session_id))

    def session(self, session_id: str) -> SessionDetail | None:
        """Everything the store holds of one session (None: no such session indexed)."""
        cur = self.conn.cursor()
        rows = self._fetch(
            cur,
            f"SELECT {_SUMMARY_COLUMNS}, s.linked_session_id, s.group_id FROM sessions s "
            f"WHERE s.session_id = {self.dialect.param}",
            [session_id],
        )
        if not rows:
            return None
        (summary,) = self._summaries([rows[0][:-2]], LIVE_JUDGE_VERSION)
        linked, group = rows[0][-2:]
        one = [session_id]
        p = self.dialect.param
        breaks: dict[str, list[str]] = {}
        for chain, reason in self._fetch(
            cur,
            f"SELECT chain, reason FROM chain_breaks WHERE session_id = {p} ORDER BY chain, reason",
            one,
        ):
            breaks.setdefault(chain, []).append(reason)
        covered = {
            chain: CheckpointInfo(seq=int(seq), log=log, tree_size=int(size))
            for chain, seq, log, size in self._fetch(
                cur,
                f"SELECT chain, seq, log, tree_size FROM checkpoints WHERE session_id = {p}",
                one,
            )
        }
        types: dict[str, dict[str, int]] = {}
        for chain, kind, n in self._fetch(
            cur,
            f"SELECT chain, type, records FROM event_types WHERE session_id = {p} ORDER BY chain, type",
            one,
        ):
            types.setdefault(chain, {})[kind] = int(n)
        chains = tuple(
            ChainInfo(
                chain=chain,
                topic=topic,
                partition=int(partition),
                first_offset=int(first),
                last_offset=int(last),
                first_ms=int(first_ms),
                last_ms=int(last_ms),
                events=int(events),
                head_seq=int(head_seq),
                head_hash=head_hash,
                status=status,
                audit_breaks=tuple(breaks.pop(chain, [])),
                checkpoint=covered.get(chain),
                types=types.get(chain, {}),
            )
            for chain, topic, partition, first, last, first_ms, last_ms, events, head_seq, head_hash, status in self._fetch(
                cur,
                "SELECT chain, topic, partition, first_offset, last_offset, first_ms, last_ms, "
                f"events, head_seq, head_hash, status FROM chains WHERE session_id = {p} ORDER BY chain",
                one,
            )
        )
        scores: dict[tuple[str, str], dict[str, float]] = {}
        for version, judge, name, value in self._fetch(
            cur,
            "SELECT vs.judge_version, vs.judge, vs.name, vs.value FROM verdict_scores vs "
            "JOIN verdicts v ON v.session_id = vs.session_id AND v.judge_version = vs.judge_version "
            f"AND v.judge = vs.judge AND v.seq = vs.seq WHERE vs.session_id = {p} ORDER BY vs.name",
            one,
        ):
            scores.setdefault((version, judge), {})[name] = float(value)
        verdicts = tuple(
            VerdictInfo(
                judge_version=version,
                judge=judge,
                status=status,
                scores=scores.get((version, judge), {}),
                judge_session_id=judge_session,
            )
            for version, judge, status, judge_session in self._fetch(
                cur,
                "SELECT judge_version, judge, status, judge_session_id FROM verdicts "
                f"WHERE session_id = {p} ORDER BY judge_version, judge",
                one,
            )
        )
        reasons: dict[str, list[str]] = {}
        for version, code in self._fetch(
            cur,
            "SELECT fr.judge_version, fr.code FROM filter_reasons fr JOIN filter_outcomes fo "
            "ON fo.session_id = fr.session_id AND fo.judge_version = fr.judge_version "
            f"AND fo.seq = fr.seq WHERE fr.session_id = {p} ORDER BY fr.code",
            one,
        ):
            reasons.setdefault(version, []).append(code)
        filters = tuple(
            FilterInfo(
                judge_version=version,
                accepted=bool(accepted),
                status=status,
                turns=int(turns),
                tool_calls=int(calls),
                reward=None if reward is None else float(reward),
                filter_version=filter_version,
                reasons=tuple(reasons.get(version, [])),
                reasons_sealed=bool(sealed),
            )
            for version, accepted, status, turns, calls, reward, filter_version, sealed in self._fetch(
                cur,
                "SELECT judge_version, accepted, status, turns, tool_calls, reward, filter_version, "
                f"reasons_sealed FROM filter_outcomes WHERE session_id = {p} ORDER BY judge_version",
                one,
            )
        )
        firings = tuple(
            RuleFiring(judge_version=v, epoch=int(e), rule=r)
            for v, e, r in self._fetch(
                cur,
                "SELECT judge_version, epoch, rule FROM rule_firings "
                f"WHERE session_id = {p} ORDER BY judge_version, epoch, rule",
                one,
            )
        )
        decisions = tuple(
            DecisionInfo(
                seq=int(seq),
                epoch=int(epoch),
                event_type=event_type,
                remedy_direction=direction,
                cites=tuple(c for c in cites.split(",") if c),
            )
            for seq, epoch, event_type, direction, cites in self._fetch(
                cur,
                "SELECT seq, epoch, event_type, remedy_direction, cites FROM decisions "
                f"WHERE session_id = {p} ORDER BY seq",
                one,
            )
        )
        calls = tuple(
            ToolCallInfo(
                call_id=call_id,
                name=name,
                seq=None if seq is None else int(seq),
                success=None if success is None else bool(success),
                duration_ms=None if duration is None else float(duration),
            )
            for call_id, name, seq, success, duration in self._fetch(
                cur,
                "SELECT call_id, name, seq, success, duration_ms FROM tool_calls "
                f"WHERE session_id = {p} ORDER BY COALESCE(seq, result_seq), call_id",
                one,
            )
        )
        worlds = tuple(
            WorldInfo(
                seq=int(seq),
                digest=digest,
                files=int(files),
                stored_bytes=int(stored),
                blobs_indexed=bool(indexed),
            )
            for seq, digest, files, stored, indexed in self._fetch(
                cur,
                "SELECT w.seq, w.digest, w.files, w.stored_bytes, "
                "CASE WHEN EXISTS (SELECT 1 FROM blobs b WHERE b.sha256 = w.digest) THEN 1 ELSE 0 END "
                f"FROM worlds w WHERE w.session_id = {p} ORDER BY w.seq",
                one,
            )
        )
        judges = tuple(
            str(r[0])
            for r in self._fetch(
                cur,
                "SELECT judge_session_id FROM judge_sessions "
                f"WHERE session_id = {p} ORDER BY judge_session_id",
                one,
            )
        )
        return SessionDetail(
            **summary.model_dump(),
            linked_session_id=linked,
            group_id=group,
            chains=chains,
            verdicts=verdicts,
            filters=filters,
            rule_firings=firings,
            decisions=decisions,
            tool_calls=calls,
            worlds=worlds,
            judge_sessions=judges,
        )

    def search(
        self, text: str, where: SessionFilter | None = None, *, limit: int = 50
    ) -> list[SearchHit]:
        """The records whose text holds every word of `text` (in sessions that match
        `where`), best match first."""
        words = [w for w in text.split() if w]
        if not words:
            raise QueryError("search for at least one word")
        if not 1 <= limit <= PAGE_MAX:
            raise QueryError(f"a search returns 1 to {PAGE_MAX} hits, not {limit}")
        sql, params = self._where(where or SessionFilter())
        rows = self._search(self.conn.cursor(), words, sql, params, limit)
        return [
            SearchHit(session_id=sid, seq=int(seq), kind=kind, snippet=snippet)
            for sid, seq, kind, snippet in rows
        ]

    def judge_versions(self) -> list[str]:
        """Every judge version with a verdict or a filter outcome here, the live one first."""
        return judge_versions(self)

    def compare_versions(self, a: str, b: str, *, limit: int = 500) -> VersionComparison:
        """What version `b` judged differently from version `a`: filter outcomes, verdict
        statuses and scores, counted over every session both judged (`_compare.py`)."""
        if not 1 <= limit <= PAGE_MAX:
            raise QueryError(f"a comparison lists 1 to {PAGE_MAX} changes, not {limit}")
        return compare_versions(self, a, b, limit=limit)

    def reward_bins(
        self, where: SessionFilter, name: str = "reward", bins: int = 10
    ) -> list[RewardBin]:
        """How the reward `name` of the matching sessions is distributed (`_facets.py`)."""
        return reward_bins(self, where, name, bins)

    def outcomes_by_day(self, where: SessionFilter, days: int = 30) -> list[DayOutcomes]:
        """The filter's outcomes of the matching sessions by the day they started."""
        return outcomes_by_day(self, where, days)

    def tool_failures(self, where: SessionFilter, tools: int = 12) -> list[ToolFailures]:
        """The most called tools of the matching sessions, with their failed calls."""
        return tool_failures(self, where, tools)

    def judge_agreement(self, judge_version: str = LIVE_JUDGE_VERSION) -> list[JudgeAgreement]:
        """Each judge of `judge_version` (and its reward filter) against the reviewers'
        verdicts, on the sessions both judged (`_review.py`)."""
        return judge_agreement(self, judge_version)

    def sampled_ids(self, where: SessionFilter, size: int, seed: str) -> list[str]:
        """A reproducible uniform sample of the matching sessions' ids (`_review.py`)."""
        return sampled_ids(self, where, size, seed)

    def info(self) -> StoreInfo:
        cur = self.conn.cursor()
        meta = dict(self._fetch(cur, "SELECT key, value FROM meta"))
        positions = tuple(
            PositionInfo(
                topic=t,
                partition=int(p),
                next_offset=int(o),
                last_ms=int(ms),
                records=int(n),
                unreadable=int(u),
                tampered=int(x),
            )
            for t, p, o, ms, n, u, x in self._fetch(
                cur,
                "SELECT topic, partition, next_offset, last_ms, records, unreadable, tampered "
                "FROM positions ORDER BY topic, partition",
            )
        )
        sessions = int(self._fetch(cur, "SELECT COUNT(*) FROM sessions")[0][0])
        return StoreInfo(
            store=self.describe(),
            schema_version=int(meta.get("schema_version", 0)),
            prefix=meta.get("prefix"),
            sessions=sessions,
            positions=positions,
        )

    def session_events(
        self, session_id: str, chain: str = Stream.EVENTS.value
    ) -> list[tuple[int, int, int]]:
        """(seq, partition, offset) of each counted record of a session's chain, by seq."""
        p = self.dialect.param
        return [
            (int(seq), int(part), int(off))
            for seq, part, off in self._fetch(
                self.conn.cursor(),
                f'SELECT seq, partition, "offset" FROM events WHERE session_id = {p} AND chain = {p} ORDER BY seq',
                [session_id, chain],
            )
        ]

    # -- helpers ----------------------------------------------------------------------------------
    def _summaries(self, rows: Sequence[Sequence[Any]], judge_version: str) -> list[SessionSummary]:
        if not rows:
            return []
        ids = [str(r[0]) for r in rows]
        cur = self.conn.cursor()
        marks = self._marks(len(ids))
        tags: dict[str, list[str]] = {}
        for sid, tag in self._fetch(
            cur,
            f"SELECT session_id, tag FROM session_tags WHERE session_id IN ({marks}) ORDER BY tag",
            ids,
        ):
            tags.setdefault(sid, []).append(tag)
        models: dict[str, list[str]] = {}
        for sid, model in self._fetch(
            cur,
            f"SELECT session_id, model FROM session_models WHERE session_id IN ({marks}) ORDER BY model",
            ids,
        ):
            models.setdefault(sid, []).append(model)
        subjects = dict(
            self._fetch(
                cur,
                f"SELECT session_id, subject_hash FROM subjects WHERE session_id IN ({marks})",
                ids,
            )
        )
        events: dict[str, int] = {}
        chain_status: dict[str, str] = {}
        for sid, chain, n, status in self._fetch(
            cur,
            f"SELECT session_id, chain, events, status FROM chains WHERE session_id IN ({marks}) ORDER BY chain",
            ids,
        ):
            if chain == Stream.EVENTS.value:
                events[sid] = int(n)
            if status != "ok" and sid not in chain_status:
                chain_status[sid] = f"{chain}: {status}"
        for sid, chain, reason in self._fetch(
            cur,
            f"SELECT session_id, chain, reason FROM chain_breaks WHERE session_id IN ({marks}) ORDER BY chain, reason",
            ids,
        ):
            chain_status.setdefault(sid, f"{chain}: audit:{reason}")
        p = self.dialect.param
        accepted = {
            sid: bool(a)
            for sid, a in self._fetch(
                cur,
                f"SELECT session_id, accepted FROM filter_outcomes WHERE judge_version = {p} "
                f"AND session_id IN ({marks})",
                [judge_version, *ids],
            )
        }
        erased = {
            str(sid)
            for (sid,) in self._fetch(
                cur, f"SELECT session_id FROM erased WHERE session_id IN ({marks})", ids
            )
        }
        rewards: dict[str, dict[str, float]] = {}
        for sid, name, value in self._fetch(
            cur,
            f"SELECT session_id, name, value FROM rewards WHERE session_id IN ({marks}) ORDER BY name",
            ids,
        ):
            rewards.setdefault(sid, {})[name] = float(value)
        return [
            SessionSummary(
                session_id=sid,
                kind=kind,
                task=task,
                model=model,
                trainable=None if trainable is None else bool(trainable),
                status=status or "running",
                started_ms=None if started is None else int(started),
                ended_ms=None if ended is None else int(ended),
                tags=tuple(tags.get(sid, [])),
                models=tuple(models.get(sid, [])),
                subject_hash=subjects.get(sid),
                events=events.get(sid, 0),
                chain=chain_status.get(sid, "ok"),
                accepted=accepted.get(sid),
                rewards=rewards.get(sid, {}),
                erased=sid in erased,
            )
            for sid, kind, task, model, trainable, status, started, ended in rows
        ]

    def _where(self, f: SessionFilter) -> tuple[str, list[Any]]:
        """The WHERE clause (over `sessions s`) of a filter, and its parameters."""
        p = self.dialect.param
        conds: list[str] = []
        params: list[Any] = []

        def add(cond: str, *values: Any) -> None:
            conds.append(cond)
            params.extend(values)

        if f.session_ids:
            add(f"s.session_id IN ({self._marks(len(f.session_ids))})", *f.session_ids)
        if f.id_prefix:
            escaped = f.id_prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            add(f"s.session_id LIKE {p} ESCAPE '\\'", escaped + "%")
        if f.kind is not None:
            add(f"s.kind = {p}", f.kind)
        if f.group_id is not None:
            add(f"s.group_id = {p}", f.group_id)
        if f.task is not None:
            add(f"s.task = {p}", f.task)
        for tag in f.tags:
            if "=" in tag:
                add(
                    f"EXISTS (SELECT 1 FROM session_tags t WHERE t.session_id = s.session_id AND t.tag = {p})",
                    tag,
                )
            else:
                add(
                    f"EXISTS (SELECT 1 FROM session_tags t WHERE t.session_id = s.session_id AND t.key = {p})",
                    tag,
                )
        if f.model is not None:
            add(
                f"EXISTS (SELECT 1 FROM session_models m WHERE m.session_id = s.session_id AND m.model = {p})",
                f.model,
            )
        if f.status == "running":
            add("s.status IS NULL")
        elif f.status is not None:
            add(f"s.status = {p}", f.status)
        if f.trainable is not None:
            add(f"s.trainable = {p}", f.trainable)
        if f.since_ms is not None:
            add(f"s.started_ms >= {p}", f.since_ms)
        if f.until_ms is not None:
            add(f"s.started_ms < {p}", f.until_ms)
        if f.subject_hash is not None:
            add(
                f"EXISTS (SELECT 1 FROM subjects x WHERE x.session_id = s.session_id AND x.subject_hash = {p})",
                f.subject_hash,
            )
        broken = (
            "(EXISTS (SELECT 1 FROM chains c WHERE c.session_id = s.session_id AND c.status <> 'ok') "
            "OR EXISTS (SELECT 1 FROM chain_breaks b WHERE b.session_id = s.session_id))"
        )
        if f.chain == "broken":
            add(broken)
        elif f.chain == "ok":
            add(f"NOT {broken}")
        jv = f.judge_version
        if f.accepted is not None:
            add(
                "EXISTS (SELECT 1 FROM filter_outcomes fo WHERE fo.session_id = s.session_id "
                f"AND fo.judge_version = {p} AND fo.accepted = {p})",
                jv,
                f.accepted,
            )
        if f.filtered is not None:
            add(
                ("EXISTS" if f.filtered else "NOT EXISTS")
                + " (SELECT 1 FROM filter_outcomes fo WHERE fo.session_id = s.session_id "
                f"AND fo.judge_version = {p})",
                jv,
            )
        if f.reason is not None:
            add(
                "EXISTS (SELECT 1 FROM filter_reasons fr JOIN filter_outcomes fo "
                "ON fo.session_id = fr.session_id AND fo.judge_version = fr.judge_version "
                "AND fo.seq = fr.seq WHERE fr.session_id = s.session_id "
                f"AND fr.judge_version = {p} AND fr.code = {p})",
                jv,
                f.reason,
            )
        if f.judge is not None or f.verdict_status is not None:
            cond = f"EXISTS (SELECT 1 FROM verdicts v WHERE v.session_id = s.session_id AND v.judge_version = {p}"
            values: list[Any] = [jv]
            if f.judge is not None:
                cond += f" AND v.judge = {p}"
                values.append(f.judge)
            if f.verdict_status is not None:
                cond += f" AND v.status = {p}"
                values.append(f.verdict_status)
            add(cond + ")", *values)
        if f.score is not None or f.score_min is not None or f.score_max is not None:
            if f.score is None:
                raise QueryError("score bounds need the score's name (score=...)")
            cond = (
                "EXISTS (SELECT 1 FROM verdict_scores vs JOIN verdicts v ON v.session_id = vs.session_id "
                "AND v.judge_version = vs.judge_version AND v.judge = vs.judge AND v.seq = vs.seq "
                f"WHERE vs.session_id = s.session_id AND vs.judge_version = {p} AND vs.name = {p}"
            )
            values = [jv, f.score]
            if f.judge is not None:
                cond += f" AND vs.judge = {p}"
                values.append(f.judge)
            if f.score_min is not None:
                cond += f" AND vs.value >= {p}"
                values.append(f.score_min)
            if f.score_max is not None:
                cond += f" AND vs.value <= {p}"
                values.append(f.score_max)
            add(cond + ")", *values)
        if f.reward is not None or f.reward_min is not None or f.reward_max is not None:
            cond = f"EXISTS (SELECT 1 FROM rewards r WHERE r.session_id = s.session_id AND r.name = {p}"
            values = [f.reward or "reward"]
            if f.reward_min is not None:
                cond += f" AND r.value >= {p}"
                values.append(f.reward_min)
            if f.reward_max is not None:
                cond += f" AND r.value <= {p}"
                values.append(f.reward_max)
            add(cond + ")", *values)
        if f.tool is not None or f.tool_failed is not None:
            calls = "SELECT 1 FROM tool_calls tc WHERE tc.session_id = s.session_id"
            values = []
            if f.tool is not None:
                calls += f" AND tc.name = {p}"
                values.append(f.tool)
            if f.tool_failed is None:
                add(f"EXISTS ({calls})", *values)
            elif f.tool_failed:
                add(f"EXISTS ({calls} AND tc.success = {p})", *values, False)
            else:
                add(
                    f"EXISTS ({calls}) AND NOT EXISTS ({calls} AND tc.success = {p})",
                    *values,
                    *values,
                    False,
                )
        if f.rule is not None:
            add(
                "EXISTS (SELECT 1 FROM rule_firings rf WHERE rf.session_id = s.session_id "
                f"AND rf.judge_version = {p} AND rf.rule = {p})",
                jv,
                f.rule,
            )
        if f.world is not None:
            add(
                f"EXISTS (SELECT 1 FROM worlds w WHERE w.session_id = s.session_id AND w.digest = {p})",
                f.world,
            )
        if f.erased is not None:
            add(
                ("" if f.erased else "NOT ")
                + "EXISTS (SELECT 1 FROM erased x WHERE x.session_id = s.session_id)"
            )
        if f.reviewed is not None:
            add(
                ("" if f.reviewed else "NOT ")
                + "EXISTS (SELECT 1 FROM verdicts hv WHERE hv.session_id = s.session_id "
                f"AND hv.judge_version = {p})",
                HUMAN_JUDGE_VERSION,
            )
        if f.disagreeing is not None:
            both = " AND ".join(
                "EXISTS (SELECT 1 FROM verdicts dv WHERE dv.session_id = s.session_id "
                f"AND dv.judge_version = {p} AND dv.status = '{status}')"
                for status in ("ok", "failed")
            )
            add(("" if f.disagreeing else "NOT ") + f"({both})", jv, jv)
        return (" AND ".join(conds) if conds else "1 = 1"), params

    def _marks(self, n: int) -> str:
        return ", ".join([self.dialect.param] * n)

    def _fetch(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        # No parameters at all, not []: psycopg then reads `%` in the statement as itself.
        if params:
            cur.execute(sql, list(params))
        else:
            cur.execute(sql)
        return list(cur.fetchall())

    def _commit(self, cur: Any) -> None:
        self.conn.commit()

    def _rollback(self, cur: Any) -> None:
        self.conn.rollback()


_NO_REWARD = 1e300
"""The sort key of a session without the reward sorted on: past every real reward."""

_SUMMARY_COLUMNS = (
    "s.session_id, s.kind, s.task, s.model, s.trainable, s.status, s.started_ms, s.ended_ms"
)
