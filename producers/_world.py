"""Taking a workdir's snapshot and restoring one: the world a rollout changed, kept so that judges
that act in it (now, or years later on replay) all read the same tree. `Session.world` records a
snapshot (its event on the session's chain, the contents on the blobs topic).

Links are recorded, never followed: a policy that links `verdict.json` or a file outside the
workdir into it gets the link recorded as a link. Files larger than the limits are recorded by
hash and size only (`WorldEntry.stored` false), and a restore leaves them out.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rolltape.producers._errors import ProducerError
from rolltape.schemas import WorldEntry, WorldSnapshot


class WorldError(ProducerError):
    """A workdir that cannot be snapshotted, or a snapshot that cannot be restored as asked."""


class WorldLimits(BaseModel):
    """How much of a world's contents a snapshot keeps (settings: ROLLTAPE_WORLD_MAX_FILE_BYTES,
    ROLLTAPE_WORLD_MAX_TOTAL_BYTES). A file past them is recorded by size and sha256 only, and a
    judge reading the restored world is told it is absent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_file_bytes: int = Field(default=1 << 20, ge=0)
    max_total_bytes: int = Field(default=64 << 20, ge=0)


def take_snapshot(
    root: Path, limits: WorldLimits | None = None
) -> tuple[WorldSnapshot, dict[str, bytes]]:
    """The snapshot of the tree under `root` and the contents it keeps, by sha256 (each once).
    A file is kept when it is at most `max_file_bytes` and the kept total stays within
    `max_total_bytes` (files are taken in path order, so the same tree keeps the same ones)."""
    limits = limits or WorldLimits()
    max_file_bytes, max_total_bytes = limits.max_file_bytes, limits.max_total_bytes
    if not root.is_dir():
        raise WorldError(f"{root} is not a folder to snapshot")
    entries: list[WorldEntry] = []
    blobs: dict[str, bytes] = {}
    kept = 0
    for path in sorted(_walk(root), key=lambda p: p.relative_to(root).as_posix()):
        rel = path.relative_to(root).as_posix()
        info = path.lstat()
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISLNK(info.st_mode):
            entries.append(
                WorldEntry(path=rel, kind="symlink", mode=mode, target=os.readlink(path))
            )
        elif stat.S_ISDIR(info.st_mode):
            entries.append(WorldEntry(path=rel, kind="dir", mode=mode))
        elif stat.S_ISREG(info.st_mode):
            data = path.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            fits = len(data) <= max_file_bytes and (
                digest in blobs or kept + len(data) <= max_total_bytes
            )
            if fits and digest not in blobs:
                blobs[digest] = data
                kept += len(data)
            entries.append(
                WorldEntry(
                    path=rel, kind="file", mode=mode, size=len(data), sha256=digest, stored=fits
                )
            )
        else:
            raise WorldError(f"{rel}: not a file, folder or link (a socket or device)")
    snapshot = WorldSnapshot.of(
        entries, max_file_bytes=max_file_bytes, max_total_bytes=max_total_bytes
    )
    return snapshot, blobs


def _walk(root: Path) -> list[Path]:
    found: list[Path] = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        base = Path(folder)
        found.extend(base / name for name in dirs)  # a link to a folder is listed here too
        found.extend(base / name for name in files)
    return found


def restore_snapshot(snapshot: WorldSnapshot, blobs: Mapping[str, bytes], dest: Path) -> None:
    """Recreate the snapshot's tree under `dest` (an empty or new folder): folders, kept files
    and links with their permission bits. Files whose contents were not kept are left out."""
    if dest.exists() and any(dest.iterdir()):
        raise WorldError(f"{dest} is not empty: restore a world into a fresh folder")
    dest.mkdir(parents=True, exist_ok=True)
    folders: list[tuple[Path, int]] = []
    for entry in snapshot.entries:
        target = dest / entry.path
        if entry.kind == "dir":
            target.mkdir(exist_ok=True)
            folders.append((target, entry.mode))
        elif entry.kind == "symlink":
            assert entry.target is not None
            target.symlink_to(entry.target)
        elif entry.stored:
            assert entry.sha256 is not None
            data = blobs.get(entry.sha256)
            if data is None or hashlib.sha256(data).hexdigest() != entry.sha256:
                raise WorldError(f"{entry.path}: its contents ({entry.sha256[:12]}) are missing")
            target.write_bytes(data)
            target.chmod(entry.mode)
    for folder, mode in reversed(folders):  # deepest last written, so set modes bottom-up
        folder.chmod(mode)


def reset_world(root: Path, snapshot: WorldSnapshot, blobs: Mapping[str, bytes]) -> int:
    """Bring the live tree under `root` back to `snapshot` (after a scorer or a judge changed
    it): entries it does not have are removed, changed files rewritten from `blobs`, missing
    ones recreated, modes set. Returns how many entries it removed or (re)wrote. A changed file whose
    contents were not kept (over the limits) cannot be restored: WorldError."""
    current, _ = take_snapshot(root, WorldLimits(max_file_bytes=0, max_total_bytes=0))
    wanted = {e.path: e for e in snapshot.entries}
    changed = 0
    for entry in sorted(current.entries, key=lambda e: e.path, reverse=True):  # deepest first
        want = wanted.get(entry.path)
        path = root / entry.path
        if want is None or want.kind != entry.kind or want.target != entry.target:
            if entry.kind == "dir":
                shutil.rmtree(path)
            else:
                path.unlink()
            changed += 1
        elif entry.kind == "file" and entry.sha256 != want.sha256:
            if not want.stored:
                raise WorldError(
                    f"{entry.path} changed and its contents were not kept: cannot reset"
                )
            path.unlink()  # rewritten below, as a missing entry
    folders: list[tuple[Path, int]] = []
    for want in snapshot.entries:
        path = root / want.path
        if want.kind == "dir":
            if not path.is_dir():
                path.mkdir()
                changed += 1
            folders.append((path, want.mode))
        elif want.kind == "symlink":
            if not path.is_symlink():
                assert want.target is not None
                path.symlink_to(want.target)
                changed += 1
        elif not path.exists():
            assert want.sha256 is not None
            data = blobs.get(want.sha256)
            if data is None:
                raise WorldError(f"{want.path}: its contents ({want.sha256[:12]}) are missing")
            path.write_bytes(data)
            path.chmod(want.mode)
            changed += 1
        else:
            path.chmod(want.mode)
    for folder, mode in reversed(folders):
        folder.chmod(mode)
    return changed
