"""`rolltape sessions list | show | search | sql`: find sessions in the read model.

Recorded text is shown as text: lines are printed with rich's markup off (a table's cells are
escaped), and `--json` prints values as they are stored.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from rolltape.infra.cli._common import CliError, console, err_console, settings
from rolltape.infra.cli.dataset import parse_time
from rolltape.infra.commands.sessions import (
    SessionDetail,
    SessionFilter,
    list_sessions,
    run_sql,
    search_sessions,
    show_session,
)

app = typer.Typer(
    help="Find sessions in the read model: list them by filters, show one whole, search their "
    "text, ask it in SQL (`rolltape serve index` keeps it up to date).",
    no_args_is_help=True,
)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON: what the read model holds.")]

_RELATIVE = re.compile(r"^(\d+)([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_moment(text: str | None, option: str) -> int | None:
    """ISO 8601 (no zone means UTC, as `dataset export` reads it), or a time ago (`30m`,
    `12h`, `7d`, `2w`), to ms."""
    if text is None:
        return None
    relative = _RELATIVE.match(text)
    if relative:
        ago = int(relative.group(1)) * _UNIT_S[relative.group(2)]
        return int((dt.datetime.now(dt.UTC).timestamp() - ago) * 1000)
    try:
        moment_ns = parse_time(text, option)
    except typer.BadParameter as exc:
        raise typer.BadParameter(
            f"{text!r} is neither an ISO 8601 date or time (2026-11-20, 2026-11-20T10:00:00Z) "
            "nor a time ago (30m, 12h, 7d, 2w)",
            param_hint=option,
        ) from exc
    return None if moment_ns is None else moment_ns // 1_000_000


def _filter(**given: Any) -> SessionFilter:
    try:
        return SessionFilter(**{k: v for k, v in given.items() if v not in (None, ())})
    except ValueError as exc:
        raise CliError(f"the filter does not read: {exc}") from exc


def _clock(ms: int | None, *, short: bool = False) -> str:
    if ms is None:
        return "-"
    shape = "%m-%d %H:%M:%S" if short else "%Y-%m-%d %H:%M:%S"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime(shape)


TaskOpt = Annotated[str | None, typer.Option("--task", help="The task: only sessions of it.")]
TagOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--tag",
        help="Only sessions with this tag: key=value (that tag) or key (a label, or any "
        "value); repeatable.",
    ),
]
SinceOpt = Annotated[
    str | None,
    typer.Option(
        "--since",
        help="Only sessions started at or after (ISO 8601) this time, or this long ago (7d).",
    ),
]
UntilOpt = Annotated[
    str | None,
    typer.Option("--until", help="Only sessions started before (ISO 8601) this time, or 7d ago."),
]
StatusOpt = Annotated[
    str | None,
    typer.Option("--status", help="completed, interrupted, failed, or running (no end yet)."),
]
VersionOpt = Annotated[
    str,
    typer.Option(
        "--judge-version", help="The judge version whose verdicts, filters and rules to filter on."
    ),
]


@app.command("list")
def list_(
    task: TaskOpt = None,
    tag: TagOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    status: StatusOpt = None,
    kind: Annotated[str | None, typer.Option("--kind", help="agent or training.")] = None,
    group: Annotated[
        str | None, typer.Option("--in-group", help="The samples of one group (its group_id).")
    ] = None,
    model: Annotated[str | None, typer.Option("--model-name", help="A model it named.")] = None,
    accepted: Annotated[
        bool | None,
        typer.Option(
            "--accepted/--rejected", help="The reward filter's outcome.", show_default=False
        ),
    ] = None,
    reason: Annotated[
        str | None,
        typer.Option("--filter-reason", help="A reward filter's reason code against it."),
    ] = None,
    judge: Annotated[
        str | None, typer.Option("--judge", help="A judge that gave a verdict.")
    ] = None,
    verdict: Annotated[
        str | None, typer.Option("--verdict", help="That verdict's status: ok, failed or error.")
    ] = None,
    score: Annotated[
        str | None, typer.Option("--score-name", help="A verdict score's name.")
    ] = None,
    score_min: Annotated[
        float | None, typer.Option("--score-min", help="The score at least.")
    ] = None,
    score_max: Annotated[
        float | None, typer.Option("--score-max", help="The score at most.")
    ] = None,
    reward_min: Annotated[
        float | None, typer.Option("--reward-min", help="The reward (named `reward`) at least.")
    ] = None,
    reward_max: Annotated[
        float | None, typer.Option("--reward-max", help="The reward at most.")
    ] = None,
    tool: Annotated[str | None, typer.Option("--tool", help="A tool it called.")] = None,
    tool_failed: Annotated[
        bool | None,
        typer.Option(
            "--tool-failed/--tools-ok",
            help="A call (of --tool) failed, or none did.",
            show_default=False,
        ),
    ] = None,
    rule: Annotated[str | None, typer.Option("--rule", help="A rule that fired (R1..R7).")] = None,
    chain: Annotated[str | None, typer.Option("--chain", help="ok or broken.")] = None,
    reviewed: Annotated[
        bool | None,
        typer.Option(
            "--reviewed/--unreviewed",
            help="A reviewer recorded a human verdict on it, or none did.",
            show_default=False,
        ),
    ] = None,
    judge_version: VersionOpt = "live",
    sort: Annotated[
        str,
        typer.Option(
            "--sort",
            help="The order: newest, oldest, reward_high or reward_low (sessions without a "
            "reward last).",
        ),
    ] = "newest",
    limit: Annotated[
        int, typer.Option("--limit", help="The most to show: sessions per page (1 to 1000).")
    ] = 50,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="Where the previous page stopped (it says).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Sessions that match every filter given, newest first (or in --sort's order), a page at
    a time."""
    where = _filter(
        task=task,
        tags=tuple(tag or ()),
        since_ms=parse_moment(since, "--since"),
        until_ms=parse_moment(until, "--until"),
        status=status,
        kind=kind,
        group_id=group,
        model=model,
        accepted=accepted,
        reason=reason,
        judge=judge,
        verdict_status=verdict,
        score=score,
        score_min=score_min,
        score_max=score_max,
        reward="reward" if reward_min is not None or reward_max is not None else None,
        reward_min=reward_min,
        reward_max=reward_max,
        tool=tool,
        tool_failed=tool_failed,
        rule=rule,
        chain=chain,
        judge_version=judge_version,
    )
    if reviewed is not None:
        where = where.model_copy(update={"reviewed": reviewed})
    page = list_sessions(settings(), where, limit=limit, cursor=cursor, sort=sort)
    if as_json:
        print(json.dumps(page.model_dump(mode="json"), sort_keys=True))
        return
    widest = max((len(s.session_id) for s in page.sessions), default=7)
    _out(
        f"{'session':<{widest}}  {'started (UTC)':<14}  {'status':<11} {'events':>6}  "
        f"{'chain':<6} {'filter':<8} {'reward':>6}  task"
    )
    for s in page.sessions:
        task = " ".join((s.task or ("(sealed)" if s.subject_hash else "")).split())
        _out(
            f"{s.session_id:<{widest}}  {_clock(s.started_ms, short=True):<14}  {s.status:<11} "
            f"{s.events:>6}  {'ok' if s.chain == 'ok' else 'broken':<6} "
            f"{ {True: 'accepted', False: 'rejected', None: '-'}[s.accepted]:<8} "
            f"{'-' if 'reward' not in s.rewards else format(s.rewards['reward'], 'g'):>6}  "
            f"{task[:80]}"
        )
    if not page.sessions:
        err_console.print("no session matches")
    if page.cursor:
        again = "" if sort == "newest" else f" --sort {sort}"
        err_console.print(f"more:{again} --cursor {page.cursor}")


