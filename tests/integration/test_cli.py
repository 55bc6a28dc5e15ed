"""The CLI as a person uses it, against the real broker."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rolltape.schemas import PAYLOAD_MODELS, TOPIC_SPECS, Role

from .conftest import Topics

pytestmark = pytest.mark.integration
CLI = [sys.executable, "-m", "rolltape.infra"]


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "args",
    [
        ["log", "verify"],
        ["dataset", "export", "-f", "sharegpt", "-o", "out"],
        ["log", "replay", "--judge-version", "v2", "--dry-run"],
    ],
)
def test_a_cluster_that_does_not_answer__is_one_line_that_says_what_to_check(
    tmp_path: Path, args: list[str]
) -> None:
    """The client's errors are translated at its boundary: no traceback, exit 2."""
    env = {**os.environ, "ROLLTAPE_STATE_DIR": str(tmp_path), "ROLLTAPE_BOOTSTRAP": "127.0.0.1:1"}
    out = subprocess.run(
        [*CLI, *args], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and "Unclosed" not in out.stderr
    assert "127.0.0.1:1" in out.stderr and "is the broker running" in out.stderr


def test_broker_status__exits_0_and_prints_the_address_only_when_a_broker_answers(
    topics: Topics, tmp_path: Path
) -> None:
    up = run(["broker", "status"], topics.env())
    assert up.returncode == 0 and up.stdout.strip() == topics.bootstrap
    env = {**os.environ, "ROLLTAPE_STATE_DIR": str(tmp_path)}
    env.pop("ROLLTAPE_BOOTSTRAP", None)
    none = run(["broker", "status"], env)
    assert none.returncode == 1 and "broker up" in none.stderr
    dead = run(["broker", "status"], {**env, "ROLLTAPE_BOOTSTRAP": "127.0.0.1:9"})
    assert dead.returncode == 1 and "does not answer" in dead.stderr


def test_broker_up__with_an_explicit_cluster_creates_the_topics_idempotently(
    topics: Topics,
) -> None:
    first = run(["broker", "up"], topics.env())
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("unchanged") == len(TOPIC_SPECS)


def test_broker_up__as_an_admin_named_by_its_credentials_creates_the_topics(
    topics: Topics,
) -> None:
    """`broker up` run with an admin's own credentials (as an external cluster's operator
    gives them) provisions, as it did before the demo shared its start-up path."""
    admin = topics.connection(Role.ADMIN)
    if admin.username is None or admin.password is None:
        pytest.skip("this cluster has no SASL principals")
    env = {
        **topics.env(),
        "ROLLTAPE_TOPIC_PREFIX": f"{topics.prefix}-admin",
        "ROLLTAPE_SASL_USERNAME": admin.username,
        "ROLLTAPE_SASL_PASSWORD": admin.password.get_secret_value(),
    }
    up = run(["broker", "up"], env)
    assert up.returncode == 0, up.stdout + up.stderr
    assert up.stdout.count("created") == len(TOPIC_SPECS), up.stdout + up.stderr


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("ROLLTAPE_REWARDS", "final_reward", "ROLLTAPE_REWARDS does not read"),
        ("ROLLTAPE_PARTITIONS", "six", "ROLLTAPE_PARTITIONS: Input should be a valid integer"),
    ],
)
def test_a_setting_that_does_not_read__is_one_line_naming_the_variable(
    tmp_path: Path, variable: str, value: str, said: str
) -> None:
    env = {**os.environ, "ROLLTAPE_STATE_DIR": str(tmp_path), variable: value}
    out = run(["log", "replay", "--judge-version", "v2", "--dry-run"], env)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and said in out.stderr


def test_verify__without_a_broker_says_how_to_get_one(tmp_path: Path) -> None:
    env = {**os.environ, "ROLLTAPE_STATE_DIR": str(tmp_path)}
    env.pop("ROLLTAPE_BOOTSTRAP", None)
    out = run(["log", "verify"], env)
    assert out.returncode == 2 and "rolltape broker up" in out.stderr


