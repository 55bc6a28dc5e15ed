"""Where is the broker? DESIGN.md's order: explicit address, then the managed broker from Maven
jars, then testcontainers when a Docker engine answers."""

from __future__ import annotations

from rolltape.infra.broker._errors import BrokerUnavailable
from rolltape.infra.broker._kraft import ManagedBroker
from rolltape.infra.settings import Settings


def managed_broker(settings: Settings) -> ManagedBroker:
    return ManagedBroker(
        settings.state_dir / "broker",
        kafka_version=settings.kafka_version,
        scala_version=settings.scala_version,
        cache_dir=settings.cache_dir,
        heap=settings.broker_heap,
    )


def current_bootstrap(settings: Settings) -> str | None:
    """The address to use now without starting anything: ROLLTAPE_BOOTSTRAP, else the running
    managed broker, else None."""
    if settings.bootstrap:
        return settings.bootstrap
    state = managed_broker(settings).running()
    return state.bootstrap if state is not None else None


def require_bootstrap(settings: Settings) -> str:
    """Like `current_bootstrap` but a clear error when there is none."""
    bootstrap = current_bootstrap(settings)
    if bootstrap is None:
        raise BrokerUnavailable(
            "no Kafka broker is configured or running. Start one with `rolltape broker up`, "
            "or set ROLLTAPE_BOOTSTRAP=host:port to use an existing cluster."
        )
    return bootstrap
