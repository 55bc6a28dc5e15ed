"""`rolltape parse`: a raw completion split into content, reasoning, tool calls and problems."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from rolltape.infra.cli._common import err_console
from rolltape.producers.parsing import FAMILIES, UnknownFamilyError, parse


def parse_command(
    family: Annotated[
        str,
        typer.Option(
            "--family", "-f", help=f"The model family's format: {', '.join(sorted(FAMILIES))}."
        ),
    ],
    source: Annotated[
        str, typer.Argument(help="A file holding the completion's text, or - for stdin.")
    ] = "-",
) -> None:
    """Parse a raw completion of an open model and print the result as JSON: content,
    reasoning, tool calls (id, name, arguments) and the blocks that could not be read (raw text,
    offset, why). Exits 1 when there were problems, so scripts can tell."""
    if source == "-":
        text = sys.stdin.read()
    else:
        path = Path(source)
        if not path.is_file():
            err_console.print(f"[red]error:[/red] no such file: {escape(source)} (use - for stdin)")
            raise typer.Exit(2)
        text = path.read_text(encoding="utf-8")
    try:
        result = parse(text, family)
    except UnknownFamilyError as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    sys.stdout.write(json.dumps(result.model_dump(mode="json"), ensure_ascii=False, indent=2))
    sys.stdout.write("\n")
    if result.problems:
        raise typer.Exit(1)
