"""A session of the recorder: one run or episode, and its record calls.

Apart from the recorder (`_recorder.py`, which owns the sender, the spool, flushing and closing)
because this is the API an agent calls on every step: turns, tool calls and results, rewards,
feedback, worlds, verdicts and prompt events, each a thin shortcut of `Session.record(payload)`,
and the session's end. Every call only queues on the recorder (never blocks, never does I/O).
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar

from pydantic import BaseModel

from rolltape.producers._errors import (
    RecorderClosedError,
)
from rolltape.producers._queued import Payload
from rolltape.producers._tools import ToolRun, _current
from rolltape.producers._world import WorldError, WorldLimits, take_snapshot
from rolltape.producers.privacy import Redaction
from rolltape.schemas import (
    PAYLOAD_MODELS,
    STREAM_EVENT_TYPES,
    Stream,
    ToolCall,
    ToolResult,
    WorldSnapshot,
)

if TYPE_CHECKING:
    from rolltape.producers._recorder import Recorder

_EVENTS = Stream.EVENTS.value
_MAX_WORLD_EVENT_BYTES = 900_000
"""A world_snapshot event is its manifest and a digest: under the record limit (1 MB)."""
C = TypeVar("C")

_RECORDED_ELSEWHERE = {
    "session_started": "Recorder.session() records it",
    "session_resumed": "Recorder.session(resume=True) records it",
    "session_ended": "Session.end() records it, naming the streams other writers record on",
    "world_snapshot": "Session.world(root) records it, with the contents it lists",
    "metric": "the training monitor records it, on the session's metrics chain",
    "model_spec": "the training monitor records it, on the session's metrics chain",
    "live_check": "the training monitor records it, on the session's metrics chain",
}

_RECORDED: dict[type[BaseModel], str] = {
    PAYLOAD_MODELS[event_type]: event_type
    for event_type in sorted(STREAM_EVENT_TYPES[_EVENTS] - _RECORDED_ELSEWHERE.keys())
}
"""Payload model -> event type, for the events `Session.record` takes: the events stream's
types (schemas' one table) but those recorded elsewhere, PAYLOAD_MODELS read the other way
(each type has a model of its own)."""


def _not_recorded(payload: object) -> str:
    """Why `Session.record` refuses `payload`, and what records it."""
    event_type = next((t for t, m in PAYLOAD_MODELS.items() if m is type(payload)), None)
    if event_type is None:
        return (
            "Session.record takes a payload model of rolltape.schemas (Turn, ToolCall, ...), "
            f"not {type(payload).__name__}"
        )
    where = _RECORDED_ELSEWHERE.get(event_type, "its writer records it on a stream of its own")
    return f"Session.record does not record {event_type} events: {where}"


def redacted(redaction: Redaction, event_type: str, payload: Payload) -> Payload:
    """A payload model as the policy leaves it: the model itself when no rule changes its dump,
    else the redacted dump (validated on the sender thread, as any mapping)."""
    if not isinstance(payload, BaseModel):
        return redaction.apply(event_type, payload)
    dumped = payload.model_dump()
    redacted = redaction.apply(event_type, dumped)
    return payload if redacted is dumped else redacted


def _copy_containers(fields: dict[str, Any]) -> dict[str, Any]:
    """Copy the top-level containers among keyword values (a per-layer dict, remedy params), so
    a caller reusing them after the call cannot change what gets recorded."""
    for key, value in fields.items():
        if isinstance(value, dict):
            fields[key] = dict(value)
        elif isinstance(value, list):
            fields[key] = list(value)
    return fields


class Session:
    """One run or episode. Record calls are cheap and never block; see Recorder."""

    __slots__ = (
        "_answered",
        "_context_tokens",
        "_ended",
        "_open_calls",
        "_other_streams",
        "_recorder",
        "session_id",
    )

    def __init__(self, recorder: Recorder, session_id: str) -> None:
        self._recorder = recorder
        self.session_id = session_id
        self._ended = False
        self._open_calls: list[tuple[str, str, dict[str, Any]]] = []
        """(call id, name, arguments) of recorded calls without a result yet, oldest first."""
        self._context_tokens: list[contextvars.Token[Session | None]] = []
        self._answered: set[str] = set()
        """Call ids whose result is recorded (a captured client skips the agent's echo)."""
        self._other_streams: set[str] = set()
        """Streams other writers record this session on (the monitor's metrics): the events
        stream's session_ended names them."""

    def _record(self, stream: str, event_type: str, payload: Payload) -> None:
        if self._ended:
            raise RecorderClosedError(f"session {self.session_id} has ended")
        self._recorder._enqueue(self.session_id, stream, event_type, payload)

    def record(self, payload: BaseModel) -> None:
        """Record a payload model of `rolltape.schemas` as the event of its type: `Turn`,
        `ToolCall`, `ToolResult`, `ModelError`, `ToolParseError`, `Decision`, `Reward`,
        `Feedback`, `Evaluation`, `RulesetEvaluation`, `Verdict`, `PromptVersion`,
        `PromptPromotion`, `PromptDecision`. The model was validated when it was made: it is
        handed on as it is, not validated again, and dumped once, on the sender thread, to the
        bytes the shortcut of its type (`turn`, `tool_call`, ...) writes for the same values.
        It is read after the call, as mappings are: do not change its containers (a dict
        field) after recording it. A `ToolCall` is open for `tool` and the client capture until
        a `ToolResult` with its id is recorded, as with `tool_call`. TypeError for a type a
        session does not record this way (`session_started`, `session_ended`: the session's own;
        `world_snapshot`: `world`; metrics: the training monitor).

        The shortcuts are `record` without the model: they take the fields and queue the
        mapping the model would dump to, since building a model validates it in the record
        call (several times what a turn costs now), and an invalid value raises there instead
        of being reported by the next flush (`EventsRejectedError`)."""
        event_type = _RECORDED.get(type(payload))
        if event_type is None:
            raise TypeError(_not_recorded(payload))
        if isinstance(payload, ToolCall):
            self._open_calls.append((payload.id, payload.name, dict(payload.arguments)))
        elif isinstance(payload, ToolResult):
            self._open_calls = [c for c in self._open_calls if c[0] != payload.call_id]
            self._answered.add(payload.call_id)
        self._record(_EVENTS, event_type, payload)

    def turn(
        self,
        role: Literal["system", "user", "assistant"],
        content: str,
        *,
        reasoning: str | None = None,
        token_ids: Sequence[int] | None = None,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        prompt_token_ids: Sequence[int] | None = None,
        logprobs: Sequence[float] | None = None,
        finish_reason: str | None = None,
        model: str | None = None,
        latency_ms: float | None = None,
        model_version: str | None = None,
    ) -> None:
        """Record one message. For a model's reply: `token_ids` and `prompt_token_ids` as the
        serving engine produced them, `logprobs` of the sampled tokens, the usage report
        (`prompt_tokens` / `completion_tokens`), why it stopped, which model answered, how
        long it took and the model version the endpoint serves. The client capture fills these
        in."""
        payload: dict[str, Any] = {
            "role": role,
            "content": content,
            "reasoning": reasoning,
            "token_ids": tuple(token_ids) if token_ids is not None else None,
        }
        for key, value in (  # a reply's facts, written when known (a typed turn is four keys)
            ("prompt_tokens", prompt_tokens),
            ("completion_tokens", completion_tokens),
            ("prompt_token_ids", prompt_token_ids),
            ("logprobs", logprobs),
            ("finish_reason", finish_reason),
            ("model", model),
            ("latency_ms", latency_ms),
            ("model_version", model_version),
        ):
            if value is not None:
                payload[key] = tuple(value) if isinstance(value, list | tuple) else value
        self._record(_EVENTS, "turn", payload)

    def tool_call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        call_id: str | None = None,
        raw_arguments: str | None = None,
    ) -> str:
        """Record a tool call; returns its id (generated when not given) for `tool_result`."""
        cid = call_id or f"call_{uuid.uuid4().hex[:16]}"
        self._open_calls.append((cid, name, dict(arguments or {})))
        self._record(
            _EVENTS,
            "tool_call",
            {
                "id": cid,
                "name": name,
                "arguments": dict(arguments or {}),
                "raw_arguments": raw_arguments,
            },
        )
        return cid

    def tool_result(
        self,
        call_id: str,
        content: str,
        *,
        success: bool = True,
        error: str | None = None,
        duration_ms: float | None = None,
    ) -> None:
        self._open_calls = [c for c in self._open_calls if c[0] != call_id]
        self._answered.add(call_id)
        self._record(
            _EVENTS,
            "tool_result",
            {
                "call_id": call_id,
                "content": content,
                "success": success,
                "error": error,
                "duration_ms": duration_ms,
            },
        )

    def tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, *, call_id: str | None = None
    ) -> ToolRun:
        """Time one run of a tool and record its result: `with s.tool("calc", args) as run:
        run.result = ...`. See `rolltape.producers.record_tool` for the rule and call linking."""
        return ToolRun(self, name, arguments, call_id=call_id)

    def capture(
        self, client: C, *, family: str | None = None, model_version: str | None = None
    ) -> C:
        """A copy of an `openai.OpenAI` / `AsyncOpenAI` client whose `chat.completions.create`
        records into this session (the `openai` extra); see `rolltape.producers.capture`.
        `model_version`: the version the endpoint serves, recorded on every reply."""
        from rolltape.producers.capture import capture

        return capture(client, session=self, family=family, model_version=model_version)

    def _claim_call(self, name: str, arguments: Mapping[str, Any]) -> str | None:
        """The oldest recorded call of `name` with these arguments that has no result yet."""
        for i, (cid, called, args) in enumerate(self._open_calls):
            if called == name and args == arguments:
                del self._open_calls[i]
                return cid
        return None

    def _expect(self, stream: str) -> None:
        """Another writer (the training monitor) records this session on `stream`: the events
        stream's session_ended must name it, so processors wait for that chain's end too."""
        self._other_streams.add(stream)

    def evaluation(self, evaluation: Mapping[str, Any]) -> None:
        """An environment's evaluation of a split (rolltape.schemas.Evaluation, dumped; or
        `record` the model)."""
        self._record(_EVENTS, "evaluation", dict(evaluation))

    def ruleset_evaluation(self, evaluation: Mapping[str, Any]) -> None:
        """A rule set's measured false alarms and detections (rolltape.schemas.RulesetEvaluation,
        dumped; or `record` the model)."""
        self._record(_EVENTS, "ruleset_evaluation", dict(evaluation))

    def world(
        self, root: str | os.PathLike[str], limits: WorldLimits | None = None
    ) -> tuple[WorldSnapshot, dict[str, bytes]]:
        """Record the tree under `root` as a world of the session (a rollout records the one its
        environment set up, before the agent runs, and the one the agent left, before any judge
        reads it; the last is the session's world): the contents within `limits` as blobs on the blobs topic (each once per
        recorder) with the snapshot's manifest under its digest, then a `world_snapshot` event
        listing every entry's path, mode, size and sha256. Returns the snapshot and the contents it kept (`take_snapshot`'s answer); the
        digest names the world in the verdicts of judges that read it, and a replay restores
        it from the log. A world of more entries than one event may list (some 5,000) is a
        WorldError."""
        snapshot, blobs = take_snapshot(Path(root), limits)
        if len(snapshot.manifest) > _MAX_WORLD_EVENT_BYTES:
            raise WorldError(
                f"the world under {root} lists {len(snapshot.entries)} entries "
                f"({len(snapshot.manifest):,} bytes), more than one event may hold "
                f"({_MAX_WORLD_EVENT_BYTES:,}): leave build outputs and caches out of the workdir"
            )
        # The manifest too, under the digest: a world is found on the blobs topic by its digest.
        self._recorder._queue_blobs({**blobs, snapshot.digest: snapshot.manifest})
        self._record(_EVENTS, "world_snapshot", snapshot)
        return snapshot, blobs

    def verdict(self, verdict: Mapping[str, Any]) -> None:
        """A judge's verdict on this session given where it ran (an environment's judges at the
        end of a rollout: rolltape.schemas.Verdict, dumped; or `record` the model). The agent's
        own record, as its rewards are; the worker's verdicts go on the verdicts stream, in the
        judge's domain."""
        self._record(_EVENTS, "verdict", dict(verdict))

    def prompt_version(self, version: Mapping[str, Any]) -> None:
        """A version of a prompt target (rolltape.schemas.PromptVersion, dumped; or `record`
        the model)."""
        self._record(_EVENTS, "prompt_version", dict(version))

    def prompt_promotion(self, promotion: Mapping[str, Any]) -> None:
        """A target's new champion (rolltape.schemas.PromptPromotion, dumped; or `record` the
        model): the log, not a file, says which version is the champion."""
        self._record(_EVENTS, "prompt_promotion", dict(promotion))

    def prompt_decision(self, decision: Mapping[str, Any]) -> None:
        """A prompt loop's round judged (rolltape.schemas.PromptDecision, dumped; or `record`
        the model): the rule, the paired held-out results and the outcome, so anyone can
        recompute it from the log."""
        self._record(_EVENTS, "prompt_decision", _copy_containers(dict(decision)))

    def decision(self, **fields: Any) -> None:
        """A training decision in the strict schema (rolltape.schemas.Decision; or `record`
        the model)."""
        self._record(_EVENTS, "decision", _copy_containers(fields))

    def reward(
        self,
        value: float,
        *,
        name: str = "reward",
        components: Mapping[str, float] | None = None,
        source: str | None = None,
    ) -> None:
        self._record(
            _EVENTS,
            "reward",
            {"value": value, "name": name, "components": dict(components or {}), "source": source},
        )

    def feedback(
        self,
        *,
        source: str = "user",
        score: float | None = None,
        text: str | None = None,
        about_seq: int | None = None,
    ) -> None:
        self._record(
            _EVENTS,
            "feedback",
            {"source": source, "score": score, "text": text, "about_seq": about_seq},
        )

    def end(
        self,
        status: Literal["completed", "interrupted", "failed"] = "completed",
        *,
        outcome: Mapping[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        """Record session_ended on the events chain; later record calls on this session raise.

        It lists the streams other writers record this session on (a training monitor's
        metrics), which end their own chains, so a processor reading several topics knows when
        it has all of the session.
        """
        self._record(
            _EVENTS,
            "session_ended",
            {
                "status": status,
                "outcome": dict(outcome or {}),
                "error": error,
                "streams": sorted(self._other_streams),
            },
        )
        self._ended = True

    @property
    def ended(self) -> bool:
        return self._ended

    # A session used as a context manager ends itself: completed on a clean exit, interrupted on
    # KeyboardInterrupt/cancellation, failed on any other exception (with its text).
    def _end_from(self, exc: BaseException | None) -> None:
        if self._ended:
            return
        if exc is None:
            self.end("completed")
        elif isinstance(exc, KeyboardInterrupt | asyncio.CancelledError | GeneratorExit):
            self.end("interrupted", error=type(exc).__name__)
        else:
            self.end("failed", error=f"{type(exc).__name__}: {exc}")

    # Inside the block the session is current: decorated tools and captured clients record there.
    def _enter(self) -> None:
        self._context_tokens.append(_current.set(self))

    def _leave(self) -> None:
        if self._context_tokens:
            token = self._context_tokens.pop()
            try:
                _current.reset(token)
            except ValueError:  # left in another context (a generator finished elsewhere)
                _current.set(None)

    def __enter__(self) -> Self:
        self._enter()
        return self

    def __exit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._leave()
        self._end_from(exc)

    async def __aenter__(self) -> Self:
        self._enter()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._leave()
        self._end_from(exc)
