"""`rolltape otlp serve`: the OTLP/HTTP receiver that records GenAI traces as sessions.

POST /v1/traces with `application/x-protobuf` or `application/json`, optionally gzip. A batch is
acknowledged (200) only once every record it produced is acknowledged by the broker or spooled
to disk, and its span ids are journaled; until then the sender keeps it and retries. Answers
follow OTLP/HTTP: 200 with `partial_success` when spans were rejected (bad ids) or there is a
warning (no message content), 400 / 413 / 415 with a `google.rpc.Status` saying what was wrong
(not retried by exporters), 503 when the recorder could not make the batch durable in time
(retried). One receiver per state folder: a second one is refused (the lock), because two
writers on one trace's session would fork its chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from aiohttp import web

from rolltape.infra import open_recorder
from rolltape.infra._errors import InfraError
from rolltape.infra.settings import Settings
from rolltape.producers import Recorder, RecorderError
from rolltape.producers.otlp import (
    Encoding,
    Journal,
    OtlpRequestError,
    TraceIngest,
    decode,
    encoding_of,
    status_body,
    success_body,
    unpack,
)
from rolltape.producers.otlp._wire import JSON, PROTOBUF

log = logging.getLogger("rolltape.otlp")
TRACES_PATH = "/v1/traces"
STOPPED = "the receiver stopped before the trace's root span arrived"


class ReceiverBusyError(InfraError, RuntimeError):
    """Another receiver holds this state folder."""


@dataclass
class ReceiverStats:
    """Counters of this receiver process since it started (kept in memory, never persisted);
    `otlp serve` prints them when it stops."""

    requests: int = 0
    spans: int = 0
    recorded: int = 0
    redelivered: int = 0
    not_genai: int = 0
    rejected: int = 0
    failed_requests: int = 0
    sessions_started: int = 0


@dataclass
class ReceiverConfig:
    """One receiver's knobs; `otlp serve` sets `family`, `linger_s` and `idle_s` from its
    options. `family` names the model family whose text-written tool calls are parsed."""

    family: str | None = None
    linger_s: float = 5.0
    idle_s: float = 300.0
    flush_timeout_s: float = 5.0
    """Under the exporters' own deadline (10 s in the Python SDK), so they get the 503 and
    send the batch again."""
    max_body_bytes: int = 64 * 1024 * 1024


def otlp_dir(settings: Settings) -> Path:
    """The receiver's folder under ROLLTAPE_STATE_DIR (its span journal and its lock): one
    receiver per folder."""
    return settings.state_dir / "otlp"


@contextlib.contextmanager
def state_lock(folder: Path) -> Iterator[IO[str]]:
    """Hold `folder` for one receiver while the block runs, or raise `ReceiverBusyError` at once
    (no waiting). An flock, so a receiver that crashed leaves no stale lock; the file holds the
    holder's pid for whoever investigates."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "receiver.lock").open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise ReceiverBusyError(
                f"another OTLP receiver uses {folder} (one receiver per state folder: two would "
                "fork the sessions of traces they share); stop it, or give this one its own "
                "ROLLTAPE_STATE_DIR and send it other traces"
            ) from exc
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield handle


