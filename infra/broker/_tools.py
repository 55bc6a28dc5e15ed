"""Kafka's own command-line tools (kafka-configs, kafka-consumer-groups, the console consumer),
run from the jars `broker up` fetched, as a principal whose credentials travel in a properties
file only its owner can read, never on a command line."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rolltape.infra.broker._maven import kafka_classpath
from rolltape.schemas.clients import KafkaConnection

CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONFIGS = "kafka.admin.ConfigCommand"


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` readable by its owner alone (it holds secrets)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def run_kafka_tool(
    main_class: str,
    args: Sequence[str],
    connection: KafkaConnection,
    *,
    kafka_version: str,
    scala_version: str,
    cache_dir: Path,
    config_flag: str = "--command-config",
    files: dict[str, str] | None = None,
    timeout_s: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tools against `connection`'s cluster as its principal. `files` are
    more private files (a user's new SCRAM secret): an argument that is exactly `{name}` of one
    of them is replaced by its path; every other argument is passed as it is."""
    libs = kafka_classpath(kafka_version, scala_version, cache_dir)
    with tempfile.TemporaryDirectory() as tmp:
        client = Path(tmp) / "client.properties"
        write_private(client, connection.java_properties())
        named = {}
        for name, text in (files or {}).items():
            named[name] = str(Path(tmp) / name)
            write_private(Path(named[name]), text)
        command = [
            "java",
            "-Xmx256m",
            "-cp",
            f"{libs}/*",
            main_class,
            "--bootstrap-server",
            connection.bootstrap,
            config_flag,
            str(client),
            *(named.get(a[1:-1], a) if a.startswith("{") and a.endswith("}") else a for a in args),
        ]
        return subprocess.run(
            command, capture_output=True, text=True, check=False, timeout=timeout_s
        )
