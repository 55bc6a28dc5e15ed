"""The worker as a real process against the real broker: SDK sessions in, rule evaluations,
verdicts, filter outcomes and dead letters out; killed and restarted without losing output."""

from __future__ import annotations

import math
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from rolltape.infra.bench._synthetic import end_synthetic_metrics, synthetic_metric
from rolltape.infra.commands.worker_process import worker_running
from rolltape.infra.kafka.topics import provision
from rolltape.producers import Recorder
from rolltape.schemas import Stream, decode
from tests.integration.conftest import Cluster, Topics
from tests.integration.workers import (
    WorkerProcess,
    chain_reports,
    dead_letters,
    payloads,
    wait_for,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def worker(topics: Topics, tmp_path: Path) -> Iterator[WorkerProcess]:
    process = WorkerProcess(topics, tmp_path).start()
    try:
        yield process
    finally:
        process.stop()


def record_training(recorder: Recorder, sid: str, epochs: int = 7) -> None:
    with recorder.session("fit", session_id=sid, kind="training", run_config={"lr": 0.1}) as s:
        for epoch in range(epochs):
            lr = 0.1 if epoch <= 2 else 0.01
            loss = math.nan if epoch == 2 else 1.0 / (epoch + 1)
            synthetic_metric(recorder, s, epoch, steps=10, train_loss=loss,
                             max_layer_grad_norm=1.0, min_layer_grad_norm=1e-3,
                             val_acc=0.5 + epoch / 20, lr=lr)  # fmt: skip
            if epoch == 2:
                s.decision(
                    epoch=2,
                    event_type="hyperparameter_change",
                    cites=["R7"],
                    justification="loss went NaN: cut the learning rate",
                    remedy_direction="decrease_lr",
                    remedy_params={"lr_new": 0.01, "edit_op": "none", "edit_to": "none"},
                )
        end_synthetic_metrics(recorder, s)


def record_around_a_kill(
    recorder: Recorder, sessions: int, epochs: int, killed: threading.Event, pause_s: float = 0.0
) -> None:
    """Training sessions with a metric per epoch, each followed by a one-turn agent session.
    The second half waits for `killed`, so a kill lands mid-stream however fast the workers
    keep up with the first half."""
    for i in range(sessions):
        if i == sessions // 2:
            killed.wait(300)
        with recorder.session("fit", session_id=f"t{i}", kind="training") as s:
            for epoch in range(epochs):
                synthetic_metric(recorder, s, epoch, steps=5, train_loss=1.0 / (epoch + 1),
                                 max_layer_grad_norm=2.0)  # fmt: skip
            end_synthetic_metrics(recorder, s)
        with recorder.session("ask", session_id=f"a{i}") as s:
            s.turn("assistant", f"answer {i}")
        recorder.flush()
        time.sleep(pause_s)


CALC = {
    "name": "calc",
    "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}},
}


def test_worker__sdk_sessions_produce_rule_evaluations_verdicts_and_filter_outcomes(
    topics: Topics, worker: WorkerProcess, tmp_path: Path
) -> None:
    with Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path / "spool") as rec:
        record_training(rec, "train-1")
        with rec.session("2+2", session_id="good", tools=[CALC]) as s:
            s.turn("user", "2+2?")
            s.tool_result(s.tool_call("calc", {"expr": "2+2"}), "4")
            s.turn("assistant", "4", reasoning="calc says 4")
        with rec.session("2+2", session_id="hallucinating", tools=[CALC]) as s:
            s.tool_result(s.tool_call("web_search", {"q": "2+2"}), "no such tool", success=False)
            s.turn("assistant", "4")
        s = rec.session("2+2", session_id="interrupted", tools=[CALC])
        s.turn("assistant", "thinking...")
        s.end("interrupted")

    records = wait_for(
        topics,
        lambda rs: len(payloads(rs, "verdict")) == 1 and len(payloads(rs, "filter_outcome")) == 3,
        worker=worker,
    )
    evaluations = payloads(records, "rule_evaluation", "train-1")
    assert [(e["epoch"], tuple(e["fired"])) for e in evaluations] == [
        (0, ()), (1, ()), (2, ("R7",)), (3, ()), (4, ()), (5, ()), (6, ()),
    ]  # fmt: skip
    assert evaluations[2]["non_finite"] == ["train_loss"]
    (verdict,) = payloads(records, "verdict", "train-1")
    assert verdict["status"] == "ok" and verdict["violations"] == []
    assert verdict["scores"] == {"process_score": 1.0}
    assert verdict["counts"]["obligations"] == 1 and verdict["details"]["process_axis_exercised"]
    outcomes = {
        sid: payloads(records, "filter_outcome", sid)[0]
        for sid in ("good", "hallucinating", "interrupted")
    }
    assert outcomes["good"]["accepted"] and outcomes["good"]["reasons"] == []
    assert [r["code"] for r in outcomes["hallucinating"]["reasons"]] == ["unknown_tool"]
    assert [r["code"] for r in outcomes["interrupted"]["reasons"]] == ["not_completed"]
    assert dead_letters(records) == []

    reports = chain_reports(records)
    assert all(report.ok for report in reports), reports
    rules = [decode(r.value) for r in records if r.stream == Stream.RULES]
    assert all(env["causes"] and env["producer"]["name"] == "rolltape.processors" for env in rules)


