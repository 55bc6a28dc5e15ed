"""What records add to the read model: a batch of records in, table rows out.

Pure: the fold reads the records it is given and the chain heads the store holds for them
(`ChainHead`), and returns `IndexChanges`; the store applies them with the batch's positions in
one transaction. The same records and heads give the same rows, so a rebuild from the log gives
the store the live indexer built.

A chained record counts once, where it extends its chain's head (the next seq, linked to the
head's hash); a copy of a record already counted (a redelivery in the log) adds nothing; a
record that does not extend its chain marks the chain (`gap`, `broken_link`, `bad_genesis`) and
is counted from there, as `rolltape log verify` reports it. Which fields are content follows
`schemas.CONTENT_FIELDS`: a sealed payload's content is neither searchable nor stored.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from hashlib import sha256
from typing import Any, NamedTuple

from rolltape.projections.index._rows import (
    BlobRow,
    ChainBreakRow,
    ChainRow,
    CheckpointRow,
    DecisionRow,
    ErasedRow,
    EventRow,
    EventTypeRow,
    ExtentRow,
    FilterReasonRow,
    FilterRow,
    IndexChanges,
    JudgeSessionRow,
    ModelRow,
    PositionRow,
    RewardRow,
    RuleFiringRow,
    ScoreRow,
    SessionEndRow,
    SessionRow,
    SubjectRow,
    TagRow,
    TextRow,
    ToolCallRow,
    ToolResultRow,
    VerdictRow,
    WorldRow,
)
from rolltape.schemas import (
    CHAINED_STREAMS,
    GENESIS_HASH,
    BlobError,
    DataKeyRecord,
    Stream,
    TypedEvent,
    UnreadableRecord,
    read_blob_record,
    read_event,
    split_stream,
)

TEXT_MAX_CHARS = 20_000
"""Text kept per record for search: enough for any message people search, bounded for a tool
result that dumped a file."""


class Record(NamedTuple):
    """A record as the indexer read it: which stream's topic, where, and its bytes."""

    stream: Stream
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    broker_ms: int


class ChainHead(NamedTuple):
    """A chain's head as the store holds it: what the next record must extend."""

    seq: int
    hash: str
    status: str


ChainKey = tuple[str, str]
"""(session id, chain name)."""


def keyed_subject(secret: bytes) -> Callable[[str], str]:
    """The keyed hash the store keeps of a subject (HMAC-SHA256 under `secret`): equal for
    equal subjects under one secret, and no dictionary of names reverses it without the
    secret."""

    def digest(subject: str) -> str:
        return hmac.new(secret, subject.encode(), sha256).hexdigest()

    return digest


@dataclass
class _Chain:
    topic: str
    partition: int
    first_offset: int
    last_offset: int
    first_ms: int
    last_ms: int
    events: int
    head_seq: int
    head_hash: str
    status: str


Opener = Callable[[TypedEvent], TypedEvent | None]
"""Opens a sealed event (its content in place), or None where it cannot: what an indexer that
holds the key-encryption key passes, so a subject's session's text is searchable."""


def fold_batch(
    records: Sequence[Record],
    heads_of: Callable[[set[ChainKey]], Mapping[ChainKey, ChainHead]],
    subject_hash: Callable[[str], str],
    opener: Opener | None = None,
) -> IndexChanges:
    """The rows a batch of records adds. Each record is decoded once; `heads_of` is asked
    once, for the stored heads of every chain the batch touches. With `opener`, a sealed
    event's content is indexed as a clear one's is (its task, its text); without, or where
    it does not open, it is neither stored nor searchable."""
    decoded: list[TypedEvent | None] = []
    keys: set[ChainKey] = set()
    for record in records:
        event = None
        if record.stream in CHAINED and record.value is not None:
            try:
                event = read_event(record.value)
            except UnreadableRecord:
                pass
            else:
                keys.add((event.session_id, event.stream))
        decoded.append(event)
    fold = IndexFold(heads_of(keys) if keys else {}, subject_hash, opener)
    for record, event in zip(records, decoded, strict=True):
        fold.add(record, event)
    return fold.finish()


