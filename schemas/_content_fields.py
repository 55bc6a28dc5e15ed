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

CONTENT_FIELDS: dict[str, tuple[str, ...]] = {
    "session_started": ("task",),
    "turn": ("content", "reasoning", "token_ids", "prompt_token_ids", "logprobs"),
    "tool_call": ("arguments", "raw_arguments"),
    "tool_result": ("content", "error"),
    "model_error": ("message", "partial_content"),
    "tool_parse_error": ("raw", "error"),
    "feedback": ("text",),
    "session_ended": ("error",),
}
"""Event type -> its content fields."""
