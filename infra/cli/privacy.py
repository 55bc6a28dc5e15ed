"""`rolltape privacy`: erase a subject's or a session's content, export the signed erasures for
exports held elsewhere, rotate the key-encryption key that wraps the data keys."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from rolltape.infra.cli._common import console, say, settings
from rolltape.infra.commands.erase import erase as erase_keys
from rolltape.infra.commands.erasures import export_erasures
from rolltape.infra.commands.rotate_kek import kek_location, rotate_kek_as_admin

app = typer.Typer(
    help="Erase what a subject or session said, everywhere at once; export the signed erasures; "
    "rotate the key-encryption key.",
    no_args_is_help=True,
)


@app.command("erase")
def erase(
    subject: str | None = typer.Option(
        None,
        "--subject",
        help="A subject (whose data sessions hold): erase every session recorded with it.",
    ),
    session: str | None = typer.Option(
        None, "--session", "-s", help="A session id: erase it alone."
    ),
    reason: str | None = typer.Option(None, "--reason", help="Why (kept in the receipt)."),
) -> None:
    """Erase the content of a subject's sessions (or of one session) everywhere at once: their
    data keys are tombstoned on the keys topic, so every reader reads them as erased from now on,
    while chains, checkpoints and `verify` still pass. Runs as the admin principal; the receipt
    (which sessions and keys, when, the models that learned from them and must be retrained,
    signed with the judge's key) is appended to the erasures stream and printed as JSON.
    Compaction removes the wrapped keys from the broker's disks
    within about two hours (docs/privacy.md)."""
    if (subject is None) == (session is None):
        raise typer.BadParameter("give one of --subject or --session")
    cfg = settings()
    receipt = asyncio.run(erase_keys(cfg, subject=subject, session_id=session, reason=reason))
    console.print(receipt.json(), markup=False, soft_wrap=True)
    if receipt.erasure.models:
        say(
            f"{len(receipt.erasure.models)} model(s) learned from these sessions and must be "
            f"retrained: {', '.join(receipt.erasure.models)}"
        )


@app.command("export-erasures")
def export_erasures_command(
    path: Annotated[Path, typer.Argument(help="Where to write the erasures (JSON lines).")],
) -> None:
    """Write every erasure record (the whole chain, signed with the judge's key) to a file.
    Whoever holds an export written before an erasure checks it with `rolltape dataset
    verify DIR --public-key KEY --erasures FILE` and purges it with `rolltape dataset purge`,
    offline."""
    count = asyncio.run(export_erasures(settings(), path))
    console.print(f"{count} erasure record(s) written to {path}", highlight=False, soft_wrap=True)


@app.command("rotate-kek")
def rotate_kek() -> None:
    """Re-wrap every live data key under a new key-encryption key and retire the old one (its
    file overwritten, or destroyed by the provider that serves it), so that a copy of a wrapped
    key taken before (a backup of the keys topic) is useless. Runs as the admin; readers need the
    new KEK file afterwards. A rotation cut short goes on where it stopped when run again
    (docs/privacy.md)."""
    cfg = settings()
    done = asyncio.run(rotate_kek_as_admin(cfg))
    where = kek_location(cfg)
    after = (
        "the provider destroyed the old key."
        if cfg.kek_provider
        else "the old key is overwritten. Copy the new file to every machine that records "
        "subject sessions or reads their content."
    )
    console.print(
        f"key-encryption key {done.old_kek_id} -> {done.new_kek_id} ({where}): "
        f"{done.rewrapped} data keys re-wrapped, {done.already} re-wrapped already; {after}",
        highlight=False,
        soft_wrap=True,
    )
    if done.erased_again:
        console.print(
            f"{done.erased_again} data keys erased while the rotation ran were tombstoned again.",
            highlight=False,
            soft_wrap=True,
        )
    if done.foreign:
        console.print(
            f"{done.foreign} data keys are wrapped under another key-encryption key (another "
            "cluster's, or one retired before) and were left as they were: nothing here opens "
            "them.",
            highlight=False,
            soft_wrap=True,
        )
