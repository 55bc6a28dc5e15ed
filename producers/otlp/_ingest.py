"""Traces into sessions: one session per trace, written as the trace's spans arrive.

A trace becomes a session (`otel-<trace id>`) when its first GenAI span arrives; spans of other
libraries in the same trace (HTTP, databases) are not recorded. Within a batch a trace's spans
are applied in the order they ended, which is the conversation's order: an inference span
records the request messages the session does not hold yet and the reply, an `execute_tool`
span the result of the call it ran (recording the call first when no reply named it), and
evaluation events feedback. The session ends `linger_s` after its root span arrived (spans of
other processes may come a little later), as failed when the root span failed; a trace whose
root never comes ends as interrupted after `idle_s` without spans.

Spans are deduplicated by id, so a batch sent again is a redelivery. A span that arrives after
its trace's session ended (or after a receiver restart, which loses the chain's head) starts a
continuation session `otel-<trace id>.<n>` linked to the previous one: a chain is never
reopened or forked.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rolltape.producers._errors import RecorderError
from rolltape.producers._recorder import Recorder, Session
from rolltape.producers.capture._conversation import Conversation
from rolltape.producers.otlp._genai import (
    INFERENCE_OPERATIONS,
    Inference,
    evaluations,
    inference,
    is_genai,
    is_local_root,
    operation,
    tool_execution,
)
from rolltape.producers.otlp._journal import Journal
from rolltape.producers.otlp._wire import STATUS_ERROR, Span
from rolltape.schemas import result_failed

TAG = "otlp"


def session_id_for(trace_id: str, generation: int) -> str:
    """The session of a trace's `generation`-th chain: `otel-<trace id>` for the first, then
    `otel-<trace id>.<n>` for each continuation (a chain is never reopened)."""
    return f"otel-{trace_id}" if generation == 1 else f"otel-{trace_id}.{generation}"


@dataclass
class _Thread:
    conversation: Conversation
    history: list[Any] | None = None
    """The GenAI messages this conversation holds, as spans write them (the last request and
    its reply): a request that starts with them records only its tail, without fingerprinting
    the whole conversation again (agents resend all of it on every call)."""


@dataclass
class _Trace:
    trace_id: str
    generation: int
    session: Session | None = None
    conversations: dict[bytes, _Thread] = field(default_factory=dict)
    """The session's conversations, one per agent (a trace may hold several agents, each
    sending its own history), keyed by how each request starts."""
    nested: set[str] = field(default_factory=set)
    """Span ids that wrap an inference span already recorded (a framework's span around the
    provider's), and response ids already recorded: the same call is not recorded twice."""
    seen: set[str] = field(default_factory=set)
    """Span ids applied (in this process or, per the journal, before)."""
    last_span_at: float = 0.0
    root_at: float | None = None
    root_error: str | None = None
    ended_at: float | None = None


@dataclass
class Applied:
    """What one batch did; `recorded` is journaled once the records are durable."""

    spans: int = 0
    recorded: list[tuple[str, str]] = field(default_factory=list)
    redelivered: int = 0
    again: list[tuple[str, str]] = field(default_factory=list)
    """(trace, span) of redelivered spans: journaled again once the batch is durable (the
    first delivery may have failed before its ids were journaled)."""
    rejected: list[str] = field(default_factory=list)
    """Spans whose content could not be mapped, with why."""
    not_genai: int = 0
    sessions_started: list[str] = field(default_factory=list)
    without_content: int = 0
    unreadable: list[str] = field(default_factory=list)

    def warning(self) -> str:
        """The note for the sender's partial_success (empty when all went as expected)."""
        notes = []
        if self.without_content:
            notes.append(
                f"{self.without_content} inference span(s) carried no messages: turn on message "
                "content capture in the instrumentation "
                "(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true)"
            )
        notes.extend(f"unreadable attribute {u}" for u in self.unreadable[:5])
        return "; ".join(notes)


class TraceIngest:
    """Applies span batches to sessions through one Recorder (the caller flushes it before
    acknowledging) and ends sessions when their traces are done (`end_due`)."""

    def __init__(
        self,
        recorder: Recorder,
        journal: Journal,
        *,
        family: str | None = None,
        linger_s: float = 5.0,
        idle_s: float = 300.0,
        forget_after_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
        subject_attribute: str | None = None,
    ) -> None:
        self.recorder = recorder
        self.journal = journal
        self.family = family
        self.subject_attribute = subject_attribute
        """A span or resource attribute naming the trace's subject (`enduser.id`): the
        session then seals its content under a data key of its own."""
        self.linger_s = linger_s
        self.idle_s = idle_s
        self.forget_after_s = forget_after_s
        self.clock = clock
        self._traces: dict[str, _Trace] = {}
        self._open: dict[str, _Trace] = {}
        """Traces whose session is open: the ones `end_due` looks at."""
        self._idle: collections.deque[tuple[float, str]] = collections.deque()
        """(when, trace) of traces without an open session, oldest first, to forget them."""
        self._read_ahead: dict[str, Inference] = {}
        """Inference spans already read to start their session (read once)."""

    # -- a batch ---------------------------------------------------------------------------------
    def apply(self, spans: Sequence[Span]) -> Applied:
        """Record a batch. A span is marked seen only once applied, so when the recorder
        refuses records midway (RecorderError, answered 503) the rest of the batch is applied
        when it is sent again. A span whose content breaks the mapping is rejected with why
        (what it recorded before that stays)."""
        done = Applied(spans=len(spans))
        by_trace: dict[str, list[Span]] = {}
        for span in spans:
            by_trace.setdefault(span.trace_id, []).append(span)
        now = self.clock()
        fresh: dict[str, list[Span]] = {}
        for trace_id, group in by_trace.items():
            trace = self._trace(trace_id)
            new: dict[str, Span] = {}
            for span in group:
                if span.span_id in trace.seen or span.span_id in new:
                    done.redelivered += 1
                    done.again.append((trace_id, span.span_id))
                else:
                    new[span.span_id] = span
            if new:
                trace.last_span_at = now
                fresh[trace_id] = sorted(new.values(), key=lambda s: (s.end_ns, s.start_ns))
        starting = [
            t
            for t, group in fresh.items()
            if self._needs_session(self._traces[t]) and any(is_genai(s) for s in group)
        ]
        if starting:  # journaled before the first record: a restart never starts them again
            entries = []
            for trace_id in starting:
                trace = self._traces[trace_id]
                if trace.session is not None:  # its session ended: continue in a new one
                    trace.generation += 1
                entries.append(
                    (trace_id, trace.generation, session_id_for(trace_id, trace.generation))
                )
            self.journal.open_sessions(entries)
        for trace_id, group in fresh.items():
            trace = self._traces[trace_id]
            if trace_id in starting:
                self._start(trace, group)
                done.sessions_started.append(trace.session.session_id)  # type: ignore[union-attr]
            for span in group:
                self._one(trace, span, done, now)
                trace.seen.add(span.span_id)
        return done

    def _one(self, trace: _Trace, span: Span, done: Applied, now: float) -> None:
        if trace.session is None or trace.session.ended:
            done.not_genai += 1
            return
        try:
            recorded = self._apply(trace, span, done)
        except RecorderError:
            raise
        except Exception as exc:  # the span's content broke the mapping: reject it, say why
            done.rejected.append(f"span {span.span_id}: {type(exc).__name__}: {exc}")
            return
        if recorded:
            done.recorded.append((trace.trace_id, span.span_id))
        else:
            done.not_genai += 1
        if is_local_root(span):
            trace.root_at = now
            if span.status_code == STATUS_ERROR:
                trace.root_error = span.status_message or span.name

    def _trace(self, trace_id: str) -> _Trace:
        trace = self._traces.get(trace_id)
        if trace is None:
            known = self.journal.trace(trace_id)
            if known is None:
                trace = _Trace(trace_id, generation=1)
            else:  # seen by an earlier run of the receiver: its chain's head is gone
                trace = _Trace(trace_id, generation=known[0] + 1)
                trace.seen = self.journal.recorded_spans(trace_id)
                trace.ended_at = self.clock()
            self._traces[trace_id] = trace
            self._idle.append((self.clock(), trace_id))
        return trace

    def _needs_session(self, trace: _Trace) -> bool:
        return trace.session is None or trace.session.ended

    def _start(self, trace: _Trace, group: Sequence[Span]) -> None:
        previous = trace.session.session_id if trace.session is not None else None
        if previous is None and trace.generation > 1:
            previous = session_id_for(trace.trace_id, trace.generation - 1)
        first_span = next((s for s in group if operation(s) in INFERENCE_OPERATIONS), None)
        first = None
        try:
            if first_span is not None:
                first = self._read_ahead[first_span.span_id] = inference(first_span)
            task = _task(first, group, trace.trace_id)
        except Exception:  # the span is rejected with why when it is applied
            first, task = None, _task(None, group, trace.trace_id)
        resource = group[0].resource
        service = resource.get("service.name")
        run_config: dict[str, Any] = {"otel": {"trace_id": trace.trace_id}}
        if isinstance(service, str):
            run_config["otel"]["service.name"] = service
        if trace.generation > 1:
            run_config["otel"]["continues"] = previous
        trace.session = self.recorder.session(
            task,
            subject=self._subject(group),
            session_id=session_id_for(trace.trace_id, trace.generation),
            tools=first.tools if first else (),
            model=first.model if first else None,
            run_config=run_config,
            tags=[TAG] if trace.generation == 1 else [TAG, "continuation"],
            linked_session_id=previous,
        )
        trace.conversations = {}
        trace.nested = set()
        self._open[trace.trace_id] = trace
        trace.root_at = None
        trace.root_error = None
        trace.ended_at = None

    def _subject(self, group: Sequence[Span]) -> str | None:
        """The trace's subject: the attribute on one of its first spans, else on their
        resource; None when the receiver was not told which attribute names it."""
        name = self.subject_attribute
        if name is None:
            return None
        for found in (*(s.attributes.get(name) for s in group), group[0].resource.get(name)):
            if isinstance(found, str) and found:
                return found
        return None

    def _apply(self, trace: _Trace, span: Span, done: Applied) -> bool:
        """Record one span; False when it holds nothing GenAI (kept out of the session)."""
        session = trace.session
        assert session is not None
        recorded = False
        op = operation(span)
        if op in INFERENCE_OPERATIONS:
            call = self._read_ahead.pop(span.span_id, None) or inference(span)
            if span.span_id not in trace.nested and (
                call.response_id is None or call.response_id not in trace.nested
            ):
                self._inference(trace, call, done)
            if span.parent_span_id:
                trace.nested.add(span.parent_span_id)
            if call.response_id is not None:
                trace.nested.add(call.response_id)
            recorded = True
        elif op == "execute_tool":
            self._tool(session, span)
            recorded = True
        for evaluation in evaluations(span):
            text = " - ".join(x for x in (evaluation.label, evaluation.explanation) if x)
            session.feedback(
                source=f"evaluation:{evaluation.name}", score=evaluation.score, text=text or None
            )
            recorded = True
        return recorded or is_genai(span)

    def _inference(self, trace: _Trace, call: Inference, done: Applied) -> None:
        assert trace.session is not None
        done.unreadable.extend(call.unreadable)
        if not call.content_captured:
            done.without_content += 1
        thread = trace.conversations.get(call.starts_with)
        if thread is None:
            thread = _Thread(Conversation(trace.session, self.family))
            trace.conversations[call.starts_with] = thread
        conversation, known, raw = thread.conversation, thread.history, call.raw_input
        if known and len(raw) >= len(known) and _same_messages(raw[: len(known)], known):
            conversation.extend(call.messages(skip=len(known)))
        else:
            conversation.request(call.messages())
        thread.history = list(raw) if raw else None
        if call.error is not None:
            conversation.error(
                call.error[0],
                call.error[1],
                status=call.status,
                model=call.model,
                latency_ms=call.latency_ms,
            )
        elif call.reply is not None:
            conversation.reply(call.reply, call.latency_ms, call.tools)
            if thread.history is not None:
                if call.raw_output is None:
                    thread.history = None
                else:
                    thread.history.append(call.raw_output)

    def _tool(self, session: Session, span: Span) -> None:
        run = tool_execution(span)
        arguments = run.arguments if isinstance(run.arguments, dict) else {}
        raw = run.arguments if isinstance(run.arguments, str) else None
        call_id = run.call_id
        if call_id is None:  # the oldest open call of this name and arguments, if any
            call_id = session._claim_call(run.name, arguments)
            if call_id is None:
                call_id = session.tool_call(
                    run.name, arguments, call_id=f"call_{span.span_id}", raw_arguments=raw
                )
        elif call_id in session._answered:
            return  # its result came with a request already
        elif all(open_id != call_id for open_id, _, _ in session._open_calls):
            session.tool_call(run.name, arguments, call_id=call_id, raw_arguments=raw)
        content = run.result if run.result is not None else ""
        success = not run.failed and (run.result is None or not result_failed(content))
        session.tool_result(
            call_id, content, success=success, error=run.error, duration_ms=run.duration_ms
        )

    # -- ending ----------------------------------------------------------------------------------
    def end_due(self) -> list[str]:
        """End the sessions whose traces are done; forget traces ended long ago (the journal
        still knows them). Returns the ended session ids."""
        now = self.clock()
        ended = []
        for trace in list(self._open.values()):
            session = trace.session
            assert session is not None
            if trace.root_at is not None and now - trace.last_span_at >= self.linger_s:
                self._end(trace, now)
                ended.append(session.session_id)
            elif now - trace.last_span_at >= self.idle_s:
                self._end(trace, now, idle=True)
                ended.append(session.session_id)
        idle = self._idle
        while idle and now - idle[0][0] >= self.forget_after_s:
            _, trace_id = idle.popleft()
            remembered = self._traces.get(trace_id)
            if remembered is None or trace_id in self._open:
                continue
            since = (
                remembered.ended_at if remembered.ended_at is not None else remembered.last_span_at
            )
            if now - since >= self.forget_after_s:
                del self._traces[trace_id]
            else:  # active again since: look later
                idle.append((since, trace_id))
        return ended

    def _end(self, trace: _Trace, now: float, *, idle: bool = False, reason: str = "") -> None:
        session = trace.session
        assert session is not None
        if idle or reason:
            session.end(
                "interrupted",
                error=reason
                or f"no span for {self.idle_s:g}s and the trace's root span never arrived",
            )
        elif trace.root_error is not None:
            session.end("failed", error=trace.root_error)
        else:
            session.end("completed")
        trace.ended_at = now
        self._open.pop(trace.trace_id, None)
        self._idle.append((now, trace.trace_id))

    def end_all(self, reason: str) -> list[str]:
        """At shutdown: traces whose root arrived end as usual, the others as interrupted."""
        now = self.clock()
        ended = []
        for trace in list(self._open.values()):
            session = trace.session
            if session is not None and not session.ended:
                if trace.root_at is not None:
                    self._end(trace, now)
                else:
                    self._end(trace, now, reason=reason)
                ended.append(session.session_id)
        return ended


def _same_messages(sent: list[Any], known: list[Any]) -> bool:
    """Whether messages a request starts with are the ones recorded (an echoed reply may carry
    its `finish_reason` again)."""
    for a, b in zip(sent, known, strict=True):
        if a != b and not (
            isinstance(a, dict) and {k: v for k, v in a.items() if k != "finish_reason"} == b
        ):
            return False
    return True


def _task(first: Inference | None, group: Sequence[Span], trace_id: str) -> str:
    """What the session was asked: the first user message, else the agent's or root's name."""
    if first is not None:
        for message in first.messages():
            if message.get("role") == "user" and message.get("content"):
                return str(message["content"])
    for span in group:
        agent = span.attributes.get("gen_ai.agent.name")
        if isinstance(agent, str) and agent:
            return agent
    roots = [s.name for s in group if not s.parent_span_id]
    return roots[0] if roots else f"trace {trace_id}"
