"""A managed cluster of three nodes (`broker up --nodes 3`): every topic replicated three ways
with min ISR 2, a node killed while sessions record, nothing lost or duplicated, and the cluster
healthy again once the node is back."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from rolltape.infra.broker import ManagedBroker
from rolltape.infra.kafka.topics import partition_health
from rolltape.infra.settings import Settings
from rolltape.producers import Recorder
from rolltape.schemas import Role, Stream, topic_name

from .conftest import Cluster, Topics, make_topics, managed_cluster

pytestmark = pytest.mark.integration
CLI = [sys.executable, "-m", "rolltape.infra"]


@pytest.fixture
def three_nodes(tmp_path: Path) -> Iterator[tuple[Cluster, ManagedBroker]]:
    cfg = Settings()
    broker = ManagedBroker(
        tmp_path / "state" / "broker",
        kafka_version=cfg.kafka_version,
        scala_version=cfg.scala_version,
        cache_dir=cfg.cache_dir,
        heap="384m",
        nodes=3,
    )
    broker.start()
    try:
        cluster = managed_cluster(broker, tmp_path / "state")
        settings = cluster.settings.model_copy(update={"replication_factor": 3})
        yield Cluster(settings, broker), broker
    finally:
        broker.stop()


def _broker(state_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`rolltape broker ...` on the managed cluster kept in `state_dir`."""
    full = {**os.environ, "ROLLTAPE_STATE_DIR": str(state_dir), "COLUMNS": "200", **env}
    full.pop("ROLLTAPE_BOOTSTRAP", None)
    return subprocess.run(
        [*CLI, "broker", *args], env=full, capture_output=True, text=True, timeout=180
    )


def _status(state_dir: Path) -> subprocess.CompletedProcess[str]:
    return _broker(state_dir, "status")


def test_a_node_killed_while_sessions_record__loses_and_duplicates_nothing(
    three_nodes: tuple[Cluster, ManagedBroker], tmp_path: Path
) -> None:
    cluster, broker = three_nodes
    topics = make_topics(cluster)
    admin = topics.connection(Role.ADMIN)
    health = asyncio.run(partition_health(admin))
    assert health.partitions > 0 and not health.under_replicated and not health.offline
    healthy = _status(tmp_path / "state")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "healthy: 3 nodes up" in healthy.stdout

    recorder = Recorder(
        topics.connection(Role.AGENT), topic_prefix=topics.prefix, spool_dir=tmp_path / "spool"
    )
    sessions = [recorder.session("replicated", session_id=f"s-{i:02d}") for i in range(12)]
    for n in range(100):
        for s in sessions:
            s.turn("user", f"turn {n} of {s.session_id}")
    recorder.flush(60)
    broker.kill(2)  # SIGKILL, as a crash: the sessions go on recording
    for n in range(100, 200):
        for s in sessions:
            s.turn("user", f"turn {n} of {s.session_id}")
    for s in sessions:
        s.end("completed")
    closed = recorder.close(120)
    assert closed.acked == closed.sealed and closed.spooled == 0  # acks=all, min ISR 2: taken

    degraded = _status(tmp_path / "state")
    assert degraded.returncode == 1 and "node 2" in degraded.stdout
    assert "1 node(s) down" in degraded.stderr

    reports = {r.session_id: r for r in topics.verify().reports() if r.stream == "events"}
    assert sorted(reports) == sorted(s.session_id for s in sessions)
    for report in reports.values():
        assert report.ok and report.ended, report
        assert report.last_seq == 201  # session_started, 200 turns, session_ended: no gap
        assert report.redelivered == 0  # the idempotent producer's retries wrote nothing twice

    broker.start()  # starts the node that is down
    deadline = time.monotonic() + 90
    while (again := _status(tmp_path / "state")).returncode != 0 and time.monotonic() < deadline:
        time.sleep(2)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "healthy: 3 nodes up" in again.stdout

    # `broker check`: what the guarantees need, each drift named with what to change.
    prefix = {"ROLLTAPE_TOPIC_PREFIX": topics.prefix, "ROLLTAPE_PARTITIONS": "3"}
    checked = _broker(tmp_path / "state", "check", **prefix)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "3 broker(s)" in checked.stdout and "0 problem(s)" in checked.stdout
    events = topic_name(Stream.EVENTS, topics.prefix)

    async def drift() -> None:  # a whole-config alter: every other config back to its default
        async with admin.started(admin.admin(), "drifting") as client:
            resource = ConfigResource(
                ConfigResourceType.TOPIC, events, {"min.insync.replicas": "1"}
            )
            await client.alter_configs([resource])

    asyncio.run(drift())
    drifted = _broker(tmp_path / "state", "check", **prefix)
    assert drifted.returncode == 1, drifted.stdout + drifted.stderr
    assert f"topic {events}: min.insync.replicas = 1" in drifted.stdout
    assert f"topic {events}: message.timestamp.type = CreateTime" in drifted.stdout
    assert "--add-config min.insync.replicas=2" in drifted.stdout
    realigned = _broker(tmp_path / "state", "up", **prefix)
    assert realigned.returncode == 0 and "config updated" in realigned.stdout, realigned.stdout
    assert _broker(tmp_path / "state", "check", **prefix).returncode == 0


def test_broker_check__on_one_broker_warns_that_nothing_is_replicated(topics: Topics) -> None:
    env = {**topics.env(), "COLUMNS": "200"}
    checked = subprocess.run(
        [*CLI, "broker", "check"], env=env, capture_output=True, text=True, timeout=180
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "1 broker(s): a broker's loss loses what only it holds" in checked.stdout
    assert "0 problem(s)" in checked.stdout
