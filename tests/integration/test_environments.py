"""`rolltape env evaluate` on a real broker with a local OpenAI-compatible model: every item of
the split is a recorded session with its reward, and the evaluation is an event naming them."""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rolltape.infra.kafka.blobs import restore_world
from rolltape.infra.kafka.readback import read_records
from rolltape.producers import take_snapshot
from rolltape.schemas import Evaluation, Role, Stream, WorldSnapshotEvent, read_event
from rolltape.schemas.clients import ModelEndpoint
from tests.integration.conftest import Topics
from tests.integration.workers import WorkerProcess, payloads, read_all, wait_for
from tests.support.bugfix import FIXES
from tests.support.openai_server import Completion, OpenAICompatibleServer, Reply
from tests.support.waiting import DEFAULT_TIMEOUT_S, wait_until

CLI = [sys.executable, "-m", "rolltape.infra"]

SOLUTIONS = {
    "nested.py": FIXES["nested.py"],
    # A wrong fix: still does not sort, so the test split has one pass and one failure.
    "intervals.py": "def merge(intervals):\n    return list(intervals)\n",
}


def _model(body: dict[str, Any]) -> Reply:
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    module = next(name for name in SOLUTIONS if name in prompt)
    done = [m for m in body["messages"] if m["role"] == "tool"]
    if not done:
        return Completion(
            reasoning_content="Read the module first.",
            tool_calls=[("c1", "read_file", json.dumps({"path": module}))],
        )
    if len(done) == 1:
        args = json.dumps({"path": module, "content": SOLUTIONS[module]})
        return Completion(tool_calls=[("c2", "write_file", args)])
    return Completion(content=f"Fixed {module}.", reasoning_content="The tests should pass now.")


def _events(topics: Topics) -> list[Any]:
    async def main() -> list[Any]:
        return [
            read_event(r.value)
            async for r in read_records(topics.reader, [Stream.EVENTS], prefix=topics.prefix)
        ]

    return asyncio.run(main())


