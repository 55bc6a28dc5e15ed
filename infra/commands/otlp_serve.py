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
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from aiohttp import web

from rolltape.infra import open_recorder
from rolltape.infra._errors import InfraError
from rolltape.infra.settings import Settings
from rolltape.producers import Recorder, RecorderError
from rolltape.producers.otlp import (
    JSON,
    PROTOBUF,
    Applied,
    Encoding,
    Journal,
    OtlpRequestError,
    Span,
    TraceIngest,
    decode,
    encoding_of,
    status_body,
    success_body,
    unpack,
)

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
    subject_attribute: str | None = None
    """The span or resource attribute naming a trace's subject (`enduser.id`): its sessions'
    content is then sealed under a data key of their own (docs/privacy.md)."""
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


@dataclass
class Outcome:
    """What recording one batch came to (or one worker's share of it, see otlp_workers.py):
    picklable, and merged across workers into one answer."""

    status: int = 200
    """200, or 503 (the batch is not durable yet: the exporter sends it again) or 500."""
    message: str = ""
    spans: int = 0
    recorded: int = 0
    redelivered: int = 0
    not_genai: int = 0
    rejected: list[str] = field(default_factory=list)
    """Spans whose content could not be mapped, with why."""
    sessions_started: int = 0
    without_content: int = 0
    warning: str = ""

    @classmethod
    def of(cls, applied: Applied) -> Outcome:
        return cls(
            spans=applied.spans,
            recorded=len(applied.recorded),
            redelivered=applied.redelivered,
            not_genai=applied.not_genai,
            rejected=list(applied.rejected),
            sessions_started=len(applied.sessions_started),
            without_content=applied.without_content,
            warning=applied.warning(),
        )

    def merged(self, other: Outcome) -> Outcome:
        """Both parts of one batch: the worse status (a 503 anywhere means the exporter must
        send the batch again), the counts added, the notes joined."""
        worst = max((self, other), key=lambda o: (o.status != 200, o.status))
        return Outcome(
            status=worst.status,
            message=worst.message,
            spans=self.spans + other.spans,
            recorded=self.recorded + other.recorded,
            redelivered=self.redelivered + other.redelivered,
            not_genai=self.not_genai + other.not_genai,
            rejected=self.rejected + other.rejected,
            sessions_started=self.sessions_started + other.sessions_started,
            without_content=self.without_content + other.without_content,
            warning="; ".join(w for w in (self.warning, other.warning) if w),
        )


class ReceiverFront:
    """The HTTP side of a receiver: reads and decodes requests, has their spans recorded
    (`record`, by the subclass), answers in OTLP's terms and keeps the counters."""

    def __init__(self, config: ReceiverConfig) -> None:
        self.config = config
        self.stats = ReceiverStats()
        self._told: set[str] = set()
        """Kinds of problems already logged: exporters do not show partial_success to the
        agent's author, so the receiver says it on its own console, once per kind."""

    async def record(self, spans: list[Span]) -> Outcome:
        """Record a batch's spans and make them durable before answering."""
        raise NotImplementedError

    async def run(self, stop: asyncio.Event) -> None:
        """What runs beside the requests until `stop` (ending finished traces' sessions)."""
        await stop.wait()

    def shutdown(self) -> list[str]:
        """End what is open and release everything; the sessions ended at stop."""
        return []

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
        outcome = await self.record(decoded.spans)
        if outcome.status != 200:
            self.stats.failed_requests += 1
            answer = _status(encoding, outcome.status, outcome.message)
            if outcome.status == 503:
                answer.headers["Retry-After"] = "2"
            return answer
        s = self.stats
        s.spans += outcome.spans
        s.recorded += outcome.recorded
        s.redelivered += outcome.redelivered
        s.not_genai += outcome.not_genai
        rejected = len(decoded.rejected) + len(outcome.rejected)
        s.rejected += rejected
        s.sessions_started += outcome.sessions_started
        notes = [f"span {r.span_id or '?'}: {r.reason}" for r in decoded.rejected[:5]]
        notes += outcome.rejected[:5]
        if outcome.warning:
            notes.append(outcome.warning)
        if notes:
            kind = "content" if outcome.without_content else "rejected" if rejected else "other"
            if kind not in self._told:
                self._told.add(kind)
                log.warning("told the sender (shown once): %s", "; ".join(notes))
        return web.Response(
            body=success_body(encoding, rejected, "; ".join(notes)),
            content_type=PROTOBUF if encoding == "protobuf" else JSON,
        )


class OtlpReceiver(ReceiverFront):
    """A receiver in one process: the front, and the ingest that records through one Recorder
    and ends finished traces' sessions on a timer."""

    def __init__(self, recorder: Recorder, journal: Journal, config: ReceiverConfig) -> None:
        super().__init__(config)
        self.recorder = recorder
        self.journal = journal
        self.ingest = TraceIngest(
            recorder,
            journal,
            family=config.family,
            linger_s=config.linger_s,
            idle_s=config.idle_s,
            subject_attribute=config.subject_attribute,
        )

    async def record(self, spans: list[Span]) -> Outcome:
        try:
            applied = self.ingest.apply(spans)
            await self.recorder.aflush(self.config.flush_timeout_s)
        except RecorderError as exc:
            log.error("could not make a batch durable: %s", exc)
            return Outcome(503, f"the batch is not recorded yet ({exc}); send it again")
        except Exception as exc:  # a bug of ours: say so in OTLP's terms, keep serving
            log.exception("failed on a batch")
            return Outcome(500, f"the receiver failed: {type(exc).__name__}: {exc}")
        self.journal.spans_recorded(applied.recorded + applied.again)
        return Outcome.of(applied)

    async def run(self, stop: asyncio.Event) -> None:
        await self.end_finished(stop)

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
    receiver: ReceiverFront,
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
        await receiver.run(stop)
    finally:
        await runner.cleanup()
    return bound
