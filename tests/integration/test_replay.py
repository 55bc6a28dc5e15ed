"""Replay against the real broker: the worker's outputs reproduced byte for byte under `live`,
a changed rule set written as a new version beside them, versions never rewritten."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rolltape.infra.bench._synthetic import end_synthetic_metrics, synthetic_metric
from rolltape.producers import Recorder
from rolltape.schemas import Stream, decode
from tests.integration.conftest import Topics
from tests.integration.workers import WorkerProcess, chain_reports, payloads, read_all, wait_for

pytestmark = pytest.mark.integration
CLI = [sys.executable, "-m", "rolltape.infra"]
CALC = {"name": "calc", "parameters": {"type": "object"}}


def cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=300)


def record(topics: Topics, spool: Path) -> None:
    with Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=spool) as rec:
        for sid, noise in (("train-noisy", 40.0), ("train-calm", 500.0)):
            with rec.session("fit", session_id=sid, kind="training", run_config={"lr": 0.1}) as s:
                for epoch in range(6):
                    synthetic_metric(rec, s, epoch, steps=10, train_loss=1 / (epoch + 1),
                                     val_loss=1 / (epoch + 1), grad_noise_scale=noise,
                                     max_layer_grad_norm=1.0, min_layer_grad_norm=0.1,
                                     val_acc=0.8)  # fmt: skip
                end_synthetic_metrics(rec, s)
        with rec.session("2+2", session_id="agent-good", tools=[CALC]) as s:
            s.turn("user", "2+2?")
            s.tool_result(s.tool_call("calc", {"expr": "2+2"}), "4")
            s.turn("assistant", "4", reasoning="calc says 4")
            s.reward(1.0)
        with rec.session("2+2", session_id="agent-bad", tools=[CALC]) as s:
            s.tool_result(s.tool_call("web_search", {"q": "2+2"}), "no such tool", success=False)
            s.turn("assistant", "4")


def by_chain(topics: Topics) -> dict[tuple[str, str], list[bytes]]:
    """The output chains a replay reproduces (not the judge's checkpoint logs: replays sign
    nothing)."""
    chains: dict[tuple[str, str], dict[int, bytes]] = {}
    for r in read_all(topics, (Stream.RULES, Stream.VERDICTS, Stream.FILTERED)):
        env = decode(r.value)
        if env["type"] == "checkpoint":
            continue
        chains.setdefault((env["stream"], env["session_id"]), {}).setdefault(env["seq"], r.value)
    return {k: [v[i] for i in sorted(v)] for k, v in chains.items()}


def fired(chains: dict[tuple[str, str], list[bytes]], stream: str, sid: str) -> set[str]:
    return {r for value in chains[(stream, sid)] for r in decode(value)["payload"]["fired"]}


def test_replay__reproduces_live_writes_new_versions_beside_it_and_never_rewrites(
    topics: Topics, tmp_path: Path
) -> None:
    record(topics, tmp_path / "spool")
    worker = WorkerProcess(topics, tmp_path, ROLLTAPE_REWARDS='["final_reward"]').start()
    try:
        wait_for(
            topics,
            lambda rs: (
                len(payloads(rs, "filter_outcome")) == 2
                and len([p for p in payloads(rs, "verdict") if p["judge"] == "training_audit"]) == 2
            ),
            worker=worker,
        )
    finally:
        worker.stop()
    live = by_chain(topics)
    env = {**topics.env(), "ROLLTAPE_REWARDS": '["final_reward"]', "COLUMNS": "200"}

    same = cli(["log", "replay", "--judge-version", "live"], env)
    assert same.returncode == 0, same.stdout + same.stderr
    outputs = sum(len(v) for v in live.values())
    assert f"{outputs} outputs: {outputs} already held byte for byte, 0 written" in same.stdout
    assert by_chain(topics) == live

    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"name": "noise-30", "r2_noise_scale_low": 30.0}))
    env_v2 = {**env, "ROLLTAPE_RULES_FILE": str(rules)}
    first = cli(["log", "replay", "--judge-version", "v2"], env_v2)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"{outputs} outputs: 0 already held byte for byte, {outputs} written" in first.stdout
    after = by_chain(topics)
    assert {k: v for k, v in after.items() if "@" not in k[0]} == live  # old verdicts stay
    assert "R2" in fired(after, "rules", "train-noisy")
    assert "R2" not in fired(after, "rules@v2", "train-noisy")
    assert fired(after, "rules@v2", "train-calm") == fired(after, "rules", "train-calm")
    for sid in ("agent-good", "agent-bad"):
        assert (
            decode(after[("filtered@v2", sid)][0])["payload"]
            == decode(live[("filtered", sid)][0])["payload"]
        )
    v2_verdict = decode(after[("verdicts@v2", "train-noisy")][0])["payload"]
    live_verdict = decode(live[("verdicts", "train-noisy")][0])["payload"]
    assert v2_verdict["violations"] != live_verdict["violations"]
    everything = read_all(
        topics, (Stream.EVENTS, Stream.METRICS, Stream.RULES, Stream.VERDICTS, Stream.FILTERED)
    )
    assert all(report.ok for report in chain_reports(everything))

    again = cli(
        ["log", "replay", "--judge-version", "v2", "--jobs", "3"], env_v2
    )  # a process a partition
    assert (
        again.returncode == 0 and f"{outputs} already held byte for byte, 0 written" in again.stdout
    )
    assert by_chain(topics) == after

    changed = cli(
        ["log", "replay", "--judge-version", "v2", "--jobs", "2"], env
    )  # default rules, same label
    assert changed.returncode == 1 and "conflict" in changed.stdout
    assert "new --judge-version" in changed.stdout
    assert by_chain(topics) == after

    exported = cli(
        [
            "dataset",
            "export",
            "-f",
            "sharegpt",
            "-o",
            str(tmp_path / "v2"),
            "--judge-version",
            "v2",
            "--accepted-only",
        ],
        env,
    )
    assert exported.returncode == 0, exported.stdout + exported.stderr
    manifest = json.loads((tmp_path / "v2" / ".rolltape" / "manifest.json").read_text())
    assert manifest["sessions_exported"] == 1 and manifest["skipped"]["not_accepted"] == 1
    side = json.loads(
        (tmp_path / "v2" / ".rolltape" / "sharegpt-00000.provenance.jsonl").read_text()
    )
    assert set(side["sessions"][0]["chains"]) == {"events", "filtered@v2", "verdicts@v2"}


def test_replay__llm_judges_keep_held_verdicts_and_judge_anew_under_a_new_version(
    topics: Topics, tmp_path: Path
) -> None:
    from tests.support.openai_server import OpenAICompatibleServer, grade_by_answer

    with Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path / "spool") as rec:
        for sid, answer in (("right", "4"), ("wrong", "5")):
            with rec.session("2+2", session_id=sid) as s:
                s.turn("user", "2+2?")
                s.turn("assistant", answer)
                s.reward(1.0 if answer == "4" else 0.0)
    with OpenAICompatibleServer(grade_by_answer) as server:
        judged = {
            "ROLLTAPE_LLM_JUDGES": '["answer_quality"]',
            "ROLLTAPE_MODELS": json.dumps({"grader": {"base_url": server.base_url, "model": "g"}}),
        }
        worker = WorkerProcess(topics, tmp_path, **judged).start()
        try:
            wait_for(
                topics,
                lambda rs: (
                    len([p for p in payloads(rs, "verdict") if p["judge"] == "llm:answer_quality"])
                    == 2
                ),
                worker=worker,
            )
        finally:
            worker.stop()
        asked_live = len(server.requests)
        live = by_chain(topics)
        env = {**topics.env(), **judged, "COLUMNS": "200"}

        same = cli(["log", "replay", "--judge-version", "live"], env)
        assert same.returncode == 0, same.stdout + same.stderr
        assert "LLM verdicts: 2 held (not asked again), 0 asked" in same.stdout
        assert len(server.requests) == asked_live and by_chain(topics) == live

        v2 = cli(["log", "replay", "--judge-version", "v2"], env)
        assert v2.returncode == 0, v2.stdout + v2.stderr
        assert "LLM verdicts: 0 held (not asked again), 2 asked" in v2.stdout
        assert len(server.requests) == asked_live + 2
        after = by_chain(topics)
        scores = {
            sid: decode(after[("verdicts@v2", sid)][-1])["payload"]["scores"]["score"]
            for sid in ("right", "wrong")
        }
        assert scores == {"right": 1.0, "wrong": 0.0}

        # The first v2 run recorded its two judge conversations as sessions; whichever of them
        # sat on a partition it had already replayed is new to the next run, which writes their
        # filter outcomes (not trainable), asks no model and changes nothing already written;
        # the run after that has nothing left to do.
        again = cli(["log", "replay", "--judge-version", "v2"], env)
        assert again.returncode == 0, again.stdout + again.stderr
        assert any(f", {n} written" in again.stdout for n in (0, 1, 2))
        assert "LLM verdicts: 2 held (not asked again), 0 asked" in again.stdout
        grown = by_chain(topics)
        assert {k: v for k, v in grown.items() if k in after} == after
        assert {k for k in grown if k not in after} == {
            ("filtered@v2", sid) for _, sid in grown if sid.startswith("judge.")
        } - {k for k in after}
        third = cli(["log", "replay", "--judge-version", "v2"], env)
        assert third.returncode == 0 and ", 0 written" in third.stdout
        assert len(server.requests) == asked_live + 2
    everything = read_all(topics, (Stream.EVENTS, Stream.RULES, Stream.VERDICTS, Stream.FILTERED))
    assert all(report.ok for report in chain_reports(everything))
    judge_sessions = {
        decode(r.value)["session_id"] for r in everything if r.stream == Stream.EVENTS
    }
    assert sum(1 for sid in judge_sessions if sid.startswith("judge.answer_quality.")) == 4


def test_replay_in_a_group__shares_the_partitions_and_writes_what_one_replay_writes(
    topics: Topics, tmp_path: Path
) -> None:
    record(topics, tmp_path / "spool")
    env = {**topics.env(), "COLUMNS": "200"}
    group = ["log", "replay", "--judge-version", "v2", "--group", f"{topics.prefix}-replayers"]
    members = [
        subprocess.Popen([*CLI, *group], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for _ in range(2)
    ]  # fmt: skip
    outs = [m.communicate(timeout=300) for m in members]
    for member, (out, err) in zip(members, outs, strict=True):
        assert member.returncode == 0, out + err
    replayed = [int(re.search(r"replayed (\d+) sessions", out)[1]) for out, _ in outs]  # type: ignore[index]
    assert sum(replayed) >= 4  # every session, by one member or (a rebalance) both
    shares = [
        set(re.findall(r"\d+", re.search(r"replayed here: (.*)", out)[1]))  # type: ignore[index]
        for out, _ in outs
    ]
    assert all(shares) and set.union(*shares) == {"0", "1", "2"}  # shared out, all of them

    # One replay of the same version after them finds every output already written, byte for
    # byte: the members' union is what it would have written.
    alone = cli(["log", "replay", "--judge-version", "v2"], env)
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert ", 0 written," in alone.stdout and "0 session(s) in conflict" in alone.stdout
    held = re.search(r"(\d+) outputs: (\d+) already held byte for byte", alone.stdout)
    assert held is not None and held[1] == held[2] and int(held[1]) > 0
    everything = read_all(topics, (Stream.EVENTS, Stream.RULES, Stream.VERDICTS, Stream.FILTERED))
    assert all(report.ok for report in chain_reports(everything))
