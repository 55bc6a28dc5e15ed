"""`rolltape privacy erase`: destroy a subject's (or a session's) data keys, and sign the receipt.

Erasure is crypto-shredding: the sealed content stays in the log, chained and checkpointed as
it was, and every reader that reads the keys topic finds the key's tombstone and reads the
session as erased from then on (docs/privacy.md). The command, as the admin (the only principal
that may write tombstones and the erasures stream):

1. reads the keys topic and picks the live data keys of the subject (or the session);
2. writes a tombstone for each and waits until the broker acknowledged them all;
3. appends an `erasure` record (sessions, key ids, who, when; never the subject) to the one
   `erasures` chain, signed with the judge's Ed25519 key, so the receipt checks offline with
   the public key that checks checkpoints.

Erasing what has no live key (an unknown subject, one erased already) is an error that says so:
nothing is written. Two erasures at the same moment could both take the erasures chain's head;
the log's order then keeps the first and flags the second as a fork (as any second writer).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import orjson

from rolltape.infra._errors import InfraError
from rolltape.infra.broker import require_connection
from rolltape.infra.commands.lineage import read_lineage
from rolltape.infra.kafka.erasures import read_erasures_log
from rolltape.infra.kafka.keyring import read_keys, write_keys
from rolltape.infra.keys import judge_key
from rolltape.infra.settings import Settings
from rolltape.schemas import (
    ERASURES_SESSION,
    ChainWriter,
    Erasure,
    Role,
    Stream,
    software_version,
    topic_name,
)
from rolltape.schemas.trust import sign_erasure


class EraseError(InfraError):
    """Nothing to erase as asked; the message says why."""


@dataclass(frozen=True)
class Receipt:
    """What was erased: the signed record, its place in the erasures chain, and the subject as
    asked (printed to whoever asked; not stored)."""

    erasure: Erasure
    seq: int
    hash: str
    subject: str | None

    def json(self) -> str:
        """The receipt as `privacy erase` prints it: the subject, the signed record and its
        place in the erasures chain."""
        out = {
            "subject": self.subject,
            "erasure": self.erasure.model_dump(mode="json"),
            "record": {"stream": "erasures", "seq": self.seq, "hash": self.hash},
        }
        return orjson.dumps(out, option=orjson.OPT_INDENT_2).decode()


async def erase(
    settings: Settings,
    *,
    subject: str | None = None,
    session_id: str | None = None,
    reason: str | None = None,
) -> Receipt:
    """As the admin principal of the settings' cluster, tombstone the live data keys of
    `subject` or of `session_id` (exactly one of them) and append the signed erasure record;
    EraseError when there is nothing to erase."""
    connection = require_connection(settings, Role.ADMIN)
    if (subject is None) == (session_id is None):
        raise EraseError("erase takes one of --subject or --session")
    prefix = settings.topic_prefix
    key = judge_key(settings)  # checked before anything is written
    private = key.private_key()
    keyring = await read_keys(connection, prefix, None)  # the records suffice: no KEK
    chosen = {
        f"{sid}/{kid}".encode(): r
        for (sid, kid), r in keyring.records.items()
        if r.subject == subject
        or (session_id is not None and session_id in (r.session_id, r.about))
    }
    if not chosen:
        what = f"subject {subject!r}" if subject is not None else f"session {session_id!r}"
        raise EraseError(
            f"no live data key for {what} on {topic_name(Stream.KEYS, prefix)}: it was never "
            "recorded with a subject, or it is erased already (see the erasures stream: "
            "`rolltape log tail --stream erasures`)"
        )
    sessions = tuple(sorted({r.session_id for r in chosen.values()}))
    # Read before the keys go: what learned from them is named in the signed receipt.
    models = tuple((await read_lineage(settings)).models_trained_on(sessions))
    await write_keys(connection, prefix, [(k, None) for k in sorted(chosen)], "rolltape-erase")
    producer = connection.chain_producer(linger_ms=0, client_id="rolltape-erase")
    async with connection.started(producer, f"erasing on {connection}") as started:
        erased_ns = time.time_ns()
        principal = connection.principal or settings.principal
        writer: ChainWriter[str] = ChainWriter()
        head = (await read_erasures_log(connection, prefix)).head
        if head is not None:
            writer.take_over(ERASURES_SESSION, head[0] + 1, head[1])
        seq, prev_hash = writer.head(ERASURES_SESSION)
        erasure = sign_erasure(
            private,
            Erasure(
                sessions=sessions,
                keys=tuple(k.decode() for k in sorted(chosen)),
                requested_by=principal,
                reason=reason,
                models=models,
                erased_ns=erased_ns,
                seq=seq,
                prev_hash=prev_hash,
                key_id=key.key_id(),
            ),
        )
        value, digest = writer.append(
            ERASURES_SESSION,
            stream=Stream.ERASURES.value,
            session_id=ERASURES_SESSION,
            ts_ns=erased_ns,
            type="erasure",
            payload=erasure.model_dump(mode="json"),
            producer={
                "name": "rolltape.erase",
                "version": software_version(),
                "principal": principal,
            },
        )
        await started.send_and_wait(
            topic_name(Stream.ERASURES, prefix), value, key=ERASURES_SESSION.encode()
        )
    return Receipt(erasure, seq, digest, subject)
