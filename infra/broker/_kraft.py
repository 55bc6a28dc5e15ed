"""A single-node Apache Kafka (KRaft) broker run from Maven jars, under rolltape's control.

Invariant: the broker's whole state lives under one folder (`state_dir/broker`): server.properties,
data, logs and `broker.json` (pid, ports, version). A restart reuses the folder and the ports, so
clients reconnect to the same address and find their data.
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
from pathlib import Path

from pydantic import BaseModel

from rolltape.infra.broker._errors import BrokerStartError
from rolltape.infra.broker._maven import kafka_classpath, uses_log4j2
from rolltape.infra.broker._ready import broker_answers_sync


class BrokerState(BaseModel):
    """Contents of broker.json."""

    pid: int
    port: int
    controller_port: int
    kafka_version: str
    cluster_id: str

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
    ) -> None:
        self.home = home
        self.kafka_version = kafka_version
        self.scala_version = scala_version
        self.cache_dir = cache_dir
        self.heap = heap
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
        props = self._write_config(port, cport)
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
        if not (self.data_dir / "meta.properties").exists():
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
        )
        self._state_file.write_text(state.model_dump_json())
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise BrokerStartError(
                    f"the broker exited with code {proc.returncode} while starting. "
                    f"Last lines of {self.stdout_file}:\n{self.tail_log(30)}"
                )
            if broker_answers_sync(state.bootstrap, timeout_s=2.0):
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

    def _write_config(self, port: int, cport: int) -> Path:
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
        path = self.home / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        return path

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
