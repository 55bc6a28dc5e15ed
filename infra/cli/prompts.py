"""`rolltape prompts list | show | diff | champion | add | evolve | scoreboard | explain | rejudge`:
prompt targets' versions, their lineage and champions as the log holds them, and the prompt loop
with its rounds."""

from __future__ import annotations

import asyncio
import difflib
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from rolltape.infra.cli._common import console, settings
from rolltape.infra.commands.prompts import (
    Case,
    PromotionRule,
    PromptTarget,
    RoundResult,
    ValidationError,
    check_evolve,
    choose_suite,
    history_of,
    judged_round,
    loop_target,
    plan_evolve,
    read_prompt_targets,
    record_version,
)
from rolltape.infra.commands.prompts import evolve as evolve_loop
from rolltape.infra.commands.prompts import rejudge as rejudge_rounds

app = typer.Typer(
    help="Prompt targets' versions (content-addressed, with their lineage) and champions, "
    "read from the log.",
    no_args_is_help=True,
)

TargetArg = Annotated[str, typer.Argument(help="The prompt target, e.g. harness.policy.")]


def target_history(name: str, targets: dict[str, PromptTarget] | None = None) -> PromptTarget:
    """The target's history from the log (read now, unless `targets` were read already)."""
    if targets is None:
        targets = read_prompt_targets(settings())
    return history_of(targets, name)


@app.command("list")
def list_(
    target: Annotated[str | None, typer.Argument(help="Only this target.")] = None,
) -> None:
    """Every version of every prompt target (or of one): label, digest, parents, technique,
    and which is the champion."""
    targets = read_prompt_targets(settings())
    if target is not None:
        targets = {target: target_history(target, targets)}
    if not targets:
        console.print("no prompt versions in the log yet")
        return
    for name, history in targets.items():
        champion = history.champion
        table = Table(title=name, title_justify="left")
        for column in ("version", "digest", "parents", "technique", "rationale", ""):
            table.add_column(column)
        for recorded in history.versions:
            version = recorded.version
            table.add_row(
                recorded.label,
                version.digest[:12],
                ", ".join(history.label_of(p) for p in version.parents) or "-",
                version.technique or "-",
                escape((version.rationale or "-")[:60]),
                "champion" if champion is not None and champion.label == recorded.label else "",
            )
        console.print(table)
        promotions = len(history.promotions)
        console.print(f"{promotions} promotion(s); champion: {_name(history)}", highlight=False)


def _name(history: PromptTarget) -> str:
    champion = history.champion
    return f"{champion.label} ({champion.version.digest[:12]})" if champion else "none"


@app.command()
def show(
    target: TargetArg,
    version: Annotated[
        str, typer.Argument(help="A label (v003), `champion`, or a digest prefix.")
    ] = "champion",
) -> None:
    """One version: its text, lineage and how it was made."""
    history = target_history(target)
    recorded = history.find(version)
    v = recorded.version
    console.print(f"{target} {recorded.label} ({v.digest})", highlight=False)
    parents = ", ".join(history.label_of(p) for p in v.parents) or "none"
    console.print(f"parents: {parents}; technique: {v.technique or '-'}", highlight=False)
    if v.rationale:
        console.print(f"rationale: {escape(v.rationale)}", highlight=False)
    console.print(f"recorded in session {recorded.session_id}", highlight=False)
    promoted = [p for p in history.promotions if p.promotion.version == v.digest]
    for p in promoted:
        console.print(f"promoted: {escape(p.promotion.reason)}", highlight=False)
    console.print("---")
    console.print(v.content, markup=False, highlight=False)


@app.command()
def diff(
    target: TargetArg,
    old: Annotated[str, typer.Argument(help="The version to compare from.")],
    new: Annotated[str, typer.Argument(help="The version to compare to.")] = "champion",
) -> None:
    """A unified diff of two versions' text."""
    history = target_history(target)
    a, b = history.find(old), history.find(new)
    lines = difflib.unified_diff(
        a.version.content.splitlines(keepends=True),
        b.version.content.splitlines(keepends=True),
        fromfile=f"{target} {a.label}",
        tofile=f"{target} {b.label}",
    )
    text = "".join(lines)
    console.print(text or "(the same text)", markup=False, highlight=False, end="")


