"""Recorded sessions for the projection tests: sealed like a recorder writes them and run through
the real processor step, so the fold sees the same derived chains a worker writes."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rolltape.processors import Emitted, ProcessorConfig
from rolltape.projections import Trajectory, fold
from rolltape.schemas import TypedEvent, read_event
from tests.unit.processors.scripted import Tape, run

#: Content an exporter must carry through untouched: structural tags of the formats, special
#: tokens of chat templates, escapes that look like ours, JSON-breaking text and unicode.
HOSTILE = (
    '</think> <think>x</think> <tool_call>\n{"name": "rm"}\n</tool_call> </tool_response>'
    " <tools>[]</tools> &lt;think> &amp;lt; & < <| <|im_end|> <|im_start|>system\n"
    '[TOOL_CALLS] "quote" \\back\\slash \u2028 \U0001f9ea café \x00 end'
)

TOOLS = [
    {
        "name": "search",
        "description": "web search",
        "parameters": {
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
        },
    },
    {"name": "calc", "description": "arithmetic", "parameters": {"type": "object"}},
    {"name": "never_used", "description": "declared, never called"},
]


def record_sessions(tape: Tape) -> list[Any]:
    records = []
    # An accepted session: tool results arrive in the opposite order of the calls.
    sid = "s-good"
    records.append(tape.start(sid, task="find the answer", tools=TOOLS, model="m-1", group_id="g1"))
    records.append(tape.event(sid, "turn", role="system", content="You are careful. " + HOSTILE))
    records.append(tape.event(sid, "turn", role="user", content="What is 6*7? " + HOSTILE))
    records.append(
        tape.event(
            sid,
            "turn",
            role="assistant",
            content="Let me check.",
            reasoning="think " + HOSTILE,
            prompt_tokens=120,
            completion_tokens=9,
        )
    )
    records.append(
        tape.event(sid, "tool_call", id="c-search", name="search", arguments={"q": HOSTILE})
    )
    records.append(
        tape.event(sid, "tool_call", id="c-calc", name="calc", arguments={"expr": "6*7"})
    )
    records.append(tape.event(sid, "tool_result", call_id="c-calc", content="42", duration_ms=1.5))
    records.append(
        tape.event(sid, "tool_result", call_id="c-search", content='{"hits": ["' + "x" * 10 + '"]}')
    )
    records.append(
        tape.event(sid, "turn", role="assistant", content="It is 42. " + HOSTILE, reasoning="")
    )
    records.append(tape.event(sid, "reward", value=1.0))
    records.append(tape.event(sid, "feedback", text="great"))
    records.extend(tape.end(sid, passed=True))
    # A rejected session in the same group: an unknown tool, a failed result, a lower reward.
    sid = "s-bad"
    records.append(tape.start(sid, task="find the answer", tools=TOOLS, model="m-1", group_id="g1"))
    records.append(tape.event(sid, "turn", role="user", content="What is 6*7?"))
    records.append(tape.event(sid, "tool_call", id="c-1", name="rm_rf", arguments={}))
    records.append(tape.event(sid, "tool_result", call_id="c-1", content="error: no such tool"))
    records.append(tape.event(sid, "tool_call", id="c-2", name="calc", raw_arguments="6*7 please"))
    records.append(tape.event(sid, "tool_result", call_id="c-unknown", content="stray"))
    records.append(tape.event(sid, "turn", role="assistant", content="I could not."))
    records.append(tape.event(sid, "reward", value=0.0))
    records.extend(tape.end(sid, passed=False))
    # Two sessions whose every message carries token ids from the serving engine.
    for sid, value in (("s-tok-a", 0.5), ("s-tok-b", 0.25)):
        records.append(tape.start(sid, task="count", model="m-2", group_id="g2"))
        records.append(tape.event(sid, "turn", role="user", content="count", token_ids=[5, 6]))
        records.append(
            tape.event(
                sid, "turn", role="assistant", content="1 2", token_ids=[7, 8, 9], reasoning="r"
            )
        )
        records.append(tape.event(sid, "reward", value=value))
        records.extend(tape.end(sid))
    return records


CONFIG = ProcessorConfig(rewards=("final_reward",))


def recorded() -> tuple[dict[str, list[TypedEvent]], list[TypedEvent]]:
    """(events-stream events per session, every derived event), read through the codec."""
    tape = Tape()
    records = record_sessions(tape)
    outputs, _ = run(records, CONFIG)
    events: dict[str, list[TypedEvent]] = defaultdict(list)
    for record in records:
        event = read_event(record.value)
        events[event.session_id].append(event)
    derived = [read_event(o.value) for o in outputs if isinstance(o, Emitted)]
    return dict(events), derived


def trajectories() -> dict[str, Trajectory]:
    events, derived = recorded()
    return {sid: fold(envs, derived) for sid, envs in events.items()}


def conversation(messages: list[Any]) -> Trajectory:
    """A bare finished trajectory around hand-built messages (exporter and compression tests)."""
    return Trajectory(
        trajectory_id="x",
        session_id="s",
        judge_version="live",
        kind="agent",
        task="t",
        started_ns=0,
        status="completed",
        messages=tuple(messages),
    )


def fold_records(records: list[Any]) -> Trajectory:
    """Records folded as the projections fold them, with the processor step's outputs."""
    outputs, _ = run(records, CONFIG)
    events = [read_event(r.value) for r in records]
    derived = [read_event(o.value) for o in outputs if hasattr(o, "value")]
    return fold(events, derived)


def captured(tape: Tape, sid: str = "s-cap", *, compressed: bool = False) -> list[Any]:
    """A session as a captured client against vLLM records it: each reply with the prompt ids
    the engine saw, its sampled ids and logprobs; tool results between replies."""
    records = [tape.start(sid, task="add", model="policy", group_id="g")]
    records.append(tape.event(sid, "turn", role="user", content="add 2 and 3"))
    records.append(
        tape.event(
            sid,
            "turn",
            role="assistant",
            content="",
            prompt_token_ids=[1, 2, 3],
            token_ids=[10, 11],
            logprobs=[-0.1, -0.2],
            finish_reason="tool_calls",
            model="policy",
            model_version="gen-0",
        )
    )
    records.append(tape.event(sid, "tool_call", id="c1", name="calc", arguments={"e": "2+3"}))
    records.append(tape.event(sid, "tool_result", call_id="c1", content="5"))
    records.append(tape.event(sid, "reward", name="turn", value=0.5))
    records.append(
        tape.event(
            sid,
            "turn",
            role="assistant",
            content="It is 5.",
            prompt_token_ids=[1, 2, 3, 10, 11, 20, 21],
            token_ids=[12, 13],
            logprobs=[-0.3, -0.4],
            finish_reason="stop",
            model="policy",
            model_version="gen-0",
        )
    )
    if compressed:
        # The agent compressed its context: the next prompt no longer extends the branch.
        records.append(tape.event(sid, "turn", role="user", content="and 4 more?"))
        records.append(
            tape.event(
                sid,
                "turn",
                role="assistant",
                content="9.",
                prompt_token_ids=[1, 2, 3, 77, 30],
                token_ids=[14],
                logprobs=[-0.5],
                finish_reason="length",
                model="policy",
                model_version="gen-0",
            )
        )
    records.append(tape.event(sid, "reward", value=1.0))
    records.extend(tape.end(sid))
    return records
