"""`rolltape demo`."""

from __future__ import annotations

import typer
from rich.table import Table

from rolltape.infra.cli._common import console, settings, user_errors
from rolltape.infra.demo import run_demo


def demo() -> None:
    """Start the broker if needed, record an agent and a training session, verify both chains."""
    with user_errors():
        result = run_demo(settings())
    ids = [c.session_id for c in result.chains] or ["-"]
    table = Table(title=f"recorded to {result.bootstrap}", title_justify="left")
    for col in ("session", "stream", "records", "ended", "head hash", "chain"):
        # Session ids are what a reader copies into `verify --session`: never truncate them.
        table.add_column(
            col, no_wrap=True, min_width=len(max(ids, key=len)) if col == "session" else None
        )
    for c in result.chains:
        table.add_row(
            c.session_id,
            c.stream,
            str(c.records),
            "yes" if c.ended else "no",
            c.head_hash[:12],
            "[green]intact[/green]" if c.ok else f"[red]{len(c.breaks)} break(s)[/red]",
        )
    console.print(table)
    if not result.ok:
        console.print("[red]demo: a chain did not verify[/red]")
        raise typer.Exit(1)
    console.print("demo: all chains verified")
