"""The provisioning order's last resort: a broker in a container via testcontainers.

Only where a Docker engine answers (docs/contracts.md, broker provisioning); kept small because
most of our machines have none.
"""

from __future__ import annotations

from typing import Any

from rolltape.infra.broker._errors import BrokerStartError


def docker_engine_available() -> bool:
    """Whether a Docker engine answers a ping, so a container broker is worth trying. Never
    raises: a missing `docker` package, socket or permission all mean no."""
    try:
        import docker
    except ImportError:
        return False
    try:
        docker.from_env().ping()
        return True
    except Exception:  # no socket, no permission, engine down: all mean "no engine"
        return False


def start_container_broker() -> tuple[str, Any]:
    """Start Kafka in a container; returns (bootstrap, container) — stop the container when done."""
    try:
        from testcontainers.kafka import KafkaContainer
    except ImportError as exc:
        raise BrokerStartError(
            "testcontainers is not installed; `pip install rolltape[containers]`"
        ) from exc
    container = KafkaContainer().with_kraft()
    container.start()
    return container.get_bootstrap_server(), container
