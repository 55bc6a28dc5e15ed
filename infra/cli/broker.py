"""`rolltape broker up | down | status | logs`."""

from __future__ import annotations

import typer

from rolltape.infra.broker import (
    BrokerUnavailable,
    broker_answers_sync,
    current_connection,
    managed_broker,
    principal_store,
    require_connection,
)
from rolltape.infra.cli._common import console, err_console, settings, user_errors
from rolltape.infra.kafka.topics import provision
from rolltape.infra.keys import judge_key
from rolltape.schemas import Role

app = typer.Typer(help="Run or inspect the Kafka broker rolltape records to.", no_args_is_help=True)


@app.command()
def up() -> None:
    """Start the managed broker (unless ROLLTAPE_BOOTSTRAP names one) and create the topics.

    The managed broker authenticates every client (SASL/SCRAM-SHA-512) and lets each principal
    write only its own trust domain; `rolltape principal list` shows who exists."""
    cfg = settings()
    with user_errors():
        if cfg.bootstrap:
            admin = require_connection(cfg, Role.ADMIN)
            if not broker_answers_sync(admin):
                raise BrokerUnavailable(
                    f"ROLLTAPE_BOOTSTRAP={cfg.bootstrap} does not answer as {admin}; start that "
                    "cluster, check its security settings, or unset the variable to let rolltape "
                    "run its own broker"
                )
            console.print(f"using the cluster at {admin}")
        else:
            broker = managed_broker(cfg)
            state = broker.start()
            console.print(
                f"Kafka {state.kafka_version} (KRaft) is up at {state.bootstrap} (pid {state.pid}); "
                f"logs in {broker.log_dir}"
            )
            if not state.secure:
                err_console.print(
                    "[yellow]warning:[/yellow] this broker's storage was formatted before rolltape "
                    "provisioned principals: it runs PLAINTEXT and enforces no ACLs. To secure "
                    f"it, stop it and remove {broker.home} (its records go with it)."
                )
        for status in provision(cfg):
            note = f"  [yellow]{status.note}[/yellow]" if status.note else ""
            console.print(
                f"  {status.topic:<32} {status.action.value:<15} {status.partitions} partitions{note}"
            )
        store = principal_store(cfg)
        if store is not None:
            names = ", ".join(f"{p.name} ({p.role.value})" for p in store.principals())
            console.print(f"principals: {names}; secrets in {store.path} (mode 0600)")
        key = judge_key(cfg)
        if key.exists():
            console.print(f"judge key {key.key_id()}: public key in {key.public_path}")
        else:
            kid = key.create()
            console.print(f"new judge key {kid}: public key in {key.public_path}")
        console.print(f"bootstrap: {require_connection(cfg, Role.ADMIN).bootstrap}")


@app.command()
def down() -> None:
    """Stop the managed broker cleanly; its data stays for the next `up`."""
    cfg = settings()
    if cfg.bootstrap:
        err_console.print("ROLLTAPE_BOOTSTRAP is set: that cluster is not rolltape's to stop.")
        raise typer.Exit(2)
    with user_errors():
        stopped = managed_broker(cfg).stop()
    console.print("broker stopped" if stopped else "no managed broker was running")


@app.command()
def status() -> None:
    """Exit 0 and print the bootstrap address only when a broker answers."""
    cfg = settings()
    with user_errors():
        connection = current_connection(cfg, Role.READER)
    if connection is None:
        err_console.print("no broker: run `rolltape broker up` or set ROLLTAPE_BOOTSTRAP")
        raise typer.Exit(1)
    if not broker_answers_sync(connection):
        err_console.print(f"the broker at {connection} does not answer")
        raise typer.Exit(1)
    console.print(connection.bootstrap)


@app.command()
def logs(
    lines: int = typer.Option(50, "--lines", "-n", help="How many lines of each log."),
) -> None:
    """Show the end of the managed broker's logs."""
    broker = managed_broker(settings())
    console.print(broker.tail_log(lines), markup=False)
