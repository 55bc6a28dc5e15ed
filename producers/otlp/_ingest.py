"""Traces into sessions: one session per trace, written as the trace's spans and log records
arrive, in any order.

A trace becomes a session (`otel-<trace id>`) when its first GenAI span is recorded; spans of
other libraries in the same trace (HTTP, databases) are not recorded. A trace's spans wait in
its queue, in the order they ended (the conversation's order), and are recorded from the front:
an inference span as soon as its content is there (on the span, or its log records' choice or
details event came: see _events.py), otherwise once `join_wait_s` passed since it arrived (then
without content, and the session is flagged `content_missing`); a span behind a waiting one
waits too. GenAI log records wait for their span, joined to it by trace and span id. The
session ends `linger_s` after its root span arrived (spans of other processes may come a little
later) and nothing waits, as failed when the root span failed; a trace whose root never comes
ends as interrupted after `idle_s` without spans.

Spans are deduplicated by id and log records by their content, so a batch sent again is a
redelivery. A span that arrives after its trace's session ended (or after a receiver restart,
which loses the chain's head) starts a continuation session `otel-<trace id>.<n>` linked to the
previous one: a chain is never reopened or forked. What waits was acknowledged, so it is held in
the journal until it is recorded (`Applied.hold` / `release`), and a restarted receiver takes it
back (`TraceIngest.restore`).

Nothing is dropped in silence: every span or log record that is not recorded is counted in
`Applied.unmapped` by reason.
"""

from __future__ import annotations

import bisect
import collections
import hashlib
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

from rolltape.producers._errors import RecorderError
from rolltape.producers._recorder import Recorder
from rolltape.producers._session import Session
from rolltape.producers.otlp._applied import Applied
from rolltape.producers.otlp._events import completes, event_kind, joined
from rolltape.producers.otlp._genai import (
    INFERENCE_OPERATIONS,
    Inference,
    inference,
    is_genai,
    is_local_root,
    operation,
)
from rolltape.producers.otlp._grouping import (
    group_key,
    grouping,
)
from rolltape.producers.otlp._journal import Journal
from rolltape.producers.otlp._log_records import LogRecord
from rolltape.producers.otlp._openinference import RECORDED_KINDS, as_genai
from rolltape.producers.otlp._openinference import kind as openinference_kind
from rolltape.producers.otlp._span_records import SpanRecorder
from rolltape.producers.otlp._stored import restored, stored
from rolltape.producers.otlp._traces import (
    ENDED,
    Closed,
    Group,
    Trace,
    Waiting,
    WaitingLog,
    needs_session,
    session_id_of,
    span_order,
)
from rolltape.producers.otlp._wire import STATUS_ERROR, Span
from rolltape.schemas import CONTENT_MISSING

TAG = "otlp"


