"""Batch planning from the log: finished slots are skipped, a slot cut short runs again as a
new attempt (a fresh session), items cycle through the train split."""

from __future__ import annotations

from typing import Any

import pytest

from rolltape.producers.environments._batch import plan, slot_states
from rolltape.producers.environments.bugfix import BugFixEnv
from rolltape.schemas import GENESIS_HASH, TypedEvent, read_event, seal


def _event(seq: int, event_type: str, payload: dict[str, Any]) -> TypedEvent:
    value, _ = seal(
        stream="events",
        session_id="s",
        seq=seq,
        ts_ns=1,
        type=event_type,
        payload=payload,
        prev_hash=GENESIS_HASH,
        producer={"name": "test", "version": "0", "principal": "agent"},
        causes=(),
    )
    return read_event(value)


def _started() -> list[TypedEvent]:
    return [_event(0, "session_started", {"task": "t"})]


def _ended(status: str) -> list[TypedEvent]:
    return [*_started(), _event(1, "session_ended", {"status": status})]


def test_plan__cycles_the_train_items_and_names_a_session_per_slot() -> None:
    env = BugFixEnv()
    todo, finished = plan(env, "b1", 8, {})
    assert finished == 0 and len(todo) == 8
    names = [slot.session_id("b1") for slot in todo]
    assert names[0] == "batch.b1.binary_search.0.1"
    assert names[6] == "batch.b1.binary_search.1.1"  # six train items: the seventh cycles


def test_plan__skips_completed_slots_and_retries_the_rest_as_new_attempts() -> None:
    sessions = {
        "batch.b1.binary_search.0.1": _ended("completed"),
        "batch.b1.fizzbuzz.0.1": _started(),  # killed
        "batch.b1.median.0.1": _ended("failed"),
        "batch.b1.median.0.2": _ended("interrupted"),
        "batch.other.roman.0.1": _ended("completed"),  # another batch
        "cron.x.20260101T000000Z.1": _ended("completed"),
    }
    todo, finished = plan(BugFixEnv(), "b1", 4, slot_states("b1", sessions))
    assert finished == 1
    assert [slot.session_id("b1") for slot in todo] == [
        "batch.b1.fizzbuzz.0.2",
        "batch.b1.median.0.3",
        "batch.b1.roman.0.1",
    ]


def test_plan__refuses_a_bad_batch_name() -> None:
    with pytest.raises(ValueError, match="batch name 'Bad Name' must match"):
        plan(BugFixEnv(), "Bad Name", 1, {})
