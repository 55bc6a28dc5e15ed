"""Events as read: one frozen class per event type, a union discriminated on `type`.

Invariant: `read_event` returns the member of `TypedEvent` that `EVENT_CLASSES` gives the
record's `type` (an `UnknownEvent` for a type this version has no model for), so a reader
narrows an event by its class, and a type checker follows:

    match event:
        case TurnEvent():      event.body.role        # a Turn
        case MetricEvent():    event.body.epoch       # a Metric

(`event.type == "turn"` does not narrow: an `UnknownEvent`'s type is any string.) Each class
declares its `type` as a literal, from which `EVENT_CLASSES` is built. The payload is validated
once, on first use of `body`, against its type's model, ignoring fields a newer producer added,
and kept: the readers one event is handed to (the worker's audit, filters and transcript) share
one body.

Why classes over a pydantic union: a record is decoded and checked by the codec's hot path
(the header checks written out, the hash taken over the received bytes), and most readers never
need most payloads (the audit reads headers; replay reads only the types it re-judges). A
pydantic discriminated union would validate every payload of every record up front. The
classes carry no fields of their own: choosing one is a dict lookup, and the type is the tag.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, NamedTuple, Self, TypeVar, cast, get_args, get_type_hints

from pydantic import BaseModel

from rolltape.schemas._checkpoint import Checkpoint
from rolltape.schemas._cron import CronJob, CronRun
from rolltape.schemas._derived import ChainBroken, FilterOutcome, RuleEvaluation, Verdict
from rolltape.schemas._envelope import Envelope
from rolltape.schemas._erasure import Erasure
from rolltape.schemas._evaluation import Evaluation
from rolltape.schemas._lineage import ModelCheckpoint, TrainerLog, TrainingInput
from rolltape.schemas._monitoring import LiveCheck, ModelSpec
from rolltape.schemas._payloads import (
    Decision,
    Feedback,
    Metric,
    ModelError,
    Reward,
    SessionEnded,
    SessionResumed,
    SessionStarted,
    ToolCall,
    ToolParseError,
    ToolResult,
    Turn,
    parse_payload,
)
from rolltape.schemas._prompt_decisions import PromptDecision
from rolltape.schemas._prompts import PromptPromotion, PromptVersion
from rolltape.schemas._review import HumanPreference, HumanVerdict
from rolltape.schemas._rule_figures import RulesetEvaluation
from rolltape.schemas._world import WorldSnapshot

Body = TypeVar("Body", bound=BaseModel, covariant=True)


@dataclass(frozen=True, slots=True)
class Producer:
    """Who wrote the event: software name and version, and the principal it names."""

    name: str
    version: str
    principal: str


class Event(NamedTuple, Generic[Body]):
    """One record as read: the envelope's fields, its typed payload and what its bytes showed.

    Frozen: every reader of a record sees the same event. Readers hold a member of
    `TypedEvent`; this base names what they all have. A named tuple, not a frozen dataclass:
    every reader builds one per record, and a frozen dataclass's `__init__` (one
    `object.__setattr__` per field) cost a fifth of reading a record. Events come from the
    codec only: `_replace` would copy the body's cache and the decoded mapping as they are."""

    stream: str
    session_id: str
    seq: int
    ts_ns: int
    type: str
    event_id: str
    causes: tuple[str, ...]
    producer: Producer
    payload: Mapping[str, Any]
    """The payload as decoded (non-finite floats still as their string tokens)."""
    prev_hash: str
    hash: str
    computed_hash: str | None
    """sha256 of the content as written; None when it has no canonical form."""
    canonical: bool
    """The received bytes are the canonical encoding of their content."""
    mapping: dict[str, Any]
    """The whole decoded record, for readers that hand a plain mapping on."""
    parsed: list[BaseModel]
    """Where `body` keeps the payload once it is validated (empty until then)."""

    @property
    def intact(self) -> bool:
        """The content hashes to the hash the record carries."""
        return self.computed_hash == self.hash

    @property
    def body(self) -> Body:
        """The typed payload (a `Turn` for a `TurnEvent`, ...), validated on first use;
        PayloadError when it does not validate against its type's model."""
        parsed = self.parsed
        if not parsed:
            parsed.append(parse_payload(self.type, self.payload, lenient=True))
        return cast(Body, parsed[0])

    def with_payload(self, payload: Mapping[str, Any]) -> Self:
        """This record read with another payload (sealed content opened): the same envelope,
        its body validated afresh on first use. The hashes stay the record's own, as written."""
        mapping = {**self.mapping, "payload": payload}
        return tuple.__new__(type(self), (*self[:8], payload, *self[9:13], mapping, []))

    def envelope(self) -> Envelope:
        """The schema model of this record (for APIs that hand envelopes out)."""
        return Envelope.model_validate(self.mapping)

    # An event is one reading of one record: equal to itself only, and hashable, as the frozen
    # dataclass it replaces was (a tuple's equality would compare the body's cache, and its hash
    # would fail on the decoded dicts). Two readings of a record compare by `hash`.
    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(stream={self.stream!r}, session_id={self.session_id!r}, "
            f"seq={self.seq}, type={self.type!r}, hash={self.hash[:12]!r}, "
            f"intact={self.intact})"
        )


# One class per event type. No fields of their own (`__slots__ = ()`): the class is the tag,
# and `type` is declared as its literal (the discriminator `EVENT_CLASSES` is read from).


class SessionStartedEvent(Event[SessionStarted]):
    __slots__ = ()
    type: Literal["session_started"]


class TurnEvent(Event[Turn]):
    __slots__ = ()
    type: Literal["turn"]


class ToolCallEvent(Event[ToolCall]):
    __slots__ = ()
    type: Literal["tool_call"]


