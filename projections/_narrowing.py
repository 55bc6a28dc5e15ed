"""Which sessions a reader asks for by id, task, tag or start time: the part of a selection a
read model can answer before a record is read.

`dataset export -s/--task/--since/--until`, `report --session/--task`, a batch's runs (by its
tag) and `cron to-env` (by its runs' ids) read only the sessions this names. The read model
finds them without a scan; a scan (no read model), or the tail a read model has not indexed
yet, files every session it reads and keeps the same ones. Both then decide with `picks`, on the same
facts (the id, and the session's `session_started`: its task and the recorder's time), so the
two ways give the same output byte for byte. A session the narrowing does not pick is not read,
so it is not counted either: an export's `sessions_read` and `skipped` count the picked ones.
"""

from __future__ import annotations

import fnmatch
import re

from pydantic import BaseModel, ConfigDict

from rolltape.schemas import Stream, TypedEvent

_WILD = re.compile(r"[*?\[]")


class Narrowing(BaseModel):
    """Session ids or shell patterns, task texts, tags and a start-time window (the recorder's
    clock, ns): a session is picked when it matches every one given (and carries every tag).
    Empty: every session."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sessions: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    since_ns: int | None = None
    until_ns: int | None = None

    @property
    def narrows(self) -> bool:
        """Whether it leaves any session out (an empty narrowing reads the whole log)."""
        return bool(self.sessions or self.tasks or self.tags) or (
            self.since_ns is not None or self.until_ns is not None
        )

    def picks_id(self, session_id: str) -> bool:
        return id_matches(self.sessions, session_id)

    def picks(self, session_id: str, start: TypedEvent | None) -> bool | None:
        """Whether the session is asked for, from its id and its `session_started` (None when
        the log holds none). None: it cannot be told, because the task is asked and the start's
        content is sealed (a subject's session not opened here); the reader counts such a
        session as it counts every one it cannot open."""
        if not self.picks_id(session_id):
            return False
        if self.since_ns is not None or self.until_ns is not None:
            if start is None:
                return False
            if self.since_ns is not None and start.ts_ns < self.since_ns:
                return False
            if self.until_ns is not None and start.ts_ns >= self.until_ns:
                return False
        # Tags stay in the clear in a subject's session: only its task is sealed.
        if self.tags and not set(self.tags) <= set([] if start is None else _tags(start)):
            return False
        if self.tasks:
            if start is None:
                return False
            if start.payload.get("sealed"):
                return None
            return start.payload.get("task") in self.tasks
        return True

    def exact_ids(self) -> tuple[str, ...] | None:
        """The ids asked for when every one is an id, not a pattern (None otherwise)."""
        if not self.sessions or any(_WILD.search(p) for p in self.sessions):
            return None
        return tuple(sorted(set(self.sessions)))

    def id_prefixes(self) -> tuple[str, ...]:
        """Each pattern's text before its first wildcard: a session it matches starts so."""
        return tuple(sorted({_WILD.split(p, maxsplit=1)[0] for p in self.sessions}))


def _tags(start: TypedEvent) -> list[str]:
    tags = start.payload.get("tags")
    return [str(t) for t in tags] if isinstance(tags, list) else []


def id_matches(patterns: tuple[str, ...], session_id: str) -> bool:
    """Whether `session_id` is one of the ids or shell patterns (any, when there are none)."""
    return not patterns or any(fnmatch.fnmatchcase(session_id, p) for p in patterns)


def session_start(events: list[TypedEvent]) -> TypedEvent | None:
    """The session's `session_started` on its events chain (seq 0), if read."""
    for event in events:
        if event.stream == Stream.EVENTS.value and event.seq == 0:
            return event if event.type == "session_started" else None
    return None


__all__ = ["Narrowing", "session_start"]
