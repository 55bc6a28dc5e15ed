"""Regenerate schemas/vectors/canonical.json from the reference implementation.

Run only when the canonical form changes on purpose (a new schema version): the committed file is
the contract other implementations check against, and tests fail when this output drifts from it.
"""

from __future__ import annotations

import hashlib
import math
import struct
import sys
from pathlib import Path
from typing import Any

import orjson

from rolltape.schemas import GENESIS_HASH, canonical_bytes, seal

VALUES: list[tuple[str, Any]] = [
    ("empty object", {}),
    ("key order is by code point", {"b": 1, "a": 2, "B": 3, "é": 4, "\uffff": 5, "😀": 6, "aa": 7}),
    (
        "nested objects and arrays",
        {"z": [1, [2, [3, {"y": None, "x": True}]]], "a": {"c": {}, "b": []}},
    ),
    ("unicode is written raw, not escaped", {"text": "héllo wörld — 東京 😀 \u2028\u2029"}),
    ("control characters are escaped", {"s": '\x00\x01\x08\t\n\x0b\x0c\r\x1f\x7f"\\/'}),
    ("non-finite floats become tokens", {"loss": math.nan, "up": math.inf, "down": -math.inf}),
    (
        "floats in shortest round-trip form",
        [
            0.1,
            1.0,
            -0.0,
            1e16,
            1e-05,
            1e-7,
            123.456,
            5e-324,
            1.7976931348623157e308,
            2.5e-3,
            1e15,
            100.0,
            1 / 3,
        ],
    ),
    (
        "large integers stay integers",
        [2**53 + 1, 2**63 - 1, -(2**63), 1_763_683_200_123_456_789, 0, -1],
    ),
    ("strings that look like tags", {"content": '</think><tool_call>{"name":"x"}</tool_call>'}),
]

FLOATS = [
    0.1,
    1.0,
    -0.0,
    0.0,
    1e16,
    1e-05,
    1e-7,
    1e-4,
    1e22,
    1e21,
    123456789012345678.0,
    5e-324,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    0.3,
    2 / 3,
    1e100,
    -1.5e-10,
    9007199254740993.0,
]


def build() -> bytes:
    producer = {"name": "vectors", "version": "1", "principal": "alice"}
    chain = []
    prev = GENESIS_HASH
    events = [
        (
            "session_started",
            {
                "task": "2+2?",
                "kind": "agent",
                "tools": [],
                "model": None,
                "run_config": {},
                "tags": [],
                "trainable": True,
                "linked_session_id": None,
                "group_id": None,
            },
        ),
        (
            "turn",
            {"role": "user", "content": "what is 2+2? 😀", "reasoning": None, "token_ids": None},
        ),
        ("metric", {"epoch": 1, "train_loss": math.nan, "lr": 0.001}),
    ]
    for seq, (event_type, payload) in enumerate(events):
        record, digest = seal(
            stream="events",
            session_id="vector-session-1",
            seq=seq,
            ts_ns=1_763_683_200_000_000_000 + seq,
            type=event_type,
            payload=payload,
            prev_hash=prev,
            producer=producer,
        )
        chain.append({"record": record.decode(), "hash": digest})
        prev = digest
    doc = {
        "about": "rolltape canonical encoding v1 test vectors; see docs/canonical-encoding.md",
        "values": [
            {
                "name": name,
                "canonical": canonical_bytes(v).decode(),
                "sha256": hashlib.sha256(canonical_bytes(v)).hexdigest(),
            }
            for name, v in VALUES
        ],
        "floats": [
            {"bits": struct.pack(">d", f).hex(), "token": canonical_bytes(f).decode()}
            for f in FLOATS
        ],
        "chain": chain,
    }
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"


if __name__ == "__main__":
    out = Path(__file__).resolve().parent.parent / "schemas" / "vectors" / "canonical.json"
    out.write_bytes(build())
    sys.stdout.write(f"wrote {out}\n")
