"""`rolltape broker up` wiring: bring a cluster to the state every other command expects.

Every path that starts the managed broker for a user (`broker up`, `rolltape demo`) calls
`broker_up`, so they all leave the same system behind: the broker running (or the explicit
cluster answering), its principals provisioned, the topic prefix's topics and ACLs created, and
the judge's key on disk, without which the worker signs no checkpoints and no export can carry
evidence. A path that started the broker but skipped the key left exports unverifiable.

It lives here, not in `broker/` or `keys.py`: it needs the managed broker, the topic admin
(`kafka/topics.py`, which builds on `broker/`) and the key; placed in `broker/` it would import
the module that imports it, and `keys.py` stays a leaf that knows nothing of clusters.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from rolltape.infra._errors import InfraError
from rolltape.infra.broker import (
    BrokerState,
    BrokerUnavailable,
    broker_answers_sync,
    current_connection,
    managed_broker,
    principal_store,
    require_connection,
)
from rolltape.infra.commands.worker import can_provision
from rolltape.infra.kafka.groups import GroupLag, group_lags
from rolltape.infra.kafka.topics import PartitionHealth, TopicStatus, partition_health, provision
from rolltape.infra.keys import judge_key
from rolltape.infra.settings import Settings
from rolltape.schemas import Role


class ManagedUp(BaseModel):
    """The managed broker `broker_up` started or found running."""

    model_config = ConfigDict(frozen=True)

    state: BrokerState
    home: Path
    log_dir: Path


class BrokerUp(BaseModel):
    """What `broker_up` left behind, for the caller to show."""

    model_config = ConfigDict(frozen=True)

    bootstrap: str
    cluster: str
    """The admin's connection, as it prints (address and principal)."""
    managed: ManagedUp | None
    """None when ROLLTAPE_BOOTSTRAP names the cluster."""
    topics: list[TopicStatus] | None
    """None when this process may not provision (`not_provisioned` says why)."""
    not_provisioned: str | None = None
    principals: list[tuple[str, Role]]
    """Every principal rolltape keeps for this cluster (empty: it keeps none)."""
    principals_file: Path | None
    judge_key_id: str
    judge_key_created: bool
    """True when this call created the judge's key (there was none)."""
    judge_public_key: Path


def broker_up(
    settings: Settings,
    *,
    as_admin: bool = False,
    on_step: Callable[[str], None] | None = None,
) -> BrokerUp:
    """Start the managed broker unless ROLLTAPE_BOOTSTRAP names a cluster (which must answer),
    provision the topic prefix, and create the judge's key when there is none. Idempotent.

    `as_admin` is `broker up`'s: the caller says it is the cluster's admin, so the topics and
    ACLs are provisioned with whatever credentials the settings give (ROLLTAPE_SASL_USERNAME
    included) and a refusal is an error. Otherwise (the demo) they are provisioned only when
    this process may (`can_provision`), and `not_provisioned` says why not. `on_step(line)`
    hears of the slow first start (the jars' download) before it happens. Raises
    `BrokerUnavailable` when the explicit cluster does not answer, and the broker package's
    errors when the managed one cannot start."""
    say = on_step or (lambda _line: None)
    managed = None
    if settings.bootstrap:
        admin = require_connection(settings, Role.ADMIN)
        if not broker_answers_sync(admin):
            raise BrokerUnavailable(
                f"ROLLTAPE_BOOTSTRAP={settings.bootstrap} does not answer as {admin}; start that "
                "cluster, check its security settings, or unset the variable to let rolltape "
                "run its own broker"
            )
    else:
        broker = managed_broker(settings)
        if broker.running() is None:
            if not broker.jars_cached:
                say(
                    f"fetching Apache Kafka {settings.kafka_version} from Maven Central into "
                    f"{settings.cache_dir} (first start only; a minute or two)"
                )
            say(f"starting Kafka {settings.kafka_version} (KRaft) in {broker.home}")
        state = broker.start()
        managed = ManagedUp(state=state, home=broker.home, log_dir=broker.log_dir)
        admin = require_connection(settings, Role.ADMIN)
    topics, why_not = None, None
    if as_admin or can_provision(settings):
        topics = provision(settings)
    else:
        who = (
            f"ROLLTAPE_SASL_USERNAME={settings.sasl_username} is used for every role"
            if settings.sasl_username
            else f"{settings.principals_file} holds no admin"
        )
        why_not = f"{who}: an admin must run `rolltape broker up` to create topics and ACLs"
    store = principal_store(settings)
    key = judge_key(settings)
    created = not key.exists()
    key_id = key.create() if created else key.key_id()
    return BrokerUp(
        bootstrap=admin.bootstrap,
        cluster=str(admin),
        managed=managed,
        topics=topics,
        not_provisioned=why_not,
        principals=[(p.name, p.role) for p in store.principals()] if store is not None else [],
        principals_file=store.path if store is not None else None,
        judge_key_id=key_id,
        judge_key_created=created,
        judge_public_key=key.public_path,
    )


