"""A three-node cluster (`broker up --nodes 3`'s, its nodes on three test hosts: network
namespaces on one switch, tests/support/hosts.py), recorded to from a fourth: the active
controller killed while sessions record, then a node cut off from the others and brought back.
After each, every chain holds exactly what its recorder sealed, nothing is lost or duplicated,
and `broker status` shows the cluster healthy again; `broker check` names a drifted config."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from rolltape.infra.broker import ManagedBroker
from rolltape.infra.kafka.topics import partition_health
from rolltape.infra.settings import Settings
from rolltape.producers import Recorder, Session
from rolltape.schemas import Role, Stream, topic_name
from rolltape.schemas.clients import KafkaConnection
from tests.support.hosts import Hosts, can_make_hosts

from .conftest import Cluster, make_topics, managed_cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not can_make_hosts(), reason="test hosts need root and iproute2"),
]
NODES = ("node1", "node2", "node3")
CLI = [sys.executable, "-m", "rolltape.infra"]


@pytest.fixture
def hosted(tmp_path: Path) -> Iterator[tuple[Hosts, ManagedBroker, Cluster]]:
    cfg = Settings()
    with Hosts(NODES) as hosts:
        broker = ManagedBroker(
            tmp_path / "state" / "broker",
            kafka_version=cfg.kafka_version,
            scala_version=cfg.scala_version,
            cache_dir=cfg.cache_dir,
            heap="384m",
            nodes=3,
            hosts={i + 1: hosts.addresses[name] for i, name in enumerate(NODES)},
            launch=lambda node: hosts.command(NODES[node - 1], []),
        )
        broker.start()
        try:
            cluster = managed_cluster(broker, tmp_path / "state")
            settings = cluster.settings.model_copy(update={"replication_factor": 3})
            yield hosts, broker, Cluster(settings, broker)
        finally:
            broker.stop()


def _controller(admin: KafkaConnection) -> int:
    async def ask() -> int:
        async with admin.started(admin.admin(), "describing the cluster") as client:
            described: Any = await client.describe_cluster()
            return int(described["controller_id"])

    return asyncio.run(ask())


def _healthy(admin: KafkaConnection, within_s: float = 90.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            health = asyncio.run(partition_health(admin))
        except Exception:  # a node still coming back: ask again
            health = None
        if health is not None and not health.offline and not health.under_replicated:
            return True
        time.sleep(2)
    return False


def _turns(sessions: list[Session], start: int, stop: int) -> None:
    for n in range(start, stop):
        for s in sessions:
            s.turn("user", f"turn {n} of {s.session_id}")


def test_controller_killed_and_node_cut_off__nothing_lost_duplicated_or_forked(
    hosted: tuple[Hosts, ManagedBroker, Cluster], tmp_path: Path
) -> None:
    hosts, broker, cluster = hosted
    topics = make_topics(cluster)
    admin = topics.connection(Role.ADMIN)
    assert _healthy(admin)
    recorder = Recorder(
        topics.connection(Role.AGENT), topic_prefix=topics.prefix, spool_dir=tmp_path / "spool"
    )
    sessions = [recorder.session("across hosts", session_id=f"h-{i:02d}") for i in range(12)]
    _turns(sessions, 0, 100)
    recorder.flush(60)

    controller = _controller(admin)
    broker.kill(controller)  # SIGKILL of the active controller while the sessions go on
    _turns(sessions, 100, 200)
    recorder.flush(120)
    degraded = _broker(tmp_path / "state", "status")
    assert degraded.returncode == 1 and f"node {controller}" in degraded.stdout
    assert "1 node(s) down; `rolltape broker up` starts them" in degraded.stderr
    broker.start()  # the killed node comes back
    assert _healthy(admin), "not fully replicated again after the controller's restart"

    cut = NODES[(controller % 3)]  # another node this time
    hosts.cut(cut)  # its link down: cut off from the others and from the recorder
    _turns(sessions, 200, 300)
    time.sleep(6)  # past the controller's fencing of it (4 s): its partitions have new leaders
    hosts.heal(cut)
    for s in sessions:
        s.end("completed")
    closed = recorder.close(120)
    assert closed.acked == closed.sealed  # spooled ones too, delivered once the broker took them
    assert _healthy(admin), "not fully replicated again after the node was brought back"

    reports = {r.session_id: r for r in topics.verify().reports() if r.stream == "events"}
    assert sorted(reports) == sorted(s.session_id for s in sessions)
    for report in reports.values():
        assert report.ok and report.ended, report  # no gap, no fork, no bad link
        assert report.last_seq == 301 and report.redelivered == 0
    healthy = _broker(tmp_path / "state", "status")
    assert healthy.returncode == 0 and "healthy: 3 nodes up" in healthy.stdout, healthy.stderr

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


def _broker(state_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`rolltape broker ...` on the managed cluster kept in `state_dir` (from the runner host)."""
    full = {**os.environ, "ROLLTAPE_STATE_DIR": str(state_dir), "COLUMNS": "200", **env}
    full.pop("ROLLTAPE_BOOTSTRAP", None)
    return subprocess.run(
        [*CLI, "broker", *args], env=full, capture_output=True, text=True, timeout=180
    )
