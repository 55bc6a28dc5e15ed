"""Typed events: `read_event` returns the class of the record's type, whose body is its model."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from rolltape.schemas import (
    EVENT_CLASSES,
    GENESIS_HASH,
    PAYLOAD_MODELS,
    MetricEvent,
    PayloadError,
    ToolCallEvent,
    TurnEvent,
    TypedEvent,
    UnknownEvent,
    UnreadableRecord,
    read_event,
    reread_event,
    seal,
)
from rolltape.schemas._events import body_model

PRODUCER = {"name": "test", "version": "0", "principal": "agent"}

SAMPLES: dict[str, dict[str, Any]] = {
    "session_started": {"task": "add", "tools": [{"name": "calc", "parameters": {}}]},
    "turn": {"role": "assistant", "content": "4", "reasoning": "2+2"},
    "tool_call": {"id": "c1", "name": "calc", "arguments": {"x": "2+2"}},
    "tool_result": {"call_id": "c1", "content": "4"},
    "metric": {"epoch": 0, "steps": 10, "train_loss": 0.5},
    "reward": {"value": 1.0, "name": "reward"},
    "feedback": {"score": 1.0, "text": "good"},
    "session_ended": {"status": "completed", "outcome": {}, "streams": ["events"]},
}
"""One valid payload per type for the round trips (most of a session's traffic)."""


def _record(event_type: str, payload: dict[str, Any]) -> bytes:
    value, _ = seal(
        stream="events",
        session_id="s1",
        seq=0,
        ts_ns=1_700_000_000_000_000_000,
        type=event_type,
        payload=payload,
        prev_hash=GENESIS_HASH,
        producer=PRODUCER,
        causes=(),
    )
    return value


def test_every_event_type__has_one_class_whose_body_is_its_payload_model() -> None:
    assert set(EVENT_CLASSES) == set(PAYLOAD_MODELS)
    for event_type, cls in EVENT_CLASSES.items():
        assert body_model(cls) is PAYLOAD_MODELS[event_type], event_type
    assert len(set(EVENT_CLASSES.values())) == len(EVENT_CLASSES)


@pytest.mark.parametrize("event_type", sorted(SAMPLES))
def test_read_event__returns_the_class_of_its_type_and_round_trips_the_bytes(
    event_type: str,
) -> None:
    value = _record(event_type, SAMPLES[event_type])
    event = read_event(value)
    assert type(event) is EVENT_CLASSES[event_type]
    assert isinstance(event.body, PAYLOAD_MODELS[event_type])
    # The typed body, dumped as the recorder dumps payloads, seals to the same bytes.
    dumped = event.body.model_dump(mode="json", exclude_unset=True)
    assert _record(event_type, dumped) == value


def test_match__narrows_an_event_to_its_body() -> None:
    def describe(event: TypedEvent) -> str:
        match event:
            case TurnEvent():
                return f"{event.body.role}: {event.body.content}"
            case ToolCallEvent():
                return f"call {event.body.name}"
            case MetricEvent():
                return f"epoch {event.body.epoch}"
        return event.type

    assert describe(read_event(_record("turn", SAMPLES["turn"]))) == "assistant: 4"
    assert describe(read_event(_record("tool_call", SAMPLES["tool_call"]))) == "call calc"
    assert describe(read_event(_record("metric", SAMPLES["metric"]))) == "epoch 0"
    assert describe(read_event(_record("reward", SAMPLES["reward"]))) == "reward"


def test_event_of_a_type_this_version_does_not_know__is_read_but_has_no_body() -> None:
    event = read_event(_record("hologram", {"frames": 3}))
    assert type(event) is UnknownEvent
    assert event.intact and event.canonical and event.payload == {"frames": 3}
    with pytest.raises(PayloadError, match="unknown event type 'hologram'"):
        _ = event.body


def test_typed_event__is_frozen_and_parses_its_body_once() -> None:
    event = read_event(_record("turn", SAMPLES["turn"]))
    assert event.body is event.body
    with pytest.raises(AttributeError):
        event.type = "metric"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        event.note = "x"  # type: ignore[attr-defined]  # no attributes beside the fields


@pytest.mark.parametrize("canonical", [True, False])
def test_reread_event__gives_the_event_read_event_gave(canonical: bool) -> None:
    value = _record("turn", SAMPLES["turn"])
    if not canonical:  # the same content written with spaces: not canonical, still intact
        value = orjson.dumps(orjson.loads(value), option=orjson.OPT_INDENT_2)
    first = read_event(value)
    again = reread_event(value, canonical=first.canonical)
    assert type(again) is type(first) and again.canonical is canonical
    assert tuple(again)[:-1] == tuple(first)[:-1]  # every field but the body's cache
    assert again.body == first.body


@pytest.mark.parametrize(
    "data",
    [b'{"n": 1}', b"[1, 2", _record("turn", SAMPLES["turn"]).replace(b'"v":1', b'"v":2')],
    ids=["no envelope", "no json", "another version"],
)
def test_reread_event__of_bytes_read_event_never_accepted__is_refused(data: bytes) -> None:
    with pytest.raises(UnreadableRecord):
        reread_event(data, canonical=True)


def test_events__are_equal_only_to_themselves_and_hashable() -> None:
    value = _record("turn", SAMPLES["turn"])
    first, second = read_event(value), read_event(value)
    assert first == first and first != second and len({first, second}) == 2
    assert first.hash == second.hash  # two readings of one record compare by their hash