def _describe_group(topics: Topics, group: str) -> dict[str, list[tuple[int, int, int]]]:
    """`kafka-consumer-groups --describe` (Kafka's own tool) as the reader principal: topic ->
    [(partition, committed offset, log end offset)] of the rows it printed."""
    from rolltape.infra.broker import CONSUMER_GROUPS, run_kafka_tool

    s = topics.settings
    done = run_kafka_tool(
        CONSUMER_GROUPS, ["--describe", "--group", group], topics.reader,
        kafka_version=s.kafka_version, scala_version=s.scala_version, cache_dir=s.cache_dir,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Error" not in done.stderr, done.stderr
    rows: dict[str, list[tuple[int, int, int]]] = {}
    for line in done.stdout.splitlines():
        cells = line.split()
        if len(cells) >= 6 and cells[0] == group and cells[2].isdigit() and cells[3].isdigit():
            rows.setdefault(cells[1], []).append((int(cells[2]), int(cells[3]), int(cells[4])))
    return rows


def test_worker__kafkas_own_tools_show_its_lag_on_the_raw_topics(
    topics: Topics, worker: WorkerProcess, tmp_path: Path
) -> None:
    """The worker commits the positions it has processed to its group, so
    `kafka-consumer-groups --describe` shows its offsets and lag on the topics it reads, as
    the reader principal; `rolltape broker status` shows them too."""
    with Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path / "spool") as rec:
        for i in range(6):
            with rec.session("2+2", session_id=f"lag-{i}") as s:
                s.turn("user", "2+2?")
                s.turn("assistant", "4")
    wait_for(topics, lambda rs: len(payloads(rs, "filter_outcome")) == 6, worker=worker)
    events = f"{topics.prefix}.events.v1"

    def caught_up(rows: dict[str, list[tuple[int, int, int]]]) -> bool:
        written = [r for r in rows.get(events, []) if r[2] > 0]
        return bool(written) and all(committed == end for _, committed, end in written)

    rows = wait_until(
        lambda: _describe_group(topics, topics.settings.worker_group),
        caught_up,
        what="kafka-consumer-groups to show the worker's commits at the end of the events",
        every_s=1.0,
    )
    written = [r for r in rows[events] if r[2] > 0]
    assert sum(end for _, _, end in written) == sum(1 + 2 + 1 for _ in range(6))

    from rolltape.infra.commands.broker import broker_status

    status = broker_status(topics.settings)
    (group,) = [g for g in status.groups if g.group == topics.settings.worker_group]
    assert group.lag == 0 and events in {t.topic for t in group.topics}


def test_worker__killed_mid_stream_and_restarted_loses_no_output(
    topics: Topics, worker: WorkerProcess, tmp_path: Path
) -> None:
    sessions, epochs = 24, 40
    recorder = Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path / "spool")

    killed = threading.Event()
    recording = threading.Thread(
        target=record_around_a_kill,
        args=(recorder, sessions, epochs, killed),
        kwargs={"pause_s": 0.15},
        daemon=True,
    )
    recording.start()
    wait_for(topics, lambda rs: len(payloads(rs, "rule_evaluation")) >= 150, worker=worker)
    worker.kill()
    killed_at = len(payloads(wait_for(topics, lambda rs: True), "rule_evaluation"))
    # Restarted at once: the killed member is still listed in the group until its session
    # times out, so the new worker goes through a second rebalance, reading only once the
    # table's partitions are restored each time.
    assert worker_running(topics.settings)
    killed.set()
    worker.start()
    recording.join()
    recorder.close()

    records = wait_for(
        topics,
        lambda rs: (
            len(payloads(rs, "verdict")) == sessions
            and len(payloads(rs, "filter_outcome")) == sessions
        ),
        worker=worker,
        timeout_s=180,
    )
    assert killed_at < sessions * epochs  # the kill really was mid-stream
    evaluations = {
        (decode(r.value)["session_id"], decode(r.value)["payload"]["epoch"])
        for r in records
        if r.stream == Stream.RULES
    }
    assert evaluations == {(f"t{i}", e) for i in range(sessions) for e in range(epochs)}
    assert len(payloads(records, "rule_evaluation")) == sessions * epochs  # one id per epoch
    broken = [rep for rep in chain_reports(records) if not rep.ok]
    forked = [
        decode(r.value)
        for r in records
        for rep in broken
        if r.key == rep.session_id.encode() and r.stream.value == rep.stream
    ]
    # copies after the restart are byte-identical redeliveries, never forks
    assert broken == [], forked
    assert payloads(records, "chain_broken") == []  # no state was lost with the process
    assert dead_letters(records) == []


