"""Apache Kafka (KRaft) run from Maven jars under rolltape's control: one node, or a cluster of
several on this machine (`broker up --nodes 3`: each node a combined broker and controller, the
three a controller quorum, replicating every topic three ways with min ISR 2).

Invariant: the cluster's whole state lives under one folder (`state_dir/broker`): node 1's
server.properties, data and logs at its top, node N's under `node-N/`, `broker.json` (pids,
ports, version) and `principals.json` (the SASL secrets, 0600). A restart reuses the folders and
the ports, so clients reconnect to the same addresses and find their data; `start` starts the
nodes that are down (one killed by a test, or all after `down`).

Security: clients connect over SASL_PLAINTEXT with SCRAM-SHA-512; every principal's credentials
are written into the metadata log when the storage is formatted (KRaft reads SCRAM credentials from
there, so they exist before the first client connects). The standard KRaft authorizer denies what
no ACL allows; `admin` is the super user and the identity the broker uses to talk to itself (SCRAM
on the client listener, PLAIN on the controller listener: KRaft's controller cannot use SCRAM,
whose credentials live in the log it serves). A state folder formatted before SASL existed keeps
running PLAINTEXT until it is recreated, with a warning on every start.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from rolltape.infra.broker._errors import BrokerStartError
from rolltape.infra.broker._maven import kafka_classpath, kafka_jars_cached, uses_log4j2
from rolltape.infra.broker._principals import PrincipalError, PrincipalStore
from rolltape.infra.broker._ready import broker_answers_sync, cluster_brokers_sync
from rolltape.infra.broker._tools import CONFIGS, run_kafka_tool
from rolltape.schemas import Role
from rolltape.schemas.clients import KafkaConnection

SCRAM = "SCRAM-SHA-512"


class NodeState(BaseModel):
    """One node of the cluster: its id, process, host address and ports."""

    node_id: int
    pid: int
    port: int
    controller_port: int
    host: str = "127.0.0.1"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class BrokerState(BaseModel):
    """Contents of broker.json: node 1's process and ports at the top (the form a single-node
    broker has always written), the other nodes' in `peers`."""

    pid: int
    port: int
    controller_port: int
    kafka_version: str
    cluster_id: str
    secure: bool = False
    """SASL/SCRAM with ACLs; False only for state formatted before rolltape provisioned them."""
    peers: list[NodeState] = []
    """Nodes 2..N of a cluster (none for a single node)."""
    host: str = "127.0.0.1"
    """Node 1's address."""

    @property
    def nodes(self) -> list[NodeState]:
        first = NodeState(
            node_id=1,
            pid=self.pid,
            port=self.port,
            controller_port=self.controller_port,
            host=self.host,
        )
        return [first, *self.peers]

    @property
    def bootstrap(self) -> str:
        """Every node's address: a client finds the cluster through whichever answers."""
        return ",".join(node.address for node in self.nodes)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still "exists"; treat it as dead.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


