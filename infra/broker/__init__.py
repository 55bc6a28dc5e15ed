"""Broker provisioning: a real Apache Kafka for the CLI, the demo and the tests."""

from rolltape.infra.broker._containers import docker_engine_available, start_container_broker
from rolltape.infra.broker._errors import BrokerError, BrokerStartError, BrokerUnavailable
from rolltape.infra.broker._kraft import BrokerState, ManagedBroker
from rolltape.infra.broker._maven import kafka_classpath
from rolltape.infra.broker._provision import current_bootstrap, managed_broker, require_bootstrap
from rolltape.infra.broker._ready import broker_answers, broker_answers_sync

__all__ = [
    "BrokerError",
    "BrokerStartError",
    "BrokerState",
    "BrokerUnavailable",
    "ManagedBroker",
    "broker_answers",
    "broker_answers_sync",
    "current_bootstrap",
    "docker_engine_available",
    "kafka_classpath",
    "managed_broker",
    "require_bootstrap",
    "start_container_broker",
]
