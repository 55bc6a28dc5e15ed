"""`rolltape log tail` wiring: the records of the chosen streams read as the reader principal,
from now or the oldest, each answered as what the CLI prints on its line: the record's bytes
(`--raw`), why it does not read, or the event with a summary a person can scan (subject
sessions opened with the keys topic where this machine has the key-encryption key, or marked
with why not)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from rolltape.infra.broker import require_connection
from rolltape.infra.kafka.keyring import KeysFollower, keys_follower_if_any
from rolltape.infra.kafka.readback import read_records
from rolltape.infra.settings import Settings
from rolltape.schemas import CHAINED_STREAMS as CHAINED_STREAMS
from rolltape.schemas import EnvelopeError, Role, TypedEvent, read_event
from rolltape.schemas import Stream as Stream


@dataclass(frozen=True)
class RawLine:
    """A record as `--raw` shows it: its value, the broker's bytes."""

    value: bytes


@dataclass(frozen=True)
class UnreadableLine:
    """A record that is no event: where it is and why it does not read."""

    broker_ts_ms: int
    stream: str
    position: str
    error: str


@dataclass(frozen=True)
class EventLine:
    """An event with its one-line summary (`summarize`)."""

    broker_ts_ms: int
    stream: str
    session_id: str
    seq: int
    type: str
    summary: str


TailLine = RawLine | UnreadableLine | EventLine


def _short(text: Any, width: int = 80) -> str:
    s = text if isinstance(text, str) else orjson.dumps(text).decode()
    s = s.replace("\n", "⏎ ")
    return s if len(s) <= width else s[: width - 1] + "…"


def summarize(event_type: str, p: Mapping[str, Any], unopened: str = "content sealed") -> str:
    """One line a person can scan for each event type. Content still sealed under a subject's
    data key is marked with why it was not opened (`unopened`: `erased`, `key unavailable`, or
    `content sealed` where tail has no key-encryption key), so its empty fields are not read as
    what was said."""
    line = _summary(event_type, p)
    if isinstance(p.get("sealed"), str):
        return f"[{unopened}] {line}"
    return line


def _summary(event_type: str, p: Mapping[str, Any]) -> str:
    match event_type:
        case "session_started":
            tools = ", ".join(t.get("name", "?") for t in p.get("tools", []))
            return f"{p.get('kind')} task={_short(p.get('task'), 50)!r} model={p.get('model')} tools=[{tools}]"
        case "turn":
            think = " (reasoning)" if p.get("reasoning") else ""
            return f"{p.get('role')}{think}: {_short(p.get('content'))}"
        case "tool_call":
            return f"{p.get('name')}({_short(p.get('arguments'), 60)}) id={p.get('id')}"
        case "tool_result":
            ok = "ok" if p.get("success") else f"FAILED {p.get('error')}"
            return f"{p.get('call_id')} {ok}: {_short(p.get('content'), 60)}"
        case "metric":
            keys = ("train_loss", "val_loss", "val_acc", "lr")
            return f"epoch {p.get('epoch')} " + " ".join(
                f"{k}={p[k]}" for k in keys if p.get(k) is not None
            )
        case "session_ended":
            return f"{p.get('status')} {_short(p.get('outcome') or '', 60)}"
        case _:
            return _short(p)


async def tail(
    settings: Settings,
    streams: Sequence[Stream],
    *,
    session_id: str | None = None,
    from_beginning: bool = False,
    follow: bool = True,
    raw: bool = False,
    on_ready: Callable[[], None] | None = None,
    on_line: Callable[[TailLine], None],
) -> None:
    """Read `streams` (of the settings' topic prefix), only `session_id`'s records when given,
    from the oldest record or from now, and, with `follow`, keep waiting for new ones; each
    record goes to `on_line`. `on_ready` hears when the reader is placed."""
    connection = require_connection(settings, Role.READER)
    keys = None if raw else keys_follower_if_any(connection, settings)
    needle = session_id.encode() if session_id else None
    async with contextlib.AsyncExitStack() as stack:
        if keys is not None:  # subject sessions shown opened, or said to be erased
            await stack.enter_async_context(keys)
        async for record in read_records(
            connection,
            streams,
            prefix=settings.topic_prefix,
            from_beginning=from_beginning,
            follow=follow,
            on_ready=on_ready,
        ):
            if needle is not None and record.key != needle:
                continue
            if raw:
                on_line(RawLine(record.value))
                continue
            try:
                env = read_event(record.value)
            except EnvelopeError as exc:
                on_line(
                    UnreadableLine(
                        record.broker_ts_ms, record.stream.value, record.position, str(exc)
                    )
                )
                continue
            on_line(await _event_line(env, record.broker_ts_ms, keys))


async def _event_line(env: TypedEvent, broker_ts_ms: int, keys: KeysFollower | None) -> EventLine:
    payload, unopened = env.payload, "content sealed"
    if keys is not None and "sealed" in payload:
        opened, unopened = await keys.open([env])
        payload = opened[0].payload if opened else payload
    summary = summarize(env.type, payload, unopened)
    return EventLine(broker_ts_ms, env.stream, env.session_id, env.seq, env.type, summary)
