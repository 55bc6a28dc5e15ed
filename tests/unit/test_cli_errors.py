"""Every `rolltape` command ends an error in one line `error: <message>` on stderr and exit code
2, never a traceback: the one error boundary is applied to each command where the app registers
it. The table below drives every command (walked from the app itself, so a new command cannot go
unlisted) into an error without a broker; the boundary's own tests pin what it catches and that a
bug still shows as one."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import typer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import ValidationError
from typer.testing import CliRunner, Result

from rolltape.infra import InfraError
from rolltape.infra.broker import ManagedBroker
from rolltape.infra.cli import app
from rolltape.infra.cli._common import (
    OPTIONAL_MODULES,
    error_boundary,
)
from rolltape.infra.commands import worker_process
from rolltape.processors import ProcessorError
from rolltape.producers import ProducerError
from rolltape.producers.cron import CRON_RUN_ENV
from rolltape.projections import ProjectionError
from rolltape.schemas import RetryPolicy, RolltapeError, SchemaError
from rolltape.schemas.clients import KafkaClientError
from rolltape.schemas.plugins import PluginError

NO_BROKER = "no Kafka broker is configured or running"
"""What every command that needs a broker says when none is configured or running: the state
folder is a fresh one and ROLLTAPE_BOOTSTRAP is unset, so nothing is ever dialled."""
# A cluster address that is never dialled: each case using it fails on its credentials first.
NOWHERE = {"ROLLTAPE_BOOTSTRAP": "127.0.0.1:1", "ROLLTAPE_SASL_USERNAME": "nobody"}
NO_PASSWORD = "ROLLTAPE_SASL_USERNAME=nobody is set without ROLLTAPE_SASL_PASSWORD"
# A closed local port, dialled for real: refused at once, and the Kafka client's own log lines
# about it go to the state folder's client log, so the error line is still the only line.
CLOSED = {"ROLLTAPE_BOOTSTRAP": "127.0.0.1:1"}
REFUSED = "KafkaConnectionError: Unable to bootstrap from"
BAD_SETTING = {"ROLLTAPE_PARTITIONS": "zero"}
BAD_SETTING_SAID = "ROLLTAPE_PARTITIONS: Input should be a valid integer"


@dataclass(frozen=True)
class Case:
    """`rolltape COMMAND... ARGS...` under `env`, reading `stdin`, ends in one error line
    containing `said` (`usage`: in click's usage-error block instead). `{tmp}` in an argument or
    a value is the test's folder, which holds the files `_files` writes."""

    command: tuple[str, ...]
    args: tuple[str, ...] = ()
    said: str = ""
    env: dict[str, str] = field(default_factory=dict)
    usage: bool = False
    stdin: bytes = b""


CASES = [
    # Commands that read the topics fail first through the broker when there is none.
    Case(("log", "tail"), said=NO_BROKER),
    Case(("log", "verify"), said=NO_BROKER),
    Case(("privacy", "erase"), ("--subject", "user-1"), NO_BROKER),
    Case(("privacy", "export-erasures"), ("{tmp}/erasures.jsonl",), NO_BROKER),
    Case(("privacy", "rotate-kek"), said=NO_BROKER),
    Case(
        ("dataset", "purge"),
        ("{tmp}/empty", "--erasures", "{tmp}/rules.json", "--public-key", "{tmp}/judge.pub.pem"),
        "the erasures file does not check out",
    ),
    Case(("log", "verify"), said=REFUSED, env=CLOSED),
    Case(("log", "tail"), ("--no-follow",), REFUSED, env=CLOSED),
    Case(("dataset", "export"), ("-f", "sharegpt", "-o", "{tmp}/out"), REFUSED, env=CLOSED),
    Case(("serve", "projector"), said=NO_BROKER),
    Case(
        ("serve", "projector"), ("--judge-version", "Bad Label"), "a judge version is", usage=True
    ),
    Case(("demo",), said=NO_PASSWORD, env=NOWHERE),
    Case(("demo",), said=BAD_SETTING_SAID, env=BAD_SETTING),
    Case(
        ("serve", "worker"),
        said="{tmp}/rules.json",
        env={"ROLLTAPE_RULES_FILE": "{tmp}/rules.json"},
    ),
    Case(
        ("dataset", "export"),
        ("-f", "dpo", "-o", "{tmp}/out", "--score", "correct"),
        "--score: 'correct' is not a score source",
    ),
    Case(("dataset", "export"), ("-f", "sharegpt", "-o", "{tmp}/out"), NO_BROKER),
    Case(
        ("dataset", "verify"),
        ("{tmp}/empty", "--public-key", "{tmp}/judge.pub.pem"),
        "holds no export",
    ),
    Case(
        ("dataset", "verify"),
        ("{tmp}/empty", "--public-key", "{tmp}/missing.pem"),
        "missing.pem: No such file or directory (ENOENT)",
    ),
    Case(
        ("dataset", "verify"),
        ("{tmp}/empty", "--public-key", "{tmp}/rules.json"),
        "pass the judge's public key as `rolltape keys export FILE` writes it",
    ),
    Case(
        ("log", "replay"),
        ("--judge-version", "v2", "--dry-run"),
        "{tmp}/rules.json",
        env={"ROLLTAPE_RULES_FILE": "{tmp}/rules.json"},
    ),
    Case(("report",), ("--session", "s-1", "-o", "{tmp}/r.html"), NO_BROKER),
    Case(
        ("report",),
        ("-o", "{tmp}/r.html"),
        "--session ID, --task NAME or --prompts TARGET",
        usage=True,
    ),
    Case(("report",), ("--prompts", "harness.policy", "-o", "{tmp}/r.html"), NO_BROKER),
    Case(
        ("parse",), ("--family", "hermes", "{tmp}/missing.txt"), "{tmp}/missing.txt is not a file"
    ),
    Case(("parse",), ("--family", "nope", "{tmp}/completion.txt"), "unknown model family 'nope'"),
    Case(
        ("parse",), ("--family", "hermes", "{tmp}/binary.txt"), "{tmp}/binary.txt is not UTF-8 text"
    ),
    Case(("parse",), ("--family", "hermes", "-"), "stdin is not UTF-8 text", stdin=b"\xff\xfe"),
    # The managed broker is never started: each of these fails on its credentials first.
    Case(("broker", "up"), said=NO_PASSWORD, env=NOWHERE),
    Case(("broker", "down"), said="not rolltape's to stop", env=NOWHERE),
    Case(("broker", "status"), said=NO_PASSWORD, env=NOWHERE),
    Case(("broker", "check"), said=NO_PASSWORD, env=NOWHERE),
    # `broker logs` reads the managed broker's log files, if any: only a setting can be wrong.
    Case(("broker", "logs"), said=BAD_SETTING_SAID, env=BAD_SETTING),
    Case(("principal", "list"), said="no principals are kept here"),
    Case(("principal", "show"), ("agent",), "no principals are kept here"),
    Case(("principal", "add"), ("boss", "--role", "admin"), "admin is the broker's super user"),
    Case(
        ("keys", "init"),
        said="holds no Ed25519 private key",
        env={"ROLLTAPE_JUDGE_KEY_FILE": "{tmp}/rules.json"},
    ),
    Case(("keys", "show"), said="no judge key at"),
    Case(("keys", "export"), ("{tmp}/judge.pem",), "no judge key at"),
    Case(("schemas", "export"), ("{tmp}/rules.json",), "rules.json: File exists (EEXIST)"),
    # The benchmarks that record need a broker; the others read no settings and no files, so
    # only their options can be wrong.
    Case(("bench", "producer"), said=NO_BROKER),
    Case(("bench", "rules"), said=NO_BROKER),
    Case(("bench", "replay"), said=NO_BROKER),
    Case(("bench", "cluster"), ("--events", "0"), "--events", usage=True),
    Case(("bench", "otlp"), said=NO_BROKER),
    Case(("bench", "batch"), said=NO_BROKER),
    Case(("bench", "prompts"), said=NO_BROKER),
    Case(("bench", "capture"), ("--peer", "zipkin"), "the peer measured is otel", usage=True),
    Case(("bench", "monitor"), ("--block", "0"), "--block", usage=True),
    Case(("bench", "monitor"), ("--network", "vgg"), "the networks are cnn, resnet18", usage=True),
    Case(("bench", "monitor"), ("--device", "tpu"), "cpu or cuda", usage=True),
    Case(("bench", "capture"), ("--calls", "1"), "--calls", usage=True),
    Case(("bench", "evidence"), ("--repeats", "0"), "--repeats", usage=True),
    Case(("bench", "export"), ("--sessions", "0"), "--sessions", usage=True),
    Case(("bench", "tokens"), ("--sessions", "1"), "--sessions", usage=True),
    Case(("bench", "tokens"), said=NO_BROKER),
    Case(("lineage",), (), "name a MODEL, or ask by --subject or --session", usage=True),
    Case(("lineage",), ("gen-1",), said=NO_BROKER),
    Case(("bench", "judges"), ("--calls", "0"), "--calls", usage=True),
    Case(("bench", "index"), ("--sessions", "0"), "--sessions", usage=True),
    Case(("bench", "console"), said=NO_BROKER),
    Case(("import", "hermes"), ("{tmp}/missing.jsonl",), "missing.jsonl is not a file"),
    Case(("import", "env-rl"), ("{tmp}/missing",), "missing is not a folder"),
    Case(("serve", "feed"), ("--url", "http://127.0.0.1:1", "--group-size", "2"), NO_BROKER),
    # The read model: the indexer needs a broker; its queries need a store, and say how to
    # make one when there is none; a wrong filter or address says what is wrong.
    Case(("serve", "index"), said=NO_BROKER),
    # The console needs no broker to start; an address it cannot listen on is said.
    Case(("serve", "console"), ("--host", "203.0.113.1"), "cannot listen on 203.0.113.1:8321"),
    Case(("index", "rebuild"), said=NO_BROKER),
    Case(("index", "status"), said="no read model at"),
    Case(("sessions", "list"), said="start the indexer (`rolltape serve index`)"),
    Case(("review", "queue"), said="no read model at"),
    Case(("review", "agreement"), said="no read model at"),
    Case(("review", "record"), ("s-1", "pass"), "no read model at"),
    Case(("review", "prefer"), ("s-1", "s-2"), "no read model at"),
    Case(("sessions", "list"), ("--status", "done"), "the filter does not read"),
    Case(("sessions", "list"), ("--since", "monday"), "nor a time ago", usage=True),
    Case(("sessions", "show"), ("s-1",), "no read model at"),
    Case(("sessions", "search"), ("parser",), "no read model at"),
    Case(
        ("sessions", "sql"),
        ("SELECT 1",),
        "is neither sqlite:PATH nor postgresql://",
        env={"ROLLTAPE_INDEX_URL": "mysql://db"},
    ),
    Case(
        ("harness", "run"),
        ("--policy", "llm"),
        "the llm policy needs",
        env={"ROLLTAPE_MODELS": "{}"},
    ),
    Case(("harness", "run"), ("--scenario", "nope"), "dead_relu", usage=True),
    Case(("serve", "otlp"), ("--family", "nope"), "--family: unknown model family 'nope'"),
    Case(("serve", "otlp"), ("--workers", "0"), "--workers", usage=True),
    Case(
        ("serve", "otlp"),
        said="ROLLTAPE_MODELS does not read: a list or mapping setting is written as JSON",
        env={"ROLLTAPE_MODELS": "not json"},
    ),
    Case(("prompts", "list"), said=NO_BROKER),
    Case(("prompts", "show"), ("harness.policy",), NO_BROKER),
    Case(("prompts", "diff"), ("harness.policy", "v000"), NO_BROKER),
    Case(("prompts", "champion"), ("harness.policy",), NO_BROKER),
    Case(("prompts", "scoreboard"), ("harness.policy",), NO_BROKER),
    Case(("prompts", "explain"), ("harness.policy", "2"), NO_BROKER),
    Case(("prompts", "rejudge"), ("harness.policy", "--judge-version", "v2"), NO_BROKER),
    Case(("prompts", "rejudge"), ("harness.policy",), "--judge-version", usage=True),
    Case(("prompts", "evolve"), ("env.bugfix",), "the loop runs harness.policy, env.bugfix.system"),
    Case(
        ("prompts", "evolve"),
        ("env.bugfix.system",),
        "scored by the worker's reward:final_reward verdicts: set ROLLTAPE_REWARDS",
        env={
            "ROLLTAPE_MODELS": '{"tuner": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}, '
            '"agent": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}}'
        },
    ),
    Case(("prompts", "evolve"), ("harness.policy",), "logical model 'tuner': set ROLLTAPE_MODELS"),
    Case(
        ("prompts", "evolve"),
        ("harness.policy", "--learn", "plateau", "--heldout", "plateau:3"),
        "both learned from and held out",
        usage=True,
    ),
    Case(
        ("prompts", "evolve"),
        ("harness.policy", "--heldout", "plateau:first"),
        "a case is SCENARIO or SCENARIO:SEED",
        usage=True,
    ),
    Case(
        ("prompts", "evolve"),
        ("harness.policy", "--heldout", "no_such_scenario"),
        "no_such_scenario: not a harness scenario",
        env={
            "ROLLTAPE_MODELS": '{"tuner": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}, '
            '"policy": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}}'
        },
    ),
    Case(
        ("prompts", "add"), ("harness.policy", "--file", "{tmp}/missing.txt"), "--file", usage=True
    ),
    Case(("prompts", "add"), ("harness.policy", "--file", "{tmp}/empty"), "--file", usage=True),
    Case(("rules", "calibrate"), ("-o", "{tmp}/r.json", "--quantiles", "0.99,0.01"), "low < high"),
    Case(("rules", "calibrate"), ("-o", "{tmp}/r.json", "--base", "{tmp}/missing.json"), "--base"),
    Case(("rules", "evaluate"), ("--ruleset", "{tmp}/missing.json"), "--ruleset: no rule-set file"),
    Case(("rules", "evaluate"), ("--task", "cifar"), "--task: only the reference task's"),
    Case(("rules", "calibrate"), ("-o", "{tmp}/r.json", "--task", "cifar"), "with --from-log"),
    Case(("rules", "calibrate"), ("-o", "{tmp}/r.json", "--session", "s"), "add --from-log"),
    Case(("rules", "calibrate"), ("-o", "{tmp}/r.json", "--from-log"), NO_BROKER),
    Case(
        ("rules", "calibrate"),
        ("-o", "{tmp}/r.json", "--from-log", "--epochs", "3"),
        "--from-log reads recorded ones",
    ),
    Case(
        ("rules", "evaluate"),
        env={"ROLLTAPE_RULES_BY_TASK": '{"x": "{tmp}/no.json"}'},
        said="no.json",
    ),
    Case(
        ("rules", "list"),
        env={"ROLLTAPE_RULES_FILE": "{tmp}/rules.json"},
        said="rules.json is not JSON",
    ),
    Case(
        ("serve", "cron"),
        said="model 'agent': unknown model family 'qwen3-coder'; known: apertus",
        env={
            "ROLLTAPE_MODELS": '{"agent": {"base_url": "http://h/v1", "model": "m", '
            '"family": "qwen3-coder"}}'
        },
    ),
    Case(
        ("cron", "add"),
        ("--schedule", "every 6h", "--task", "x"),
        "recursion guard",
        env={CRON_RUN_ENV: "job@1"},
    ),
    Case(
        ("cron", "add"),
        ("--schedule", "every 6h", "--task", ""),
        "--task: String should have at least 1 character",
    ),
    Case(("cron", "pause"), ("ci",), "recursion guard", env={CRON_RUN_ENV: "job@1"}),
    Case(("cron", "resume"), ("ci",), "recursion guard", env={CRON_RUN_ENV: "job@1"}),
    Case(("cron", "remove"), ("ci",), "recursion guard", env={CRON_RUN_ENV: "job@1"}),
    # Reading the jobs needs the broker before anything else.
    Case(("cron", "list"), said=NO_BROKER),
    Case(("cron", "runs"), ("ci",), NO_BROKER),
    Case(("cron", "failures"), said=NO_BROKER),
    Case(("cron", "review"), said=NO_BROKER),
    Case(("serve", "cron"), said=NO_BROKER),
    Case(("cron", "to-env"), ("ci", "-o", "{tmp}/items.jsonl"), NO_BROKER),
    Case(("env", "evaluate"), ("nope",), "unknown environment 'nope'"),
    Case(("env", "process"), ("bugfix", "--items", "1", "-o", "{tmp}/out"), "no endpoint is bound"),
    Case(
        ("serve", "env"),
        ("jsonl:{tmp}/missing.jsonl", "--url", "http://127.0.0.1:1"),
        "cannot read items from {tmp}/missing.jsonl",
    ),
    Case(("env", "run"), ("nope", "--items", "1"), "unknown environment 'nope'"),
]

NO_ERROR_PATH = {
    ("env", "list"): "lists the shipped environments: reads no settings, files or broker",
    ("harness", "scenarios"): "lists the shipped scenarios; without the torch extra it fails "
    "as test_boundary__a_missing_optional_dependency_names_the_extra_to_install pins",
}


def _command_paths(typer_app: typer.Typer, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    paths = set()
    for info in typer_app.registered_commands:
        assert info.callback is not None
        paths.add((*prefix, info.name or info.callback.__name__.replace("_", "-")))
    for group in typer_app.registered_groups:
        assert group.typer_instance is not None and group.name is not None
        paths |= _command_paths(group.typer_instance, (*prefix, group.name))
    return paths


def _callbacks(typer_app: typer.Typer) -> Iterator[object]:
    for info in typer_app.registered_commands:
        yield info.callback
    for group in typer_app.registered_groups:
        assert group.typer_instance is not None
        yield from _callbacks(group.typer_instance)


@pytest.fixture(autouse=True)
def no_broker_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """No case may start the managed broker (it fetches jars) or a worker process."""

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a CLI error test started a broker or a worker")

    monkeypatch.setattr(ManagedBroker, "start", refuse)
    monkeypatch.setattr(worker_process.WorkerProcess, "__init__", refuse)


def _files(tmp: Path) -> None:
    (tmp / "empty").mkdir()
    (tmp / "rules.json").write_text("not json\n")
    (tmp / "completion.txt").write_text("hello\n")
    (tmp / "binary.txt").write_bytes(b"\xff\xfe\x00bad")
    key = Ed25519PrivateKey.generate().public_key()
    (tmp / "judge.pub.pem").write_bytes(
        key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _invoke(case: Case, tmp: Path) -> Result:
    def placed(text: str) -> str:
        return text.replace("{tmp}", str(tmp))

    # The user's own ROLLTAPE_* variables are unset for the call (None), ours set; the cron
    # scheduler marks the process it runs in, so that variable is restored after every call.
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("ROLLTAPE_")}
    env |= {
        CRON_RUN_ENV: None,
        "ROLLTAPE_STATE_DIR": str(tmp / "state"),
        "ROLLTAPE_CACHE_DIR": str(tmp / "cache"),
        "NO_COLOR": "1",
        "COLUMNS": "100",
    }
    env |= {name: placed(value) for name, value in case.env.items()}
    argv = [*case.command, *(placed(arg) for arg in case.args)]
    return CliRunner().invoke(app, argv, input=case.stdin, env=env, catch_exceptions=True)


def test_cli__every_command_has_an_error_case_or_a_reason_it_has_none() -> None:
    registered = _command_paths(app)
    covered = {case.command for case in CASES} | set(NO_ERROR_PATH)
    assert registered - covered == set(), "add a Case for each new command"
    assert covered - registered == set(), "a Case names a command the app does not have"


def test_cli__every_command_is_registered_behind_the_error_boundary() -> None:
    callbacks = list(_callbacks(app))
    assert len(callbacks) == len(_command_paths(app)) > 40
    for callback in callbacks:
        assert callable(callback)
        assert error_boundary(callback) is callback, callback  # bounding it again: a no-op


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: "-".join((*c.command, *(a for a in c.args if a[:1] == "-")))
)
def test_cli__every_command_ends_an_error_in_one_line_and_exit_2(
    case: Case, tmp_path: Path
) -> None:
    _files(tmp_path)
    result = _invoke(case, tmp_path)
    said = case.said.replace("{tmp}", str(tmp_path))
    everything = result.stdout + result.stderr
    assert "Traceback" not in everything
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 2, everything
    if case.usage:
        assert "Usage:" in result.stderr and said in result.stderr, result.stderr
        return
    lines = [line for line in _plain(result.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and said in lines[0], lines[0]


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


ROOTS = [
    SchemaError("a record that is not an envelope"),
    KafkaClientError("the cluster at host:9092 does not answer; is the broker running?"),
    PluginError("cannot import plugin module 'nope'"),
    ProducerError("the spool is full"),
    ProcessorError("rules.json is not a rule set"),
    ProjectionError("the trainer refused the group"),
    InfraError("the export folder holds something else"),
]


def test_every_package_root_is_a_rolltape_error() -> None:
    """One `except RolltapeError` catches what any package raises on purpose."""
    assert all(isinstance(e, RolltapeError) for e in ROOTS)
    assert len({type(e) for e in ROOTS}) == 7


@pytest.mark.parametrize("error", ROOTS, ids=lambda e: type(e).__name__)
def test_boundary__turns_each_package_root_into_its_message_on_one_line_and_exit_2(
    error: Exception, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _bounded_failure(error, capsys) == f"error: {error}"


def test_boundary__an_os_error_names_the_file_and_the_errno(
    capsys: pytest.CaptureFixture[str],
) -> None:
    error = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), "/nowhere/rules.json")
    said = _bounded_failure(error, capsys)
    assert said == "error: /nowhere/rules.json: No such file or directory (ENOENT)"


def test_boundary__an_options_validation_error_names_each_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ValidationError) as invalid:
        RetryPolicy(max_attempts=0, base_s=-1)
    said = _bounded_failure(invalid.value, capsys)
    assert said.startswith("error: --max-attempts: Input should be greater than or equal to 1; ")
    assert "--base-s: Input should be greater than 0" in said


def test_boundary__a_missing_optional_dependency_names_the_extra_to_install(
    capsys: pytest.CaptureFixture[str],
) -> None:
    missing = ModuleNotFoundError("No module named 'plotly'", name="plotly")
    said = _bounded_failure(missing, capsys)
    assert said == "error: No module named 'plotly': pip install 'rolltape[report]'"
    try:  # as rolltape.producers.training says it: its advice is kept as it is
        try:
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        except ImportError as exc:
            raise ImportError("training needs PyTorch: pip install 'rolltape[torch]'") from exc
    except ImportError as told:
        wrapped = told
    assert _bounded_failure(wrapped, capsys) == (
        "error: training needs PyTorch: pip install 'rolltape[torch]'"
    )


def test_boundary__a_message_of_several_lines_is_printed_on_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    error = InfraError("the worker did not start:\nline one\n\n  line two\n")
    said = _bounded_failure(error, capsys)
    assert said == "error: the worker did not start: | line one | line two"


def test_boundary__prints_markup_in_a_message_as_written(
    capsys: pytest.CaptureFixture[str],
) -> None:
    error = ProducerError("LLM judges need the openai client: pip install 'rolltape[openai]'")
    assert _bounded_failure(error, capsys) == f"error: {error}"


@pytest.mark.parametrize(
    "bug",
    [
        ZeroDivisionError("division by zero"),
        ValueError("a plain ValueError is ours to fix, not the user's"),
        KeyError("missing"),
        ModuleNotFoundError("No module named 'rolltape.nope'", name="rolltape.nope"),
        ModuleNotFoundError("No module named 'aiokafka'", name="aiokafka"),
        KeyboardInterrupt(),
    ],
    ids=lambda e: type(e).__name__ + (f"-{e.name}" if isinstance(e, ImportError) else ""),
)
def test_boundary__lets_a_bug_and_ctrl_c_through_as_they_are(
    bug: BaseException, capsys: pytest.CaptureFixture[str]
) -> None:
    def command() -> None:
        raise bug

    with pytest.raises(type(bug)) as raised:
        error_boundary(command)()
    assert raised.value is bug
    assert capsys.readouterr().err == ""


def test_boundary__each_optional_module_names_an_extra_the_package_declares() -> None:
    from importlib.metadata import metadata

    extras = set(metadata("rolltape").get_all("Provides-Extra") or ())
    assert set(OPTIONAL_MODULES.values()) <= extras


def test_boundary__keeps_what_typer_reads_of_a_command() -> None:
    def command(count: int = 3) -> int:
        """Count things."""
        return count

    bounded = error_boundary(command)
    assert bounded.__name__ == "command" and bounded.__doc__ == "Count things."
    assert bounded(count=4) == 4


def _bounded_failure(error: BaseException, capsys: pytest.CaptureFixture[str]) -> str:
    def command() -> None:
        raise error

    capsys.readouterr()
    with pytest.raises(typer.Exit) as exited:
        error_boundary(command)()
    assert exited.value.exit_code == 2
    assert exited.value.__cause__ is error
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = [line for line in _plain(captured.err).splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    return lines[0]


def test_cli__a_refused_connection_is_one_line_and_the_clients_own_lines_go_to_its_log(
    tmp_path: Path,
) -> None:
    """In its own process (the test runner's log capture would hide the client's lines): the
    Kafka client logs each failed connection, which a command printed before its error line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLTAPE_")}
    env.update(CLOSED, ROLLTAPE_STATE_DIR=str(tmp_path / "state"))
    done = subprocess.run(
        [sys.executable, "-m", "rolltape.infra", "log", "verify"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in _plain(done.stderr).splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ") and REFUSED in lines[0]
    assert "Unable connect" in (tmp_path / "state" / "logs" / "client.log").read_text()
