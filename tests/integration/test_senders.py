"""A recorder with sender processes (`senders=2`) against a real broker: the chains the
in-thread sender writes, through a broker crash, a resume, a restart with a spool and an exit
without close; and the benchmark that measures it, at a small size."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rolltape.infra.bench._synthetic import synthetic_metric
from rolltape.infra.kafka.readback import read_records
from rolltape.producers import EventsRejectedError, Recorder
from rolltape.producers import _recorder as recorder_module
from rolltape.schemas import Role, Stream, decode
from tests.support.waiting import wait_until

from .conftest import Cluster, Topics, make_topics, managed_cluster, start_managed

pytestmark = pytest.mark.integration


def _record(recorder: Recorder, tag: str, sessions: int = 6, turns: int = 60) -> None:
    for i in range(sessions):
        with recorder.session("sharded", session_id=f"{tag}-{i}", model="m") as s:
            for n in range(turns):
                s.turn("assistant", f"step {n} of {i}", token_ids=[n, i])
                if n % 20 == 0:
                    cid = s.tool_call("search", {"q": n}, call_id=f"call-{i}-{n}")
                    s.tool_result(cid, "found")
            s.reward(1.0)


def _values(topics: Topics) -> dict[str, list[bytes]]:
    async def collect() -> dict[str, list[bytes]]:
        out: dict[str, list[bytes]] = {}
        async for r in read_records(topics.reader, [Stream.EVENTS], prefix=topics.prefix):
            out.setdefault(r.key.decode(), []).append(r.value)
        return out

    return asyncio.run(collect())


def test_senders_two__write_byte_identical_chains_to_one_sender_for_the_same_calls(
    cluster: Cluster, topics: Topics, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The wall clock is read in the recording process: pinned, the envelopes' hashes match too.
    second = make_topics(cluster)
    logs = []
    for senders, where in ((1, topics), (2, second)):
        clock = itertools.count(1_700_000_000_000_000_000, 1000)
        monkeypatch.setattr(recorder_module, "_time_ns", clock.__next__)
        recorder = Recorder(
            where.connection(Role.AGENT),
            topic_prefix=where.prefix,
            spool_dir=tmp_path / str(senders),
            senders=senders,
        )
        _record(recorder, "same")
        result = recorder.close(60)
        assert result.acked == result.sealed == 6 * (60 + 2 * 3 + 3)
        reports = where.verify().reports()
        assert len(reports) == 6 and all(r.ok and r.ended for r in reports)
        logs.append(_values(where))
    assert logs[0] == logs[1]
    first = [decode(v) for v in logs[1]["same-0"]]
    assert [e["payload"].get("content") for e in first[1:3]] == ["step 0 of 0", None]
    assert [e["type"] for e in first[:3]] == ["session_started", "turn", "tool_call"]


def test_senders_two__broker_killed_mid_session__every_event_arrives_once_in_order(
    tmp_path: Path,
) -> None:
    broker = start_managed(tmp_path / "broker")
    try:
        topics = make_topics(managed_cluster(broker, tmp_path))
        recorder = Recorder(
            topics.connection(Role.AGENT),
            topic_prefix=topics.prefix,
            spool_dir=tmp_path / "spool",
            spool_after_s=1.0,
            senders=2,
        )
        sessions = [recorder.session("outage", session_id=f"crash-{i}") for i in range(6)]
        for n in range(900):
            sessions[n % 6].turn("assistant", f"step {n}")
            if n == 300:
                recorder.flush(60)
                assert broker.kill()
            if n == 600:  # recording on while the broker is dead: the shards spool
                wait_until(lambda: recorder.spool_bytes, what="the recorder to spool")
                broker.start()
            time.sleep(0.001)
        for s in sessions:
            s.end()
        recorder.flush(120)
        asyncio.run(recorder.adelivered(120))
        result = recorder.close(60)
        assert result.spooled > 0 and result.rejected == 0
        reports = topics.verify().reports()
        assert len(reports) == 6
        for report in reports:
            assert report.breaks == () and report.ended
            assert report.records == 150 + 2 and report.last_seq == 151
    finally:
        broker.stop()


def test_senders_two__a_record_the_broker_refuses_is_rejected_by_name_on_close(
    cluster: Cluster, topics: Topics, tmp_path: Path
) -> None:
    if cluster.managed is None:
        pytest.skip("needs rolltape's managed broker (its principals)")
    recorder = Recorder(
        topics.connection(Role.AGENT),
        topic_prefix=topics.prefix,
        spool_dir=tmp_path / "spool",
        senders=2,
    )
    session = recorder.session("fit", session_id="agent-claims-metrics", kind="training")
    synthetic_metric(recorder, session, 0, steps=1, train_loss=1.0)
    with pytest.raises(EventsRejectedError) as raised:
        recorder.close(timeout_s=60)
    assert "TopicAuthorizationFailed" in str(raised.value) and "metrics" in str(raised.value)
    (report,) = topics.verify("agent-claims-metrics").reports()
    assert report.stream == "events" and report.ok


def test_senders_two__resume_continues_the_chain_in_the_process_that_owns_it(
    topics: Topics, tmp_path: Path
) -> None:
    def recorder(spool: str) -> Recorder:
        return Recorder(
            topics.connection(Role.AGENT),
            topic_prefix=topics.prefix,
            spool_dir=tmp_path / spool,
            senders=2,
        )

    with recorder("a") as first:
        for i in range(4):
            s = first.session("count", session_id=f"resumed-{i}")
            s.turn("user", "one")
    with recorder("b") as second:
        for i in range(4):
            s = second.session("ignored", session_id=f"resumed-{i}", resume=True)
            s.turn("assistant", "two")
            s.end()
    for report in topics.verify().reports():
        assert report.ok and report.set_aside == 0
        assert report.records == 5 and report.last_seq == 4 and report.ended


def test_senders_two__deliver_a_spool_left_by_an_earlier_recorder_before_delivered_returns(
    topics: Topics, tmp_path: Path
) -> None:
    offline = Recorder(
        "127.0.0.1:1", topic_prefix=topics.prefix, spool_dir=tmp_path, spool_after_s=0.2
    )
    _record(offline, "offline", sessions=3, turns=100)
    assert offline.close(1).acked == 0 and list(tmp_path.glob("*.spool"))
    online = Recorder(
        topics.connection(Role.AGENT), topic_prefix=topics.prefix, spool_dir=tmp_path, senders=2
    )
    _record(online, "online", sessions=3, turns=10)
    asyncio.run(online.adelivered(120))
    assert online.spool_bytes == 0
    online.close(30)
    reports = {r.session_id: r for r in topics.verify().reports()}
    assert len(reports) == 6 and all(r.ok and r.ended for r in reports.values())
    assert reports["offline-0"].records == 100 + 2 * 5 + 3


def test_senders_two__interpreter_exit_flushes_what_was_recorded_without_close(
    topics: Topics, tmp_path: Path
) -> None:
    script = (
        "import sys\n"
        "from rolltape.infra import open_recorder\n"
        "r = open_recorder(spool_dir=sys.argv[1], senders=2)\n"
        "for i in range(4):\n"
        "    s = r.session('exit without close', session_id=f'atexit-{i}')\n"
        "    for n in range(500):\n"
        "        s.turn('assistant', f'step {n}')\n"
        "    s.end()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        env=topics.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    reports = topics.verify().reports()
    assert len(reports) == 4 and all(r.ok and r.ended and r.records == 502 for r in reports)


def test_bench_producer__reports_the_sustained_figure_per_sender_count(topics: Topics) -> None:
    # A smoke run at a small size so the benchmark cannot rot; figures are never asserted on.
    out = subprocess.run(
        [
            *(sys.executable, "-m", "rolltape.infra", "bench", "producer"),
            *("--calls", "300", "--events", "600", "--repeats", "1", "--senders", "3"),
            *("--sessions", "12", "--json"),
        ],
        env=topics.env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    figures = json.loads(out.stdout)
    assert [run["senders"] for run in figures["by_senders"]] == [1, 2, 3]
    for run in figures["by_senders"]:
        assert run["events_per_s"] > 0 and run["ceiling_events_per_s"] > 0 and run["ratio"] > 0
