"""A workdir's snapshot: the same tree gives the same digest, permissions and empty folders are
kept, links are recorded and never followed, files over the limits are recorded by hash only,
and a restored snapshot is the same world."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from rolltape.producers import (
    Recorder,
    WorldError,
    WorldLimits,
    reset_world,
    restore_snapshot,
    take_snapshot,
)
from rolltape.schemas import (
    BlobAssembler,
    WorldEntry,
    WorldSnapshot,
    WorldSnapshotEvent,
    read_event,
)
from tests.unit.producers.recorded import BLOBS_TOPIC, spooled_topic_records


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
    snapshot, blobs = take_snapshot(root, WorldLimits(max_file_bytes=4096))
    (big,) = snapshot.missing
    assert (big.path, big.size, big.stored) == ("big.bin", 5000, False)
    assert big.sha256 == hashlib.sha256(b"x" * 5000).hexdigest() and big.sha256 not in blobs
    # the total limit keeps the smallest files first (a large one cannot crowd out the sources)
    (root / "a-large-first.txt").write_bytes(b"y" * 40)
    snapshot, few = take_snapshot(root, WorldLimits(max_total_bytes=70))
    kept = {e.path for e in snapshot.entries if e.stored}
    assert kept == {"copy.py", "pkg/mod.py", "run.sh"} and sum(len(b) for b in few.values()) <= 70


def test_a_name_that_is_not_utf8__is_a_world_error_not_a_crash(tmp_path: Path) -> None:
    root = world(tmp_path / "w")
    (root / os.fsdecode(b"bad-\xff-name")).write_text("x")
    with pytest.raises(WorldError, match="bad-"):
        take_snapshot(root)


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
        WorldSnapshot.of(
            (WorldEntry(path="b", kind="dir", mode=0), WorldEntry(path="a", kind="dir", mode=0)),
            max_file_bytes=1,
            max_total_bytes=1,
        )


def test_a_snapshot_whose_entry_sits_under_a_link__is_refused() -> None:
    """Restoring it would write through the link, outside the folder restored into."""
    link = WorldEntry(path="out", kind="symlink", mode=0o777, target="/tmp")
    planted = WorldEntry(path="out/x", kind="file", mode=0o644, size=1, sha256="0" * 64)
    with pytest.raises(ValueError, match="is not a folder of the snapshot"):
        WorldSnapshot.of((link, planted), max_file_bytes=1, max_total_bytes=1)


def test_a_snapshot_whose_digest_is_not_its_entries__is_refused(tmp_path: Path) -> None:
    """A snapshot read from the log names its world by digest; one that lies is invalid."""
    snapshot, _ = take_snapshot(world(tmp_path / "w"))
    fields = snapshot.model_dump()
    fields["entries"] = fields["entries"][:-1]
    with pytest.raises(ValueError, match="not the digest of the entries and limits"):
        WorldSnapshot.model_validate(fields)
    assert WorldSnapshot.model_validate(snapshot.model_dump()) == snapshot


def test_session_world__records_the_snapshot_event_and_each_blob_once(tmp_path: Path) -> None:
    """The contents go to the blobs topic (chunked, each blob once per recorder, also for a
    second session leaving the same files); the event on the chain names every entry."""
    root = world(tmp_path / "w")
    recorder = Recorder(None, spool_dir=tmp_path / "spool", spool_after_s=0.0, principal="agent")
    with recorder.session("fix it") as first:
        snapshot, kept = first.world(root)
    with recorder.session("fix it again") as second:
        assert second.world(root) == (snapshot, kept)
    recorder.close(10)
    records = spooled_topic_records(tmp_path / "spool")
    blobs = [(key, value) for topic, key, value in records if topic == BLOBS_TOPIC]
    assembler = BlobAssembler([e.sha256 for e in snapshot.entries if e.stored and e.sha256])
    for key, value in blobs:
        assembler.add(key, value)
    assert len(blobs) == 4 and assembler.missing == []  # three files and the manifest
    manifest = BlobAssembler([snapshot.digest])
    for key, value in blobs:
        manifest.add(key, value)
    assert WorldSnapshot.from_manifest(manifest.blobs[snapshot.digest]) == snapshot
    events = [read_event(v) for topic, _, v in records if topic != BLOBS_TOPIC]
    worlds = [e for e in events if isinstance(e, WorldSnapshotEvent)]
    assert [w.body for w in worlds] == [snapshot, snapshot]
    restore_snapshot(worlds[0].body, assembler.blobs, tmp_path / "restored")
    assert take_snapshot(tmp_path / "restored")[0].digest == snapshot.digest


def test_reset_world__undoes_what_a_scorer_or_judge_changed(tmp_path: Path) -> None:
    root = world(tmp_path / "w")
    snapshot, blobs = take_snapshot(root)
    (root / "pkg" / "mod.py").write_text("changed\n")
    (root / "run.sh").chmod(0o600)
    (root / "tests" / "test_mod.py").unlink()
    (root / ".pytest_cache").mkdir()
    (root / ".pytest_cache" / "v").write_text("x")
    (root / "empty").rmdir()
    (root / "empty").write_text("a file where a folder was")
    assert reset_world(root, snapshot, blobs) == 6
    assert take_snapshot(root)[0].digest == snapshot.digest
    assert reset_world(root, snapshot, blobs) == 0


def test_reset_world__refuses_to_guess_a_changed_file_whose_contents_were_not_kept(
    tmp_path: Path,
) -> None:
    root = world(tmp_path / "w")
    snapshot, blobs = take_snapshot(root, WorldLimits(max_file_bytes=1))
    (root / "run.sh").write_text("changed")
    with pytest.raises(WorldError, match="were not kept"):
        reset_world(root, snapshot, blobs)


def test_session_world__a_world_too_large_for_one_event_is_an_error(tmp_path: Path) -> None:
    root = tmp_path / "w"
    root.mkdir()
    for n in range(9000):
        (root / f"build-output-file-number-{n:05d}.o").write_bytes(b"")
    recorder = Recorder(None, spool_dir=tmp_path / "spool", spool_after_s=0.0, principal="agent")
    with recorder.session("big") as session, pytest.raises(WorldError, match="9000 entries"):
        session.world(root)
    recorder.close(10)
