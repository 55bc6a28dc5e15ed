"""The `rolltape` command: each package's commands mounted on one typer app."""

from __future__ import annotations

import typer

from rolltape.infra.cli import (
    bench,
    broker,
    demo,
    export,
    feed,
    harness,
    importing,
    inspect,
    parse,
    project,
    replay,
    report,
    schemas,
    worker,
)

app = typer.Typer(
    name="rolltape",
    help="A flight recorder for LLM agents and training runs, on Apache Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(broker.app, name="broker")
app.add_typer(schemas.app, name="schemas")
app.add_typer(bench.app, name="bench")
app.add_typer(importing.app, name="import")
app.add_typer(feed.app, name="feed")
app.add_typer(harness.app, name="harness")
app.command()(inspect.tail)
app.command()(inspect.verify)
app.command()(demo.demo)
app.command()(worker.worker)
app.command()(export.export)
app.command()(replay.replay)
app.command()(project.project)
app.command()(report.report)
app.command(name="parse")(parse.parse_command)


def main() -> None:
    app()


__all__ = ["app", "main"]
