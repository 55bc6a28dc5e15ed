"""The Trajectory: one session folded into what training-data formats are made from.

Invariant: a Trajectory holds everything an exporter needs and nothing it must look up, so every
exporter is a pure function of it; and it names the chain spans it was folded from
(`provenance`), so any exported sample leads back to hash-chained, broker-timestamped events.

A record that holds a payload's fields is that payload model plus where it came from
(`ToolCallRecord` is a `ToolCall`, `FeedbackRecord` a `Feedback`), so a field added to the
payload reaches the trajectory. The others keep their own fields because inheriting would change
the trajectory's JSON or its meaning: `RewardRecord` lists `name` before `value` (a `Reward` puts
`value` first, which reorders `model_dump_json`); `ToolOutcome.success` is the fold's verdict, not
the recorder's flag, and has no `call_id`; `Message` leaves out a turn's `latency_ms` and always
writes `prompt_token_ids` and `logprobs` (a `Turn` drops them when unset); a `Trajectory` is not a `SessionStarted`, so it repeats the start's fields it carries.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rolltape.projections._errors import ProjectionError
from rolltape.schemas import Feedback, FilterOutcome, ToolCall, ToolSpec

TURN_REWARD = "turn"
"""The name of a reward event that scores the assistant turn just before it (a per-turn reward,
as multi-turn trainers take them); the session's final reward stays the one named "reward"."""

Role = Literal["system", "user", "assistant"]
Status = Literal["completed", "interrupted", "failed", "unfinished"]


def _unset(value: object) -> bool:
    """`exclude_if` of fields added after trajectories were first written: left out while None."""
    return value is None


class ScoreSourceError(ProjectionError, ValueError):
    """A score source that names none of the kinds a trajectory holds (`--score`)."""


