"""Chain verification: from records in log order to a report per (stream, session) chain.

Invariant: every record fed in is either part of exactly one chain report or an unattributed
break; nothing is dropped silently. Checks, in the order a reader meets them:

- the bytes parse as a v1 envelope (UNPARSEABLE, UNKNOWN_VERSION) and sit on the right topic and
  key (MISROUTED);
- the stored hash is the hash of the content (TAMPERED) and the bytes are canonical
  (NOT_CANONICAL: someone re-serialised the record);
- a seq seen before is a DUPLICATE (same hash) or a FORK (another hash); a seq below one already
  seen arrived REORDERED;
- at the end: seqs missing below the highest are GAPs; seq 0 links to the genesis hash
  (BAD_GENESIS); every other present seq links to the hash of seq-1 (BROKEN_LINK); nothing
  follows session_ended on the events stream (AFTER_END).

A forged record whose content was edited is TAMPERED; one whose hash was recomputed breaks the
link to its successor; one appended after the end is AFTER_END. A forger who appends to an open
chain with a correct link is stopped by ACLs on the topic, not by the hash alone (DESIGN.md).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from rolltape.schemas._canonical import canonical_bytes, decode
from rolltape.schemas._envelope import GENESIS_HASH, SCHEMA_VERSION, envelope_from_mapping
from rolltape.schemas._errors import CanonicalEncodingError, EnvelopeError


class BreakKind(StrEnum):
    UNPARSEABLE = "unparseable"
    UNKNOWN_VERSION = "unknown_version"
    MISROUTED = "misrouted"
    TAMPERED = "tampered"
    NOT_CANONICAL = "not_canonical"
    DUPLICATE = "duplicate"
    FORK = "fork"
    REORDERED = "reordered"
    GAP = "gap"
    BAD_GENESIS = "bad_genesis"
    BROKEN_LINK = "broken_link"
    AFTER_END = "after_end"


class ChainBreak(BaseModel):
    """One finding; `position` is where the record sits in the log (topic[partition]@offset)."""

    model_config = ConfigDict(frozen=True)

    kind: BreakKind
    stream: str | None
    session_id: str | None
    seq: int | None
    detail: str
    position: str | None = None


class ChainReport(BaseModel):
    """The verdict on one (stream, session) chain."""

    model_config = ConfigDict(frozen=True)

    stream: str
    session_id: str
    records: int
    last_seq: int
    head_hash: str
    ended: bool
    breaks: tuple[ChainBreak, ...]

    @property
    def ok(self) -> bool:
        return not self.breaks


@dataclass
class _Link:
    hash: str
    prev_hash: str
    type: str
    position: str | None


@dataclass
class _Chain:
    links: dict[int, _Link] = field(default_factory=dict)
    max_seq: int = -1
    records: int = 0
    breaks: list[ChainBreak] = field(default_factory=list)


class ChainVerifier:
    """Feed records in log order with `add`, then read `reports()` and `unattributed`."""

    def __init__(self) -> None:
        self._chains: dict[tuple[str, str], _Chain] = {}
        self.unattributed: list[ChainBreak] = []

    def add(
        self,
        data: bytes,
        *,
        position: str | None = None,
        expected_stream: str | None = None,
        key: bytes | None = None,
    ) -> None:
        def orphan(kind: BreakKind, detail: str) -> None:
            self.unattributed.append(
                ChainBreak(
                    kind=kind,
                    stream=expected_stream,
                    session_id=None,
                    seq=None,
                    detail=detail,
                    position=position,
                )
            )

        try:
            obj = decode(data)
        except CanonicalEncodingError as exc:
            orphan(BreakKind.UNPARSEABLE, str(exc))
            return
        if isinstance(obj, dict) and obj.get("v") not in (None, SCHEMA_VERSION):
            orphan(BreakKind.UNKNOWN_VERSION, f"schema version {obj.get('v')!r}")
            return
        try:
            env = envelope_from_mapping(obj)
        except EnvelopeError as exc:
            orphan(BreakKind.UNPARSEABLE, str(exc)[:500])
            return

        chain = self._chains.setdefault((env.stream, env.session_id), _Chain())
        chain.records += 1

        def report(kind: BreakKind, detail: str) -> None:
            chain.breaks.append(
                ChainBreak(
                    kind=kind,
                    stream=env.stream,
                    session_id=env.session_id,
                    seq=env.seq,
                    detail=detail,
                    position=position,
                )
            )

        if expected_stream is not None and env.stream != expected_stream:
            report(BreakKind.MISROUTED, f"stream {env.stream!r} on the {expected_stream} topic")
        if key is not None and key != env.session_id.encode():
            report(BreakKind.MISROUTED, f"record key {key!r} is not the session id")

        body = {k: v for k, v in obj.items() if k != "hash"}
        try:
            computed = hashlib.sha256(canonical_bytes(body)).hexdigest()
            canonical = canonical_bytes(obj)
        except CanonicalEncodingError as exc:
            report(BreakKind.NOT_CANONICAL, str(exc))
            return
        if computed != env.hash:
            report(
                BreakKind.TAMPERED,
                f"content hashes to {computed[:16]}…, record says {env.hash[:16]}…",
            )
        elif canonical != bytes(data):
            report(BreakKind.NOT_CANONICAL, "record bytes differ from their canonical form")

        seen = chain.links.get(env.seq)
        if seen is not None:
            if seen.hash == env.hash:
                report(BreakKind.DUPLICATE, f"seq {env.seq} again (first at {seen.position})")
            else:
                report(
                    BreakKind.FORK, f"seq {env.seq} with another hash (first at {seen.position})"
                )
            return
        if env.seq < chain.max_seq:
            report(BreakKind.REORDERED, f"seq {env.seq} arrived after seq {chain.max_seq}")
        chain.links[env.seq] = _Link(env.hash, env.prev_hash, env.type, position)
        chain.max_seq = max(chain.max_seq, env.seq)

    def reports(self) -> list[ChainReport]:
        """One report per chain, ordered by (session_id, stream)."""
        ordered = sorted(self._chains.items(), key=lambda kv: (kv[0][1], kv[0][0]))
        return [_report(stream, session_id, chain) for (stream, session_id), chain in ordered]


def _report(stream: str, session_id: str, chain: _Chain) -> ChainReport:
    """The end-of-read checks: gaps, genesis, links, nothing after the end."""
    breaks = list(chain.breaks)

    def add(kind: BreakKind, seq: int | None, detail: str, position: str | None) -> None:
        breaks.append(
            ChainBreak(
                kind=kind,
                stream=stream,
                session_id=session_id,
                seq=seq,
                detail=detail,
                position=position,
            )
        )

    missing_from: int | None = None
    ended_at: int | None = None
    for seq in range(chain.max_seq + 1):
        link = chain.links.get(seq)
        if link is None:
            if missing_from is None:
                missing_from = seq
            continue
        if missing_from is not None:
            add(BreakKind.GAP, missing_from, f"seq {missing_from}..{seq - 1} missing", None)
            missing_from = None
        if seq == 0:
            if link.prev_hash != GENESIS_HASH:
                add(
                    BreakKind.BAD_GENESIS,
                    0,
                    "seq 0 does not link to the genesis hash",
                    link.position,
                )
        else:
            before = chain.links.get(seq - 1)
            if before is not None and before.hash != link.prev_hash:
                add(
                    BreakKind.BROKEN_LINK,
                    seq,
                    f"prev_hash {link.prev_hash[:16]}… is not the hash of seq {seq - 1}",
                    link.position,
                )
        if ended_at is not None:
            add(
                BreakKind.AFTER_END,
                seq,
                f"{link.type} after session_ended at seq {ended_at}",
                link.position,
            )
        elif link.type == "session_ended":
            ended_at = seq
    head = chain.links.get(chain.max_seq)
    return ChainReport(
        stream=stream,
        session_id=session_id,
        records=chain.records,
        last_seq=chain.max_seq,
        head_hash=head.hash if head else GENESIS_HASH,
        ended=ended_at is not None,
        breaks=tuple(breaks),
    )
