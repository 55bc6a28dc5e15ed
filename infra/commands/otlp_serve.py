"""`rolltape serve otlp`: the OTLP receiver that records GenAI traces as sessions.

Traces and logs arrive over OTLP/HTTP (otlp_http.py) and OTLP/gRPC (otlp_grpc.py); both hand
each request to one `ReceiverFront`, which decodes it, has its spans and log records recorded
and answers in OTLP's terms, so the two transports acknowledge alike. A batch is acknowledged
only once every record it produced is acknowledged by the broker or spooled to disk, and its
span ids and what it leaves waiting are journaled; until then the sender keeps it and retries.
Answers: success with `partial_success` when spans were rejected (bad ids) or there is a
warning (no message content), a client error saying what was wrong (not retried by
exporters), unavailable (503) when the recorder could not make the batch durable in time
(retried). One receiver per state folder: a second one is refused (the lock), because two
writers on one trace's session would fork its chain.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from rolltape.infra import open_recorder
from rolltape.infra._errors import InfraError
from rolltape.infra.settings import Settings
from rolltape.producers import Recorder, RecorderError
from rolltape.producers.otlp import (
    Applied,
    Encoding,
    Journal,
    LogRecord,
    OtlpRequestError,
    Signal,
    Span,
    TraceIngest,
    decode,
    decode_logs,
    encoding_of,
    status_body,
    success_body,
    unpack,
)

log = logging.getLogger("rolltape.otlp")
STOPPED = "the receiver stopped before the trace's root span arrived"


class ReceiverBusyError(InfraError, RuntimeError):
    """Another receiver holds this state folder."""


@dataclass
class ReceiverStats:
    """Counters of this receiver process since it started (kept in memory, never persisted);
    `otlp serve` prints them when it stops and serves them on `/metrics`."""

    requests: collections.Counter[str] = field(default_factory=collections.Counter)
    """Signal (traces, logs, metrics) -> requests answered."""
    spans: int = 0
    recorded: int = 0
    redelivered: int = 0
    not_genai: int = 0
    rejected: int = 0
    failed_requests: int = 0
    sessions_started: int = 0
    logs: int = 0
    logs_joined: int = 0
    logs_redelivered: int = 0
    without_content: int = 0
    unmapped: collections.Counter[str] = field(default_factory=collections.Counter)
    """Reason (UNMAPPED_REASONS, and `metrics_not_recorded`) -> items acknowledged, not
    recorded."""
    waiting: int = 0
    """Spans and log records acknowledged and held in the journal, not recorded yet."""

    def line(self, ended: int) -> str:
        """The stop line: every count, and every reason something was not recorded."""
        requests = sum(self.requests.values())
        text = (
            f"{requests} request(s), {self.spans} span(s): {self.recorded} recorded, "
            f"{self.redelivered} redelivered, {self.not_genai} not GenAI, {self.rejected} "
            f"rejected; {self.logs} log record(s): {self.logs_joined} joined to their spans, "
            f"{self.logs_redelivered} redelivered"
        )
        counted = sorted((reason, n) for reason, n in self.unmapped.items() if n)
        if counted:
            reasons = ", ".join(f"{n} {reason}" for reason, n in counted)
            text += f"; not recorded: {reasons}"
        if self.without_content:
            text += f"; {self.without_content} inference span(s) without content"
        text += f"; {self.sessions_started} session(s) started, {ended} ended at stop"
        if self.waiting:
            text += f"; {self.waiting} item(s) wait in the journal for the next start"
        return text


@dataclass
class ReceiverConfig:
    """One receiver's knobs; `otlp serve` sets them from its options. `family` names the model
    family whose text-written tool calls are parsed."""

    family: str | None = None
    linger_s: float = 5.0
    idle_s: float = 300.0
    join_wait_s: float = 10.0
    """How long an inference span without content waits for the log records that carry it."""
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
    """What recording one batch came to (or one worker's share of it, or one tick of a
    worker's timer, see otlp_workers.py): picklable, and merged across workers into one
    answer."""

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
    logs: int = 0
    logs_joined: int = 0
    logs_redelivered: int = 0
    unmapped: dict[str, int] = field(default_factory=dict)
    waiting: int | None = None
    """Spans and log records the recorder holds after this, when it says."""

    @classmethod
    def of(cls, applied: Applied, waiting: int | None = None) -> Outcome:
        return cls(
            spans=applied.spans,
            recorded=len(applied.recorded),
            redelivered=applied.redelivered,
            not_genai=applied.not_genai,
            rejected=list(applied.rejected),
            sessions_started=len(applied.sessions_started),
            without_content=applied.without_content,
            warning=applied.warning(),
            logs=applied.logs,
            logs_joined=applied.logs_joined,
            logs_redelivered=applied.logs_redelivered,
            unmapped=dict(applied.unmapped),
            waiting=waiting,
        )

    def merged(self, other: Outcome) -> Outcome:
        """Both parts of one batch: the worse status (a 503 anywhere means the exporter must
        send the batch again), the counts added, the notes joined."""
        worst = max((self, other), key=lambda o: (o.status != 200, o.status))
        unmapped = collections.Counter(self.unmapped)
        unmapped.update(other.unmapped)
        waits = [w for w in (self.waiting, other.waiting) if w is not None]
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
            logs=self.logs + other.logs,
            logs_joined=self.logs_joined + other.logs_joined,
            logs_redelivered=self.logs_redelivered + other.logs_redelivered,
            unmapped=dict(unmapped),
            waiting=sum(waits) if waits else None,
        )


@dataclass(frozen=True)
class Answer:
    """A receiver's answer to one export request, for either transport: the HTTP status (the
    gRPC side maps it to a status code) and the body in the request's encoding (an
    Export*ServiceResponse on success, a `google.rpc.Status` otherwise)."""

    status: int
    body: bytes
    encoding: Encoding
    message: str = ""


class ReceiverFront:
    """A receiver's side that transports talk to: decodes requests, has their spans and log
    records recorded (`record`, by the subclass), answers in OTLP's terms and keeps the
    counters."""

    def __init__(self, config: ReceiverConfig) -> None:
        self.config = config
        self.stats = ReceiverStats()
        self._told: set[str] = set()
        """Problems already logged: exporters do not show partial_success to the agent's
        author, so the receiver says it on its own console, once per kind."""

    async def record(self, spans: list[Span], logs: list[LogRecord]) -> Outcome:
        """Record a batch's spans and log records and make them durable before answering."""
        raise NotImplementedError

    async def run(self, stop: asyncio.Event) -> None:
        """What runs beside the requests until `stop` (ending finished traces' sessions)."""
        await stop.wait()

    def shutdown(self) -> list[str]:
        """End what is open and release everything; the sessions ended at stop."""
        return []

    def count(self, outcome: Outcome) -> None:
        """Add what recording did, from a request or from a timer, to the counters."""
        s = self.stats
        s.spans += outcome.spans
        s.recorded += outcome.recorded
        s.redelivered += outcome.redelivered
        s.not_genai += outcome.not_genai
        s.sessions_started += outcome.sessions_started
        s.logs += outcome.logs
        s.logs_joined += outcome.logs_joined
        s.logs_redelivered += outcome.logs_redelivered
        s.without_content += outcome.without_content
        s.unmapped.update(outcome.unmapped)
        if outcome.waiting is not None:
            s.waiting = outcome.waiting

    def refused(self, signal: str, message: str, status: int, encoding: Encoding) -> Answer:
        """A request that cannot be taken: counted, logged, answered with why."""
        self.stats.requests[signal] += 1
        self.stats.failed_requests += 1
        return Answer(status, status_body(encoding, status, message), encoding, message)

    def metrics_request(self, encoding: Encoding) -> Answer:
        """OTLP metrics (an instrumentation's token and duration histograms): acknowledged and
        counted, not recorded: sessions hold the usage of every call already."""
        self.stats.requests["metrics"] += 1
        self.stats.unmapped["metrics_not_recorded"] += 1
        if "metrics" not in self._told:
            self._told.add("metrics")
            log.warning(
                "OTLP metrics are acknowledged and not recorded (sessions hold each call's "
                "usage); set OTEL_METRICS_EXPORTER=none in the agent to stop sending them"
            )
        return Answer(200, b"{}" if encoding == "json" else b"", encoding)

    async def export(
        self,
        signal: Signal,
        body: bytes,
        content_type: str | None,
        content_encoding: str | None,
        peer: str | None = None,
    ) -> Answer:
        """Answer one Export request of `signal` (its body as sent)."""
        encoding: Encoding = "json"
        try:
            encoding = encoding_of(content_type)
            data = unpack(body, content_encoding, self.config.max_body_bytes)
            spans: list[Span] = []
            logs: list[LogRecord] = []
            problems: list[str] = []
            if signal == "traces":
                decoded = decode(data, encoding)
                spans = decoded.spans
                problems = [f"span {r.span_id or '?'}: {r.reason}" for r in decoded.rejected]
            else:
                decoded_logs = decode_logs(data, encoding)
                logs = decoded_logs.records
                problems = [f"log record: {u}" for u in decoded_logs.unusable]
        except OtlpRequestError as exc:
            log.warning("rejected a request from %s: %s", peer or "?", exc)
            return self.refused(signal, str(exc), exc.status, encoding)
        outcome = await self.record(spans, logs)
        self.stats.requests[signal] += 1
        if outcome.status != 200:
            self.stats.failed_requests += 1
            message = outcome.message
            return Answer(
                outcome.status, status_body(encoding, outcome.status, message), encoding, message
            )
        self.count(outcome)
        if signal == "logs" and problems:
            self.stats.unmapped["log_ids_unusable"] += len(problems)
        rejected = len(problems) + len(outcome.rejected)
        self.stats.rejected += rejected
        notes = problems[:5] + outcome.rejected[:5]
        if outcome.warning:
            notes.append(outcome.warning)
        for note in notes:
            kind = note.split(":", 1)[0] if note in problems or note in outcome.rejected else note
            if kind not in self._told:
                self._told.add(kind)
                log.warning("told the sender (shown once): %s", note)
        message = "; ".join(notes)
        return Answer(200, success_body(encoding, rejected, message, signal), encoding, message)


