"""`rolltape broker up | down | status | logs`."""

from __future__ import annotations

import typer

from rolltape.infra.broker import broker_answers_sync, current_connection, managed_broker
from rolltape.infra.cli._common import CliError, console, err_console, settings
from rolltape.infra.commands.broker import BrokerUp, broker_up
from rolltape.schemas import Role

app = typer.Typer(help="Run or inspect the Kafka broker rolltape records to.", no_args_is_help=True)


@app.command()
def up() -> None:
    """Start the managed broker (unless ROLLTAPE_BOOTSTRAP names one), create the topics and the
    judge's signing key.

    The managed broker authenticates every client (SASL/SCRAM-SHA-512) and lets each principal
    write only its own trust domain; `rolltape principal list` shows who exists."""
    _print_up(broker_up(settings(), as_admin=True, on_step=_step))


def _step(line: str) -> None:
    """A slow step about to start (the first start fetches the Kafka jars): on stderr."""
    err_console.print(line, markup=False)


def _print_up(done: BrokerUp) -> None:
    """What `broker up` did, line by line (the demo does the same work and prints a summary)."""
    if done.managed is None:
        console.print(f"using the cluster at {done.cluster}")
    else:
        state = done.managed.state
        console.print(
            f"Kafka {state.kafka_version} (KRaft) is up at {state.bootstrap} (pid {state.pid}); "
            f"logs in {done.managed.log_dir}"
        )
        if not state.secure:
            err_console.print(
                "[yellow]warning:[/yellow] this broker's storage was formatted before rolltape "
                "provisioned principals: it runs PLAINTEXT and enforces no ACLs. To secure "
                f"it, stop it and remove {done.managed.home} (its records go with it)."
            )
    for status in done.topics or ():
        note = f"  [yellow]{status.note}[/yellow]" if status.note else ""
        console.print(
            f"  {status.topic:<32} {status.action.value:<15} {status.partitions} partitions{note}"
        )
    if done.not_provisioned:
        err_console.print(f"[yellow]topics not provisioned:[/yellow] {done.not_provisioned}")
    if done.principals:
        names = ", ".join(f"{name} ({role.value})" for name, role in done.principals)
        console.print(f"principals: {names}; secrets in {done.principals_file} (mode 0600)")
    new = "new judge key" if done.judge_key_created else "judge key"
    console.print(f"{new} {done.judge_key_id}: public key in {done.judge_public_key}")
    console.print(f"bootstrap: {done.bootstrap}")


@app.command()
def down() -> None:
    """Stop the managed broker cleanly; its data stays for the next `up`."""
    cfg = settings()
    if cfg.bootstrap:
        raise CliError(
            f"ROLLTAPE_BOOTSTRAP={cfg.bootstrap} is set: that cluster is not rolltape's to stop "
            "(unset the variable to stop the managed broker)"
        )
    stopped = managed_broker(cfg).stop()
    console.print("broker stopped" if stopped else "no managed broker was running")


@app.command()
def status() -> None:
    """Exit 0 and print the bootstrap address only when a broker answers."""
    connection = current_connection(settings(), Role.READER)
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