@app.command()
def champion(target: TargetArg) -> None:
    """The target's champion (what the latest promotion says) and why it was promoted."""
    history = target_history(target)
    recorded = history.find("champion")
    last = history.promotions[-1].promotion
    console.print(f"{target}: {_name(history)}", highlight=False)
    console.print(f"promoted: {escape(last.reason)}", highlight=False)
    if last.replaces:
        console.print(f"replaced: {history.label_of(last.replaces)}", highlight=False)
    console.print(recorded.version.content, markup=False, highlight=False)


@app.command()
def add(
    target: TargetArg,
    file: Annotated[Path, typer.Option("--file", help="The prompt's text.")],
    parent: Annotated[
        list[str],
        typer.Option(help="A version it was made from (repeatable; default: the champion)."),
    ] = [],  # noqa: B006 (typer reads the default)
    technique: Annotated[str, typer.Option(help="How it was made.")] = "manual",
    rationale: Annotated[str | None, typer.Option(help="Why.")] = None,
    promote: Annotated[
        str | None, typer.Option(help="Make it the champion, for this reason.")
    ] = None,
) -> None:
    """Record a version of a target's prompt by hand (a first version, a person's edit), and
    with --promote make it the champion."""
    try:
        content = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(
            f"{file} cannot be read as text: {exc}", param_hint="--file"
        ) from exc
    if not content.strip():
        raise typer.BadParameter(f"{file} is empty", param_hint="--file")
    config = settings()
    targets = read_prompt_targets(config)
    history = targets.get(target) or PromptTarget(target)
    version, promotion = record_version(
        config,
        history,
        content,
        parents=parent,
        technique=technique,
        rationale=rationale,
        promote=promote,
    )
    known = history.by_digest().get(version.digest)
    label = known.label if known is not None else f"v{len(history.versions):03d}"
    console.print(f"{target} {label} ({version.digest[:12]}) recorded", highlight=False)
    if promotion is not None:
        console.print(f"{target}: {label} is the champion", highlight=False)


def _cases(values: list[str], option: str) -> tuple[Case, ...]:
    cases = []
    for value in values:
        name, _, seed = value.partition(":")
        try:
            cases.append(Case(name=name, seed=int(seed) if seed else 0))
        except ValueError as exc:
            raise typer.BadParameter(
                f"{value!r}: a case is SCENARIO or SCENARIO:SEED (an integer seed)",
                param_hint=option,
            ) from exc
    return tuple(cases)


