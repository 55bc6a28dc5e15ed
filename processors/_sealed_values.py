"""The data key and the purpose a session's values are sealed under outside its records.

Exists because three holders seal and open the same values and must agree byte for byte: the
stored session state (its transcript), the judge messages on the worker's internal topics (the
transcript a judge reads, the verdict it returns) and the step itself (what it hands a judge).
A sealed value is bound to its purpose, so each purpose is spelled here once.
"""

from __future__ import annotations

from rolltape.schemas.privacy import Access, ContentKey, Keyring


def session_key(
    keys: Keyring | None, session_id: str, key_id: str | None
) -> tuple[ContentKey | None, Access]:
    """The session's data key `key_id` from `keys`, or None and why not."""
    if keys is None or key_id is None:
        return None, "key unavailable"
    key = keys.key(session_id, key_id)
    return key, "opened" if key is not None else keys.access(session_id, key_id)


def transcript_purpose(session_id: str) -> str:
    """What a session's sealed transcript is bound to."""
    return f"transcript of {session_id}"


def verdict_purpose(session_id: str, judge: str) -> str:
    """What an LLM judge's sealed verdict on a session is bound to."""
    return f"verdict of {judge} on {session_id}"
