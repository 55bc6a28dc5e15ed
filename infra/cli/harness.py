"""`rolltape harness`: monitored training attempts of the reference task with a decision policy."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from rolltape.infra.cli._common import console, settings
from rolltape.infra.commands.harness import REFERENCE_TASK, PolicyName, run_harness, scenarios

if TYPE_CHECKING:  # the training package needs torch: imported where a command runs
    from rolltape.infra.commands.harness import SelfRefineResult

app = typer.Typer(
    help="Train the reference CNN under the monitor, act on the worker's rule firings.",
    no_args_is_help=True,
)


@app.command("scenarios")
def scenarios_command() -> None:
    """List the named scenarios: the rules each is built to provoke, and those it fires under
    the reference task's default rule set (`rolltape rules list`)."""
    table = Table(
        title="scenarios of the reference task (digits CNN); fires: under the default rule set",
        title_justify="left",
    )
    for col in ("name", "provokes", "fires", "epochs", "what it does"):
        table.add_column(col, no_wrap=col == "name")
    for s in scenarios().values():
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
    known = scenarios()
    if scenario not in known:
        raise typer.BadParameter(
            f"{scenario!r}; known: {', '.join(known)}", param_hint="--scenario"
        )
    bad = [r for r in waive or () if r not in {f"R{i}" for i in range(1, 8)}]
    if bad:
        raise typer.BadParameter(f"{', '.join(bad)}: rules are R1..R7", param_hint="--waive")

    def started(policy_name: str) -> None:
        console.print(
            f"training {known[scenario].description} ({attempts} attempt(s), {policy_name} policy)"
        )

    result = run_harness(
        settings(),
        scenario=scenario,
        attempts=attempts,
        policy=policy,
        prompt_ref=prompt_ref,
        epochs=epochs,
        seed=seed,
        waive=tuple(waive or ()),
        start_worker=start_worker,
        on_prompt=lambda said: console.print(f"policy prompt: {said}", highlight=False),
        on_start=started,
    )
    print_attempts(result)
    console.print(f"report: rolltape report --task {REFERENCE_TASK}/{scenario} -o report.html")


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
