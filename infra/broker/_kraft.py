"""A single-node Apache Kafka (KRaft) broker run from Maven jars, under rolltape's control.

Invariant: the broker's whole state lives under one folder (`state_dir/broker`): server.properties,
data, logs, `broker.json` (pid, ports, version) and `principals.json` (the SASL secrets, 0600).
A restart reuses the folder and the ports, so clients reconnect to the same address and find their
data.

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
import tempfile
import time
import uuid
from pathlib import Path

from pydantic import BaseModel

from rolltape.infra.broker._errors import BrokerStartError
from rolltape.infra.broker._maven import kafka_classpath, kafka_jars_cached, uses_log4j2
from rolltape.infra.broker._principals import PrincipalError, PrincipalStore
from rolltape.infra.broker._ready import broker_answers_sync
from rolltape.schemas import Role
from rolltape.schemas.clients import KafkaConnection

SCRAM = "SCRAM-SHA-512"


class BrokerState(BaseModel):
    """Contents of broker.json."""

    pid: int
    port: int
    controller_port: int
    kafka_version: str
    cluster_id: str
    secure: bool = False
    """SASL/SCRAM with ACLs; False only for state formatted before rolltape provisioned them."""

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


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
    ) -> None:
        self.home = home
        self.kafka_version = kafka_version
        self.scala_version = scala_version
        self.cache_dir = cache_dir
        self.heap = heap
        self.secure = secure
        """Provision SASL/SCRAM and ACLs when formatting (False: a PLAINTEXT broker, for the
        benchmarks that measure what authentication costs)."""
        self.principals = PrincipalStore(home / "principals.json")
        self._proc: subprocess.Popen[bytes] | None = None

    # -- paths ---------------------------------------------------------------------------
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
        """The state when its process is alive."""
        state = self.state()
        return state if state is not None and _pid_alive(state.pid) else None

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, *, timeout_s: float = 90.0) -> BrokerState:
        """Start the broker (or return the running one) and wait until it serves requests."""
        current = self.running()
        if current is not None:
            return current
        if shutil.which("java") is None:
            raise BrokerStartError(
                "Java is not on PATH; install Java 17 or set ROLLTAPE_BOOTSTRAP to an existing "
                "Kafka cluster."
            )
        libs = kafka_classpath(self.kafka_version, self.scala_version, self.cache_dir)
        previous = self.state()
        if previous is not None and previous.kafka_version == self.kafka_version:
            port, cport, cluster_id = previous.port, previous.controller_port, previous.cluster_id
        else:
            port, cport = _free_port(), _free_port()
            cluster_id = _new_cluster_id()
        self.home.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        formatted = (self.data_dir / "meta.properties").exists()
        # Security is decided when the storage is formatted and kept for its life.
        secure = self.principals.exists() if formatted else self.secure
        if secure and not formatted:
            self.principals.create_defaults()
        props = self._write_config(port, cport, secure)
        log_props = self._write_log_config()
        classpath = f"{libs}/*"
        java = [
            "java",
            f"-Xmx{self.heap}",
            f"-Xms{self.heap}",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={self.log_dir}",
        ]
        if uses_log4j2(self.kafka_version):
            java.append(f"-Dlog4j2.configurationFile={log_props}")
        else:
            java.append(f"-Dlog4j.configuration=file:{log_props}")
        if not formatted:
            scram = [
                arg
                for p in (self.principals.principals() if secure else [])
                for arg in (
                    "--add-scram",
                    f"{SCRAM}=[name={p.name},password={p.password.get_secret_value()}]",
                )
            ]
            fmt = subprocess.run(
                [
                    *java,
                    "-cp",
                    classpath,
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    cluster_id,
                    "-c",
                    str(props),
                    "--ignore-formatted",
                    *scram,
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if fmt.returncode != 0:
                raise BrokerStartError(
                    f"formatting the broker storage failed:\n{fmt.stdout}{fmt.stderr}"
                )
        with open(self.stdout_file, "ab") as out:
            proc = subprocess.Popen(
                [*java, "-cp", classpath, "kafka.Kafka", str(props)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # the broker outlives `rolltape broker up`
            )
        self._proc = proc  # keep the handle so it is reaped, not warned about, when it exits
        state = BrokerState(
            pid=proc.pid,
            port=port,
            controller_port=cport,
            kafka_version=self.kafka_version,
            cluster_id=cluster_id,
            secure=secure,
        )
        self._state_file.write_text(state.model_dump_json())
        admin = self.connection(Role.ADMIN)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise BrokerStartError(
                    f"the broker exited with code {proc.returncode} while starting. "
                    f"Last lines of {self.stdout_file}:\n{self.tail_log(30)}"
                )
            if broker_answers_sync(admin, timeout_s=2.0):
                return state
            time.sleep(0.2)
        self.kill()
        raise BrokerStartError(
            f"the broker did not answer within {timeout_s:.0f}s. Last log lines:\n{self.tail_log(30)}"
        )

    def stop(self, *, timeout_s: float = 30.0) -> bool:
        """Stop cleanly (SIGTERM, then SIGKILL after `timeout_s`); False if none was running."""
        state = self.running()
        if state is None:
            return False
        os.kill(state.pid, signal.SIGTERM)
        if not self._wait_exit(state.pid, timeout_s):
            os.kill(state.pid, signal.SIGKILL)
            self._wait_exit(state.pid, 10.0)
        return True

    def kill(self) -> bool:
        """SIGKILL, as a crash would; data and ports stay for a restart."""
        state = self.running()
        if state is None:
            return False
        os.kill(state.pid, signal.SIGKILL)
        self._wait_exit(state.pid, 10.0)
        return True

    def add_scram_user(self, name: str, password: str) -> None:
        """Create SCRAM credentials for `name` on the running broker, with Kafka's own
        `kafka-configs` (ConfigCommand) authenticated as admin; secrets travel in files that only
        the owner can read, never on a command line."""
        state = self.running()
        if state is None or not state.secure:
            raise BrokerStartError(
                "the managed broker is not running with SASL; `rolltape broker up`"
            )
        admin = self.principals.get(Role.ADMIN.value)
        libs = kafka_classpath(self.kafka_version, self.scala_version, self.cache_dir)
        with tempfile.TemporaryDirectory(dir=self.home) as tmp:
            client = Path(tmp) / "admin.properties"
            entity = Path(tmp) / "user.properties"
            for path, text in (
                (
                    client,
                    "security.protocol=SASL_PLAINTEXT\n"
                    f"sasl.mechanism={SCRAM}\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                    f'required username="{admin.name}" '
                    f'password="{admin.password.get_secret_value()}";\n',
                ),
                (entity, f"{SCRAM}=iterations=8192,password={password}\n"),
            ):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as out:
                    out.write(text)
            done = subprocess.run(
                [
                    "java",
                    "-Xmx256m",
                    "-cp",
                    f"{libs}/*",
                    "kafka.admin.ConfigCommand",
                    "--bootstrap-server",
                    state.bootstrap,
                    "--command-config",
                    str(client),
                    "--alter",
                    "--add-config-file",
                    str(entity),
                    "--entity-type",
                    "users",
                    "--entity-name",
                    name,
                ],
                capture_output=True,
                text=True,
                check=False,
                timeout=120,
            )
        if done.returncode != 0:
            raise BrokerStartError(
                f"creating SCRAM credentials for {name} failed:\n{done.stdout}{done.stderr}"
            )

    def tail_log(self, lines: int = 50) -> str:
        parts = []
        for path in (self.stdout_file, self.log_file):
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path}\n" + "\n".join(text))
        return "\n".join(parts) if parts else "(no log yet)"

    # -- helpers -------------------------------------------------------------------------
    def _wait_exit(self, pid: int, timeout_s: float) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            try:
                self._proc.wait(timeout_s)
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

    def _write_config(self, port: int, cport: int, secure: bool) -> Path:
        lines = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{cport}",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            # A single node has nobody to replicate to; keep shutdown quick.
            "controlled.shutdown.enable": "true",
        }
        if int(self.kafka_version.split(".")[0]) < 4:
            del lines["share.coordinator.state.topic.replication.factor"]
            del lines["share.coordinator.state.topic.min.isr"]
        if secure:
            lines.update(self._sasl_config(port, cport))
        path = self.home / "server.properties"
        # It holds the admin secret when secure: readable by its owner only, from creation on.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write("".join(f"{k}={v}\n" for k, v in lines.items()))
        os.chmod(path, 0o600)
        return path

    def _sasl_config(self, port: int, cport: int) -> dict[str, str]:
        admin = self.principals.get(Role.ADMIN.value)
        secret = admin.password.get_secret_value()
        return {
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
            "advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
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

    def _write_log_config(self) -> Path:
        log = self.log_file
        if uses_log4j2(self.kafka_version):
            path = self.home / "log4j2.properties"
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
        path = self.home / "log4j.properties"
        path.write_text(
            "log4j.rootLogger=WARN, file\n"
            "log4j.appender.file=org.apache.log4j.FileAppender\n"
            f"log4j.appender.file.File={log}\n"
            "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
            "log4j.logger.kafka.server.KafkaRaftServer=INFO\n"
        )
        return path


def _new_cluster_id() -> str:
    """16 random bytes in URL-safe base64, never starting with "-": the storage tool would read
    such an id as an option (Kafka's own Uuid.randomUuid avoids them for the same reason)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id
