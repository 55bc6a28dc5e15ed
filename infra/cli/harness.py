"""`rolltape harness`: monitored training attempts of the reference task with a decision policy."""

from __future__ import annotations

import asyncio
import importlib.util
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from rolltape.infra import open_monitor_recorder, open_recorder
from rolltape.infra.broker import require_connection
from rolltape.infra.cli._common import CliError, console, settings
from rolltape.infra.commands.prompts import prompt_for
from rolltape.infra.commands.worker import can_provision
from rolltape.infra.commands.worker_process import WorkerProcess, worker_running
from rolltape.infra.kafka.topics import provision
from rolltape.infra.settings import Settings
from rolltape.schemas import POLICY_PROMPT_TARGET, REFERENCE_TASK, PromptVersion, Role

if TYPE_CHECKING:  # the training package needs torch: imported where a command runs
    from rolltape.producers.training import SelfRefineResult

app = typer.Typer(
    help="Train the reference CNN under the monitor, act on the worker's rule firings.",
    no_args_is_help=True,
)


class PolicyName(StrEnum):
    """Who decides between attempts (`harness run --policy`): the scripted playbook, or an LLM
    through the endpoint ROLLTAPE_MODELS binds to the logical model `policy`."""

    scripted = "scripted"
    llm = "llm"


@app.command()
def scenarios() -> None:
    """List the named scenarios: the rules each is built to provoke, and those it fires under
    the reference task's default rule set (`rolltape rules list`)."""
    from rolltape.producers.training import SCENARIOS

    table = Table(
        title="scenarios of the reference task (digits CNN); fires: under the default rule set",
        title_justify="left",
    )
    for col in ("name", "provokes", "fires", "epochs", "what it does"):
        table.add_column(col, no_wrap=col == "name")
    for s in SCENARIOS.values():
        table.add_row(
            s.name,
            ", ".join(s.provokes) or "-",
            ", ".join(s.expected) or "none",
            str(s.epochs),
            s.description,
        )
    console.print(table)


@app.command()
def run(
    attempts: Annotated[int, typer.Option(min=1, help="Self-refine attempts.")] = 2,
    epochs: Annotated[
        int | None,
        typer.Option(min=1, help="Epochs per run (an attempt; default: the scenario's)."),
    ] = None,
    policy: Annotated[
        PolicyName,
        typer.Option(help="scripted (the playbook) or llm (the model bound to 'policy')."),
    ] = PolicyName.scripted,
    scenario: Annotated[
        str, typer.Option(help="The scenario to run (`rolltape harness scenarios` lists them).")
    ] = "baseline",
    waive: Annotated[
        list[str] | None, typer.Option(help="A rule to declare waived (repeatable), e.g. R2.")
    ] = None,
    start_worker: Annotated[
        bool, typer.Option(help="Run a worker for the duration (else one must run).")
    ] = False,
    seed: Annotated[int, typer.Option(help="Seed of the first attempt (+1 per attempt).")] = 0,
    prompt_ref: Annotated[
        str,
        typer.Option(
            "--prompt",
            help="The system prompt (the llm policy's): a version of harness.policy (label, digest "
            "prefix), `champion` (the log's, else the playbook) or `base` (the playbook).",
        ),
    ] = "champion",
) -> None:
    """Self-refine attempts: each a monitored training session of the reference task linked to
    the previous one; attempt k+1's policy sees attempt k's verdict. Needs a worker: the
    harness waits for each epoch's rule evaluation on the rules topic."""
    from rolltape.producers.training import (
        SCENARIOS,
        Harness,
        HarnessConfig,
        LLMPolicy,
        Policy,
        ScriptedPolicy,
        rules_and_verdicts_follower,
    )

    if scenario not in SCENARIOS:
        raise typer.BadParameter(
            f"{scenario!r}; known: {', '.join(SCENARIOS)}", param_hint="--scenario"
        )
    bad = [r for r in waive or () if r not in {f"R{i}" for i in range(1, 8)}]
    if bad:
        raise typer.BadParameter(f"{', '.join(bad)}: rules are R1..R7", param_hint="--waive")
    s = settings()
    if policy is PolicyName.llm and importlib.util.find_spec("openai") is None:
        raise CliError("the llm policy needs the openai client: pip install 'rolltape[openai]'")
    if policy is PolicyName.llm and "policy" not in s.models:
        raise CliError(
            "the llm policy needs an endpoint for the logical model 'policy': set "
            'ROLLTAPE_MODELS, e.g. \'{"policy": {"base_url": "http://host:8000/v1", "model": "m"}}\''
        )
    prompt = _policy_prompt(s, prompt_ref) if policy is PolicyName.llm else None
    if can_provision(s):
        provision(s)
    with running_worker(s, start_worker):
        agent = open_recorder(s)
        monitor = open_monitor_recorder(s)
        follower = rules_and_verdicts_follower(require_connection(s, Role.MONITOR), s.topic_prefix)
        try:
            chosen: Policy = (
                LLMPolicy(s.models["policy"], agent, prompt=prompt)
                if policy is PolicyName.llm
                else ScriptedPolicy()
            )
            harness = Harness(
                agent=agent,
                monitor_recorder=monitor,
                follower=follower,
                policy=chosen,
                config=HarnessConfig(
                    epochs=epochs,
                    seed=seed,
                    waived_rules=tuple(waive or ()),
                ),
            )
            console.print(
                f"training {SCENARIOS[scenario].description} ({attempts} attempt(s), "
                f"{chosen.name} policy)"
            )
            result = harness.self_refine(SCENARIOS[scenario], attempts)
        finally:
            follower.close()
            monitor.close()
            agent.close()
    print_attempts(result)
    console.print(f"report: rolltape report --task {REFERENCE_TASK}/{scenario} -o report.html")


