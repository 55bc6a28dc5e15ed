"""When a tool result counts as a failure: one rule for the recorder, the fold and the importer.

It is the Hermes agent's rule (`_extract_tool_stats` in NousResearch/hermes-agent,
`batch_runner.py`, as of commit 5d3be898), so tool statistics computed here agree with the
`tool_stats` of Hermes rows: a JSON object with a non-null `error`, a nested
`content.error`, or `success: false`; or a result that is not JSON and is empty or starts with
`error:` (any case). A non-zero exit code alone is not a failure, nor is "Unknown tool" text.
"""

from __future__ import annotations

import orjson


def result_failed(content: str) -> bool:
    """Whether a tool's result text reports a failure, by the rule above."""
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        stripped = content.strip()
        return not stripped or stripped.lower().startswith("error:")
    if not isinstance(body, dict):
        return False
    if body.get("error") is not None or body.get("success") is False:
        return True
    nested = body.get("content")
    return isinstance(nested, dict) and nested.get("error") is not None
