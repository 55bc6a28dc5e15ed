from pathlib import Path

import orjson

from rolltape.processors import ProcessorConfig, replay
from rolltape.processors.audit import InputRecord, Position
from rolltape.projections import fold
from rolltape.projections.exporters import jsonl_line, sharegpt_row
from rolltape.projections.importers import (
    RowError,
    env_rl_session,
    hermes_sessions,
    read_env_rl,
    rule_disagreements,
    their_rule_evaluations,
)
from rolltape.schemas import ChainVerifier, decode, read_event
from tests.support.env_rl_fixture import write_run
from tests.unit.projections.sessions import trajectories

PRODUCER = {"name": "rolltape.importers.test", "version": "0", "principal": "importer"}

HERMES_ROW = {
    "conversations": [
        {
            "from": "system",
            "value": 'You are a function calling AI model.\n\n<tools>\n[{"type": "function", "function": {"name": "terminal", "description": "run", "parameters": {"type": "object"}}}, {"name": "web_search"}]\n</tools>',
        },
        {"from": "human", "value": "list files"},
        {
            "from": "gpt",
            "value": '<think>\nUse the terminal twice.\n</think>\n\n<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}\n</tool_call>\n<tool_call>\n{"name": "web_search", "arguments": {"q": "ls"}}\n</tool_call>',
        },
        {
            "from": "tool",
            "value": '<tool_response>\n{"name": "web_search", "content": "no results"}\n</tool_response>\n<tool_response>\n{"name": "terminal", "content": {"output": "a.txt", "error": null}}\n</tool_response>',
        },
        {"from": "gpt", "value": "<think>\n\n</think>\nThere is a.txt."},
    ],
    "prompt_index": 7,
    "metadata": {"batch_num": 0, "timestamp": "2026-01-02T03:04:05", "model": "hermes-4"},
    "completed": True,
    "partial": False,
    "api_calls": 2,
}


def _records(session, producer=PRODUCER) -> list[InputRecord]:  # type: ignore[no-untyped-def]
    offsets: dict[str, int] = {}
    out = []
    for stream, value in session.sealed(producer):
        offsets[stream] = offsets.get(stream, -1) + 1
        at = Position(f"t.{stream}", 0, offsets[stream])
        out.append(InputRecord(stream, session.session_id.encode(), value, at))
    return out


def _folded(session):  # type: ignore[no-untyped-def]
    return fold([read_event(r.value) for r in _records(session) if r.stream == "events"])


def test_hermes_rows_become_chained_imported_sessions_with_results_matched_by_name() -> None:
    (session,) = hermes_sessions([orjson.dumps(HERMES_ROW)])
    assert not isinstance(session, RowError)
    verifier = ChainVerifier()
    for record in _records(session):
        verifier.add(record.value)
    assert all(report.ok for report in verifier.reports())
    trajectory = _folded(session)
    assert "imported:hermes" in trajectory.tags and trajectory.model == "hermes-4"
    assert trajectory.run_config["imported_from"]["format"] == "hermes"
    assert [t.name for t in trajectory.tools] == ["terminal", "web_search"]
    assert trajectory.task == "list files" and trajectory.status == "completed"
    calls = {c.name: c for c in trajectory.messages[2].tool_calls}
    assert calls["terminal"].result is not None and '"a.txt"' in calls["terminal"].result.content
    assert (
        calls["web_search"].result is not None
        and calls["web_search"].result.content == "no results"
    )
    assert trajectory.started_ns == 1767323045 * 10**9


def test_importing_a_row_again_from_another_file_and_line_gives_the_same_bytes_not_a_fork() -> None:
    first = next(iter(hermes_sessions([orjson.dumps(HERMES_ROW)])))
    moved = hermes_sessions([b"", b"not json", orjson.dumps(HERMES_ROW)])  # line 3 elsewhere
    again = next(s for s in moved if not isinstance(s, RowError))
    assert first.sealed(PRODUCER) == again.sealed(PRODUCER)  # type: ignore[union-attr]


def test_rows_exported_by_rolltape_import_back_to_the_same_conversation() -> None:
    for original in trajectories().values():
        line = jsonl_line(sharegpt_row(original))
        (session,) = hermes_sessions([line.rstrip()])
        assert not isinstance(session, RowError)
        back = _folded(session)
        strip = lambda t: [  # noqa: E731
            (
                m.role,
                m.content,
                m.reasoning or None,
                [
                    (
                        c.id,
                        c.name,
                        c.arguments,
                        c.raw_arguments,
                        c.result.content if c.result else None,
                    )
                    for c in m.tool_calls
                ],
            )
            for m in t.messages
        ]
        assert strip(back) == strip(original)
        assert back.completed == original.completed and back.reward == original.reward


