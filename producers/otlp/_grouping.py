"""Which session a span belongs to, by name: a trace's own (`otel-<trace id>`), or the group of
traces that share an OpenInference `session.id` or a GenAI `gen_ai.conversation.id`
(`otel-session-<id>`, `otel-conversation-<id>`), and the continuations of each (`.<n>`).

A module of its own because the names are a contract: exports, the console and a user's own
queries find an agent's session by them, and the ingest only applies them.
"""

from __future__ import annotations

import hashlib
import re

from rolltape.producers.otlp._openinference import SESSION_ID
from rolltape.producers.otlp._wire import Span

SESSION_GROUP = "session:"
"""The key prefix of a group of traces sharing an OpenInference `session.id`."""
CONVERSATION_ID = "gen_ai.conversation.id"
CONVERSATION_GROUP = "conversation:"
"""The key prefix of a group of traces sharing a GenAI `gen_ai.conversation.id`."""
_GROUPINGS = (
    (SESSION_GROUP, SESSION_ID, "session"),
    (CONVERSATION_GROUP, CONVERSATION_ID, "conversation"),
)
"""(key prefix, the attribute naming the group, the word in its session ids), the first that a
span names winning: OpenInference's `session.id` is the application's own grouping; the
conventions' conversation id may come from a provider's conversation under it."""
_SAFE_ID = re.compile(r"[A-Za-z0-9_:@+-]{1,150}")
"""A group id used as it is in a session id: no `.`, which opens a continuation's number."""


def group_key(span: Span) -> str | None:
    """The group of traces a span names, as a key: `session:<id>` for its OpenInference
    `session.id`, else `conversation:<id>` for its `gen_ai.conversation.id`; None when it names
    neither (its trace is then a session of its own)."""
    attributes = span.attributes
    for prefix, attribute, _ in _GROUPINGS:
        named = attributes.get(attribute)
        if isinstance(named, str) and named:
            return prefix + named
    return None


def grouping(key: str) -> tuple[str, str, str] | None:
    """(attribute, word, id) of a group key; None for a trace's own."""
    for prefix, attribute, word in _GROUPINGS:
        if key.startswith(prefix):
            return attribute, word, key.removeprefix(prefix)
    return None


def session_id_for(trace_id: str, generation: int) -> str:
    """The session of a trace's `generation`-th chain: `otel-<trace id>` for the first, then
    `otel-<trace id>.<n>` for each continuation (a chain is never reopened)."""
    return f"otel-{trace_id}" if generation == 1 else f"otel-{trace_id}.{generation}"


def grouped_session_id(session: str, generation: int = 1, *, word: str = "session") -> str:
    """The rolltape session of an OpenInference `session.id` (its `generation`-th chain), or,
    with `word="conversation"`, of a `gen_ai.conversation.id`: `otel-session-<id>` (or
    `otel-conversation-<id>`) when the id is safe as a key, else the first 32 hex digits of its
    SHA-256 (the id itself is in `run_config.otel`, under its attribute's name)."""
    safe = (
        session
        if _SAFE_ID.fullmatch(session)
        else hashlib.sha256(session.encode()).hexdigest()[:32]
    )
    base = f"otel-{word}-{safe}"
    return base if generation == 1 else f"{base}.{generation}"
