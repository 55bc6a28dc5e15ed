"""`rolltape log tail`: records as they arrive, one line each."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import Mapping
from typing import Any

import orjson
import typer
from rich.markup import escape

from rolltape.infra.broker import require_connection
from rolltape.infra.cli._common import console, err_console, settings
from rolltape.infra.kafka.keyring import KeysFollower, keys_follower_if_any
from rolltape.infra.kafka.readback import read_records
from rolltape.schemas import (
    CHAINED_STREAMS,
    EnvelopeError,
    Role,
    Stream,
    read_event,
)


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


def tail(
    stream: list[Stream] = typer.Option(
        list(CHAINED_STREAMS), "--stream", help="A stream of the log to show (repeatable)."
    ),
    session: str | None = typer.Option(
        None, "--session", "-s", help="A session id: only its records."
    ),
    from_beginning: bool = typer.Option(
        False, "--from-beginning", help="Start at the oldest record."
    ),
    follow: bool = typer.Option(True, "--follow/--no-follow", help="Keep waiting for new records."),
    raw: bool = typer.Option(False, "--raw", help="Print the record bytes instead of a summary."),
) -> None:
    """Show records as they arrive, one line each."""
    cfg = settings()
    connection = require_connection(cfg, Role.READER)

    def ready() -> None:
        where = "the oldest record" if from_beginning else "now"
        more = "; Ctrl-C stops" if follow else ""
        err_console.print(f"reading {', '.join(s.value for s in stream)} from {where}{more}")

    async def run() -> None:
        keys = None if raw else keys_follower_if_any(connection, cfg)
        async with contextlib.AsyncExitStack() as stack:
            if keys is not None:  # subject sessions shown opened, or said to be erased
                await stack.enter_async_context(keys)
            await show(keys)

    async def show(keys: KeysFollower | None) -> None:
        needle = session.encode() if session else None
        async for record in read_records(
            connection,
            stream,
            prefix=cfg.topic_prefix,
            from_beginning=from_beginning,
            follow=follow,
            on_ready=ready,
        ):
            if needle is not None and record.key != needle:
                continue
            if raw:
                console.print(record.value.decode(errors="replace"), markup=False, soft_wrap=True)
                continue
            when = dt.datetime.fromtimestamp(record.broker_ts_ms / 1000, dt.UTC).strftime(
                "%H:%M:%S.%f"
            )[:-3]
            try:
                env = read_event(record.value)
            except EnvelopeError as exc:
                console.print(
                    f"{when} [red]{record.stream.value:<8} unreadable at {record.position}: {escape(str(exc)[:100])}[/red]"
                )
                continue
            payload, unopened = env.payload, "content sealed"
            if keys is not None and "sealed" in payload:
                opened, unopened = await keys.open([env])
                payload = opened[0].payload if opened else payload
            line = escape(summarize(env.type, payload, unopened))
            console.print(
                f"[dim]{when}[/dim] {env.stream:<8} [cyan]{env.session_id[:12]}[/cyan] "
                f"#{env.seq:<4} [bold]{env.type:<15}[/bold] {line}",
                soft_wrap=True,
            )

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
