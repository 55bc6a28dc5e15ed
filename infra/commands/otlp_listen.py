"""A receiver served on both OTLP transports at once: HTTP (otlp_http.py) and, when asked and
grpcio is installed, gRPC (otlp_grpc.py), until told to stop."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

from rolltape.infra.commands.otlp_http import start_http
from rolltape.infra.commands.otlp_serve import ReceiverFront

HTTP_PORT = 4318
GRPC_PORT = 4317
"""OTLP's ports (the OpenTelemetry Collector's defaults)."""


def grpc_available() -> bool:
    """Whether grpcio is installed (the `otlp` extra brings it)."""
    return importlib.util.find_spec("grpc") is not None


@dataclass(frozen=True)
class Listening:
    """Where a receiver listens: its HTTP port, and its gRPC port when it serves gRPC."""

    http: int
    grpc: int | None


async def serve(
    receiver: ReceiverFront,
    host: str,
    port: int,
    stop: asyncio.Event,
    on_ready: Callable[[Listening], None] | None = None,
    *,
    grpc_port: int | None = None,
) -> Listening:
    """Serve OTLP/HTTP on `port`, and OTLP/gRPC on `grpc_port` unless it is None, until `stop`
    is set; `on_ready` is called once both listen (port 0 picks a free one)."""
    runner, http = await start_http(receiver, host, port)
    server = None
    try:
        if grpc_port is not None:
            from rolltape.infra.commands.otlp_grpc import start_grpc

            server, bound = await start_grpc(receiver, host, grpc_port)
            listening = Listening(http, bound)
        else:
            listening = Listening(http, None)
        if on_ready is not None:
            on_ready(listening)
        await receiver.run(stop)
    finally:
        if server is not None:
            await server.stop(grace=5)
        await runner.cleanup()
    return listening
