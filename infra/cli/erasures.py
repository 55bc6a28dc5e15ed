"""`rolltape erasures export FILE`: the signed list of erasures, for exports held elsewhere."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from rolltape.infra.broker import require_connection
from rolltape.infra.cli._common import console, settings
from rolltape.infra.commands.erasures import export_erasures
from rolltape.schemas import Role

app = typer.Typer(
    help="The erasures stream: what was erased, signed by the judge's key.",
    no_args_is_help=True,
)


@app.command()
def export(
    path: Annotated[Path, typer.Argument(help="Where to write the erasures (JSON lines).")],
) -> None:
    """Write every erasure record (the whole chain, signed with the judge's key) to a file.
    Whoever holds an export written before an erasure checks it with `rolltape verify-export
    DIR --public-key KEY --erasures FILE` and purges it with `rolltape purge-export`, offline."""
    cfg = settings()
    connection = require_connection(cfg, Role.READER)
    count = asyncio.run(export_erasures(connection, cfg.topic_prefix, path))
    console.print(f"{count} erasure record(s) written to {path}", highlight=False, soft_wrap=True)
