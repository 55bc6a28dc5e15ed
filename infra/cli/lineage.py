"""`rolltape lineage`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from rolltape.infra.cli._common import console, say, settings
from rolltape.infra.commands.lineage import (
    lineage_of,
    model_evidence,
    models_of_sessions,
    subject_sessions,
)


def lineage(
    model: Annotated[
        str | None,
        typer.Argument(help="A model version (as its checkpoint named it) or its sha256."),
    ] = None,
    subject: Annotated[
        str | None,
        typer.Option(
            help="A subject (whose data sessions hold): list the models that learned from its "
            "sessions."
        ),
    ] = None,
    session: Annotated[
        list[str] | None,
        typer.Option(
            "--session",
            "-s",
            help="A session id: list the models that learned from it (repeatable).",
        ),
    ] = None,
    evidence: Annotated[
        Path | None,
        typer.Option(
            "--evidence-out",
            help="Write the evidence of MODEL's sessions and of the run that made it to this "
            "folder, new or empty (check it with `rolltape dataset verify`).",
        ),
    ] = None,
) -> None:
    """The sessions MODEL learned from, its own run's and its ancestors', and the ancestors
    themselves; or, with --subject or --session, every model that learned from those sessions
    (itself or through an ancestor): what must be retrained once they are erased."""
    if (model is None) == (subject is None and not session):
        raise typer.BadParameter("name a MODEL, or ask by --subject or --session")
    if evidence is not None and model is None:
        raise typer.BadParameter("--evidence-out writes a MODEL's evidence: name the model")
    s = settings()
    if model is None:
        sessions = list(session or ())
        if subject is not None:
            sessions += asyncio.run(subject_sessions(s, subject))
        models = asyncio.run(models_of_sessions(s, sessions, say=say))
        console.print(f"{len(models)} model(s) learned from {len(set(sessions))} session(s)")
        for name in models:
            console.print(f"  {escape(name)}")
        return
    found = asyncio.run(lineage_of(s, model, say=say))
    run, checkpoint = found.run, found.checkpoint
    console.print(f"model {escape(found.model)}: sha256 {checkpoint.sha256}")
    step = "" if checkpoint.step is None else f" at step {checkpoint.step}"
    console.print(f"  written by run {escape(run.run_id)} ({escape(run.status)}){step}")
    chain = " <- ".join(escape(a) for a in found.ancestors) or "none recorded"
    console.print(f"  ancestors: {chain}")
    for source in run.sources:
        if source.get("manifest_sha256"):
            digest = escape(str(source["manifest_sha256"]))
            console.print(f"  trained on the export whose manifest is {digest}")
        elif source.get("positions"):
            console.print(f"  trained on a stream, read at {escape(str(source['positions']))}")
    console.print(f"  {len(found.sessions)} session(s) learned from:")
    for learner, sample in found.learned:
        console.print(
            f"    {escape(sample.session_id)}  trajectory {escape(sample.trajectory_id)}  "
            f"(by {escape(learner)})"
        )
    if evidence is not None:
        manifest = model_evidence(s, found, evidence, say=say)
        console.print(
            f"  evidence of {manifest.sessions_read} session(s) in {escape(str(evidence))}: "
            f"check it with `rolltape dataset verify {escape(str(evidence))} --public-key "
            "judge.pub.pem`",
            soft_wrap=True,
        )
