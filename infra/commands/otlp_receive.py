"""`rolltape serve otlp` end to end: the receiver (one process, or a pool of workers) bound to
the broker there is (else the spool), listening over OTLP/HTTP and gRPC until told to stop.

The receiver (`otlp_serve`), its listeners (`otlp_listen`) and its worker pool (`otlp_workers`)
each do one part; this puts them together as the command runs them, so the CLI only prints.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rolltape.infra._errors import InfraError
from rolltape.infra._gc import RECEIVER_YOUNG_THRESHOLD, tune_collector
from rolltape.infra.broker import current_connection
from rolltape.infra.commands.otlp_listen import Listening, grpc_available
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

__all__ = [
    "FAMILIES",
    "ReceiverListenError",
    "ReceiverReady",
    "ReceiverRun",
    "check_family_option",
    "receive_otlp",
]


class ReceiverListenError(InfraError):
    """The receiver's port is taken or not ours to bind; the message says which option to
    change."""


@dataclass(frozen=True)
class ReceiverReady:
    """Where the receiver listens and what it records to, once it listens."""

    listening: Listening
    workers: int
    connection: str | None
    """The broker it records to; None when none runs and it records to the spool."""
    spool: Path
    topic_prefix: str


@dataclass(frozen=True)
class ReceiverRun:
    """How a receiver ended: its counters' line, and what stopped its worker pool (None when
    nothing failed)."""

    stats_line: str
    failure: str | None


def check_family_option(family: str | None) -> None:
    """UnknownFamilyError, naming --family, unless `family` is None or a known family."""
    if family is not None:
        try:
            check_family(family)
        except UnknownFamilyError as exc:
            raise UnknownFamilyError(f"--family: {exc}") from None


def receive_otlp(
    settings: Settings,
    *,
    host: str,
    port: int,
    grpc_port: int,
    grpc: bool,
    workers: int,
    family: str | None,
    linger: float,
    idle: float,
    join_wait: float,
    subject_attribute: str | None,
    stop: Callable[[], asyncio.Event],
    on_ready: Callable[[ReceiverReady], None],
    on_no_grpc: Callable[[], None],
) -> ReceiverRun:
    """Receive OTLP until the event `stop()` makes (in the running loop) is set, one receiver
    per state folder. gRPC is served when `grpc` and grpcio is installed (`on_no_grpc` is told
    when it is not); `on_ready` when the listeners are bound."""
    s = settings
    connection = current_connection(s, Role.AGENT)
    config = ReceiverConfig(
        family=family,
        linger_s=linger,
        idle_s=idle,
        join_wait_s=join_wait,
        subject_attribute=subject_attribute,
    )
    if grpc and not grpc_available():
        on_no_grpc()
        grpc = False
    with state_lock(otlp_dir(s)):
        receiver: ReceiverFront = (
            WorkerPool(s, config, workers) if workers > 1 else open_receiver(s, config)
        )
        target = str(connection) if connection is not None else None
        serve_grpc = grpc_port if grpc else None

        def ready(bound: Listening) -> None:
            on_ready(
                ReceiverReady(
                    listening=bound,
                    workers=workers,
                    connection=target,
                    spool=s.resolved_spool_dir() / "otlp",
                    topic_prefix=s.topic_prefix,
                )
            )

        async def main() -> None:
            stopping = stop()
            if isinstance(receiver, WorkerPool):
                await receiver.start()
            try:
                await serve_receiver(receiver, host, port, stopping, ready, grpc_port=serve_grpc)
            except OSError:
                if isinstance(receiver, WorkerPool):
                    stopping.set()
                    await receiver.run(stopping)  # stops the workers it started
                raise

        tune_collector(RECEIVER_YOUNG_THRESHOLD)  # a request's worth between collections (_gc.py)
        try:
            asyncio.run(main())
        except OSError as exc:  # the port is taken or not ours to bind: say which option to change
            receiver.shutdown()
            ports = f"{port}" if serve_grpc is None else f"{port} (HTTP) or {serve_grpc} (gRPC)"
            raise ReceiverListenError(
                f"cannot listen on {host}:{ports}: {exc}; pick another --port or --grpc-port "
                "(0 for a free one), or --no-grpc"
            ) from exc
        ended = receiver.shutdown()
        failure = receiver.failure if isinstance(receiver, WorkerPool) else None
        return ReceiverRun(stats_line=receiver.stats.line(len(ended)), failure=failure)
