"""A recorded world in the console: its entries from the snapshot's manifest, a file's
contents, and what changed between two worlds, all read from the blobs topic (at the offsets
the read model holds, `IndexBlobLocator`; scanned where it does not hold them).

Contents are untrusted text: a file is shown decoded as UTF-8 (bytes that are not shown as
U+FFFD), or as binary with its size, and never as more than `SHOWN_BYTES`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from rolltape.infra.broker import require_connection
from rolltape.infra.index import IndexBlobLocator, store_url
from rolltape.infra.kafka.blobs import read_blobs, read_world
from rolltape.infra.settings import Settings
from rolltape.schemas import Role, WorldEntry, WorldSnapshot

SHOWN_BYTES = 1 << 20
"""The most of one file a page shows."""
DIFFED_BYTES = 256 << 10
"""Files larger than this are compared by hash only."""


@dataclass(frozen=True)
class FileShown:
    entry: WorldEntry
    text: str | None
    """None: not a file, binary, recorded by hash only (`entry.stored` false), or missing."""
    truncated: bool
    missing: bool = False
    """Its contents were kept, but the blobs topic does not hold them (not yet, or no more)."""


@dataclass(frozen=True)
class PathChange:
    path: str
    change: str
    """added, removed, changed (contents), kind (a file became a folder...), mode."""
    diff: str | None
    """A unified diff of the two texts, where both are text and small enough."""


def _locator(settings: Settings) -> IndexBlobLocator:
    return IndexBlobLocator(store_url(settings), settings.topic_prefix)


async def world(settings: Settings, digest: str) -> WorldSnapshot:
    connection = require_connection(settings, Role.READER)
    return await read_world(
        connection, digest, prefix=settings.topic_prefix, locate=_locator(settings)
    )


async def _contents(settings: Settings, shas: set[str]) -> dict[str, bytes]:
    connection = require_connection(settings, Role.READER)
    found = await read_blobs(
        connection, shas, prefix=settings.topic_prefix, locate=_locator(settings)
    )
    return found.blobs


def _text(data: bytes) -> str | None:
    if b"\x00" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


async def world_file(settings: Settings, snapshot: WorldSnapshot, path: str) -> FileShown | None:
    """The file at `path` of the world (None: no such entry)."""
    entry = next((e for e in snapshot.entries if e.path == path), None)
    if entry is None:
        return None
    if entry.kind != "file" or not entry.stored or entry.sha256 is None:
        return FileShown(entry, None, False)
    data = (await _contents(settings, {entry.sha256})).get(entry.sha256)
    if data is None:
        return FileShown(entry, None, False, missing=True)
    text = _text(data[:SHOWN_BYTES])
    return FileShown(entry, text, len(data) > SHOWN_BYTES)


async def world_diff(
    settings: Settings, before: WorldSnapshot, after: WorldSnapshot
) -> list[PathChange]:
    """Every path that differs from `before` to `after`, in path order."""
    old = {e.path: e for e in before.entries}
    new = {e.path: e for e in after.entries}
    changed: list[tuple[str, WorldEntry | None, WorldEntry | None]] = []
    for path in sorted(old.keys() | new.keys()):
        a, b = old.get(path), new.get(path)
        if (
            a is None
            or b is None
            or (a.kind, a.sha256, a.target, a.mode)
            != (
                b.kind,
                b.sha256,
                b.target,
                b.mode,
            )
        ):
            changed.append((path, a, b))
    wanted = {
        e.sha256
        for _, a, b in changed
        for e in (a, b)
        if e is not None and e.stored and e.sha256 and e.size <= DIFFED_BYTES
    }
    blobs = await _contents(settings, wanted) if wanted else {}
    out = []
    for path, a, b in changed:
        if a is None:
            out.append(PathChange(path, "added", _one_sided(b, blobs, path, added=True)))
        elif b is None:
            out.append(PathChange(path, "removed", _one_sided(a, blobs, path, added=False)))
        elif a.kind != b.kind:
            out.append(PathChange(path, "kind", None))
        elif a.sha256 == b.sha256 and a.target == b.target:
            out.append(PathChange(path, "mode", f"mode {a.mode:o} -> {b.mode:o}"))
        else:
            out.append(PathChange(path, "changed", _unified(a, b, blobs, path)))
    return out


def _lines(entry: WorldEntry | None, blobs: dict[str, bytes]) -> list[str] | None:
    if entry is None:
        return []
    if entry.kind != "file" or entry.sha256 not in blobs:
        return None
    text = _text(blobs[entry.sha256])
    return None if text is None else text.splitlines(keepends=True)


def _unified(a: WorldEntry, b: WorldEntry, blobs: dict[str, bytes], path: str) -> str | None:
    before, after = _lines(a, blobs), _lines(b, blobs)
    if before is None or after is None:
        return None
    return "".join(difflib.unified_diff(before, after, f"a/{path}", f"b/{path}"))


def _one_sided(
    entry: WorldEntry | None, blobs: dict[str, bytes], path: str, *, added: bool
) -> str | None:
    lines = _lines(entry, blobs)
    if not lines:
        return None
    before, after = ([], lines) if added else (lines, [])
    return "".join(difflib.unified_diff(before, after, f"a/{path}", f"b/{path}"))


__all__ = ["FileShown", "PathChange", "world", "world_diff", "world_file"]
