"""`rolltape principal list | show NAME | add NAME --role ROLE`: who may write what."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from rolltape.infra.cli._common import CliError, console, err_console, settings
from rolltape.infra.commands.principal import (
    Format,
    Role,
    add_principal,
    credentials,
    list_principals,
)

app = typer.Typer(
    help="The principals of the managed broker: list them, show one's credentials, add one.",
    no_args_is_help=True,
)


@app.command("list")
def list_() -> None:
    """Every principal with its role and what it may write (never its secret)."""
    found = list_principals(settings())
    table = Table(title=f"principals in {found.path}", title_justify="left")
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
        Role.REVIEWER: "verdicts (human verdicts, under the judge version human)",
        Role.TRAINER: "events (training runs' lineage: what they trained on, their checkpoints)",
    }
    for p in found.principals:
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
    lines = credentials(settings(), name, format)
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
        raise CliError(
            "admin is the broker's super user and is not added; give a process the role it "
            "needs (agent, monitor, processor, judge, projector, reader)"
        )
    added = add_principal(settings(), name, role)
    err_console.print(
        f"added {escape(name)} ({role.value}): {added.acls} ACLs on "
        f"{added.prefixes} topic prefix(es); credentials: rolltape principal show {escape(name)}"
    )
