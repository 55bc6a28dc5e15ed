"""`rolltape broker up | down | status | logs`."""

from __future__ import annotations

import typer

from rolltape.infra.broker import (
    BrokerUnavailable,
    broker_answers_sync,
    current_bootstrap,
    managed_broker,
)
from rolltape.infra.cli._common import console, err_console, settings, user_errors
from rolltape.infra.topics import ensure_topics_sync

app = typer.Typer(help="Run or inspect the Kafka broker rolltape records to.", no_args_is_help=True)


@app.command()
def up() -> None:
    """Start the managed broker (unless ROLLTAPE_BOOTSTRAP names one) and create the topics."""
    cfg = settings()
    with user_errors():
        if cfg.bootstrap:
            bootstrap = cfg.bootstrap
            if not broker_answers_sync(bootstrap):
                raise BrokerUnavailable(
                    f"ROLLTAPE_BOOTSTRAP={bootstrap} does not answer; start that cluster or unset "
                    "the variable to let rolltape run its own broker"
                )
            console.print(f"using the cluster at {bootstrap}")
        else:
            broker = managed_broker(cfg)
            state = broker.start()
            bootstrap = state.bootstrap
            console.print(
                f"Kafka {state.kafka_version} (KRaft) is up at {bootstrap} (pid {state.pid}); "
                f"logs in {broker.log_dir}"
            )
        for status in ensure_topics_sync(bootstrap, cfg):
            note = f"  [yellow]{status.note}[/yellow]" if status.note else ""
            console.print(
                f"  {status.topic:<32} {status.action.value:<15} {status.partitions} partitions{note}"
            )
        console.print(f"bootstrap: {bootstrap}")


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
    bootstrap = current_bootstrap(cfg)
    if bootstrap is None:
        err_console.print("no broker: run `rolltape broker up` or set ROLLTAPE_BOOTSTRAP")
        raise typer.Exit(1)
    if not broker_answers_sync(bootstrap):
        err_console.print(f"the broker at {bootstrap} does not answer")
        raise typer.Exit(1)
    console.print(bootstrap)


@app.command()
def logs(
    lines: int = typer.Option(50, "--lines", "-n", help="How many lines of each log."),
) -> None:
    """Show the end of the managed broker's logs."""
    broker = managed_broker(settings())
    console.print(broker.tail_log(lines), markup=False)
