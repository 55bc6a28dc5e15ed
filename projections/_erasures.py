"""A file of erasures, checked offline: which sessions' content was erased, signed by the judge.

`rolltape privacy export-erasures FILE` writes the erasures chain (one envelope per line, canonical
JSON, from seq 0). Reading it back checks, with the judge's public key alone, that the lines are
one unbroken chain from its first record and that every erasure carries the key's signature
over its own place in the chain (seq and previous hash), so that none can be left out and the
rest linked again; a folder of exported lines can then be checked against it (`verify-export
--erasures`) and purged by it (`purge-export`) without trusting whoever handed the file over.
What it cannot show is erasures made after its last line: a file cut short at its end reads as
an older list (its last seq and time are printed; compare them with the receipt).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import ValidationError

from rolltape.projections._errors import ProjectionError
from rolltape.schemas import (
    ERASURES_SESSION,
    ChainVerifier,
    Erasure,
    Stream,
    UnreadableRecord,
    read_event,
)
from rolltape.schemas.trust import erasure_signed_by


class ErasuresFileError(ProjectionError):
    """A file of erasures that does not check out: the message lists what is wrong."""


@dataclass(frozen=True)
class ErasureList:
    """The erasures of a checked file, in order, and the erased sessions: session id -> the seq
    of the first erasure that names it."""

    erasures: tuple[Erasure, ...]
    sessions: dict[str, int]

    def describe(self) -> str:
        """What the file lists, to compare with the latest receipt: a file cut short at its end
        reads as an older list."""
        if not self.erasures:
            return "the erasures file lists no erasure"
        last = self.erasures[-1]
        when = dt.datetime.fromtimestamp(last.erased_ns / 1e9, dt.UTC).isoformat(timespec="seconds")
        return (
            f"the erasures file lists {len(self.erasures)} erasure(s) of "
            f"{len(self.sessions)} session(s), the last (seq {last.seq}) at {when}"
        )

    def erased(self, session_ids: list[str] | tuple[str, ...]) -> list[str]:
        """Those of `session_ids` that were erased."""
        return [sid for sid in session_ids if sid in self.sessions]


def read_erasures(data: bytes, public_key: Ed25519PublicKey) -> ErasureList:
    """The erasures in `data` (what `rolltape privacy export-erasures` wrote), checked: ErasuresFileError
    naming every line that is not a link of one chain from seq 0 or not signed by the key."""
    problems: list[str] = []
    verifier = ChainVerifier()
    erasures: dict[int, Erasure] = {}
    lines = data.splitlines()
    for number, line in enumerate(lines, start=1):
        verifier.add(line, position=f"line {number}", expected_stream=Stream.ERASURES.value)
        try:
            event = read_event(line)
        except UnreadableRecord:
            continue  # the chain's verifier names it
        try:
            if event.type != "erasure" or event.session_id != ERASURES_SESSION:
                raise ValueError(f"a {event.type} of {event.session_id}, not an erasure")
            erasure = Erasure.model_validate(event.payload)
        except (ValidationError, ValueError) as exc:
            problems.append(f"line {number}: not an erasure record: {exc}")
            continue
        if not erasure_signed_by(public_key, erasure):
            problems.append(
                f"line {number}: the erasure is not signed by this public key (it names key "
                f"{erasure.key_id})"
            )
        elif (erasure.seq, erasure.prev_hash) != (event.seq, event.prev_hash):
            problems.append(
                f"line {number}: the erasure was signed as seq {erasure.seq} of the chain and "
                f"stands at seq {event.seq}: erasures were left out, or the chain re-linked"
            )
        erasures.setdefault(event.seq, erasure)
    problems += [f"{b.position}: {b.kind.value}: {b.detail}" for b in verifier.unattributed]
    for report in verifier.reports():
        problems += [f"{b.position}: {b.kind.value}: {b.detail}" for b in report.breaks]
    if erasures and min(erasures) != 0:
        problems.append(f"the chain starts at seq {min(erasures)}, not 0: records are missing")
    if problems:
        raise ErasuresFileError("the erasures file does not check out:\n  " + "\n  ".join(problems))
    ordered = tuple(erasures[seq] for seq in sorted(erasures))
    sessions: dict[str, int] = {}
    for seq in sorted(erasures):
        for sid in erasures[seq].sessions:
            sessions.setdefault(sid, seq)
    return ErasureList(ordered, sessions)
