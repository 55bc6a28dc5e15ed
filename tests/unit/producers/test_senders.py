"""A recorder with sender processes (`senders=N`), without a broker: the same chains, the same
errors, nothing lost, and a sender process that dies is reported with what it held."""

from __future__ import annotations

import enum
import itertools
import os
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from rolltape.producers import (
    EventsRejectedError,
    Recorder,
    SenderDiedError,
    SpoolFullError,
)
from rolltape.producers import _recorder as recorder_module
from rolltape.producers._shards import ShardedSender
from rolltape.producers._wire import decode_events, encode_events, shard_of
from rolltape.schemas import ChainVerifier, decode
from tests.support.spool import drain
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[3]


def by_session(values: list[bytes]) -> dict[str, list[bytes]]:
    chains: dict[str, list[bytes]] = defaultdict(list)
    for value in values:
        chains[decode(value)["session_id"]].append(value)
    return dict(chains)


def record_some(recorder: Recorder, sessions: int = 12, turns: int = 40) -> None:
    for i in range(sessions):
        with recorder.session("sharded", session_id=f"shard-{i}", model="m") as s:
            for n in range(turns):
                s.turn("assistant", f"step {n} of {i}", token_ids=[n, i])
                if n % 10 == 0:
                    cid = s.tool_call("search", {"q": n}, call_id=f"call-{i}-{n}")
                    s.tool_result(cid, "found")
            s.reward(0.5, components={"a": 0.25})


def test_senders__seal_byte_identical_chains_to_one_sender_for_the_same_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The clock is stamped in the recording process, so with the same clock readings the
    # sender processes must write exactly the bytes the in-thread sender writes.
    chains = []
    for senders in (1, 2):
        clock = itertools.count(1_700_000_000_000_000_000, 1000)
        monkeypatch.setattr(recorder_module, "_time_ns", clock.__next__)
        folder = tmp_path / f"senders-{senders}"
        recorder = Recorder(None, spool_dir=folder, spool_after_s=0.0, senders=senders)
        record_some(recorder)
        assert recorder.close(10).spooled == 12 * (40 + 2 * 4 + 3)
        chains.append(by_session(drain(folder)))
    assert chains[0] == chains[1]
    verifier = ChainVerifier()
    for values in chains[1].values():
        for value in values:
            verifier.add(value)
    assert all(r.ok and r.ended for r in verifier.reports()) and len(verifier.reports()) == 12


def test_senders__split_the_sessions_over_every_process(tmp_path: Path) -> None:
    recorder = Recorder(None, spool_dir=tmp_path, spool_after_s=0.0, senders=3)
    record_some(recorder, sessions=30, turns=2)
    recorder.flush(30)
    assert isinstance(recorder._sender, ShardedSender)
    sealed = [shard.status.stats.sealed for shard in recorder._sender._shards]
    recorder.close(10)
    assert all(n > 0 for n in sealed) and sum(sealed) == 30 * (2 + 2 + 3)


def test_shard_of__every_event_and_the_resume_of_a_session_go_to_one_process() -> None:
    assert {shard_of("session-7", 4) for _ in range(100)} == {shard_of("session-7", 4)}
    assert {shard_of(f"s-{i}", 4) for i in range(200)} == {0, 1, 2, 3}


class Colour(enum.Enum):
    RED = "red"


def test_encode_events__keeps_every_type_and_refuses_only_what_cannot_cross_by_name() -> None:
    plain = [("s", "events", "turn", {"role": "user", "content": "x", "ids": (1, 2)}, 5)]
    frame, refused = encode_events(plain)  # type: ignore[arg-type]
    assert not refused and decode_events(frame) == plain
    mixed = [
        ("s", "events", "decision", {"colour": Colour.RED}, 6),
        ("s", "events", "decision", {"later": lambda: None}, 7),
    ]
    frame, refused = encode_events(mixed)  # type: ignore[arg-type]
    assert decode_events(frame) == mixed[:1]
    assert [event[4] for event, _ in refused] == [7]
    assert "cannot be handed to a sender process" in refused[0][1]


