"""`rolltape principal list | show | add` wiring: the managed broker's principals file read, one
principal's credentials in the form another process needs, a new principal created with its
role's ACLs on every topic prefix provisioned so far."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from rolltape.infra.broker import (
    Principal,
    PrincipalError,
    PrincipalStore,
    create_acls,
    managed_broker,
    new_secret,
    principal_store,
    require_connection,
    role_acls,
)
from rolltape.infra.settings import Settings
from rolltape.schemas import Role as Role
from rolltape.schemas.clients import KafkaConnection


class Format(StrEnum):
    """How `principal show` prints credentials: ROLLTAPE_* lines for another rolltape process,
    or Kafka client properties (with a JAAS line) for any other client."""

    env = "env"
    properties = "properties"


@dataclass(frozen=True)
class Principals:
    """The principals file and every principal in it."""

    path: Path
    principals: list[Principal]


@dataclass(frozen=True)
class AddedPrincipal:
    """How many ACLs a new principal was granted, on how many topic prefixes."""

    acls: int
    prefixes: int


def _store(s: Settings) -> PrincipalStore:
    store = principal_store(s)
    if store is None or not store.exists():
        raise PrincipalError(
            "no principals are kept here: start the managed broker with `rolltape broker up` "
            "(or point ROLLTAPE_PRINCIPALS_FILE at a principals file)"
        )
    return store


def list_principals(settings: Settings) -> Principals:
    """Every principal kept here, with its role."""
    store = _store(settings)
    return Principals(store.path, store.principals())


def credentials(settings: Settings, name: str, format: Format) -> list[str]:
    """`name`'s credentials (its secret included) as lines in `format`, for the cluster's
    bootstrap address."""
    principal = _store(settings).get(name)
    bootstrap = require_connection(settings, Role.ADMIN).bootstrap
    secret = principal.password.get_secret_value()
    if format is Format.env:
        return [
            f"ROLLTAPE_BOOTSTRAP={bootstrap}",
            "ROLLTAPE_SECURITY_PROTOCOL=SASL_PLAINTEXT",
            "ROLLTAPE_SASL_MECHANISM=SCRAM-SHA-512",
            f"ROLLTAPE_SASL_USERNAME={principal.name}",
            f"ROLLTAPE_SASL_PASSWORD={secret}",
        ]
    connection = KafkaConnection(
        bootstrap=bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        username=principal.name,
        password=principal.password,
    )
    return [connection.java_properties().rstrip("\n")]


def add_principal(settings: Settings, name: str, role: Role) -> AddedPrincipal:
    """Create `name` on the running managed broker (SCRAM credentials) with `role`'s ACLs on
    every topic prefix provisioned so far, and keep its secret in the principals file."""
    store = _store(settings)
    store.check_new(name)
    secret = new_secret()
    managed_broker(settings).add_scram_user(name, secret)
    admin = require_connection(settings, Role.ADMIN)
    prefixes = store.prefixes()
    grants = [a for prefix, group in prefixes.items() for a in role_acls(role, prefix, group)]
    created = asyncio.run(create_acls(admin, {name: grants}))
    store.add(name, role, secret)
    return AddedPrincipal(created, len(prefixes))