class OtlpReceiver(ReceiverFront):
    """A receiver in one process: the front, and the ingest that records through one Recorder
    and, on a timer, records what waited long enough and ends finished traces' sessions."""

    def __init__(
        self,
        recorder: Recorder,
        journal: Journal,
        config: ReceiverConfig,
        owns: Callable[[str], bool] | None = None,
    ) -> None:
        super().__init__(config)
        self.recorder = recorder
        self.journal = journal
        self.stopped_outcome: Outcome | None = None
        """What recording at shutdown did (`shutdown`)."""
        self.ingest = TraceIngest(
            recorder,
            journal,
            family=config.family,
            linger_s=config.linger_s,
            idle_s=config.idle_s,
            join_wait_s=config.join_wait_s,
            subject_attribute=config.subject_attribute,
            owns_session=owns or (lambda key: True),
        )
        # What an earlier run acknowledged and left waiting (of the traces this one owns).
        self.ingest.restore(owns or (lambda trace_id: True))
        self.stats.waiting = self.ingest.waiting()

    async def record(self, spans: list[Span], logs: list[LogRecord]) -> Outcome:
        applied: Applied | None = None
        try:
            applied = self.ingest.apply(spans, logs)
            if applied.wrote:
                await self.recorder.aflush(self.config.flush_timeout_s)
        except RecorderError as exc:
            if applied is not None:
                self.ingest.not_durable(applied)
            log.error("could not make a batch durable: %s", exc)
            return Outcome(503, f"the batch is not recorded yet ({exc}); send it again")
        except Exception as exc:  # a bug of ours: say so in OTLP's terms, keep serving
            log.exception("failed on a batch")
            return Outcome(500, f"the receiver failed: {type(exc).__name__}: {exc}")
        self._settle(applied)
        return Outcome.of(applied, self.ingest.waiting())

    def _settle(self, applied: Applied) -> None:
        self.journal.settle(applied.recorded + applied.again, applied.hold, applied.release)

    async def run(self, stop: asyncio.Event) -> None:
        await self.tick_until(stop)

    async def tick_until(self, stop: asyncio.Event, every_s: float = 0.5) -> None:
        """Until `stop`: every `every_s`, record what waited long enough, end finished
        sessions, and report what that did (`on_tick`)."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)
            try:
                outcome = await self.tick()
            except Exception:  # a bug of ours: say so, keep the timer (ends, waits) going
                log.exception("the receiver's timer failed; it goes on")
                continue
            if outcome is not None:
                self.on_tick(outcome)

    async def tick(self) -> Outcome | None:
        """One round of the timer; None when it did nothing."""
        applied = None
        try:
            applied = self.ingest.tick()
            if not (applied.wrote or applied.hold or applied.unmapped):
                return None
            if applied.wrote:
                await self.recorder.aflush(self.config.flush_timeout_s)
        except RecorderError as exc:
            if applied is not None:
                self.ingest.not_durable(applied)
            log.error("could not record what waited or end finished sessions: %s", exc)
            return None
        self._settle(applied)
        return Outcome.of(applied, self.ingest.waiting())

    def on_tick(self, outcome: Outcome) -> None:
        self.count(outcome)

    def shutdown(self) -> list[str]:
        """Record what waits and end what is open (see TraceIngest.end_all), close the recorder
        (what the broker did not take stays in its spool), then journal it all."""
        try:
            applied = self.ingest.end_all(STOPPED)
            # Journaled only once closing made the records durable: if it fails, what was held
            # stays held (the next run records it again, in a continuation) rather than lost.
            self.recorder.close(timeout_s=30.0)
            self._settle(applied)
        finally:
            self.journal.close()
        self.stopped_outcome = Outcome.of(applied, self.ingest.waiting())
        self.count(self.stopped_outcome)
        return applied.ended


def open_receiver(
    settings: Settings, config: ReceiverConfig, owns: Callable[[str], bool] | None = None
) -> OtlpReceiver:
    """A receiver recording under the settings' principal, with its own spool and journal
    (`owns`: the traces and OpenInference sessions it records, by key, when it is one worker of
    a pool)."""
    folder = otlp_dir(settings)
    recorder = open_recorder(
        settings,
        producer_name="rolltape.otlp",
        spool_dir=settings.resolved_spool_dir() / "otlp",
    )
    return OtlpReceiver(recorder, Journal(folder / "journal.sqlite"), config, owns)
