"""What one GenAI span records in its trace's session (the span already joined to its log
records, see _events.py).

An inference span records the request messages the session does not hold yet and the reply
(or the model error), an `execute_tool` span the result of the call it ran (recording the call
first when no reply named it), and evaluation events feedback. The same call is recorded once: a
framework's inference span around the provider's, or two spans with the same response id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rolltape.producers._session import Session
from rolltape.producers.capture._conversation import Conversation
from rolltape.producers.otlp._genai import (
    INFERENCE_OPERATIONS,
    Inference,
    content_setting,
    evaluations,
    inference,
    is_genai,
    operation,
    tool_execution,
)
from rolltape.producers.otlp._wire import Span
from rolltape.schemas import result_failed


@dataclass
class _Thread:
    conversation: Conversation
    history: list[Any] | None = None
    """The GenAI messages this conversation holds, as spans write them (the last request and
    its reply): a request that starts with them records only its tail, without fingerprinting
    the whole conversation again (agents resend all of it on every call)."""


@dataclass
class SpanRecorder:
    """Records a trace's spans into its session, in conversation order."""

    session: Session
    family: str | None = None
    conversations: dict[bytes, _Thread] = field(default_factory=dict)
    """The session's conversations, one per agent (a trace may hold several agents, each
    sending its own history), keyed by how each request starts."""
    nested: set[str] = field(default_factory=set)
    """Span ids that wrap an inference span already recorded (a framework's span around the
    provider's), and response ids already recorded: the same call is not recorded twice."""
    inferences: int = 0
    without_content: int = 0
    """Inference spans recorded without their messages (all, or their input or output)."""
    gaps: set[str] = field(default_factory=set)
    """What those missed ("input and output", "input", "output")."""
    missing_setting: str | None = None
    """What would have sent the content of the first inference span that came without it."""
    missing_now: str | None = None
    """The same for the last inference span recorded without content."""
    unreadable: list[str] = field(default_factory=list)
    """Message attributes that were present but could not be read, with why (since the last
    time the ingest took them)."""

    def record(self, span: Span, call: Inference | None = None, events_came: bool = False) -> bool:
        """Record one span (`call`: its inference, when already read); False when it holds
        nothing GenAI (kept out of the session). Raises when its content breaks the mapping."""
        session = self.session
        recorded = False
        op = operation(span)
        if op in INFERENCE_OPERATIONS:
            call = call or inference(span)
            if span.span_id not in self.nested and (
                call.response_id is None or call.response_id not in self.nested
            ):
                self._inference(call, span, events_came)
            if span.parent_span_id:
                self.nested.add(span.parent_span_id)
            if call.response_id is not None:
                self.nested.add(call.response_id)
            recorded = True
        elif op == "execute_tool":
            self._tool(span)
            recorded = True
        for evaluation in evaluations(span):
            text = " - ".join(x for x in (evaluation.label, evaluation.explanation) if x)
            session.feedback(
                source=f"evaluation:{evaluation.name}", score=evaluation.score, text=text or None
            )
            recorded = True
        return recorded or is_genai(span)

    def content_missing(self) -> str | None:
        """The session's `content_missing` flag: how many inference spans came without content
        and what would send it, or None when every one had some."""
        if not self.without_content:
            return None
        what = (
            {
                "input and output": "no message content",
                "input": "no input messages",
                "output": "no output messages",
            }[next(iter(self.gaps))]
            if len(self.gaps) == 1
            else "only part of their message content"
        )
        return (
            f"{self.without_content} of {self.inferences} inference span(s) carried {what}: "
            f"{self.missing_setting}"
        )

    def _inference(self, call: Inference, span: Span, events_came: bool) -> None:
        self.inferences += 1
        self.unreadable.extend(call.unreadable)
        if call.missing is not None:
            self.without_content += 1
            self.gaps.add(call.missing)
            self.missing_now = content_setting(span, events_came)
            if self.missing_setting is None:
                self.missing_setting = self.missing_now
        thread = self.conversations.get(call.starts_with)
        if thread is None:
            thread = _Thread(Conversation(self.session, self.family))
            self.conversations[call.starts_with] = thread
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

    def _tool(self, span: Span) -> None:
        session = self.session
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


def _same_messages(sent: list[Any], known: list[Any]) -> bool:
    """Whether messages a request starts with are the ones recorded: equal, or equal but for
    the `finish_reason` an echoed reply may carry again, or, for an assistant message that made
    calls, the same call ids (as `fingerprint` knows it: OpenTelemetry's openai-v2 resends such
    a message without its text)."""
    for a, b in zip(sent, known, strict=True):
        if a == b:
            continue
        if not (isinstance(a, dict) and isinstance(b, dict)):
            return False
        if {k: v for k, v in a.items() if k != "finish_reason"} == b:
            continue
        if (
            a.get("role") == b.get("role") == "assistant"
            and _parts_call_ids(a) == _parts_call_ids(b) != ()
        ):
            continue
        return False
    return True


def _parts_call_ids(message: dict[str, Any]) -> tuple[str, ...]:
    """The ids of a GenAI message's `tool_call` parts; () when it made none or one has no id
    (the capture's fingerprint reads the same from OpenAI-form messages)."""
    parts = message.get("parts")
    if not isinstance(parts, list):
        return ()
    ids = [p.get("id") for p in parts if isinstance(p, dict) and p.get("type") == "tool_call"]
    named = [i for i in ids if isinstance(i, str) and i]
    return tuple(named) if len(named) == len(ids) else ()