class ToolResultEvent(Event[ToolResult]):
    __slots__ = ()
    type: Literal["tool_result"]


class ModelErrorEvent(Event[ModelError]):
    __slots__ = ()
    type: Literal["model_error"]


class ToolParseErrorEvent(Event[ToolParseError]):
    __slots__ = ()
    type: Literal["tool_parse_error"]


class MetricEvent(Event[Metric]):
    __slots__ = ()
    type: Literal["metric"]


class ModelSpecEvent(Event[ModelSpec]):
    __slots__ = ()
    type: Literal["model_spec"]


class LiveCheckEvent(Event[LiveCheck]):
    __slots__ = ()
    type: Literal["live_check"]


class DecisionEvent(Event[Decision]):
    __slots__ = ()
    type: Literal["decision"]


class RewardEvent(Event[Reward]):
    __slots__ = ()
    type: Literal["reward"]


class FeedbackEvent(Event[Feedback]):
    __slots__ = ()
    type: Literal["feedback"]


class SessionEndedEvent(Event[SessionEnded]):
    __slots__ = ()
    type: Literal["session_ended"]


class SessionResumedEvent(Event[SessionResumed]):
    __slots__ = ()
    type: Literal["session_resumed"]


class RuleEvaluationEvent(Event[RuleEvaluation]):
    __slots__ = ()
    type: Literal["rule_evaluation"]


class ChainBrokenEvent(Event[ChainBroken]):
    __slots__ = ()
    type: Literal["chain_broken"]


class VerdictEvent(Event[Verdict]):
    __slots__ = ()
    type: Literal["verdict"]


class FilterOutcomeEvent(Event[FilterOutcome]):
    __slots__ = ()
    type: Literal["filter_outcome"]


class CheckpointEvent(Event[Checkpoint]):
    __slots__ = ()
    type: Literal["checkpoint"]


class ErasureEvent(Event[Erasure]):
    __slots__ = ()
    type: Literal["erasure"]


class CronJobEvent(Event[CronJob]):
    __slots__ = ()
    type: Literal["cron_job"]


class CronRunEvent(Event[CronRun]):
    __slots__ = ()
    type: Literal["cron_run"]


class EvaluationEvent(Event[Evaluation]):
    __slots__ = ()
    type: Literal["evaluation"]


class RulesetEvaluationEvent(Event[RulesetEvaluation]):
    __slots__ = ()
    type: Literal["ruleset_evaluation"]


class WorldSnapshotEvent(Event[WorldSnapshot]):
    __slots__ = ()
    type: Literal["world_snapshot"]


class PromptVersionEvent(Event[PromptVersion]):
    __slots__ = ()
    type: Literal["prompt_version"]


class PromptPromotionEvent(Event[PromptPromotion]):
    __slots__ = ()
    type: Literal["prompt_promotion"]


class PromptDecisionEvent(Event[PromptDecision]):
    __slots__ = ()
    type: Literal["prompt_decision"]


class HumanVerdictEvent(Event[HumanVerdict]):
    __slots__ = ()
    type: Literal["human_verdict"]


class HumanPreferenceEvent(Event[HumanPreference]):
    __slots__ = ()
    type: Literal["human_preference"]


class TrainingInputEvent(Event[TrainingInput]):
    __slots__ = ()
    type: Literal["training_input"]


class TrainerLogEvent(Event[TrainerLog]):
    __slots__ = ()
    type: Literal["trainer_log"]


class ModelCheckpointEvent(Event[ModelCheckpoint]):
    __slots__ = ()
    type: Literal["model_checkpoint"]


class UnknownEvent(Event[BaseModel]):
    """An event of a type this version has no model for (a newer producer's): its header is
    read and checked like any other; `body` raises PayloadError."""

    __slots__ = ()


TypedEvent = (
    SessionStartedEvent
    | TurnEvent
    | ToolCallEvent
    | ToolResultEvent
    | ModelErrorEvent
    | ToolParseErrorEvent
    | MetricEvent
    | ModelSpecEvent
    | LiveCheckEvent
    | DecisionEvent
    | RewardEvent
    | FeedbackEvent
    | SessionEndedEvent
    | SessionResumedEvent
    | RuleEvaluationEvent
    | ChainBrokenEvent
    | VerdictEvent
    | FilterOutcomeEvent
    | CheckpointEvent
    | ErasureEvent
    | CronJobEvent
    | CronRunEvent
    | EvaluationEvent
    | RulesetEvaluationEvent
    | WorldSnapshotEvent
    | PromptVersionEvent
    | PromptPromotionEvent
    | PromptDecisionEvent
    | HumanVerdictEvent
    | HumanPreferenceEvent
    | TrainingInputEvent
    | TrainerLogEvent
    | ModelCheckpointEvent
    | UnknownEvent
)
"""What `read_event` returns: one member per event type, chosen by the record's `type`."""


def _tag(cls: type[TypedEvent]) -> str:
    """The event type a class stands for: the literal its `type` is declared as."""
    (tag,) = get_args(get_type_hints(cls)["type"])
    return cast(str, tag)


EVENT_CLASSES: Mapping[str, type[TypedEvent]] = {
    _tag(cls): cls for cls in get_args(TypedEvent) if cls is not UnknownEvent
}
"""Event type -> its class (the discriminator; `UnknownEvent` for any other type)."""


def body_model(cls: type[TypedEvent]) -> type[BaseModel]:
    """The payload model a class's `body` is typed as (`Turn` for `TurnEvent`)."""
    (model,) = get_args(cls.__orig_bases__[0])  # type: ignore[union-attr]
    return cast(type[BaseModel], model)
