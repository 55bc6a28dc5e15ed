"""The spool keeps records in order, forgets them only on commit, survives torn writes and death."""

from __future__ import annotations

from pathlib import Path

import pytest

from rolltape.producers import _spool as spool_module
from rolltape.producers._spool import Spool


def records(n: int, start: int = 0) -> list[tuple[str, bytes, bytes]]:
    return [("topic.events.v1", b"s%d" % (i % 3), b'{"n":%d}' % i) for i in range(start, start + n)]


def test_spool__reads_back_in_append_order_and_forgets_only_on_commit(tmp_path: Path) -> None:
    spool = Spool(tmp_path, 1 << 20)
    spool.append(records(5))
    first, token = spool.read(3)
    assert first == records(3)
    again, token = spool.read(3)
    assert again == records(3)  # not committed yet: read again from the same place
    spool.commit(token)
    rest, token = spool.read(10)
    assert rest == records(2, 3)
    spool.commit(token)
    assert spool.empty
    spool.close()
    assert not list(tmp_path.glob("*.spool"))


def test_spool__a_later_spool_adopts_what_a_closed_one_left_and_drains_it_first(
    tmp_path: Path,
) -> None:
    old = Spool(tmp_path, 1 << 20)
    old.append(records(4))
    _got, token = old.read(1)
    old.commit(token)
    old.close()  # process "died" with 3 records unsent
    new = Spool(tmp_path, 1 << 20)
    new.append(records(2, 100))
    assert new.adopted > 0
    drained = []
    while not new.empty:
        batch, token = new.read(10)
        drained += batch
        new.commit(token)
    assert drained == records(3, 1) + records(2, 100)


def test_spool__a_torn_frame_at_the_end_is_ignored(tmp_path: Path) -> None:
    spool = Spool(tmp_path, 1 << 20)
    spool.append(records(3))
    spool.close()
    (path,) = tmp_path.glob("*.spool")
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x01\x00garbage")  # a frame header promising 256 bytes that never came
    spool = Spool(tmp_path, 1 << 20)
    got, _ = spool.read(10)
    assert got == records(3)


def test_spool__room_is_bounded_by_max_bytes(tmp_path: Path) -> None:
    spool = Spool(tmp_path, 200)
    assert spool.has_room(150)
    spool.append(records(5))
    assert not spool.has_room(150)


def test_spool__its_own_segment_is_locked_before_another_spool_can_see_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sender processes of one recorder start together in one folder. A segment visible to a
    scan before its owner locked it was adopted as empty and removed by the other spool, and its
    owner then failed to lock it (seen as a sender process dying at start)."""
    real = spool_module.fcntl.flock
    seen_unlocked: list[list[str]] = []

    def scanned_meanwhile(fd: int, operation: int) -> None:
        # What another spool starting now would adopt: every *.spool, before this lock is taken.
        seen_unlocked.append(sorted(p.name for p in tmp_path.glob("*.spool")))
        real(fd, operation)

    monkeypatch.setattr(spool_module.fcntl, "flock", scanned_meanwhile)
    spool = Spool(tmp_path, 1 << 20)
    own = [p.name for p in tmp_path.glob("*.spool")]
    assert len(own) == 1 and all(own[0] not in names for names in seen_unlocked)
    spool.append(records(2))
    assert spool.read(5)[0] == records(2)
    spool.close()
