"""`rolltape schemas export DIR`."""

from __future__ import annotations

from pathlib import Path

import typer

from rolltape.infra.cli._common import console
from rolltape.infra.commands.schemas import export_schemas

app = typer.Typer(help="The event schemas.", no_args_is_help=True)


@app.command("export")
def export(
    directory: Path = typer.Argument(..., help="Folder to write *.schema.json into."),
) -> None:
    """Write JSON Schema for the envelope and every payload type."""
    for path in export_schemas(directory):
        console.print(str(path))