def test_senders__an_invalid_event_is_rejected_by_name_on_flush(tmp_path: Path) -> None:
    recorder = Recorder(None, spool_dir=tmp_path, spool_after_s=0.0, senders=2)
    s = recorder.session("task", session_id="bad-1")
    s.turn("robot", "hi")  # type: ignore[arg-type]  # not a role
    s.decision(later=lambda: None)  # cannot even reach a sender process
    s.turn("user", "fine")
    with pytest.raises(EventsRejectedError) as info:
        recorder.flush(30)
    assert sorted(r.type for r in info.value.rejected) == ["decision", "turn"]
    assert info.value.path is not None and info.value.path.exists()
    s.end()
    result = recorder.close(10)
    assert result.rejected == 2 and result.spooled == 3
    verifier = ChainVerifier()
    for value in drain(tmp_path):
        verifier.add(value)
    (report,) = verifier.reports()
    assert report.ok and report.records == 3


def test_senders__a_full_spool_refuses_new_events_and_keeps_the_accepted_ones(
    tmp_path: Path,
) -> None:
    recorder = Recorder(
        None, spool_dir=tmp_path, spool_max_bytes=8192, spool_after_s=0.0, senders=2
    )
    s = recorder.session("fill the spool", session_id="full-1")
    full = wait_until(
        lambda: refused(lambda: s.turn("assistant", "x" * 1000)),
        what="the spool to fill and refuse an event",
        every_s=0.001,
    )
    assert "ROLLTAPE_SPOOL_MAX_BYTES" in str(full)
    with pytest.raises(SpoolFullError):
        recorder.flush(30)
    sealed = recorder.close(5).sealed
    verifier = ChainVerifier()
    for value in drain(tmp_path):
        verifier.add(value)
    (report,) = verifier.reports()
    assert report.ok and report.records == sealed


def refused(record: Callable[[], object]) -> SpoolFullError | None:
    """Record one more event: the refusal, once the spool is full (None while it takes them)."""
    try:
        record()
    except SpoolFullError as exc:
        return exc
    return None


def test_senders__close_with_the_broker_unreachable_spools_every_event_in_order(
    tmp_path: Path,
) -> None:
    # The broker never answers and the stall timer never fires: the shards' outboxes fill, they
    # hold back reads and the recorder's queue holds the rest when close() begins.
    recorder = Recorder("127.0.0.1:1", spool_dir=tmp_path, spool_after_s=3600, senders=2)
    record_some(recorder, sessions=6, turns=10_000)
    result = recorder.close(1)
    assert result.acked == 0 and result.spooled == 6 * (10_000 + 2 * 1000 + 3)
    verifier = ChainVerifier()
    for value in drain(tmp_path):
        verifier.add(value)
    reports = verifier.reports()
    assert len(reports) == 6 and all(r.ok and r.ended for r in reports)


def test_senders__a_killed_sender_process_is_reported_with_the_events_it_held(
    tmp_path: Path,
) -> None:
    # The broker never answers and the stall timer never fires: the shards hold every record
    # in memory, so a killed one loses them, and the recorder must say so, by name.
    recorder = Recorder("127.0.0.1:1", spool_dir=tmp_path, spool_after_s=3600, senders=2)
    sessions = [recorder.session("held", session_id=f"held-{i}") for i in range(8)]
    for n in range(50):
        for s in sessions:
            s.turn("assistant", f"step {n}")
    sender = recorder._sender
    assert isinstance(sender, ShardedSender)
    victim = sender._shards[0]
    wait_until(
        lambda: victim.status.stats.sealed,
        what="the first sender process to report records it sealed",
        every_s=0.05,
    )
    os.kill(victim.proc.pid, signal.SIGKILL)
    with pytest.raises(SenderDiedError, match=r"rejected\.jsonl"):
        recorder.flush(30)
    with pytest.raises(SenderDiedError):
        sessions[0].turn("user", "after the death")
    owned = [s.session_id for s in sessions if shard_of(s.session_id, 2) == 0]
    with pytest.raises(SenderDiedError):
        recorder.close(1)
    rejected = tmp_path / "rejected.jsonl"
    listed = (
        [orjson.loads(line) for line in rejected.read_bytes().splitlines()]
        if rejected.exists()
        else []
    )
    assert all("died" in r["reason"] for r in listed)
    assert {r["session_id"] for r in listed} <= set(owned)
    # Every event of the dead shard's sessions is listed or was made durable before it died
    # (on a loaded machine it may have spooled some: they stay for the next recorder); the
    # survivor stopped as close() stops it: its sessions are whole in the spool.
    verifier = ChainVerifier()
    for value in drain(tmp_path):
        verifier.add(value)
    kept = {r.session_id: r for r in verifier.reports()}
    for sid in owned:
        spooled = kept[sid].records if sid in kept else 0
        assert sum(r["session_id"] == sid for r in listed) + spooled >= 51, sid
    survivors = {s.session_id for s in sessions} - set(owned)
    assert all(kept[sid].ok and kept[sid].records == 51 for sid in survivors)


