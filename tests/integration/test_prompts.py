"""`rolltape prompts` on a real broker: versions recorded by hand, their lineage, a diff, and the
champion decided by promotion events in the log."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rolltape.infra.commands.prompts import plan_evolve, prompt_targets
from rolltape.infra.commands.report import write_prompts_report
from rolltape.infra.commands.worker_process import worker_running
from rolltape.infra.kafka.reviews import ReviewWriter
from rolltape.infra.kafka.sessions import read_sessions
from rolltape.producers.prompts import TUNER_INSTRUCTIONS
from rolltape.projections import PromptTarget
from rolltape.schemas import HumanVerdict, PromptDecision, Role, Stream, topic_name
from rolltape.schemas.clients import ModelEndpoint, partitions_of
from tests.integration.conftest import Topics
from tests.integration.workers import WorkerProcess, dead_letters, read_all
from tests.support.bugfix import FIXES
from tests.support.chromium import opened
from tests.support.openai_server import Completion, OpenAICompatibleServer
from tests.support.waiting import wait_until

CLI = [sys.executable, "-m", "rolltape.infra", "prompts"]


def run(
    args: list[str],
    topics: Topics,
    env: dict[str, str] | None = None,
    cli: list[str] = CLI,
) -> subprocess.CompletedProcess[str]:
    env = env or {**topics.env(), "COLUMNS": "200"}
    return subprocess.run([*cli, *args], env=env, capture_output=True, text=True, timeout=600)


def test_prompts__versions_lineage_and_the_champion_come_from_the_log(
    topics: Topics, tmp_path: Path
) -> None:
    first, second = tmp_path / "v0.txt", tmp_path / "v1.txt"
    first.write_text("Act on every fired rule.\n")
    second.write_text("Act on every fired rule.\nFor R2, change the batch size.\n")

    none = run(["champion", "harness.policy"], topics)
    assert none.returncode == 2 and "no prompt target 'harness.policy'" in none.stderr

    added = run(["add", "harness.policy", "--file", str(first), "--promote", "initial"], topics)
    assert added.returncode == 0, added.stderr
    assert "harness.policy v000" in added.stdout and "v000 is the champion" in added.stdout
    edit = ["add", "harness.policy", "--file", str(second), "--technique", "negative_constraint"]
    edited = run([*edit, "--rationale", "R2 was deferred"], topics)
    assert edited.returncode == 0 and "harness.policy v001" in edited.stdout, edited.stderr

    listed = run(["list"], topics)
    assert listed.returncode == 0, listed.stderr
    rows = [line for line in listed.stdout.splitlines() if "v00" in line]
    assert "champion" in rows[0] and "v000" in rows[1] and "negative_constraint" in rows[1]
    assert "champion: v000" in listed.stdout

    diff = run(["diff", "harness.policy", "v000", "v001"], topics)
    assert "+For R2, change the batch size." in diff.stdout, diff.stderr

    promoted = run(
        ["add", "harness.policy", "--file", str(second), "--promote", "fixes the R2 deferrals"],
        topics,
    )
    assert "harness.policy v001" in promoted.stdout, promoted.stderr  # the same text: v001
    champion = run(["champion", "harness.policy"], topics)
    assert "harness.policy: v001" in champion.stdout and "replaced: v000" in champion.stdout
    shown = run(["show", "harness.policy", "v001"], topics)
    assert "parents: v000; technique: negative_constraint" in shown.stdout
    assert "promoted: fixes the R2 deferrals" in shown.stdout
    assert shown.stdout.rstrip().endswith("For R2, change the batch size.")


def sessions_of(topics: Topics) -> set[str]:
    return set(asyncio.run(read_sessions(topics.reader, topics.prefix)))


def _joined(worker: WorkerProcess, topics: Topics) -> None:
    """Wait until the worker is a member of its group (the loop refuses to start before)."""
    wait_until(
        lambda: worker_running(topics.settings),
        what="the worker to join its group",
        every_s=0.5,
        abort=lambda: None if worker.alive() else "the worker exited",
        explain=worker.log,
    )


def _tuner_or_policy(tuner_calls: list[dict[str, Any]]) -> Any:
    """A scripted model behind both logical names. As the tuner (its instructions are the
    system message) it proposes, in turn, a few-shot variant that changes nothing the policy
    does, then a negative constraint the policy obeys. As the policy it defers every rule it is
    asked about (which the judge holds against it) unless its system prompt carries that
    constraint; then it applies the playbook's remedy."""

    def reply(body: dict[str, Any]) -> str:
        system = body["messages"][0]["content"]
        if system.startswith("You are a judge."):  # the reviewer: it reads both prompts
            proposal = body["messages"][1]["content"].split("The proposal:\n<<<\n", 1)[1]
            prefer = "proposal" if ACT in proposal.split("\n>>>", 1)[0] else "champion"
            return json.dumps({"prefer": prefer, "reasons": [f"{prefer} answers the rules"]})
        if system == TUNER_INSTRUCTIONS:
            tuner_calls.append(body)
            brief = body["messages"][1]["content"]
            champion = brief.split("<<<\n", 1)[1].split("\n>>>", 1)[0]
            if len(tuner_calls) == 1:
                return json.dumps(
                    {
                        "technique": "few_shot",
                        "rationale": "show a deferral done right",
                        "prompt": champion + "\nExample: when unsure, explain the deferral.\n",
                    }
                )
            return json.dumps(
                {
                    "technique": "negative_constraint",
                    "rationale": "every violation is a deferral of the rule asked about",
                    "prompt": champion + f"\n{ACT}\n",
                }
            )
        prompt = body["messages"][-1]["content"]
        rule = re.search(r"Act on (R\d)", prompt)
        assert rule is not None
        cited = rule.group(1)
        remedy = {"lr_new": None, "edit_op": "none", "edit_to": "none", "batch_size_new": None,
                  "clip_grad_norm": None}  # fmt: skip
        if ACT not in system:
            decision = {"event_type": "rule_triggered_no_action", "remedy_direction": "none"}
        elif cited == "R5":
            decision = {"event_type": "architecture_change", "remedy_direction": "swap_activation"}
            remedy |= {"edit_op": "swap_activation", "edit_to": "leaky_relu"}
        else:
            lr = float(re.search(r"lr = ([0-9.e-]+)", prompt).group(1))  # type: ignore[union-attr]
            decision = {"event_type": "hyperparameter_change", "remedy_direction": "decrease_lr"}
            remedy |= {"lr_new": lr / 10, "clip_grad_norm": 1.0}
        return json.dumps(
            {**decision, "cites": [cited], "justification": f"on {cited}", "remedy_params": remedy}
        )

    return reply


