"""`rolltape serve index`, `rolltape index status | rebuild`: the read model's indexer."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from rolltape.infra.cli._common import console, err_console, settings, stop_on_signals
from rolltape.infra.commands.index import (
    IndexProgress,
    index_status,
    rebuild_index,
    serve_index,
)

app = typer.Typer(
    help="The read model's indexer: how far behind the log it is, and rebuilding it from the log.",
    no_args_is_help=True,
)


def _clock(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def serve() -> None:
    """Keep the read model (ROLLTAPE_INDEX_URL; default a SQLite file in the state folder) up to
    date with the log: every session's tags, status, times, chains and offsets, verdicts,
    filter outcomes and rule firings per judge version, tools, worlds, and its text for search.
    Indexers in one group share the partitions; a restart goes on from the store's positions.
    Runs until Ctrl-C or SIGTERM."""
    s = settings()

    def started(bootstrap: str, store: str) -> None:
        err_console.print(f"indexing {s.topic_prefix}.* from {bootstrap} into {escape(store)}")

    async def main() -> IndexProgress:
        return await serve_index(s, stop_on_signals(), on_started=started)

    progress = asyncio.run(main())
    err_console.print(f"indexed {progress.records} records in {progress.batches} batches")


@app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON: every partition.")] = False,
) -> None:
    """How far the read model is behind the log, partition by partition, and the broker time of
    the last record it indexed."""
    found = asyncio.run(index_status(settings()))
    if as_json:
        print(json.dumps(found.model_dump(mode="json"), sort_keys=True))
        return
    console.print(
        f"read model {escape(found.store)} (schema v{found.schema_version}): "
        f"{found.sessions} sessions; last record indexed {_clock(found.last_ms)} UTC"
    )
    console.print(
        f"group {escape(found.group)}: {found.members} indexer(s) running; "
        f"{found.lag} records behind the log"
    )
    if found.unreadable or found.tampered:
        console.print(
            f"left out: {found.unreadable} records that are not envelopes, "
            f"{found.tampered} that do not match their hash"
        )
    table = Table(title_justify="left", box=None, pad_edge=False)
    for column in ("topic", "partition", "indexed to", "end", "lag", "last indexed (UTC)"):
        table.add_column(column, no_wrap=True)
    empty = [p for p in found.partitions if p.end == 0 and p.indexed_to is None]
    for p in found.partitions:
        if p in empty:
            continue
        table.add_row(
            p.topic,
            str(p.partition),
            "-" if p.indexed_to is None else str(p.indexed_to),
            str(p.end),
            str(p.lag),
            _clock(p.last_ms),
        )
    console.print(table)
    if empty:
        console.print(f"and {len(empty)} empty partitions (--json lists every partition)")


@app.command()
def rebuild(
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            help="The read model to write: this store (sqlite:PATH or postgresql://...) "
            "instead of the settings' one, while its indexers run.",
        ),
    ] = None,
) -> None:
    """Drop the read model and build it again from the log, up to where the log ends now: the
    same rows the live indexer wrote. An upgrade of its schema is this rebuild. Refused while
    indexers write the store (stop them first, or give --store)."""

    def batch(progress: IndexProgress) -> None:
        if progress.batches and progress.batches % 20 == 0:
            err_console.print(f"  {progress.records} records indexed")

    where, progress = asyncio.run(rebuild_index(settings(), url=store, on_batch=batch))
    err_console.print(f"rebuilt {escape(where)} from {progress.records} records")
