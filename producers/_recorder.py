"""The recorder that agents and training loops embed.

Invariant: a record call never blocks and never does I/O: it stamps the wall clock and appends to a
deque. Validation, chaining, encoding and sending happen on the sender thread (see _sender.py), or
in sender processes that each own a share of the sessions (`senders=N`, see _shards.py); a
payload model handed to `Session.record` was validated when it was made, and is only dumped there.
Errors that only the sender can see (an invalid payload, a full spool) surface on the next
flush/close as `EventsRejectedError`, or at once as `SpoolFullError` on later record calls.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import os
import re
import socket
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel

from rolltape.producers._errors import (
    BacklogFullError,
    EventsRejectedError,
    FlushTimeoutError,
    RecorderClosedError,
    SenderDiedError,
    SpoolFullError,
)
from rolltape.producers._queued import Barrier, Payload, QueuedEvent
from rolltape.producers._sender import Sender
from rolltape.producers._sender_config import (
    BATCH_WINDOW_S,
    SPOOL_AFTER_S,
    SPOOL_MAX_BYTES,
    HeadLocator,
    SenderConfig,
)
from rolltape.producers._session import Session, redacted
from rolltape.producers._shards import ShardedSender
from rolltape.producers.privacy import Redaction
from rolltape.schemas import (
    DEFAULT_PREFIX,
    SESSION_ID_PATTERN,
    DataKeyRecord,
    Stream,
    ToolSpec,
    blob_records,
)
from rolltape.schemas.clients import KafkaConnection

if TYPE_CHECKING:  # the crypto library loads at the first session that names a subject
    from rolltape.schemas.privacy import KeyEncryptionKey

_SESSION_ID = re.compile(SESSION_ID_PATTERN)
_BLOBS = Stream.BLOBS.value
_KEYS = Stream.KEYS.value
_BLOBS_REMEMBERED = 100_000
_time_ns = time.time_ns
_EVENTS = Stream.EVENTS.value

_open_recorders: weakref.WeakSet[Recorder] = weakref.WeakSet()


def _disown_after_fork() -> None:
    # The sender thread does not survive fork(); a child (a DataLoader worker, say) must not
    # believe its events are being recorded, nor flush the parent's recorders at exit.
    for recorder in list(_open_recorders):
        recorder._forked_from = recorder._pid
        recorder._closed = True
    _open_recorders.clear()


os.register_at_fork(after_in_child=_disown_after_fork)


@atexit.register
def _close_all_at_exit() -> None:
    for recorder in list(_open_recorders):
        recorder.close(timeout_s=10.0, raise_rejected=False)


def default_state_dir() -> Path:
    """`$XDG_STATE_HOME/rolltape` (or ~/.local/state/rolltape): where rolltape keeps what must
    outlive a process on this machine (the spool, the managed broker, the judge's key). The
    settings' default too, so a recorder built without settings adopts the spool an earlier
    one left behind."""
    base = os.environ.get("XDG_STATE_HOME")
    return (Path(base) if base else Path.home() / ".local" / "state") / "rolltape"


def spool_dir_in(state_dir: Path) -> Path:
    """The spool folder of a state folder."""
    return state_dir / "spool"


def default_spool_dir() -> Path:
    """The spool folder of the default state folder."""
    return spool_dir_in(default_state_dir())


class FlushResult(BaseModel):
    """Counts since the recorder started, at the moment a flush finished."""

    sealed: int
    acked: int
    spooled: int
    rejected: int
    mode: Literal["direct", "spool"]


class Recorder:
    """Records sessions to Kafka. One per process is typical; it is safe to share across threads.

    `connection` is where and as whom to record: a `KafkaConnection` (SASL credentials, TLS), a
    bare "host:port" for an unauthenticated cluster, or None to record to the spool only (the
    broker is configured later or elsewhere). `rolltape.infra.open_recorder()` builds one from the
    ROLLTAPE_* settings. Envelopes name the connection's SASL user as their principal.

    Values are read on the sender thread, shortly after the call: the top level of every mapping
    and sequence argument is copied, but do not mutate nested containers after recording them
    (nor the containers of a payload model given to `Session.record`).

    `senders` > 1 seals and sends in that many sender processes instead of one thread, each
    owning the sessions hashed to it: for recording faster than one core seals (~50k events/s
    of ~1 KB). Chains, flush, close, spooling, resume and errors behave as with one sender; a
    sender process that dies raises `SenderDiedError`. The processes start with a fresh
    interpreter (never forked) and take ~0.5 s to import; events wait in the queue meanwhile.

    `batch_window_s`: events gather this long before the sender takes them as one batch, so a
    record call never wakes it while recording goes on and its work lands on few of the
    caller's moments (it shares the caller's interpreter). They reach the broker that much
    later; flush() and close() do not wait for a window.

    `redaction`: what is dropped, hashed or masked in each event, in the record call itself, so
    nothing unredacted reaches the sender, the spool or the broker (`rolltape.producers.privacy`;
    `open_recorder` reads it from ROLLTAPE_REDACTION_POLICY).

    `kek`: the key-encryption key (or a function that reads it, called at each session that
    names a subject, so that a rotated KEK is picked up) that wraps the data keys of sessions
    recorded with `subject=`.

    `head_locator`: where a resume starts reading the session's partition, so that its cost is
    the session's records, not the partition's (`open_recorder` asks the read model; without
    one, a resume reads the partition from its start and logs why).
    """

    def __init__(
        self,
        connection: KafkaConnection | str | None,
        *,
        topic_prefix: str = DEFAULT_PREFIX,
        spool_dir: str | os.PathLike[str] | None = None,
        spool_max_bytes: int = SPOOL_MAX_BYTES,
        producer_name: str = "rolltape.producers",
        producer_version: str | None = None,
        principal: str | None = None,
        max_backlog: int = 1_000_000,
        spool_after_s: float = SPOOL_AFTER_S,
        senders: int = 1,
        batch_window_s: float = BATCH_WINDOW_S,
        redaction: Redaction | None = None,
        kek: KeyEncryptionKey | Callable[[], KeyEncryptionKey] | None = None,
        head_locator: HeadLocator | None = None,
    ) -> None:
        from rolltape.producers import __version__

        if senders < 1:
            raise ValueError(f"senders={senders}: one sender at least")
        if isinstance(connection, str):
            connection = KafkaConnection.plaintext(connection)
        authenticated = connection.principal if connection is not None else None
        if principal is not None and authenticated is not None and principal != authenticated:
            raise ValueError(
                f"principal={principal!r} but the connection authenticates as {authenticated!r}: "
                "envelopes name the principal the broker authorised, so leave `principal` unset"
            )

        self._queue: collections.deque[QueuedEvent | Barrier] = collections.deque()
        self._max_backlog = max_backlog
        self._redaction = redaction if redaction is not None and redaction.rules else None
        self._kek = kek
        self._closed = False
        self._pid = os.getpid()
        self._writer = f"{socket.gethostname()}/{self._pid}/{uuid.uuid4().hex[:12]}"
        """Names this recorder in the session_resumed records it writes."""
        self._forked_from: int | None = None
        config = SenderConfig(
            connection=connection,
            topic_prefix=topic_prefix,
            producer_info={
                "name": producer_name,
                "version": producer_version or __version__,
                "principal": principal or authenticated or "anonymous",
            },
            spool_dir=Path(spool_dir) if spool_dir is not None else default_spool_dir(),
            spool_max_bytes=spool_max_bytes,
            spool_after_s=spool_after_s,
            batch_window_s=batch_window_s,
            head_locator=head_locator,
        )
        self._sender: Sender | ShardedSender = (
            Sender(config, self._queue)
            if senders == 1
            else ShardedSender(config, self._queue, senders)
        )
        self._blobs_sent: collections.OrderedDict[str, None] = collections.OrderedDict()
        """sha256 of the blobs this recorder queued, newest last (bounded): a file that many
        rollouts leave unchanged is sent once, not once per rollout."""
        _open_recorders.add(self)

    # -- the hot path ----------------------------------------------------------------------------
    def _enqueue(self, session_id: str, stream: str, event_type: str, payload: Payload) -> None:
        if self._closed:
            raise RecorderClosedError(self._closed_message())
        sender = self._sender
        if sender.error is not None:
            raise sender.error
        queue = self._queue
        if len(queue) >= self._max_backlog:
            raise BacklogFullError(
                f"{len(queue)} events are waiting to be chained (max_backlog={self._max_backlog}); "
                "the sender cannot keep up: record less per second or raise max_backlog"
            )
        if self._redaction is not None:
            payload = (
                self._redaction.apply(event_type, payload)
                if type(payload) is dict
                else redacted(self._redaction, event_type, payload)
            )
        queue.append((session_id, stream, event_type, payload, _time_ns()))
        # The sender publishes `idle` before its last look at the queue, so either it sees this
        # event or we see idle=True and wake it (see Sender._chainer).
        if sender.idle:
            sender.idle = False
            sender.wake()

    def _queue_blobs(self, blobs: Mapping[str, bytes]) -> None:
        """Queue the chunks of the blobs not sent yet; they travel (and spool) like events."""
        sent = self._blobs_sent
        for sha, data in blobs.items():
            if sha in sent:
                sent.move_to_end(sha)
                continue
            for key, value in blob_records(data, sha256=sha):
                self._enqueue(key.decode(), _BLOBS, "blob", {"value": value})
            sent[sha] = None
            if len(sent) > _BLOBS_REMEMBERED:
                sent.popitem(last=False)

    def _closed_message(self) -> str:
        if self._forked_from is not None:
            return (
                f"this recorder belongs to process {self._forked_from}, and this is a forked "
                f"child ({os.getpid()}); create a new Recorder in the child"
            )
        return "the recorder is closed; create a new Recorder"

    # -- sessions --------------------------------------------------------------------------------
    def session(
        self,
        task: str,
        *,
        session_id: str | None = None,
        kind: Literal["agent", "training"] = "agent",
        tools: Sequence[ToolSpec | Mapping[str, Any]] = (),
        model: str | None = None,
        run_config: Mapping[str, Any] | None = None,
        tags: Sequence[str] = (),
        trainable: bool = True,
        linked_session_id: str | None = None,
        group_id: str | None = None,
        resume: bool = False,
        resume_timeout_s: float = 30.0,
        subject: str | None = None,
    ) -> Session:
        """Open a session and record its session_started event.

        A session has one writer per chain. To continue a session that already has records (a
        restarted agent, another process), pass its `session_id` and `resume=True`: the recorder
        reads the chain's head from the log, appends a `session_resumed` record linked to it and
        reads it back; the other arguments then describe nothing new and are not recorded. This
        blocks for the read (Kafka has no index by key: it reads the session's partition) and
        raises `ChainConflictError` if another writer got there first, `ResumeError` when the
        session ended or cannot be read. Without `resume`, a second writer of a session is set
        aside by every reader (flagged as a fork on the verdicts stream), never merged into it.

        `subject` names whose data the session holds (an end user, a tenant): its content fields
        are then sealed under a data key of its own before they are chained, and the key goes,
        wrapped by the recorder's `kek`, to the keys topic, from which erasure removes it
        (docs/privacy.md).
        """
        sid = session_id or uuid.uuid4().hex
        if not _SESSION_ID.match(sid):
            raise ValueError(
                f"session id {sid!r} must match {SESSION_ID_PATTERN} (it is the Kafka key)"
            )
        payload = {
            "task": task,
            "kind": kind,
            "tools": [t.model_dump() if isinstance(t, ToolSpec) else dict(t) for t in tools],
            "model": model,
            "run_config": dict(run_config or {}),
            "tags": list(tags),
            "trainable": trainable,
            "linked_session_id": linked_session_id,
            "group_id": group_id,
        }
        if resume and session_id is None:
            raise ValueError("resume=True continues an existing session: pass its session_id")
        data_key = None if subject is None else self._data_key(sid, subject, linked_session_id)
        if data_key is not None and not resume:
            self._enqueue(sid, _KEYS, "data_key", data_key)
        if resume:
            # A resumed session's content goes on under a data key of this recorder's own,
            # sent to the keys topic by the takeover itself, before its first record.
            self._check_open()
            self._sender.resume(
                _EVENTS, sid, ("session_started", payload), self._writer, resume_timeout_s, data_key
            )
        else:
            self._enqueue(sid, _EVENTS, "session_started", payload)
        return Session(self, sid)

    def _data_key(self, session_id: str, subject: str, about: str | None) -> dict[str, Any]:
        """A new data key for the session, as the sender takes it ahead of the session's
        events: it keeps the key to seal their content and sends the wrapped key (never the
        key) to the keys topic."""
        from rolltape.schemas.privacy import ContentKey, KeyEncryptionKey

        if self._kek is None:
            raise ValueError(
                "a session with a subject needs the key-encryption key that wraps its data key: "
                "Recorder(kek=...), or open_recorder() (ROLLTAPE_KEK_FILE)"
            )
        # A function is called for each session: a KEK rotated meanwhile is the one used.
        kek = self._kek if isinstance(self._kek, KeyEncryptionKey) else self._kek()
        key = ContentKey.generate()
        record = DataKeyRecord(
            session_id=session_id,
            subject=subject,
            key_id=key.key_id,
            wrapped=kek.wrap(key, session_id),
            ts_ns=_time_ns(),
            about=about,
        )
        return {"key_id": key.key_id, "secret": key.secret, "value": record.value()}

    def resume(self, session_id: str, stream: str, timeout_s: float = 30.0) -> None:
        """Take over `session_id`'s chain on another `stream` this recorder writes (a restarted
        training process's monitor on metrics), as `session(resume=True)` does on events.
        Records nothing when the chain has no record yet."""
        self._check_open()
        self._sender.resume(Stream(stream).value, session_id, None, self._writer, timeout_s)

    def _check_open(self) -> None:
        if self._closed:
            raise RecorderClosedError(self._closed_message())

    # -- flushing and closing --------------------------------------------------------------------
    def _barrier(self) -> concurrent.futures.Future[None]:
        if self._closed:
            raise RecorderClosedError(self._closed_message())
        barrier = Barrier()
        self._queue.append(barrier)
        self._sender.wake()
        return barrier.future

    def _result(self, raise_rejected: bool = True) -> FlushResult:
        stats = self._sender.stats
        if raise_rejected and isinstance(self._sender.error, SenderDiedError):
            raise self._sender.error
        if raise_rejected and isinstance(self._sender.error, SpoolFullError) and not self._closed:
            raise self._sender.error
        if raise_rejected and stats.rejected_events:
            rejected = list(stats.rejected_events)
            stats.rejected_events.clear()
            raise EventsRejectedError(rejected, self._sender.rejected_path)
        return FlushResult(
            sealed=stats.sealed,
            acked=stats.acked,
            spooled=stats.spooled,
            rejected=stats.rejected,
            mode="spool" if stats.mode == "spool" else "direct",
        )

    def flush(self, timeout_s: float | None = 30.0) -> FlushResult:
        """Block until every event recorded so far is acknowledged by the broker or spooled to
        disk (fsynced). Raises EventsRejectedError for events that could not be recorded."""
        future = self._barrier()
        try:
            future.result(timeout_s)
        except concurrent.futures.TimeoutError as exc:
            raise FlushTimeoutError(self._timeout_message(timeout_s)) from exc
        return self._result()

    async def aflush(self, timeout_s: float | None = 30.0) -> FlushResult:
        """`flush` for async code: awaits without blocking the event loop."""
        future = asyncio.wrap_future(self._barrier())
        try:
            await asyncio.wait_for(future, timeout_s)
        except TimeoutError as exc:
            raise FlushTimeoutError(self._timeout_message(timeout_s)) from exc
        return self._result()

    async def adelivered(self, timeout_s: float = 30.0) -> None:
        """Wait until everything recorded so far, and everything in the spool folder (left by
        an earlier process too), is on the broker: after it, the log holds all this machine
        recorded (a batch run reads it to know what is finished). FlushTimeoutError otherwise."""
        deadline = time.monotonic() + timeout_s
        await self.aflush(timeout_s)
        while self._sender.spool_pending():
            if time.monotonic() > deadline:
                raise FlushTimeoutError(
                    f"the broker has not taken the spooled records in {self._sender.spool.directory} "
                    f"within {timeout_s:.0f}s"
                )
            await asyncio.sleep(0.05)

    def _timeout_message(self, timeout_s: float | None) -> str:
        s = self._sender.stats
        return (
            f"flush did not finish in {timeout_s}s: {s.sealed - s.acked - s.spooled} records are "
            f"still in flight to the broker (mode {s.mode}). Nothing is dropped: they stay queued "
            "and spool if the broker stays away."
        )

    def close(self, timeout_s: float = 30.0, *, raise_rejected: bool = True) -> FlushResult:
        """Flush, stop the sender and release the spool. Records the broker did not take in
        `timeout_s` stay in the spool for the next recorder on the same spool folder."""
        if self._closed:
            return self._result(raise_rejected)
        self._closed = True
        _open_recorders.discard(self)
        self._sender.stop(timeout_s)
        if self._queue:
            # Another thread recorded while we closed, after the sender's last look.
            late = sum(1 for item in self._queue if not isinstance(item, Barrier))
            if late:
                raise RecorderClosedError(
                    f"{late} event(s) were recorded from another thread while the recorder was "
                    "closing and were not recorded; stop recording before close()"
                )
        return self._result(raise_rejected)

    async def aclose(self, timeout_s: float = 30.0) -> FlushResult:
        return await asyncio.to_thread(self.close, timeout_s)

    @property
    def spool_bytes(self) -> int:
        """Bytes waiting in the spool (0 while the broker keeps up)."""
        return self._sender.spool.unread_bytes

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
