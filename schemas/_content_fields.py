"""Which payload fields are content: what a person said or a model wrote, sealed under the
session's data key when the session names a subject (rolltape.schemas.privacy).

Everything else stays in clear, because the processors need it without content: event types,
seq and chain fields, roles, tool names and call ids, success flags, token counts, finish
reasons, model names, latencies, rewards, scores, metric values. docs/canonical-encoding.md
states the same table; a test holds the two together.

A required text field that is sealed stays in clear as the empty string (the model needs a
value); an optional one is left out (its default). `sealed` then says the content is elsewhere.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

CONTENT_FIELDS: dict[str, tuple[str, ...]] = {
    "session_started": ("task",),
    "turn": ("content", "reasoning", "token_ids", "prompt_token_ids", "logprobs"),
    "tool_call": ("arguments", "raw_arguments"),
    "tool_result": ("content", "error"),
    "model_error": ("message", "partial_content"),
    "tool_parse_error": ("raw", "error"),
    "feedback": ("text",),
    "session_ended": ("error",),
    "verdict": ("violations", "details", "error"),
    "filter_outcome": ("reasons",),
}
"""Event type -> its content fields. A verdict's or filter outcome's are what a judge or filter
says about what was said (a reward's details, a judge's explanation, a filter's reasons): the
worker seals them under the judged session's data key, so erasing the session erases them too;
the status, scores and counts stay in clear."""


def unset(value: object) -> bool:
    """A payload field's `exclude_if` for "left out when None" (the one the payload plans know)."""
    return value is None


def sealed_field() -> Any:
    """The `sealed` field of a payload with content fields."""
    return Field(
        default=None,
        exclude_if=unset,
        description=(
            "The content fields, sealed under the session's data key "
            "(v1.<key id>.<nonce and ciphertext>); they are empty or absent in clear. "
            "Absent when the session names no subject."
        ),
    )