@app.command()
def evolve(
    target: TargetArg,
    rounds: Annotated[
        int, typer.Option(min=1, help="Rounds of the loop: propose, test, judge.")
    ] = 3,
    resume_from_champion: Annotated[
        bool,
        typer.Option(
            "--resume-from-champion",
            help="Start from the log's champion (default: the prompt as shipped).",
        ),
    ] = False,
    from_base: Annotated[
        bool,
        typer.Option(
            "--from-base",
            help="Start from the prompt as shipped although the log has another champion.",
        ),
    ] = False,
    budget_calls: Annotated[
        int | None,
        typer.Option(min=1, help="Refuse to start when the loop may make more model calls."),
    ] = None,
    learn: Annotated[
        list[str],
        typer.Option(help="A learning case, SCENARIO[:SEED] (repeatable; default suite if none)."),
    ] = [],  # noqa: B006 (typer reads the default)
    heldout: Annotated[
        list[str],
        typer.Option(help="A held-out case, SCENARIO[:SEED] (repeatable; default suite if none)."),
    ] = [],  # noqa: B006 (typer reads the default)
    epochs: Annotated[
        int | None,
        typer.Option(min=1, help="Epochs per run (a test run; default: the scenario's)."),
    ] = None,
    promotion_margin: Annotated[
        float,
        typer.Option(
            help="The gain a challenger needs: the interval's lower end must lie above it."
        ),
    ] = 0.0,
    confidence: Annotated[
        float, typer.Option(min=0.5, max=0.999, help="The bootstrap interval's coverage.")
    ] = 0.95,
    review: Annotated[
        bool,
        typer.Option(
            "--review", help="An LLM reviewer (ROLLTAPE_MODELS `reviewer`) judges each round too."
        ),
    ] = False,
    review_veto: Annotated[
        bool,
        typer.Option("--review-veto", help="Promote only when the reviewer prefers it too."),
    ] = False,
    start_worker: Annotated[
        bool, typer.Option(help="Run a worker for the duration (else one must run).")
    ] = False,
) -> None:
    """The prompt loop: each round the tuner (ROLLTAPE_MODELS `tuner`) proposes a version from
    the champion's failures on the learning cases; champion and proposal run the held-out cases
    with the same seeds (the `policy` model, judged by the worker); the stated rule promotes."""
    from rolltape.infra.commands.worker_process import running_worker

    config = settings()
    suite = None
    if learn or heldout:
        cases = _cases(learn, "--learn"), _cases(heldout, "--heldout")
        try:
            suite = choose_suite(loop_target(target), *cases)
        except ValidationError as exc:
            problem = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise typer.BadParameter(problem, param_hint="--learn/--heldout") from exc
    check_evolve(config, target, suite, review=review or review_veto)
    targets = read_prompt_targets(config)
    plan = plan_evolve(
        config,
        targets.get(target),
        target,
        rounds=rounds,
        resume_from_champion=resume_from_champion,
        budget_calls=budget_calls,
        suite=suite,
        epochs=epochs,
        rule=PromotionRule(margin=promotion_margin, confidence=confidence, review_veto=review_veto),
        review=review,
        from_base=from_base,
    )
    console.print(
        f"{target}: starting from {plan.start_label} ({plan.start.digest[:12]})", highlight=False
    )
    console.print(
        f"learning cases: {', '.join(c.label for c in plan.suite.learn) or 'none'}; held out: "
        f"{', '.join(c.label for c in plan.suite.heldout)}",
        highlight=False,
    )
    console.print(f"rule: {plan.rule.describe()}", highlight=False)
    console.print(f"cost: {plan.estimate.describe()}", highlight=False)

    def said(result: RoundResult) -> None:
        d, f = result.decision, result.decision.figures
        console.print(
            f"round {d.round}: {result.proposal.technique} "
            f"({escape(result.proposal.rationale or '-')}): pass rate "
            f"{_rate(f.champion_pass_rate)} -> {_rate(f.proposal_pass_rate)}, score "
            f"{_rate(f.champion_mean, 3)} -> {_rate(f.proposal_mean, 3)}; {escape(d.reason)}",
            highlight=False,
        )
        if d.reviewed is not None:
            console.print(f"  reviewer: {escape(d.reviewed)}", highlight=False)

    with running_worker(config, start_worker):
        result = evolve_loop(config, plan, on_round=said)
    console.print(
        f"{result.runs} test runs and {result.model_calls} model calls "
        f"(estimated at most {plan.estimate.model_calls}); loop session {result.loop}",
        highlight=False,
    )
    history = target_history(target)
    _print_scoreboard(history, loop=result.loop)
    console.print(f"{target}: champion {_name(history)}", highlight=False)


@app.command()
def scoreboard(target: TargetArg) -> None:
    """Wins and losses per technique, and every judged round with its pass rates and figures."""
    _print_scoreboard(target_history(target))


def _print_scoreboard(history: PromptTarget, loop: str | None = None) -> None:
    """One line per judged round (as the reference's scoreboard), then the tallies."""
    rounds = history.rounds(loop)
    if rounds:
        console.print(f"{history.name}: rounds{' of this loop' if loop else ''}", highlight=False)
    for number, decided in enumerate(rounds, 1):
        d, f = decided.decision, decided.decision.figures
        proposal = history.by_digest().get(d.proposal)
        technique = (proposal.version.technique if proposal else None) or "-"
        console.print(
            f"  {number:>3}  {history.label_of(d.proposal)} ({technique}) vs "
            f"{history.label_of(d.champion)}: pass {_rate(f.champion_pass_rate)} -> "
            f"{_rate(f.proposal_pass_rate)}, score {_rate(f.champion_mean, 3)} -> "
            f"{_rate(f.proposal_mean, 3)}: {d.outcome}",
            highlight=False,
        )
    if rounds:
        console.print(
            f"why a round went as it did: rolltape prompts explain {history.name} NUMBER",
            highlight=False,
        )
    tallies = history.scoreboard()
    console.print(
        "scoreboard: "
        + (
            " · ".join(f"{t.technique} {t.wins} win(s), {t.losses} loss(es)" for t in tallies)
            or "no rounds judged yet"
        ),
        highlight=False,
    )


