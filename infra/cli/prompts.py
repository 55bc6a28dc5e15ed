"""`rolltape prompts list | show | diff | champion | add`: prompt targets' versions, their lineage
and champions, as the log holds them."""

from __future__ import annotations

import asyncio
import difflib
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from rolltape.infra.cli._common import console, settings
from rolltape.infra.commands.prompts import prompt_targets, record_version
from rolltape.projections import PromptLookupError, PromptTarget

app = typer.Typer(
    help="Prompt targets' versions (content-addressed, with their lineage) and champions, "
    "read from the log.",
    no_args_is_help=True,
)

TargetArg = Annotated[str, typer.Argument(help="The prompt target, e.g. harness.policy.")]


def _target(name: str, targets: dict[str, PromptTarget] | None = None) -> PromptTarget:
    """The target's history from the log (read now, unless `targets` were read already)."""
    if targets is None:
        targets = asyncio.run(prompt_targets(settings()))
    found = targets.get(name)
    if found is None:
        known = ", ".join(targets) or "none yet"
        raise PromptLookupError(
            f"the log holds no prompt target {name!r} (targets: {known}); record a first "
            f"version with `rolltape prompts add {name} --file FILE --promote 'initial'`"
        )
    return found


@app.command("list")
def list_(
    target: Annotated[str | None, typer.Argument(help="Only this target.")] = None,
) -> None:
    """Every version of every prompt target (or of one): label, digest, parents, technique,
    and which is the champion."""
    targets = asyncio.run(prompt_targets(settings()))
    if target is not None:
        targets = {target: _target(target, targets)}
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
    history = _target(target)
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
    history = _target(target)
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
    history = _target(target)
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
    file: Annotated[Path, typer.Option("--file", "-f", help="The prompt's text.")],
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
    targets = asyncio.run(prompt_targets(config))
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
