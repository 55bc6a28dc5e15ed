"""The `rolltape` command: each package's commands mounted on one typer app, every one of them
behind the one error boundary (`_common.error_boundary`), applied here at registration."""

from __future__ import annotations

from collections.abc import Callable
from inspect import cleandoc
from typing import Any

import typer

from rolltape.infra._gc import tune_collector
from rolltape.infra.cli import (
    _common,
    batch,
    bench,
    broker,
    cron,
    demo,
    env,
    erase,
    erasures,
    export,
    feed,
    harness,
    importing,
    keys,
    otlp,
    parse,
    principal,
    project,
    prompts,
    replay,
    report,
    rules,
    schemas,
    tail,
    verify,
    worker,
)

app = typer.Typer(
    name="rolltape",
    help="A flight recorder for LLM agents and training runs, on Apache Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(broker.app, name="broker")
app.add_typer(principal.app, name="principal")
app.add_typer(keys.app, name="keys")
app.add_typer(erasures.app, name="erasures")
app.add_typer(schemas.app, name="schemas")
app.add_typer(bench.app, name="bench")
app.add_typer(importing.app, name="import")
app.add_typer(feed.app, name="feed")
app.add_typer(harness.app, name="harness")
app.add_typer(rules.app, name="rules")
app.add_typer(otlp.app, name="otlp")
app.add_typer(cron.app, name="cron")
app.add_typer(env.app, name="env")
app.add_typer(batch.app, name="batch")
app.add_typer(prompts.app, name="prompts")


def _summary(command: Callable[..., Any]) -> str:
    """The first sentence of a command's docstring, on one line, for `rolltape --help`'s list
    (the whole docstring stays the command's own --help)."""
    text = " ".join((command.__doc__ or "").split())
    end = text.find(". ")
    return text if end == -1 else text[: end + 1]


def _reflowed(command: Callable[..., Any]) -> str:
    """A command's docstring with each paragraph on one line: the terminal wraps it to its
    width (typer keeps a paragraph's line breaks, written for the source's width, so an
    80-column terminal showed every long line broken in two)."""
    paragraphs = cleandoc(command.__doc__ or "").split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


for name, command in (
    ("tail", tail.tail),
    ("verify", verify.verify),
    ("demo", demo.demo),
    ("worker", worker.worker),
    ("export", export.export),
    ("verify-export", export.verify_export),
    ("purge-export", export.purge_export),
    ("replay", replay.replay),
    ("project", project.project),
    ("report", report.report),
    ("parse", parse.parse_command),
    ("erase", erase.erase),
):
    app.command(name=name, short_help=_summary(command), help=_reflowed(command))(command)


_CLIENT_LOGS_LEFT_AS_THEY_ARE = {
    worker.worker,  # its own log shows the client's lines, as an operator expects
    export.verify_export,  # offline, and what a third party runs: no Kafka client, no state
    export.purge_export,  # offline
    parse.parse_command,  # offline
    schemas.export,  # offline
    rules.calibrate_command,  # offline: trains here, no Kafka client
    rules.evaluate_command,  # offline
}


def _bound(typer_app: typer.Typer) -> None:
    """Put every command of `typer_app` and of its groups, however deep, behind the error
    boundary, and give each its help from its docstring (a one-sentence summary for the list)."""
    for info in typer_app.registered_commands:
        if info.callback is None:
            continue
        if info.short_help is None:
            info.short_help = _summary(info.callback)
        if info.help is None:
            info.help = _reflowed(info.callback)
        command = info.callback
        if command not in _CLIENT_LOGS_LEFT_AS_THEY_ARE:
            command = _common.client_logs_kept(command)
        info.callback = _common.error_boundary(command)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _bound(group.typer_instance)


_bound(app)


def main() -> None:
    """The `rolltape` console script (and `python -m rolltape.infra`)."""
    tune_collector()
    app()


__all__ = ["app", "main"]
