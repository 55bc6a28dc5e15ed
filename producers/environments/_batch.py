"""Batches of rollouts: which slots a batch has, which are finished, running the rest.

A batch named `run` of `count` rollouts has slots 0..count-1: slot i is train item
`i % len(items)`, sample `i // len(items)`. Each attempt at a slot is a fresh session
`batch.<run>.<item>.<sample>.<attempt>`, so a slot cut short (a killed process) is retried as a
new session, never by a second writer of the old one. The checkpoint is the log itself: a slot
is finished when one of its sessions ended `completed` (`finished_slots` reads that from the
sessions' events), and only unfinished slots run again.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from rolltape.producers._errors import EnvError
from rolltape.producers.environments._base import Environment, Item
from rolltape.producers.environments._rollout import Rollout
from rolltape.schemas import TypedEvent

RUN_PATTERN = r"^[a-z0-9][a-z0-9-]{0,39}$"
_SESSION = re.compile(
    r"^batch\.(?P<run>[a-z0-9-]+)\.(?P<item>[a-z0-9_-]+)\.(?P<k>\d+)\.(?P<a>\d+)$"
)


@dataclass(frozen=True)
class Slot:
    """One rollout still to run: a train item's `sample`-th sample, at attempt `attempt`
    (from 1). `session_id(run)` is the fresh session of that attempt, in the form
    `slot_states` reads back."""

    item: Item
    sample: int
    attempt: int

    def session_id(self, run: str) -> str:
        return f"batch.{run}.{self.item.item_id}.{self.sample}.{self.attempt}"


@dataclass(frozen=True)
class SlotState:
    """What the log says of one slot: finished once any attempt's session ended completed;
    `attempts` is the highest attempt number seen (0 for none), so the next is one more."""

    finished: bool
    attempts: int


def slot_states(
    run: str, sessions: Mapping[str, Sequence[TypedEvent]]
) -> dict[tuple[str, int], SlotState]:
    """(item id, sample) -> whether a session of it ended completed, and how many attempts it
    had, from every session's events of the log."""
    states: dict[tuple[str, int], SlotState] = {}
    for session_id, events in sessions.items():
        match = _SESSION.match(session_id)
        if match is None or match["run"] != run:
            continue
        key = (match["item"], int(match["k"]))
        completed = any(
            e.type == "session_ended" and e.payload.get("status") == "completed" for e in events
        )
        before = states.get(key, SlotState(False, 0))
        states[key] = SlotState(before.finished or completed, max(before.attempts, int(match["a"])))
    return states


def plan(
    env: Environment, run: str, count: int, states: Mapping[tuple[str, int], SlotState]
) -> tuple[list[Slot], int]:
    """(the slots still to run, how many are finished already)."""
    if not re.match(RUN_PATTERN, run):
        raise EnvError(f"batch name {run!r} must match {RUN_PATTERN}")
    items = list(env.items("train"))
    if not items:
        raise EnvError(f"environment {env.name} has no train items")
    todo: list[Slot] = []
    finished = 0
    for index in range(count):
        item, sample = items[index % len(items)], index // len(items)
        state = states.get((item.item_id, sample), SlotState(False, 0))
        if state.finished:
            finished += 1
        else:
            todo.append(Slot(item, sample, state.attempts + 1))
    return todo, finished


async def run_slots(
    slots: Iterable[Slot],
    rollout: Callable[[Slot], Awaitable[Rollout]],
    *,
    concurrency: int,
    on_rollout: Callable[[Rollout], Awaitable[None]] | None = None,
) -> list[Rollout]:
    """Run `rollout` for every slot, `concurrency` at a time, in slot order of starting."""
    queue = list(slots)
    results: list[Rollout] = []
    position = 0

    async def worker() -> None:
        nonlocal position
        while position < len(queue):
            slot = queue[position]
            position += 1
            done = await rollout(slot)
            if on_rollout is not None:
                await on_rollout(done)
            results.append(done)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(queue)))))
    return results