def test_bad_rows_are_reported_by_line_and_the_rest_imported() -> None:
    lines = [
        b"not json",
        b"[1, 2]",
        orjson.dumps({"conversations": [{"from": "robot", "value": "x"}]}),
        b"",
        orjson.dumps(HERMES_ROW),
    ]
    huge = 'Calling.\n<tool_call>\n{"name": "calc", "arguments": {"n": 9223372036854775808}}\n</tool_call>'
    lines.append(
        orjson.dumps(
            {"conversations": [{"from": "human", "value": "?"}, {"from": "gpt", "value": huge}]}
        )
    )
    items = list(hermes_sessions(lines))
    errors = [i for i in items if isinstance(i, RowError)]
    assert [e.line for e in errors] == [1, 2, 3, 6]
    assert "unknown 'from'" in errors[2].reason
    # an integer past 64 bits has no canonical form: that row is reported, not the import failed
    assert "arguments.n: integer 9223372036854775808 is outside" in errors[3].reason
    assert sum(1 for i in items if not isinstance(i, RowError)) == 1


def test_env_rl_logs_verify_with_their_own_formula_and_tampering_is_found(tmp_path: Path) -> None:
    folder = write_run(tmp_path / "run")
    run = read_env_rl(folder)
    assert run.verified and len(run.records["metrics_log.jsonl"]) == 8
    path = folder / "metrics_log.jsonl"
    lines = path.read_bytes().splitlines()
    lines[3] = lines[3].replace(b'"grad_noise_scale": 40.0', b'"grad_noise_scale": 400.0')
    path.write_bytes(b"\n".join(lines) + b"\n")
    tampered = read_env_rl(folder)
    assert [(p.file, p.line) for p in tampered.problems] == [("metrics_log.jsonl", 4)]
    assert "hash mismatch" in tampered.problems[0].detail


def test_env_rl_runs_are_rejudged_and_disagreements_explained(tmp_path: Path) -> None:
    run = read_env_rl(write_run(tmp_path / "run"))
    session = env_rl_session(run, source="run")
    kinds = [(stream, kind) for stream, kind, _, _ in session.events]
    assert kinds.count(("metrics", "metric")) == 6 and ("events", "decision") in kinds
    assert any("weight_norm" in note for note in run.notes)  # a field rolltape has no name for
    metric = next(p for s, k, _, p in session.events if k == "metric")
    assert metric["activation_p99"] == 3.2  # env_rl's percentiles map onto the monitor's fields
    result = replay(_records(session), ProcessorConfig())
    ours = sorted(
        (decode(o.value)["payload"] for o in result.chains[("rules", session.session_id)]),
        key=lambda p: p["epoch"],
    )
    disagreements = rule_disagreements(their_rule_evaluations(run), ours)
    r2 = [d for d in disagreements if d["rule"] == "R2"]
    assert [d["epoch"] for d in r2] == [2, 3, 4, 5] and all(
        not d["env_rl"] and d["rolltape"] for d in r2
    )
    assert "noise" in r2[0]["why"]
    assert any(d["rule"] == "R7" and d["epoch"] == 4 for d in disagreements)
    (verdict,) = [
        decode(o.value)["payload"] for o in result.chains[("verdicts", session.session_id)]
    ]
    assert verdict["judge"] == "training_audit"
    assert "missing_decision" in {v["code"] for v in verdict["violations"]}
    metric_nan = next(p for s, k, _, p in session.events if k == "metric" and p["epoch"] == 4)
    assert metric_nan["train_loss"] != metric_nan["train_loss"]  # NaN kept as NaN


def test_hermes_compressor_summary_turn_is_marked_as_a_summary() -> None:
    compressed = {
        "conversations": [
            {"from": "human", "value": "fix the bug"},
            {"from": "gpt", "value": "<think>\n</think>\nlooking"},
            {"from": "human", "value": "[CONTEXT SUMMARY]: read 3 files, found the typo"},
            {"from": "gpt", "value": "<think>\n</think>\nfixed"},
        ],
        "completed": True,
        "model": "m",
        "timestamp": "2026-05-01T10:00:00",
    }
    (session,) = hermes_sessions([orjson.dumps(compressed)])
    trajectory = _folded(session)
    users = [m for m in trajectory.messages if m.role == "user"]
    assert [m.summary for m in users] == [False, True]
    assert users[1].content == "[CONTEXT SUMMARY]: read 3 files, found the typo"
    assert trajectory.model == "m" and trajectory.started_ns == 1777629600 * 10**9