ACT = "Never answer rule_triggered_no_action for the rule you are asked to act on."


@pytest.mark.timeout(900)
def test_prompt_loop__rejects_a_noise_proposal_promotes_a_better_one_and_carries_it_over(
    topics: Topics, tmp_path: Path
) -> None:
    tuner_calls: list[dict[str, Any]] = []
    worker = WorkerProcess(topics, tmp_path).start()
    _joined(worker, topics)
    try:
        with OpenAICompatibleServer(_tuner_or_policy(tuner_calls)) as server:
            endpoint = {"base_url": server.base_url, "model": "local"}
            env = {**topics.env(), "COLUMNS": "200"}
            env["ROLLTAPE_MODELS"] = json.dumps(
                {"tuner": endpoint, "policy": endpoint, "reviewer": endpoint}
            )
            loop = ["evolve", "harness.policy", "--review-veto", "--learn", "lr_too_high:100"]
            loop += ["--heldout", "dead_relu:0", "--heldout", "dead_relu:1", "--epochs", "6"]
            # the estimate comes first: a budget it exceeds refuses the run before anything runs
            refused = run([*loop, "--rounds", "2", "--budget-calls", "20"], topics, env)
            assert refused.returncode == 2 and "over --budget-calls 20" in refused.stderr
            assert "at most 52 model calls (2 tuner, 2 reviewer" in refused.stderr
            assert not server.requests

            evolved = run([*loop, "--rounds", "2"], topics, env)
            assert evolved.returncode == 0, evolved.stderr
            lines = evolved.stdout
            assert "starting from base" in lines
            assert re.search(r"round 1: few_shot .* keep: the interval", lines), lines
            assert re.search(r"round 2: negative_constraint .* promote: ", lines), lines
            assert "reviewer: prefers the champion: champion answers the rules" in lines
            assert "reviewer: prefers the proposal: proposal answers the rules" in lines
            assert "few_shot 0 win(s), 1 loss(es) · negative_constraint 1 win(s)" in lines
            assert len(tuner_calls) == 2
            # round 2's tuner read the champion's failures and round 1's rejection
            brief = tuner_calls[1]["messages"][1]["content"]
            assert "lr_too_high (seed 100)" in brief and "round 1: few_shot" in brief
            assert "dead_relu" not in brief  # the held-out cases never reach the tuner

            # --resume-from-champion starts from the promoted version
            settings = topics.settings.model_copy(
                update={
                    "models": {
                        "tuner": ModelEndpoint(**endpoint),
                        "policy": ModelEndpoint(**endpoint),
                    }
                }
            )
            history = asyncio.run(prompt_targets(settings))["harness.policy"]
            plan = plan_evolve(
                settings, history, "harness.policy", rounds=1, resume_from_champion=True
            )
            assert history.champion is not None and plan.start == history.champion.version
            assert ACT in plan.start.content and plan.start_label == history.champion.label
            # starting from the prompt as shipped again must be asked for: a win would replace
            # a champion it was never measured against
            guarded = run(["evolve", "harness.policy", "--rounds", "1"], topics, env)
            assert guarded.returncode == 2
            assert "pass --resume-from-champion to start from it, or --from-base" in guarded.stderr

            # the harness's llm policy uses the champion unless told a version
            before = len(server.requests)
            harness = run(
                [
                    "harness",
                    "run",
                    "--policy",
                    "llm",
                    "--scenario",
                    "dead_relu",
                    "--attempts",
                    "1",
                    "--epochs",
                    "4",
                ],
                topics,
                env,
                cli=[sys.executable, "-m", "rolltape.infra"],
            )
            assert harness.returncode == 0, harness.stderr
            assert f"policy prompt: harness.policy {history.champion.label}" in harness.stdout
            used = server.requests[before:]
            assert used and all(ACT in r["messages"][0]["content"] for r in used)
    finally:
        worker.stop()

    # every decision is explainable from the events alone: recomputed from its recorded pairs,
    # whose scores are the worker's verdicts on the sessions they name
    (decided_1, decided_2) = history.decisions
    records = read_all(topics)
    verdicts = {
        e["session_id"]: e["payload"]
        for e in (json.loads(r.value) for r in records if r.stream == Stream.VERDICTS)
        if e["type"] == "verdict" and e["payload"]["judge"] == "training_audit"
    }
    for decided in history.decisions:
        d = decided.decision
        promoted, reason, figures = d.rule.judge(d.pairs, d.review)
        assert (promoted, reason, figures) == (d.promoted, d.reason, d.figures)
        for pair in d.pairs:
            for sid, score in (
                (pair.champion_session, pair.champion_score),
                (pair.proposal_session, pair.proposal_score),
            ):
                assert verdicts[sid]["scores"]["process_score"] == score
    first, second = decided_1.decision, decided_2.decision
    assert not first.promoted and second.promoted
    assert second.rule.review_veto and second.review is not None
    assert second.review.details["verdict"]["prefer"] == "proposal"
    review_session = second.review.judge_session_id
    assert review_session is not None and review_session in sessions_of(topics)
    assert first.champion == second.champion  # round 1 kept the base
    assert all(p.proposal_score > p.champion_score for p in second.pairs)  # type: ignore[operator]
    promotion = history.promotions[-1].promotion
    assert promotion.version == second.proposal and promotion.replaces == second.champion
    assert promotion.rule is not None and "paired bootstrap" in promotion.rule
    # the proposals carry their lineage, technique and rationale
    proposal = history.by_digest()[second.proposal].version
    assert proposal.parents == (second.champion,) and proposal.technique == "negative_constraint"
    # the test runs are ordinary sessions tagged with the loop, round, version and role
    sessions = asyncio.run(read_sessions(topics.reader, topics.prefix))
    start = next(
        e for e in sessions[second.pairs[0].proposal_session] if e.type == "session_started"
    )
    config = start.payload["run_config"]
    assert config["prompt_loop"] == second.loop and config["prompt_round"] == 2
    assert config["prompt_version"] == second.proposal and config["prompt_role"] == "proposal"
    assert "prompt_loop" in start.payload["tags"]
    assert not dead_letters(records)

    # a round re-judged from a replay's verdicts: the same judge code gives the same decisions
    replayed = run(
        ["log", "replay", "--judge-version", "v2"],
        topics,
        cli=[sys.executable, "-m", "rolltape.infra"],
    )
    assert replayed.returncode == 0, replayed.stderr
    live = run(["rejudge", "harness.policy", "--judge-version", "live"], topics)
    assert live.returncode == 2 and "judged on the 'live' verdicts already" in live.stderr
    rejudged = run(["rejudge", "harness.policy", "--judge-version", "v2", "--record"], topics)
    assert rejudged.returncode == 0, rejudged.stderr
    assert "2 round(s) re-judged under v2: 0 outcome(s) changed; recorded" in rejudged.stdout
    again = asyncio.run(prompt_targets(topics.settings))["harness.policy"]
    assert [d.decision.judge_version for d in again.rejudged] == ["v2", "v2"]
    for live, replay in zip(history.decisions, again.rejudged, strict=True):
        assert replay.decision.pairs == live.decision.pairs
        assert replay.decision.figures == live.decision.figures
    assert again.champion == history.champion and again.scoreboard() == history.scoreboard()

    # the report shows the lineage, the scoreboard and each round's per-case results
    drawn = _report_in_chromium(history, tmp_path)
    assert drawn["errors"] == []
    assert drawn["charts"] == 3  # the scoreboard, and one paired chart per round
    assert drawn["bars"] >= 2 + 2 * 2 * 2  # tallies, then champion and proposal per pair
    assert [row.split("\t") for row in drawn["scoreboard"][1:]] == [
        ["few_shot", "0", "1"],
        ["negative_constraint", "1", "0"],
    ]
    assert any("champion" in row and "negative_constraint" in row for row in drawn["lineage"])
    assert [h.split(":")[0] for h in drawn["rounds"]] == ["round 1", "round 2"]


