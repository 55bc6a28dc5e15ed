"""One writer per chain: a second writer of a session resumes from the head in the log, or is
refused, or is set aside by every reader; the chain never forks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rolltape.producers import ChainConflictError, Recorder, ResumeError
from rolltape.producers import _takeover as sender_module
from rolltape.schemas import ChainReport, Role, Stream, seal, topic_name

from .conftest import Topics

pytestmark = pytest.mark.integration


def _recorder(topics: Topics, spool: Path) -> Recorder:
    return Recorder(topics.connection(Role.AGENT), topic_prefix=topics.prefix, spool_dir=spool)


def _events_chain(topics: Topics, session_id: str) -> ChainReport:
    verifier = topics.verify(session_id)
    (report,) = [r for r in verifier.reports() if r.stream == Stream.EVENTS.value]
    return report


def test_resume__a_restarted_writer_continues_the_chain_from_its_head(
    topics: Topics, tmp_path: Path
) -> None:
    with _recorder(topics, tmp_path / "a") as first:
        s = first.session("count", session_id="resumed-1")
        s.turn("user", "one")
        s.turn("assistant", "two")
    with _recorder(topics, tmp_path / "b") as second:
        s = second.session("ignored", session_id="resumed-1", resume=True)
        s.turn("assistant", "three")
        s.end()
    report = _events_chain(topics, "resumed-1")
    assert report.ok and report.set_aside == 0
    assert report.records == 6 and report.last_seq == 5 and report.ended


def test_resume__of_a_session_without_records_starts_it(topics: Topics, tmp_path: Path) -> None:
    with (
        _recorder(topics, tmp_path / "a") as rec,
        rec.session("fresh", session_id="resumed-2", resume=True) as s,
    ):
        s.turn("user", "hello")
    report = _events_chain(topics, "resumed-2")
    assert report.ok and report.records == 3


def test_resume__a_zombie_writer_is_set_aside_and_never_interleaves(
    topics: Topics, tmp_path: Path
) -> None:
    zombie = _recorder(topics, tmp_path / "zombie")
    try:
        old = zombie.session("count", session_id="resumed-3")
        old.turn("user", "one")
        zombie.flush()
        with _recorder(topics, tmp_path / "new") as new:
            s = new.session("count", session_id="resumed-3", resume=True)
            s.turn("assistant", "new writer")
            new.flush()
            old.turn("assistant", "zombie 1")  # the old writer never learnt it was replaced
            old.turn("assistant", "zombie 2")
            zombie.flush()
            s.turn("assistant", "new writer again")
            s.end()
    finally:
        zombie.close()
    report = _events_chain(topics, "resumed-3")
    assert report.set_aside == 2 and [b.kind.value for b in report.breaks] == ["fork"]
    assert report.last_seq == 5 and report.ended  # 0,1 old; 2 resumed; 3,4,5 new


def test_resume__refused_when_another_writer_appends_while_it_reads_the_head(
    topics: Topics, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _recorder(topics, tmp_path / "a") as first:
        first.session("count", session_id="resumed-4").turn("user", "one")
    report = _events_chain(topics, "resumed-4")
    read_head = sender_module.read_head

    async def racing_read_head(*args: Any, **kwargs: Any) -> Any:
        head = await read_head(*args, **kwargs)
        # Another writer appends right after the head was read, before the claim lands.
        value, _ = seal(
            stream="events",
            session_id="resumed-4",
            seq=head.seq + 1,
            ts_ns=1,
            type="turn",
            payload={"role": "assistant", "content": "the other writer"},
            prev_hash=head.hash,
            producer={"name": "other", "version": "0", "principal": "agent"},
        )
        producer = topics.connection(Role.AGENT).producer(acks="all")
        await producer.start()
        try:
            topic = topic_name(Stream.EVENTS, topics.prefix)
            await producer.send_and_wait(
                topic, value, key=b"resumed-4", partition=args[1].partition
            )
        finally:
            await producer.stop()
        return head

    monkeypatch.setattr(sender_module, "read_head", racing_read_head)
    with (
        _recorder(topics, tmp_path / "b") as second,
        pytest.raises(ChainConflictError, match="another writer appended to session"),
    ):
        second.session("count", session_id="resumed-4", resume=True)
    after = _events_chain(topics, "resumed-4")
    # The other writer's record is the chain; the refused claim is set aside.
    assert after.last_seq == report.last_seq + 1 and after.set_aside == 1


def test_resume__an_ended_session_is_refused_with_what_to_do(
    topics: Topics, tmp_path: Path
) -> None:
    with _recorder(topics, tmp_path / "a") as rec, rec.session("done", session_id="resumed-5"):
        pass
    with (
        _recorder(topics, tmp_path / "b") as rec,
        pytest.raises(ResumeError, match=r"ended at seq 1.*linked_session_id"),
    ):
        rec.session("again", session_id="resumed-5", resume=True)


def test_resume__without_a_broker_is_refused(tmp_path: Path) -> None:
    with (
        Recorder(None, spool_dir=tmp_path) as rec,
        pytest.raises(ResumeError, match="no broker configured"),
    ):
        rec.session("x", session_id="resumed-6", resume=True)


def test_second_writer_without_resume__its_genesis_is_set_aside(
    topics: Topics, tmp_path: Path
) -> None:
    with _recorder(topics, tmp_path / "a") as first:
        first.session("one", session_id="twice").turn("user", "first writer")
    with (
        _recorder(topics, tmp_path / "b") as second,
        second.session("two", session_id="twice") as s,
    ):
        s.turn("user", "second writer")
    report = _events_chain(topics, "twice")
    assert report.last_seq == 1 and report.set_aside == 3 and not report.ended
    assert [b.kind.value for b in report.breaks] == ["fork"]
