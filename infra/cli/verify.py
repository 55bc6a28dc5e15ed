"""`rolltape log verify`: chains read back from Kafka, with every gap, reordering, copy and edit."""

from __future__ import annotations

import asyncio

import typer
from rich.markup import escape
from rich.table import Table

from rolltape.infra.cli._common import console, err_console, settings
from rolltape.infra.commands.verify import CHAINED_STREAMS, LogVerification, Stream, verify_log


def verify(
    session: str | None = typer.Option(
        None, "--session", "-s", help="A session id: verify it alone."
    ),
    stream: list[Stream] = typer.Option(
        list(CHAINED_STREAMS), "--stream", help="A stream of the log to check (repeatable)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON: a machine-readable report."),
) -> None:
    """Read chains back from Kafka (every session, or one with --session) and report gaps, reordering, duplicates and tampering.

    Exit code: 0 when every chain is intact, 1 on any break, 2 on a usage or broker error.
    """
    found = asyncio.run(verify_log(settings(), stream, session_id=session))
    reports = found.reports
    broken = [r for r in reports if not r.ok]
    orphans = found.unattributed_counts
    if as_json:
        console.print(found.json(), markup=False, soft_wrap=True)
    else:
        _print_reports(found)
    if session and not reports:
        err_console.print(
            f"no records of session {session} on {', '.join(s.value for s in stream)}"
        )
        raise typer.Exit(1)
    if broken or orphans:
        raise typer.Exit(1)


LISTED_CHAINS = 50


def _print_reports(found: LogVerification) -> None:
    reports, unattributed, orphans = found.reports, found.unattributed, found.unattributed_counts
    shown = reports if len(reports) <= LISTED_CHAINS else [r for r in reports if not r.ok]
    table = Table(title="chains", title_justify="left")
    ids = [r.session_id for r in shown] or ["-"]
    for col in ("session", "stream", "records", "ended", "status"):
        # Session ids are what a reader copies into `verify --session`: never truncate them.
        table.add_column(
            col, no_wrap=True, min_width=len(max(ids, key=len)) if col == "session" else None
        )
    for r in shown:
        count = sum(r.break_counts.values())
        status = "[green]intact[/green]" if r.ok else f"[red]{count} break(s)[/red]"
        table.add_row(r.session_id, r.stream, str(r.records), "yes" if r.ended else "no", status)
    if shown:
        console.print(table)
    if len(shown) < len(reports):
        console.print(f"{len(reports) - len(shown)} intact chain(s) not listed (--json lists all)")
    for r in reports:
        for b in r.breaks:
            console.print(
                f"[red]{b.kind.value}[/red] {b.session_id} {b.stream} seq {b.seq}: {escape(b.detail)}"
                + (f" at {b.position}" if b.position else "")
            )
        hidden = sum(r.break_counts.values()) - len(r.breaks)
        if hidden > 0:
            console.print(
                f"… and {hidden} more break(s) in {r.session_id} {r.stream}: {r.break_counts}"
            )
    for b in unattributed:
        console.print(f"[red]{b.kind.value}[/red] at {b.position}: {escape(b.detail)}")
    hidden = sum(orphans.values()) - len(unattributed)
    if hidden > 0:
        console.print(f"… and {hidden} more record(s) that belong to no chain: {orphans}")
    total = sum(sum(r.break_counts.values()) for r in reports) + sum(orphans.values())
    console.print(
        f"{len(reports)} chain(s), {sum(r.records for r in reports)} record(s), {total} break(s)"
    )
