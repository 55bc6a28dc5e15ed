"""The `rolltape` command: groups named for what a person wants to do (nouns, with verbs inside;
the services under `serve`), mounted on one typer app, every command behind the one error
boundary (`_common.error_boundary`), applied here at registration.

A group whose commands live in one module is that module's `app`; `serve` and `log` gather
commands from the modules of their features, here. docs/cli.md is generated from this app
(`scripts/cli_reference.py`), and `_group.RENAMED` says where each old name went."""

from __future__ import annotations

from collections.abc import Callable
from inspect import cleandoc
from typing import Any

import typer

from rolltape.infra._gc import tune_collector
from rolltape.infra.cli import (
    _common,
    bench,
    broker,
    console,
    cron,
    dataset,
    demo,
    env,
    feed,
    harness,
    importing,
    index,
    keys,
    lineage,
    otlp,
    parse,
    principal,
    privacy,
    project,
    prompts,
    replay,
    report,
    review,
    rules,
    schemas,
    sessions,
    tail,
    verify,
    worker,
)
from rolltape.infra.cli._flags import EXIT_CODES
from rolltape.infra.cli._group import Group

app = typer.Typer(
    name="rolltape",
    help="A flight recorder for LLM agents and training runs, on Apache Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=Group,
    epilog="Exit codes: "
    + "; ".join(f"{code} {text.split(';')[0]}" for code, text in EXIT_CODES.items())
    + ". Reference: docs/cli.md.",
)

#: The long-running services, started one way: `rolltape serve <service>`; each stops on Ctrl-C
#: or SIGTERM.
serve = typer.Typer(
    help="Start a long-running service: the worker, the OTLP receiver, the projector, the live "
    "feed to a trainer, the cron scheduler, an environment's Atropos server, the read model's "
    "indexer, the web console.",
    no_args_is_help=True,
)
_SERVICES: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("worker", worker.worker),
    ("otlp", otlp.serve),
    ("projector", project.project),
    ("feed", feed.feed),
    ("cron", cron.scheduler),
    ("env", env.serve),
    ("index", index.serve),
    ("console", console.serve),
)
for name, command in _SERVICES:
    serve.command(name)(command)

#: Reading the log itself: follow it, verify its chains, replay it through other judges.
log = typer.Typer(
    help="The event log: follow it, verify its hash chains, replay it through other judges.",
    no_args_is_help=True,
)
_LOG: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("tail", tail.tail),
    ("verify", verify.verify),
    ("replay", replay.replay),
)
for name, command in _LOG:
    log.command(name)(command)

# In the order `rolltape --help` lists them: what a new user does first comes first.
for name, group in (
    ("broker", broker.app),
    ("serve", serve),
    ("log", log),
    ("sessions", sessions.app),
    ("review", review.app),
    ("index", index.app),
    ("dataset", dataset.app),
    ("import", importing.app),
    ("env", env.app),
    ("cron", cron.app),
    ("harness", harness.app),
    ("rules", rules.app),
    ("prompts", prompts.app),
    ("privacy", privacy.app),
    ("principal", principal.app),
    ("keys", keys.app),
    ("schemas", schemas.app),
    ("bench", bench.app),
):
    app.add_typer(group, name=name)


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


_TOP_LEVEL: tuple[tuple[str, Callable[..., Any], str], ...] = (
    ("demo", demo.demo, "Record, judge, export and verify sample sessions end to end."),
    ("report", report.report, "A self-contained HTML report of a session, a task or a prompt."),
    ("parse", parse.parse_command, "Parse a raw completion of an open model; print it as JSON."),
    (
        "lineage",
        lineage.lineage,
        "The sessions a model learned from, or the models a subject's taught.",
    ),
)
for name, command, summary in _TOP_LEVEL:
    app.command(name=name, short_help=summary, help=_reflowed(command))(command)


_CLIENT_LOGS_LEFT_AS_THEY_ARE = {
    worker.worker,  # its own log shows the client's lines, as an operator expects
    dataset.verify_export,  # offline, and what a third party runs: no Kafka client, no state
    dataset.purge_export,  # offline
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
        group.cls = Group  # an old name typed in any group says where it went
        if group.typer_instance is not None:
            _bound(group.typer_instance)


_bound(app)


def main() -> None:
    """The `rolltape` console script (and `python -m rolltape.infra`)."""
    tune_collector()
    app()


__all__ = ["app", "main"]
