"""An environment's tools judge, through the real `openai` client over real HTTP to a scripted
local server and real bubblewrap: it reads the world the agent left, re-runs the tests in the
sandbox and writes its verdict file; a verdict the policy plants in the world changes nothing;
a judge that writes none fails the rollout; judges sharing the live world run in turn, each on
the recorded world, and clean-room judges run at once in copies of it."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from rolltape.producers import Recorder, take_snapshot
from rolltape.producers.environments import run_rollout
from rolltape.producers.environments.bugfix import BugFixJudgedEnv
from rolltape.producers.judging import JudgeInputs, JudgeRuntime, RecordedWorld, run_judges
from rolltape.schemas import AgentSpec, JudgeBudget, JudgeSpec
from rolltape.schemas.clients import ModelEndpoint
from tests.support.openai_server import Completion, OpenAICompatibleServer, Reply
from tests.support.waiting import DEFAULT_TIMEOUT_S
from tests.unit.producers.recorded import spooled
from tests.unit.producers.test_environments import FIXED_SLUG

REVIEW = {
    "tests_pass": True,
    "fixes_bug": True,
    "tests_weakened": False,
    "score": 0.9,
    "rationale": "The slug now drops punctuation and collapses spaces.",
}


def _tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def _shell(call_id: str, command: str) -> Completion:
    return Completion(tool_calls=[(call_id, "shell", json.dumps({"command": command}))])


def _write_verdict(verdict: dict[str, Any]) -> str:
    return f"cat > /judge/verdict.json <<'EOF'\n{json.dumps(verdict)}\nEOF"


def scripted(
    *, plant: bool = False, judge_writes: bool = True
) -> Callable[[dict[str, Any]], Reply]:
    """The policy fixes slug.py (and, with `plant`, writes a glowing verdict.json into its
    workdir); the judge re-runs the tests, reads the module, then writes its verdict (or not)."""

    def reply(body: dict[str, Any]) -> Reply:
        results = _tool_results(body)
        if body["messages"][0]["content"].startswith("You are a judge"):
            if not results:
                return _shell("j1", "python -m pytest -q -p no:cacheprovider")
            if len(results) == 1:
                return _shell("j2", "cat slug.py; ls /judge")
            if len(results) == 2 and judge_writes:
                passed = "3 passed" in results[0] and "re.sub" in results[1]
                return _shell("j3", _write_verdict({**REVIEW, "tests_pass": passed}))
            return Completion(content="Reviewed.")
        if not results:
            return Completion(tool_calls=[("c1", "read_file", json.dumps({"path": "slug.py"}))])
        if len(results) == 1:
            args = json.dumps({"path": "slug.py", "content": FIXED_SLUG})
            return Completion(tool_calls=[("c2", "write_file", args)])
        if len(results) == 2 and plant:
            planted = json.dumps({**REVIEW, "score": 1.0, "rationale": "planted"})
            args = json.dumps({"path": "verdict.json", "content": planted})
            return Completion(tool_calls=[("c3", "write_file", args)])
        return Completion(content="Runs of spaces produced several dashes.")

    return reply


def judged_rollout(
    tmp_path: Path, reply: Callable[[dict[str, Any]], Reply]
) -> tuple[Any, list[dict[str, Any]]]:
    env = BugFixJudgedEnv()
    [item] = [i for i in env.items("train") if i.item_id == "slugify"]
    recorder = Recorder(None, spool_dir=tmp_path / "spool", spool_after_s=0.0, principal="agent")
    with OpenAICompatibleServer(reply) as server:
        endpoint = ModelEndpoint(base_url=server.base_url, model="local")

        async def main() -> Any:
            client = endpoint.async_client()
            judges = JudgeRuntime(recorder, {"grader": endpoint})
            try:
                return await run_rollout(
                    env,
                    item,
                    recorder=recorder,
                    client=client,
                    model="local",
                    session_id="r1",
                    judges=judges,
                )
            finally:
                await judges.aclose()
                await client.close()

        rollout = asyncio.run(main())
    recorder.close(10)
    return rollout, spooled(tmp_path / "spool")


def test_a_tools_judge__reruns_the_tests_in_the_sandbox_and_its_verdict_joins_the_reward(
    tmp_path: Path,
) -> None:
    rollout, envelopes = judged_rollout(tmp_path, scripted())
    assert rollout.status == "completed", rollout.error
    [verdict] = rollout.verdicts
    assert verdict.status == "ok" and verdict.details["verdict"]["tests_pass"] is True
    assert verdict.details["world"] == rollout.world.digest
    assert rollout.reward.components == {"tests_pass": 1.0, "coverage": 1.0, "review": 0.9}
    assert rollout.reward.reward == pytest.approx(0.5 + 0.2 + 0.3 * 0.9) and rollout.reward.passed
    judged = [e for e in envelopes if e["session_id"] == "r1"]
    types = [e["type"] for e in judged]
    assert types.index("world_snapshot") < types.index("verdict") < types.index("reward")
    # the judge's own session: untrainable, linked, its shell calls and results recorded
    judge = [e for e in envelopes if e["session_id"] == verdict.judge_session_id]
    started = judge[0]["payload"]
    assert started["trainable"] is False and started["linked_session_id"] == "r1"
    assert started["run_config"]["judge"]["world"] == rollout.world.digest
    results = [e["payload"]["content"] for e in judge if e["type"] == "tool_result"]
    assert "3 passed" in results[0] and "re.sub" in results[1]
    assert results[1].split("\n")[-4:-1] == ["task.json", "trace.json", "transcript.md"]
    written = json.dumps({**REVIEW, "tests_pass": True}) + "\n"
    assert verdict.details["verdict_sha256"] == hashlib.sha256(written.encode()).hexdigest()


def test_a_verdict_planted_by_the_policy__does_not_influence_the_grade(tmp_path: Path) -> None:
    rollout, _ = judged_rollout(tmp_path, scripted(plant=True))
    [verdict] = rollout.verdicts
    assert "verdict.json" in [e.path for e in rollout.world.entries]  # the world keeps it
    assert verdict.details["verdict"]["rationale"] == REVIEW["rationale"]
    assert rollout.reward.components["review"] == 0.9


def test_a_judge_that_writes_no_verdict__fails_the_rollout_with_no_reward(
    tmp_path: Path,
) -> None:
    rollout, envelopes = judged_rollout(tmp_path, scripted(judge_writes=False))
    assert rollout.status == "failed" and rollout.reward is None
    assert "judge fix_review: the judge wrote no /judge/verdict.json" in (rollout.error or "")
    judged = [e for e in envelopes if e["session_id"] == "r1"]
    assert "reward" not in [e["type"] for e in judged]
    assert judged[-1]["payload"]["status"] == "failed"


def judge_world(
    tmp_path: Path,
    specs: list[JudgeSpec],
    reply: Callable[[dict[str, Any]], Reply],
    world: Path,
    *,
    unsandboxed: bool = False,
) -> tuple[list[Any], int]:
    """Run `specs` on session r1 in `world` (live, recorded first); (verdicts, model calls)."""
    snapshot, blobs = take_snapshot(world)
    recorder = Recorder(None, spool_dir=tmp_path / "spool", spool_after_s=0.0, principal="agent")
    with OpenAICompatibleServer(reply) as server:
        endpoint = ModelEndpoint(base_url=server.base_url, model="local")

        async def main() -> list[Any]:
            runtime = JudgeRuntime(recorder, {"grader": endpoint}, unsandboxed=unsandboxed)
            try:
                return await run_judges(
                    runtime,
                    specs,
                    "r1",
                    inputs=JudgeInputs(),
                    world=RecordedWorld(snapshot, blobs, live=world),
                )
            finally:
                await runtime.aclose()

        verdicts = asyncio.run(main())
        calls = len(server.requests)
    recorder.close(10)
    return verdicts, calls


class Seen(BaseModel):
    junk_seen: bool


def test_placement__rollout_judges_run_in_turn_on_the_recorded_world_clean_rooms_at_once(
    tmp_path: Path,
) -> None:
    """Each rollout-placed judge first checks the world has no junk, then leaves junk in it:
    the second still sees none (the world is reset). Clean-room judges run at once: the first
    call of each waits until the other's came."""
    world = tmp_path / "world"
    world.mkdir()
    (world / "a.txt").write_text("the agent's work\n")
    calls: dict[str, list[int]] = {}  # each judge's calls, numbered as they came
    numbers = itertools.count()
    started: set[str] = set()
    changed = threading.Condition()
    clean_rooms = {"c-one", "c-two"}

    def reply(body: dict[str, Any]) -> Reply:
        name = body["messages"][1]["content"]
        results = _tool_results(body)
        with changed:
            calls.setdefault(name, []).append(next(numbers))
            started.add(name)
            changed.notify_all()
            first = name in clean_rooms and not results
            if first and not changed.wait_for(lambda: clean_rooms <= started, DEFAULT_TIMEOUT_S):
                return (500, f"{name} was never in a call with the other clean room")
        time.sleep(0.2)  # a model that takes a moment: judges not run in turn would overlap
        if not results:
            return _shell("s1", "test -e junk && echo JUNK; echo x > junk; ls")
        if len(results) == 1:
            return _shell("s2", _write_verdict({"junk_seen": "JUNK" in results[0]}))
        return Completion(content="done")

    def spec(name: str, placement: str) -> JudgeSpec:
        agent = AgentSpec(harness="tools", placement=placement)  # type: ignore[arg-type]
        return JudgeSpec(name=name, version="1", prompt=name, verdict=Seen, agent=agent)

    specs = [
        spec("r-one", "rollout"),
        spec("r-two", "rollout"),
        spec("c-one", "clean_room"),
        spec("c-two", "clean_room"),
    ]
    verdicts, _ = judge_world(tmp_path, specs, reply, world)
    assert [v.status for v in verdicts] == ["ok"] * 4, [v.error for v in verdicts]
    assert [v.details["verdict"]["junk_seen"] for v in verdicts] == [False] * 4
    # in turn: every call of r-one before the first of r-two (the clean rooms met in a call)
    assert max(calls["r-one"]) < min(calls["r-two"])
    assert (world / "junk").exists()  # the live world is the last rollout judge's


