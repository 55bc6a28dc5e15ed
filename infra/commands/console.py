"""`rolltape serve console`: the web console served until told to stop.

On loopback unless told otherwise: the console shows everything the reader principal may read
(and a subject's content where this machine holds the KEK), so listening elsewhere is a choice
the caller states with `host`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from rolltape.infra._errors import InfraError
from rolltape.infra.settings import Settings

CONSOLE_PORT = 8321


class ConsoleError(InfraError):
    """The console cannot be served as asked (its address cannot be listened on)."""


@dataclass(frozen=True)
class ConsoleListening:
    """Where the console answers."""

    host: str
    port: int
    loopback: bool

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"


async def serve_console(
    settings: Settings,
    stop: asyncio.Event,
    *,
    host: str = "127.0.0.1",
    port: int = CONSOLE_PORT,
    on_ready: Callable[[ConsoleListening], None] | None = None,
) -> ConsoleListening:
    """Serve the console on `host:port` (0 picks a free port) until `stop` is set."""
    try:  # the console extra: the core install's CLI must start without it
        from aiohttp import web

        from rolltape.infra.console import CONSOLE_KEY, allowed_hosts, console_app, is_loopback
    except ModuleNotFoundError as exc:
        raise ConsoleError(
            f"the console needs {exc.name}: pip install 'rolltape[console]'"
        ) from exc
    app = console_app(settings)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            raise ConsoleError(
                f"cannot listen on {host}:{port} ({exc.strerror or exc}): choose a free port "
                "with --port (0 picks one) or an address of this machine with --host"
            ) from exc
        bound = int(runner.addresses[0][1])
        app[CONSOLE_KEY].hosts = allowed_hosts(host, bound)
        listening = ConsoleListening(host, bound, is_loopback(host))
        if on_ready is not None:
            on_ready(listening)
        await stop.wait()
        return listening
    finally:
        await runner.cleanup()
