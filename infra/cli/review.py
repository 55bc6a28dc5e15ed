"""`rolltape review queue | agreement | record | prefer`: human review from the command line.

What the console's review page shows and writes, for a script or a shell: the queues, how far
each judge agrees with reviewers, and a reviewer's verdict or preference recorded as the
reviewer principal the settings name. Recorded text is printed with markup off.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from rolltape.infra.cli._common import console, err_console, settings
from rolltape.infra.commands.review import board, record_preference, record_verdict, review_board

app = typer.Typer(
    help="Human review: the queues, each judge's agreement with reviewers, and verdicts or "
    "preferences recorded as the reviewer principal (the console's review page, without it).",
    no_args_is_help=True,
)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]
CommentOption = Annotated[
    str, typer.Option("--comment", help="What the reviewer says (stored in clear).")
]
LabelOption = Annotated[
    list[str] | None,
    typer.Option("--label", help="A label: lowercase letters, digits, _ . : - (repeatable)."),
]


@app.command()
def queue(as_json: JsonOption = False) -> None:
    """The sessions waiting for a reviewer, by queue: cron runs routed to a person, sessions a
    filter holds for review, sessions the reward filter rejected, sessions whose judges
    disagree, a sample of accepted ones."""
    shown, said = board(settings())
    if said is not None:
        err_console.print(said, markup=False, highlight=False)
    if as_json:
        out = {
            q.name: {
                "about": q.about,
                "waiting": q.waiting,
                "sessions": [s.session_id for s in q.sessions],
            }
            for q in shown.queues
        }
        print(json.dumps({"reviewed": shown.reviewed, "queues": out}, sort_keys=True))
        return
    console.print(f"{shown.reviewed} session(s) reviewed", markup=False, highlight=False)
    for q in shown.queues:
        console.print(f"\n{q.name}: {q.about} ({q.waiting} waiting)", markup=False)
        for s in q.sessions:
            task = s.task if s.task is not None else "-"
            console.print(f"  {s.session_id}  {task}", markup=False, highlight=False)


@app.command()
def agreement(as_json: JsonOption = False) -> None:
    """Each judge of the live version, and the reward filter (`filter`: accepted is a pass),
    against the reviewers' majority on the sessions both judged: agreement and Cohen's kappa."""
    rows = review_board(settings(), None).agreement  # the read model's alone
    if as_json:
        out = [
            {**a.model_dump(), "sessions": a.sessions, "agreement": a.agreement, "kappa": a.kappa}
            for a in rows
        ]
        print(json.dumps(out, sort_keys=True))
        return
    if not rows:
        console.print("no session has both a reviewer's verdict and a judge's yet", markup=False)
        return
    console.print("judge  sessions  agreement  kappa  (judge pass/human fail, fail/pass)")
    for a in rows:
        share = "-" if a.agreement is None else f"{a.agreement:.1%}"
        kappa = "-" if a.kappa is None else f"{a.kappa:.2f}"
        console.print(
            f"{a.judge}  {a.sessions}  {share}  {kappa}  "
            f"({a.judge_pass_human_fail}, {a.judge_fail_human_pass})",
            markup=False,
            highlight=False,
        )


@app.command()
def record(
    session_id: Annotated[str, typer.Argument(help="The session reviewed.")],
    verdict: Annotated[str, typer.Argument(help="pass or fail.")],
    grade: Annotated[
        float | None,
        typer.Option("--grade", min=0.0, max=1.0, help="A graded score in [0, 1]."),
    ] = None,
    label: LabelOption = None,
    comment: CommentOption = "",
) -> None:
    """Record a human verdict on a session, as the reviewer principal of the settings
    (ROLLTAPE_SASL_USERNAME, or the reviewer in the principals file)."""
    if verdict not in ("pass", "fail"):
        raise typer.BadParameter(f"{verdict!r}: a verdict is pass or fail", param_hint="VERDICT")
    landed = record_verdict(
        settings(),
        session_id,
        verdict=verdict,
        score=grade,
        labels=tuple(label or ()),
        comment=comment,
    )
    console.print(
        f"recorded: {session_id} verdicts@human seq {landed.seq} ({landed.hash[:16]})",
        markup=False,
        highlight=False,
    )


@app.command()
def prefer(
    chosen: Annotated[str, typer.Argument(help="The session preferred.")],
    rejected: Annotated[str, typer.Argument(help="The other session.")],
    label: LabelOption = None,
    comment: CommentOption = "",
) -> None:
    """Record a preference of one session over another (two answers of a group, say), as the
    reviewer principal of the settings."""
    landed = record_preference(
        settings(), chosen, rejected, labels=tuple(label or ()), comment=comment
    )
    console.print(
        f"recorded: {chosen} over {rejected}, verdicts@human seq {landed.seq}",
        markup=False,
        highlight=False,
    )
