"""Environments: reward shapes, the bug-fix environment's reward (tests under coverage, the
shipped tests restored before scoring), and a rollout recorded with its reward."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rolltape.producers import Recorder
from rolltape.producers.agent import AgentResult
from rolltape.producers.environments import (
    RolloutContext,
    binary,
    composite,
    continuous,
    load_environment,
    run_rollout,
)
from rolltape.producers.environments.bugfix import BugFixEnv
from rolltape.schemas.clients import ModelEndpoint
from tests.support.openai_server import Completion, OpenAICompatibleServer, Reply
from tests.unit.producers.recorded import spooled

FIXED_SLUG = '''import re


def slugify(title: str) -> str:
    """'Hello,  World!' -> 'hello-world'."""
    cleaned = re.sub(r"[^a-z0-9 ]", "", title.lower())
    return "-".join(cleaned.split())
'''
ANSWERED = AgentResult(final="fixed", stop="answered", iterations=2, tool_calls=1, tool_errors=0)


def test_reward_shapes__binary_continuous_and_composite() -> None:
    assert binary(True).reward == 1.0 and binary(False).reward == 0.0
    assert continuous(0.25).passed and not continuous(0.0).passed
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        continuous(1.5)
    mixed = composite({"tests_pass": (0.6, 1.0), "coverage": (0.4, 0.5)}, passed=True)
    assert mixed.reward == pytest.approx(0.8)
    assert mixed.components == {"tests_pass": 1.0, "coverage": 0.5}


def _score(tmp_path: Path, edit: dict[str, str]) -> Any:
    env = BugFixEnv()
    [item] = [i for i in env.items("train") if i.item_id == "slugify"]
    env.setup_workdir(item, tmp_path)
    for name, text in edit.items():
        (tmp_path / name).write_text(text)
    ctx = RolloutContext(item=item, workdir=tmp_path, session=None)  # type: ignore[arg-type]
    return asyncio.run(env.compute_reward(item, ANSWERED, ctx))


def test_bugfix_reward__a_fix_scores_point_six_plus_point_four_times_coverage(
    tmp_path: Path,
) -> None:
    reward = _score(tmp_path, {"slug.py": FIXED_SLUG})
    assert reward.passed and reward.shape == "composite"
    assert reward.components["tests_pass"] == 1.0
    assert reward.components["coverage"] == 1.0
    assert reward.reward == pytest.approx(1.0)
    assert reward.metadata["pytest_exit"] == 0


def test_bugfix_reward__the_unfixed_bug_scores_zero(tmp_path: Path) -> None:
    reward = _score(tmp_path, {})
    assert not reward.passed and reward.reward == 0.0
    assert "test_runs_of_spaces_give_one_dash" in reward.metadata["pytest_output"]


def test_bugfix_reward__editing_the_tests_does_not_pass_them(tmp_path: Path) -> None:
    reward = _score(tmp_path, {"test_slug.py": "def test_nothing():\n    assert True\n"})
    assert not reward.passed and reward.reward == 0.0


def test_bugfix_reward__partial_coverage_lowers_the_reward(tmp_path: Path) -> None:
    uncovered = (
        FIXED_SLUG + "\n\ndef unused(x: int) -> int:\n    if x:\n        return 1\n    return 2\n"
    )
    reward = _score(tmp_path, {"slug.py": uncovered})
    assert reward.passed and 0.0 < reward.components["coverage"] < 1.0
    assert reward.reward == pytest.approx(0.6 + 0.4 * reward.components["coverage"])


def test_bugfix_items__ship_a_train_and_a_test_split() -> None:
    env = load_environment("bugfix")
    assert len(env.items("train")) == 6 and len(env.items("test")) == 2
    first = asyncio.run(env.get_next_item())
    assert first == env.items("train")[0]


@pytest.mark.parametrize(
    "item_id", [i.item_id for s in ("train", "test") for i in BugFixEnv().items(s)]
)
def test_bugfix_items__every_shipped_task_fails_its_tests_until_fixed(
    item_id: str, tmp_path: Path
) -> None:
    env = BugFixEnv()
    item = next(i for s in ("train", "test") for i in env.items(s) if i.item_id == item_id)
    env.setup_workdir(item, tmp_path)
    ctx = RolloutContext(item=item, workdir=tmp_path, session=None)  # type: ignore[arg-type]
    reward = asyncio.run(env.compute_reward(item, ANSWERED, ctx))
    assert not reward.passed and reward.reward == 0.0
    assert reward.metadata["pytest_exit"] == 1, reward.metadata["pytest_output"]


def test_load_environment__an_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown environment 'nope': one of bugfix"):
        load_environment("nope")


def _fixer(body: dict[str, Any]) -> Reply:
    tools = [m for m in body["messages"] if m["role"] == "tool"]
    if not tools:
        return Completion(tool_calls=[("c1", "read_file", json.dumps({"path": "slug.py"}))])
    if len(tools) == 1:
        args = json.dumps({"path": "slug.py", "content": FIXED_SLUG})
        return Completion(tool_calls=[("c2", "write_file", args)])
    return Completion(content="Runs of spaces produced several dashes.")


def _slugify_rollout(tmp_path: Path, model: Callable[[dict[str, Any]], Reply]) -> Any:
    """One rollout of the bug-fix item `slugify` against `model`, spooled under tmp_path (the
    client retries nothing: a failing reply fails the rollout at once)."""
    env = BugFixEnv()
    [item] = [i for i in env.items("train") if i.item_id == "slugify"]
    recorder = Recorder(None, spool_dir=tmp_path / "spool", spool_after_s=0.0, principal="agent")
    with OpenAICompatibleServer(model) as server:
        endpoint = ModelEndpoint(base_url=server.base_url, model="local")

        async def main() -> Any:
            client = endpoint.async_client().with_options(max_retries=0)
            try:
                return await run_rollout(
                    env, item, recorder=recorder, client=client, model="local", session_id="r1"
                )
            finally:
                await client.close()

        rollout = asyncio.run(main())
    recorder.close(10)
    return rollout


def test_run_rollout__records_the_session_with_its_reward_and_outcome(tmp_path: Path) -> None:
    rollout = _slugify_rollout(tmp_path, _fixer)
    assert rollout.status == "completed" and rollout.reward is not None
    assert rollout.reward.reward == pytest.approx(1.0)
    envelopes = spooled(tmp_path / "spool")
    by_type = {e["type"]: e["payload"] for e in envelopes}
    assert [t["name"] for t in by_type["session_started"]["tools"]] == [
        "list_files",
        "read_file",
        "write_file",
    ]
    assert "env=bugfix" in by_type["session_started"]["tags"]
    assert by_type["reward"]["components"] == {"tests_pass": 1.0, "coverage": 1.0}
    assert by_type["session_ended"]["outcome"]["passed"] is True


def _writes_then_fails(body: dict[str, Any]) -> Reply:
    if not any(m["role"] == "tool" for m in body["messages"]):
        args = json.dumps({"path": "slug.py", "content": FIXED_SLUG})
        return Completion(tool_calls=[("c1", "write_file", args)])
    return (500, json.dumps({"error": {"message": "the model server fell over"}}))


def test_run_rollout__a_failed_agent_still_records_the_world_it_left_last(tmp_path: Path) -> None:
    rollout = _slugify_rollout(tmp_path, _writes_then_fails)
    assert rollout.status == "failed" and rollout.reward is None
    envelopes = spooled(tmp_path / "spool")
    worlds = [e["payload"] for e in envelopes if e["type"] == "world_snapshot"]
    # the world it was given, then the one it left: the last one (what a judge reads) holds
    # the agent's edit, not the files it started from
    assert len(worlds) == 2 and worlds[0]["digest"] != worlds[1]["digest"]
    assert rollout.started_from is not None and rollout.world is not None
    assert (rollout.started_from.digest, rollout.world.digest) == (
        worlds[0]["digest"],
        worlds[1]["digest"],
    )
    assert [e["type"] for e in envelopes][-1] == "session_ended"


def test_token_f1__scores_word_overlap_against_the_reference() -> None:
    from rolltape.producers.environments._items_file import token_f1

    assert token_f1("The answer is 42.", "the answer is 42") == 1.0
    assert token_f1("42", "the answer is 42") == pytest.approx(0.4)
    assert token_f1("nothing alike", "the answer is 42") == 0.0


def test_items_file__a_bad_line_is_named_with_its_number(tmp_path: Path) -> None:
    good = {"item_id": "a", "split": "train", "data": {"prompt": "p"}}
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps(good) + "\n" + '{"item_id": "Bad Id"}\n')
    with pytest.raises(ValueError, match=r"items.jsonl:2: not an item"):
        load_environment(f"jsonl:{path}")
    path.write_text(json.dumps(good) + "\n")
    env = load_environment(f"jsonl:{path}")
    assert [i.item_id for i in env.items("train")] == ["a"] and env.format_prompt(
        env.items()[0]
    ) == "p"


def test_prompt_target__names_the_environment_an_instance_is(tmp_path: Path) -> None:
    path = tmp_path / "Nightly PRs.jsonl"
    path.write_text(json.dumps({"item_id": "a", "split": "train", "data": {"prompt": "p"}}) + "\n")
    assert load_environment(f"jsonl:{path}").prompt_target() == "env.jsonl-nightly-prs.system"
    assert load_environment("bugfix").prompt_target() == "env.bugfix.system"
