"""The world a rollout left behind, as a content-addressed snapshot: what a judge that acts in the
world reads, and what a replay restores to re-run it.

A snapshot lists every entry of the workdir (files, folders, symbolic links) with its permission
bits, and every file's size and sha256; the contents travel apart, as blobs keyed by sha256, so a
file that several rollouts leave unchanged is stored once. Nothing that varies between two
copies of the same tree (times, owners, inode order) is in it: the same tree gives the same
snapshot and the same digest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rolltape.schemas._canonical import canonical_bytes


class WorldEntry(BaseModel):
    """One entry of a snapshot, by its path relative to the workdir (POSIX separators)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(min_length=1)
    kind: Literal["file", "dir", "symlink"]
    mode: int = Field(ge=0, le=0o7777)
    """Permission bits (with setuid, setgid and sticky)."""
    size: int = Field(default=0, ge=0)
    """Bytes of a file (0 for the others)."""
    sha256: str | None = None
    """Of a file's contents, also when they were too large to keep."""
    stored: bool = False
    """The contents are in the blobs (a file within the size limits)."""
    target: str | None = None
    """Where a symbolic link points, as written (it is never followed)."""

    @model_validator(mode="after")
    def _kind_fits(self) -> WorldEntry:
        if self.kind == "file" and self.sha256 is None:
            raise ValueError(f"{self.path}: a file entry needs its sha256")
        if self.kind != "file" and (self.sha256 is not None or self.stored or self.size):
            raise ValueError(f"{self.path}: only a file has contents")
        if (self.kind == "symlink") != (self.target is not None):
            raise ValueError(f"{self.path}: a symlink, and only a symlink, has a target")
        parts = self.path.split("/")
        if self.path.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"{self.path!r} is not a plain relative path")
        return self


def world_digest(entries: Sequence[WorldEntry]) -> str:
    """sha256 of the canonical entries: the same tree, the same digest. The limits are not part
    of it (two snapshots of one tree under different limits name the same world)."""
    dumped = [e.model_dump() for e in entries]
    return hashlib.sha256(canonical_bytes({"entries": dumped})).hexdigest()


class WorldSnapshot(BaseModel):
    """Payload of a `world_snapshot` event: every entry of a workdir, sorted by path, with the
    limits it was taken under; `digest` names the whole. Build one with `WorldSnapshot.of`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    entries: tuple[WorldEntry, ...]
    digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    """`world_digest(entries)`, checked on every read: what judges' verdicts and sessions name."""
    max_file_bytes: int = Field(ge=0)
    """Files larger than this were recorded by hash only (`stored` false)."""
    max_total_bytes: int = Field(ge=0)
    """Contents kept in all, at most; files past it (in path order) were recorded by hash only."""

    @classmethod
    def of(
        cls, entries: Sequence[WorldEntry], *, max_file_bytes: int, max_total_bytes: int
    ) -> WorldSnapshot:
        """The snapshot of `entries` (sorted by path), its digest computed."""
        return cls(
            entries=tuple(entries),
            digest=world_digest(entries),
            max_file_bytes=max_file_bytes,
            max_total_bytes=max_total_bytes,
        )

    @model_validator(mode="after")
    def _a_tree(self) -> WorldSnapshot:
        """Sorted, each path once, and every entry inside a folder entry: a restore then never
        writes through a link (a snapshot read from the log is checked before it is used)."""
        paths = [e.path for e in self.entries]
        if paths != sorted(set(paths)):
            raise ValueError("snapshot entries must be sorted by path, each path once")
        kinds = {e.path: e.kind for e in self.entries}
        for path in paths:
            parent = path.rpartition("/")[0]
            if parent and kinds.get(parent) != "dir":
                raise ValueError(f"{path}: its parent {parent!r} is not a folder of the snapshot")
        if self.digest != world_digest(self.entries):
            raise ValueError("the digest is not the digest of the entries")
        return self

    @property
    def stored_bytes(self) -> int:
        """Bytes of the contents kept (each blob once)."""
        return sum({e.sha256: e.size for e in self.entries if e.stored}.values())

    @property
    def missing(self) -> tuple[WorldEntry, ...]:
        """Files whose contents were not kept (over the size limits): a judge is told."""
        return tuple(e for e in self.entries if e.kind == "file" and not e.stored)
