"""The fold: one session's events (+ the chosen judge version's verdicts and filter outcome) into a
Trajectory.

Pure and deterministic: the input is events as the codec read them (`read_event`), in any order
and with redelivered copies;
the fold orders each chain by seq and keeps the first copy of each seq, so two reads of the same
topics give the same Trajectory whatever their interleaving (two different records at one seq, a
fork, leave the chain unlinked whichever comes first).

The conversation (which events count, which turn a tool call belongs to, how a result finds its
call, when it failed) is read by `rolltape.processors.conversation`, the one reading the reward
filters and the judges' transcript share; `_Builder` is the export's view of it. Choices the
exporters rely on:
- tool calls belong to the latest assistant turn when no user or system turn came between; calls
  with no turn before them open an empty assistant message (a model that only called tools);
- results are matched to calls by `call_id`; a second result for a call is ignored, a result for
  no known call is listed in `unmatched_results`, never attached by position;
- a result counts as failed by `tool_failed` (the recorder's flag and error, then the Hermes
  agent's rule on its text, schemas._tool_outcome); a call with no result counts as failed in
  `tool_stats`;
- `tool_stats` lists every declared tool, with zeros when unused, so columnar loaders see one
  schema.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from pydantic import TypeAdapter

from rolltape.processors.conversation import EVENT_TYPES, Conversation, View
from rolltape.projections._errors import ProjectionError
from rolltape.projections._trajectory import (
    TURN_REWARD,
    ChainSpan,
    FeedbackRecord,
    Message,
    PreferenceRecord,
    ReviewRecord,
    RewardRecord,
    ToolStats,
    Trajectory,
    VerdictRecord,
)
from rolltape.schemas import (
    HUMAN_CHAIN,
    LIVE_JUDGE_VERSION,
    BreakKind,
    ChainBrokenEvent,
    Decision,
    Feedback,
    FilterOutcome,
    FilterOutcomeEvent,
    HumanPreferenceEvent,
    HumanVerdictEvent,
    PayloadError,
    Reward,
    SessionEnded,
    SessionStartedEvent,
    Stream,
    ToolCall,
    ToolResult,
    Turn,
    TypedEvent,
    VerdictEvent,
    canonical_bytes,
    classify_link,
    versioned_stream,
)


class FoldError(ProjectionError, ValueError):
    """The events cannot be folded into a trajectory (no session_started, mixed sessions).
    `reason` is how readers that leave the session out count it."""

    reason = "no_session_start"


class ContentSealed(FoldError):
    """The session's content is sealed under a data key the reader did not open: folding the
    empty fields sealing leaves in clear would make a trajectory of nothing."""

    reason = "key_unavailable"


def _by_seq(event: TypedEvent) -> int:
    return event.seq


def _sorted(events: Iterable[TypedEvent]) -> list[TypedEvent]:
    """A chain's events by seq; copies of one seq in the order given (the sort is stable)."""
    return sorted(events, key=_by_seq)


def _ordered(by_seq: list[TypedEvent]) -> list[TypedEvent]:
    """The first copy of each seq, of events `_sorted` already."""
    ordered: list[TypedEvent] = []
    last = None
    for event in by_seq:
        if event.seq != last:
            ordered.append(event)
            last = event.seq
    return ordered


def _linked(by_seq: list[TypedEvent]) -> bool:
    """Each record, in seq order, extends the one before (from the first the fold holds, which
    need not be seq 0), and no seq holds two records. The fold reads a chain as a set, so the
    order of arrival is not its concern, nor what follows session_ended: the audit's
    `chain_broken` verdicts report those. `by_seq`: the chain's events `_sorted`."""
    held: dict[int, str] = {}
    next_seq: int | None = None
    for event in by_seq:  # copies of a seq in the order given: the first is held
        seq = event.seq
        verdict = classify_link(
            seq,
            event.prev_hash,
            event.hash,
            next_seq=seq if next_seq is None else next_seq,
            at_seq=held.get(seq),
            before=held.get(seq - 1),
        )
        if not verdict.clean:
            return False
        if verdict.placement == "joins":
            held[seq] = event.hash
            next_seq = seq + 1
    return True


def _span(by_seq: list[TypedEvent], chain: list[TypedEvent]) -> ChainSpan:
    """The provenance of a chain: its events `_sorted`, and `_ordered` from them."""
    return ChainSpan(
        first_seq=chain[0].seq,
        last_seq=chain[-1].seq,
        first_hash=chain[0].hash,
        last_hash=chain[-1].hash,
        count=len(chain),
        linked=_linked(by_seq),
    )