class ToolOutcome(BaseModel):
    """What the tool returned, matched to its call by id (never by position)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    content: str
    success: bool
    """False when the recorder said so, or when the content reads as a failure (see fold)."""
    error: str | None = None
    duration_ms: float | None = None
    event_hash: str


class ToolCallRecord(ToolCall):
    """A tool call as the session recorded it (the payload's fields), with its result."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    result: ToolOutcome | None = None
    """None: the session recorded no result for this call."""
    event_hash: str


class Message(BaseModel):
    """One turn of the conversation; an assistant turn owns the tool calls it made."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Role
    content: str
    reasoning: str | None = None
    tool_calls: tuple[ToolCallRecord, ...] = ()
    token_ids: tuple[int, ...] | None = None
    prompt_token_ids: tuple[int, ...] | None = None
    """The prompt of the call that produced this reply, as the serving engine tokenised it."""
    logprobs: tuple[float, ...] | None = None
    summary: bool = False
    """A compressor's summary standing for earlier turns (see schemas.Turn.summary)."""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = Field(default=None, exclude_if=_unset)
    """Why the reply ended, as the server said (`stop`, `length`, `tool_calls`); left out of
    the trajectory's JSON when unset, so a trajectory without it is written as before."""
    model: str | None = Field(default=None, exclude_if=_unset)
    """The model that answered, as the server named it (the turn's `model`)."""
    model_version: str | None = Field(default=None, exclude_if=_unset)
    """The version of the model the endpoint served, as the model table named it."""
    ts_ns: int
    event_hash: str | None
    """None for an assistant message the fold opened because tool calls came without a turn."""


class RewardRecord(BaseModel):
    """A reward event and the event it came from. Its fields are declared here, `name` before
    `value`, rather than inherited from `Reward`, so the trajectory's JSON keeps its key order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    value: float
    components: dict[str, float] = Field(default_factory=dict)
    source: str | None = None
    turn: int | None = Field(default=None, exclude_if=_unset)
    """For a per-turn reward (named `TURN_REWARD`): which assistant turn it rewards, counted
    from 0 (the latest one recorded before it); None for every other reward."""
    event_hash: str


class FeedbackRecord(Feedback):
    """A feedback event (the payload's fields) and the event it was."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_hash: str


class VerdictRecord(BaseModel):
    """A verdict of the chosen judge version, reduced to what training pipelines select on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    judge: str
    judge_version: str
    status: Literal["ok", "failed", "error"]
    scores: dict[str, float] = Field(default_factory=dict)
    violations: int = 0
    event_id: str
    event_hash: str


class ReviewRecord(BaseModel):
    """A reviewer's human verdict on the session (the `verdicts@human` chain, schemas._review),
    reduced to what training pipelines select on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reviewer: str
    verdict: Literal["pass", "fail"]
    value: float
    """Its score: the reviewer's graded score, else 1.0 for pass and 0.0 for fail."""
    labels: tuple[str, ...] = ()
    event_hash: str


class PreferenceRecord(BaseModel):
    """A reviewer's preference of this session over another (`rejected`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reviewer: str
    rejected: str
    ts_ns: int = 0
    """When the reviewer chose (the recorder's clock): a later choice of the same two stands."""
    event_hash: str


class ToolStats(BaseModel):
    """Per-tool counts. `count` is the number of calls, `success` the calls whose result succeeded,
    and `failure` all the others. A call with no recorded result counts as a failure; Hermes'
    own tool_stats count it as neither."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int = 0
    success: int = 0
    failure: int = 0


class ChainSpan(BaseModel):
    """The part of one chain a trajectory was folded from: first and last event, by hash."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    first_seq: int
    last_seq: int
    first_hash: str
    last_hash: str
    count: int
    linked: bool
    """True when every event links to the one before it (seq +1, prev_hash = previous hash)."""


class Trajectory(BaseModel):
    """One session folded for exporters: everything they need, plus the chain spans it came from.
    Folding the same events and verdicts again gives the same `trajectory_id`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trajectory_id: str
    """sha256 over the session id, judge version and provenance: the same events and verdicts
    give the same id, so a consumer drops re-sent copies by it."""
    session_id: str
    judge_version: str
    kind: Literal["agent", "training"]
    task: str
    model: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    group_id: str | None = None
    tags: tuple[str, ...] = ()
    trainable: bool = True
    linked_session_id: str | None = None
    run_config: dict[str, Any] = Field(default_factory=dict)
    started_ns: int
    ended_ns: int | None = None
    messages: tuple[Message, ...] = ()
    unmatched_results: tuple[str, ...] = ()
    """Hashes of tool results whose call id matches no call of the session."""
    rewards: tuple[RewardRecord, ...] = ()
    feedback: tuple[FeedbackRecord, ...] = ()
    decisions: tuple[dict[str, Any], ...] = ()
    status: Status
    outcome: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    tool_stats: dict[str, ToolStats] = Field(default_factory=dict)
    """Every declared tool (zeros when unused) plus every name the model called."""
    verdicts: tuple[VerdictRecord, ...] = ()
    chain_breaks: tuple[str, ...] = ()
    """Event ids of chain_broken events the judge version wrote for this session."""
    filter: FilterOutcome | None = None
    filter_hash: str | None = None
    reviews: tuple[ReviewRecord, ...] = ()
    """Human verdicts, in the order recorded (a reviewer's later one stands: `human_score`)."""
    preferences: tuple[PreferenceRecord, ...] = ()
    """Sessions a reviewer preferred this one over."""
    provenance: dict[str, ChainSpan] = Field(default_factory=dict)
    """chain name (events, verdicts@V, filtered@V, ...) -> the span used."""

    @property
    def accepted(self) -> bool | None:
        """The reward filter's answer; None when the session has not been filtered."""
        return None if self.filter is None else self.filter.accepted

    @property
    def reward(self) -> float | None:
        """The session's final reward: its last `reward` event named "reward" (as the filter
        reads it)."""
        for record in reversed(self.rewards):
            if record.name == "reward":
                return record.value
        return None

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @property
    def reviewers_passed(self) -> bool | None:
        """Whether most reviewers passed the session, each by their latest verdict; None when
        none reviewed it, or they are split evenly."""
        standing = {r.reviewer: r.verdict for r in self.reviews}
        passes = sum(1 for v in standing.values() if v == "pass")
        fails = len(standing) - passes
        return None if passes == fails else passes > fails

    @property
    def human_score(self) -> float | None:
        """The mean of each reviewer's standing (latest) verdict value; None when unreviewed."""
        standing = {r.reviewer: r.value for r in self.reviews}
        if not standing:
            return None
        return sum(standing.values()) / len(standing)

    def score(self, source: str = "reward") -> float | None:
        """A scalar for training: `reward` (the final reward), `reward:NAME` (the last reward
        event of that name), `verdict:JUDGE:KEY` (a score of the chosen judge version's verdict;
        None unless that verdict is ok) or `human` (the reviewers' verdicts: `human_score`)."""
        if source == "human":
            return self.human_score
        kind, _, rest = source.partition(":")
        if kind == "reward":
            name = rest or "reward"
            for record in reversed(self.rewards):
                if record.name == name:
                    return record.value
            return None
        if kind == "verdict":
            judge, _, key = rest.rpartition(":")
            for verdict in self.verdicts:
                if verdict.judge == judge and verdict.status == "ok":
                    return verdict.scores.get(key)
            return None
        raise ScoreSourceError(
            f"score source {source!r}: use reward, reward:NAME, verdict:JUDGE:KEY or human"
        )