def test_worker__a_thousand_bad_records_are_dead_lettered_or_judged_and_good_ones_go_on(
    topics: Topics, worker: WorkerProcess, tmp_path: Path
) -> None:
    import asyncio
    import random

    from rolltape.schemas import GENESIS_HASH, seal, topic_name

    rng = random.Random(11)
    events = topic_name(Stream.EVENTS, topics.prefix)
    metrics = topic_name(Stream.METRICS, topics.prefix)
    producer_info = {"name": "forger", "version": "0", "principal": "agent"}
    bad: list[tuple[str, bytes | None, bytes]] = []
    for _ in range(300):
        garbage = rng.randbytes(rng.randint(1, 200))
        bad.append((rng.choice([events, metrics]), rng.randbytes(4), garbage))
    for i in range(250):
        value = f'{{"v":1,"stream":"events","session_id":"w{i}","seq":"zero","ts_ns":1}}'.encode()
        bad.append((events, f"w{i}".encode(), value))
    for i in range(250):
        value = f'{{"v":{2 + i % 5},"stream":"metrics","session_id":"u{i}","seq":0}}'.encode()
        bad.append((metrics, f"u{i}".encode(), value))
    for i in range(100):
        sid = f"p{i}"
        started, head = seal(stream="events", session_id=sid, seq=0, ts_ns=1, type="session_started",
                             payload={"task": "t"}, prev_hash=GENESIS_HASH, producer=producer_info)  # fmt: skip
        turn, _ = seal(stream="events", session_id=sid, seq=1, ts_ns=2, type="turn",
                       payload={"role": "robot", "content": 5}, prev_hash=head, producer=producer_info)  # fmt: skip
        bad += [(events, sid.encode(), started), (events, sid.encode(), turn)]
    for i in range(50):
        sid, prev = f"b{i}", GENESIS_HASH
        for seq in range(5):
            value, _ = seal(stream="events", session_id=sid, seq=seq, ts_ns=seq, type="feedback",
                            payload={"text": "x"}, prev_hash=prev, producer=producer_info)  # fmt: skip
            prev = rng.randbytes(32).hex()  # every link after seq 0 is broken
            bad.append((events, sid.encode(), value))
    bad_records = 300 + 250 + 250 + 100 + 50 * 4

    async def send_bad() -> None:
        producer = topics.writer.producer(enable_idempotence=True)
        await producer.start()
        try:
            for topic, key, value in bad:
                await producer.send(topic, value, key=key)
            await producer.flush()
        finally:
            await producer.stop()

    with Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path / "spool") as rec:
        for i in range(5):
            record_training(rec, f"train-{i}")
        rec.flush()
        asyncio.run(send_bad())
        for i in range(10):
            with rec.session("2+2", session_id=f"good-{i}", tools=[CALC]) as s:
                s.turn("assistant", "4")

    records = wait_for(
        topics,
        lambda rs: (
            len(dead_letters(rs)) >= 900
            and len(payloads(rs, "chain_broken")) >= 200
            and len(payloads(rs, "verdict")) == 5
            and len(payloads(rs, "filter_outcome")) == 10
        ),
        worker=worker,
        timeout_s=180,
    )
    reasons: dict[str, int] = {}
    for letter in dead_letters(records):
        reasons[letter["rolltape.reason"]] = reasons.get(letter["rolltape.reason"], 0) + 1
    assert reasons == {"unparseable": 550, "unknown_version": 250, "invalid_payload": 100}
    broken = payloads(records, "chain_broken")
    # Per session: seq 1 and 3 do not link (set aside); seq 2 and 4 then follow a gap.
    assert len(broken) == 200
    assert Counter(b["reason"] for b in broken) == {"broken_link": 100, "gap": 100}
    assert sum(reasons.values()) + len(broken) == bad_records
    assert all(o["accepted"] for o in payloads(records, "filter_outcome"))
    assert all(v["status"] == "ok" for v in payloads(records, "verdict"))
    letter = next(d for d in dead_letters(records) if d["rolltape.reason"] == "unknown_version")
    assert letter["value"].startswith('{"v":') and letter["rolltape.source.topic"] == metrics
    assert worker.alive()


