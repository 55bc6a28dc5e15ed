"""Link classification: is this record the next link of its hash chain?

Invariant: this is the one place where a record's (seq, prev_hash, hash) is compared with what a
checker knows of its chain. The offline verifier (every hash of a whole log), the live audit (a
head and a window of recent hashes, because its state is rewritten on every update) and the fold
(one session's records in seq order) remember different things; each says what it knows, and
given the same knowledge they classify a record the same way.

The rules, in the order they are applied:

- a seq the chain already holds: the same hash with intact content is a redelivery (at-least-once
  delivery resends records; not a break); the same hash over edited or re-encoded content is a
  damaged copy of the member, whose content check already reported it: it is neither a member
  nor set aside (setting its hash aside would set aside the member's true successor, which links
  to that hash); any other hash is a FORK, set aside;
- a record linking to one set aside continues that second writer: a FORK, set aside (one writer
  per chain, decided by log order: the chain is what was written first);
- below the head, at a seq the checker no longer remembers: REORDERED, and it stays out of the
  chain (a checker that remembers every seq fills the hole instead, still REORDERED);
- a known predecessor whose hash is not the record's prev_hash: a BROKEN_LINK, set aside;
- otherwise the record joins the chain, with the breaks its place shows: REORDERED (it fills a
  hole), AFTER_END (session_ended came before it), GAP (seqs missing before it) and BAD_GENESIS
  (seq 0 does not link to the genesis hash), in that order.

Content checks (TAMPERED, NOT_CANONICAL) are not link decisions: a checker makes them first and
says whether the record is `intact`, since only an intact copy is a redelivery.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rolltape.schemas._derived import BreakKind
from rolltape.schemas._envelope import GENESIS_HASH

Placement = Literal["joins", "redelivered", "damaged_copy", "set_aside", "late"]


@dataclass(frozen=True, slots=True)
class LinkVerdict:
    """Where a record goes and the breaks it shows there."""

    placement: Placement
    """joins: the record is a member of the chain (its breaks say what is wrong with its place);
    redelivered: a copy of the member at its seq; damaged_copy: the member's hash over content
    that does not hash to it (reported by the content check, kept out of the chain); set_aside: a second writer's record, never a
    member; late: below the head at a seq the checker no longer remembers."""
    breaks: tuple[BreakKind, ...] = ()

    @property
    def clean(self) -> bool:
        """The record extends its chain as it should (or is a harmless copy of a member)."""
        return not self.breaks


_REDELIVERED = LinkVerdict("redelivered")
_DAMAGED_COPY = LinkVerdict("damaged_copy")
_FORK = LinkVerdict("set_aside", (BreakKind.FORK,))
_BROKEN_LINK = LinkVerdict("set_aside", (BreakKind.BROKEN_LINK,))
_LATE = LinkVerdict("late", (BreakKind.REORDERED,))
_JOINS = LinkVerdict("joins")


def classify_link(
    seq: int,
    prev_hash: str,
    digest: str,
    *,
    next_seq: int,
    at_seq: str | None = None,
    before: str | None = None,
    ended_seq: int | None = None,
    continues_aside: bool = False,
    fills_holes: bool = True,
    intact: bool = True,
) -> LinkVerdict:
    """Classify the record (seq, prev_hash, digest) against what a checker knows of its chain.

    `next_seq` is one past the highest seq that joined the chain (0 when none did); `at_seq` the
    hash of the member at `seq`, `before` the hash of the member at seq - 1, when the checker
    knows them (a predecessor it does not know cannot be checked: the link is checked when it
    arrives); `ended_seq` the seq of the chain's session_ended; `continues_aside` whether
    prev_hash is the hash of a record set aside; `fills_holes` whether the checker remembers every
    seq below `next_seq`, so that one it has not seen is a hole; `intact` whether the content
    hashes to `digest` in canonical form."""
    if at_seq is not None:
        if at_seq == digest:
            return _REDELIVERED if intact else _DAMAGED_COPY
        return _FORK
    if continues_aside:
        return _FORK
    if seq < next_seq and not fills_holes:
        return _LATE
    if seq > 0 and before is not None and before != prev_hash:
        return _BROKEN_LINK
    breaks: list[BreakKind] = []
    if seq < next_seq:
        breaks.append(BreakKind.REORDERED)
    if ended_seq is not None and seq > ended_seq:
        breaks.append(BreakKind.AFTER_END)
    if seq > next_seq:
        breaks.append(BreakKind.GAP)
    if seq == 0 and prev_hash != GENESIS_HASH:
        breaks.append(BreakKind.BAD_GENESIS)
    return LinkVerdict("joins", tuple(breaks)) if breaks else _JOINS  # the usual case: shared
