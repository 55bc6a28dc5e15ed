"""The Kafka client library stays behind its one boundary: `rolltape.schemas.clients` builds
every client and translates every error, and the worker's faust shell (`processors/worker/`)
uses what faust needs. Everything else speaks rolltape's terms (`KafkaConnection`,
`GroupMember`, `LogReader`, `KafkaClientError`).

`_NOT_YET_BEHIND_IT` lists the modules that still import aiokafka themselves
(docs/limitations.md). The table is a ratchet: no other module may start to, and a module that
stopped must leave the table. `_BY_DESIGN` names the ones that must, and why.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("schemas", "producers", "processors", "projections", "infra")
BOUNDARY = ("schemas/clients/", "processors/worker/")

_NOT_YET_BEHIND_IT: set[str] = {
    "infra/broker/_acls.py",
}

_BY_DESIGN: dict[str, str] = {
    "infra/bench/producer.py": "its baseline is the client library itself, measured raw",
}


def _imports_the_client_library(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == "aiokafka" for a in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "aiokafka":
            return True
    return False


def _importers() -> set[str]:
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = path.relative_to(ROOT).as_posix()
            if "native" in path.parts or name.startswith(BOUNDARY):
                continue
            if _imports_the_client_library(path):
                found.add(name)
    return found


def test_no_module_outside_the_boundary_starts_importing_the_kafka_client_library() -> None:
    assert sorted(_importers() - _NOT_YET_BEHIND_IT - set(_BY_DESIGN)) == [], (
        "build clients through KafkaConnection, share partitions with GroupMember, catch "
        "KafkaClientError"
    )


def test_the_table_of_modules_not_yet_behind_the_boundary_only_shrinks() -> None:
    assert sorted(_NOT_YET_BEHIND_IT - _importers()) == [], "take these out of the table"
