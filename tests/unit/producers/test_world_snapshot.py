"""A workdir's snapshot: the same tree gives the same digest, permissions and empty folders are
kept, links are recorded and never followed, files over the limits are recorded by hash only,
and a restored snapshot is the same world."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from rolltape.producers.environments import WorldError, restore_snapshot, take_snapshot
from rolltape.schemas import WorldEntry, WorldSnapshot


def world(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_mod.py").write_text("from pkg.mod import f\n")
    (root / "run.sh").write_text("#!/bin/sh\npytest -q\n")
    (root / "run.sh").chmod(0o755)
    (root / "empty").mkdir()
    (root / "copy.py").write_text("def f():\n    return 1\n")  # the same contents as mod.py
    os.symlink("/etc/hostname", root / "outside")
    return root


def test_the_same_tree__gives_the_same_snapshot_and_digest(tmp_path: Path) -> None:
    one, blobs = take_snapshot(world(tmp_path / "a"))
    other, _ = take_snapshot(world(tmp_path / "b"))
    assert one == other and one.digest == other.digest
    assert [e.path for e in one.entries] == sorted(e.path for e in one.entries)
    assert len(blobs) == 3  # mod.py and copy.py share one blob
    (tmp_path / "b" / "run.sh").chmod(0o644)
    assert take_snapshot(tmp_path / "b")[0].digest != one.digest  # a mode is part of the world


def test_entries__keep_modes_empty_folders_and_links_unfollowed(tmp_path: Path) -> None:
    snapshot, blobs = take_snapshot(world(tmp_path / "w"))
    by_path = {e.path: e for e in snapshot.entries}
    assert by_path["run.sh"].mode == 0o755 and by_path["empty"].kind == "dir"
    link = by_path["outside"]
    assert (link.kind, link.target, link.sha256) == ("symlink", "/etc/hostname", None)
    mod = by_path["pkg/mod.py"]
    assert mod.sha256 == hashlib.sha256(b"def f():\n    return 1\n").hexdigest() and mod.stored
    assert blobs[mod.sha256] == b"def f():\n    return 1\n"


def test_files_over_the_limits__are_recorded_by_hash_only(tmp_path: Path) -> None:
    root = world(tmp_path / "w")
    (root / "big.bin").write_bytes(b"x" * 5000)
    snapshot, blobs = take_snapshot(root, max_file_bytes=4096)
    (big,) = snapshot.missing
    assert (big.path, big.size, big.stored) == ("big.bin", 5000, False)
    assert big.sha256 == hashlib.sha256(b"x" * 5000).hexdigest() and big.sha256 not in blobs
    # the total limit keeps the first files in path order, the rest by hash
    _, few = take_snapshot(root, max_total_bytes=30)
    assert sum(len(b) for b in few.values()) <= 30


def test_a_restored_snapshot__is_the_same_world(tmp_path: Path) -> None:
    snapshot, blobs = take_snapshot(world(tmp_path / "w"))
    restore_snapshot(snapshot, blobs, tmp_path / "back")
    again, _ = take_snapshot(tmp_path / "back")
    assert again == snapshot
    assert os.readlink(tmp_path / "back" / "outside") == "/etc/hostname"
    with pytest.raises(WorldError, match="not empty"):
        restore_snapshot(snapshot, blobs, tmp_path / "back")
    shutil.rmtree(tmp_path / "back")
    mod = next(e for e in snapshot.entries if e.path == "pkg/mod.py")
    assert mod.sha256 is not None
    with pytest.raises(WorldError, match="are missing"):
        restore_snapshot(
            snapshot, {k: v for k, v in blobs.items() if k != mod.sha256}, tmp_path / "x"
        )


def test_snapshot_models__refuse_paths_that_leave_the_world() -> None:
    for path in ("../etc/passwd", "/etc/passwd", "a//b", "a/./b"):
        with pytest.raises(ValueError, match="not a plain relative path"):
            WorldEntry(path=path, kind="dir", mode=0o755)
    with pytest.raises(ValueError, match="needs its sha256"):
        WorldEntry(path="f", kind="file", mode=0o644)
    with pytest.raises(ValueError, match="sorted by path"):
        WorldSnapshot(
            entries=(
                WorldEntry(path="b", kind="dir", mode=0),
                WorldEntry(path="a", kind="dir", mode=0),
            ),
            max_file_bytes=1,
        )


def test_a_snapshot_whose_entry_sits_under_a_link__is_refused() -> None:
    """Restoring it would write through the link, outside the folder restored into."""
    link = WorldEntry(path="out", kind="symlink", mode=0o777, target="/tmp")
    planted = WorldEntry(path="out/x", kind="file", mode=0o644, size=1, sha256="0" * 64)
    with pytest.raises(ValueError, match="is not a folder of the snapshot"):
        WorldSnapshot(entries=(link, planted), max_file_bytes=1)