@app.command()
def show(
    session_id: Annotated[str, typer.Argument(help="The session's id.")],
    as_json: JsonOption = False,
) -> None:
    """Everything the read model holds of one session: its chains and where they are, its
    verdicts, filter outcomes and rule firings per judge version, tools, worlds, judges."""
    found = show_session(settings(), session_id)
    if found is None:
        raise CliError(
            f"no session {session_id!r} in the read model: check the id "
            "(`rolltape sessions list`), or whether the indexer is behind (`rolltape index status`)"
        )
    if as_json:
        print(json.dumps(found.model_dump(mode="json"), sort_keys=True, indent=2))
        return
    _print_detail(found)


def _out(line: str) -> None:
    """One line of recorded text, printed as text (never read as markup)."""
    console.print(line, markup=False, highlight=False, soft_wrap=True)


def _print_detail(s: SessionDetail) -> None:
    _out(f"{s.session_id}  {s.kind or '-'}  {s.status}")
    _out(f"task      {s.task or ('(sealed)' if s.subject_hash else '-')}")
    _out(f"started   {_clock(s.started_ms)}   ended {_clock(s.ended_ms)}")
    _out(f"tags      {(', '.join(s.tags)) or '-'}")
    _out(f"models    {(', '.join(s.models)) or '-'}")
    if s.subject_hash:
        _out(f"subject   {s.subject_hash[:16]}… (keyed hash){'  erased' if s.erased else ''}")
    for c in s.chains:
        covered = f"  checkpoint to #{c.checkpoint.seq}" if c.checkpoint else ""
        audit = f"  audit: {', '.join(c.audit_breaks)}" if c.audit_breaks else ""
        _out(
            f"chain     {c.chain:<14} {c.events:>5} records  {c.topic}[{c.partition}]"
            f"@{c.first_offset}..{c.last_offset}  {c.status}{covered}{audit}"
        )
    for f in s.filters:
        reasons = "(sealed)" if f.reasons_sealed else ", ".join(f.reasons) or "-"
        verdict = "accepted" if f.accepted else "rejected"
        _out(f"filter    {f.judge_version}: {verdict}  reasons {reasons}")
    for v in s.verdicts:
        scores = ", ".join(f"{k}={x:g}" for k, x in v.scores.items()) or "-"
        _out(f"verdict   {v.judge_version} {v.judge}: {v.status}  {scores}")
    for name, value in s.rewards.items():
        _out(f"reward    {name} = {value:g}")
    for r in s.rule_firings:
        _out(f"rule      {r.judge_version} epoch {r.epoch}: {r.rule} fired")
    for d in s.decisions:
        _out(f"decision  #{d.seq} epoch {d.epoch}: {d.event_type} ({d.remedy_direction})")
    for t in s.tool_calls:
        outcome = {True: "ok", False: "failed", None: "no result"}[t.success]
        took = "" if t.duration_ms is None else f" {t.duration_ms:g} ms"
        _out(f"tool      {t.name or '?'} [{t.call_id}] {outcome}{took}")
    for w in s.worlds:
        blobs = "" if w.blobs_indexed else "  (its manifest not indexed on the blobs topic)"
        _out(f"world     #{w.seq} {w.digest[:16]}… {w.files} files{blobs}")
    for j in s.judge_sessions:
        _out(f"judged in {j}")


