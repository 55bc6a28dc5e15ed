"""Chain verification: from records in log order to a report per (stream, session) chain.

Invariant: every record fed in is either counted in exactly one chain report or is an
unattributed break; nothing is dropped silently. Checks, in the order a reader meets them:

- the bytes parse as a v1 envelope (UNPARSEABLE, UNKNOWN_VERSION) and sit on the right topic and
  key (MISROUTED);
- the stored hash is the hash of the content (TAMPERED) and the bytes are canonical
  (NOT_CANONICAL: someone re-serialised the record);
- a seq seen before with the same hash is a redelivery: counted, not a break (at-least-once
  processors resend identical records after a crash; the content is intact and consumers drop it
  by event id); with another hash it is a FORK; a seq below one already seen arrived REORDERED;
- seq 0 links to the genesis hash (BAD_GENESIS); every other seq links to the hash of seq-1
  (BROKEN_LINK), checked as soon as both are known; seqs missing below the highest are GAPs;
  nothing follows session_ended on its chain (AFTER_END).

One writer per chain, decided by log order: the chain is what was written first. A record that
repeats a seq with another hash (FORK), or that does not link to the record already at seq-1
(BROKEN_LINK), is set aside, and so is every record that links to a set-aside one: a second
writer (a zombie of a restarted agent, a partitioned writer's spool drained late) never becomes
part of the chain it competed with, whatever it writes next. It is reported once and counted.

A forged record whose content was edited is TAMPERED; one whose hash was recomputed breaks the
link to its successor; one appended after the end is AFTER_END. A forger who appends to an open
chain with a correct link is stopped by ACLs on the topic, not by the hash alone
(docs/contracts.md, trust domains).

What a record is to its chain (joins, redelivered, set aside) is decided by `classify_link`
(_links.py), as for the live audit and the fold; this module keeps the memory and the reports.

Memory is bounded for long topics: a chain keeps 33 bytes per record (its hash and a presence
byte, indexed by seq), and each chain and the unattributed list keep at most MAX_DETAILED breaks
in full; the rest are counted by kind.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from rolltape.schemas._codec import UnreadableRecord, read_event
from rolltape.schemas._derived import BreakKind
from rolltape.schemas._envelope import GENESIS_HASH
from rolltape.schemas._links import classify_link
from rolltape.schemas._topics import split_stream

MAX_DETAILED = 200


def _on_its_topic(stream: str, topic_stream: str) -> bool:
    """A chain belongs on its stream's topic; a judge version's chains (`verdicts@v2`) live on
    the topic of their stream, beside the live ones."""
    if stream == topic_stream:
        return True
    try:
        return split_stream(stream)[0].value == topic_stream
    except ValueError:
        return False


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
    """The first MAX_DETAILED breaks in full."""
    break_counts: dict[str, int] = {}
    """Every break by kind, including those past MAX_DETAILED."""
    redelivered: int = 0
    """Byte-identical copies of records already seen (not breaks)."""
    set_aside: int = 0
    """Records that did not extend the chain (a second writer's, or ones continuing a broken
    link): the chain is what was written first, in log order; these are reported, not used."""

    @property
    def ok(self) -> bool:
        return not self.break_counts and not self.breaks


class _Findings:
    """Breaks kept in full up to a cap, counted by kind always."""

    def __init__(self) -> None:
        self.detailed: list[ChainBreak] = []
        self.counts: Counter[str] = Counter()

    def add(self, finding: ChainBreak) -> None:
        self.counts[finding.kind.value] += 1
        if len(self.detailed) < MAX_DETAILED:
            self.detailed.append(finding)


@dataclass
class _Chain:
    stream: str
    session_id: str
    hashes: bytearray = field(default_factory=bytearray)
    """32 bytes per seq: the record's hash, once seen."""
    present: bytearray = field(default_factory=bytearray)
    """1 byte per seq: 1 once seen."""
    waiting_links: dict[int, tuple[bytes, str | None]] = field(default_factory=dict)
    """seq -> (prev_hash, position) of records whose predecessor has not arrived yet."""
    max_seq: int = -1
    records: int = 0
    redelivered: int = 0
    ended_at: int | None = None
    after_end_seen: set[int] = field(default_factory=set)
    aside: set[bytes] = field(default_factory=set)
    """Hashes of records that did not extend the chain: a record linking to one is set aside too."""
    set_aside_count: int = 0
    findings: _Findings = field(default_factory=_Findings)

    def report(self, kind: BreakKind, seq: int | None, detail: str, position: str | None) -> None:
        self.findings.add(
            ChainBreak(
                kind=kind,
                stream=self.stream,
                session_id=self.session_id,
                seq=seq,
                detail=detail,
                position=position,
            )
        )

    def set_aside(self, digest: bytes) -> None:
        self.aside.add(digest)
        self.set_aside_count += 1

    def has(self, seq: int) -> bool:
        return 0 <= seq < len(self.present) and self.present[seq] == 1

    def hash_at(self, seq: int) -> bytes:
        return bytes(self.hashes[seq * 32 : seq * 32 + 32])

    def store(self, seq: int, digest: bytes) -> None:
        if seq >= len(self.present):
            grow = max(seq + 1 - len(self.present), len(self.present))  # amortised doubling
            self.present.extend(bytes(grow))
            self.hashes.extend(bytes(32 * grow))
        self.present[seq] = 1
        self.hashes[seq * 32 : seq * 32 + 32] = digest