def test_env_evaluate__records_each_rollout_with_its_world_reward_and_the_evaluation(
    topics: Topics, tmp_path: Path
) -> None:
    with OpenAICompatibleServer(_model) as server:
        models = {"agent": ModelEndpoint(base_url=server.base_url, model="local").to_config()}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "rolltape.infra",
                "env",
                "evaluate",
                "bugfix",
                "--split",
                "test",
            ],
            env={**topics.env(), "ROLLTAPE_MODELS": json.dumps(models), "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr
    assert "2 items, 2 scored: mean reward 0.500, passed 1 (50%)" in done.stdout
    envelopes = _events(topics)
    [evaluation_event] = [e for e in envelopes if e.type == "evaluation"]
    evaluation = Evaluation.model_validate(evaluation_event.payload)
    assert (evaluation.environment, evaluation.split, evaluation.items) == ("bugfix", "test", 2)
    rewards = {r.item_id: r.reward for r in evaluation.rollouts}
    assert rewards == {"flatten": 1.0, "merge_intervals": 0.0}
    for rollout in evaluation.rollouts:
        recorded = [e for e in envelopes if e.session_id == rollout.session_id]
        types = [e.type for e in recorded]
        assert types[0] == "session_started" and types[-1] == "session_ended"
        assert types.count("tool_result") == 2 and types.count("reward") == 1
        [reward] = [e.payload for e in recorded if e.type == "reward"]
        assert reward["value"] == rollout.reward and reward["source"] == "env:bugfix"
        # The world the environment set up, recorded before the agent's first call, and the
        # world the agent left, before the reward: restored from the log by the judge's
        # principal, the second holds the agent's fix and not the scorer's files.
        assert types.index("world_snapshot") < types.index("turn")
        assert len(types) - 1 - types[::-1].index("world_snapshot") < types.index("reward")
        [given, world] = [e.body for e in recorded if isinstance(e, WorldSnapshotEvent)]
        assert given.digest != world.digest
        assert {e.path for e in given.entries} <= {e.path for e in world.entries}
        dest = tmp_path / rollout.item_id
        asyncio.run(restore_world(topics.connection(Role.JUDGE), world, dest, prefix=topics.prefix))
        module = next(m for m in SOLUTIONS if (dest / m).exists())
        assert (dest / module).read_text() == SOLUTIONS[module]
        assert not (dest / "pytest.ini").exists() and not (dest / ".coverage").exists()
        assert take_snapshot(dest)[0].digest == world.digest
    for chain in topics.verify().reports():
        assert not chain.breaks, chain


def _slow_model(body: dict[str, Any]) -> Reply:
    """Looks at the files once, then gives up: a rollout of a few hundred milliseconds."""
    time.sleep(0.3)
    return _give_up(body)


def _give_up(body: dict[str, Any]) -> Reply:
    if not any(m["role"] == "tool" for m in body["messages"]):
        return Completion(tool_calls=[("c1", "list_files", "{}")])
    return Completion(content="I could not find the bug.")


class _HeldModel:
    """`_give_up` at full speed until `finished` rollouts got their last reply; from then on
    every call waits for `release()`. A batch killed meanwhile has exactly those rollouts
    finished and the rest cut short, however fast or loaded the machine."""

    def __init__(self, finished: int) -> None:
        self.finished = finished
        self.given = 0
        self._lock = threading.Lock()
        self._released = threading.Event()

    def __call__(self, body: dict[str, Any]) -> Reply:
        last = any(m["role"] == "tool" for m in body["messages"])
        with self._lock:
            held = self.given >= self.finished and not self._released.is_set()
            if last and not held:
                self.given += 1
        if held and not self._released.wait(DEFAULT_TIMEOUT_S):
            return (503, "the test never released the model")
        return _give_up(body)

    def release(self) -> None:
        self._released.set()


def _batch(topics: Topics, models: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rolltape.infra",
            "env",
            "run",
            "bugfix",
            "--items",
            "8",
            "--concurrency",
            "2",
            "--run",
            "killed",
            *extra,
        ],
        env={**topics.env(), "ROLLTAPE_MODELS": models, "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_batch_run__killed_midway_and_resumed_finishes_every_item_exactly_once(
    topics: Topics,
) -> None:
    model = _HeldModel(finished=3)
    with OpenAICompatibleServer(model) as server:
        models = json.dumps(
            {"agent": ModelEndpoint(base_url=server.base_url, model="local").to_config()}
        )
        first = _batch(topics, models)
        try:
            ended = wait_until(
                lambda: [e for e in _events(topics) if e.type == "session_ended"],
                lambda ended: len(ended) >= 3,
                what="three rollouts of the batch to end",
                every_s=0.2,
                abort=lambda: None if first.poll() is None else "the batch exited",
                describe=lambda ended: f"{len(ended)} ended",
            )
        finally:
            first.send_signal(signal.SIGKILL)
            first.communicate(timeout=30)
            model.release()  # the calls held meanwhile answer a batch that is gone
        assert 3 <= len(ended) < 8, "the batch finished before it could be killed"
        second = _batch(topics, models)
        out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    envelopes = _events(topics)
    completed = Counter(
        e.session_id.rsplit(".", 1)[0]
        for e in envelopes
        if e.type == "session_ended" and e.payload["status"] == "completed"
    )
    assert len(completed) == 8 and set(completed.values()) == {1}, completed
    assert "8 planned" in out and "finished before" in out
    before = int(out.split(" finished before")[0].rsplit(" ", 1)[1])
    assert before >= 3
    assert "list_files" in out  # the per-tool statistics
    assert "filter outcomes: 0 accepted, 0 rejected, 8 undecided" in out
    # A rollout cut short by the kill stays in the log unended; its slot ran as attempt 2.
    started = {e.session_id for e in envelopes if e.type == "session_started"}
    retried = {s for s in started if s.endswith(".2")}
    assert {s.rsplit(".", 1)[0] for s in retried} <= set(completed)
    for chain in topics.verify().reports():
        assert not chain.breaks, chain


def test_env_process__runs_waits_for_the_judges_and_exports_the_batch(
    topics: Topics, tmp_path: Path
) -> None:
    worker = WorkerProcess(topics, tmp_path).start()
    try:
        with OpenAICompatibleServer(_slow_model) as server:
            models = json.dumps(
                {"agent": ModelEndpoint(base_url=server.base_url, model="local").to_config()}
            )
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "rolltape.infra",
                    "env",
                    "process",
                    "bugfix",
                    "--items",
                    "3",
                    "-o",
                    str(tmp_path / "out"),
                    "--run",
                    "proc",
                ],
                env={**topics.env(), "ROLLTAPE_MODELS": models, "COLUMNS": "200"},
                capture_output=True,
                text=True,
                timeout=300,
            )
    finally:
        worker.stop()
    assert done.returncode == 0, done.stderr
    assert "filter outcomes: 3 accepted, 0 rejected, 0 undecided" in done.stdout
    assert "exported 3 line(s)" in done.stdout
    manifest = json.loads((tmp_path / "out" / ".rolltape" / "manifest.json").read_text())
    assert manifest["lines"] == 3
    lines = (tmp_path / "out" / "sharegpt-00000.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [row["conversations"][1]["from"] for row in rows] == ["human"] * 3


def _mixed_model() -> Callable[[dict[str, Any]], Reply]:
    """Fixes the bug in every other conversation (told apart by the call ids it hands out), so
    each group of two has different rewards (Atropos drops groups whose scores are all equal)."""
    started = itertools.count()

    def reply(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        prompt = next(m["content"] for m in messages if m["role"] == "user")
        module = next(
            name
            for name in ("slug.py", "search.py", "fizz.py", "stats.py", "roman.py", "words.py")
            if name in prompt
        )
        tools = [m for m in messages if m["role"] == "tool"]
        if not tools:
            n = next(started)
            return Completion(tool_calls=[(f"c{n}", "read_file", json.dumps({"path": module}))])
        n = int(tools[0]["tool_call_id"][1:])
        if len(tools) == 1 and n % 2 == 0 and module in FIXES:
            args = json.dumps({"path": module, "content": FIXES[module]})
            return Completion(tool_calls=[(f"w{n}", "write_file", args)])
        return Completion(content="done")

    return reply


FIXES = {
    "search.py": (
        "def find(items, target):\n"
        "    low, high = 0, len(items) - 1\n"
        "    while low <= high:\n"
        "        mid = (low + high) // 2\n"
        "        if items[mid] == target:\n"
        "            return mid\n"
        "        if items[mid] < target:\n"
        "            low = mid + 1\n"
        "        else:\n"
        "            high = mid - 1\n"
        "    return -1\n"
    ),
    "fizz.py": (
        "def fizzbuzz(n):\n"
        "    if n % 15 == 0:\n"
        "        return 'FizzBuzz'\n"
        "    if n % 3 == 0:\n"
        "        return 'Fizz'\n"
        "    if n % 5 == 0:\n"
        "        return 'Buzz'\n"
        "    return str(n)\n"
    ),
}


def test_env_serve__delivers_judged_groups_that_the_trainer_gets_from_batch(
    topics: Topics, tmp_path: Path
) -> None:
    from tests.support.atropos_server import AtroposServer
    from tests.support.tokenizer import build_chat_tokenizer

    tokenizer = build_chat_tokenizer(tmp_path / "tok")
    worker = WorkerProcess(topics, tmp_path).start()
    try:
        with AtroposServer() as atropos, OpenAICompatibleServer(_mixed_model()) as model:
            atropos.register_trainer(batch_size=4)
            assert atropos.batch() is None or atropos.batch() == []  # the trainer starts
            models = json.dumps(
                {"agent": ModelEndpoint(base_url=model.base_url, model="local").to_config()}
            )
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "rolltape.infra",
                    "serve",
                    "env",
                    "bugfix",
                    "--url",
                    atropos.url,
                    "--group-size",
                    "2",
                    "--groups",
                    "2",
                    "--tokenizer",
                    str(tokenizer),
                    "--run",
                    "srv",
                ],
                env={**topics.env(), "ROLLTAPE_MODELS": models, "COLUMNS": "200"},
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, done.stderr
            batch = atropos.batch()
    finally:
        worker.stop()
    assert "served 2 group(s) (4 rollouts); sent 2 group(s)" in done.stdout, done.stdout
    assert isinstance(batch, list) and len(batch) == 2
    for group in batch:
        low, high = sorted(group["scores"])
        assert low == 0.0 and high >= 0.6  # one sample fixed the bug, one did not
        assert len(group["tokens"]) == 2 and all(group["tokens"])


REVIEW = {
    "tests_pass": True,
    "fixes_bug": True,
    "tests_weakened": False,
    "score": 0.8,
    "rationale": "flatten now recurses into nested lists.",
}


def _judged_model(body: dict[str, Any]) -> Reply:
    """The policy of `_model`; the judge re-runs the tests in the sandbox, reads the module and
    writes its verdict file."""
    messages = body["messages"]
    results = [m["content"] for m in messages if m["role"] == "tool"]
    if not messages[0]["content"].startswith("You are a judge"):
        if len(results) == 2 and "nested.py" in messages[1]["content"]:
            # the policy plants a glowing verdict in its workdir: it must change nothing
            planted = json.dumps({**REVIEW, "score": 1.0, "rationale": "planted"})
            args = json.dumps({"path": "verdict.json", "content": planted})
            return Completion(tool_calls=[("plant", "write_file", args)])
        return _model(body)
    commands = ["python -m pytest -q -p no:cacheprovider", "cat nested.py"]
    if len(results) < len(commands):
        n = len(results)
        return Completion(tool_calls=[(f"j{n}", "shell", json.dumps({"command": commands[n]}))])
    if len(results) == len(commands):
        verdict = {**REVIEW, "tests_pass": " passed" in results[0]}
        write = f"cat > /judge/verdict.json <<'EOF'\n{json.dumps(verdict)}\nEOF"
        return Completion(tool_calls=[("jw", "shell", json.dumps({"command": write}))])
    return Completion(content="Reviewed.")


def test_env_evaluate__a_tools_judge_reviews_the_passing_fix_and_replay_rejudges_its_world(
    topics: Topics, tmp_path: Path
) -> None:
    """bugfix-judged on a real broker and worker: the passing rollout's judge re-runs pytest in
    bubblewrap and writes its verdict; the failing one is settled by its tests (no judge). The
    worker takes the world, verdict and judge sessions without a dead letter. A replay restores
    the world from the log and re-runs the judge there: the same verdict, under the version's
    own chain; a second replay of the version asks nothing; another version writes beside it."""
    worker = WorkerProcess(topics, tmp_path).start()
    with OpenAICompatibleServer(_judged_model) as server:
        endpoint = ModelEndpoint(base_url=server.base_url, model="local").to_config()
        models = json.dumps({"agent": endpoint, "grader": endpoint})
        try:
            done = subprocess.run(
                [*CLI, "env", "evaluate", "bugfix-judged", "--split", "test"],
                env={**topics.env(), "ROLLTAPE_MODELS": models, "COLUMNS": "200"},
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, done.stderr
            envelopes = _events(topics)
            [evaluation] = [e for e in envelopes if e.type == "evaluation"]
            rollouts = Evaluation.model_validate(evaluation.payload).rollouts
            rewards = {r.item_id: r for r in rollouts}
            assert rewards["merge_intervals"].reward == 0.0
            fixed = rewards["flatten"].session_id
            [verdict] = [e.payload for e in envelopes if e.type == "verdict"]
            [_given, world] = [  # the judge reads the world the agent left
                e.body
                for e in envelopes
                if isinstance(e, WorldSnapshotEvent) and e.session_id == fixed
            ]
            assert verdict["status"] == "ok" and verdict["details"]["verdict"]["tests_pass"]
            assert verdict["details"]["world"] == world.digest
            assert "verdict.json" in {e.path for e in world.entries}  # planted, and recorded
            assert verdict["details"]["verdict"]["rationale"] == REVIEW["rationale"]
            [reward] = [
                e.payload for e in envelopes if e.type == "reward" and e.session_id == fixed
            ]
            assert (
                reward["components"]["review"] == 0.8
                and rewards["flatten"].reward == reward["value"]
            )
            judge = [e for e in envelopes if e.session_id == verdict["judge_session_id"]]
            results = [e.payload["content"] for e in judge if e.type == "tool_result"]
            assert " passed" in results[0] and "def flatten" in results[1]
            assert judge[0].payload["trainable"] is False
            assert judge[0].payload["linked_session_id"] == fixed
            # the worker decides every session (the two rollouts, the judge's): none dead-lettered
            records = wait_for(
                topics, lambda rs: len(payloads(rs, "filter_outcome")) >= 3, worker=worker
            )
        finally:
            worker.stop()
        assert [r for r in records if r.stream == Stream.DEADLETTER] == []

        judged = {**topics.env(), "ROLLTAPE_MODELS": models, "COLUMNS": "200"}
        judged["ROLLTAPE_LLM_JUDGES"] = '["fix_review"]'
        replays = []
        for version in ("v1", "v1", "v2"):
            replay = subprocess.run(
                [*CLI, "log", "replay", "--judge-version", version],
                env=judged,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert replay.returncode == 0, replay.stdout + replay.stderr
            replays.append(replay.stdout)
    assert "LLM verdicts: 0 held (not asked again), 1 asked" in replays[0]
    assert "LLM verdicts: 1 held (not asked again), 0 asked" in replays[1]
    assert "LLM verdicts: 0 held (not asked again), 1 asked" in replays[2]
    rejudged = {
        r.stream: r.payload
        for r in (read_event(x.value) for x in read_all(topics, (Stream.VERDICTS,)))
        if r.session_id == fixed and r.type == "verdict" and r.payload["judge"] == "llm:fix_review"
    }
    assert set(rejudged) == {"verdicts@v1", "verdicts@v2"}
    for again in rejudged.values():
        # the same verdict file, world, spec and model; only the judge's own session differs
        assert again["judge_session_id"] != verdict["judge_session_id"]
        assert {**again, "judge_session_id": None} == {**verdict, "judge_session_id": None}
    for chain in topics.verify().reports():
        assert not chain.breaks, chain
