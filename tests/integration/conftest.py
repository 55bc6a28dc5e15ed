"""A real Apache Kafka broker for the integration tests.

ROLLTAPE_BOOTSTRAP set: use that cluster. Otherwise start rolltape's managed KRaft broker from
Maven jars in a temporary folder for the test session (jars cached in ROLLTAPE_CACHE_DIR). Each
test gets its own topic prefix, so tests never see each other's records.
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

from rolltape.infra.broker import ManagedBroker, docker_engine_available, start_container_broker
from rolltape.infra.readback import verify_topics
from rolltape.infra.settings import Settings
from rolltape.infra.topics import ensure_topics_sync
from rolltape.schemas import CHAINED_STREAMS, ChainVerifier

pytestmark = pytest.mark.integration


@dataclass
class Cluster:
    bootstrap: str
    managed: ManagedBroker | None


@dataclass
class Topics:
    bootstrap: str
    prefix: str
    settings: Settings

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "ROLLTAPE_BOOTSTRAP": self.bootstrap,
            "ROLLTAPE_TOPIC_PREFIX": self.prefix,
        }

    def verify(self, session_id: str | None = None) -> ChainVerifier:
        return asyncio.run(
            verify_topics(
                self.bootstrap, CHAINED_STREAMS, prefix=self.prefix, session_id=session_id
            )
        )


def start_managed(home: Path) -> ManagedBroker:
    cfg = Settings()
    broker = ManagedBroker(
        home,
        kafka_version=cfg.kafka_version,
        scala_version=cfg.scala_version,
        cache_dir=cfg.cache_dir,
        heap="384m",
    )
    broker.start()
    return broker


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    external = os.environ.get("ROLLTAPE_BOOTSTRAP")
    if external:
        yield Cluster(external, None)
        return
    if shutil.which("java") is None and docker_engine_available():
        # DESIGN.md's last resort, for machines with Docker but no Java.
        bootstrap, container = start_container_broker()
        try:
            yield Cluster(bootstrap, None)
        finally:
            container.stop()
        return
    broker = start_managed(tmp_path_factory.mktemp("broker"))
    state = broker.state()
    assert state is not None
    try:
        yield Cluster(state.bootstrap, broker)
    finally:
        broker.stop()


def make_topics(bootstrap: str) -> Topics:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    settings = Settings(bootstrap=bootstrap, topic_prefix=prefix, partitions=3)
    ensure_topics_sync(bootstrap, settings)
    return Topics(bootstrap, prefix, settings)


@pytest.fixture
def topics(cluster: Cluster) -> Topics:
    return make_topics(cluster.bootstrap)
