"""`rolltape log tail`: records as they arrive, one line each."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt

import typer
from rich.markup import escape

from rolltape.infra.cli._common import console, err_console, settings
from rolltape.infra.commands.tail import (
    CHAINED_STREAMS,
    RawLine,
    Stream,
    TailLine,
    UnreadableLine,
)
from rolltape.infra.commands.tail import tail as tail_records


def tail(
    stream: list[Stream] = typer.Option(
        list(CHAINED_STREAMS), "--stream", help="A stream of the log to show (repeatable)."
    ),
    session: str | None = typer.Option(
        None, "--session", "-s", help="A session id: only its records."
    ),
    from_beginning: bool = typer.Option(
        False, "--from-beginning", help="Start at the oldest record."
    ),
    follow: bool = typer.Option(True, "--follow/--no-follow", help="Keep waiting for new records."),
    raw: bool = typer.Option(False, "--raw", help="Print the record bytes instead of a summary."),
) -> None:
    """Show records as they arrive, one line each."""
    cfg = settings()

    def ready() -> None:
        where = "the oldest record" if from_beginning else "now"
        more = "; Ctrl-C stops" if follow else ""
        err_console.print(f"reading {', '.join(s.value for s in stream)} from {where}{more}")

    def show(line: TailLine) -> None:
        if isinstance(line, RawLine):
            console.print(line.value.decode(errors="replace"), markup=False, soft_wrap=True)
            return
        when = _clock(line.broker_ts_ms)
        if isinstance(line, UnreadableLine):
            console.print(
                f"{when} [red]{line.stream:<8} unreadable at {line.position}: {escape(line.error[:100])}[/red]"
            )
            return
        console.print(
            f"[dim]{when}[/dim] {line.stream:<8} [cyan]{line.session_id[:12]}[/cyan] "
            f"#{line.seq:<4} [bold]{line.type:<15}[/bold] {escape(line.summary)}",
            soft_wrap=True,
        )

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            tail_records(
                cfg,
                stream,
                session_id=session,
                from_beginning=from_beginning,
                follow=follow,
                raw=raw,
                on_ready=ready,
                on_line=show,
            )
        )


def _clock(broker_ts_ms: int) -> str:
    """When the broker took the record, to the millisecond (UTC)."""
    return dt.datetime.fromtimestamp(broker_ts_ms / 1000, dt.UTC).strftime("%H:%M:%S.%f")[:-3]
