"""`rolltape cron`: jobs as a continuous task source (add, list, pause, resume, remove, runs,
failures, review, to-env); their scheduler is `rolltape serve cron`."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.markup import escape
from rich.table import Table

from rolltape.infra.cli._common import (
    CliError,
    ScoreOption,
    console,
    err_console,
    option_problems,
    say,
    settings,
    stop_on_signals,
)
from rolltape.infra.commands.cron import (
    DEFAULT_MODEL,
    CronJob,
    CronRun,
    JobSpec,
    RetryPolicy,
    RunStatus,
    ValidationError,
    add_job,
    change_job,
    failure_queue,
    guard_against_recursion,
    job_book,
    job_lines,
    job_runs,
    review_queue,
    serve_scheduler,
)

app = typer.Typer(
    help="Cron jobs: each due run is a fresh agent session; statuses are routed to queues.",
    no_args_is_help=True,
)

_NS = 1_000_000_000
JobArgument = Annotated[str, typer.Argument(help="The job's id (see `rolltape cron list`).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON: one object per line.")]


def _when(ns: int | None, now_ns: int | None = None) -> str:
    if ns is None:
        return "-"
    stamp = datetime.fromtimestamp(ns / _NS, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    if now_ns is None:
        return stamp
    delta = (ns - now_ns) // _NS
    words = _duration(abs(delta))
    return f"{stamp} ({'in ' + words if delta >= 0 else 'due ' + words + ' ago'})"


def _duration(seconds: int) -> str:
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            count, seconds = divmod(seconds, size)
            parts.append(f"{count}{unit}")
    return " ".join(parts[:2])


def _jobs_action(action: Literal["pause", "resume", "remove"], job_id: str) -> CronJob:
    guard_against_recursion(f"{action} cron job {job_id!r}")
    return change_job(settings(), action, job_id)


@app.command()
def add(
    schedule: Annotated[
        str,
        typer.Option(
            help="When: a cron expression ('0 9 * * MON-FRI'), an interval ('every 6h') or a "
            "phrase ('daily at 09:00')."
        ),
    ],
    task: Annotated[str, typer.Option(help="The task each run starts with (its prompt).")],
    job_id: Annotated[
        str | None, typer.Option("--id", help="The job's id (default: from the prompt).")
    ] = None,
    tz: Annotated[str, typer.Option(help="IANA time zone of the schedule's clock times.")] = "UTC",
    skills: Annotated[
        list[str] | None, typer.Option("--skill", help="A skill the run may use (repeatable).")
    ] = None,
    workdir: Annotated[
        str | None, typer.Option(help="Folder the run's tools work in (must exist).")
    ] = None,
    deliver: Annotated[
        str | None,
        typer.Option(help="Where results go: file:PATH, webhook:URL or a registered channel."),
    ] = None,
    runner: Annotated[
        str | None, typer.Option(help="module:function that runs the job (see README).")
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="Logical model (ROLLTAPE_MODELS binds it to an endpoint) the runner asks."
        ),
    ] = None,
    max_attempts: Annotated[int, typer.Option(min=1, max=100, help="Attempts per run.")] = 3,
    backoff: Annotated[
        float, typer.Option(min=0.001, help="Seconds before the first retry; doubles after.")
    ] = 60.0,
    max_backoff: Annotated[float, typer.Option(min=0.001, help="Longest wait between retries.")] = (
        3600.0
    ),
    timeout: Annotated[int, typer.Option(min=1, help="Seconds an attempt may take.")] = 3600,
) -> None:
    """Create a job. Its definition is a record on the jobs topic; `rolltape serve cron` fires it."""
    guard_against_recursion("create a cron job")
    spec = _spec(
        schedule=schedule,
        prompt=task,
        job_id=job_id,
        timezone=tz,
        skills=tuple(skills or ()),
        workdir=workdir,
        deliver=deliver,
        runner=runner,
        model=model,
        retry=RetryPolicy(max_attempts=max_attempts, base_s=backoff, max_s=max_backoff),
        timeout_s=timeout,
    )
    job, book = add_job(settings(), spec)
    now = time.time_ns()
    console.print(
        f"added job {job.job_id}: {book.schedule(job.job_id).describe()}; next run "
        f"{_when(book.next_due(job.job_id), now)}"
    )
    if job.runner is None:
        console.print(
            f"runs the reference agent with model {job.model or DEFAULT_MODEL!r} "
            "(bound to an endpoint by ROLLTAPE_MODELS where the scheduler runs)"
        )
    console.print("the scheduler fires it: rolltape serve cron")


def _spec(**fields: Any) -> JobSpec:
    """The job's spec; its prompt is the `--task` option."""
    try:
        return JobSpec(**fields)
    except ValidationError as exc:
        raise CliError(option_problems(exc, {"prompt": "task"})) from exc