@app.command()
def search(
    text: Annotated[str, typer.Argument(help="Words the text must all hold.")],
    task: TaskOpt = None,
    tag: TagOpt = None,
    since: SinceOpt = None,
    limit: Annotated[int, typer.Option("--limit", help="The most to show: hits (1 to 1000).")] = 50,
    as_json: JsonOption = False,
) -> None:
    """Messages, tool calls and tool results that hold every word, best match first. Sessions
    that name a subject are searchable only where the indexer holds the key-encryption key."""
    where = _filter(task=task, tags=tuple(tag or ()), since_ms=parse_moment(since, "--since"))
    hits = search_sessions(settings(), text, where, limit=limit)
    if as_json:
        print(json.dumps([h.model_dump(mode="json") for h in hits], sort_keys=True))
        return
    for h in hits:
        _out(f"{h.session_id}  #{h.seq:<4} {h.kind:<11} {' '.join(h.snippet.split())}")
    if not hits:
        err_console.print("no text matches")


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="One SELECT over the tables of docs/read-model.md.")],
    max_rows: Annotated[int, typer.Option("--max-rows", help="Rows printed at most.")] = 1000,
    as_json: JsonOption = False,
) -> None:
    """Ask the read model in SQL (read only: a write is refused; a query is stopped after 10 s).
    The tables and columns are documented in docs/read-model.md."""
    result = run_sql(settings(), query, max_rows=max_rows)
    if as_json:
        rows = [dict(zip(result.columns, row, strict=True)) for row in result.rows]
        print(
            json.dumps(
                {"columns": list(result.columns), "rows": rows, "truncated": result.truncated},
                sort_keys=True,
                default=str,
            )
        )
        return
    table = Table(title_justify="left", box=None, pad_edge=False)
    for column in result.columns:
        table.add_column(escape(column))
    for row in result.rows:
        table.add_row(*("NULL" if v is None else escape(str(v)) for v in row))
    console.print(table)
    if result.truncated:
        err_console.print(f"more rows than --max-rows {max_rows}: the rest left out")
