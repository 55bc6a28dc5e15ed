"""The fold: one session's events (+ the chosen judge version's verdicts and filter outcome) into a
Trajectory.

Pure and deterministic: the input is decoded envelopes, in any order and with redelivered copies;
the fold orders each chain by seq and keeps the first copy of each seq, so two reads of the same
topics give the same Trajectory whatever their interleaving (two different records at one seq, a
fork, leave the chain unlinked whichever comes first).

Choices the exporters rely on:
- tool calls belong to the latest assistant turn when no user or system turn came between; calls
  with no turn before them open an empty assistant message (a model that only called tools);
- results are matched to calls by `call_id`; a second result for a call is ignored, a result for
  no known call is listed in `unmatched_results`, never attached by position;
- a result counts as failed when it was recorded as failed or with an error, when its JSON body
  has a non-null `error` or `success: false`, or when non-JSON text is empty or starts with
  "error:" (REFERENCE.md section 2); a call with no result counts as failed;
- `tool_stats` lists every declared tool, with zeros when unused, so columnar loaders see one
  schema.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from rolltape.projections._errors import ProjectionError
from rolltape.projections._trajectory import (
    ChainSpan,
    FeedbackRecord,
    Message,
    RewardRecord,
    ToolCallRecord,
    ToolOutcome,
    ToolStats,
    Trajectory,
    VerdictRecord,
)
from rolltape.schemas import (
    LIVE_JUDGE_VERSION,
    FilterOutcome,
    PayloadError,
    Reward,
    SessionEnded,
    SessionStarted,
    Stream,
    ToolCall,
    ToolResult,
    Turn,
    Verdict,
    canonical_bytes,
    classify_link,
    parse_payload,
    result_failed,
    versioned_stream,
)


class FoldError(ProjectionError, ValueError):
    """The events cannot be folded into a trajectory (no session_started, mixed sessions)."""


def _ordered(envelopes: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    by_seq: dict[int, Mapping[str, Any]] = {}
    for env in envelopes:
        by_seq.setdefault(env["seq"], env)
    return [by_seq[seq] for seq in sorted(by_seq)]


def _linked(envelopes: Iterable[Mapping[str, Any]]) -> bool:
    """Each record, in seq order, extends the one before (from the first the fold holds, which
    need not be seq 0), and no seq holds two records. The fold reads a chain as a set, so the
    order of arrival is not its concern, nor what follows session_ended: the audit's
    `chain_broken` verdicts report those."""
    held: dict[int, str] = {}
    next_seq: int | None = None
    for env in sorted(envelopes, key=lambda env: env["seq"]):  # stable: first copy is held
        seq = env["seq"]
        verdict = classify_link(
            seq,
            env["prev_hash"],
            env["hash"],
            next_seq=seq if next_seq is None else next_seq,
            at_seq=held.get(seq),
            before=held.get(seq - 1),
        )
        if not verdict.clean:
            return False
        if verdict.placement == "joins":
            held[seq] = env["hash"]
            next_seq = seq + 1
    return True


def _span(envelopes: list[Mapping[str, Any]]) -> ChainSpan:
    chain = _ordered(envelopes)
    return ChainSpan(
        first_seq=chain[0]["seq"],
        last_seq=chain[-1]["seq"],
        first_hash=chain[0]["hash"],
        last_hash=chain[-1]["hash"],
        count=len(chain),
        linked=_linked(envelopes),
    )


def tool_failed(result: ToolResult) -> bool:
    """What the recorder said, then REFERENCE.md section 2's rule on the result text."""
    return not result.success or result.error is not None or result_failed(result.content)