class ManagedBroker:
    """Start, stop, kill and inspect the broker whose state is under `home`."""

    def __init__(
        self,
        home: Path,
        *,
        kafka_version: str = "3.9.1",
        scala_version: str = "2.13",
        cache_dir: Path,
        heap: str = "512m",
        secure: bool = True,
        nodes: int = 1,
        hosts: dict[int, str] | None = None,
        launch: Callable[[int], list[str]] | None = None,
    ) -> None:
        self.home = home
        self.nodes = nodes
        """Nodes when the storage is first formatted (a cluster keeps the count it was made with)."""
        self.hosts = hosts or {}
        """Node id -> the address it listens on and advertises (default 127.0.0.1): nodes on
        separate (test) hosts."""
        self.launch = launch
        """Node id -> the command prefix that runs a process on its host (`ip netns exec NS`)."""
        self.kafka_version = kafka_version
        self.scala_version = scala_version
        self.cache_dir = cache_dir
        self.heap = heap
        self.secure = secure
        """Provision SASL/SCRAM and ACLs when formatting (False: a PLAINTEXT broker, for the
        benchmarks that measure what authentication costs)."""
        self.principals = PrincipalStore(home / "principals.json")
        self._proc: subprocess.Popen[bytes] | None = None
        self._procs: dict[int, subprocess.Popen[bytes]] = {}

    # -- paths ---------------------------------------------------------------------------
    def node_home(self, node_id: int) -> Path:
        """Node 1's folder is the cluster's (where a single-node broker always kept it)."""
        return self.home if node_id == 1 else self.home / f"node-{node_id}"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    @property
    def log_file(self) -> Path:
        """The broker's own log (WARN and above, plus start/stop lines)."""
        return self.log_dir / "server.log"

    @property
    def stdout_file(self) -> Path:
        return self.log_dir / "stdout.log"

    @property
    def _state_file(self) -> Path:
        return self.home / "broker.json"

    @property
    def jars_cached(self) -> bool:
        """False when `start` must first fetch the Kafka jars from Maven Central (minutes)."""
        return kafka_jars_cached(self.kafka_version, self.scala_version, self.cache_dir)

    # -- connections ---------------------------------------------------------------------------
    def connection(self, role: Role = Role.ADMIN) -> KafkaConnection:
        """How a client of `role` reaches the running broker (its principal's credentials)."""
        state = self.state()
        if state is None:
            raise BrokerStartError(f"no broker was started in {self.home}")
        if not state.secure:
            return KafkaConnection.plaintext(state.bootstrap)
        principal = self.principals.for_role(role)
        if principal is None:
            raise PrincipalError(
                f"no principal of role {role.value} in {self.principals.path}; add one with "
                f"`rolltape principal add NAME --role {role.value}`"
            )
        return KafkaConnection(
            bootstrap=state.bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=SCRAM,
            username=principal.name,
            password=principal.password,
        )

    # -- state ---------------------------------------------------------------------------
    def state(self) -> BrokerState | None:
        """The recorded state, or None when no broker was started here."""
        try:
            return BrokerState.model_validate_json(self._state_file.read_text())
        except (OSError, ValueError):
            return None

    def running(self) -> BrokerState | None:
        """The state when a node's process is alive (a cluster with a node down still runs)."""
        state = self.state()
        if state is None or not any(_pid_alive(n.pid) for n in state.nodes):
            return None
        return state

    def nodes_down(self) -> list[int]:
        """The ids of the recorded nodes whose process is not alive."""
        state = self.state()
        return [] if state is None else [n.node_id for n in state.nodes if not _pid_alive(n.pid)]

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, *, timeout_s: float = 90.0) -> BrokerState:
        """Start the broker (or return the running one) and wait until it serves requests."""
        current = self.running()
        if current is not None and not self.nodes_down():
            return current
        if shutil.which("java") is None:
            raise BrokerStartError(
                "Java is not on PATH; install Java 17 or set ROLLTAPE_BOOTSTRAP to an existing "
                "Kafka cluster."
            )
        libs = kafka_classpath(self.kafka_version, self.scala_version, self.cache_dir)
        previous = self.state()
        if previous is not None and previous.kafka_version == self.kafka_version:
            cluster_id = previous.cluster_id
            ports = {n.node_id: (n.port, n.controller_port) for n in previous.nodes}
        else:
            cluster_id = _new_cluster_id()
            ports = {i: (_free_port(), _free_port()) for i in range(1, self.nodes + 1)}
        hosts = {i: self.hosts.get(i, "127.0.0.1") for i in ports}
        self.home.mkdir(parents=True, exist_ok=True)
        formatted = (self.data_dir / "meta.properties").exists()
        # Security is decided when the storage is formatted and kept for its life.
        secure = self.principals.exists() if formatted else self.secure
        if secure and not formatted:
            self.principals.create_defaults()
        java = self._java()
        alive = {n.node_id: n.pid for n in (current.nodes if current is not None else [])}
        alive = {i: pid for i, pid in alive.items() if _pid_alive(pid)}
        pids: dict[int, int] = dict(alive)
        procs: dict[int, subprocess.Popen[bytes]] = {}
        for node_id in sorted(ports):
            if node_id in alive:
                continue
            home = self.node_home(node_id)
            (home / "logs").mkdir(parents=True, exist_ok=True)
            props = self._write_config(node_id, ports, hosts, secure)
            if not (home / "data" / "meta.properties").exists():
                self._format(java, libs, props, cluster_id, secure)
            with open(home / "logs" / "stdout.log", "ab") as out:
                command = [*java, f"-Dkafka.logs.dir={home / 'logs'}", *self._log_args(home)]
                if self.launch is not None:
                    command = [*self.launch(node_id), *command]
                proc = subprocess.Popen(
                    [*command, "-cp", f"{libs}/*", "kafka.Kafka", str(props)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # the broker outlives `rolltape broker up`
                )
            procs[node_id] = proc
            pids[node_id] = proc.pid
        if 1 in procs:
            self._proc = procs[1]  # kept so it is reaped, not warned about, when it exits
        first_port, first_cport = ports[1]
        state = BrokerState(
            pid=pids[1],
            port=first_port,
            controller_port=first_cport,
            kafka_version=self.kafka_version,
            cluster_id=cluster_id,
            secure=secure,
            host=hosts[1],
            peers=[
                NodeState(
                    node_id=i,
                    pid=pids[i],
                    port=ports[i][0],
                    controller_port=ports[i][1],
                    host=hosts[i],
                )
                for i in sorted(ports)
                if i != 1
            ],
        )
        self._state_file.write_text(state.model_dump_json())
        self._procs.update(procs)
        admin = self.connection(Role.ADMIN)
        deadline = time.monotonic() + timeout_s * len(procs)
        while time.monotonic() < deadline:
            for node_id, proc in procs.items():
                if proc.poll() is not None:
                    raise BrokerStartError(
                        f"node {node_id} exited with code {proc.returncode} while starting. "
                        f"Last lines of its log:\n{self.tail_log(30, node_id)}"
                    )
            if broker_answers_sync(admin, timeout_s=2.0) and (
                len(ports) == 1 or cluster_brokers_sync(admin) == len(ports)
            ):
                return state
            time.sleep(0.2)
        for proc in procs.values():
            proc.kill()
        raise BrokerStartError(
            f"the cluster did not answer with its {len(ports)} node(s) within "
            f"{timeout_s * len(procs):.0f}s. Last log lines:\n{self.tail_log(30)}"
        )

    def _java(self) -> list[str]:
        return [
            "java",
            f"-Xmx{self.heap}",
            f"-Xms{self.heap}",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
        ]

    def _log_args(self, home: Path) -> list[str]:
        log_props = self._write_log_config(home)
        if uses_log4j2(self.kafka_version):
            return [f"-Dlog4j2.configurationFile={log_props}"]
        return [f"-Dlog4j.configuration=file:{log_props}"]

    def _format(
        self, java: list[str], libs: Path, props: Path, cluster_id: str, secure: bool
    ) -> None:
        """Format one node's storage (every node with the same cluster id and credentials: each
        is a controller, and KRaft reads SCRAM credentials from the metadata log)."""
        scram = [
            arg
            for p in (self.principals.principals() if secure else [])
            for arg in (
                "--add-scram",
                f"{SCRAM}=[name={p.name},password={p.password.get_secret_value()}]",
            )
        ]
        tool = [*java, "-cp", f"{libs}/*", "kafka.tools.StorageTool"]
        fmt = subprocess.run(
            [*tool, "format", "-t", cluster_id, "-c", str(props), "--ignore-formatted", *scram],
            capture_output=True,
            text=True,
            check=False,
        )
        if fmt.returncode != 0:
            raise BrokerStartError(
                f"formatting the broker storage failed:\n{fmt.stdout}{fmt.stderr}"
            )

    def stop(self, *, timeout_s: float = 30.0) -> bool:
        """Stop every node cleanly (SIGTERM, then SIGKILL after `timeout_s`); False if none
        was running."""
        state = self.running()
        if state is None:
            return False
        pids = [n.pid for n in state.nodes if _pid_alive(n.pid)]
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        for pid in pids:
            if not self._wait_exit(pid, timeout_s):
                os.kill(pid, signal.SIGKILL)
                self._wait_exit(pid, 10.0)
        return True

    def kill(self, node_id: int | None = None) -> bool:
        """SIGKILL every node (or one), as a crash would; data and ports stay for a restart
        (`start` starts the nodes that are down)."""
        state = self.running()
        if state is None:
            return False
        nodes = [n for n in state.nodes if node_id is None or n.node_id == node_id]
        for node in nodes:
            if _pid_alive(node.pid):
                os.kill(node.pid, signal.SIGKILL)
                self._wait_exit(node.pid, 10.0)
        return bool(nodes)

    def add_scram_user(self, name: str, password: str) -> None:
        """Create SCRAM credentials for `name` on the running broker, with Kafka's own
        `kafka-configs` (ConfigCommand) authenticated as admin; secrets travel in files that only
        the owner can read, never on a command line."""
        state = self.running()
        if state is None or not state.secure:
            raise BrokerStartError(
                "the managed broker is not running with SASL; `rolltape broker up`"
            )
        done = run_kafka_tool(
            CONFIGS,
            ["--alter", "--add-config-file", "{user_properties}", "--entity-type", "users",
             "--entity-name", name],
            self.connection(Role.ADMIN),
            kafka_version=self.kafka_version,
            scala_version=self.scala_version,
            cache_dir=self.cache_dir,
            files={"user_properties": f"{SCRAM}=iterations=8192,password={password}\n"},
        )  # fmt: skip
        if done.returncode != 0:
            raise BrokerStartError(
                f"creating SCRAM credentials for {name} failed:\n{done.stdout}{done.stderr}"
            )

    def tail_log(self, lines: int = 50, node_id: int = 1) -> str:
        """The end of one node's logs (node 1's: the single node's)."""
        parts = []
        logs = self.node_home(node_id) / "logs"
        for path in (logs / "stdout.log", logs / "server.log"):
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path}\n" + "\n".join(text))
        return "\n".join(parts) if parts else "(no log yet)"

    # -- helpers -------------------------------------------------------------------------
    def _wait_exit(self, pid: int, timeout_s: float) -> bool:
        own = [p for p in (self._proc, *self._procs.values()) if p is not None and p.pid == pid]
        if own:
            try:
                own[0].wait(timeout_s)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)  # reap our own child if it is one
                if done == pid:
                    return True
            except ChildProcessError:
                pass
            if not _pid_alive(pid):
                return True
            time.sleep(0.05)
        return False

    def _write_config(
        self,
        node_id: int,
        ports: dict[int, tuple[int, int]],
        hosts: dict[int, str],
        secure: bool,
    ) -> Path:
        """One node's server.properties. Replication follows the cluster's size: three copies
        with min ISR 2 from three nodes on (a write acknowledged by acks=all survives any one
        node's loss), the internal topics (offsets, transactions) the same; unclean leader
        election off, so an out-of-sync replica never becomes leader and drops records."""
        port, cport = ports[node_id]
        host = hosts[node_id]
        replicas = str(replication_for(len(ports)))
        min_isr = str(min_insync_for(len(ports)))
        voters = ",".join(f"{i}@{hosts[i]}:{c}" for i, (_, c) in sorted(ports.items()))
        lines = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}",
            "advertised.listeners": f"PLAINTEXT://{host}:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.node_home(node_id) / "data"),
            "num.partitions": "1",
            "default.replication.factor": replicas,
            "min.insync.replicas": min_isr,
            "unclean.leader.election.enable": "false",
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min_isr,
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "controlled.shutdown.enable": "true",
        }
        if len(ports) > 1:
            # Nodes on one machine: a node's loss is noticed within seconds (the controller
            # fences it and shrinks the ISRs it was in), not after the defaults' 9 s and 30 s.
            lines["broker.session.timeout.ms"] = "4000"
            lines["broker.heartbeat.interval.ms"] = "1000"
            lines["replica.lag.time.max.ms"] = "10000"
        if int(self.kafka_version.split(".")[0]) < 4:
            del lines["share.coordinator.state.topic.replication.factor"]
            del lines["share.coordinator.state.topic.min.isr"]
        if secure:
            lines.update(self._sasl_config(host, port, cport))
        path = self.node_home(node_id) / "server.properties"
        # It holds the admin secret when secure: readable by its owner only, from creation on.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write("".join(f"{k}={v}\n" for k, v in lines.items()))
        os.chmod(path, 0o600)
        return path

    def _sasl_config(self, host: str, port: int, cport: int) -> dict[str, str]:
        admin = self.principals.get(Role.ADMIN.value)
        secret = admin.password.get_secret_value()
        return {
            "listeners": f"SASL_PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}",
            "advertised.listeners": f"SASL_PLAINTEXT://{host}:{port}",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "listener.security.protocol.map": (
                "CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
            ),
            "sasl.enabled.mechanisms": SCRAM,
            "sasl.mechanism.inter.broker.protocol": SCRAM,
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{admin.name}" password="{secret}";'
            ),
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="{admin.name}" password="{secret}" user_{admin.name}="{secret}";'
            ),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{admin.name}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def _write_log_config(self, home: Path) -> Path:
        log = home / "logs" / "server.log"
        if uses_log4j2(self.kafka_version):
            path = home / "log4j2.properties"
            path.write_text(
                "status = error\n"
                "appender.file.type = File\n"
                "appender.file.name = FILE\n"
                f"appender.file.fileName = {log}\n"
                "appender.file.layout.type = PatternLayout\n"
                "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
                "rootLogger.level = WARN\n"
                "rootLogger.appenderRef.file.ref = FILE\n"
                "logger.server.name = kafka.server.KafkaRaftServer\n"
                "logger.server.level = INFO\n"
            )
            return path
        path = home / "log4j.properties"
        path.write_text(
            "log4j.rootLogger=WARN, file\n"
            "log4j.appender.file=org.apache.log4j.FileAppender\n"
            f"log4j.appender.file.File={log}\n"
            "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
            "log4j.logger.kafka.server.KafkaRaftServer=INFO\n"
        )
        return path


def replication_for(nodes: int) -> int:
    """Copies of each partition on a cluster of `nodes`: three where there are three nodes or
    more, else one per node."""
    return min(3, nodes)


def min_insync_for(nodes: int) -> int:
    """In-sync replicas an acks=all write needs: two of three (one node may be down), else one."""
    return 2 if replication_for(nodes) >= 3 else 1


def _new_cluster_id() -> str:
    """16 random bytes in URL-safe base64, never starting with "-": the storage tool would read
    such an id as an option (Kafka's own Uuid.randomUuid avoids them for the same reason)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id