class IndexFold:
    """One batch's fold over the stored `heads` of the chains it touches; `subject_hash`
    keys subjects."""

    def __init__(
        self,
        heads: Mapping[ChainKey, ChainHead],
        subject_hash: Callable[[str], str],
        opener: Opener | None = None,
    ) -> None:
        self._heads = dict(heads)
        self._subject_hash = subject_hash
        self._opener = opener
        self._chains: dict[ChainKey, _Chain] = {}
        self._types: dict[tuple[str, str, str], int] = {}
        self._positions: dict[tuple[str, int], list[int]] = {}
        self._extents: dict[tuple[bytes, str, int], list[int]] = {}
        self.changes = IndexChanges()

    def add(self, record: Record, event: TypedEvent | None = None) -> None:
        """Fold one record (in partition order); `event` is its value decoded, for a record
        of a chained stream (None: not an envelope)."""
        at = self._positions.setdefault((record.topic, record.partition), [0, 0, 0, 0, 0])
        at[0] = record.offset + 1
        at[1] = max(at[1], record.broker_ms)
        at[2] += 1
        if record.stream in CHAINED:
            if record.key is not None:
                self._extend(record)
            if event is None:
                at[3] += 1
            else:
                self._chained(event, record, at)
        elif record.stream is Stream.BLOBS:
            self._blob(record)
        elif record.stream is Stream.KEYS:
            self._key(record)

    def finish(self) -> IndexChanges:
        """The batch's rows (call once, after the last `add`)."""
        changes = self.changes
        for (sid, chain), c in self._chains.items():
            changes.chains.append(
                ChainRow(
                    sid,
                    chain,
                    c.topic,
                    c.partition,
                    c.first_offset,
                    c.last_offset,
                    c.first_ms,
                    c.last_ms,
                    c.events,
                    c.head_seq,
                    c.head_hash,
                    c.status,
                )
            )
        for (sid, chain, kind), count in self._types.items():
            changes.event_types.append(EventTypeRow(sid, chain, kind, count))
        for (key, topic, partition), (first, last, n) in self._extents.items():
            sid = key.decode(errors="replace")
            changes.extents.append(ExtentRow(sid, topic, partition, first, last, n))
        for (topic, partition), (next_offset, last_ms, n, unreadable, tampered) in sorted(
            self._positions.items()
        ):
            changes.positions.append(
                PositionRow(topic, partition, next_offset, last_ms, n, unreadable, tampered)
            )
        return changes

    # -- chained streams -------------------------------------------------------------------------
    def _extend(self, record: Record) -> None:
        assert record.key is not None
        where = (record.key, record.topic, record.partition)
        extent = self._extents.get(where)
        if extent is None:
            self._extents[where] = [record.offset, record.offset, 1]
        else:
            extent[1] = record.offset  # records come in partition order
            extent[2] += 1

    def _chained(self, event: TypedEvent, record: Record, at: list[int]) -> None:
        key = (event.session_id, event.stream)
        chain = self._chains.get(key)
        head = self._heads.get(key)
        if not event.intact:
            at[4] += 1
            if chain is None:
                chain = self._chain(key, record, head)
            if chain.status == "ok":
                chain.status = "tampered"
            return
        status = head.status if head is not None else "ok"
        if head is None:
            if event.seq != 0 or event.prev_hash != GENESIS_HASH:
                status = _first_break(status, "gap" if event.seq else "bad_genesis")
        elif event.seq <= head.seq:
            return  # a copy of a record already counted (or an older fork: the audit says)
        elif event.seq > head.seq + 1:
            status = _first_break(status, "gap")
        elif event.prev_hash != head.hash:
            status = _first_break(status, "broken_link")
        if chain is None:
            chain = self._chain(key, record, head)
        chain.last_offset = max(chain.last_offset, record.offset)
        chain.last_ms = max(chain.last_ms, record.broker_ms)
        chain.events += 1
        chain.head_seq, chain.head_hash, chain.status = event.seq, event.hash, status
        self._heads[key] = ChainHead(event.seq, event.hash, status)
        types = (event.session_id, event.stream, event.type)
        self._types[types] = self._types.get(types, 0) + 1
        self.changes.events.append(
            EventRow(
                event.session_id,
                event.stream,
                event.seq,
                event.type,
                event.hash,
                record.partition,
                record.offset,
                record.broker_ms,
            )
        )
        if self._opener is not None and "sealed" in event.payload:
            event = self._opener(event) or event
        self._event(event, record)

    def _chain(self, key: ChainKey, record: Record, head: ChainHead | None) -> _Chain:
        chain = _Chain(
            topic=record.topic,
            partition=record.partition,
            first_offset=record.offset,
            last_offset=record.offset,
            first_ms=record.broker_ms,
            last_ms=record.broker_ms,
            events=0,
            head_seq=head.seq if head is not None else -1,
            head_hash=head.hash if head is not None else "",
            status=head.status if head is not None else "ok",
        )
        self._chains[key] = chain
        return chain

    def _event(self, event: TypedEvent, record: Record) -> None:
        handle = _BY_TYPE.get(event.type)
        if handle is not None:
            handle(self, event, record)

    # -- event types -----------------------------------------------------------------------------
    def _session_started(self, event: TypedEvent, record: Record) -> None:
        if event.stream != Stream.EVENTS:
            return
        p = event.payload
        sealed = bool(p.get("sealed"))
        sid = event.session_id
        model = p.get("model")
        self.changes.sessions.append(
            SessionRow(
                sid,
                str(p.get("kind", "agent")),
                None if sealed else _clean(str(p.get("task", ""))),
                model,
                bool(p.get("trainable", True)),
                p.get("linked_session_id"),
                p.get("group_id"),
                record.broker_ms,
                event.ts_ns,
            )
        )
        for tag in p.get("tags", ()):
            text = _clean(str(tag))
            name, _, value = text.partition("=")
            self.changes.tags.append(TagRow(sid, text, name, value))
        if model:
            self.changes.models.append(ModelRow(sid, str(model)))
        if not sealed and p.get("task"):
            self._text(sid, event.seq, "task", str(p["task"]))

    def _session_ended(self, event: TypedEvent, record: Record) -> None:
        if event.stream == Stream.EVENTS:
            status = str(event.payload.get("status", ""))
            self.changes.session_ends.append(
                SessionEndRow(event.session_id, status, record.broker_ms, event.seq)
            )

    def _turn(self, event: TypedEvent, record: Record) -> None:
        p = event.payload
        if p.get("model"):
            self.changes.models.append(ModelRow(event.session_id, str(p["model"])))
        if not p.get("sealed") and p.get("content"):
            self._text(event.session_id, event.seq, str(p.get("role", "")), str(p["content"]))

    def _tool_call(self, event: TypedEvent, record: Record) -> None:
        p = event.payload
        name = str(p.get("name", ""))
        sid = event.session_id
        self.changes.tool_calls.append(ToolCallRow(sid, str(p.get("id", "")), name, event.seq))
        if not p.get("sealed"):
            args = p.get("raw_arguments") or _arguments_text(p.get("arguments"))
            self._text(sid, event.seq, "tool_call", f"{name} {args}".strip())

    def _tool_result(self, event: TypedEvent, record: Record) -> None:
        p = event.payload
        duration = p.get("duration_ms")
        self.changes.tool_results.append(
            ToolResultRow(
                event.session_id,
                str(p.get("call_id", "")),
                bool(p.get("success", True)),
                None if duration is None else float(duration),
                event.seq,
            )
        )
        if not p.get("sealed") and p.get("content"):
            self._text(event.session_id, event.seq, "tool_result", str(p["content"]))

    def _reward(self, event: TypedEvent, record: Record) -> None:
        p = event.payload
        value = _number(p.get("value"))
        if value is not None:
            name = str(p.get("name", "reward"))
            self.changes.rewards.append(RewardRow(event.session_id, name, value, event.seq))

    def _decision(self, event: TypedEvent, record: Record) -> None:
        p = event.payload
        self.changes.decisions.append(
            DecisionRow(
                event.session_id,
                event.seq,
                int(p.get("epoch", 0)),
                str(p.get("event_type", "")),
                str(p.get("remedy_direction", "")),
                ",".join(str(c) for c in p.get("cites", ())),
            )
        )

    def _world(self, event: TypedEvent, record: Record) -> None:
        p = event.payload
        entries = p.get("entries", ())
        stored = sum(
            int(e.get("size", 0)) for e in entries if e.get("kind") == "file" and e.get("stored")
        )
        files = sum(1 for e in entries if e.get("kind") == "file")
        self.changes.worlds.append(
            WorldRow(event.session_id, event.seq, str(p.get("digest", "")), files, stored)
        )

    def _verdict(self, event: TypedEvent, record: Record) -> None:
        _, version = _judge_version(event.stream)
        p = event.payload
        sid, judge = event.session_id, str(p.get("judge", ""))
        judge_session = p.get("judge_session_id")
        self.changes.verdicts.append(
            VerdictRow(sid, version, judge, str(p.get("status", "")), event.seq, judge_session)
        )
        for name, value in sorted(dict(p.get("scores", {})).items()):
            number = _number(value)
            if number is not None:
                self.changes.scores.append(
                    ScoreRow(sid, version, judge, str(name), number, event.seq)
                )
        if judge_session:
            self.changes.judge_sessions.append(JudgeSessionRow(sid, str(judge_session)))

    def _human_verdict(self, event: TypedEvent, record: Record) -> None:
        """A reviewer's verdict: a verdict of the judge `human:<reviewer>` under the judge
        version `human` (pass is `ok`, fail is `failed`), its value the score `human`."""
        p = event.payload
        if p.get("reviewer") != event.producer.principal:
            return  # a review speaks only for the login that wrote it (the worker refuses it)
        sid, judge = event.session_id, f"human:{p.get('reviewer', '')}"
        _, version = _judge_version(event.stream)
        status = "ok" if p.get("verdict") == "pass" else "failed"
        self.changes.verdicts.append(VerdictRow(sid, version, judge, status, event.seq, None))
        score = _number(p.get("score"))
        value = score if score is not None else (1.0 if status == "ok" else 0.0)
        self.changes.scores.append(ScoreRow(sid, version, judge, "human", value, event.seq))

    def _filter_outcome(self, event: TypedEvent, record: Record) -> None:
        _, version = _judge_version(event.stream)
        p = event.payload
        sid = event.session_id
        sealed = bool(p.get("sealed"))
        self.changes.filters.append(
            FilterRow(
                sid,
                version,
                bool(p.get("accepted")),
                str(p.get("status", "")),
                int(p.get("turns", 0)),
                int(p.get("tool_calls", 0)),
                _number(p.get("reward")),
                str(p.get("filter_version", "")),
                event.seq,
                sealed,
            )
        )
        codes = {str(r.get("code", "")) for r in p.get("reasons", ()) if isinstance(r, dict)}
        for code in sorted(codes):
            self.changes.filter_reasons.append(FilterReasonRow(sid, version, code, event.seq))

    def _rule_evaluation(self, event: TypedEvent, record: Record) -> None:
        _, version = _judge_version(event.stream)
        p = event.payload
        epoch = int(p.get("epoch", 0))
        for rule in p.get("fired", ()):
            self.changes.rule_firings.append(
                RuleFiringRow(event.session_id, version, epoch, str(rule))
            )

    def _chain_broken(self, event: TypedEvent, record: Record) -> None:
        p = event.payload
        self.changes.chain_breaks.append(
            ChainBreakRow(event.session_id, str(p.get("stream", "")), str(p.get("reason", "")))
        )

    def _checkpoint(self, event: TypedEvent, record: Record) -> None:
        p = event.payload
        size = int(p.get("tree_head", {}).get("tree_size", 0))
        log = event.session_id
        for leaf in p.get("leaves", ()):
            self.changes.checkpoints.append(
                CheckpointRow(
                    str(leaf.get("session_id", "")),
                    str(leaf.get("stream", "")),
                    int(leaf.get("seq", 0)),
                    log,
                    size,
                )
            )

    def _erasure(self, event: TypedEvent, record: Record) -> None:
        for sid in event.payload.get("sessions", ()):
            self.changes.erased.append(ErasedRow(str(sid)))

    # -- the other topics ------------------------------------------------------------------------
    def _blob(self, record: Record) -> None:
        try:
            chunk, _ = read_blob_record(record.key, record.value)
        except BlobError:
            return
        self.changes.blobs.append(
            BlobRow(
                chunk.sha256,
                chunk.index,
                chunk.parts[chunk.index],
                record.partition,
                record.offset,
            )
        )

    def _key(self, record: Record) -> None:
        if record.key is None:
            return
        if record.value is None:  # a tombstone: the session's data key is erased
            self.changes.erased.append(ErasedRow(record.key.decode(errors="replace")))
            return
        try:
            data = DataKeyRecord.model_validate_json(record.value)
        except ValueError:
            return
        self.changes.subjects.append(SubjectRow(data.session_id, self._subject_hash(data.subject)))

    def _text(self, session_id: str, seq: int, kind: str, text: str) -> None:
        self.changes.texts.append(TextRow(session_id, seq, kind, _clean(text[:TEXT_MAX_CHARS])))


