"""Faults at scale: record from several processes while brokers and workers are SIGKILLed, then
check that nothing was lost, doubled, forked or left unjudged.

    .venv/bin/python scripts/faults_at_scale.py                      # 100,000 events, 4 processes
    .venv/bin/python scripts/faults_at_scale.py --events 6000 --processes 3 --seconds 50
    .venv/bin/python scripts/faults_at_scale.py --scenario worker-kills --rounds 20 \\
        --events 9000 --processes 3 --seconds 30
    .venv/bin/python scripts/faults_at_scale.py --scenario cluster   # as root

It starts its own managed broker (SASL, principals, ACLs, the judge's key) in a temporary folder,
the workers, and N recording processes. Each records agent sessions (as the agent principal) and
training sessions (events as the agent, metrics as the monitor) at a steady pace for --seconds.
Meanwhile, by scenario:

- broker-and-worker (one worker), one after the other: broker SIGKILL (down --downtime s, then
  restarted), worker SIGKILL (restarted once its group has dropped the dead member, as a
  supervisor would after the session timeout), broker again, worker again;
- worker-kills (--workers in one group): one worker SIGKILLed and started again at once, as a
  supervisor restarts it, while the group still counts the dead one; the new one SIGKILLed and
  started again too, its predecessor still a member; another worker SIGKILLed and started again
  only after the group dropped the dead (the others take its partitions over meanwhile); a third
  SIGKILLed and started again at once;
- cluster (three nodes, each on a test host: network namespaces on one switch, made with the
  tests' harness, so root and iproute2): the active controller SIGKILLed and started again, the
  worker SIGKILLed and started again at once, another node SIGKILLed and started again, the
  third cut off from the others and brought back; the cluster must be healthy again at the end.

--rounds runs the scenario that many times on the same broker, each round on topics of its own.
When the recorders are done and the workers have caught up, it checks:

- every event present once: each chain holds exactly the events its recorder sealed, seq 0..n-1;
- every chain intact: no break on any raw or output chain (rules, verdicts, filtered, checkpoint
  logs), nothing set aside, no fork, no `chain_broken` output, no dead letter;
- every output present: one filter outcome per agent session, one verdict and one rule
  evaluation per epoch per training session, every session's raw chain heads in a signed
  checkpoint whose log verifies with the judge's public key;

and prints the figures. Exit 0 when every check holds, 1 otherwise (each failure named).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import orjson

from rolltape.infra import Settings, open_monitor_recorder, open_recorder
from rolltape.infra.bench._synthetic import end_synthetic_metrics, synthetic_metric
from rolltape.infra.broker import ManagedBroker, managed_broker, require_connection
from rolltape.infra.commands.worker_process import worker_members
from rolltape.infra.kafka.readback import RawRecord, read_records
from rolltape.infra.kafka.topics import active_controller, provision, until_healthy
from rolltape.infra.keys import judge_key
from rolltape.schemas import ChainVerifier, Checkpoint, Role, Stream, decode
from rolltape.schemas.trust import LogTree

PREFIX = "faults"
EPOCHS = 5
ALL_STREAMS = (
    Stream.EVENTS,
    Stream.METRICS,
    Stream.RULES,
    Stream.VERDICTS,
    Stream.FILTERED,
    Stream.DEADLETTER,
)


# -- a recording process --------------------------------------------------------------------------
def record(index: int, events: int, seconds: float, out: Path) -> None:
    """Record about `events` events over `seconds`, alternating agent and training sessions."""
    settings = Settings()
    agent = open_recorder(settings, spool_dir=settings.state_dir / f"spool-{index}")
    monitor = open_monitor_recorder(settings, spool_dir=settings.state_dir / f"spool-m{index}")
    sessions: dict[str, dict[str, Any]] = {}
    pace = events / seconds
    started = time.monotonic()
    done = 0
    n = 0
    while done < events:
        sid = f"p{index}-s{n}"
        if n % 2 == 0:
            turns = 8
            with agent.session(
                "add", session_id=sid, tools=[{"name": "calc", "parameters": {"type": "object"}}]
            ) as s:
                for t in range(turns):
                    s.turn("user", f"{t}+{t}?")
                    s.turn("assistant", str(2 * t), reasoning="adding")
            sessions[sid] = {"kind": "agent", "events": 2 + 2 * turns}
            done += 2 + 2 * turns
        else:
            with agent.session("fit", session_id=sid, kind="training") as s:
                for epoch in range(EPOCHS):
                    synthetic_metric(monitor, s, epoch, steps=10, train_loss=1.0 / (epoch + 1),
                                     max_layer_grad_norm=1.0, min_layer_grad_norm=1e-3,
                                     val_acc=0.5 + epoch / 20, lr=0.01)  # fmt: skip
                end_synthetic_metrics(monitor, s)
            sessions[sid] = {"kind": "training", "events": 2, "metrics": EPOCHS + 1}
            done += 2 + EPOCHS + 1
        n += 1
        ahead = done / pace - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)
    results = [rec.close(300) for rec in (monitor, agent)]
    out.write_bytes(
        orjson.dumps(
            {
                "sessions": sessions,
                "sealed": sum(r.sealed for r in results),
                "spooled": sum(r.spooled for r in results),
                "seconds": time.monotonic() - started,
            }
        )
    )


# -- the run ------------------------------------------------------------------------------------
class Worker:
    """One `rolltape serve worker` process, started again as a supervisor would."""

    def __init__(self, env: dict[str, str], home: Path) -> None:
        self.env, self.home, self.starts = env, home, 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.starts += 1
        log = open(self.home / f"worker-{self.starts}.log", "wb")  # noqa: SIM115 (the child keeps it)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rolltape.infra", "serve", "worker", "--log-level", "info"],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def read_all(settings: Settings) -> list[RawRecord]:
    async def go() -> list[RawRecord]:
        reader = require_connection(settings, Role.READER)
        prefix = settings.topic_prefix
        return [r async for r in read_records(reader, ALL_STREAMS, prefix=prefix)]

    return asyncio.run(go())


class Outputs:
    """What the worker wrote, by session (distinct event ids)."""

    def __init__(self, records: list[RawRecord]) -> None:
        self.by_type: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        self.committed: set[tuple[str, str, str]] = set()
        self.dead_letters = 0
        self.broken: list[str] = []
        """What each `chain_broken` output says (where a failure is looked into)."""
        self.logs: dict[str, dict[int, Checkpoint]] = defaultdict(dict)
        for r in records:
            if r.stream == Stream.DEADLETTER:
                self.dead_letters += 1
                continue
            if r.stream in (Stream.EVENTS, Stream.METRICS):
                continue
            env = decode(r.value)
            self.by_type[env["type"]][env["session_id"]].add(env["event_id"])
            if env["type"] == "chain_broken":
                self.broken.append(f"{env['session_id']}: {env['payload']}")
            if env["type"] == "checkpoint":
                checkpoint = Checkpoint.model_validate(env["payload"])
                self.logs[env["session_id"]].setdefault(env["seq"], checkpoint)
                for leaf in checkpoint.leaves:
                    self.committed.add((leaf.stream, leaf.session_id, leaf.hash))

    def complete(
        self, sessions: dict[str, dict[str, Any]], heads: dict[tuple[str, str], str]
    ) -> bool:
        filtered = self.by_type["filter_outcome"]
        verdicts = self.by_type["verdict"]
        for sid, info in sessions.items():
            done = verdicts.get(sid) if info["kind"] == "training" else filtered.get(sid)
            if not done:
                return False
        return all((stream, sid, h) in self.committed for (stream, sid), h in heads.items())


class Run:
    """One managed broker, topics under a prefix, recorders and workers (logs under `home`)."""

    def __init__(self, args: argparse.Namespace, home: Path, settings: Settings) -> None:
        self.args, self.home, self.settings = args, home, settings
        self.env = {**os.environ, **settings.child_env(), "ROLLTAPE_CHECKPOINT_INTERVAL_S": "5"}
        self.faults: list[str] = []
        self.rec_start = time.monotonic()
        self.workers: list[Worker] = []
        """The workers started (a worker that exits on its own fails the run at once)."""

    def at(self, fraction: float) -> None:
        wait = self.rec_start + fraction * self.args.seconds - time.monotonic()
        if wait > 0:
            time.sleep(wait)

    def note(self, what: str) -> None:
        self.faults.append(f"{time.monotonic() - self.rec_start:6.1f}s  {what}")
        print(self.faults[-1], flush=True)

    def members(self, count: int, what: str) -> None:
        """Until the worker group has `count` members (working, not only alive)."""
        deadline = time.monotonic() + 120
        while worker_members(self.settings) != count and time.monotonic() < deadline:
            time.sleep(0.5)
        self.note(what)

    def record(self) -> list[subprocess.Popen[bytes]]:
        per = self.args.events // self.args.processes
        recorders = [
            subprocess.Popen(
                [
                    *(sys.executable, __file__, "record", "--index", str(i)),
                    *("--events", str(per), "--seconds", str(self.args.seconds)),
                    *("--out", str(self.home / f"recorder-{i}.json")),
                ],
                env=self.env,
            )
            for i in range(self.args.processes)
        ]
        self.rec_start = time.monotonic()
        return recorders

    def outcome(self, recorders: list[subprocess.Popen[bytes]], key: Any) -> int:
        """Wait for the recorders and for the worker to catch up; check; print the figures."""
        args, home, settings = self.args, self.home, self.settings
        codes = [p.wait() for p in recorders]
        rec_end = time.monotonic()
        self.note("recorders done")
        if any(codes):
            print(f"FAILED: recorder exit codes {codes}")
            return 1
        manifests = [
            orjson.loads((home / f"recorder-{i}.json").read_bytes()) for i in range(args.processes)
        ]
        sessions = {sid: info for m in manifests for sid, info in m["sessions"].items()}
        expected = {
            (stream, sid): info[stream]
            for sid, info in sessions.items()
            for stream in ("events", "metrics")
            if stream in info
        }
        # Wait until the worker has judged every session and committed every raw head.
        deadline = time.monotonic() + args.catch_up
        while True:
            records = read_all(settings)
            verifier = ChainVerifier()
            for r in records:
                if r.stream != Stream.DEADLETTER:
                    verifier.add(r.value, key=r.key, expected_stream=r.stream.value)
            reports = {(rep.stream, rep.session_id): rep for rep in verifier.reports()}
            heads = {chain: reports[chain].head_hash for chain in expected if chain in reports}
            outputs = Outputs(records)
            if outputs.complete(sessions, heads) and len(heads) == len(expected):
                break
            if time.monotonic() > deadline:
                print(f"the worker did not catch up within {args.catch_up}s")
                break
            exited = [w for w in self.workers if w.proc is not None and w.proc.poll() is not None]
            if exited:
                print(f"FAILED: a worker exited on its own (see {exited[0].home}/worker-*.log)")
                return 1
            time.sleep(3)
        caught_up = time.monotonic()
        failures = check(expected, sessions, reports, verifier, outputs, key)
        raw = sum(expected.values())
        recorded_s = max(m["seconds"] for m in manifests)
        print()
        print(f"events recorded        {raw:,} in {len(sessions):,} sessions by "
              f"{args.processes} processes over {recorded_s:.0f}s "
              f"({raw / recorded_s:,.0f} events/s)")  # fmt: skip
        print(f"spooled during outages {sum(m['spooled'] for m in manifests):,} records")
        copies = sum(rep.redelivered for rep in reports.values())
        print(f"records in the topics  {len(records):,} ({copies:,} redelivered copies dropped)")
        print(f"outputs                {sum(len(v) for v in outputs.by_type['filter_outcome'].values()):,} "
              f"filter outcomes, {sum(len(v) for v in outputs.by_type['verdict'].values()):,} verdicts, "
              f"{sum(len(v) for v in outputs.by_type['rule_evaluation'].values()):,} rule evaluations, "
              f"{sum(len(v) for v in outputs.by_type['checkpoint'].values()):,} checkpoints "
              f"in {len(outputs.logs)} logs")  # fmt: skip
        print(f"worker caught up       {caught_up - rec_end:.1f}s after the last recorder ended")
        print("faults:")
        for line in self.faults:
            print(f"  {line}")
        if failures:
            print(f"\nFAILED ({len(failures)}):")
            for failure in failures[:50]:
                print(f"  {failure}")
            return 1
        print("\nOK: every event once, every chain intact, every output present, no fork")
        return 0


def broker_and_worker(run: Run, broker: ManagedBroker, key: Any) -> int:
    """The broker SIGKILLed twice and the worker twice, one after the other."""
    worker = Worker(run.env, run.home)
    run.workers.append(worker)
    worker.start()
    recorders = run.record()
    try:
        run.members(1, "worker is a group member")
        for round_, fraction in enumerate((0.1, 0.5)):
            run.at(fraction)
            broker.kill()
            run.note(f"broker SIGKILLed ({round_ + 1}/2)")
            time.sleep(run.args.downtime)
            broker.start()
            run.note("broker restarted")
            run.members(1, "worker is a group member")
            run.at(fraction + 0.2)
            worker.kill()
            run.note(f"worker SIGKILLed ({round_ + 1}/2)")
            run.members(0, "the group dropped it")  # its session timed out
            worker.start()
            run.note("worker restarted")
            run.members(1, "worker is a group member")
        return run.outcome(recorders, key)
    finally:
        for p in recorders:
            if p.poll() is None:
                p.kill()
        worker.stop()


def worker_kills(run: Run, key: Any) -> int:
    """`--workers` workers in one group, SIGKILLed in turn while the recorders run (see the
    module's docstring)."""
    count = run.args.workers
    workers = [Worker(run.env, run.home / f"w{i}") for i in range(count)]
    run.workers.extend(workers)
    for w in workers:
        w.home.mkdir(exist_ok=True)
        w.start()
    recorders: list[subprocess.Popen[bytes]] = []

    def again_at_once(worker: Worker, what: str) -> None:
        worker.kill()
        worker.start()
        run.note(f"{what}: SIGKILLed and started again at once")

    try:
        run.members(count, f"{count} workers are group members")
        recorders = run.record()
        first, second, third = (workers[i % count] for i in range(3))
        run.at(0.15)
        again_at_once(first, "worker 1")
        run.at(0.3)  # the group still counts the first one's predecessor (session timeout)
        again_at_once(first, "worker 1 again, its predecessor still a member")
        run.at(0.45)
        second.kill()
        run.note("worker 2: SIGKILLed")
        run.members(count - 1, f"the group dropped the dead; {count - 1} share the partitions")
        second.start()
        run.note("worker 2 started again")
        run.at(0.8)
        again_at_once(third, "worker 3")
        return run.outcome(recorders, key)
    finally:
        for p in recorders:
            if p.poll() is None:
                p.kill()
        for w in workers:
            w.stop()


def cluster_faults(run: Run, broker: ManagedBroker, hosts: Any, key: Any) -> int:
    """Three nodes on test hosts: the active controller SIGKILLed, then another node, then the
    third cut off from the others (its link down) and brought back; the worker SIGKILLed and
    started again at once meanwhile. The cluster must be healthy again at the end."""
    admin = require_connection(run.settings, Role.ADMIN)
    worker = Worker(run.env, run.home)
    run.workers.append(worker)
    worker.start()
    recorders: list[subprocess.Popen[bytes]] = []
    try:
        run.members(1, "worker is a group member")
        recorders = run.record()
        run.at(0.15)
        controller = asyncio.run(active_controller(admin))
        broker.kill(controller)
        run.note(f"node {controller} (the active controller) SIGKILLed")
        time.sleep(run.args.downtime)
        broker.start()
        run.note(f"node {controller} started again")
        run.at(0.3)
        worker.kill()
        worker.start()
        run.note("worker SIGKILLed and started again at once")
        run.at(0.45)
        other = controller % 3 + 1
        broker.kill(other)
        run.note(f"node {other} SIGKILLed")
        time.sleep(run.args.downtime)
        broker.start()
        run.note(f"node {other} started again")
        run.at(0.7)
        third = ({1, 2, 3} - {controller, other}).pop()
        hosts.cut(f"node{third}")
        run.note(f"node {third} cut off from the others")
        time.sleep(max(run.args.downtime, 6.0))  # past the controller's fencing of it (4 s)
        hosts.heal(f"node{third}")
        run.note(f"node {third} brought back")
        code = run.outcome(recorders, key)
        healthy = until_healthy(admin)
        print(f"cluster healthy again  {'yes' if healthy else 'NO'}")
        return code or (0 if healthy else 1)
    finally:
        for p in recorders:
            if p.poll() is None:
                p.kill()
        worker.stop()


def _cluster(home: Path, stack: ExitStack) -> tuple[ManagedBroker, Any]:
    """Three nodes, each on a test host of its own (network namespaces on one switch, made by
    the tests' harness: root and iproute2), this script on the runner host."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.hosts import Hosts, can_make_hosts

    if not can_make_hosts():
        raise SystemExit("--scenario cluster needs root and iproute2 (test hosts)")
    names = ("node1", "node2", "node3")
    hosts = stack.enter_context(Hosts(names))
    broker = managed_broker(
        Settings(),
        home=home / "broker",
        heap="512m",
        nodes=3,
        hosts={i + 1: hosts.addresses[name] for i, name in enumerate(names)},
        launch=lambda node: hosts.command(names[node - 1], []),
    )
    return broker, hosts


def run(args: argparse.Namespace) -> int:
    home = Path(tempfile.mkdtemp(prefix="rolltape-faults-", dir=args.state_dir))
    stack = ExitStack()
    hosts = None
    if args.scenario == "cluster":
        broker, hosts = _cluster(home, stack)
    else:
        broker = managed_broker(Settings(), home=home / "broker", heap="512m", nodes=1)
    state = broker.start()
    base = Settings(
        bootstrap=state.bootstrap,
        principals_file=broker.principals.path,
        state_dir=home,
        partitions=6,
        replication_factor=min(3, len(state.nodes)),
    )
    key = judge_key(base)
    key.create()
    base = base.model_copy(update={"judge_key_file": key.path})  # one key for every round
    failed: list[int] = []
    try:
        for round_ in range(args.rounds):
            t0 = time.monotonic()
            round_home = home / f"round-{round_ + 1}"
            round_home.mkdir()
            prefix = f"{PREFIX}{round_ + 1}" if args.rounds > 1 else PREFIX
            settings = base.model_copy(update={"topic_prefix": prefix, "state_dir": round_home})
            provision(settings)
            if args.rounds > 1:
                print(f"== round {round_ + 1} of {args.rounds} ({args.scenario})", flush=True)
            this = Run(args, round_home, settings)
            if args.scenario == "worker-kills":
                code = worker_kills(this, key)
            elif args.scenario == "cluster":
                code = cluster_faults(this, broker, hosts, key)
            else:
                code = broker_and_worker(this, broker, key)
            print(f"round took {time.monotonic() - t0:.0f}s", flush=True)
            if code:
                failed.append(round_ + 1)
    finally:
        broker.stop()
        stack.close()
        if args.keep or failed:
            print(f"logs and broker data kept in {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)
    if args.rounds > 1:
        verdict = f"FAILED rounds {failed}" if failed else "OK"
        print(f"\n{verdict}: {args.rounds - len(failed)} of {args.rounds} rounds held")
    return 1 if failed else 0


def check(
    expected: dict[tuple[str, str], int],
    sessions: dict[str, dict[str, Any]],
    reports: dict[tuple[str, str], Any],
    verifier: ChainVerifier,
    outputs: Outputs,
    key: Any,
) -> list[str]:
    failures: list[str] = []
    for chain, count in sorted(expected.items()):
        report = reports.get(chain)
        if report is None:
            failures.append(f"{chain}: no record at all")
        elif report.last_seq + 1 != count or not report.ok:
            failures.append(
                f"{chain}: {report.last_seq + 1} of {count} events, breaks {report.break_counts}"
            )
    for (stream, sid), report in sorted(reports.items()):
        if not report.ok or report.set_aside:
            failures.append(f"{stream}/{sid}: {report.break_counts}, {report.set_aside} set aside")
    if verifier.unattributed:
        failures.append(f"{len(verifier.unattributed)} records belong to no chain")
    if outputs.broken:
        failures.append(
            f"{len(outputs.broken)} chain_broken outputs, the first: {outputs.broken[0]}"
        )
    if outputs.dead_letters:
        failures.append(f"{outputs.dead_letters} dead letters")
    for sid, info in sorted(sessions.items()):
        if info["kind"] == "agent":
            got = len(outputs.by_type["filter_outcome"].get(sid, ()))
            if got != 1:
                failures.append(f"{sid}: {got} filter outcomes")
        else:
            verdicts = len(outputs.by_type["verdict"].get(sid, ()))
            rules = len(outputs.by_type["rule_evaluation"].get(sid, ()))
            if verdicts != 1 or rules != EPOCHS:
                failures.append(f"{sid}: {verdicts} verdicts, {rules} rule evaluations")
    public = key.private_key().public_key()
    for log, checkpoints in sorted(outputs.logs.items()):
        tree = LogTree(log, public)
        for seq in sorted(checkpoints):
            problems = tree.add(checkpoints[seq])
            if problems:
                failures.append(f"{log}: {problems[0]}")
                break
    for stream, sid in sorted(expected):
        report = reports.get((stream, sid))
        if report is not None and (stream, sid, report.head_hash) not in outputs.committed:
            failures.append(f"{stream}/{sid}: its head is in no checkpoint")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    rec = sub.add_parser("record", help="(internal) one recording process")
    rec.add_argument("--index", type=int, required=True)
    rec.add_argument("--events", type=int, required=True)
    rec.add_argument("--seconds", type=float, required=True)
    rec.add_argument("--out", type=Path, required=True)
    parser.add_argument("--events", type=int, default=100_000, help="events in all")
    parser.add_argument("--processes", type=int, default=4, help="recording processes")
    parser.add_argument("--seconds", type=float, default=120.0, help="how long they record")
    parser.add_argument("--downtime", type=float, default=5.0, help="broker down per kill (s)")
    parser.add_argument("--catch-up", type=float, default=600.0, help="max wait for the worker")
    parser.add_argument("--state-dir", type=Path, default=None, help="where the temp folder goes")
    parser.add_argument("--keep", action="store_true", help="keep the folder (logs) afterwards")
    parser.add_argument(
        "--scenario",
        choices=("broker-and-worker", "worker-kills", "cluster"),
        default="broker-and-worker",
        help="what is killed (see the module's docstring)",
    )
    parser.add_argument("--workers", type=int, default=3, help="workers in worker-kills")
    parser.add_argument("--rounds", type=int, default=1, help="times to run the scenario")
    args = parser.parse_args()
    # SIGTERM (a timeout, a CI job cancelled) unwinds like Ctrl-C: the brokers, workers and
    # test hosts this run made are stopped and removed on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.command == "record":
        record(args.index, args.events, args.seconds, args.out)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