class _Builder:
    """Mutable working state of one fold; becomes immutable models at the end."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.calls: dict[str, tuple[int, int]] = {}
        self.open_assistant: int | None = None
        self.unmatched: list[str] = []

    def turn(self, turn: Turn, env: Mapping[str, Any]) -> None:
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
                "ts_ns": env["ts_ns"],
                "event_hash": env["hash"],
            }
        )
        self.open_assistant = len(self.messages) - 1 if turn.role == "assistant" else None

    def call(self, call: ToolCall, env: Mapping[str, Any]) -> None:
        if self.open_assistant is None:
            self.messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [],
                    "ts_ns": env["ts_ns"],
                    "event_hash": None,
                }
            )
            self.open_assistant = len(self.messages) - 1
        calls = self.messages[self.open_assistant]["tool_calls"]
        if call.id in self.calls:
            return  # a repeated call id: the first call keeps it
        self.calls[call.id] = (self.open_assistant, len(calls))
        calls.append(
            {
                "id": call.id,
                "name": call.name,
                "arguments": call.arguments,
                "raw_arguments": call.raw_arguments,
                "result": None,
                "event_hash": env["hash"],
            }
        )

    def result(self, result: ToolResult, env: Mapping[str, Any]) -> None:
        where = self.calls.get(result.call_id)
        if where is None:
            self.unmatched.append(env["hash"])
            return
        call = self.messages[where[0]]["tool_calls"][where[1]]
        if call["result"] is not None:
            return  # the first result answers the call
        call["result"] = ToolOutcome(
            content=result.content,
            success=not tool_failed(result),
            error=result.error,
            duration_ms=result.duration_ms,
            event_hash=env["hash"],
        )

    def build_messages(self) -> tuple[Message, ...]:
        built = []
        for message in self.messages:
            calls = tuple(ToolCallRecord(**call) for call in message["tool_calls"])
            built.append(Message(**{**message, "tool_calls": calls}))
        return tuple(built)


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
    events: Iterable[Mapping[str, Any]],
    derived: Iterable[Mapping[str, Any]] = (),
    *,
    judge_version: str = LIVE_JUDGE_VERSION,
) -> Trajectory:
    """Fold one session. `events` are its events-stream envelopes (decoded); `derived` may hold
    any derived envelopes of the session: only the chosen judge version's verdicts and filter
    outcome are used."""
    given = list(events)
    if not given:
        raise FoldError("no events to fold")
    sid = given[0]["session_id"]
    if any(env["session_id"] != sid or env["stream"] != Stream.EVENTS.value for env in given):
        raise FoldError(f"fold takes the events stream of one session ({sid})")
    chain = _ordered(given)
    first = chain[0]
    if first["type"] != "session_started":
        raise FoldError(f"session {sid}: the first event is {first['type']}, not session_started")
    start = parse_payload("session_started", first["payload"], lenient=True)
    assert isinstance(start, SessionStarted)
    builder = _Builder()
    rewards: list[RewardRecord] = []
    feedback: list[FeedbackRecord] = []
    decisions: list[dict[str, Any]] = []
    end: SessionEnded | None = None
    ended_ns: int | None = None
    for env in chain[1:]:
        kind = env["type"]
        if kind not in ("turn", "tool_call", "tool_result", "reward", "feedback", "decision"):
            if kind == "session_ended" and end is None:
                payload = parse_payload(kind, env["payload"], lenient=True)
                assert isinstance(payload, SessionEnded)
                end, ended_ns = payload, env["ts_ns"]
            continue
        try:
            payload = parse_payload(kind, env["payload"], lenient=True)
        except PayloadError:
            continue  # the live audit dead-lettered it; it is not part of the conversation
        if isinstance(payload, Turn):
            builder.turn(payload, env)
        elif isinstance(payload, ToolCall):
            builder.call(payload, env)
        elif isinstance(payload, ToolResult):
            builder.result(payload, env)
        elif isinstance(payload, Reward):
            rewards.append(RewardRecord(**payload.model_dump(), event_hash=env["hash"]))
        elif kind == "feedback":
            feedback.append(FeedbackRecord(**payload.model_dump(), event_hash=env["hash"]))
        else:
            decisions.append({**payload.model_dump(mode="json"), "event_hash": env["hash"]})
    messages = builder.build_messages()

    verdict_stream = versioned_stream(Stream.VERDICTS, judge_version)
    filter_stream = versioned_stream(Stream.FILTERED, judge_version)
    chains: dict[str, list[Mapping[str, Any]]] = {Stream.EVENTS.value: given}
    picked: dict[str, list[Mapping[str, Any]]] = {verdict_stream: [], filter_stream: []}
    for env in derived:
        if env["session_id"] == sid and env["stream"] in picked:
            picked[env["stream"]].append(env)
    verdicts: list[VerdictRecord] = []
    breaks: list[str] = []
    filter_outcome: FilterOutcome | None = None
    filter_hash: str | None = None
    for name, envelopes in picked.items():
        ordered = _ordered(envelopes)
        if not ordered:
            continue
        chains[name] = envelopes
        for env in ordered:
            if env["type"] == "chain_broken":
                breaks.append(env["event_id"])
            elif env["type"] == "verdict":
                verdict = parse_payload("verdict", env["payload"], lenient=True)
                assert isinstance(verdict, Verdict)
                verdicts.append(
                    VerdictRecord(
                        judge=verdict.judge,
                        judge_version=verdict.judge_version,
                        status=verdict.status,
                        scores=verdict.scores,
                        violations=len(verdict.violations),
                        event_id=env["event_id"],
                        event_hash=env["hash"],
                    )
                )
            elif env["type"] == "filter_outcome" and filter_outcome is None:
                outcome = parse_payload("filter_outcome", env["payload"], lenient=True)
                assert isinstance(outcome, FilterOutcome)
                filter_outcome, filter_hash = outcome, env["hash"]
    provenance = {name: _span(envs) for name, envs in sorted(chains.items())}
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
        started_ns=first["ts_ns"],
        ended_ns=ended_ns,
        messages=messages,
        unmatched_results=tuple(builder.unmatched),
        rewards=tuple(rewards),
        feedback=tuple(feedback),
        decisions=tuple(decisions),
        status=end.status if end else "unfinished",
        outcome=end.outcome if end else {},
        error=end.error if end else None,
        tool_stats=_tool_stats((tool.name for tool in start.tools), messages),
        verdicts=tuple(verdicts),
        chain_breaks=tuple(breaks),
        filter=filter_outcome,
        filter_hash=filter_hash,
        provenance=provenance,
    )