def _report_in_chromium(history: PromptTarget, tmp_path: Path) -> dict[str, Any]:
    """The prompt target's page written twice (byte-identical) and opened in headless Chromium:
    what it drew, and any error the page raised."""
    path = write_prompts_report(history, tmp_path / "prompts.html")
    again = write_prompts_report(history, tmp_path / "again.html")
    assert again.read_bytes() == path.read_bytes()  # deterministic
    with opened(path) as (page, errors):
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 3")
        drawn = page.evaluate(
            """() => ({
                charts: document.querySelectorAll('.js-plotly-plot').length,
                bars: document.querySelectorAll('.barlayer .point').length,
                scoreboard: [...document.querySelectorAll('#scoreboard tr')].map(r => r.innerText),
                lineage: [...document.querySelectorAll('#lineage tr')].map(r => r.innerText),
                rounds: [...document.querySelectorAll('h3[id^=round-]')].map(h => h.innerText),
            })"""
        )
    return {**drawn, "errors": errors}


FIX = "Always write the corrected module before you answer."


def _tuner_or_agent(tuner_calls: list[dict[str, Any]], agent_systems: list[str]) -> Any:
    """As the tuner: a few-shot variant the agent ignores, then an instruction it obeys. As the
    bug-fixing agent: without that instruction it answers at once (the tests still fail); with
    it, it reads the module and writes the fix."""

    def reply(body: dict[str, Any]) -> Any:
        system = body["messages"][0]["content"]
        if system == TUNER_INSTRUCTIONS:
            tuner_calls.append(body)
            brief = body["messages"][1]["content"]
            champion = brief.split("<<<\n", 1)[1].split("\n>>>", 1)[0]
            technique, addition = (
                ("few_shot", "Example: read the tests first.")
                if len(tuner_calls) == 1
                else ("negative_constraint", FIX)
            )
            return json.dumps(
                {
                    "technique": technique,
                    "rationale": "the tests still fail",
                    "prompt": f"{champion}\n{addition}",
                }
            )
        agent_systems.append(system)
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
        module = next((name for name in FIXES if name in prompt), None)
        done = [m for m in body["messages"] if m["role"] == "tool"]
        if FIX not in system or module is None or len(done) >= 2:
            return Completion(content="Done.")
        if not done:
            return Completion(tool_calls=[("c1", "read_file", json.dumps({"path": module}))])
        args = json.dumps({"path": module, "content": FIXES[module]})
        return Completion(tool_calls=[("c2", "write_file", args)])

    return reply


