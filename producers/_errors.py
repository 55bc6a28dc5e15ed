"""The one exception root of the producer SDK.

ProducerError
├── RecorderError          recording could not be done or made durable
│   ├── RecorderClosedError    recording on a closed recorder or an ended session
│   ├── SpoolFullError         the broker is unreachable and the local spool is at its limit
│   ├── BacklogFullError       events arrive faster than the sender can chain them, past the limit
│   ├── FlushTimeoutError      flush did not finish in time (the events are not lost: see message)
│   ├── EventsRejectedError    events that could not be recorded (invalid payload, too large),
│   │                          each with its reason; they are kept in a rejected-events file
│   ├── SenderDiedError        a sender process of a `senders=N` recorder died (what it had not
│   │                          made durable is listed in the rejected-events file)
│   ├── ResumeError            a session's chain cannot be taken over (no broker, records still
│   │   │                      in the spool, the session ended, the log took too long to read)
│   │   └── ChainConflictError another writer appended to the chain while this one took it over
│   ├── MonitorError           the training monitor cannot measure as asked (no held-out data, a
│   │                          checkpoint that does not fit the model, used after finish)
│   └── HarnessError           the decision harness cannot go on (no rule evaluation or verdict
│                              arrived in time: is `rolltape serve worker` running?; a policy endpoint
│                              that is not configured)
├── ScheduleError, JobError   a cron schedule or job the scheduler cannot take
├── DeliveryError          a cron run's answer could not be delivered to its channel
├── ChannelError           a cron delivery channel named without what it needs (path, URL)
├── EnvError               an environment cannot run as asked (no items in a split, an items
│   │                      file that does not read, a batch name that is not one)
│   └── WorldError         a workdir that cannot be snapshotted, a snapshot not restorable
├── PromptLoopError        a prompt loop that cannot go on (no tuner endpoint, a tuner that gave
│                          no valid proposal, a budget the estimate exceeds, a bad suite)
├── CronRecursionError     a cron run tried to start cron runs itself
├── JudgeError             a judge run that gave no valid verdict (its model failed, it spent its
│                          budget, wrote no verdict or an invalid one): an error verdict that
│                          fails the rollout's grade, never a silent 0
├── SandboxError           a shell tool's command cannot run in a bubblewrap sandbox here (not
│                          installed, no user namespaces) and the caller did not opt out
├── BlockError, UnknownFamilyError   a model completion the tool-call parsers cannot read
├── OtlpRequestError       an OTLP request the receiver cannot decode (answered with its status)
└── NotStartedError        a client object (the scheduler, cron's jobs log) used before start()
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

from rolltape.schemas import RolltapeError


class ProducerError(RolltapeError):
    """Root of every error the producer SDK raises."""


class JudgeError(ProducerError):
    """A judge run gave no valid verdict. Raised inside the run and recorded as an error verdict
    naming the cause, so a judge that failed fails the grade instead of scoring 0."""


class RecorderError(ProducerError):
    """Recording could not be done or made durable (the receivers answer: retry)."""


class RecorderClosedError(RecorderError):
    """The recorder was closed, or the session already ended."""


class SpoolFullError(RecorderError):
    """The broker has been unreachable long enough to fill the spool."""


class BacklogFullError(RecorderError):
    """More events are queued in memory than `max_backlog` allows."""


class FlushTimeoutError(RecorderError):
    """Flush ran out of time; events stay queued, in flight or spooled and are not dropped."""


class RejectedEvent(BaseModel):
    """An event the recorder could not turn into a record, and why."""

    session_id: str
    stream: str
    type: str
    reason: str
    payload: dict[str, object]

    @classmethod
    def of(
        cls, session_id: str, stream: str, type: str, payload: Any, reason: str
    ) -> RejectedEvent:
        """The rejection as rejected.jsonl keeps it: the payload as JSON (what JSON cannot hold
        as its repr), and never a data key's secret (a session's key that did not reach the
        keys topic is reported by its id)."""
        if stream == "keys" and isinstance(payload, dict):
            payload = {k: v for k, v in payload.items() if k != "secret"}
        return cls(
            session_id=session_id,
            stream=stream,
            type=type,
            reason=reason,
            payload=orjson.loads(orjson.dumps(payload, default=repr)),
        )


class EventsRejectedError(RecorderError):
    """Some events could not be recorded; `rejected` lists them, `path` keeps them on disk."""

    def __init__(self, rejected: list[RejectedEvent], path: Path | None) -> None:
        self.rejected = rejected
        self.path = path
        first = rejected[0]
        more = f" (and {len(rejected) - 1} more)" if len(rejected) > 1 else ""
        where = f"; all are kept in {path}" if path else ""
        super().__init__(
            f"{len(rejected)} event(s) were not recorded{where}. First: {first.type} in session "
            f"{first.session_id}: {first.reason}{more}"
        )


class SenderDiedError(RecorderError):
    """A sender process of a recorder with `senders=N` ended without being stopped. The recorder
    refuses further events; the message says where the events it had not made durable are."""


class ResumeError(RecorderError):
    """A session's chain cannot be taken over from its head in the log; the message says why."""


class ChainConflictError(ResumeError):
    """Another writer reached the chain first: this writer's claim is set aside by every reader.
    Resume again to continue from the new head, or stop the other writer."""


class MonitorError(RecorderError):
    """The training monitor cannot measure as asked; the message says what to change."""


class HarnessError(RecorderError):
    """The decision harness cannot go on; the message says what to check."""


class PromptLoopError(ProducerError):
    """A prompt loop cannot go on; the rounds judged before it stopped stay on the log."""


class NotStartedError(ProducerError, RuntimeError):
    """A client object that talks to Kafka (the cron scheduler, its jobs log) was used before
    its start() or after its stop(): a programming error, named so callers can tell it from
    the broker being away."""


class EnvError(ProducerError, ValueError):
    """An environment cannot run as asked: a split without items, an items file that does not
    read, a batch name that is not one. The message says which."""


class ChannelError(ProducerError, ValueError):
    """A cron delivery channel named without what it needs (`file:` without a path, `webhook:`
    without an http(s) URL)."""


class SandboxError(ProducerError):
    """A shell tool's command cannot run in a bubblewrap sandbox here: bubblewrap is missing
    or cannot make namespaces. Raised rather than running the command unsandboxed, which only
    an explicit opt-out allows; the message says why and how to opt out."""
