"""Agent sessions written to a scratch prefix's events topic, for the benchmarks that read a
real log: one session after another (each a run of question, answer, tool call and result
rounds, a reward and its end), chained as a sender chains them, keyed by session id.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rolltape.schemas import ChainWriter, Stream, topic_name
from rolltape.schemas.clients import KafkaConnection

_PRODUCER = {"name": "bench", "version": "0", "principal": "agent"}
_TOOLS = [{"name": "search", "description": "search", "parameters": {"type": "object"}}]


def agent_session_events(sid: str, per_session: int, ts: int) -> list[tuple[str, dict[str, Any]]]:
    """At least `per_session` events of one session: its start, rounds of four, reward, end."""
    events: list[tuple[str, dict[str, Any]]] = [
        ("session_started", {"task": f"task of {sid}", "tools": _TOOLS, "model": "bench-model"})
    ]
    rounds = max(1, -(-(per_session - 3) // 4))  # at least per_session events
    for i in range(rounds):
        call = f"c{i}"
        events += [
            ("turn", {"role": "user", "content": f"question {i} of {sid}: what is {i}*{i}?"}),
            (
                "turn",
                {
                    "role": "assistant",
                    "content": f"Let me search for {i}*{i}.",
                    "reasoning": "The user wants a product; a search will confirm it.",
                },
            ),
            ("tool_call", {"id": call, "name": "search", "arguments": {"q": f"{i}*{i}"}}),
            ("tool_result", {"call_id": call, "content": f'{{"answer": {i * i}}}'}),
        ]
    events += [
        ("reward", {"value": 1.0}),
        ("session_ended", {"status": "completed", "outcome": {}, "streams": []}),
    ]
    return events


async def write_agent_sessions(
    connection: KafkaConnection, prefix: str, events: int, sessions: int
) -> int:
    """Write `sessions` sessions of about `events` events in all, `bench-0` first; returns how
    many were written (each acknowledged)."""
    topic = topic_name(Stream.EVENTS, prefix)
    producer = connection.chain_producer(linger_ms=20, max_batch_size=512 * 1024)
    await producer.start()
    written = 0
    try:
        per_session = max(4, events // sessions)
        ts = 1_700_000_000_000_000_000
        pending = []
        writer: ChainWriter[str] = ChainWriter()
        for s in range(sessions):
            sid = f"bench-{s}"
            for event_type, payload in agent_session_events(sid, per_session, ts):
                ts += 1000
                value, _ = writer.append(
                    sid,
                    stream="events",
                    session_id=sid,
                    ts_ns=ts,
                    type=event_type,
                    payload=payload,
                    producer=_PRODUCER,
                )
                pending.append(await producer.send(topic, value, key=sid.encode()))
                written += 1
            if len(pending) > 20_000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return written


__all__ = ["agent_session_events", "write_agent_sessions"]