@pytest.mark.timeout(900)
def test_prompt_loop__evolves_an_environments_system_prompt_on_its_held_out_items(
    topics: Topics, tmp_path: Path
) -> None:
    tuner_calls: list[dict[str, Any]] = []
    systems: list[str] = []
    rewards = {"ROLLTAPE_REWARDS": '["final_reward"]'}
    worker = WorkerProcess(topics, tmp_path, **rewards).start()
    _joined(worker, topics)
    try:
        with OpenAICompatibleServer(_tuner_or_agent(tuner_calls, systems)) as server:
            endpoint = {"base_url": server.base_url, "model": "local"}
            env = {**topics.env(), "COLUMNS": "200", **rewards}
            env["ROLLTAPE_MODELS"] = json.dumps({"tuner": endpoint, "agent": endpoint})
            loop = ["evolve", "env.bugfix.system", "--rounds", "2", "--learn", "fizzbuzz"]
            loop += ["--heldout", "flatten", "--heldout", "merge_intervals"]
            evolved = run(loop, topics, env)
            assert evolved.returncode == 0, evolved.stderr
            assert re.search(r"round 1: few_shot .* keep: the interval", evolved.stdout)
            assert re.search(r"round 2: negative_constraint .* promote: ", evolved.stdout)
            assert "pass rate 0.00 -> 1.00" in evolved.stdout
            # the tuner learned from the train item's failure, never from a test item
            brief = tuner_calls[0]["messages"][1]["content"]
            assert "fizzbuzz (seed 0): reward 0.0 below 0.6" in brief
            assert "flatten" not in brief and "merge_intervals" not in brief

            # the environment's commands use the champion unless told otherwise
            before = len(systems)
            evaluated = run(
                ["env", "evaluate", "bugfix", "--split", "test", "--model", "agent"],
                topics,
                env,
                cli=[sys.executable, "-m", "rolltape.infra"],
            )
            assert evaluated.returncode == 0, evaluated.stderr
            assert "system prompt: env.bugfix.system v002" in evaluated.stderr
            assert systems[before:] and all(FIX in s for s in systems[before:])
    finally:
        worker.stop()
    history = asyncio.run(prompt_targets(topics.settings))["env.bugfix.system"]
    first, second = (d.decision for d in history.decisions)
    assert not first.promoted and second.promoted
    assert second.scoring.judge == "reward:final_reward" and second.scoring.threshold == 0.6
    assert all(p.proposal_passed and not p.champion_passed for p in second.pairs)
    for decision in (first, second):
        assert decision.rule.judge(decision.pairs) == (
            decision.promoted,
            decision.reason,
            decision.figures,
        )

    # Reviewers who find the promoted prompt's fixes worse overrule the reward: round 2 decided
    # by people keeps the champion (recorded apart: the champion stays as the loop left it).
    unreviewed = run(["rejudge", "env.bugfix.system", "--judge-version", "human"], topics)
    assert unreviewed.returncode == 2 and "no reviewer has judged" in unreviewed.stderr
    asyncio.run(_review_against_the_proposal(topics, second))
    overruled = run(
        ["rejudge", "env.bugfix.system", "--judge-version", "human", "--round", "2", "--record"],
        topics,
    )
    assert overruled.returncode == 0, overruled.stderr
    assert "CHANGED" in overruled.stdout
    assert "1 round(s) re-judged under human: 1 outcome(s) changed; recorded" in overruled.stdout
    again = asyncio.run(prompt_targets(topics.settings))["env.bugfix.system"]
    [by_people] = (d.decision for d in again.rejudged)
    assert by_people.judge_version == "human" and not by_people.promoted
    assert all(p.champion_passed and not p.proposal_passed for p in by_people.pairs)
    assert again.champion == history.champion


async def _review_against_the_proposal(topics: Topics, decision: PromptDecision) -> None:
    """A reviewer passes the champion's runs of the round and fails the proposal's."""
    connection = topics.connection(Role.REVIEWER)
    topic = topic_name(Stream.VERDICTS, topics.prefix)
    partitions = len(await partitions_of(connection, [topic]))
    reviewer = connection.principal
    assert reviewer is not None
    async with ReviewWriter(connection, topics.prefix, partitions=partitions) as writer:
        for pair in decision.pairs:
            assert pair.champion_session is not None and pair.proposal_session is not None
            passed = HumanVerdict(reviewer=reviewer, verdict="pass", score=0.9)
            await writer.verdict(pair.champion_session, passed)
            failed = HumanVerdict(reviewer=reviewer, verdict="fail", labels=("wrong_fix",))
            await writer.verdict(pair.proposal_session, failed)
