"""One conversation, read event by event: the rules every view of an agent session shares.

Invariant: the decisions about a session's conversation are made here and nowhere else:
- which events are part of it: the payload types in `_PARTS`, as `parse_payload` returns them
  (exact types; model errors, parse errors and resumptions are not part of the conversation);
- which turn a tool call belongs to: the latest assistant turn when no user or system turn came
  between; a call with no such turn opens an assistant message of its own;
- a repeated call id: the first call keeps it;
- how a result finds its call: by `call_id`, never by position; the first result answers the
  call, a second one (or one for a call never made) is a stray;
- when a result counts as failed (`tool_failed`);
- the first session_ended ends the session (a second is not told).
A view (the export fold, the judges' transcript) records what it is told and decides nothing.
Which records of a chain are read, and in what order, is the caller's: the worker's audit admits
them in chain order (nothing after session_ended); the fold takes the first copy of each seq.

Why a walker with views instead of one folded model: the views differ in what they may keep.
The export fold holds a whole session; the transcript lives in the worker's per-session state,
saved to a changelog on every batch, so it keeps bounded text. `Conversation` is the memory the
decisions need (one bit, and a book with one entry per call id), JSON-able, and it travels with
the view that asks for it. The reward filters read no results, so they take the dispatch alone
(`read` and a `Reader`) and carry no book: their saved state stays counters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

from pydantic import BaseModel

from rolltape.schemas import (
    PAYLOAD_MODELS,
    Decision,
    Feedback,
    Reward,
    SessionEnded,
    SessionStarted,
    ToolCall,
    ToolResult,
    Turn,
    result_failed,
)

At = TypeVar("At")
"""What the caller hands along with each event for the view to keep or cite: the envelope (the
fold), the event's hash (the filters), the transcript and its bound (the transcript)."""

_PARTS: dict[type[BaseModel], str] = {
    Turn: "turn",
    ToolCall: "call",
    ToolResult: "result",
    SessionStarted: "started",
    Reward: "reward",
    Feedback: "feedback",
    Decision: "decision",
    SessionEnded: "ended",
}
"""The payload types that are part of a conversation -> the part's name."""

EVENT_TYPES: frozenset[str] = frozenset(
    name for name, model in PAYLOAD_MODELS.items() if model in _PARTS
)
"""The envelope types that are part of a conversation (a reader need not parse the others)."""


def tool_failed(result: ToolResult) -> bool:
    """What the recorder said, then the Hermes agent's rule on the result text (`result_failed`,
    rolltape.schemas._tool_outcome)."""
    return not result.success or result.error is not None or result_failed(result.content)


class _Facts(Generic[At]):
    """The parts told as they were recorded. Every method does nothing: override what you read."""

    __slots__ = ()

    def started(self, start: SessionStarted, at: At) -> None:
        return None

    def turn(self, turn: Turn, at: At) -> None:
        return None

    def reward(self, reward: Reward, at: At) -> None:
        return None

    def feedback(self, feedback: Feedback, at: At) -> None:
        return None

    def decision(self, decision: Decision, at: At) -> None:
        return None

    def ended(self, end: SessionEnded, at: At) -> None:
        return None


class Reader(_Facts[At]):
    """A view of the conversation's events with no decision made on calls and results (for a
    view that reads none of them: it keeps no book)."""

    __slots__ = ()

    def call(self, call: ToolCall, at: At) -> None:
        return None

    def result(self, result: ToolResult, at: At) -> None:
        return None


class View(_Facts[At]):
    """A view of the conversation, told each part with `Conversation`'s decisions made."""

    __slots__ = ()

    def call(self, call: ToolCall, at: At, *, opens: bool, repeated: bool) -> None:
        """`opens`: no assistant turn is open, so the call opens an assistant message of its
        own (a repeated call too); `repeated`: an earlier call has this id and keeps it."""
        return None

    def answer(self, result: ToolResult, at: At, *, failed: bool) -> None:
        """The first result for a call told before; `failed` by `tool_failed`."""
        return None

    def stray(self, result: ToolResult, at: At, *, answered: bool) -> None:
        """A result that answers nothing: its call already has a result (`answered`), or no
        call has its id."""
        return None


def read(payload: BaseModel, at: At, reader: Reader[At]) -> None:
    """Tell `reader` one event of the session's events stream (its typed payload), if it is part
    of the conversation."""
    part = _PARTS.get(type(payload))
    if part is not None:
        getattr(reader, part)(payload, at)


@dataclass
class Conversation:
    """What the decisions remember of one conversation (kept in the state of the view using
    it; JSON-able)."""

    assistant_open: bool = False
    """An assistant turn, or a message opened by calls, takes the next tool calls."""
    calls: dict[str, bool] = field(default_factory=dict)
    """Call id -> whether it has its result."""
    ended: bool = False
    """A session_ended has been told (a later one is not)."""

    def tell(self, payload: BaseModel, at: At, view: View[At]) -> None:
        """Decide on one event of the session's events stream (its typed payload) and tell
        `view`, if it is part of the conversation."""
        kind = type(payload)
        # Turns, calls and results, the bulk of a session, are decided inline (this runs per
        # event in the worker); the other parts are told as recorded.
        if kind is Turn:
            turn = cast(Turn, payload)
            self.assistant_open = turn.role == "assistant"
            view.turn(turn, at)
        elif kind is ToolCall:
            self._call(cast(ToolCall, payload), at, view)
        elif kind is ToolResult:
            self._result(cast(ToolResult, payload), at, view)
        elif kind is SessionEnded:
            if not self.ended:
                self.ended = True
                view.ended(cast(SessionEnded, payload), at)
        else:
            part = _PARTS.get(kind)
            if part is not None:
                getattr(view, part)(payload, at)

    def _call(self, call: ToolCall, at: At, view: View[At]) -> None:
        opens = not self.assistant_open
        self.assistant_open = True
        repeated = call.id in self.calls
        if not repeated:
            self.calls[call.id] = False
        view.call(call, at, opens=opens, repeated=repeated)

    def _result(self, result: ToolResult, at: At, view: View[At]) -> None:
        answered = self.calls.get(result.call_id)
        if answered is False:
            self.calls[result.call_id] = True
            view.answer(result, at, failed=tool_failed(result))
        else:
            view.stray(result, at, answered=answered is True)