def _rate(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


@app.command()
def explain(
    target: TargetArg,
    round_: Annotated[
        int | None,
        typer.Argument(metavar="ROUND", help="A round's number in the log (default: the last)."),
    ] = None,
) -> None:
    """Why a round went as it did: the rule, every held-out pair with the sessions that ran it
    and what the judge said, and the figures the rule measured."""
    history = target_history(target)
    number, judged = judged_round(history, round_)
    d = judged.decision
    f = d.figures
    console.print(
        f"{target} round {number} (round {d.round} of loop {d.loop}): "
        f"{history.label_of(d.proposal)} against {history.label_of(d.champion)}",
        highlight=False,
    )
    console.print(f"rule: {d.rule.describe()}", highlight=False)
    table = Table(title="held-out pairs (same case, same seed)", title_justify="left")
    for column in ("case", "seed", "champion", "proposal"):
        table.add_column(column, no_wrap=True)
    for p in d.pairs:
        table.add_row(
            p.case,
            str(p.seed),
            _result(p.champion_score, p.champion_passed),
            _result(p.proposal_score, p.proposal_passed),
        )
    console.print(table)
    console.print("the sessions that ran them (champion, then proposal):", highlight=False)
    for p in d.pairs:
        console.print(f"  {p.label}: {p.champion_session}", highlight=False, soft_wrap=True)
        console.print(f"  {p.label}: {p.proposal_session}", highlight=False, soft_wrap=True)
    interval = "-" if f.lower is None else f"[{f.lower:+.3f}, {f.upper:+.3f}]"
    console.print(
        f"mean difference {_rate(f.mean_difference, 3)}, interval {interval}; pass rate "
        f"{_rate(f.champion_pass_rate)} -> {_rate(f.proposal_pass_rate)}",
        highlight=False,
    )
    if d.reviewed is not None:
        console.print(f"reviewer: {escape(d.reviewed)}", highlight=False)
    console.print(escape(d.reason), highlight=False)


def _result(score: float | None, passed: bool) -> str:
    return f"{_rate(score, 3)} {'pass' if passed else 'fail'}"


@app.command()
def rejudge(
    target: TargetArg,
    judge_version: Annotated[
        str,
        typer.Option(
            help="The judge version (a replay's) whose verdicts decide again; human: the "
            "reviewers' verdicts."
        ),
    ],
    round_: Annotated[
        list[int],
        typer.Option("--round", min=1, help="A round's number in the log (repeatable; all)."),
    ] = [],  # noqa: B006 (typer reads the default)
    record: Annotated[
        bool,
        typer.Option(
            help="Record the results as events: the re-judged decisions (they change no champion)."
        ),
    ] = False,
) -> None:
    """Decide rounds again from another judge version's verdicts on the same test sessions
    (`rolltape log replay --judge-version V` first), by each round's recorded scoring and rule, and
    say which outcomes change. `--judge-version human` scores each run by what reviewers said of
    it (their mean score; a pass where most passed it), so people can overrule the judge."""
    config = settings()
    history = target_history(target)
    results = asyncio.run(
        rejudge_rounds(config, history, judge_version, rounds=round_, record=record)
    )
    numbers = {id(d.decision): n for n, d in enumerate(history.rounds(), 1)}
    changed = 0
    for before, after in results:
        number = numbers.get(id(before), 0)
        moved = before.promoted != after.promoted
        changed += moved
        f, g = before.figures, after.figures
        console.print(
            f"round {number} ({history.label_of(before.proposal)}): {before.outcome} -> "
            f"{after.outcome}{'  CHANGED' if moved else ''}; mean difference "
            f"{_rate(f.mean_difference, 3)} -> {_rate(g.mean_difference, 3)}, pass rate "
            f"{_rate(f.proposal_pass_rate)} -> {_rate(g.proposal_pass_rate)}",
            highlight=False,
        )
        if moved:
            console.print(f"  {escape(after.reason)}", highlight=False)
    console.print(
        f"{len(results)} round(s) re-judged under {judge_version}: {changed} outcome(s) changed"
        + ("; recorded" if record else ""),
        highlight=False,
    )
