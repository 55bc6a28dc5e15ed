"""Recording against a real broker: concurrency, a broker crash, forged records."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from rolltape.producers import Recorder
from rolltape.schemas import decode, read_event, seal, topic_name
from tests.support.waiting import Output

from .conftest import Topics, make_topics, managed_cluster, start_managed

pytestmark = pytest.mark.integration
HERE = Path(__file__).parent


def test_two_producer_processes__record_concurrent_sessions_that_read_back_in_order(
    topics: Topics, tmp_path: Path
) -> None:
    sessions, events = 4, 150
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(HERE / "record_sessions.py"),
                str(tmp_path / f"spool-{tag}"),
                tag,
                str(sessions),
                str(events),
            ],
            env=topics.env(),
        )
        for tag in ("proc-a", "proc-b")
    ]
    assert [p.wait(180) for p in procs] == [0, 0]
    verifier = topics.verify()
    reports = verifier.reports()
    assert not verifier.unattributed
    by_chain = {(r.session_id, r.stream): r for r in reports}
    assert len(by_chain) == 2 * sessions * 2
    for tag in ("proc-a", "proc-b"):
        for i in range(sessions):
            ev = by_chain[(f"{tag}-{i}", "events")]
            tool_pairs = events // 3
            assert ev.ok and ev.ended
            assert ev.records == 1 + (events - tool_pairs) + 2 * tool_pairs + 1
            # every metric, then the metrics chain's own session_ended
            assert by_chain[(f"{tag}-{i}", "metrics")].records == events + 1


def test_broker_killed_mid_session__every_event_arrives_once_in_order_and_the_agent_is_told_twice(
    tmp_path: Path,
) -> None:
    broker = start_managed(tmp_path / "broker")
    try:
        topics = make_topics(managed_cluster(broker, tmp_path))
        total = 1500
        agent = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "record_through_outage.py"),
                str(tmp_path / "spool"),
                "crash-1",
                str(total),
            ],
            env=topics.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert agent.stdout is not None
        stderr = Output(agent.stderr, "the agent's stderr")
        assert agent.stdout.readline().strip() == "a third recorded"
        assert broker.kill()
        stderr.wait_for("spooling records to")  # the agent records on while the broker is dead
        broker.start()
        agent.wait(180)
        with agent.stdout:
            out = agent.stdout.read()
        err = stderr.whole()
        assert agent.returncode == 0, err
        assert out.startswith(f"sealed {total + 2} spooled ") and not out.endswith(" 0\n")
        verifier = topics.verify("crash-1")
        (report,) = verifier.reports()
        assert report.breaks == ()
        assert report.records == total + 2 and report.last_seq == total + 1 and report.ended
        # One line when spooling starts and one when the spool drained; the Kafka client's
        # complaints go to the debug log in the spool folder.
        lines = err.splitlines()
        assert len(lines) == 2, err
        assert "spooling records to" in lines[0] and "client.log" in lines[0]
        assert "the broker is back" in lines[1] and "spooled records delivered" in lines[1]
        assert (tmp_path / "spool" / "client.log").stat().st_size > 0
    finally:
        broker.stop()


def test_verify__reports_records_forged_into_the_topic_by_a_raw_producer(
    topics: Topics, tmp_path: Path
) -> None:
    recorder = Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path)
    for sid in ("honest-1", "victim-1"):
        with recorder.session("task", session_id=sid) as s:
            s.turn("user", "what is the capital of France?")
            s.turn("assistant", "Paris")
    recorder.close(30)

    victim = [read_event(r.value) for r in _read(topics, "victim-1")]
    edited = copy.deepcopy(victim[2].mapping)
    edited["payload"]["content"] = "Lyon"  # rewritten answer, old hash kept
    appended, _ = seal(
        stream="events",
        session_id="victim-1",
        seq=4,
        ts_ns=victim[-1].ts_ns + 1,
        type="reward",
        payload={"value": 1.0, "name": "reward", "components": {}, "source": None},
        prev_hash=victim[-1].hash,
        producer=victim[0].mapping["producer"],
    )

    async def forge() -> None:
        producer = topics.writer.producer()
        await producer.start()
        topic = topic_name("events", topics.prefix)
        await producer.send_and_wait(
            topic, key=b"victim-1", value=orjson.dumps(edited, option=orjson.OPT_SORT_KEYS)
        )
        await producer.send_and_wait(topic, key=b"victim-1", value=appended)
        await producer.stop()

    import asyncio

    asyncio.run(forge())
    cli = [sys.executable, "-m", "rolltape.infra", "log", "verify"]
    bad = subprocess.run(
        [*cli, "--session", "victim-1", "--json"], env=topics.env(), capture_output=True, text=True
    )
    assert bad.returncode == 1, bad.stderr
    report = decode(bad.stdout)
    found = {b["kind"] for chain in report["chains"] for b in chain["breaks"]}
    assert {"tampered", "after_end"} <= found
    good = subprocess.run(
        [*cli, "--session", "honest-1"], env=topics.env(), capture_output=True, text=True
    )
    assert good.returncode == 0, good.stdout + good.stderr
    everything = subprocess.run(cli, env=topics.env(), capture_output=True, text=True)
    assert everything.returncode == 1 and "tampered" in everything.stdout


def _read(topics: Topics, session_id: str) -> list:
    import asyncio

    from rolltape.infra.kafka.readback import read_records
    from rolltape.schemas import Stream

    async def collect() -> list:
        return [
            r
            async for r in read_records(topics.reader, [Stream.EVENTS], prefix=topics.prefix)
            if r.key == session_id.encode()
        ]

    return asyncio.run(collect())


def test_spool_left_by_a_recorder_without_broker__is_drained_in_order_by_the_next_one(
    topics: Topics, tmp_path: Path
) -> None:
    offline = Recorder(
        "127.0.0.1:1", topic_prefix=topics.prefix, spool_dir=tmp_path, spool_after_s=0.2
    )
    with offline.session("recorded while the broker was away", session_id="offline-9") as s:
        for n in range(200):
            s.turn("assistant", f"step {n}")
    result = offline.close(1)
    assert result.acked == 0 and result.spooled == 202
    assert list(tmp_path.glob("*.spool")), "the unsent records stay on disk"

    online = Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path)
    with online.session("recorded later", session_id="online-9") as s:
        s.turn("user", "hello")
    online.flush(60)
    online.close(30)
    assert online.spool_bytes == 0
    reports = {r.session_id: r for r in topics.verify().reports()}
    assert reports["offline-9"].ok and reports["offline-9"].records == 202
    assert reports["online-9"].ok and reports["online-9"].records == 3


def test_interpreter_exit__flushes_what_was_recorded_without_close(
    topics: Topics, tmp_path: Path
) -> None:
    script = (
        "import sys\n"
        "from rolltape.infra import open_recorder\n"
        "r = open_recorder(spool_dir=sys.argv[1])\n"
        "s = r.session('exit without close', session_id='atexit-1')\n"
        "for n in range(500):\n"
        "    s.turn('assistant', f'step {n}')\n"
        "s.end()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        env=topics.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    (report,) = topics.verify("atexit-1").reports()
    assert report.ok and report.ended and report.records == 502