def test_demo__records_processes_and_verifies_agent_and_training_sessions(
    topics: Topics, tmp_path: Path
) -> None:
    env = {**topics.env(), "ROLLTAPE_STATE_DIR": str(tmp_path), "COLUMNS": "250"}
    out = run(["demo", "--out", str(tmp_path / "demo")], env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all chains verified" in out.stdout
    # agent sessions x5 (events + filtered), two training attempts (events, metrics, rules,
    # verdicts): every chain, raw and derived
    assert out.stdout.count("intact") == 18
    # judged by the reference task's calibrated rule set: the dead units fire R5, and nothing
    # fires on the healthy epochs (no R2 at batch 32, so nothing deferred that cannot clear)
    assert "dead_relu_fraction EMA above 0.4" in out.stdout
    assert "grad_noise_scale EMA" not in out.stdout
    attempts = re.findall(r"^│ ([12])\*?\s+│ (sr-dead_relu-\S+)\s+│ ([0-9.]+)", out.stdout, re.M)
    assert [a[0] for a in attempts] == ["1", "2"] and "best by (process_score" in out.stdout
    assert [a[2] for a in attempts] == ["1.000", "1.000"]  # the playbook's remedies, no deferral
    assert "unknown_tool: called tool 'web_search'" in out.stdout
    report = tmp_path / "demo" / "report.html"
    assert f"report of the training attempts: {report}" in out.stdout
    assert attempts[0][1] in report.read_text()
    # The demo's training data: every agent session as ShareGPT and OpenAI lines, the sampled
    # pair as one Atropos group from their recorded token ids.
    manifests = {
        f: json.loads((tmp_path / "demo" / f / ".rolltape" / "manifest.json").read_text())
        for f in ("sharegpt", "atropos", "openai")
    }
    assert manifests["sharegpt"]["lines"] == manifests["openai"]["lines"] == 4
    assert manifests["sharegpt"]["skipped"]["training_run"] == 2
    assert manifests["atropos"]["lines"] == 1
    group = json.loads((tmp_path / "demo" / "atropos" / "atropos-00000.jsonl").read_text())
    assert group["scores"] == [1.0, 0.0] and group["tokens"][0][-7:] == list(b"1, 2, 3")
    assert str(tmp_path / "demo" / "sharegpt" / "sharegpt-00000.jsonl") in out.stdout
    # Exporting twice over the same topics writes the same bytes.
    for name in ("a", "b"):
        export = run(
            [
                "dataset",
                "export",
                "-f",
                "sharegpt",
                "-o",
                str(tmp_path / name),
                "-s",
                "demo-*",
                "--shard-lines",
                "2",
            ],
            env,
        )
        assert export.returncode == 0, export.stdout + export.stderr
    files_a = {p.name: p.read_bytes() for p in (tmp_path / "a").rglob("*") if p.is_file()}
    files_b = {p.name: p.read_bytes() for p in (tmp_path / "b").rglob("*") if p.is_file()}
    assert files_a == files_b and "sharegpt-00001.jsonl" in files_a
    # A session with tool results and no token ids goes out through a local tokenizer.
    from tests.support.tokenizer import build_chat_tokenizer

    tok = build_chat_tokenizer(tmp_path / "tok")
    atropos = run(
        ["dataset", "export", "-f", "atropos", "-o", str(tmp_path / "atr"), "-s", "demo-agent-*",
         "--tokenizer", str(tok), "--score", "reward:answer_correct", "--keep-equal-scores"],
        env,
    )  # fmt: skip
    assert atropos.returncode == 0, atropos.stdout + atropos.stderr
    group = json.loads((tmp_path / "atr" / "atropos-00000.jsonl").read_text())
    assert group["scores"] == [1.0] and any(m != -100 for m in group["masks"][0])
    manifest = json.loads((tmp_path / "atr" / ".rolltape" / "manifest.json").read_text())
    assert manifest["options"]["tokenizer"].startswith("tok@sha256:")
    tail = run(["log", "tail", "--from-beginning", "--no-follow"], topics.env())
    assert tail.returncode == 0
    assert (
        "session_started" in tail.stdout
        and "calculator" in tail.stdout
        and "epoch 9" in tail.stdout
    )


def test_schemas_export__writes_a_json_schema_per_payload_type(tmp_path: Path) -> None:
    out = run(["schemas", "export", str(tmp_path)], dict(os.environ))
    assert out.returncode == 0, out.stderr
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "envelope.schema.json" in names and "metric.schema.json" in names
    assert len(names) == len(PAYLOAD_MODELS) + 1  # one per payload type, and the envelope
    assert "erasure.schema.json" in names
    assert "ruleset_evaluation.schema.json" in names
    assert "model_spec.schema.json" in names and "live_check.schema.json" in names
    assert "model_error.schema.json" in names and "tool_parse_error.schema.json" in names
    assert "session_resumed.schema.json" in names and "checkpoint.schema.json" in names
    turn = json.loads((tmp_path / "turn.schema.json").read_text())
    assert {"prompt_token_ids", "logprobs", "summary"} <= set(turn["properties"])
    metric = json.loads((tmp_path / "metric.schema.json").read_text())
    assert "per_layer_grad_norm" in metric["properties"]


def test_broker_up_and_down__manage_a_broker_of_its_own(tmp_path: Path) -> None:
    env = {**os.environ, "ROLLTAPE_STATE_DIR": str(tmp_path), "ROLLTAPE_PARTITIONS": "2"}
    env.pop("ROLLTAPE_BOOTSTRAP", None)
    try:
        up = run(["broker", "up"], env)
        assert up.returncode == 0, up.stdout + up.stderr
        assert up.stdout.count("created") == len(TOPIC_SPECS) and "KRaft" in up.stdout
        assert "new judge key" in up.stdout
        status = run(["broker", "status"], env)
        assert status.returncode == 0 and status.stdout.strip().startswith("127.0.0.1:")
        again = run(["broker", "up"], env)
        assert again.returncode == 0 and again.stdout.count("unchanged") == len(TOPIC_SPECS)
        assert "judge key" in again.stdout and "new judge key" not in again.stdout
        logs = run(["broker", "logs", "-n", "200"], env)
        assert "Kafka Server started" in logs.stdout
    finally:
        down = run(["broker", "down"], env)
    assert down.returncode == 0 and "broker stopped" in down.stdout
    assert run(["broker", "status"], env).returncode == 1


def test_tail__follows_new_records_live_and_filters_by_session(
    topics: Topics, tmp_path: Path
) -> None:
    from rolltape.producers import Recorder

    follower = subprocess.Popen(
        [*CLI, "log", "tail", "--session", "live-1"],
        env={**topics.env(), "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # It says when it is positioned at the end: what is recorded after that is shown.
        assert follower.stderr is not None
        ready = follower.stderr.readline()
        assert ready.startswith("reading ") and "from now" in ready, ready
        recorder = Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path)
        with recorder.session("watched live", session_id="live-1") as s:
            s.turn("user", "are you there?")
        with recorder.session("not watched", session_id="other-1") as s:
            s.turn("user", "invisible")
        recorder.close(30)
        lines: list[str] = []
        assert follower.stdout is not None
        while len(lines) < 3:
            line = follower.stdout.readline()
            assert line, follower.stderr.read() if follower.stderr else "tail ended"
            lines.append(line)
    finally:
        follower.terminate()
        follower.communicate(timeout=10)  # reaps it and closes both pipes
    assert "session_started" in lines[0] and "are you there?" in lines[1]
    assert "session_ended" in lines[2]
    assert not any("invisible" in line for line in lines)


def test_bench_producer__runs_end_to_end_and_reports_every_figure(topics: Topics) -> None:
    # A smoke run so the benchmark cannot rot; figures are printed, never asserted on.
    out = run(
        [
            *("bench", "producer", "--calls", "300", "--events", "300", "--repeats", "1"),
            *("--sealed", "--json"),
        ],
        topics.env(),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    figures = json.loads(out.stdout)
    assert figures["hot_path_calls"] == 300 and figures["sustained_events"] == 300
    assert figures["recorder_events_per_s"] > 0 and figures["raw_batches_events_per_s"] > 0
    assert [s["senders"] for s in figures["sealed"]] == [1, 2]


def test_bench_cluster__starts_one_node_and_three_and_reports_both_set_up_as_checked(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "ROLLTAPE_STATE_DIR": str(tmp_path)}
    env.pop("ROLLTAPE_BOOTSTRAP", None)  # it starts both clusters itself
    out = run(["bench", "cluster", "--events", "400", "--repeats", "1", "--json"], env)
    assert out.returncode == 0, out.stdout + out.stderr
    figures = json.loads(out.stdout)
    single, replicated = figures["single"], figures["replicated"]
    assert (single["nodes"], single["replication_factor"], single["min_insync_replicas"]) == (
        1,
        1,
        1,
    )
    assert (replicated["nodes"], replicated["replication_factor"]) == (3, 3)
    assert replicated["min_insync_replicas"] == 2
    assert single["check_problems"] == [] and replicated["check_problems"] == []
    assert single["events_per_s"] > 0 and replicated["events_per_s"] > 0
    assert replicated["broker_cpu_us_per_event"] > 0 and figures["ratio"] > 0


def test_worker__refuses_a_bad_config_and_says_what_to_fix(topics: Topics, tmp_path: Path) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text('{"r2_noise_scale_low": 9000}')
    out = run(["serve", "worker"], {**topics.env(), "ROLLTAPE_RULES_FILE": str(rules)})
    assert out.returncode == 2 and "r2_noise_scale_low must be below" in out.stderr
    out = run(["serve", "worker"], {**topics.env(), "ROLLTAPE_LLM_JUDGES": '["oracle"]'})
    assert out.returncode == 2 and "unknown judge(s) oracle" in out.stderr
    assert "ROLLTAPE_LLM_JUDGES" in out.stderr
    out = run(
        ["serve", "worker"], {**topics.env(), "ROLLTAPE_PLUGINS": '["no_such_plugin_module"]'}
    )
    assert (
        out.returncode == 2 and "cannot import plugin module 'no_such_plugin_module'" in out.stderr
    )
    out = run(["serve", "worker"], {**topics.env(), "ROLLTAPE_LLM_JUDGES": '["answer_quality"]'})
    assert out.returncode == 2 and "no endpoint for the logical model(s) grader" in out.stderr


def test_bench_rules__runs_end_to_end_and_reports_every_figure(topics: Topics) -> None:
    args = "bench rules --epochs 20 --events 2000 --sessions 10 --at-once 50 --json"
    out = run(args.split(), topics.env())
    assert out.returncode == 0, out.stdout + out.stderr
    figures = json.loads(out.stdout)
    assert figures["epochs"] == 20 and figures["events"] >= 2000
    assert figures["latency_p99_ms"] > 0 and figures["worker_events_per_s"] > 0
    assert figures["faust_floor_events_per_s"] > 0 and figures["pure_core_events_per_s"] > 0
    assert figures["two_workers_events_per_s"] > 0
    assert figures["concurrent_sessions"] == 50 and figures["interleaved_events_per_s"] > 0


def test_bench_replay__runs_end_to_end_and_reports_every_figure(topics: Topics) -> None:
    out = run(
        ["bench", "replay", "--events", "2000", "--sessions", "20", "--passes", "1", "--json"],
        topics.env(),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    figures = json.loads(out.stdout)
    assert figures["events"] >= 2000 and figures["export_lines"] == 20
    assert figures["raw_events_per_s"] > 0 and figures["pipeline_events_per_s"] > 0
    assert figures["decode_s"] > 0 and figures["decode_ceiling_events_per_s"] > 0
    assert figures["command_events_per_s"] > 0 and figures["command_jobs_events_per_s"] > 0
    assert figures["group_one_events_per_s"] > 0 and figures["group_two_events_per_s"] > 0
    assert figures["pipeline_vs_decode_ceiling"] > 0 and figures["group_two_vs_one"] > 0
    assert figures["export_events_per_s"] > 0 and figures["in_memory_export_events_per_s"] > 0
    assert 0 < figures["idle_rss_mb"] <= figures["export_peak_rss_mb"]


def test_bench_index__times_the_readers_by_the_read_model_and_by_scan(topics: Topics) -> None:
    args = "bench index --sessions 300 --repeats 1 --queries 5 --log-events 3000 --json"
    out = run(args.split(), topics.env())
    assert out.returncode == 0, out.stdout + out.stderr
    figures = json.loads(out.stdout)
    assert figures["sessions"] == 300 and figures["list_p95_ms"] > 0
    readers = figures["readers"]
    assert readers["events"] >= 3000 and readers["sessions"] == 30
    # The last session's records only, from where the read model says it starts.
    assert 0 < readers["resume_records_from_end"] < 2 * readers["events"] // 30
    assert readers["resume_index_ms"] > 0 and readers["resume_scan_ms"] > 0
    assert readers["export_sessions"] == 10 and readers["export_index_ms"] > 0
    assert readers["prompts_index_ms"] > 0 and readers["prompts_scan_ms"] > 0


def test_bench_tokens__times_the_export_and_the_stream_against_their_baselines(
    topics: Topics,
) -> None:
    args = "bench tokens --sessions 40 --stream-sessions 30 --repeats 1 --json"
    out = run(args.split(), topics.env())
    assert out.returncode == 0, out.stdout + out.stderr
    figures = json.loads(out.stdout)
    assert figures["sessions"] == 40 and figures["stream_sessions"] == 30
    assert figures["tokens_samples_per_s"] > 0 and figures["atropos_samples_per_s"] > 0
    assert figures["stream_samples_per_s"] > 0 and figures["plain_samples_per_s"] > 0


def test_bench_console__times_both_pages_from_the_server_and_in_chromium(topics: Topics) -> None:
    args = "bench console --sessions 300 --events 200 --requests 3 --json"
    out = run(args.split(), topics.env())
    assert out.returncode == 0, out.stdout + out.stderr
    figures = json.loads(out.stdout)
    assert figures["sessions"] == 301 and figures["session_events"] >= 200
    assert figures["browser"].startswith("Chromium")
    for page in ("list", "session"):
        assert 0 < figures[f"{page}_app_p50_ms"] <= figures[f"{page}_server_p95_ms"]
        assert figures[f"{page}_browser_p95_ms"] > 0
    # The session page holds the big session's timeline: every round's tool call is on it.
    assert figures["session_page_bytes"] > figures["list_page_bytes"]


def test_bench_otlp__runs_every_way_and_reports_the_receivers_cpu(topics: Topics) -> None:
    args = "bench otlp --spans 700 --batch 70 --connections 2 --repeats 1 --workers 2 --json"
    out = run(args.split(), topics.env())
    assert out.returncode == 0, out.stdout + out.stderr
    figures = json.loads(out.stdout)
    assert figures["spans"] >= 700 and figures["events_per_span"] > 1
    for way in ("receiver", "decode_only", "logs", "grpc"):
        assert figures[f"{way}_spans_per_s"] > 0
        assert figures[f"{way}_cpu_us_per_span"] > 0  # the receiver's own CPU clock
    assert figures["workers_spans_per_s"]["2"] > 0 and figures["log_records_per_span"] > 1
    assert figures["cpu_ratio"] > 0 and figures["receiver_busy"] > 0


def test_bench_batch__runs_end_to_end_and_reports_every_figure(topics: Topics) -> None:
    args = ["--rollouts", "12", "--concurrency", "1", "--concurrency", "4"]
    out = run(
        ["bench", "batch", *args, "--cron-jobs", "4", "--cron-fires", "20", "--json"],
        topics.env(),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    figures = json.loads(out.stdout)
    assert [r["concurrency"] for r in figures["runs"]] == [1, 4]
    assert all(r["rollouts_per_s"] > 0 and r["bare_calls_per_s"] > 0 for r in figures["runs"])
    cron = figures["cron"]
    assert cron["fires"] == 20 and cron["jobs"] == 4
    assert 0 < cron["jitter_p50_ms"] <= cron["jitter_p99_ms"] <= cron["jitter_max_ms"]


def test_export__bad_options_say_what_to_change(tmp_path: Path) -> None:
    env = dict(os.environ)
    both = run(
        [
            "dataset",
            "export",
            "-f",
            "sharegpt",
            "-o",
            str(tmp_path),
            "--accepted-only",
            "--rejected-only",
        ],
        env,
    )
    assert (
        both.returncode == 2 and "choose one of --accepted-only and --rejected-only" in both.stderr
    )
    since = run(
        ["dataset", "export", "-f", "openai", "-o", str(tmp_path), "--since", "yesterday"], env
    )
    assert since.returncode == 2 and "ISO 8601" in since.stderr
    tokenizer = run(
        [
            "dataset",
            "export",
            "-f",
            "atropos",
            "-o",
            str(tmp_path),
            "--tokenizer",
            str(tmp_path / "none"),
        ],
        env,
    )
    assert tokenizer.returncode == 2 and "does not exist" in tokenizer.stderr
    version = run(
        ["dataset", "export", "-f", "turns", "-o", str(tmp_path), "--judge-version", "Bad Version"],
        env,
    )
    assert version.returncode == 2 and "lowercase letters" in version.stderr
    fmt = run(["dataset", "export", "-f", "csv", "-o", str(tmp_path)], env)
    assert fmt.returncode == 2 and "csv" in fmt.stderr
    score = run(["dataset", "export", "-f", "dpo", "-o", str(tmp_path), "--score", "correct"], env)
    assert score.returncode == 2 and "Traceback" not in score.stderr
    assert "--score: 'correct' is not a score source: use reward, reward:NAME" in score.stderr


def test_import__hermes_rows_and_env_rl_logs_land_as_verified_sessions(
    topics: Topics, tmp_path: Path
) -> None:
    from rolltape.projections.exporters import parse_sharegpt_row
    from tests.support.env_rl_fixture import write_run
    from tests.unit.projections.test_importers import HERMES_ROW

    env = {**topics.env(), "COLUMNS": "200"}
    rows = tmp_path / "runs.jsonl"
    rows.write_text(json.dumps(HERMES_ROW) + "\n{broken\n")
    first = run(["import", "hermes", str(rows)], env)
    assert first.returncode == 1 and "1 session(s) imported (10 events)" in first.stdout
    assert "line 2" in first.stdout
    again = run(["import", "hermes", str(rows)], env)  # the same bytes again: redeliveries
    assert again.returncode == 1
    moved = tmp_path / "renamed.jsonl"  # the same row from another file, at another line
    moved.write_text("\n" + json.dumps(HERMES_ROW) + "\n")
    assert run(["import", "hermes", str(moved)], env).returncode == 0
    verify = run(["log", "verify"], env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    tail = run(["log", "tail", "--from-beginning", "--no-follow"], env)
    assert "list files" in tail.stdout and "terminal" in tail.stdout

    # Prose that quotes the tags comes out of import and export exactly as it was written.
    prose = "The parser splits on '</think><tool_call>', so every word before it must stay."
    quoting = {
        "conversations": [
            {"from": "human", "value": "explain the parser"},
            {"from": "gpt", "value": f"<think>\n</think>\n{prose}"},
        ],
        "completed": True,
    }
    (tmp_path / "quoting.jsonl").write_text(json.dumps(quoting) + "\n")
    assert run(["import", "hermes", str(tmp_path / "quoting.jsonl")], env).returncode == 0
    for fmt in ("openai", "sharegpt"):
        out = tmp_path / f"quoting-{fmt}"
        exported = run(["dataset", "export", "-f", fmt, "-o", str(out), "-s", "hermes-*"], env)
        assert exported.returncode == 0, exported.stdout + exported.stderr
        lines = [json.loads(x) for f in out.glob("*.jsonl") for x in f.read_text().splitlines()]
        if fmt == "openai":
            answers = [
                m["content"] for r in lines for m in r["messages"] if m["role"] == "assistant"
            ]
        else:
            answers = [
                m.content
                for r in lines
                for m in parse_sharegpt_row(r).messages
                if m.role == "assistant"
            ]
        assert prose in answers

    logs = write_run(tmp_path / "judge_logs")
    imported = run(["import", "env-rl", str(logs)], env)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert "env_rl chains verified" in imported.stdout
    assert "where the rule engines disagree" in imported.stdout and "R2" in imported.stdout
    assert "missing_decision" in imported.stdout
    assert run(["log", "verify"], env).returncode == 0
    (logs / "decision_log.jsonl").write_text(
        (logs / "decision_log.jsonl").read_text().replace("NaN", "nan")
    )
    broken = run(["import", "env-rl", str(logs)], env)
    assert (
        broken.returncode == 1
        and "hash mismatch" in broken.stdout
        and "not imported" in broken.stdout
    )


def test_harness__lists_its_scenarios_and_refuses_to_run_without_a_worker(topics: Topics) -> None:
    listed = run(["harness", "scenarios"], {**topics.env(), "COLUMNS": "200"})
    assert listed.returncode == 0, listed.stderr
    for name in ("baseline", "lr_too_high", "batch_of_two", "dead_relu", "deep_sigmoid", "plateau"):
        assert name in listed.stdout
    assert "R7" in listed.stdout and "R6" in listed.stdout
    alone = run(["harness", "run", "--scenario", "baseline"], topics.env())
    assert alone.returncode == 2
    assert (
        "no `rolltape serve worker` is running" in alone.stderr and "--start-worker" in alone.stderr
    )
    unknown = run(["harness", "run", "--scenario", "nope"], topics.env())
    assert unknown.returncode == 2 and "dead_relu" in unknown.stderr
    llm = run(["harness", "run", "--policy", "llm"], {**topics.env(), "ROLLTAPE_MODELS": "{}"})
    assert llm.returncode == 2 and "ROLLTAPE_MODELS" in llm.stderr


def test_report__without_a_selection_or_a_match_says_what_to_pass(
    topics: Topics, tmp_path: Path
) -> None:
    neither = run(["report", "-o", str(tmp_path / "r.html")], topics.env())
    assert neither.returncode == 2 and "--session ID, --task NAME" in neither.stderr
    assert "--prompts TARGET" in neither.stderr
    missing = run(["report", "--session", "nobody", "-o", str(tmp_path / "r.html")], topics.env())
    assert missing.returncode == 2 and "no session 'nobody'" in missing.stderr


def test_bench_capture_peer__measures_rolltape_beside_opentelemetrys_instrumentation() -> None:
    out = run(["bench", "capture", "--peer", "otel", "--calls", "100", "--json"], dict(os.environ))
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout)
    ways = {w["name"]: w for w in figures["ways"]}
    assert set(ways) == {"bare", "rolltape", "otel"} and figures["calls_each"] == 100
    assert ways["bare"]["added_p50_us"] == 0.0
    assert all(w["p50_us"] > 0 for w in ways.values())
    assert figures["ratio_p50"] == ways["rolltape"]["added_p50_us"] / ways["otel"]["added_p50_us"]
    assert "opentelemetry-instrumentation-openai-v2" in figures["otel_versions"]


def test_bench_monitor__runs_and_reports_every_figure() -> None:
    out = run(
        ["bench", "monitor", "--steps", "100", "--block", "10", "--width", "8", "--json"],
        dict(os.environ),
    )
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout)
    (result,) = figures["results"]
    assert result["steps_each"] == 100 and result["plain_step_ms"] > 0
    assert result["monitored_step_ms"] > 0 and result["epoch_end_ms"] > 0


def test_broker_check__on_one_broker_warns_that_nothing_is_replicated(topics: Topics) -> None:
    checked = run(["broker", "check"], {**topics.env(), "COLUMNS": "200"})
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "1 broker(s): a broker's loss loses what only it holds" in checked.stdout
    assert "0 problem(s)" in checked.stdout
