"""`rolltape parse`: a raw completion split into content, reasoning, tool calls and problems."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from rolltape.infra.cli._common import CliError
from rolltape.producers.parsing import FAMILIES, parse


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
    try:
        if source == "-":  # bytes decoded strictly (stdin's own decoder may let them past as
            # surrogates), newlines as a text-mode read gives them, like the file's below
            raw = sys.stdin.buffer.read().decode("utf-8")
            text = raw.replace("\r\n", "\n").replace("\r", "\n")
        else:
            path = Path(source)
            if not path.is_file():
                raise CliError(
                    f"{source} is not a file: give the completion's text file, or - for stdin"
                )
            text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        where = "stdin" if source == "-" else source
        raise CliError(f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    result = parse(text, family)
    sys.stdout.write(json.dumps(result.model_dump(mode="json"), ensure_ascii=False, indent=2))
    sys.stdout.write("\n")
    if result.problems:
        raise typer.Exit(1)
