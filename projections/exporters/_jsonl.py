"""The one way exports write a JSON line.

orjson keeps the key order the exporters build (the documented order of each format), writes
UTF-8 without ASCII escaping and is deterministic. JSON has no NaN: a non-finite float in an
export becomes null (the chains keep the exact value; Atropos scores are never non-finite).
"""

from __future__ import annotations

from typing import Any

import orjson


def jsonl_line(row: Any) -> bytes:
    """`row` as one JSON line, newline included, by the module's rules. Every export line goes
    through here, so equal rows give equal bytes."""
    return orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE)