class ChainVerifier:
    """Feed records in log order with `add`, then read `reports()` and `unattributed`."""

    def __init__(self) -> None:
        self._chains: dict[tuple[str, str], _Chain] = {}
        self._orphans = _Findings()

    @property
    def unattributed(self) -> list[ChainBreak]:
        """Records that belong to no chain (the first MAX_DETAILED in full)."""
        return self._orphans.detailed

    @property
    def unattributed_counts(self) -> dict[str, int]:
        return dict(self._orphans.counts)

    def add(
        self,
        data: bytes,
        *,
        position: str | None = None,
        expected_stream: str | None = None,
        key: bytes | None = None,
    ) -> None:
        def orphan(kind: BreakKind, detail: str) -> None:
            self._orphans.add(
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
            env = read_event(data)
        except UnreadableRecord as exc:
            orphan(exc.kind, exc.detail)
            return

        chain = self._chains.get((env.stream, env.session_id))
        if chain is None:
            chain = self._chains[(env.stream, env.session_id)] = _Chain(env.stream, env.session_id)
        chain.records += 1
        seq = env.seq

        if expected_stream is not None and not _on_its_topic(env.stream, expected_stream):
            chain.report(
                BreakKind.MISROUTED,
                seq,
                f"stream {env.stream!r} on the {expected_stream} topic",
                position,
            )
        if key is not None and key != env.session_id.encode():
            chain.report(
                BreakKind.MISROUTED, seq, f"record key {key!r} is not the session id", position
            )

        content_digest, canonical = env.computed_hash, env.canonical
        if content_digest is None:
            chain.report(BreakKind.NOT_CANONICAL, seq, "the record has no canonical form", position)
            return
        if content_digest != env.hash:
            chain.report(
                BreakKind.TAMPERED,
                seq,
                f"content hashes to {content_digest[:16]}…, record says {env.hash[:16]}…",
                position,
            )
        elif not canonical:
            chain.report(
                BreakKind.NOT_CANONICAL,
                seq,
                "record bytes differ from their canonical form",
                position,
            )

        digest = bytes.fromhex(env.hash)
        prev = bytes.fromhex(env.prev_hash)
        continues_aside = prev in chain.aside
        verdict = classify_link(
            seq,
            env.prev_hash,
            env.hash,
            next_seq=chain.max_seq + 1,
            at_seq=chain.hash_at(seq).hex() if chain.has(seq) else None,
            before=chain.hash_at(seq - 1).hex() if chain.has(seq - 1) else None,
            ended_seq=chain.ended_at,
            continues_aside=continues_aside,
            intact=content_digest == env.hash and canonical,
        )
        if verdict.placement == "redelivered":
            chain.redelivered += 1
            return
        if verdict.placement == "damaged_copy":
            return  # reported by the content check above; the member at its seq stands
        if verdict.placement == "set_aside":
            chain.set_aside(digest)
            if continues_aside:
                return  # the same second writer going on: counted with its first record's break
            if verdict.breaks == (BreakKind.FORK,):
                chain.report(BreakKind.FORK, seq, f"seq {seq} with another hash", position)
            else:
                chain.report(
                    BreakKind.BROKEN_LINK,
                    seq,
                    f"prev_hash {prev.hex()[:16]}… is not the hash of seq {seq - 1}: set aside "
                    "with the records that continue it (a second writer, or seq "
                    f"{seq - 1} was altered)",
                    position,
                )
            return
        # It joins (the verifier remembers every seq, so nothing is late). Gaps are reported at
        # the end of the read, for the holes no later record filled.
        if BreakKind.REORDERED in verdict.breaks:
            chain.report(
                BreakKind.REORDERED, seq, f"seq {seq} arrived after seq {chain.max_seq}", position
            )
        chain.store(seq, digest)
        chain.max_seq = max(chain.max_seq, seq)

        if BreakKind.BAD_GENESIS in verdict.breaks:
            chain.report(
                BreakKind.BAD_GENESIS, 0, "seq 0 does not link to the genesis hash", position
            )
        if seq > 0 and not chain.has(seq - 1):
            chain.waiting_links[seq] = (prev, position)
        successor = chain.waiting_links.pop(seq + 1, None)
        if successor is not None:
            _check_link(chain, seq + 1, successor[0], successor[1])

        if BreakKind.AFTER_END in verdict.breaks:
            chain.after_end_seen.add(seq)
            chain.report(
                BreakKind.AFTER_END,
                seq,
                f"{env.type} after session_ended at seq {chain.ended_at}",
                position,
            )
        if env.type == "session_ended" and (chain.ended_at is None or seq < chain.ended_at):
            chain.ended_at = seq

    def reports(self) -> list[ChainReport]:
        """One report per chain, ordered by (session_id, stream)."""
        ordered = sorted(self._chains.values(), key=lambda c: (c.session_id, c.stream))
        return [_finish(chain) for chain in ordered]


def _check_link(chain: _Chain, seq: int, prev: bytes, position: str | None) -> None:
    """The link of a member that arrived before its predecessor, now that the predecessor is in."""
    verdict = classify_link(
        seq,
        prev.hex(),
        chain.hash_at(seq).hex(),
        next_seq=seq,
        before=chain.hash_at(seq - 1).hex(),
    )
    if BreakKind.BROKEN_LINK in verdict.breaks:
        chain.report(
            BreakKind.BROKEN_LINK,
            seq,
            f"prev_hash {prev.hex()[:16]}… is not the hash of seq {seq - 1}",
            position,
        )


def _finish(chain: _Chain) -> ChainReport:
    """The end-of-read checks (gaps, records after the end that arrived before it) and the
    report. It does not change the chain: reports() can be called again after more records."""
    findings = _Findings()
    findings.detailed = list(chain.findings.detailed)
    findings.counts = Counter(chain.findings.counts)

    def add(kind: BreakKind, seq: int, detail: str) -> None:
        findings.add(
            ChainBreak(
                kind=kind, stream=chain.stream, session_id=chain.session_id, seq=seq, detail=detail
            )
        )

    present = chain.present
    limit = chain.max_seq + 1
    start = present.find(0, 0, limit)
    while start != -1:
        end = present.find(1, start, limit)
        end = limit if end == -1 else end
        add(BreakKind.GAP, start, f"seq {start}..{end - 1} missing")
        start = present.find(0, end, limit)
    if chain.ended_at is not None:
        for seq in range(chain.ended_at + 1, limit):
            if present[seq] and seq not in chain.after_end_seen:
                add(
                    BreakKind.AFTER_END,
                    seq,
                    f"seq {seq} after session_ended at seq {chain.ended_at}",
                )
    head = chain.hash_at(chain.max_seq).hex() if chain.max_seq >= 0 else GENESIS_HASH
    return ChainReport(
        stream=chain.stream,
        session_id=chain.session_id,
        records=chain.records,
        last_seq=chain.max_seq,
        head_hash=head,
        ended=chain.ended_at is not None,
        breaks=tuple(findings.detailed),
        break_counts=dict(findings.counts),
        redelivered=chain.redelivered,
        set_aside=chain.set_aside_count,
    )
