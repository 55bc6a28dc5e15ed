"""Reading one record for a projection: decoded, shaped like an envelope, hash checked.

Shared by exports and the live feed, so both leave out the same records: bytes that are not an
envelope (the live audit dead-lettered them) and envelopes whose content does not hash to their
`hash` (tampered; leaving them out shows as a gap in the session's chain).
"""

from __future__ import annotations

from typing import Any, Literal

from rolltape.schemas import CanonicalEncodingError, content_hash, decode

ENVELOPE_KEYS = ("session_id", "stream", "seq", "type", "hash", "prev_hash", "payload", "ts_ns")
Problem = Literal["unreadable", "tampered"]


def checked_envelope(value: bytes) -> tuple[dict[str, Any] | None, Problem | None]:
    """(envelope, None) for a usable record, (None, problem) otherwise."""
    try:
        env = decode(value)
    except CanonicalEncodingError:
        return None, "unreadable"
    if not isinstance(env, dict) or any(k not in env for k in ENVELOPE_KEYS):
        return None, "unreadable"
    checked = content_hash(env, value)
    if checked is None or checked[0] != env["hash"]:
        return None, "tampered"
    return env, None