@app.command("list")
def list_(
    all_: Annotated[bool, typer.Option("--removed", help="Include removed jobs.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Every job with its schedule, state, next run and last run's status."""
    lines = job_lines(job_book(settings()), removed=all_)
    now = time.time_ns()
    if as_json:
        for line in lines:
            print(json.dumps(line.job.model_dump(mode="json"), sort_keys=True))
        return
    if not lines:
        console.print("no jobs; add one with: rolltape cron add --schedule 'every 6h' --task ...")
        return
    table = Table(title_justify="left", title="cron jobs")
    for column in ("job", "schedule", "state", "next run", "last run"):
        table.add_column(column)
    for line in lines:
        job, run = line.job, line.last
        table.add_row(
            job.job_id,
            f"{job.schedule} ({job.timezone})" if job.timezone != "UTC" else job.schedule,
            job.state.value,
            _when(line.next_due_ns, now),
            f"{run.status.value} ({_when(run.due_ns)})" if run else "-",
        )
    console.print(table)


@app.command()
def pause(job_id: JobArgument) -> None:
    """Stop firing a job until it is resumed (ticks missed while paused are not owed)."""
    _jobs_action("pause", job_id)
    console.print(f"paused {job_id}")


@app.command()
def resume(job_id: JobArgument) -> None:
    """Fire a paused job again, from its next tick."""
    _jobs_action("resume", job_id)
    console.print(f"resumed {job_id}")


@app.command()
def remove(job_id: JobArgument) -> None:
    """Remove a job; its runs and their sessions stay in the log."""
    _jobs_action("remove", job_id)
    console.print(f"removed {job_id}")


def _print_runs(runs: list[CronRun], as_json: bool, empty: str) -> None:
    if as_json:
        for run in runs:
            print(json.dumps(run.model_dump(mode="json"), sort_keys=True))
        return
    if not runs:
        console.print(empty)
        return
    table = Table(title_justify="left")
    for column in ("run", "attempt", "status", "reason", "session", "delivery"):
        table.add_column(column, overflow="fold")
    for run in runs:
        status = run.status.value
        if run.retry_at_ns is not None:
            status += f" (retry {_when(run.retry_at_ns)})"
        table.add_row(
            run.run_id,
            str(run.attempt),
            status,
            escape(run.reason or ""),
            run.session_id,
            escape(run.delivery or ""),
        )
    console.print(table)


@app.command()
def runs(job_id: JobArgument, as_json: JsonOption = False) -> None:
    """A job's runs, oldest first, each with its latest status and session."""
    _print_runs(job_runs(job_book(settings()), job_id), as_json, f"{job_id} has not run yet")


@app.command()
def failures(
    job_id: Annotated[str | None, typer.Option("--job", help="Only this job's.")] = None,
    as_json: JsonOption = False,
) -> None:
    """The failure queue: runs that failed for good, runs waiting for a retry, and runs whose
    delivery failed, with the reason."""
    _print_runs(failure_queue(job_book(settings()), job_id), as_json, "no failures")


@app.command()
def review(
    job_id: Annotated[str | None, typer.Option("--job", help="Only this job's.")] = None,
    as_json: JsonOption = False,
) -> None:
    """The review queue: runs whose runner said a person must look, with the reason."""
    _print_runs(review_queue(job_book(settings()), job_id), as_json, "nothing to review")


def scheduler(
    max_concurrent: Annotated[
        int, typer.Option(min=1, help="Runs executing at once in this scheduler.")
    ] = 4,
    max_iterations: Annotated[
        int, typer.Option(min=1, help="Model calls per run of the reference agent.")
    ] = 10,
) -> None:
    """The scheduler: fire due jobs of the partitions this process owns (run several to share
    them), one fresh session per attempt, statuses routed, results delivered. Ctrl-C stops."""
    scheduler = serve_scheduler(
        settings(),
        max_concurrent=max_concurrent,
        max_iterations=max_iterations,
        on_write=_report,
        on_owned=lambda owned: err_console.print(owned.line(), highlight=False),
    )

    async def main() -> None:
        err_console.print(
            f"scheduler {scheduler.instance}: firing due jobs; Ctrl-C stops", highlight=False
        )
        await scheduler.run(stop_on_signals())

    asyncio.run(main())
    err_console.print(f"stopped: {scheduler.fired} attempt(s) fired", highlight=False)


def _report(run: CronRun) -> None:
    line = f"{run.run_id} attempt {run.attempt}: {run.status.value}"
    if run.status == RunStatus.RUNNING:
        line += f" (session {run.session_id})"
    if run.reason:
        line += f": {run.reason}"
    if run.retry_at_ns is not None:
        line += f"; retry at {_when(run.retry_at_ns)}"
    if run.delivery:
        line += f"; delivery {run.delivery}"
    err_console.print(escape(line), highlight=False)


__all__ = ["app"]


@app.command("to-env")
def to_env(
    job_id: JobArgument,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Where to write the items file (JSONL).")
    ],
    min_reward: Annotated[
        float | None,
        typer.Option(
            help="Keep runs whose session scores at least this (runs without a score are left out)."
        ),
    ] = None,
    include_failures: Annotated[
        bool,
        typer.Option("--include-failures", help="Also failed runs (their task, no reference)."),
    ] = False,
    score: ScoreOption = "reward",
) -> None:
    """Turn a job's successful runs (and, with --include-failures, its failed ones) into
    environment items: the job's prompt, skills and workdir, the answer a successful run gave as
    the reference, and the run it came from. Run them with `rolltape env evaluate jsonl:FILE
    --split train` (or batch run, process, serve)."""
    from rolltape.infra.commands.cron import cron_items

    report = asyncio.run(
        cron_items(
            settings(),
            job_id,
            min_reward=min_reward,
            include_failures=include_failures,
            score=score,
            say=say,
        )
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        "".join(
            json.dumps(item.model_dump(mode="json"), sort_keys=True) + "\n" for item in report.items
        )
    )
    skipped = ", ".join(f"{k} {v}" for k, v in report.skipped.items()) or "none"
    console.print(f"wrote {len(report.items)} item(s) to {out}; skipped runs: {skipped}")
    console.print(f"run them: rolltape env evaluate jsonl:{out} --split train")