class OtlpReceiver:
    """The request handler and the timer that ends finished traces' sessions."""

    def __init__(self, recorder: Recorder, journal: Journal, config: ReceiverConfig) -> None:
        self.recorder = recorder
        self.journal = journal
        self.config = config
        self.ingest = TraceIngest(
            recorder,
            journal,
            family=config.family,
            linger_s=config.linger_s,
            idle_s=config.idle_s,
        )
        self.stats = ReceiverStats()
        self._told: set[str] = set()
        """Kinds of problems already logged: exporters do not show partial_success to the
        agent's author, so the receiver says it on its own console, once per kind."""

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_body_bytes)
        app.router.add_route("*", TRACES_PATH, self.traces)
        app.router.add_route("*", "/{tail:.*}", self.elsewhere)
        return app

    async def elsewhere(self, request: web.Request) -> web.Response:
        return _status(
            "json", 404, f"no such endpoint {request.path}: send traces to POST {TRACES_PATH}"
        )

    async def traces(self, request: web.Request) -> web.Response:
        self.stats.requests += 1
        encoding: Encoding = "json"
        try:
            if request.method != "POST":
                raise OtlpRequestError(f"use POST for {TRACES_PATH}", status=405)
            encoding = encoding_of(request.headers.get("Content-Type"))
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge as exc:
                raise OtlpRequestError(
                    f"the body is over {self.config.max_body_bytes} bytes: send smaller "
                    "batches (the exporter's max_export_batch_size)",
                    status=413,
                ) from exc
            data = unpack(body, request.headers.get("Content-Encoding"), self.config.max_body_bytes)
            decoded = decode(data, encoding)
        except OtlpRequestError as exc:
            self.stats.failed_requests += 1
            log.warning("rejected a request from %s: %s", request.remote, exc)
            return _status(encoding, exc.status, str(exc))
        try:
            applied = self.ingest.apply(decoded.spans)
            await self.recorder.aflush(self.config.flush_timeout_s)
        except RecorderError as exc:
            self.stats.failed_requests += 1
            log.error("could not make a batch durable: %s", exc)
            answer = _status(encoding, 503, f"the batch is not recorded yet ({exc}); send it again")
            answer.headers["Retry-After"] = "2"
            return answer
        except Exception as exc:  # a bug of ours: say so in OTLP's terms, keep serving
            self.stats.failed_requests += 1
            log.exception("failed on a batch")
            return _status(encoding, 500, f"the receiver failed: {type(exc).__name__}: {exc}")
        self.journal.spans_recorded(applied.recorded + applied.again)
        s = self.stats
        s.spans += applied.spans
        s.recorded += len(applied.recorded)
        s.redelivered += applied.redelivered
        s.not_genai += applied.not_genai
        rejected = len(decoded.rejected) + len(applied.rejected)
        s.rejected += rejected
        s.sessions_started += len(applied.sessions_started)
        notes = [f"span {r.span_id or '?'}: {r.reason}" for r in decoded.rejected[:5]]
        notes += applied.rejected[:5]
        if applied.warning():
            notes.append(applied.warning())
        if notes:
            kind = "content" if applied.without_content else "rejected" if rejected else "other"
            if kind not in self._told:
                self._told.add(kind)
                log.warning("told the sender (shown once): %s", "; ".join(notes))
        return web.Response(
            body=success_body(encoding, rejected, "; ".join(notes)),
            content_type=PROTOBUF if encoding == "protobuf" else JSON,
        )

    async def end_finished(self, stop: asyncio.Event, every_s: float = 0.5) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)
            try:
                self.ingest.end_due()
            except RecorderError as exc:
                log.error("could not end finished sessions: %s", exc)

    def shutdown(self) -> list[str]:
        """End what is open (see TraceIngest.end_all), flush and close the recorder."""
        ended = self.ingest.end_all(STOPPED)
        self.recorder.close(timeout_s=30.0)
        self.journal.close()
        return ended


def _status(encoding: Encoding, http_status: int, message: str) -> web.Response:
    return web.Response(
        status=http_status,
        body=status_body(encoding, http_status, message),
        content_type=PROTOBUF if encoding == "protobuf" else JSON,
    )


def open_receiver(settings: Settings, config: ReceiverConfig) -> OtlpReceiver:
    """A receiver recording under the settings' principal, with its own spool and journal."""
    folder = otlp_dir(settings)
    recorder = open_recorder(
        settings,
        producer_name="rolltape.otlp",
        spool_dir=settings.resolved_spool_dir() / "otlp",
    )
    return OtlpReceiver(recorder, Journal(folder / "journal.sqlite"), config)


async def serve(
    receiver: OtlpReceiver,
    host: str,
    port: int,
    stop: asyncio.Event,
    on_ready: Callable[[int], None] | None = None,
) -> int:
    """Serve until `stop` is set; `on_ready(port)` is called once it listens (port 0 picks
    a free one). Returns the port."""
    # Bodies are inflated by unpack (bounded, with OTLP's error answers), not by aiohttp.
    runner = web.AppRunner(receiver.app(), access_log=None, auto_decompress=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = int(runner.addresses[0][1])
    if on_ready is not None:
        on_ready(bound)
    try:
        await receiver.end_finished(stop)
    finally:
        await runner.cleanup()
    return bound