def test_worker__llm_judge_and_reward_verdicts_through_a_local_openai_compatible_server(
    topics: Topics, tmp_path: Path
) -> None:
    import json

    from tests.support.openai_server import OpenAICompatibleServer, grade_by_answer

    with OpenAICompatibleServer(grade_by_answer) as server:
        process = WorkerProcess(
            topics,
            tmp_path,
            ROLLTAPE_LLM_JUDGES='["answer_quality"]',
            ROLLTAPE_REWARDS='["final_reward"]',
            ROLLTAPE_MODELS=json.dumps(
                {"grader": {"base_url": server.base_url, "model": "local-grader"}}
            ),
        ).start()
        try:
            with Recorder(
                topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path / "spool"
            ) as rec:
                for sid, answer in (("right", "4"), ("wrong", "5"), ("garbled", "garble")):
                    with rec.session("What is 2+2?", session_id=sid) as s:
                        s.turn("user", "What is 2+2?")
                        s.turn("assistant", answer)
                        if sid != "garbled":
                            s.reward(1.0 if answer == "4" else 0.0)
            records = wait_for(
                topics,
                lambda rs: (
                    len(payloads(rs, "verdict")) == 6 and len(payloads(rs, "filter_outcome")) == 6
                ),
                worker=process,
            )
        finally:
            process.stop()
    by_session = {sid: payloads(records, "verdict", sid) for sid in ("right", "wrong", "garbled")}
    quality = {
        sid: next(v for v in vs if v["judge"] == "llm:answer_quality")
        for sid, vs in by_session.items()
    }
    assert quality["right"]["status"] == "ok" and quality["right"]["scores"] == {
        "score": 1.0,
        "passed": 1.0,
    }
    assert quality["wrong"]["scores"] == {"score": 0.0, "passed": 0.0}
    assert quality["garbled"]["status"] == "error" and quality["garbled"]["scores"] == {}
    rewards = {
        sid: next(v for v in vs if v["judge"] == "reward:final_reward")
        for sid, vs in by_session.items()
    }
    assert rewards["right"]["scores"] == {"reward": 1.0} and rewards["wrong"]["scores"] == {
        "reward": 0.0
    }
    assert rewards["garbled"]["status"] == "error" and "no reward" in rewards["garbled"]["error"]

    # each judge conversation is a session of its own: trainable=false, linked, never training data
    judge_sessions = {v["judge_session_id"] for v in quality.values()}
    events = [decode(r.value) for r in wait_for(topics, lambda rs: True, streams=(Stream.EVENTS,))]
    started = {e["session_id"]: e["payload"] for e in events if e["type"] == "session_started"}
    for sid, verdict in quality.items():
        judge_start = started[verdict["judge_session_id"]]
        assert judge_start["trainable"] is False and judge_start["linked_session_id"] == sid
    assert len(judge_sessions) == 3
    rejected = [o for o in payloads(records, "filter_outcome") if not o["accepted"]]
    assert len(rejected) == 3
    assert all("not_trainable" in [r["code"] for r in o["reasons"]] for o in rejected)
    assert all(r["response_format"]["type"] == "json_schema" for r in server.requests)
    assert len(server.requests) == 3  # judges' own sessions are not judged again


def test_worker__runs_a_reward_function_registered_by_a_plugin_module(
    topics: Topics, tmp_path: Path
) -> None:
    import os

    (tmp_path / "my_rewards.py").write_text(
        "from rolltape.processors.judges import RewardFunction, register_reward\n"
        "class Length(RewardFunction):\n"
        "    name = 'answer_length'\n"
        "    version = 'my_rewards.answer_length/1'\n"
        "    def score(self, transcript):\n"
        "        return {'reward': float(len(transcript.items[-1].text))}\n"
        "register_reward(Length())\n"
    )
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    process = WorkerProcess(
        topics,
        tmp_path,
        PYTHONPATH=path,
        ROLLTAPE_PLUGINS='["my_rewards"]',
        ROLLTAPE_REWARDS='["answer_length"]',
    ).start()
    try:
        with (
            Recorder(
                topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path / "spool"
            ) as rec,
            rec.session("say hello", session_id="hello") as s,
        ):
            s.turn("assistant", "hello")
        records = wait_for(topics, lambda rs: len(payloads(rs, "verdict")) == 1, worker=process)
    finally:
        process.stop()
    (verdict,) = payloads(records, "verdict", "hello")
    assert verdict["judge"] == "reward:answer_length" and verdict["scores"] == {"reward": 5.0}
    assert verdict["judge_version"] == "my_rewards.answer_length/1"