def _clean(text: str) -> str:
    """Text as both stores can hold it: PostgreSQL's text refuses NUL, which JSON strings may
    carry (U+FFFD in its place, in either store, so that they hold the same values)."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def _first_break(status: str, mark: str) -> str:
    return mark if status == "ok" else status


def _judge_version(chain: str) -> tuple[Stream, str]:
    return split_stream(chain)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None  # a non-finite score travels as a string token: not a number to filter on
    return float(value)


def _arguments_text(arguments: Any) -> str:
    if not isinstance(arguments, dict):
        return ""
    return " ".join(f"{k}={v}" for k, v in sorted(arguments.items()))


CHAINED = frozenset(CHAINED_STREAMS)
"""The streams whose records are chained per session (counted where they extend a chain)."""

_BY_TYPE: dict[str, Callable[[IndexFold, TypedEvent, Record], None]] = {
    "session_started": IndexFold._session_started,
    "session_ended": IndexFold._session_ended,
    "turn": IndexFold._turn,
    "tool_call": IndexFold._tool_call,
    "tool_result": IndexFold._tool_result,
    "reward": IndexFold._reward,
    "decision": IndexFold._decision,
    "world_snapshot": IndexFold._world,
    "verdict": IndexFold._verdict,
    "human_verdict": IndexFold._human_verdict,
    "filter_outcome": IndexFold._filter_outcome,
    "rule_evaluation": IndexFold._rule_evaluation,
    "chain_broken": IndexFold._chain_broken,
    "checkpoint": IndexFold._checkpoint,
    "erasure": IndexFold._erasure,
}
