"""A three-node cluster (`broker up --nodes 3`'s, its nodes on three test hosts: network
namespaces on one switch, tests/support/hosts.py), recorded to from a fourth: the active
controller killed while sessions record, then a node cut off from the others and brought back.
After each, every chain holds exactly what its recorder sealed, nothing is lost or duplicated,
and `broker status` shows the cluster healthy again; `broker check` names a drifted config.
Workers on three more hosts share the partitions; they are killed one by one and the others
take their partitions over."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from rolltape.infra.broker import ManagedBroker, managed_broker
from rolltape.infra.commands.broker import broker_status, broker_up
from rolltape.infra.commands.broker_check import check_cluster
from rolltape.infra.kafka.topics import active_controller, until_healthy
from rolltape.infra.settings import Settings
from rolltape.producers import Recorder, Session
from rolltape.schemas import Role, Stream, read_event, topic_name
from rolltape.schemas.clients import KafkaClientError, KafkaConnection
from tests.support.hosts import Hosts, can_make_hosts
from tests.support.waiting import wait_until

from .conftest import Cluster, make_topics, managed_cluster
from .workers import RawRecord, WorkerProcess, chain_reports, payloads, read_all, wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not can_make_hosts(), reason="test hosts need root and iproute2"),
    # One test process runs the module: its cluster is started once, for all of its tests.
    pytest.mark.xdist_group("hosts"),
]
NODES = ("node1", "node2", "node3")
WORKERS = ("worker1", "worker2", "worker3")
CLI = [sys.executable, "-m", "rolltape.infra"]


@pytest.fixture(scope="module")
def hosted(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Hosts, ManagedBroker, Cluster]]:
    """One cluster for the module's tests (each on a prefix of its own): its start is the
    slowest part of each."""
    state = tmp_path_factory.mktemp("hosted") / "state"
    with Hosts((*NODES, *WORKERS)) as hosts:
        broker = managed_broker(
            Settings(),
            home=state / "broker",
            heap="384m",
            nodes=3,
            hosts={i + 1: hosts.addresses[name] for i, name in enumerate(NODES)},
            launch=lambda node: hosts.command(NODES[node - 1], []),
        )
        broker.start()
        try:
            cluster = managed_cluster(broker, state)
            settings = cluster.settings.model_copy(update={"replication_factor": 3})
            yield hosts, broker, Cluster(settings, broker)
        finally:
            broker.stop()


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
    assert until_healthy(admin)
    recorder = Recorder(
        topics.connection(Role.AGENT), topic_prefix=topics.prefix, spool_dir=tmp_path / "spool"
    )
    sessions = [recorder.session("across hosts", session_id=f"h-{i:02d}") for i in range(12)]
    _turns(sessions, 0, 100)
    recorder.flush(60)

    controller = asyncio.run(active_controller(admin))
    broker.kill(controller)  # SIGKILL of the active controller while the sessions go on
    _turns(sessions, 100, 200)
    recorder.flush(120)
    degraded = _broker(broker.home.parent, "status")
    assert degraded.returncode == 1 and f"node {controller}" in degraded.stdout
    assert "1 node(s) down; `rolltape broker up` starts them" in degraded.stderr
    broker.start()  # the killed node comes back
    assert until_healthy(admin), "not fully replicated again after the controller's restart"

    cut_id = controller % 3 + 1  # another node this time
    cut = NODES[cut_id - 1]
    hosts.cut(cut)  # its link down: cut off from the others and from the recorder
    _turns(sessions, 200, 300)
    # Until the controller fenced it (4 s without its heartbeat): its partitions have new
    # leaders and it is in no partition's in-sync replicas, as the other nodes say.
    others = ",".join(
        address
        for address in admin.bootstrap.split(",")
        if not address.startswith(f"{hosts.addresses[cut]}:")
    )
    reachable = admin.model_copy(update={"bootstrap": others})
    wait_until(
        lambda: asyncio.run(_held_by(reachable, topics.prefix, cut_id)),
        lambda held: not held,
        what=f"node {cut_id} ({cut}), cut off, to be fenced out of the partitions",
        every_s=0.5,
        ignoring=(KafkaClientError,),
    )
    hosts.heal(cut)
    for s in sessions:
        s.end("completed")
    closed = recorder.close(120)
    assert closed.acked == closed.sealed  # spooled ones too, delivered once the broker took them
    assert until_healthy(admin), "not fully replicated again after the node was brought back"

    reports = {r.session_id: r for r in topics.verify().reports() if r.stream == "events"}
    assert sorted(reports) == sorted(s.session_id for s in sessions)
    for report in reports.values():
        assert report.ok and report.ended, report  # no gap, no fork, no bad link
        assert report.last_seq == 301 and report.redelivered == 0
    managed = Settings(
        state_dir=broker.home.parent, bootstrap=None, topic_prefix=topics.prefix, partitions=3
    )
    wait_until(  # each node's metadata catches up on its own time
        lambda: broker_status(managed).problem,
        lambda problem: problem is None,
        what="`broker status` to find no problem",
        every_s=1.0,
    )
    healthy = _broker(broker.home.parent, "status")
    assert healthy.returncode == 0 and "healthy: 3 nodes up" in healthy.stdout, healthy.stderr

    # `broker check`: what the guarantees need, each drift named with what to change.
    checked = check_cluster(managed)
    assert checked.brokers == 3 and not checked.problems and not checked.warnings
    events = topic_name(Stream.EVENTS, topics.prefix)

    async def drift() -> None:  # a whole-config alter: every other config back to its default
        async with admin.started(admin.admin(), "drifting") as client:
            resource = ConfigResource(
                ConfigResourceType.TOPIC, events, {"min.insync.replicas": "1"}
            )
            await client.alter_configs([resource])

    asyncio.run(drift())
    prefix = {"ROLLTAPE_TOPIC_PREFIX": topics.prefix, "ROLLTAPE_PARTITIONS": "3"}
    drifted = _broker(broker.home.parent, "check", **prefix)
    assert drifted.returncode == 1, drifted.stdout + drifted.stderr
    assert f"topic {events}: min.insync.replicas = 1" in drifted.stdout
    assert f"topic {events}: message.timestamp.type = CreateTime" in drifted.stdout
    assert "--add-config min.insync.replicas=2" in drifted.stdout
    realigned = broker_up(managed, as_admin=True)
    assert any(t.action.value == "config updated" for t in realigned.topics or ())
    wait_until(  # the new configs reach every node's metadata in turn
        lambda: check_cluster(managed).problems,
        lambda problems: not problems,
        what="`broker check` to find no problem after `broker up` realigned the configs",
        every_s=1.0,
    )


async def _held_by(admin: KafkaConnection, prefix: str, node: int) -> list[str]:
    """The partitions of `prefix`'s topics that `node` leads or is in sync for, as the nodes
    the runner host reaches describe them. A request to a node that does not answer (the cut
    one, while the others still list it) fails after a few seconds: the wait asks again."""
    quick = admin.admin(request_timeout_ms=5000)
    async with admin.started(quick, f"describing the topics on {admin}") as client:
        described = await client.describe_topics()
    return [
        f"{topic['topic']}/{part['partition']}"
        for topic in described
        if topic["topic"].startswith(f"{prefix}.")
        for part in topic["partitions"]
        if part["leader"] == node or node in part["isr"]
    ]


def _broker(state_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`rolltape broker ...` on the managed cluster kept in `state_dir` (from the runner host)."""
    full = {**os.environ, "ROLLTAPE_STATE_DIR": str(state_dir), "COLUMNS": "200", **env}
    full.pop("ROLLTAPE_BOOTSTRAP", None)
    return subprocess.run(
        [*CLI, "broker", *args], env=full, capture_output=True, text=True, timeout=180
    )


