"""Where is the broker, and who are we on it? The order of docs/contracts.md (broker
provisioning): explicit address, then the managed broker from Maven jars, then testcontainers
when a Docker engine answers. Every command asks for the connection of its role; the credentials
come from settings, never from its caller.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import SecretStr

from rolltape.infra.broker._errors import BrokerUnavailable
from rolltape.infra.broker._kraft import ManagedBroker, replication_for
from rolltape.infra.broker._principals import PrincipalError, PrincipalStore
from rolltape.infra.settings import Settings
from rolltape.schemas import Role
from rolltape.schemas.clients import KafkaConnection


def managed_broker(
    settings: Settings,
    *,
    secure: bool = True,
    home: Path | None = None,
    heap: str | None = None,
    nodes: int | None = None,
    hosts: dict[int, str] | None = None,
    launch: Callable[[int], list[str]] | None = None,
) -> ManagedBroker:
    """A handle on the managed broker kept under the state folder; it starts nothing. `secure`
    (SASL/SCRAM and ACLs) counts only when its storage is first formatted: an existing broker
    keeps the mode it was formatted with. Tests, benchmarks and scripts that run brokers of
    their own name their `home`, and may override the heap, the node count and where the nodes
    run (`ManagedBroker`'s `hosts` and `launch`)."""
    return ManagedBroker(
        home if home is not None else settings.state_dir / "broker",
        kafka_version=settings.kafka_version,
        scala_version=settings.scala_version,
        cache_dir=settings.cache_dir,
        heap=heap if heap is not None else settings.broker_heap,
        secure=secure,
        nodes=nodes if nodes is not None else settings.broker_nodes,
        hosts=hosts,
        launch=launch,
    )


def replication_factor(settings: Settings) -> int:
    """Copies of each partition for topics created now: ROLLTAPE_REPLICATION_FACTOR when set,
    else the managed cluster's (three on three nodes or more), else one."""
    if "replication_factor" in settings.model_fields_set or settings.bootstrap:
        return settings.replication_factor
    state = managed_broker(settings).state()
    return replication_for(len(state.nodes)) if state is not None else 1


def current_connection(settings: Settings, role: Role) -> KafkaConnection | None:
    """The connection a command of `role` uses now, without starting anything: ROLLTAPE_BOOTSTRAP
    with the configured security, else the running managed broker, else None.

    Credentials, first found: ROLLTAPE_SASL_USERNAME (+ ROLLTAPE_SASL_PASSWORD, else its entry in
    the principals file); else the principal of `role` in ROLLTAPE_PRINCIPALS_FILE; for the
    managed broker, the principal of `role` in its own principals file.
    """
    if settings.bootstrap:
        store = PrincipalStore(settings.principals_file) if settings.principals_file else None
        return _connection(settings, settings.bootstrap, role, store)
    broker = managed_broker(settings)
    state = broker.running()
    if state is None:
        return None
    if not state.secure:
        return KafkaConnection.plaintext(state.bootstrap)
    if settings.sasl_username or settings.principals_file:
        store = PrincipalStore(settings.principals_file or broker.principals.path)
        return _connection(settings, state.bootstrap, role, store)
    return broker.connection(role)


def principal_store(settings: Settings) -> PrincipalStore | None:
    """Where the cluster's principals are kept, when rolltape keeps them: ROLLTAPE_PRINCIPALS_FILE,
    else the running managed broker's (None for a PLAINTEXT or foreign cluster)."""
    if settings.principals_file is not None:
        return PrincipalStore(settings.principals_file)
    if settings.bootstrap:
        return None
    broker = managed_broker(settings)
    state = broker.running()
    return broker.principals if state is not None and state.secure else None


def require_connection(settings: Settings, role: Role) -> KafkaConnection:
    """Like `current_connection` but a clear error when there is no broker."""
    connection = current_connection(settings, role)
    if connection is None:
        raise BrokerUnavailable(
            "no Kafka broker is configured or running. Start one with `rolltape broker up`, "
            "or set ROLLTAPE_BOOTSTRAP=host:port to use an existing cluster."
        )
    return connection


def _connection(
    settings: Settings, bootstrap: str, role: Role, store: PrincipalStore | None
) -> KafkaConnection:
    username: str | None = None
    password: SecretStr | None = None
    if settings.sasl_username:
        username, password = settings.sasl_username, settings.sasl_password
        if password is None:
            if store is None or not store.exists():
                raise PrincipalError(
                    f"ROLLTAPE_SASL_USERNAME={username} is set without ROLLTAPE_SASL_PASSWORD "
                    "and no principals file holds it; set the password (or "
                    "ROLLTAPE_PRINCIPALS_FILE)"
                )
            password = store.get(username).password
    elif store is not None:
        if not store.exists():
            raise PrincipalError(
                f"ROLLTAPE_PRINCIPALS_FILE={store.path} does not exist; `rolltape broker up` "
                "writes it for the managed broker"
            )
        principal = store.for_role(role)
        if principal is None:
            raise PrincipalError(
                f"no principal of role {role.value} in {store.path}; add one with "
                f"`rolltape principal add NAME --role {role.value}`"
            )
        username, password = principal.name, principal.password
    protocol = settings.security_protocol
    if protocol is None:
        tls = settings.ssl_cafile is not None
        if username is not None:
            protocol = "SASL_SSL" if tls else "SASL_PLAINTEXT"
        else:
            protocol = "SSL" if tls else "PLAINTEXT"
    try:
        return KafkaConnection(
            bootstrap=bootstrap,
            security_protocol=protocol,
            sasl_mechanism=settings.sasl_mechanism,
            username=username,
            password=password,
            ssl_cafile=settings.ssl_cafile,
            ssl_certfile=settings.ssl_certfile,
            ssl_keyfile=settings.ssl_keyfile,
        )
    except ValueError as exc:
        raise PrincipalError(f"the Kafka security settings do not fit together: {exc}") from exc