def test_worker__that_stops_making_progress_restarts_itself_and_loses_nothing(
    topics: Topics, tmp_path: Path
) -> None:
    import os

    marker = tmp_path / "stalled-once"
    (tmp_path / "stall_once.py").write_text(
        "import asyncio, pathlib\n"
        "from rolltape.processors.worker import Shell\n"
        f"MARKER = pathlib.Path({str(marker)!r})\n"
        "original = Shell.process\n"
        "async def process(self, records):\n"
        "    late = {f'train-{i}'.encode() for i in range(6, 12)}\n"
        "    if any(r.key in late for r in records) and not MARKER.exists():\n"
        "        MARKER.write_text('stalled')\n"
        "        await asyncio.Event().wait()  # like faust after a bad rebalance: never again\n"
        "    await original(self, records)\n"
        "Shell.process = process\n"
    )
    process = WorkerProcess(
        topics,
        tmp_path,
        PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        ROLLTAPE_PLUGINS='["stall_once"]',
        ROLLTAPE_WORKER_STALL_AFTER_S="3",
    ).start()
    try:
        with Recorder(
            topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path / "spool"
        ) as rec:
            for i in range(12):
                record_training(rec, f"train-{i}")
                rec.flush()
        records = wait_for(
            topics,
            # every output, not just the verdicts: a batch's outputs land on several topics, and
            # a read may see a session's verdict before its last rule evaluation
            lambda rs: (
                len(payloads(rs, "verdict")) == 12
                and len(payloads(rs, "rule_evaluation")) >= 12 * 7
            ),
            worker=process,
        )
    finally:
        process.stop()
    assert marker.exists(), "the plugin never stalled the worker"
    assert "no progress for" in process.full_log() and "restarting" in process.full_log()
    assert len(payloads(records, "rule_evaluation")) == 12 * 7
    assert all(rep.ok for rep in chain_reports(records))


def test_two_workers__one_killed_mid_stream__the_other_takes_over_with_no_loss_and_no_fork(
    cluster: Cluster, tmp_path: Path
) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    settings = cluster.settings.model_copy(update={"topic_prefix": prefix, "partitions": 6})
    provision(settings)
    topics = Topics(prefix, settings)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = WorkerProcess(topics, tmp_path / "a").start()
    second = WorkerProcess(topics, tmp_path / "b").start()
    sessions, epochs = 36, 20
    recorder = Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path / "spool")
    killed = threading.Event()

    def owned(process: WorkerProcess) -> set[int]:
        lines = re.findall(r"reading partitions \[([0-9, ]*)\]", process.full_log())
        return {int(p) for p in lines[-1].split(",") if p.strip()} if lines else set()

    recording = threading.Thread(
        target=record_around_a_kill, args=(recorder, sessions, epochs, killed), daemon=True
    )

    def settled(owners: tuple[set[int], set[int]]) -> bool:
        a, b = owners
        return bool(a and b) and not a & b and a | b == set(range(6))

    try:
        wait_until(
            lambda: (owned(first), owned(second)),
            settled,
            what="the group to settle: the two workers own disjoint halves of the partitions",
            every_s=0.5,
            explain=lambda: first.log() + second.log(),
        )
        recording.start()
        wait_for(topics, lambda rs: len(payloads(rs, "verdict")) >= 6, worker=second)
        assert "worker: " in first.full_log() and "worker: " in second.full_log(), (
            "both workers should have processed a share before the kill"
        )
        first.kill()  # still a group member until its session times out: no waiting for that
        killed.set()
        recording.join()
        recorder.close()
        records = wait_for(
            topics,
            lambda rs: (
                len(payloads(rs, "verdict")) == sessions
                and len(payloads(rs, "filter_outcome")) == sessions
                and len(payloads(rs, "rule_evaluation")) == sessions * epochs
            ),
            worker=second,
            timeout_s=240,
        )
    finally:
        second.stop()
        first.stop()
    evaluations = {
        (decode(r.value)["session_id"], decode(r.value)["payload"]["epoch"])
        for r in records
        if r.stream == Stream.RULES
    }
    assert evaluations == {(f"t{i}", e) for i in range(sessions) for e in range(epochs)}
    assert [rep for rep in chain_reports(records) if not rep.ok] == []  # copies, never forks
    assert payloads(records, "chain_broken") == []  # no session state lost in the handover
    assert dead_letters(records) == []