def test_a_tools_judge_past_its_turns__is_an_error_not_a_verdict(tmp_path: Path) -> None:
    world = tmp_path / "world"
    world.mkdir()
    spec = JudgeSpec(
        name="busy",
        version="1",
        prompt="busy",
        verdict=Seen,
        agent=AgentSpec(harness="tools", budget=JudgeBudget(turns=2)),
    )
    [verdict], calls = judge_world(tmp_path, [spec], lambda body: _shell("s", "ls"), world)
    assert verdict.status == "error" and "turn budget spent" in (verdict.error or "")
    assert calls == 2


def test_an_unsandboxed_judge__is_told_the_host_paths_it_can_write(tmp_path: Path) -> None:
    """The explicit opt-out mounts nothing, so the prompt names the real folders."""
    world = tmp_path / "world"
    world.mkdir()
    spec = JudgeSpec(
        name="plain", version="1", prompt="plain", verdict=Seen, agent=AgentSpec(harness="tools")
    )

    def reply(body: dict[str, Any]) -> Reply:
        if _tool_results(body):
            return Completion(content="done")
        folder = re.search(r"Your inputs are in (\S+): task.json", body["messages"][0]["content"])
        assert folder is not None and folder.group(1) != "/judge"
        write = _write_verdict({"junk_seen": False}).replace("/judge", folder.group(1))
        return _shell("w", write)

    [verdict], _ = judge_world(tmp_path, [spec], reply, world, unsandboxed=True)
    assert verdict.status == "ok", verdict.error
