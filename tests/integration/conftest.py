"""A real Apache Kafka broker for the integration tests.

ROLLTAPE_BOOTSTRAP set: use that cluster (with ROLLTAPE_PRINCIPALS_FILE or ROLLTAPE_SASL_* when
it is secured). Otherwise start rolltape's managed KRaft broker from Maven jars in a temporary
folder for the test session (jars cached in ROLLTAPE_CACHE_DIR): SASL/SCRAM with ACLs, as users
get it. Each test gets its own topic prefix, provisioned like a real one (topics and every
principal's ACLs), so tests never see each other's records.

Every test collected under this folder carries the `integration` marker (added at collection,
since pytest reads `pytestmark` from test modules only, never from a conftest), so
`pytest -m "not integration"` deselects all of them and no broker is started: the broker is a
session fixture that only integration tests request, and it starts on first use, not on
collection.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rolltape.infra.broker import (
    ManagedBroker,
    docker_engine_available,
    managed_broker,
    require_connection,
    start_container_broker,
)
from rolltape.infra.kafka.readback import verify_topics
from rolltape.infra.kafka.topics import provision
from rolltape.infra.keys import judge_key
from rolltape.infra.settings import Settings
from rolltape.schemas import CHAINED_STREAMS, ChainVerifier, Role
from rolltape.schemas.clients import KafkaConnection

_HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under this folder `integration`, before `-m` selects: a module that
    forgets its `pytestmark` must still be deselected by `-m "not integration"`."""
    for item in items:
        if _HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.integration)


class _Connected:
    """Settings with the cluster's address and principals file pinned."""

    settings: Settings

    @property
    def bootstrap(self) -> str:
        return self.connection(Role.ADMIN).bootstrap

    def connection(self, role: Role) -> KafkaConnection:
        return require_connection(self.settings, role)


@dataclass
class Cluster(_Connected):
    settings: Settings
    managed: ManagedBroker | None


@dataclass
class Topics(_Connected):
    prefix: str
    settings: Settings

    @property
    def writer(self) -> KafkaConnection:
        """For tests that write several trust domains through one recorder (a synthetic
        training session: events and metrics) or write foreign bytes: the admin. What each
        principal may write is pinned by test_trust."""
        return self.connection(Role.ADMIN)

    @property
    def reader(self) -> KafkaConnection:
        return self.connection(Role.READER)

    def env(self) -> dict[str, str]:
        return {**os.environ, **self.settings.child_env()}

    def verify(self, session_id: str | None = None) -> ChainVerifier:
        return asyncio.run(
            verify_topics(self.reader, CHAINED_STREAMS, prefix=self.prefix, session_id=session_id)
        )


def start_managed(home: Path) -> ManagedBroker:
    broker = managed_broker(Settings(), home=home, heap="384m", nodes=1)
    broker.start()
    return broker


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    external = os.environ.get("ROLLTAPE_BOOTSTRAP")
    if external:
        yield Cluster(Settings(), None)
        return
    if shutil.which("java") is None and docker_engine_available():
        # The provisioning order's last resort (docs/contracts.md, broker provisioning), for
        # machines with Docker but no Java.
        bootstrap, container = start_container_broker()
        try:
            yield Cluster(Settings(bootstrap=bootstrap), None)
        finally:
            container.stop()
        return
    state_dir = tmp_path_factory.mktemp("state")
    broker = start_managed(state_dir / "broker")
    try:
        yield managed_cluster(broker, state_dir)
    finally:
        broker.stop()


def managed_cluster(broker: ManagedBroker, state_dir: Path) -> Cluster:
    """The cluster of a managed broker started by a test, with its address and principals file
    pinned (so child processes and other state folders reach it too)."""
    state = broker.state()
    assert state is not None
    settings = Settings(
        bootstrap=state.bootstrap, principals_file=broker.principals.path, state_dir=state_dir
    )
    key = judge_key(settings)  # as `broker up` creates it: the worker signs checkpoints
    if not key.exists():
        key.create()
    return Cluster(settings, broker)


def make_topics(cluster: Cluster) -> Topics:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    settings = cluster.settings.model_copy(update={"topic_prefix": prefix, "partitions": 3})
    provision(settings)
    return Topics(prefix, settings)


@pytest.fixture
def topics(cluster: Cluster) -> Topics:
    return make_topics(cluster)
