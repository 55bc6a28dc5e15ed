"""Monitored training with a real broker, a real worker and real torch: scenarios fire their
rules from real hooks, the harness acts on the firings it reads back, self-refine attempts carry
the verdict forward (LLM policy over real HTTP), the judge's model gates, and the report drawn in
a real headless Chromium."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from rolltape.infra.commands.report import write_report
from rolltape.infra.kafka.sessions import read_sessions
from rolltape.producers import Recorder
from rolltape.producers.training import (
    SCENARIOS,
    ArchitectureSpec,
    DigitsData,
    Harness,
    HarnessConfig,
    LLMPolicy,
    LogFollower,
    ScriptedPolicy,
    TrainingMonitor,
    build_model,
    rules_and_verdicts_follower,
)
from rolltape.schemas import Role, RulesetEvaluation, Stream, read_event
from rolltape.schemas.clients import ModelEndpoint
from tests.integration.conftest import Topics
from tests.integration.workers import WorkerProcess, dead_letters, payloads, read_all, wait_for
from tests.support.chromium import opened
from tests.support.openai_server import OpenAICompatibleServer


@dataclass
class Rig:
    topics: Topics
    agent: Recorder
    monitor: Recorder
    follower: LogFollower
    worker: WorkerProcess

    def harness(self, policy: Any = None, **config: Any) -> Harness:
        return Harness(
            agent=self.agent,
            monitor_recorder=self.monitor,
            follower=self.follower,
            policy=policy or ScriptedPolicy(),
            config=HarnessConfig(**config),
        )


@pytest.fixture
def rig(topics: Topics, tmp_path: Path) -> Iterator[Rig]:
    worker = WorkerProcess(topics, tmp_path).start()
    agent = Recorder(
        topics.connection(Role.AGENT), topic_prefix=topics.prefix, spool_dir=tmp_path / "a"
    )
    monitor = Recorder(
        topics.connection(Role.MONITOR), topic_prefix=topics.prefix, spool_dir=tmp_path / "m"
    )
    follower = rules_and_verdicts_follower(topics.connection(Role.MONITOR), topics.prefix)
    try:
        yield Rig(topics, agent, monitor, follower, worker)
    finally:
        follower.close()
        agent.close()
        monitor.close()
        worker.stop()


def test_scenarios__each_fires_its_expected_rules_from_real_hooks(rig: Rig) -> None:
    harness = rig.harness(firing_timeout_s=120)
    fired: dict[str, set[str]] = {}
    for name, scenario in SCENARIOS.items():
        result = harness.run_attempt(scenario)
        evaluations = [
            e["payload"]
            for e in rig.follower.seen(result.session_id)
            if e["type"] == "rule_evaluation"
        ]
        assert len(evaluations) == result.epochs_run, name
        fired[name] = {r for e in evaluations for r in e["fired"]}
        assert set(scenario.expected) <= fired[name], (name, fired[name])
        # the harness answered what fired, and recorded nothing it did not apply
        assert result.verdict.judge == "training_audit"
        assert result.decisions >= 1 if fired[name] else result.decisions == 0, name
        assert result.verdict.details["architecture_replay"]["result"] == "match", name
        # the playbook's remedies are defensible answers to the rules they cite
        codes = {v.code for v in result.verdict.violations}
        assert not codes & {"indefensible_decision", "spurious_citation"}, (name, codes)
    # the worker judges the reference task by its calibrated rule set: a healthy run is quiet
    assert fired["baseline"] == set()


def _answer(body: dict[str, Any]) -> str:
    """A scripted policy model: without feedback it defers whatever it is asked about (which the
    judge holds against it); once the system prompt carries feedback, it applies the playbook's
    remedy for R5 and R2 and defers nothing."""
    prompt = body["messages"][-1]["content"]
    rule = re.search(r"Act on (R\d)", prompt)
    assert rule is not None
    cited = rule.group(1)
    learned = any("Feedback from your earlier attempts" in m["content"] for m in body["messages"])
    remedy = {"lr_new": None, "edit_op": "none", "edit_to": "none", "batch_size_new": None,
              "clip_grad_norm": None}  # fmt: skip
    if not learned:
        decision = {"event_type": "rule_triggered_no_action", "remedy_direction": "none"}
    elif cited == "R5":
        decision = {"event_type": "architecture_change", "remedy_direction": "swap_activation"}
        remedy |= {"edit_op": "swap_activation", "edit_to": "leaky_relu"}
    elif cited == "R2":
        batch = int(re.search(r"batch_size = (\d+)", prompt).group(1))  # type: ignore[union-attr]
        decision = {
            "event_type": "hyperparameter_change",
            "remedy_direction": "increase_batch_size",
        }
        remedy |= {"batch_size_new": batch * 2}
    else:
        lr = float(re.search(r"lr = ([0-9.e-]+)", prompt).group(1))  # type: ignore[union-attr]
        decision = {"event_type": "hyperparameter_change", "remedy_direction": "decrease_lr"}
        remedy |= {"lr_new": lr / 3}
    return json.dumps(
        {
            **decision,
            "cites": [cited],
            "justification": f"acting on {cited}",
            "remedy_params": remedy,
        }
    )


def test_self_refine__attempt_two_sees_attempt_ones_violations_through_the_llm_policy(
    rig: Rig, tmp_path: Path
) -> None:
    with OpenAICompatibleServer(_answer) as server:
        policy = LLMPolicy(ModelEndpoint(base_url=server.base_url, model="local-policy"), rig.agent)
        result = rig.harness(policy).self_refine(SCENARIOS["dead_relu"], attempts=2)
    first, second = result.attempts
    assert first.verdict.violations, "attempt 1 deferred everything: the judge must object"
    feedback_requests = [
        r
        for r in server.requests
        if any("Feedback from your" in m["content"] for m in r["messages"])
    ]
    assert feedback_requests and len(feedback_requests) < len(server.requests)
    feedback = feedback_requests[0]["messages"][1]["content"]
    assert f"process_score {first.process_score:.3f}" in feedback
    assert f"accuracy_score {first.accuracy_score:.3f}" in feedback
    for violation in first.verdict.violations:
        assert violation.code in feedback and (violation.rule or "") in feedback
    assert second.process_score > first.process_score
    assert result.best == 2
    # each attempt links to the previous one; the policy's conversations are agent sessions of
    # the run, rewarded with their attempt's process score (training data for policies)
    sessions = asyncio.run(read_sessions(rig.topics.reader, rig.topics.prefix))
    starts = {
        sid: next(e for e in envs if e.type == "session_started").payload
        for sid, envs in sessions.items()
    }
    assert starts[second.session_id]["linked_session_id"] == first.session_id
    assert starts[second.session_id]["run_config"]["mode"] == "iterative_self_refine"
    for attempt in (first, second):
        assert attempt.policy_session_id is not None
        policy_start = starts[attempt.policy_session_id]
        assert policy_start["linked_session_id"] == attempt.session_id
        assert policy_start["group_id"] == result.run_id and policy_start["trainable"] is True
        rewards = [
            e.payload["value"] for e in sessions[attempt.policy_session_id] if e.type == "reward"
        ]
        assert rewards == [attempt.process_score]
    summary = sessions[result.summary_session_id]
    ended = next(e for e in summary if e.type == "session_ended").payload
    assert ended["outcome"]["best_attempt"] == 2
    # the policy conversations of the two attempts are a preference pair
    from rolltape.infra.commands.export import collect, run_export
    from rolltape.projections import ExportOptions, Selection

    collected = asyncio.run(
        collect(rig.topics.reader, prefix=rig.topics.prefix, judge_version="live")
    )
    with collected:
        manifest = run_export(
            collected,
            ExportOptions(format="dpo", selection=Selection(sessions=(f"{result.run_id}*",))),
            tmp_path / "dpo",
        )
    assert manifest.lines == 1 and manifest.sessions_exported == 2
    row = json.loads((tmp_path / "dpo" / "dpo-00000.jsonl").read_text())
    assert row["prompt"][0]["role"] == "system" and row["chosen"] != row["rejected"]


def _monitored_run(rig: Rig, session_id: str, swap_after: bool) -> None:
    data = DigitsData(0, train_subset=256)
    spec = ArchitectureSpec(blocks=2, width=8)
    model = build_model(spec, seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    config = {"target_accuracy": 0.5, "architecture": spec.model_dump()}
    with (
        rig.agent.session(
            "digits", session_id=session_id, kind="training", run_config=config
        ) as run,
        TrainingMonitor(rig.monitor, run) as monitor,
    ):
        monitor.attach(
            model, optimizer, nn.CrossEntropyLoss(), data.train_loader(32), data.val_loader()
        )
        for _ in range(3):
            for x, y in data.train_loader(32):
                optimizer.zero_grad()
                monitor.loss_fn(model(x), y).backward()
                optimizer.step()
            monitor.end_epoch()
        if swap_after:  # the body double: other weights and one more block, logged nowhere
            bigger = build_model(ArchitectureSpec(blocks=3, width=8), seed=7)
            model.blocks.append(bigger.blocks[2])
            model.load_state_dict(bigger.state_dict())
    rig.agent.flush()
    rig.monitor.flush()


def test_judge__passes_an_honest_run_and_hard_fails_a_model_swapped_after_the_last_epoch(
    rig: Rig,
) -> None:
    rig.follower.watch("honest-run")
    rig.follower.watch("swapped-run")
    _monitored_run(rig, "honest-run", swap_after=False)
    _monitored_run(rig, "swapped-run", swap_after=True)

    def verdict(sid: str) -> dict[str, Any]:
        env = rig.follower.wait(
            lambda e: e["session_id"] == sid and e["type"] == "verdict", 120, f"verdict of {sid}"
        )
        return dict(env["payload"])

    honest, swapped = verdict("honest-run"), verdict("swapped-run")
    assert honest["status"] == "ok", honest["violations"]
    assert honest["details"]["architecture_replay"]["result"] == "match"
    assert honest["details"]["live_check"]["result"] == "within_tolerance"
    assert honest["details"]["live_check"]["max_deviation"] == 0.0
    assert swapped["status"] == "failed"
    assert swapped["scores"] == {"accuracy_score": 0.0, "process_score": 0.0}
    assert {v["code"] for v in swapped["violations"]} >= {"architecture_replay", "live_check"}


def test_report__renders_its_charts_in_headless_chromium(rig: Rig, tmp_path: Path) -> None:
    from PIL import Image

    result = rig.harness(epochs=6).self_refine(SCENARIOS["dead_relu"], attempts=2)
    sessions = asyncio.run(read_sessions(rig.topics.reader, rig.topics.prefix))
    page_path = tmp_path / "report.html"
    report = write_report(sessions, page_path, task="digits-cnn/dead_relu")
    assert [len(r.attempts) for r in report.runs] == [2]
    again = write_report(sessions, tmp_path / "again.html", task="digits-cnn/dead_relu")
    assert again.path.read_bytes() == page_path.read_bytes()  # deterministic
    text = page_path.read_text()
    assert "https://" not in re.sub(r"<script>.*?</script>", "", text, flags=re.S)
    with opened(page_path) as (page, errors):
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 8")
        charts = page.evaluate("document.querySelectorAll('.js-plotly-plot').length")
        heatmap_cells = page.evaluate(
            "document.querySelectorAll('.heatmaplayer image, .hm image').length"
        )
        markers = page.evaluate("document.querySelectorAll('.scatterlayer .point').length")
        page.screenshot(path=str(tmp_path / "report.png"), full_page=False)
    assert errors == []
    assert charts == 4  # curves, scores, one heatmap per attempt
    assert heatmap_cells >= 2 and markers > 10
    image = Image.open(tmp_path / "report.png").convert("RGB")
    colors = image.getcolors(maxcolors=1 << 20) or []
    assert len(colors) > 50  # lines, bars and cells, not a blank page
    assert result.attempts[0].session_id in text


def test_calibrated_rule_set__baseline_is_quiet_and_scenarios_still_fire_through_a_real_worker(
    topics: Topics, tmp_path: Path
) -> None:
    """Calibrate on two short seeded baseline runs, judge the reference task by that rule set
    in a real worker (ROLLTAPE_RULES_BY_TASK), then the harness's baseline fires nothing and
    each fault fires its rule; the rule set's measured figures are recorded as an event the
    worker reads as part of its session, not as a dead letter."""
    from rolltape.infra.commands.rules import (
        calibrate_rules,
        evaluate_rules,
        record_evaluations,
        recorded_runs,
        ruleset_evaluations,
        write_ruleset,
    )
    from rolltape.processors.rules import RuleSet

    epochs = {"baseline": 5, "lr_too_high": 2, "dead_relu": 4, "deep_sigmoid": 4, "plateau": 6}
    calibrated = calibrate_rules(name="digits-small", seeds=(0, 1), epochs=epochs["baseline"])
    path = tmp_path / "digits-small.json"
    write_ruleset(calibrated, path)
    assert calibrated.r2_noise_scale_low < RuleSet().r2_noise_scale_low
    worker = WorkerProcess(
        topics, tmp_path, ROLLTAPE_RULES_BY_TASK=json.dumps({"digits-cnn": str(path)})
    ).start()
    agent = Recorder(
        topics.connection(Role.AGENT), topic_prefix=topics.prefix, spool_dir=tmp_path / "a"
    )
    monitor = Recorder(
        topics.connection(Role.MONITOR), topic_prefix=topics.prefix, spool_dir=tmp_path / "m"
    )
    follower = rules_and_verdicts_follower(topics.connection(Role.MONITOR), topics.prefix)
    rig = Rig(topics, agent, monitor, follower, worker)
    try:
        harness = rig.harness(firing_timeout_s=120)
        session_of: dict[str, str] = {}
        for name, count in epochs.items():
            scenario = SCENARIOS[name].model_copy(update={"epochs": count})
            result = harness.run_attempt(scenario)
            session_of[name] = result.session_id
            evaluations = [
                e["payload"]
                for e in follower.seen(result.session_id)
                if e["type"] == "rule_evaluation"
            ]
            assert {e["ruleset"] for e in evaluations} == {calibrated.label}, name
            fired = {r for e in evaluations for r in e["fired"]}
            assert fired == set() if name == "baseline" else set(scenario.provokes) <= fired, (
                name,
                fired,
            )
        # read back from the log, the runs the harness acted on are not healthy runs
        found = recorded_runs(topics.settings, task="digits-cnn")
        assert session_of["baseline"] in {sid for sid, _ in found.runs}
        assert "decisions applied" in found.skipped[session_of["dead_relu"]]
        seeds = (1000,)
        figures = evaluate_rules([calibrated], seeds=seeds, scenarios=["lr_too_high"], epochs=2)
        (evaluation,) = ruleset_evaluations([calibrated], figures, seeds=seeds, epochs=2)
        session_id, sent = record_evaluations([evaluation], topics.settings)
        assert sent
        records = wait_for(
            topics,
            lambda rs: bool(payloads(rs, "filter_outcome", session_id)),
            worker=worker,
        )
        assert not [d for d in dead_letters(records) if session_id in d["value"]]
    finally:
        follower.close()
        agent.close()
        monitor.close()
        worker.stop()
    events = [
        e
        for e in read_all(topics, (Stream.EVENTS,))
        if read_event(e.value).session_id == session_id
    ]
    (recorded,) = [
        read_event(r.value).body for r in events if read_event(r.value).type == "ruleset_evaluation"
    ]
    assert isinstance(recorded, RulesetEvaluation)
    assert RuleSet.model_validate(recorded.ruleset) == calibrated
    assert recorded.label == calibrated.label and recorded.seeds == (1000,)
    (detection,) = recorded.figures.detections
    assert (detection.scenario, detection.rule, detection.detected) == ("lr_too_high", "R7", 1)


def _record_runs(topics: Topics, tmp_path: Path, task: str, seeds: range) -> list[str]:
    """Short healthy digits runs recorded under the monitor as sessions of `task`."""
    from rolltape.producers.training._harness import _train_epoch

    agent = Recorder(
        topics.connection(Role.AGENT), topic_prefix=topics.prefix, spool_dir=tmp_path / "ra"
    )
    monitor = Recorder(
        topics.connection(Role.MONITOR), topic_prefix=topics.prefix, spool_dir=tmp_path / "rm"
    )
    scenario = SCENARIOS["baseline"]
    ids = []
    try:
        for seed in seeds:
            data = DigitsData(seed)
            run = scenario.start(data, seed=seed)
            with (
                agent.session(f"{task}/run-{seed}", kind="training") as session,
                TrainingMonitor(monitor, session) as watching,
            ):
                watching.attach(
                    run.model, run.optimizer, nn.CrossEntropyLoss(), run.loader, data.val_loader()
                )
                for _ in range(3):
                    _train_epoch(run, watching)
                    watching.end_epoch()
                ids.append(session.session_id)
    finally:
        agent.close()
        monitor.close()
    return ids


def test_rules_calibrate_from_log__reads_any_tasks_recorded_runs(
    topics: Topics, tmp_path: Path
) -> None:
    """A task rolltape has no scenarios for is calibrated on its recorded healthy runs: every
    training session of the task family, or the ones named, as the worker reads them."""
    from rolltape.processors.rules import RuleSet

    ids = _record_runs(topics, tmp_path, "toy-task", range(2))
    with (
        Recorder(
            topics.connection(Role.AGENT), topic_prefix=topics.prefix, spool_dir=tmp_path / "chat"
        ) as chat,
        chat.session("toy-task/notes") as notes,  # an agent session of the task
    ):
        notes.turn("assistant", "both runs look healthy")
    out = tmp_path / "toy.json"

    def calibrate(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rolltape.infra", "rules", "calibrate", *args],
            env={**topics.env(), "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=300,
        )

    done = calibrate("--task", "toy-task", "--from-log", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "read 2 recorded run(s) of toy-task" in done.stdout
    assert "left out" not in done.stdout  # the agent session of the task is not a run
    rules = RuleSet.from_file(out)
    assert rules.name == "toy-task-calibrated" and rules.calibration is not None
    assert rules.calibration.task == "toy-task" and rules.calibration.sessions == tuple(sorted(ids))
    assert rules.calibration.seeds == () and rules.calibration.epochs == 3
    assert rules.calibration.ranges["grad_noise_scale"].samples == 6
    one = calibrate("--task", "toy-task", "--from-log", "--session", ids[0], "-o", str(out))
    assert one.returncode == 0, one.stderr
    assert RuleSet.from_file(out).calibration.sessions == (ids[0],)  # type: ignore[union-attr]
    none = calibrate("--task", "other-task", "--from-log", "-o", str(out))
    assert none.returncode == 2 and "no healthy training run of task 'other-task'" in none.stderr
    trained = calibrate("--task", "toy-task", "-o", str(out))
    assert trained.returncode == 2 and "--from-log" in trained.stderr
