"""Broker provisioning: a real Apache Kafka for the CLI, the demo and the tests, with its
principals (SASL/SCRAM) and ACLs per trust domain."""

from rolltape.infra.broker._acls import (
    Acl,
    AclError,
    create_acls,
    describe_acls,
    role_acls,
    scheduler_group,
)
from rolltape.infra.broker._containers import docker_engine_available, start_container_broker
from rolltape.infra.broker._errors import BrokerError, BrokerStartError, BrokerUnavailable
from rolltape.infra.broker._kraft import (
    BrokerState,
    ManagedBroker,
    NodeState,
    min_insync_for,
    replication_for,
)
from rolltape.infra.broker._maven import kafka_classpath
from rolltape.infra.broker._principals import Principal, PrincipalError, PrincipalStore, new_secret
from rolltape.infra.broker._provision import (
    current_connection,
    managed_broker,
    principal_store,
    replication_factor,
    require_connection,
)
from rolltape.infra.broker._ready import (
    broker_answers,
    broker_answers_sync,
    cluster_brokers,
    cluster_brokers_sync,
)
from rolltape.infra.broker._tools import CONSUMER_GROUPS, run_kafka_tool

__all__ = [
    "CONSUMER_GROUPS",
    "Acl",
    "AclError",
    "BrokerError",
    "BrokerStartError",
    "BrokerState",
    "BrokerUnavailable",
    "ManagedBroker",
    "NodeState",
    "Principal",
    "PrincipalError",
    "PrincipalStore",
    "broker_answers",
    "broker_answers_sync",
    "cluster_brokers",
    "cluster_brokers_sync",
    "create_acls",
    "current_connection",
    "describe_acls",
    "docker_engine_available",
    "kafka_classpath",
    "managed_broker",
    "min_insync_for",
    "new_secret",
    "principal_store",
    "replication_factor",
    "replication_for",
    "require_connection",
    "role_acls",
    "run_kafka_tool",
    "scheduler_group",
    "start_container_broker",
]
