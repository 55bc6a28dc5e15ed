"""The one chain writer: every record rolltape writes is sealed onto its chain's head here.

Invariant: a head moves only when its record is sealed and returned, by one seq, to that
record's hash; a record that cannot be written (no canonical form, over the size limit) leaves
the head where it was, so a refused record never leaves a gap.

The recorder's sender, the processors' output chains, the importers and the LLM judges'
recorded conversations all write through a `ChainWriter`; they differ only in where the heads
live (the sender's memory, a session's saved state, one import) and in how a chain is keyed.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel

from rolltape.schemas import _accel
from rolltape.schemas._envelope import GENESIS_HASH, seal
from rolltape.schemas._errors import SchemaError
from rolltape.schemas._payload_plans import dump_payload, payload_plan
from rolltape.schemas._payloads import PAYLOAD_MODELS

if TYPE_CHECKING:
    from rolltape.schemas.privacy import ContentKey

K = TypeVar("K", bound=Hashable)


class RecordTooLargeError(SchemaError, ValueError):
    """A sealed record is over the writer's size limit (the head did not move)."""


class ChainWriter(Generic[K]):
    """Heads of chains keyed by `K`, and the sealing of the next record onto one of them.

    `heads` is the caller's own mapping when the heads must live elsewhere (a session's saved
    state): key -> (next seq, hash of the last record), as a tuple or a two-item list."""

    def __init__(
        self,
        heads: MutableMapping[K, Any] | None = None,
        *,
        max_record_bytes: int | None = None,
    ) -> None:
        self.heads: MutableMapping[K, Any] = {} if heads is None else heads
        self.max_record_bytes = max_record_bytes

    def head(self, key: K) -> tuple[int, str]:
        """(next seq, hash the next record links to) of a chain; (0, genesis) for a new one."""
        found = self.heads.get(key)
        if found is None:
            return 0, GENESIS_HASH
        return int(found[0]), str(found[1])

    def take_over(self, key: K, next_seq: int, head_hash: str) -> None:
        """Continue a chain another writer started (a resumed session)."""
        self.heads[key] = (next_seq, head_hash)

    def forget(self, key: K) -> None:
        """Drop a closed chain's head (its session ended): nothing is appended to it again."""
        self.heads.pop(key, None)

    def append(
        self,
        key: K,
        *,
        stream: str,
        session_id: str,
        ts_ns: int,
        type: str,
        payload: Mapping[str, Any] | bytes,
        producer: Mapping[str, str],
        event_id: str | None = None,
        causes: Sequence[str] = (),
    ) -> tuple[bytes, str]:
        """Seal the next record of chain `key` and move its head; (record bytes, hash).
        CanonicalEncodingError or RecordTooLargeError leave the head as it was."""
        seq, prev = self.head(key)
        value, digest = seal(
            stream=stream,
            session_id=session_id,
            seq=seq,
            ts_ns=ts_ns,
            type=type,
            payload=payload,
            prev_hash=prev,
            producer=producer,
            event_id=event_id,
            causes=tuple(causes),
        )
        return self._advance(key, seq, value, digest)

    def _advance(self, key: K, seq: int, value: bytes, digest: str) -> tuple[bytes, str]:
        """Move the head to a record sealed at `seq`, unless it is over the size limit."""
        if self.max_record_bytes is not None and len(value) > self.max_record_bytes:
            raise RecordTooLargeError(
                f"record is {len(value)} bytes, over the {self.max_record_bytes}-byte limit; "
                "store large content elsewhere and record a reference"
            )
        self.heads[key] = (seq + 1, digest)
        return value, digest

    def append_payload(
        self,
        key: K,
        *,
        stream: str,
        session_id: str,
        ts_ns: int,
        type: str,
        model: type[BaseModel],
        payload: Any,
        producer: Mapping[str, str],
        content_key: ContentKey | None = None,
    ) -> tuple[bytes, str]:
        """`append` of a payload not validated yet: what `model` validates and dumps it to is
        sealed (pydantic's ValidationError when it refuses it), with its content sealed under
        `content_key` when one is given (`seal_content`). Done by the native core in one pass
        where the model has a plan (schemas/_payload_plans.py), byte for byte the same."""
        native, plan = _accel.native, payload_plan(model)
        sealer = None
        if content_key is not None:
            # The plan knows the content fields of its model's own type (content_spec).
            sealer = content_key._native if PAYLOAD_MODELS.get(type) is model else None
            if sealer is None:
                plan = None
        if native is not None and plan is not None:
            seq, prev = self.head(key)
            sealed = native.seal(
                stream,
                session_id,
                seq,
                ts_ns,
                type,
                None,
                (),
                producer,
                payload,
                prev,
                plan,
                sealer,
            )
            if sealed is not None:
                return self._advance(key, seq, *sealed)
        if content_key is not None:
            # The reference: the dump sealed, and what is left in clear validated as any payload.
            from rolltape.schemas.privacy import seal_content  # the crypto library, when needed

            clear = seal_content(
                type,
                dump_payload(model, payload),
                content_key,
                stream=stream,
                session_id=session_id,
                seq=self.head(key)[0],
            )
            return self.append_payload(
                key,
                stream=stream,
                session_id=session_id,
                ts_ns=ts_ns,
                type=type,
                model=model,
                payload=clear,
                producer=producer,
            )
        return self.append(
            key,
            stream=stream,
            session_id=session_id,
            ts_ns=ts_ns,
            type=type,
            payload=dump_payload(model, payload),
            producer=producer,
        )