def test_senders__a_recording_process_that_dies_leaves_what_they_held_in_the_spool(
    tmp_path: Path,
) -> None:
    # The agent's process ends without close() or exit hooks once its sender processes hold
    # every record (sealed: 4 sessions of 102); they see their socket close and stop as close()
    # would (grace period, then the spool): ~10 s here.
    script = (
        "import os, sys\n"
        "from rolltape.producers import Recorder\n"
        "r = Recorder('127.0.0.1:1', spool_dir=sys.argv[1], spool_after_s=3600, senders=2)\n"
        "for i in range(4):\n"
        "    with r.session('orphaned', session_id=f'orphan-{i}') as s:\n"
        "        for n in range(100):\n"
        "            s.turn('assistant', f'step {n}')\n"
        "from tests.support.waiting import wait_until\n"
        "wait_until(lambda: r._sender.stats.sealed >= 4 * 102, what='the senders to hold all')\n"
        "os._exit(0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        cwd=ROOT,  # where `tests` imports from
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    wait_until(
        lambda: list(tmp_path.glob("*.spool")) and not _locked(tmp_path),
        what="the orphaned sender processes to leave their spool segments unlocked",
        every_s=0.2,
    )
    verifier = ChainVerifier()
    for value in drain(tmp_path):
        verifier.add(value)
    reports = verifier.reports()
    assert len(reports) == 4 and all(r.ok and r.ended and r.records == 102 for r in reports)


def _locked(folder: Path) -> bool:
    """A segment is still held by a live sender process."""
    import fcntl

    for path in folder.glob("*.spool"):
        with open(path, "rb") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
    return False


def test_senders__a_sender_that_dies_with_a_full_spool_reports_what_it_held_in_memory(
    tmp_path: Path,
) -> None:
    # Past the spool's limit a sender keeps sealed records in memory: they are not durable, so
    # the recorder must still hold their copies, and list them when that sender dies.
    recorder = Recorder(
        None, spool_dir=tmp_path, spool_max_bytes=16_384, spool_after_s=0.0, senders=2
    )
    s = recorder.session("fill the spool", session_id="full-2")
    accepted: list[str] = []

    def record() -> None:
        content = f"{len(accepted):06d}" + "x" * 994
        s.turn("assistant", content)
        accepted.append(content)

    wait_until(lambda: refused(record), what="the spool to fill and refuse an event", every_s=0.001)
    sender = recorder._sender
    assert isinstance(sender, ShardedSender)
    owner = sender._shards[shard_of("full-2", 2)]
    # A few status rounds of the owner: the held records must stay unmarked.
    seen = owner.status.seq
    wait_until(
        lambda: owner.status.seq,
        lambda seq: seq >= seen + 3,
        what="three more status rounds from the sender process that holds the session",
        every_s=0.05,
    )
    os.kill(owner.proc.pid, signal.SIGKILL)
    with pytest.raises(SenderDiedError):
        recorder.close(2)
    listed = {
        orjson.loads(line)["payload"].get("content")
        for line in (tmp_path / "rejected.jsonl").read_bytes().splitlines()
    }
    spooled = {decode(v)["payload"].get("content") for v in drain(tmp_path)}
    assert set(accepted) <= listed | spooled
    assert len(spooled) < len(accepted)  # some were only in memory: the list is what saved them
