"""The erasures chain read back: the one reader of the erasures stream, for `rolltape privacy erase`
(its head), `rolltape privacy export-erasures` (its records), the live readers of content (the
sessions erased) and a KEK rotation (the keys erased)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from rolltape.infra.kafka.readback import read_records
from rolltape.schemas import ERASURES_SESSION, Erasure, SchemaError, Stream, TypedEvent, read_event
from rolltape.schemas.clients import KafkaConnection


@dataclass(frozen=True)
class ErasuresLog:
    """The records of the erasures chain by seq (the first copy of each), as the log holds
    them. A record that does not read as an envelope is left out: `rolltape log verify` names it."""

    records: tuple[tuple[TypedEvent, bytes], ...]

    @property
    def head(self) -> tuple[int, str] | None:
        """(seq, hash) of the chain's last record; None before the first."""
        if not self.records:
            return None
        event = self.records[-1][0]
        return event.seq, event.hash

    def erasures(self) -> list[Erasure]:
        """The records that read as erasures, in order."""
        out = []
        for event, _ in self.records:
            if event.type == "erasure":
                try:
                    out.append(Erasure.model_validate(event.payload))
                except ValidationError:
                    continue  # a changed record: the chain's verification names it
        return out


async def read_erasures_log(connection: KafkaConnection, prefix: str) -> ErasuresLog:
    """The erasures chain as the erasures topic holds it now."""
    by_seq: dict[int, tuple[TypedEvent, bytes]] = {}
    async for record in read_records(connection, [Stream.ERASURES], prefix=prefix):
        try:
            event = read_event(record.value)
        except SchemaError:
            continue
        if event.session_id == ERASURES_SESSION:
            by_seq.setdefault(event.seq, (event, record.value or b""))
    return ErasuresLog(tuple(by_seq[seq] for seq in sorted(by_seq)))
