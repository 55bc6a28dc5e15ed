"""`rolltape serve otlp`: receive OpenTelemetry GenAI traces over OTLP/HTTP as sessions."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from rolltape.infra.cli._common import CliError, err_console, settings, stop_on_signals
from rolltape.infra.commands.otlp_listen import GRPC_PORT, HTTP_PORT
from rolltape.infra.commands.otlp_receive import (
    FAMILIES,
    ReceiverReady,
    check_family_option,
    receive_otlp,
)


def serve(
    port: Annotated[
        int,
        typer.Option(
            min=0, max=65535, help="The port to listen on for OTLP/HTTP; 0 picks a free one."
        ),
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
    check_family_option(family)
    s = settings()

    def no_grpc() -> None:
        err_console.print(
            "gRPC is off: grpcio is not installed (pip install 'rolltape[otlp]'); receiving "
            "OTLP/HTTP only",
            highlight=False,
        )

    def ready(at: ReceiverReady) -> None:
        if at.connection is not None:
            target = f"recording to {at.connection} (topic prefix {at.topic_prefix})"
        else:
            target = (
                f"no broker is running: recording to the spool ({at.spool}), "
                "which the next `rolltape serve otlp` with a broker sends"
            )
        bound = at.listening
        processes = f" in {at.workers} worker processes" if at.workers > 1 else ""
        grpc_part = f", OTLP/gRPC on {host}:{bound.grpc}" if bound.grpc is not None else ""
        err_console.print(
            f"receiving OTLP/HTTP on http://{host}:{bound.http}/v1/traces and /v1/logs"
            f"{grpc_part}{processes}; counters at http://{host}:{bound.http}/metrics; "
            f"{escape(target)}; Ctrl-C stops",
            highlight=False,
        )

    ended = receive_otlp(
        s,
        host=host,
        port=port,
        grpc_port=grpc_port,
        grpc=grpc,
        workers=workers,
        family=family,
        linger=linger,
        idle=idle,
        join_wait=join_wait,
        subject_attribute=subject_attribute,
        stop=stop_on_signals,
        on_ready=ready,
        on_no_grpc=no_grpc,
    )
    err_console.print(f"stopped: {escape(ended.stats_line)}", highlight=False)
    if ended.failure is not None:
        raise CliError(
            f"{ended.failure}, so the receiver stopped: the batches it had not acknowledged "
            "are sent again by their exporters once a receiver is back; start `rolltape otlp "
            "serve` again"
        )
