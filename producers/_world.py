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

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rolltape.producers._errors import ProducerError
from rolltape.schemas import WorldEntry, WorldSnapshot

_VALIDATE_ENTRY = WorldEntry.__pydantic_validator__.validate_python


def _validated(fields: dict[str, object]) -> WorldEntry:
    """An entry through the core's validator itself: cheaper than the model's constructor (or
    even model_construct), and a name the model refuses is refused at once, not on replay."""
    entry: WorldEntry = _VALIDATE_ENTRY(fields)
    return entry


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
    Files of at most `max_file_bytes` are kept, smallest first (ties by path) while the total
    stays within `max_total_bytes`, so a few large files cannot crowd out the sources and the
    same tree keeps the same ones; a file over the limits is hashed as it is read, never held
    whole. A name or an entry that cannot be recorded (not UTF-8, unreadable, a socket) is a
    WorldError."""
    limits = limits or WorldLimits()
    max_file_bytes, max_total_bytes = limits.max_file_bytes, limits.max_total_bytes
    if not root.is_dir():
        raise WorldError(f"{root} is not a folder to snapshot")
    try:
        listed = sorted(_walk(str(root)))
    except OSError as exc:
        raise WorldError(f"{root} cannot be listed: {exc}") from exc
    keep = _kept(listed, max_file_bytes, max_total_bytes)
    entries: list[WorldEntry] = []
    blobs: dict[str, bytes] = {}
    for rel, full, info in listed:
        try:
            entries.append(_entry(rel, full, info, rel in keep, max_file_bytes, blobs))
        except ValidationError as exc:
            raise WorldError(f"{rel!r}: {exc.errors()[0]['msg']}") from exc
        except OSError as exc:
            raise WorldError(f"{rel!r} cannot be read: {exc.strerror or exc}") from exc
    snapshot = WorldSnapshot.of(
        entries, max_file_bytes=max_file_bytes, max_total_bytes=max_total_bytes
    )
    return snapshot, blobs


def _kept(
    listed: list[tuple[str, str, os.stat_result]], max_file_bytes: int, max_total_bytes: int
) -> set[str]:
    """The files whose contents are kept, decided by size before anything is read."""
    keep: set[str] = set()
    budget = max_total_bytes
    candidates = sorted(
        (info.st_size, rel)
        for rel, _, info in listed
        if stat.S_ISREG(info.st_mode) and info.st_size <= max_file_bytes
    )
    for size, rel in candidates:
        if size > budget:
            break  # the rest are no smaller
        keep.add(rel)
        budget -= size
    return keep


def _entry(
    rel: str,
    full: str,
    info: os.stat_result,
    keep: bool,
    max_file_bytes: int,
    blobs: dict[str, bytes],
) -> WorldEntry:
    """One entry; a kept file's contents go into `blobs` (once per sha256)."""
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISLNK(info.st_mode):
        return _validated(
            {"path": rel, "kind": "symlink", "mode": mode, "target": os.readlink(full)}
        )
    if stat.S_ISDIR(info.st_mode):
        return _validated({"path": rel, "kind": "dir", "mode": mode})
    if not stat.S_ISREG(info.st_mode):
        raise WorldError(f"{rel!r}: not a file, folder or link (a socket or device)")
    digest, size, data = _read(full, max_file_bytes if keep else -1)
    if data is not None:
        blobs.setdefault(digest, data)
    return _validated(
        {
            "path": rel,
            "kind": "file",
            "mode": mode,
            "size": size,
            "sha256": digest,
            "stored": data is not None,
        }
    )


def _walk(root: str) -> list[tuple[str, str, os.stat_result]]:
    """(path relative to `root` with / separators, full path, lstat) of every entry under it;
    links are listed, never followed."""
    found: list[tuple[str, str, os.stat_result]] = []
    pending = [("", root)]
    while pending:
        prefix, folder = pending.pop()
        with os.scandir(folder) as listing:
            for entry in listing:
                rel = prefix + entry.name
                info = entry.stat(follow_symlinks=False)
                found.append((rel, entry.path, info))
                if stat.S_ISDIR(info.st_mode):
                    pending.append((rel + "/", entry.path))
    return found


def _read(path: str, max_bytes: int) -> tuple[str, int, bytes | None]:
    """(sha256, size, the contents when at most `max_bytes`), read once, without following a
    link that replaced the file since it was listed."""
    # Non-blocking: a FIFO swapped in since the listing must not hang the snapshot.
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path} is no longer a regular file")
        size = info.st_size
        if size <= max_bytes:
            data = os.read(fd, size + 1)  # one more: a file that grew is read to its end below
            if len(data) <= size and len(data) <= max_bytes:
                return hashlib.sha256(data).hexdigest(), len(data), data
        with os.fdopen(os.dup(fd), "rb", buffering=0) as f:
            f.seek(0)
            digest = hashlib.file_digest(f, "sha256")
            return digest.hexdigest(), f.tell(), None
    finally:
        os.close(fd)


def restore_snapshot(snapshot: WorldSnapshot, blobs: Mapping[str, bytes], dest: Path) -> None:
    """Recreate the snapshot's tree under `dest` (an empty or new folder): folders, kept files
    and links with their permission bits. Files whose contents were not kept are left out."""
    if dest.exists() and any(dest.iterdir()):
        raise WorldError(f"{dest} is not empty: restore a world into a fresh folder")
    dest.mkdir(parents=True, exist_ok=True)
    root = str(dest)
    checked: set[str] = set()
    folders: list[tuple[str, int]] = []
    for entry in snapshot.entries:
        target = os.path.join(root, entry.path)
        if entry.kind == "dir":
            os.mkdir(target)
            folders.append((target, entry.mode))
        elif entry.kind == "symlink":
            assert entry.target is not None
            os.symlink(entry.target, target)
        elif entry.stored:
            assert entry.sha256 is not None
            data = blobs.get(entry.sha256)
            if entry.sha256 not in checked:
                if data is None or hashlib.sha256(data).hexdigest() != entry.sha256:
                    raise WorldError(
                        f"{entry.path}: its contents ({entry.sha256[:12]}) are missing"
                    )
                checked.add(entry.sha256)
            assert data is not None
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fchmod(fd, entry.mode)
            finally:
                os.close(fd)
    for folder, mode in reversed(folders):  # deepest last written, so set modes bottom-up
        os.chmod(folder, mode)


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