class _Builder(View[TypedEvent]):
    """The export's view of the conversation: mutable working state of one fold, which becomes
    immutable models at the end. It decides nothing (see `rolltape.processors.conversation`)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.where: dict[str, tuple[int, int]] = {}  # call id -> (message, call) index
        self.unmatched: list[str] = []
        self.reward_records: list[RewardRecord] = []
        self.feedback_records: list[FeedbackRecord] = []
        self.decision_records: list[dict[str, Any]] = []
        self.end: SessionEnded | None = None
        self.ended_ns: int | None = None

    def turn(self, turn: Turn, at: TypedEvent) -> None:
        self.messages.append(
            {
                "role": turn.role,
                "content": turn.content,
                "reasoning": turn.reasoning,
                "tool_calls": [],
                "token_ids": turn.token_ids,
                "prompt_token_ids": turn.prompt_token_ids,
                "logprobs": turn.logprobs,
                "summary": bool(turn.summary),
                "prompt_tokens": turn.prompt_tokens,
                "completion_tokens": turn.completion_tokens,
                "finish_reason": turn.finish_reason,
                "model": turn.model,
                "model_version": turn.model_version,
                "ts_ns": at.ts_ns,
                "event_hash": at.hash,
            }
        )

    def call(self, call: ToolCall, at: TypedEvent, *, opens: bool, repeated: bool) -> None:
        if opens:
            self.messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [],
                    "ts_ns": at.ts_ns,
                    "event_hash": None,
                }
            )
        if repeated:
            return
        # The call's message is the last one: messages are appended only for turns and openings.
        calls = self.messages[-1]["tool_calls"]
        self.where[call.id] = (len(self.messages) - 1, len(calls))
        calls.append({**call.model_dump(), "result": None, "event_hash": at.hash})

    def answer(self, result: ToolResult, at: TypedEvent, *, failed: bool) -> None:
        message, index = self.where[result.call_id]
        self.messages[message]["tool_calls"][index]["result"] = {
            "content": result.content,
            "success": not failed,
            "error": result.error,
            "duration_ms": result.duration_ms,
            "event_hash": at.hash,
        }

    def stray(self, result: ToolResult, at: TypedEvent, *, answered: bool) -> None:
        if not answered:
            self.unmatched.append(at.hash)

    def reward(self, reward: Reward, at: TypedEvent) -> None:
        turn = None
        if reward.name == TURN_REWARD:
            replies = sum(1 for m in self.messages if m["role"] == "assistant")
            turn = replies - 1 if replies else None
        self.reward_records.append(
            RewardRecord(**reward.model_dump(), turn=turn, event_hash=at.hash)
        )

    def feedback(self, feedback: Feedback, at: TypedEvent) -> None:
        self.feedback_records.append(FeedbackRecord(**feedback.model_dump(), event_hash=at.hash))

    def decision(self, decision: Decision, at: TypedEvent) -> None:
        self.decision_records.append({**decision.model_dump(mode="json"), "event_hash": at.hash})

    def ended(self, end: SessionEnded, at: TypedEvent) -> None:
        self.end, self.ended_ns = end, at.ts_ns

    def build_messages(self) -> tuple[Message, ...]:
        # One validation for the whole conversation: pydantic builds the nested messages, calls
        # and outcomes itself, where a model constructed per part cost half the fold.
        return _messages(self.messages)


_messages = TypeAdapter(tuple[Message, ...]).validate_python


def _tool_stats(tools: Iterable[str], messages: Iterable[Message]) -> dict[str, ToolStats]:
    counts = {name: [0, 0, 0] for name in tools}
    for message in messages:
        for call in message.tool_calls:
            entry = counts.setdefault(call.name, [0, 0, 0])
            entry[0] += 1
            if call.result is not None and call.result.success:
                entry[1] += 1
            else:
                entry[2] += 1
    return {
        name: ToolStats(count=c, success=s, failure=f) for name, (c, s, f) in sorted(counts.items())
    }


def fold(
    events: Iterable[TypedEvent],
    derived: Iterable[TypedEvent] = (),
    *,
    judge_version: str = LIVE_JUDGE_VERSION,
) -> Trajectory:
    """Fold one session. `events` are its events-stream events; `derived` may hold any derived
    events of the session: only the chosen judge version's verdicts and filter outcome are
    used. Payloads are read through their events' `body` (validated once per event)."""
    given = list(events)
    if not given:
        raise FoldError("no events to fold")
    sid = given[0].session_id
    events_stream = Stream.EVENTS.value
    if any(event.session_id != sid or event.stream != events_stream for event in given):
        raise FoldError(f"fold takes the events stream of one session ({sid})")
    if any("sealed" in event.payload for event in given):
        raise ContentSealed(
            f"session {sid}: its content is sealed under a data key; open it first "
            "(SessionScan.opened, with the keys topic and the key-encryption key)"
        )
    by_seq = _sorted(given)
    chain = _ordered(by_seq)
    first = chain[0]
    if not isinstance(first, SessionStartedEvent):
        raise FoldError(f"session {sid}: the first event is {first.type}, not session_started")
    start = first.body
    builder = _Builder()
    conversation = Conversation()
    for event in chain[1:]:
        if event.type not in EVENT_TYPES:
            continue
        try:
            payload = event.body
        except PayloadError:
            if event.type == "session_ended" and not conversation.ended:
                raise  # an end that does not parse is an error, not an unfinished session
            continue  # the live audit dead-lettered it; it is not part of the conversation
        conversation.tell(payload, event, builder)
    messages, end = builder.build_messages(), builder.end

    verdict_stream = versioned_stream(Stream.VERDICTS, judge_version)
    filter_stream = versioned_stream(Stream.FILTERED, judge_version)
    # chain name -> (its events sorted, the first copy of each seq): read twice, built once
    chains: dict[str, tuple[list[TypedEvent], list[TypedEvent]]] = {events_stream: (by_seq, chain)}
    human_stream = HUMAN_CHAIN
    picked: dict[str, list[TypedEvent]] = {verdict_stream: [], filter_stream: [], human_stream: []}
    forged: set[int] = set()
    """Seqs of the reviewers' chain the worker flagged as written by a principal that does not
    review (a judge's credential, say): those reviews count for no one."""
    for event in derived:
        if event.session_id != sid:
            continue
        if event.stream in picked:
            picked[event.stream].append(event)
        if (
            isinstance(event, ChainBrokenEvent)
            and event.body.stream == HUMAN_CHAIN
            and event.body.reason == BreakKind.FOREIGN_PRINCIPAL
            and event.body.seq is not None
        ):
            forged.add(event.body.seq)
    verdicts: list[VerdictRecord] = []
    breaks: list[str] = []
    filter_outcome: FilterOutcome | None = None
    filter_hash: str | None = None
    reviews: list[ReviewRecord] = []
    preferences: list[PreferenceRecord] = []
    for name, chain_events in picked.items():
        if not chain_events:
            continue
        sorted_events = _sorted(chain_events)
        ordered = _ordered(sorted_events)
        # The reviewers' chain has many writers: two reviews at one moment fork it, and every
        # reader keeps the first (the later reviewer was told to record again). Its span is
        # read from what stands, so a set-aside review does not mark the session broken.
        chains[name] = (ordered if name == human_stream else sorted_events, ordered)
        for event in ordered:
            if isinstance(event, ChainBrokenEvent):
                if event.body.stream != HUMAN_CHAIN:
                    # A reviewers' fork (two reviews at one moment) sets the later one aside;
                    # it does not make the session's own record untrustworthy.
                    breaks.append(event.event_id)
            elif isinstance(event, VerdictEvent):
                verdict = event.body
                verdicts.append(
                    VerdictRecord(
                        judge=verdict.judge,
                        judge_version=verdict.judge_version,
                        status=verdict.status,
                        scores=verdict.scores,
                        violations=len(verdict.violations),
                        event_id=event.event_id,
                        event_hash=event.hash,
                    )
                )
            elif isinstance(event, FilterOutcomeEvent) and filter_outcome is None:
                filter_outcome, filter_hash = event.body, event.hash
            elif isinstance(event, HumanVerdictEvent | HumanPreferenceEvent) and (
                event.body.reviewer != event.producer.principal or event.seq in forged
            ):
                continue  # a review speaks only for the login that wrote it, if it reviews
            elif isinstance(event, HumanVerdictEvent):
                review = event.body
                reviews.append(
                    ReviewRecord(
                        reviewer=review.reviewer,
                        verdict=review.verdict,
                        value=review.value,
                        labels=review.labels,
                        event_hash=event.hash,
                    )
                )
            elif isinstance(event, HumanPreferenceEvent):
                preference = event.body
                preferences.append(
                    PreferenceRecord(
                        reviewer=preference.reviewer,
                        rejected=preference.rejected,
                        ts_ns=event.ts_ns,
                        event_hash=event.hash,
                    )
                )
    provenance = {name: _span(*read) for name, read in sorted(chains.items())}
    identity = [
        sid,
        judge_version,
        {name: [span.first_hash, span.last_hash, span.count] for name, span in provenance.items()},
    ]
    return Trajectory(
        trajectory_id=hashlib.sha256(canonical_bytes(identity)).hexdigest()[:32],
        session_id=sid,
        judge_version=judge_version,
        kind=start.kind,
        task=start.task,
        model=start.model,
        tools=start.tools,
        group_id=start.group_id,
        tags=start.tags,
        trainable=start.trainable,
        linked_session_id=start.linked_session_id,
        run_config=start.run_config,
        started_ns=first.ts_ns,
        ended_ns=builder.ended_ns,
        messages=messages,
        unmatched_results=tuple(builder.unmatched),
        rewards=tuple(builder.reward_records),
        feedback=tuple(builder.feedback_records),
        decisions=tuple(builder.decision_records),
        status=end.status if end else "unfinished",
        outcome=end.outcome if end else {},
        error=end.error if end else None,
        tool_stats=_tool_stats((tool.name for tool in start.tools), messages),
        verdicts=tuple(verdicts),
        chain_breaks=tuple(breaks),
        filter=filter_outcome,
        filter_hash=filter_hash,
        reviews=tuple(reviews),
        preferences=tuple(preferences),
        provenance=provenance,
    )
