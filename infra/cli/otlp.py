"""`rolltape serve otlp`: receive OpenTelemetry GenAI traces over OTLP/HTTP as sessions."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.markup import escape

from rolltape.infra._gc import RECEIVER_YOUNG_THRESHOLD, tune_collector
from rolltape.infra.broker import current_connection
from rolltape.infra.cli._common import CliError, err_console, settings, stop_on_signals
from rolltape.infra.commands.otlp_listen import (
    GRPC_PORT,
    HTTP_PORT,
    Listening,
    grpc_available,
)
from rolltape.infra.commands.otlp_listen import serve as serve_receiver
from rolltape.infra.commands.otlp_serve import (
    ReceiverConfig,
    ReceiverFront,
    open_receiver,
    otlp_dir,
    state_lock,
)
from rolltape.infra.commands.otlp_workers import WorkerPool
from rolltape.infra.settings import Settings
from rolltape.producers.parsing import FAMILIES, UnknownFamilyError, check_family
from rolltape.schemas import Role
from rolltape.schemas.clients import KafkaConnection


def serve(
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="The OTLP/HTTP port; 0 picks a free one.")
    ] = HTTP_PORT,
    grpc_port: Annotated[
        int, typer.Option(min=0, max=65535, help="The OTLP/gRPC port; 0 picks a free one.")
    ] = GRPC_PORT,
    grpc: Annotated[
        bool, typer.Option("--grpc/--no-grpc", help="Also receive OTLP over gRPC.")
    ] = True,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    family: Annotated[
        str | None,
        typer.Option(
            help=f"The model family whose text tool calls to parse: {', '.join(sorted(FAMILIES))}."
        ),
    ] = None,
    linger: Annotated[
        float, typer.Option(min=0, help="Seconds a session stays open after its root span.")
    ] = 5.0,
    idle: Annotated[
        float,
        typer.Option(
            min=1,
            help="Seconds without spans after which a trace whose root span never came ends as interrupted.",
        ),
    ] = 300.0,
    join_wait: Annotated[
        float,
        typer.Option(
            min=0,
            help="Seconds an inference span that came without content waits for the log records "
            "carrying it (instrumentations that send content as log events).",
        ),
    ] = 10.0,
    subject_attribute: Annotated[
        str | None,
        typer.Option(
            help="A span or resource attribute naming each trace's subject (e.g. enduser.id): "
            "its sessions' content is sealed under a data key of their own, erasable by subject.",
        ),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            max=64,
            help="Processes that record spans (each trace in one): more than one for more spans "
            "per second than one interpreter maps and seals, on a machine with cores to spare.",
        ),
    ] = 1,
) -> None:
    """Receive OTLP traces and logs, over HTTP (POST /v1/traces and /v1/logs, protobuf or JSON,
    gzip) and gRPC, and record every trace with GenAI spans as a session: inference spans as
    turns (their content from the spans or from the log records emitted in them), execute_tool
    spans as tool calls and results, evaluation events as feedback; OpenInference spans too. A
    batch is acknowledged once its records are on the broker or spooled. What is not recorded is
    counted by reason at GET /metrics and in the line printed at stop. Point an agent's exporter
    at it with OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:PORT. Ctrl-C or SIGTERM stops."""
    if family is not None:
        try:
            check_family(family)
        except UnknownFamilyError as exc:
            raise UnknownFamilyError(f"--family: {exc}") from None
    s = settings()
    connection = current_connection(s, Role.AGENT)
    config = ReceiverConfig(
        family=family,
        linger_s=linger,
        idle_s=idle,
        join_wait_s=join_wait,
        subject_attribute=subject_attribute,
    )
    if grpc and not grpc_available():
        err_console.print(
            "gRPC is off: grpcio is not installed (pip install 'rolltape[otlp]'); receiving "
            "OTLP/HTTP only",
            highlight=False,
        )
        grpc = False
    with state_lock(otlp_dir(s)):
        _run(s, connection, config, host, port, grpc_port if grpc else None, workers)


def _run(
    s: Settings,
    connection: KafkaConnection | None,
    config: ReceiverConfig,
    host: str,
    port: int,
    grpc_port: int | None,
    workers: int,
) -> None:
    receiver: ReceiverFront = (
        WorkerPool(s, config, workers) if workers > 1 else open_receiver(s, config)
    )
    if connection is not None:
        target = f"recording to {connection} (topic prefix {s.topic_prefix})"
    else:
        target = (
            f"no broker is running: recording to the spool ({s.resolved_spool_dir() / 'otlp'}), "
            "which the next `rolltape serve otlp` with a broker sends"
        )

    def ready(bound: Listening) -> None:
        processes = f" in {workers} worker processes" if workers > 1 else ""
        grpc_part = f", OTLP/gRPC on {host}:{bound.grpc}" if bound.grpc is not None else ""
        err_console.print(
            f"receiving OTLP/HTTP on http://{host}:{bound.http}/v1/traces and /v1/logs"
            f"{grpc_part}{processes}; counters at http://{host}:{bound.http}/metrics; "
            f"{escape(target)}; Ctrl-C stops",
            highlight=False,
        )

    async def main() -> None:
        stop = stop_on_signals()
        if isinstance(receiver, WorkerPool):
            await receiver.start()
        try:
            await serve_receiver(receiver, host, port, stop, ready, grpc_port=grpc_port)
        except OSError:
            if isinstance(receiver, WorkerPool):
                stop.set()
                await receiver.run(stop)  # stops the workers it started
            raise

    tune_collector(RECEIVER_YOUNG_THRESHOLD)  # a request's worth between collections (_gc.py)
    try:
        asyncio.run(main())
    except OSError as exc:  # the port is taken or not ours to bind: say which option to change
        receiver.shutdown()
        ports = f"{port}" if grpc_port is None else f"{port} (HTTP) or {grpc_port} (gRPC)"
        raise CliError(
            f"cannot listen on {host}:{ports}: {exc}; pick another --port or --grpc-port (0 for "
            "a free one), or --no-grpc"
        ) from exc
    ended = receiver.shutdown()
    err_console.print(f"stopped: {escape(receiver.stats.line(len(ended)))}", highlight=False)
    if isinstance(receiver, WorkerPool) and receiver.failure is not None:
        raise CliError(
            f"{receiver.failure}, so the receiver stopped: the batches it had not acknowledged "
            "are sent again by their exporters once a receiver is back; start `rolltape otlp "
            "serve` again"
        )
