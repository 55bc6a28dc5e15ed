"""`rolltape serve console`: the web console."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from rolltape.infra.cli._common import err_console, settings, stop_on_signals
from rolltape.infra.commands.console import CONSOLE_PORT, ConsoleListening, serve_console


def serve(
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="The port to listen on; 0 picks a free one.")
    ] = CONSOLE_PORT,
    host: Annotated[
        str,
        typer.Option(
            help="Interface to listen on. Loopback by default: anything else lets the network "
            "read what the reader principal may."
        ),
    ] = "127.0.0.1",
) -> None:
    """Serve the web console: the sessions the read model holds, with filters and search in
    the URL, each session's timeline, verdicts per judge version, chains and raw events.
    Reads the read model (start `rolltape serve index` beside it) and the log as the reader
    principal. Runs until Ctrl-C or SIGTERM."""
    s = settings()

    def ready(at: ConsoleListening) -> None:
        err_console.print(f"console on {at.url} (the sessions of {s.topic_prefix}.*)")
        if not at.loopback:
            err_console.print(
                f"warning: listening on {at.host}, not loopback: whoever reaches this address "
                "reads what the reader principal may read"
            )

    async def main() -> None:
        await serve_console(s, stop_on_signals(), host=host, port=port, on_ready=ready)

    asyncio.run(main())
