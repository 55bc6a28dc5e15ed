"""The codec's native core, when it is built: one switch for the places that use it.

`rolltape.schemas._native` (Rust, built from schemas/native/ when the package is installed)
does in one pass what the reference implementation in `_canonical`, `_envelope`, `_codec` and
`privacy` does in Python: the canonical bytes of a value, sealing an envelope (with a subject
session's content sealed under its data key), the content hash of received bytes, and the
header check of a decoded record. It answers None wherever it leaves the decision to the
reference (a kind of value it does not walk, a value with no canonical form, bytes that are
not canonical), so every error and its message comes from one place, and every answer it
gives is held to the reference by the vectors and by differential tests.

Why native: these run once per record in every producer, worker, replay and export, and
in Python they were most of the per-record cost that is not rolltape's own logic (sealing a 1 KB
turn 3.6 µs, the content check of a received record 4.3 µs, its header check 1.6 µs;
natively 1.8, 0.7 and 0.5 µs).

Without the module (a platform it was not built for, or `ROLLTAPE_PURE_PYTHON=1`) the reference
runs alone and the bytes are the same.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol, cast


class NativeCodec(Protocol):
    """What the native module offers (schemas/native/src/lib.rs; its type stub): None means
    "the reference decides"."""

    def canonical(self, value: Any, /) -> bytes | None: ...

    def content_hash(self, raw: bytes, /) -> str | None: ...

    def well_formed(self, obj: Any, /) -> bool: ...

    def seal(
        self,
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
        plan: Any = None,
        sealer: Any = None,
        /,
    ) -> tuple[bytes, str] | None: ...

    def PayloadPlan(
        self, fields: list[tuple[Any, ...]], content: list[tuple[str, bytes]] = ..., /
    ) -> Any: ...

    def ContentSealer(self, key_id: str, encrypt_key: bytes, nonce_key: bytes, /) -> Any: ...

    def batch_fit(
        self, records: list[Any], start: int, max_bytes: int, /
    ) -> tuple[int, int] | None: ...

    def record_batch(
        self,
        records: list[Any],
        size: int,
        timestamp_ms: int,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        transactional: bool,
        /,
    ) -> bytes | None: ...


native: NativeCodec | None
"""The native module, or None when the reference implementation runs alone."""

try:
    native = cast(NativeCodec, importlib.import_module("rolltape.schemas._native"))
except ImportError:  # not built here: the reference implementation writes the same bytes
    native = None

if os.environ.get("ROLLTAPE_PURE_PYTHON", "") not in ("", "0"):
    native = None


def implementation() -> str:
    """Which implementation the codec runs: "native" or "python" (for benchmarks' output)."""
    return "python" if native is None else "native"


@contextmanager
def reference_only() -> Iterator[None]:
    """Run the reference implementation alone inside the block (tests and same-run baselines)."""
    global native
    saved, native = native, None
    try:
        yield
    finally:
        native = saved
