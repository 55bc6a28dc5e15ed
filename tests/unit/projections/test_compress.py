from rolltape.projections import Message, ToolCallRecord, ToolOutcome, Trajectory
from rolltape.projections.exporters import compress, estimate_tokens, trajectory_tokens
from tests.unit.projections.sessions import conversation


def _long_session() -> Trajectory:
    messages = [
        Message(role="system", content="sys", ts_ns=0, event_hash="h"),
        Message(role="user", content="the task", ts_ns=0, event_hash="h"),
    ]
    for i in range(6):
        call = ToolCallRecord(
            id=f"c{i}",
            name="read",
            arguments={"page": i},
            event_hash="h",
            result=ToolOutcome(content=f"page {i} " + "x" * 4000, success=True, event_hash="h"),
        )
        messages.append(
            Message(
                role="assistant",
                content="thinking aloud " * 50,
                reasoning="r" * 800,
                tool_calls=(call,),
                ts_ns=0,
                event_hash="h",
            )
        )
        messages.append(Message(role="user", content="go on " * 40, ts_ns=0, event_hash="h"))
    messages.append(
        Message(
            role="assistant", content="the final answer", reasoning="why", ts_ns=0, event_hash="h"
        )
    )
    return conversation(messages)


def test_compression_keeps_task_calls_with_results_and_the_outcome() -> None:
    trajectory = _long_session()
    compressed, report = compress(trajectory, budget=2500)
    assert report.within_budget and report.tokens <= 2500 < report.original_tokens
    roles = [m.role for m in compressed.messages]
    assert roles[:2] == ["system", "user"] and compressed.messages[1].content == "the task"
    assert (
        compressed.messages[-1].content == "the final answer"
        and compressed.messages[-1].reasoning == "why"
    )
    calls = [c for m in compressed.messages for c in m.tool_calls]
    assert [c.id for c in calls] == [f"c{i}" for i in range(6)]
    assert all(
        c.result is not None and c.result.content.startswith(f"page {i}")
        for i, c in enumerate(calls)
    )
    assert report.steps and trajectory_tokens(compressed) == report.tokens


def test_compression_stops_as_soon_as_the_trajectory_fits() -> None:
    trajectory = _long_session()
    light, report = compress(trajectory, budget=trajectory_tokens(trajectory) - 100)
    assert report.steps == ("reasoning of message 2",)
    assert light.messages[2].reasoning is None and light.messages[4].reasoning == "r" * 800


def test_a_fitting_trajectory_is_unchanged_and_compression_is_deterministic() -> None:
    trajectory = _long_session()
    same, report = compress(trajectory, budget=10**9)
    assert same == trajectory and report.steps == ()
    assert compress(trajectory, 2500) == compress(trajectory, 2500)


def test_an_impossible_budget_is_reported_not_hidden() -> None:
    _, report = compress(_long_session(), budget=10)
    assert not report.within_budget and report.tokens > 10


def test_estimate_counts_utf8_bytes() -> None:
    assert (
        estimate_tokens("") == 0 and estimate_tokens("abcd") == 1 and estimate_tokens("é" * 4) == 2
    )
