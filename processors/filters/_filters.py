"""Reward filters over one agent session, folded event by event.

Invariant: the outcome is a pure function of the config and the session's usable events in chain
order. Every reason against a session is kept (not only the first), with the hashes of the
events that show it, so a rejected session is useful failure data rather than a silent drop.
State is small (counts and the first few pieces of evidence per reason) because it is rewritten
to a changelog on every update.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from jsonschema import exceptions as jsonschema_exceptions
from jsonschema import validators
from pydantic import BaseModel

from rolltape.processors.conversation import Reader, read
from rolltape.processors.filters._config import FILTER_VERSION, FilterConfig
from rolltape.schemas import (
    CONTENT_MISSING,
    FilterOutcome,
    FilterReason,
    Reward,
    SessionEnded,
    SessionStarted,
    ToolCall,
    Turn,
)

EVIDENCE_KEPT: Final = 5


@dataclass
class FilterState:
    """What the filters keep of one running agent session (small: it is saved per batch)."""

    trainable: bool = True
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    status: str | None = None
    turns: int = 0
    tool_calls: int = 0
    reward: float | None = None
    findings: dict[str, list[Any]] = field(default_factory=dict)
    """code -> [count, first message, evidence hashes...]"""
    prompted: bool | None = None
    """The session has a task with text, or a user turn with text. None: the state was saved
    by a build that did not track it, mid-session (then content is not judged)."""
    answered: bool | None = None
    """An assistant turn has content, reasoning or a call (a call event counts too); None as
    for `prompted`."""
    content_missing: tuple[str, str] | None = None
    """(why, evidence hash): the producer flagged the session's content as missing
    (`SessionEnded.outcome`)."""
    undeclared: dict[str, list[Any]] = field(default_factory=dict)
    """Tool name -> [count, evidence hashes...] of calls in a session that declares no tools."""

    def note(self, code: str, message: str, evidence: str) -> None:
        entry = self.findings.get(code)
        if entry is None:
            self.findings[code] = [1, message, evidence]
            return
        entry[0] += 1
        if len(entry) - 2 < EVIDENCE_KEPT:
            entry.append(evidence)


@functools.lru_cache(maxsize=1024)
def _validator(schema_json: bytes) -> Any:
    schema = orjson.loads(schema_json)
    cls = validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _argument_problem(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    try:
        validator = _validator(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))
    except jsonschema_exceptions.SchemaError as exc:
        return f"the declared schema itself is invalid: {exc.message}"
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    first = errors[0]
    where = "/".join(str(p) for p in first.absolute_path) or "(root)"
    return f"{where}: {first.message}"


def observe(state: FilterState, config: FilterConfig, payload: BaseModel, evidence: str) -> None:
    """Fold one usable event of the session's events stream (its typed payload, and its hash
    as the evidence a finding cites) into the filter state."""
    read(payload, evidence, _Filters(state, config))


class _Filters(Reader[str]):
    """The filters' view of the conversation. They read no tool results, so they take the
    events as recorded and keep no book of calls: every call the model made is judged, a
    repeated call id included (`tool_calls` counts call events)."""

    __slots__ = ("config", "state")

    def __init__(self, state: FilterState, config: FilterConfig) -> None:
        self.state, self.config = state, config

    def started(self, start: SessionStarted, at: str) -> None:
        self.state.trainable = start.trainable
        self.state.tools = {t.name: dict(t.parameters) for t in start.tools}
        self.state.prompted = bool(start.task.strip())
        self.state.answered = False

    def turn(self, turn: Turn, at: str) -> None:
        if turn.role == "user" and turn.content.strip():
            self.state.prompted = True
        if turn.role != "assistant":
            return
        self.state.turns += 1
        if turn.content.strip() or (turn.reasoning or "").strip():
            self.state.answered = True
        if self.config.require_reasoning and not (turn.reasoning or "").strip():
            self.state.note("no_reasoning", "an assistant turn has no reasoning", at)

    def call(self, call: ToolCall, at: str) -> None:
        state, config = self.state, self.config
        state.tool_calls += 1
        state.answered = True
        schema = state.tools.get(call.name)
        if schema is None and not state.tools:  # nothing declared: observe, judge nothing
            seen = state.undeclared.setdefault(call.name, [0])
            seen[0] += 1
            if len(seen) - 1 < EVIDENCE_KEPT:
                seen.append(at)
            return
        if schema is None:
            if config.reject_unknown_tools:
                known = ", ".join(sorted(state.tools)) or "none"
                message = f"called tool {call.name!r}, not among the declared tools ({known})"
                state.note("unknown_tool", message, at)
            return
        if call.raw_arguments is not None and not call.arguments:
            if config.check_tool_arguments:
                message = f"arguments to {call.name!r} were not a JSON object"
                state.note("invalid_arguments", message, at)
            return
        if config.check_tool_arguments:
            problem = _argument_problem(schema, call.arguments)
            if problem is not None:
                state.note("invalid_arguments", f"{call.name}: {problem}", at)

    def reward(self, reward: Reward, at: str) -> None:
        if reward.name == "reward":
            self.state.reward = reward.value

    def ended(self, end: SessionEnded, at: str) -> None:
        self.state.status = end.status
        missing = end.outcome.get(CONTENT_MISSING)
        if missing:
            self.state.content_missing = (str(missing), at)


def outcome(state: FilterState, config: FilterConfig) -> FilterOutcome:
    """The accept/reject outcome once the session has ended."""
    reasons = [
        FilterReason(
            code=code,
            message=f"{entry[1]}" + (f" (and {entry[0] - 1} more)" if entry[0] > 1 else ""),
            evidence=tuple(entry[2:]),
        )
        for code, entry in sorted(state.findings.items())
    ]
    if not state.trainable:
        reasons.append(FilterReason(code="not_trainable", message="the session is trainable=false"))
    if config.require_completed and state.status != "completed":
        reasons.append(
            FilterReason(code="not_completed", message=f"the session ended {state.status}")
        )
    if config.require_content:
        if state.prompted is False:
            message = "the session has no task and no user message with text"
            reasons.append(FilterReason(code="no_prompt", message=message))
        if state.answered is False:
            message = "no assistant turn has content, reasoning or a tool call"
            reasons.append(FilterReason(code="no_assistant_content", message=message))
        if state.content_missing is not None:
            why, at = state.content_missing
            reasons.append(FilterReason(code=CONTENT_MISSING, message=why, evidence=(at,)))
    if state.turns < config.min_turns:
        message = f"{state.turns} assistant turns, fewer than {config.min_turns}"
        reasons.append(FilterReason(code="too_few_turns", message=message))
    if config.min_reward is not None:
        if state.reward is None:
            reasons.append(FilterReason(code="no_reward", message="the session has no reward"))
        elif not math.isfinite(state.reward):
            message = f"the reward is {state.reward!r}, not a number to compare"
            reasons.append(FilterReason(code="non_finite_reward", message=message))
        elif state.reward < config.min_reward:
            message = f"reward {state.reward!r} is below {config.min_reward!r}"
            reasons.append(FilterReason(code="low_reward", message=message))
    reasons.sort(key=lambda r: r.code)
    observed = []
    if state.undeclared:
        names = ", ".join(
            f"{name} ({entry[0]})" for name, entry in sorted(state.undeclared.items())
        )
        evidence = [h for _, entry in sorted(state.undeclared.items()) for h in entry[1:]]
        message = f"the session declares no tools; it called {names}"
        observed.append(
            FilterReason(
                code="tools_undeclared", message=message, evidence=tuple(evidence[:EVIDENCE_KEPT])
            )
        )
    return FilterOutcome(
        filter_version=FILTER_VERSION,
        config=config.label,
        accepted=not reasons,
        reasons=tuple(reasons),
        observed=tuple(observed),
        status=state.status or "unknown",
        turns=state.turns,
        tool_calls=state.tool_calls,
        reward=state.reward,
    )
