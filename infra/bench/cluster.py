"""`rolltape bench cluster`: what replication costs a recorder. The same sustained recording
(`bench producer`'s: ~1 KB turns over 64 sessions, acks=all, idempotent, from the first record
call until every event is acknowledged) into a managed single node and into a managed three-node
cluster whose topics have replication factor 3 and `min.insync.replicas=2`, in the same run.

Both clusters are started by the benchmark in a temporary folder (SASL/SCRAM, ACLs, as `broker
up` makes them) and stay up together; the repeats alternate which one goes first, so neither
gets the warmer machine. Every node runs on this machine: on a machine of few cores the three
JVMs share them with the recorder, which is the harder case for the cluster, not the easier.
Before measuring, `broker check` runs against each scratch prefix (topic replication, min ISR,
LogAppendTime, unclean election off, ACLs, client settings): the figures are of a cluster set
up as the checks require.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from pydantic import BaseModel

from rolltape.infra.bench._figures import Figures, machine_line
from rolltape.infra.bench._machine import cpu_seconds, machine
from rolltape.infra.bench.producer import sustained_recording
from rolltape.infra.broker import managed_broker, min_insync_for, require_connection
from rolltape.infra.commands.broker_check import check_cluster
from rolltape.infra.kafka.topics import scratch_prefix
from rolltape.infra.settings import Settings
from rolltape.schemas import Role

GOAL_RATIO = 0.5
"""Recording into the replicated cluster against the same recorder into one node."""


class ClusterRun(BaseModel):
    """One cluster's sustained recording, medians over the repeats."""

    nodes: int
    replication_factor: int
    min_insync_replicas: int
    events_per_s: float
    runs_events_per_s: list[float]
    broker_cpu_us_per_event: float
    """CPU time of every node's process (user + system) over a run, per event recorded, all
    nodes together: what a broker spends on an event at this replication (median)."""
    check_problems: list[str]
    """What `broker check` found wrong on the scratch prefix (empty: set up as required)."""


class ClusterBench(Figures):
    """Everything `rolltape bench cluster` prints: one node against three, the same run."""

    machine: str
    events: int
    sessions: int
    senders: int
    partitions: int
    repeats: int
    single: ClusterRun
    replicated: ClusterRun
    ratio: float
    """Median over the repeats of replicated / single events/s, each pair from one repeat."""
    runs_ratio: list[float]
    goal_ratio: float = GOAL_RATIO

    def lines(self) -> Iterator[str]:
        yield machine_line(
            self.machine,
            "every node on this machine",
            f"{self.partitions} partitions",
            f"{self.repeats} repeats, alternating which cluster goes first",
        )
        yield (
            f"{self.events:,} events of ~1 KB over {self.sessions} sessions, {self.senders} sender "
            "process(es), acks=all, idempotent; until every event is acknowledged"
        )
        for run in (self.single, self.replicated):
            runs = " / ".join(f"{v:,.0f}" for v in run.runs_events_per_s)
            yield (
                f"  {run.nodes} node(s), replication factor {run.replication_factor}, min ISR "
                f"{run.min_insync_replicas}: {run.events_per_s:,.0f} events/s ({runs}); brokers' "
                f"CPU {run.broker_cpu_us_per_event:.1f} us an event, all nodes together"
            )
            for problem in run.check_problems:
                yield f"    broker check: {problem}"
        verdict = "met" if self.ratio >= self.goal_ratio else "MISSED"
        yield (
            f"  ratio (three nodes / one): {self.ratio:.2f} (per repeat: "
            f"{' / '.join(f'{v:.2f}' for v in self.runs_ratio)}; goal >= {self.goal_ratio}: "
            f"{verdict})"
        )


@contextmanager
def _managed(home: Path, nodes: int) -> Iterator[tuple[Settings, list[int]]]:
    """A managed cluster of `nodes` in `home`, stopped on exit: settings that reach it with its
    principals (topics replicated as `broker up --nodes` would), and its nodes' pids."""
    broker = managed_broker(Settings(), home=home, heap="512m", nodes=nodes)
    state = broker.start()
    try:
        settings = Settings(
            bootstrap=state.bootstrap,
            principals_file=broker.principals.path,
            state_dir=home,
            replication_factor=min(3, nodes),
        )
        yield settings, [node.pid for node in state.nodes]
    finally:
        broker.stop()


def run_cluster_bench(
    *,
    events: int = 100_000,
    sessions: int = 64,
    senders: int = 1,
    partitions: int = 6,
    repeats: int = 3,
) -> ClusterBench:
    """Start both clusters, provision a scratch prefix on each, alternate the sustained runs."""
    with tempfile.TemporaryDirectory(prefix="rolltape-bench-cluster-") as tmp, ExitStack() as stack:
        home = Path(tmp)
        scratches: dict[int, Settings] = {}
        pids: dict[int, list[int]] = {}
        problems: dict[int, list[str]] = {}
        for nodes in (1, 3):
            cluster, pids[nodes] = stack.enter_context(_managed(home / f"nodes-{nodes}", nodes))
            scratch = stack.enter_context(
                scratch_prefix(cluster, "benchcluster", partitions=partitions)
            )
            scratches[nodes] = scratch
            problems[nodes] = [f"{f.subject}: {f.found}" for f in check_cluster(scratch).problems]
        rates: dict[int, list[float]] = {1: [], 3: []}
        cpu: dict[int, list[float]] = {1: [], 3: []}
        for repeat in range(repeats):
            order = (1, 3) if repeat % 2 == 0 else (3, 1)
            for nodes in order:
                scratch = scratches[nodes]
                spool = home / f"spool-{nodes}-{repeat}"
                cpu_before = cpu_seconds(pids[nodes])
                _, acked_s = sustained_recording(
                    require_connection(scratch, Role.AGENT),
                    scratch.topic_prefix,
                    spool,
                    events,
                    sessions,
                    senders=senders,
                )
                rates[nodes].append(events / acked_s)
                cpu[nodes].append((cpu_seconds(pids[nodes]) - cpu_before) / events * 1e6)

    def run(nodes: int) -> ClusterRun:
        replicas = min(3, nodes)
        return ClusterRun(
            nodes=nodes,
            replication_factor=replicas,
            min_insync_replicas=min_insync_for(replicas),
            events_per_s=statistics.median(rates[nodes]),
            runs_events_per_s=rates[nodes],
            broker_cpu_us_per_event=statistics.median(cpu[nodes]),
            check_problems=problems[nodes],
        )

    runs_ratio = [three / one for one, three in zip(rates[1], rates[3], strict=True)]
    return ClusterBench(
        machine=machine(),
        events=events,
        sessions=sessions,
        senders=senders,
        partitions=partitions,
        repeats=repeats,
        single=run(1),
        replicated=run(3),
        ratio=statistics.median(runs_ratio),
        runs_ratio=runs_ratio,
    )