class NodeStatus(BaseModel):
    """One node of a managed cluster, as `broker status` shows it."""

    node_id: int
    address: str
    pid: int
    up: bool


class BrokerStatus(BaseModel):
    """What `broker status` found: where the cluster answers (None: nowhere, `problem` says
    why), its nodes (a managed cluster's), how its partitions are replicated, and what is not
    healthy (None: nothing)."""

    bootstrap: str | None
    nodes: list[NodeStatus] = []
    partitions: PartitionHealth = PartitionHealth()
    groups: list[GroupLag] = []
    """The consumer groups reading the prefix's topics (the worker's, feeds', trainers'), each
    with its lag, as far as the principal looking may see."""
    problem: str | None = None


def broker_status(settings: Settings) -> BrokerStatus:
    """Whether the cluster answers, and how healthy it is: every node of a managed cluster up,
    no partition offline or under-replicated (looked at as the admin where rolltape holds one,
    so the internal topics count too)."""
    connection = current_connection(settings, Role.READER)
    if connection is None:
        return BrokerStatus(
            bootstrap=None, problem="no broker: run `rolltape broker up` or set ROLLTAPE_BOOTSTRAP"
        )
    if not broker_answers_sync(connection):
        return BrokerStatus(bootstrap=None, problem=f"the broker at {connection} does not answer")
    nodes: list[NodeStatus] = []
    broker = managed_broker(settings)
    state = None if settings.bootstrap else broker.state()
    if state is not None:
        down = set(broker.nodes_down())
        nodes = [
            NodeStatus(node_id=n.node_id, address=n.address, pid=n.pid, up=n.node_id not in down)
            for n in state.nodes
        ]
    looking = current_connection(settings, Role.ADMIN) or connection
    health = asyncio.run(partition_health(looking))
    groups = asyncio.run(group_lags(looking, settings.topic_prefix))
    problem = None
    if any(not n.up for n in nodes):
        count = sum(not n.up for n in nodes)
        problem = f"{count} node(s) down; `rolltape broker up` starts them"
    elif health.offline or health.under_replicated:
        problem = "replicas are catching up, or a node is away"
    return BrokerStatus(
        bootstrap=connection.bootstrap,
        nodes=nodes,
        partitions=health,
        groups=groups,
        problem=problem,
    )


class ManagedBrokerError(InfraError, ValueError):
    """The managed broker cannot do what was asked; the message says what to do instead."""


def with_nodes(settings: Settings, nodes: int) -> Settings:
    """`settings` for a managed cluster of `nodes` nodes (`broker up --nodes`); refused when the
    managed cluster here was made with another count (a cluster keeps the count it was made
    with)."""
    sized = settings.model_copy(update={"broker_nodes": nodes})
    made = managed_broker(sized).state()
    if made is not None and len(made.nodes) != nodes and not sized.bootstrap:
        raise ManagedBrokerError(
            f"the managed cluster in {managed_broker(sized).home} was made with "
            f"{len(made.nodes)} node(s), not {nodes}; `rolltape broker down` and remove that "
            "folder (its records go with it) to make another"
        )
    return sized


def broker_down(settings: Settings) -> bool:
    """Stop the managed broker cleanly (its data stays); False when none was running. Refused
    when ROLLTAPE_BOOTSTRAP names a cluster: that one is not rolltape's to stop."""
    if settings.bootstrap:
        raise ManagedBrokerError(
            f"ROLLTAPE_BOOTSTRAP={settings.bootstrap} is set: that cluster is not rolltape's to "
            "stop (unset the variable to stop the managed broker)"
        )
    return managed_broker(settings).stop()


def broker_logs(settings: Settings, lines: int) -> str:
    """The last `lines` lines of the managed broker's log (its first node's)."""
    return managed_broker(settings).tail_log(lines)