class TraceIngest:
    """Applies span and log batches to sessions through one Recorder (the caller flushes it
    before acknowledging, then settles the journal) and ends sessions when their traces are
    done (`tick`)."""

    def __init__(
        self,
        recorder: Recorder,
        journal: Journal,
        *,
        family: str | None = None,
        linger_s: float = 5.0,
        idle_s: float = 300.0,
        join_wait_s: float = 10.0,
        forget_after_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
        subject_attribute: str | None = None,
        owns_session: Callable[[str], bool] = lambda key: True,
    ) -> None:
        self.recorder = recorder
        self.journal = journal
        self.family = family
        self.subject_attribute = subject_attribute
        """A span or resource attribute naming the trace's subject (`enduser.id`, or
        OpenInference's `user.id`): the session then seals its content under a data key of its
        own."""
        self.linger_s = linger_s
        self.idle_s = idle_s
        self.join_wait_s = join_wait_s
        """How long an inference span without content waits for its log records."""
        self.forget_after_s = forget_after_s
        self.clock = clock
        self.owns_session = owns_session
        """Whether this ingest writes the session of a `session:<id>` group (a worker of a pool
        owns some; a trace routed here whose session another owns is a session of its own)."""
        self._traces: dict[str, Trace] = {}
        self._groups: dict[str, Group] = {}
        self._open: dict[str, Group] = {}
        """Groups whose session is open: the ones `tick` looks at to end them."""
        self._waiting: dict[str, Trace] = {}
        """Traces with spans or log records waiting."""
        self._idle: collections.deque[tuple[float, str]] = collections.deque()
        """(when, trace) of traces, oldest first, to forget them."""
        self._carry = Applied()
        """What batches that were not made durable leave to journal (see `not_durable`)."""

    # -- a batch ---------------------------------------------------------------------------------
    def apply(self, spans: Sequence[Span] = (), logs: Sequence[LogRecord] = ()) -> Applied:
        """Take a batch and record what is ready. A span is marked seen only once recorded, so
        when the recorder refuses records midway (RecorderError, answered 503) the rest is
        recorded when the batch is sent again. A span whose content breaks the mapping is
        rejected with why (what it recorded before that stays)."""
        done = self._fresh(spans=len(spans), logs=len(logs))
        now = self.clock()
        touched: dict[str, Trace] = {}
        self._load(
            [
                *(r.trace_id for r in logs if r.trace_id and event_kind(r)),
                *(s.trace_id for s in spans),
            ]
        )
        for record in logs:
            self._take_log(record, done, now, touched)
        by_trace: dict[str, list[Span]] = {}
        for span in spans:
            by_trace.setdefault(span.trace_id, []).append(span)
        for trace_id, group in by_trace.items():
            trace = self._trace(trace_id)
            queued = {w.span.span_id for w in trace.queue}
            fresh: dict[str, Span] = {}
            for span in group:
                if span.span_id in trace.seen:
                    done.redelivered += 1
                    done.again.append((trace_id, span.span_id))
                elif span.span_id in fresh or span.span_id in queued:
                    done.redelivered += 1
                    touched[trace_id] = trace
                else:
                    fresh[span.span_id] = as_genai(span)
            if fresh:
                trace.last_span_at = now
                for span in fresh.values():
                    bisect.insort(trace.queue, Waiting(span, now), key=span_order)
                touched[trace_id] = trace
        try:
            self._release(list(touched.values()), done, now)
        except BaseException:
            # What was recorded or acknowledged before the refusal stays accounted for.
            self._hold(touched.values(), done)
            self.not_durable(done)
            raise
        self._hold(touched.values(), done)
        return done

    def _take_log(
        self, record: LogRecord, done: Applied, now: float, touched: dict[str, Trace]
    ) -> None:
        kind = event_kind(record)
        if kind is None:
            done.unmapped["log_not_genai"] += 1
            return
        if not record.trace_id or not record.span_id:
            done.unmapped["log_outside_span"] += 1
            return
        trace = self._trace(record.trace_id)
        key = _log_key(record)
        if key in trace.log_keys:
            done.logs_redelivered += 1
            touched[record.trace_id] = trace  # journaled now, if its first batch was not durable
            return
        if record.span_id in trace.seen:  # its span is recorded: only an evaluation can follow
            group = trace.group
            spans = group.spans if group is not None else None
            session = group.session if group is not None else None
            if kind == "evaluation" and session is not None and not session.ended and spans:
                spans.record(joined(_bare(record), [record])[0])  # as the span's own would be
                trace.log_keys.add(key)  # once recorded: a resend after a refusal records it
                done.logs_joined += 1
            elif record.span_id in trace.on_span:
                trace.log_keys.add(key)
                done.unmapped["log_content_also_on_span"] += 1
            else:
                trace.log_keys.add(key)
                done.unmapped["log_after_its_span"] += 1
            return
        trace.log_keys.add(key)
        trace.logs.setdefault(record.span_id, []).append(WaitingLog(record, key, now))
        trace.last_span_at = now
        touched[record.trace_id] = trace

    def _hold(self, traces: Iterable[Trace], done: Applied) -> None:
        """Journal (once) what the batch leaves waiting: it was acknowledged."""
        for trace in traces:
            for waiting in trace.queue:
                if not waiting.journaled:
                    waiting.journaled = True
                    item = f"s:{waiting.span.span_id}"
                    done.hold.append((trace.trace_id, item, stored(waiting.span)))
            for logs in trace.logs.values():
                for log in logs:
                    if not log.journaled:
                        log.journaled = True
                        done.hold.append((trace.trace_id, f"l:{log.key}", stored(log.record)))
            if trace.waits():
                self._waiting[trace.trace_id] = trace
            else:
                self._waiting.pop(trace.trace_id, None)

    def not_durable(self, done: Applied) -> None:
        """The records of `done` could not be made durable in time (they stay queued in the
        recorder): what it would have journaled is journaled with the next batch that is."""
        carry = self._carry
        carry.recorded += done.recorded + done.again
        carry.hold += done.hold
        carry.release += done.release

    def waiting(self) -> int:
        """Spans and log records acknowledged and not recorded yet (held in the journal)."""
        return sum(
            len(t.queue) + sum(len(v) for v in t.logs.values()) for t in self._waiting.values()
        )

    def _fresh(self, spans: int = 0, logs: int = 0) -> Applied:
        """A new batch's account, carrying what an earlier one could not journal: its holds
        only for what still waits (an item recorded since must not be held again)."""
        done, carry = Applied(spans=spans, logs=logs), self._carry
        done.again, done.release = carry.recorded, carry.release
        done.hold = [h for h in carry.hold if self._still_waits(h[0], h[1])]
        self._carry = Applied()
        return done

    def _still_waits(self, trace_id: str, item: str) -> bool:
        trace = self._traces.get(trace_id)
        if trace is None:
            return False
        kind, _, key = item.partition(":")
        if kind == "s":
            return any(w.span.span_id == key for w in trace.queue)
        return any(log.key == key for logs in trace.logs.values() for log in logs)

    def _ready(self, trace: Trace, waiting: Waiting, now: float) -> bool:
        span = waiting.span
        if not waiting.inference or waiting.content:
            return True
        if completes(span, [log.record for log in trace.logs.get(span.span_id, [])]):
            return True
        return now - waiting.arrived >= self.join_wait_s

    def _release(
        self, traces: Sequence[Trace], done: Applied, now: float, *, force: bool = False
    ) -> None:
        """Record the spans at the front of each trace's queue that are ready (all, `force`)."""
        ready: dict[str, list[Waiting]] = {}
        for trace in traces:
            count = 0
            for waiting in trace.queue:
                if not (force or self._ready(trace, waiting, now)):
                    break
                count += 1
            if count:
                ready[trace.trace_id] = trace.queue[:count]
        starting: dict[str, Group] = {}
        for trace_id, group in ready.items():
            trace = self._traces[trace_id]
            target = self._group_of(trace, [w.span for w in group])
            if needs_session(target) and any(is_genai(w.span) for w in group):
                starting[target.key] = target
        if starting:  # journaled before the first record: a restart never starts them again
            entries = []
            for target in starting.values():
                if target.session is not None:  # its session ended: continue in a new one
                    target.generation += 1
                entries.append((target.key, target.generation, session_id_of(target)))
            self.journal.open_sessions(entries)
        for trace_id, group in ready.items():
            trace = self._traces[trace_id]
            target = self._group_of(trace, [w.span for w in group])
            first: Inference | None = None
            spans = [self._joined(trace, w, done) for w in group]
            if target.key in starting and needs_session(target):
                try:
                    first = self._start(target, spans)
                except BaseException:
                    # Its generation is journaled but nothing was written under it: the next
                    # try takes that generation again, linking to the one before.
                    target.session = None
                    raise
                done.sessions_started.append(target.session.session_id)  # type: ignore[union-attr]
            if trace_id not in target.traces and target.session is not None:
                target.traces.add(trace_id)
                target.rootless.add(trace_id)
            for waiting, (span, events_came) in zip(group, spans, strict=True):
                self._one(trace, target, span, events_came, done, now, first)
                first = None
                trace.queue.remove(waiting)
                trace.seen.add(span.span_id)
                if waiting.journaled:
                    done.release.append((trace_id, f"s:{span.span_id}"))
                for log in trace.logs.pop(span.span_id, []):
                    if log.journaled:
                        done.release.append((trace_id, f"l:{log.key}"))

    def _group_of(self, trace: Trace, spans: Sequence[Span]) -> Group:
        """The group a trace records into: the session or conversation one of its spans names
        (`group_key`), when this ingest owns it, else its own; decided with its first spans, and
        kept while the session is open."""
        group = trace.group
        if group is not None and not (group.session is not None and group.session.ended):
            return group
        key = trace.trace_id
        for span in (*spans, *(w.span for w in trace.queue)):
            named = group_key(span)
            if named is not None and self.owns_session(named):
                key = named
                break
        group = self._groups.get(key)
        if group is None:
            known = trace.journaled if key == trace.trace_id else self.journal.trace(key)
            group = Group(key, generation=1 if known is None else known[0])
            if known is not None:  # seen by an earlier run: its chain's head is gone
                group.session = ENDED
            self._groups[key] = group
        trace.group = group
        return group

    def _joined(self, trace: Trace, waiting: Waiting, done: Applied) -> tuple[Span, bool]:
        span = waiting.span
        if waiting.inference and waiting.content:
            trace.on_span.add(span.span_id)
        records = [log.record for log in trace.logs.get(span.span_id, [])]
        if not records:
            return span, False
        with_content, duplicates = joined(span, records, content=waiting.content)
        if duplicates:
            done.unmapped["log_content_also_on_span"] += duplicates
        done.logs_joined += len(records) - duplicates
        return with_content, True

    def _one(
        self,
        trace: Trace,
        group: Group,
        span: Span,
        events_came: bool,
        done: Applied,
        now: float,
        first: Inference | None,
    ) -> None:
        spans = group.spans
        if group.session is None or group.session.ended or spans is None:
            done.not_genai += 1
            done.unmapped["trace_not_genai"] += 1
            return
        if is_local_root(span):  # first: a root that is rejected still ends the session
            group.rootless.discard(trace.trace_id)
            group.root_at = now
            if span.status_code == STATUS_ERROR:
                group.root_error = span.status_message or span.name
        oi = openinference_kind(span)
        if oi is not None and oi not in RECORDED_KINDS:
            done.not_genai += 1
            done.unmapped["span_kind_not_recorded"] += 1
            return
        without = spans.without_content
        try:
            recorded = spans.record(span, first, events_came)
        except RecorderError:
            raise
        except Exception as exc:  # the span's content broke the mapping: reject it, say why
            done.rejected.append(f"span {span.span_id}: {type(exc).__name__}: {exc}")
            done.unmapped["span_rejected"] += 1
            return
        done.unreadable.extend(spans.unreadable)
        spans.unreadable.clear()
        if spans.without_content > without:
            done.without_content += 1
            if spans.missing_now is not None and spans.missing_now not in done.settings:
                done.settings.append(spans.missing_now)
        if recorded:
            done.recorded.append((trace.trace_id, span.span_id))
        else:
            done.not_genai += 1
            done.unmapped["span_not_genai"] += 1
        group.last_span_at = now

    def _trace(self, trace_id: str) -> Trace:
        trace = self._traces.get(trace_id)
        if trace is None:
            self._load([trace_id])
            trace = self._traces[trace_id]
        return trace

    def _load(self, trace_ids: Iterable[str]) -> None:
        """Take up the traces of `trace_ids` not in memory, with what the journal knows of them
        (their last session, and their spans recorded by an earlier run, whatever session they
        went to: a trace of an OpenInference session has no journal row of its own), in one
        query each for all of them."""
        new = [t for t in dict.fromkeys(trace_ids) if t not in self._traces]
        if not new:
            return
        journaled, recorded = self.journal.traces(new), self.journal.recorded_spans(new)
        now = self.clock()
        for trace_id in new:
            trace = Trace(trace_id)
            trace.journaled = journaled.get(trace_id)
            trace.seen = recorded.get(trace_id, set())
            self._traces[trace_id] = trace
            self._idle.append((now, trace_id))

    def _start(self, group: Group, spans_came: Sequence[tuple[Span, bool]]) -> Inference | None:
        """Start the group's session from its first spans; returns the first inference, read
        to name the task (recorded next without reading it again)."""
        previous = group.session.session_id if group.session not in (None, ENDED) else None
        if previous is None and group.generation > 1:
            previous = session_id_of(group, group.generation - 1)
        spans = [span for span, _ in spans_came]
        first_span = next((s for s in spans if operation(s) in INFERENCE_OPERATIONS), None)
        first = None
        try:
            if first_span is not None:
                first = inference(first_span)
            task = _task(first, spans, group.key)
        except Exception:  # the span is rejected with why when it is recorded
            first, task = None, _task(None, spans, group.key)
        resource = spans[0].resource
        service = resource.get("service.name")
        otel: dict[str, Any] = {}
        named = grouping(group.key)
        if named is not None:
            otel[named[0]] = named[2]  # "session.id" or "gen_ai.conversation.id"
        else:
            otel["trace_id"] = group.key
        if isinstance(service, str):
            otel["service.name"] = service
        if group.generation > 1:
            otel["continues"] = previous
        group.session = self.recorder.session(
            task,
            subject=self._subject(spans),
            session_id=session_id_of(group),
            tools=first.tools if first else (),
            model=first.model if first else None,
            run_config={"otel": otel},
            tags=[TAG] if group.generation == 1 else [TAG, "continuation"],
            linked_session_id=previous,
        )
        group.spans = SpanRecorder(group.session, self.family)
        group.traces, group.rootless = set(), set()
        self._open[group.key] = group
        group.root_at = None
        group.root_error = None
        group.ended_at = None
        return first if first_span is spans[0] else None

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

    # -- after a restart -------------------------------------------------------------------------
    def restore(self, owns: Callable[[str], bool] = lambda trace_id: True) -> int:
        """Take back what the journal holds for the traces this ingest owns (a receiver's
        worker owns some): spans queue again, log records wait for their spans. Returns how
        many items came back."""
        now = self.clock()
        count = 0
        for trace_id, item, body in self.journal.held():
            if not owns(trace_id):
                continue
            trace = self._trace(trace_id)
            thing = restored(body)
            if thing.span_id in trace.seen:  # recorded before the journal let go of it
                self._carry.release.append((trace_id, item))
                continue
            if isinstance(thing, Span):
                bisect.insort(trace.queue, Waiting(thing, now, journaled=True), key=span_order)
            else:
                key = item.removeprefix("l:")
                trace.log_keys.add(key)
                trace.logs.setdefault(thing.span_id, []).append(
                    WaitingLog(thing, key, now, journaled=True)
                )
            trace.last_span_at = now
            self._waiting[trace_id] = trace
            count += 1
        return count

    # -- the timer -------------------------------------------------------------------------------
    def tick(self) -> Applied:
        """Record the spans whose wait for their log records is over, drop log records whose
        span never came (counted), end the sessions whose traces are done and forget traces
        ended long ago (the journal still knows them)."""
        done = self._fresh()
        now = self.clock()
        waiting = list(self._waiting.values())
        try:
            self._release(waiting, done, now)
            self._drop_orphan_logs(waiting, done, now)
            self._hold(waiting, done)
            self._end_due(done, now)
        except BaseException:  # what was recorded before the refusal stays accounted for
            self._hold(waiting, done)
            self.not_durable(done)
            raise
        self._forget(now)
        return done

    def _drop_orphan_logs(self, traces: Sequence[Trace], done: Applied, now: float) -> None:
        """Log records whose span did not come within `idle_s`: counted, and let go of."""
        for trace in traces:
            queued = {w.span.span_id for w in trace.queue}
            for span_id in [s for s in trace.logs if s not in queued]:
                logs = trace.logs[span_id]
                if now - logs[0].arrived >= self.idle_s:
                    done.unmapped["log_span_never_came"] += len(logs)
                    done.release.extend(
                        (trace.trace_id, f"l:{log.key}") for log in logs if log.journaled
                    )
                    del trace.logs[span_id]

    def _end_due(self, done: Applied, now: float) -> None:
        for group in list(self._open.values()):
            session = group.session
            assert session is not None
            if any(t in self._waiting for t in group.traces):
                continue
            quiet = now - group.last_span_at
            if group.grouped:  # an agent's session across traces ends when it goes quiet
                if quiet >= self.idle_s:
                    self._end(group, now, idle=bool(group.rootless))
                    done.ended.append(session.session_id)
            elif group.root_at is not None and quiet >= self.linger_s:
                self._end(group, now)
                done.ended.append(session.session_id)
            elif quiet >= self.idle_s:
                self._end(group, now, idle=True)
                done.ended.append(session.session_id)

    def _forget(self, now: float) -> None:
        idle = self._idle
        while idle and now - idle[0][0] >= self.forget_after_s:
            _, trace_id = idle.popleft()
            trace = self._traces.get(trace_id)
            if trace is None:
                continue
            group = trace.group
            if trace.waits() or (group is not None and group.key in self._open):
                idle.append((now, trace_id))
                continue
            since = max(trace.last_span_at, group.ended_at or 0.0) if group else trace.last_span_at
            if now - since < self.forget_after_s:  # active again since: look later
                idle.append((since, trace_id))
                continue
            del self._traces[trace_id]
            if group is not None and group.key not in self._open:
                self._groups.pop(group.key, None)

    def end_due(self) -> list[str]:
        """`tick`, for callers that only want the sessions it ended."""
        return self.tick().ended

    def _end(self, group: Group, now: float, *, idle: bool = False, reason: str = "") -> None:
        session = group.session
        assert isinstance(session, Session), "only an open session ends"
        outcome: dict[str, Any] = {}
        missing = group.spans.content_missing() if group.spans is not None else None
        if missing is not None:
            outcome[CONTENT_MISSING] = missing
        if idle or reason:
            session.end(
                "interrupted",
                outcome=outcome,
                error=reason
                or f"no span for {self.idle_s:g}s and the trace's root span never arrived",
            )
        elif group.root_error is not None:
            session.end("failed", outcome=outcome, error=group.root_error)
        else:
            session.end("completed", outcome=outcome)
        group.ended_at = now
        self._open.pop(group.key, None)
        # What recorded the session is done: keep only its id (a continuation links to it), so
        # ended sessions' conversations do not stay in memory (and in every GC pass) for the
        # `forget_after_s` their traces are remembered.
        group.session, group.spans = Closed(session.session_id), None

    def end_all(self, reason: str) -> Applied:
        """At shutdown: every waiting span is recorded as it is (its log records may never
        come to a receiver that stops), then traces whose root arrived end as usual, the others
        as interrupted. Log records still waiting for their span stay in the journal for the
        next run. `ended` lists the sessions ended."""
        done = self._fresh()
        now = self.clock()
        waiting = list(self._waiting.values())
        try:
            self._release(waiting, done, now, force=True)
        finally:
            self._hold(waiting, done)
        for group in list(self._open.values()):
            session = group.session
            if session is not None and not session.ended:
                if group.root_at is not None and not group.rootless:
                    self._end(group, now)
                else:
                    self._end(group, now, reason=reason)
                done.ended.append(session.session_id)
        return done


def _log_key(record: LogRecord) -> str:
    """A log record's identity: log records have no id, so a resent batch is recognised by
    what its records hold (with their time and place in the request)."""
    digest = hashlib.sha256(
        orjson.dumps(
            [
                record.span_id,
                record.event_name,
                record.time_ns,
                record.position,
                record.body,
                record.attributes,
            ],
            option=orjson.OPT_SORT_KEYS,
            default=lambda v: v.hex() if isinstance(v, bytes) else repr(v),
        )
    )
    return digest.hexdigest()[:32]


def _bare(record: LogRecord) -> Span:
    """A span that holds nothing but what `joined` adds from the record (an evaluation that
    came after its span was recorded)."""
    return Span(
        trace_id=record.trace_id,
        span_id=record.span_id,
        parent_span_id="",
        name="",
        kind=0,
        start_ns=record.time_ns,
        end_ns=record.time_ns,
        attributes={},
    )


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