def _policy_prompt(s: Settings, ref: str) -> PromptVersion | None:
    """The version `--prompt` names (None: the playbook, unrecorded)."""
    version, said = asyncio.run(prompt_for(s, POLICY_PROMPT_TARGET, ref))
    console.print(f"policy prompt: {said}", highlight=False)
    return version


def print_attempts(result: SelfRefineResult) -> None:
    """The attempts of a self-refine run with the judge's scores, then every violation."""
    table = Table(
        title=f"self-refine run {result.run_id} ({result.policy} policy): the judge's scores",
        title_justify="left",
    )
    for col in ("#", "session", "process", "accuracy", "decisions"):
        table.add_column(col, no_wrap=True)
    for a in result.attempts:
        failed = a.verdict.status == "failed"
        table.add_row(
            f"{a.attempt}{'*' if a.attempt == result.best else ''}",
            a.session_id,
            "failed" if failed else f"{a.process_score:.3f}",
            "failed" if failed else f"{a.accuracy_score:.3f}",
            f"{a.decisions}, {a.applied} applied",
        )
    console.print(table)
    tests = ", ".join(f"{a.attempt}: {a.test_accuracy:.3f}" for a in result.attempts)
    console.print(
        f"* best by (process_score, accuracy_score); test accuracy measured by the harness: {tests}"
    )
    for a in result.attempts:
        for v in a.verdict.violations:
            where = " ".join(
                x for x in (v.rule or "", "" if v.epoch is None else f"epoch {v.epoch}") if x
            )
            console.print(f"  attempt {a.attempt}: {v.code} ({where}): {escape(v.message)}")


@contextmanager
def running_worker(s: Settings, start: bool) -> Iterator[None]:
    """A worker judging for the duration: the one already running, or (with `start`) one run
    here and stopped after."""
    with tempfile.TemporaryDirectory() as logs:
        worker = _worker(s, Path(logs), start)
        try:
            yield
        finally:
            if worker is not None:
                worker.stop()


def _worker(s: Settings, logs: Path, start: bool) -> WorkerProcess | None:
    if not start:
        if not worker_running(s):
            raise CliError(
                "no `rolltape serve worker` is running against "
                f"{require_connection(s, Role.PROCESSOR).bootstrap} (its consumer group "
                f"{s.worker_group} has no members): start one in another shell, or pass "
                "--start-worker"
            )
        return None
    worker = WorkerProcess(s, logs / "worker.log")
    deadline = time.monotonic() + 120
    while not worker_running(s):
        if not worker.alive() or time.monotonic() > deadline:
            worker.stop()
            raise CliError(f"the worker did not start: {worker.log_tail()}")
        time.sleep(0.5)
    return worker
