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
from collections.abc import Sequence
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rolltape.schemas._canonical import canonical_bytes

_NOT_NAMES = frozenset({"", ".", ".."})


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
        path = self.path
        parts = path.split("/")
        if path[0] == "/" or not _NOT_NAMES.isdisjoint(parts):
            raise ValueError(f"{path!r} is not a plain relative path")
        # (a name of at most 63 characters is at most 252 bytes: most names skip the encoding)
        if "\x00" in path or (
            max(map(len, parts)) > 63
            and any(len(p.encode(errors="surrogateescape")) > 255 for p in parts)
        ):
            raise ValueError(f"{path!r} is not a name a file system takes")
        return self


def world_manifest(
    entries: Sequence[WorldEntry], *, max_file_bytes: int, max_total_bytes: int
) -> bytes:
    """The canonical bytes of a snapshot without its digest: what the digest is the sha256 of,
    and what the blobs topic stores under it, so a world can be found by its digest alone."""
    dump = (
        WorldEntry.__pydantic_serializer__.to_python
    )  # model_dump's own core, without its wrapper
    return canonical_bytes(
        {
            "entries": [dump(e) for e in entries],
            "max_file_bytes": max_file_bytes,
            "max_total_bytes": max_total_bytes,
        }
    )


def world_digest(
    entries: Sequence[WorldEntry], *, max_file_bytes: int, max_total_bytes: int
) -> str:
    """sha256 of the world's manifest: the same tree under the same limits, the same digest."""
    manifest = world_manifest(
        entries, max_file_bytes=max_file_bytes, max_total_bytes=max_total_bytes
    )
    return hashlib.sha256(manifest).hexdigest()


def _check_tree(entries: Sequence[WorldEntry]) -> None:
    """Sorted, each path once, and every entry inside a folder entry: a restore then never
    writes through a link (a snapshot read from the log is checked before it is used)."""
    paths = [e.path for e in entries]
    if paths != sorted(set(paths)):
        raise ValueError("snapshot entries must be sorted by path, each path once")
    kinds = {e.path: e.kind for e in entries}
    for path in paths:
        parent = path.rpartition("/")[0]
        if parent and kinds.get(parent) != "dir":
            raise ValueError(f"{path}: its parent {parent!r} is not a folder of the snapshot")


class WorldSnapshot(BaseModel):
    """Payload of a `world_snapshot` event: every entry of a workdir, sorted by path, with the
    limits it was taken under; `digest` names the whole. Build one with `WorldSnapshot.of`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    entries: tuple[WorldEntry, ...]
    digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    """sha256 of the manifest (entries and limits), checked on every read: what judges' verdicts
    and sessions name, and the key of the manifest on the blobs topic."""
    max_file_bytes: int = Field(ge=0)
    """Files larger than this were recorded by hash only (`stored` false)."""
    max_total_bytes: int = Field(ge=0)
    """Contents kept in all, at most; files past it (in path order) were recorded by hash only."""

    @classmethod
    def of(
        cls, entries: Sequence[WorldEntry], *, max_file_bytes: int, max_total_bytes: int
    ) -> WorldSnapshot:
        """The snapshot of `entries` (valid entries, sorted by path, each inside a folder
        entry), its digest computed once. Reading a snapshot back validates it in full."""
        entries = tuple(entries)
        _check_tree(entries)
        manifest = world_manifest(
            entries, max_file_bytes=max_file_bytes, max_total_bytes=max_total_bytes
        )
        return cls.model_construct(
            entries=entries,
            digest=hashlib.sha256(manifest).hexdigest(),
            max_file_bytes=max_file_bytes,
            max_total_bytes=max_total_bytes,
        )

    @classmethod
    def from_manifest(cls, manifest: bytes) -> WorldSnapshot:
        """The snapshot whose manifest (`world_manifest`) these bytes are, as the blobs topic
        keeps it under the digest, validated in full; ValueError for bytes that are not one."""
        fields = orjson.loads(manifest)
        if not isinstance(fields, dict):
            raise ValueError("a world manifest is a JSON object")
        return cls.model_validate({**fields, "digest": hashlib.sha256(manifest).hexdigest()})

    @functools.cached_property
    def manifest(self) -> bytes:
        return world_manifest(
            self.entries,
            max_file_bytes=self.max_file_bytes,
            max_total_bytes=self.max_total_bytes,
        )

    @model_validator(mode="after")
    def _a_tree(self) -> WorldSnapshot:
        """A snapshot read back: a tree, and its digest that of its manifest."""
        _check_tree(self.entries)
        if self.digest != hashlib.sha256(self.manifest).hexdigest():
            raise ValueError("the digest is not the digest of the entries and limits")
        return self

    @property
    def stored_bytes(self) -> int:
        """Bytes of the contents kept (each blob once)."""
        return sum({e.sha256: e.size for e in self.entries if e.stored}.values())

    @property
    def missing(self) -> tuple[WorldEntry, ...]:
        """Files whose contents were not kept (over the size limits): a judge is told."""
        return tuple(e for e in self.entries if e.kind == "file" and not e.stored)
