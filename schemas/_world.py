"""The world a rollout left behind, as a content-addressed snapshot: what a judge that acts in the
world reads, and what a replay restores to re-run it.

A snapshot lists every entry of the workdir (files, folders, symbolic links) with its permission
bits, and every file's size and sha256; the contents travel apart, as blobs keyed by sha256, so a
file that several rollouts leave unchanged is stored once. Nothing that varies between two
copies of the same tree (times, owners, inode order) is in it: the same tree gives the same
snapshot and the same digest.
"""

from __future__ import annotations

import functools
import hashlib
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


class WorldSnapshot(BaseModel):
    """Every entry of a workdir, sorted by path; `digest` names the whole."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    entries: tuple[WorldEntry, ...]
    max_file_bytes: int = Field(ge=0)
    """Files larger than this were recorded by hash only (`stored` false)."""

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
        return self

    @functools.cached_property
    def digest(self) -> str:
        """sha256 of the canonical entries: the same tree, the same digest."""
        entries = [e.model_dump() for e in self.entries]
        return hashlib.sha256(canonical_bytes({"entries": entries})).hexdigest()

    @property
    def missing(self) -> tuple[WorldEntry, ...]:
        """Files whose contents were not kept (over the size limits): a judge is told."""
        return tuple(e for e in self.entries if e.kind == "file" and not e.stored)