def test_workers_on_three_hosts__killed_one_by_one__the_others_take_their_partitions(
    hosted: tuple[Hosts, ManagedBroker, Cluster], tmp_path: Path
) -> None:
    hosts, _, cluster = hosted
    topics = make_topics(cluster)
    for name in WORKERS:
        (tmp_path / name).mkdir()
    workers = [
        WorkerProcess(topics, tmp_path / name, on=hosts.command(name, [])).start()
        for name in WORKERS
    ]
    recorder = Recorder(
        topics.connection(Role.AGENT), topic_prefix=topics.prefix, spool_dir=tmp_path / "spool"
    )

    def record(first: int, count: int) -> None:
        for i in range(first, first + count):
            with recorder.session("2+2", session_id=f"w-{i:03d}") as s:
                s.turn("user", "2+2?")
                s.turn("assistant", "4")
        recorder.flush(60)

    def judged(records: list[RawRecord]) -> int:
        return len(_outcomes(records))

    try:
        record(0, 30)
        wait_for(topics, lambda rs: judged(rs) == 30, worker=workers[2], timeout_s=180)
        workers[0].kill()  # SIGKILL of the first worker's host process; two run on
        record(30, 30)
        wait_for(topics, lambda rs: judged(rs) == 60, worker=workers[2], timeout_s=180)
        workers[1].kill()  # and of the second: the third takes every partition
        record(60, 30)
        outputs = wait_for(topics, lambda rs: judged(rs) == 90, worker=workers[2], timeout_s=180)
    finally:
        for worker in workers:
            if worker.alive():
                worker.stop()
    recorder.close(60)
    assert payloads(outputs, "chain_broken") == []
    outcomes = _outcomes(outputs)
    assert sorted(outcomes) == [f"w-{i:03d}" for i in range(90)]
    assert all(p["accepted"] for p in outcomes.values())
    everything = read_all(topics, (Stream.EVENTS, Stream.FILTERED))
    assert all(report.ok for report in chain_reports(everything))


def _outcomes(records: list[RawRecord]) -> dict[str, dict[str, Any]]:
    """Each session's filter outcome (its first copy: a resent one is the same bytes)."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        env = read_event(r.value)
        if env.type == "filter_outcome":
            out.setdefault(env.session_id, dict(env.payload))
    return out
