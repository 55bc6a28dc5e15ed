"""Type stubs of the codec's native core (schemas/native/src/lib.rs); see `_accel`."""

from typing import Any

def canonical(value: Any, /) -> bytes | None: ...
def content_hash(raw: bytes, /) -> str | None: ...
def seal(
    stream: str,
    session_id: str,
    seq: int,
    ts_ns: int,
    type: str,
    event_id: str | None,
    causes: Any,
    producer: Any,
    payload: Any,
    prev_hash: str,
    /,
) -> tuple[bytes, str] | None: ...
