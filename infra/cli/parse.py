"""`rolltape parse`: a raw completion split into content, reasoning, tool calls and problems."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from rolltape.infra.cli._common import CliError
from rolltape.infra.commands.parse import FAMILIES, parse_completion


def parse_command(
    family: Annotated[
        str,
        typer.Option(
            "--family",
            help=f"The model family whose text tool calls to parse: {', '.join(sorted(FAMILIES))}.",
        ),
    ],
    source: Annotated[
        str, typer.Argument(help="A file holding the completion's text, or - for stdin.")
    ] = "-",
    tools: Annotated[
        Path | None,
        typer.Option(
            "--tools",
            help="A JSON file holding the request's `tools` list (OpenAI form or {name, "
            "parameters}): formats that write values as text type them by it.",
        ),
    ] = None,
) -> None:
    """Parse a raw completion of an open model and print the result as JSON: content,
    reasoning, tool calls (id, name, arguments) and the blocks that could not be read (raw text,
    offset, why). Exits 1 when there were problems, so scripts can tell."""
    specs = _tools(tools) if tools is not None else []
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
    result = parse_completion(text, family, specs)
    sys.stdout.write(json.dumps(result.model_dump(mode="json"), ensure_ascii=False, indent=2))
    sys.stdout.write("\n")
    if result.problems:
        raise typer.Exit(1)


def _tools(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise CliError(f"--tools: {path} is not a file: give a JSON file holding the tools list")
    try:
        listed = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CliError(f"--tools: {path} is not JSON ({exc})") from exc
    if not isinstance(listed, list) or not all(isinstance(t, dict) for t in listed):
        raise CliError(f"--tools: {path} must hold a JSON list of tool objects")
    return listed
