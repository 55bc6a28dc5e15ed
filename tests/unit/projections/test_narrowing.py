"""`Narrowing.picks`: what the read model and a scan both decide a session by (its id and its
`session_started`), so the readers keep the same sessions either way."""

from __future__ import annotations

from typing import Any

from rolltape.projections import Narrowing
from rolltape.schemas import ChainWriter, TypedEvent, read_event

_PRODUCER = {"name": "test", "version": "0", "principal": "agent"}


def started(sid: str, ts_ns: int = 10, **payload: Any) -> TypedEvent:
    writer: ChainWriter[str] = ChainWriter()
    value, _ = writer.append(
        sid,
        stream="events",
        session_id=sid,
        ts_ns=ts_ns,
        type="session_started",
        payload={"task": "t", "tags": [], **payload},
        producer=_PRODUCER,
    )
    return read_event(value)


def test_tags__a_session_is_picked_only_when_it_carries_every_tag_asked() -> None:
    asked = Narrowing(tags=("batch=b1", "batch"))
    assert asked.narrows
    assert asked.picks("x", started("x", tags=["batch", "batch=b1", "env=e"]))
    assert not asked.picks("x", started("x", tags=["batch=b1"]))
    assert not asked.picks("x", started("x", tags=["batch", "batch=b10"]))
    assert not asked.picks("x", None)  # no session_started read: nothing says its tags


def test_tags__are_read_in_a_sealed_start_where_the_task_is_not() -> None:
    sealed = started("x", task="", tags=["batch=b1"], sealed={"v": 1})
    assert Narrowing(tags=("batch=b1",)).picks("x", sealed) is True
    assert Narrowing(tags=("batch=b1",), tasks=("t",)).picks("x", sealed) is None


def test_ids_and_tags__both_must_hold() -> None:
    asked = Narrowing(sessions=("batch.b1.*",), tags=("batch=b1",))
    assert asked.picks("batch.b1.i.0.1", started("batch.b1.i.0.1", tags=["batch=b1"]))
    assert not asked.picks("batch.b1.i.0.1", started("batch.b1.i.0.1"))
    assert not asked.picks("other", started("other", tags=["batch=b1"]))
