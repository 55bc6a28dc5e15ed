"""`rolltape principal list | show NAME | add NAME --role ROLE`: who may write what."""

from __future__ import annotations

import asyncio
from enum import StrEnum
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from rolltape.infra.broker import (
    PrincipalError,
    PrincipalStore,
    create_acls,
    managed_broker,
    new_secret,
    principal_store,
    require_connection,
    role_acls,
)
from rolltape.infra.cli._common import console, err_console, settings
from rolltape.infra.settings import Settings
from rolltape.schemas import Role
from rolltape.schemas.clients import KafkaConnection

app = typer.Typer(
    help="The principals of the managed broker: list them, show one's credentials, add one.",
    no_args_is_help=True,
)


class Format(StrEnum):
    """How `principal show` prints credentials: ROLLTAPE_* lines for another rolltape process,
    or Kafka client properties (with a JAAS line) for any other client."""

    env = "env"
    properties = "properties"


def _store(s: Settings) -> PrincipalStore:
    store = principal_store(s)
    if store is None or not store.exists():
        raise PrincipalError(
            "no principals are kept here: start the managed broker with `rolltape broker up` "
            "(or point ROLLTAPE_PRINCIPALS_FILE at a principals file)"
        )
    return store


@app.command("list")
def list_() -> None:
    """Every principal with its role and what it may write (never its secret)."""
    store = _store(settings())
    principals = store.principals()
    table = Table(title=f"principals in {store.path}", title_justify="left")
    for column in ("name", "role", "writes"):
        table.add_column(column)
    writes = {
        Role.ADMIN: "everything (super user; the only one that deletes)",
        Role.AGENT: "events",
        Role.MONITOR: "metrics",
        Role.PROCESSOR: "rules, filtered, deadletter, the worker's internal topics",
        Role.JUDGE: "verdicts, events (its own conversations)",
        Role.PROJECTOR: "trajectories",
        Role.READER: "nothing (reads every topic)",
        Role.SCHEDULER: "jobs (cron jobs and their runs)",
    }
    for p in principals:
        table.add_row(p.name, p.role.value, writes[p.role])
    console.print(table)
    console.print("credentials of one: rolltape principal show NAME --format env")


@app.command()
def show(
    name: Annotated[str, typer.Argument(help="The principal, e.g. agent.")],
    format: Annotated[
        Format,
        typer.Option(
            "--format",
            help="Output format: env (ROLLTAPE_* lines) or properties (a Kafka client's).",
        ),
    ] = Format.env,
) -> None:
    """Print NAME's credentials (including its secret) for another process or machine."""
    s = settings()
    principal = _store(s).get(name)
    bootstrap = require_connection(s, Role.ADMIN).bootstrap
    secret = principal.password.get_secret_value()
    if format is Format.env:
        lines = [
            f"ROLLTAPE_BOOTSTRAP={bootstrap}",
            "ROLLTAPE_SECURITY_PROTOCOL=SASL_PLAINTEXT",
            "ROLLTAPE_SASL_MECHANISM=SCRAM-SHA-512",
            f"ROLLTAPE_SASL_USERNAME={principal.name}",
            f"ROLLTAPE_SASL_PASSWORD={secret}",
        ]
    else:
        connection = KafkaConnection(
            bootstrap=bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            username=principal.name,
            password=principal.password,
        )
        lines = [connection.java_properties().rstrip("\n")]
    print("\n".join(lines))


@app.command()
def add(
    name: Annotated[str, typer.Argument(help="A new principal name, e.g. agent-2.")],
    role: Annotated[
        Role, typer.Option("--role", help="What it may do (docs/contracts.md, trust domains).")
    ],
) -> None:
    """Create a principal on the running managed broker: SCRAM credentials, and its role's ACLs
    on every topic prefix provisioned so far. Its secret is stored, not printed."""
    if role == Role.ADMIN:
        raise PrincipalError(
            "admin is the broker's super user and is not added; give a process the role it "
            "needs (agent, monitor, processor, judge, projector, reader)"
        )
    s = settings()
    store = _store(s)
    store.check_new(name)
    secret = new_secret()
    managed_broker(s).add_scram_user(name, secret)
    admin = require_connection(s, Role.ADMIN)
    prefixes = store.prefixes()
    grants = [a for prefix, group in prefixes.items() for a in role_acls(role, prefix, group)]
    created = asyncio.run(create_acls(admin, {name: grants}))
    store.add(name, role, secret)
    err_console.print(
        f"added {escape(name)} ({role.value}): {created} ACLs on "
        f"{len(prefixes)} topic prefix(es); credentials: rolltape principal show {escape(name)}"
    )
