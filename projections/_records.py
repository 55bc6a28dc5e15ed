"""Reading one record for a projection: through the codec, hash checked.

Shared by exports, reports and the live feed, so all of them leave out the same records: bytes
that are not an envelope (the live audit dead-lettered them) and envelopes whose content does
not hash to their `hash` (tampered; leaving them out shows as a gap in the session's chain).
"""

from __future__ import annotations

from typing import Literal

from rolltape.schemas import TypedEvent, UnreadableRecord, read_event

Problem = Literal["unreadable", "tampered"]


def checked_event(value: bytes) -> tuple[TypedEvent | None, Problem | None]:
    """(event, None) for a usable record, (None, problem) otherwise."""
    try:
        event = read_event(value)
    except UnreadableRecord:
        return None, "unreadable"
    if not event.intact:
        return None, "tampered"
    return event, None
