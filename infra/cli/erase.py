"""`rolltape erase`: destroy a subject's or a session's data keys; print the signed receipt."""

from __future__ import annotations

import asyncio

import orjson
import typer

from rolltape.infra.broker import require_connection
from rolltape.infra.cli._common import console, settings
from rolltape.infra.commands.erase import erase as erase_keys
from rolltape.schemas import Role


def erase(
    subject: str | None = typer.Option(
        None, "--subject", help="Erase every session recorded with this subject."
    ),
    session: str | None = typer.Option(None, "--session", help="Erase one session."),
    reason: str | None = typer.Option(None, "--reason", help="Why (kept in the receipt)."),
) -> None:
    """Erase the content of a subject's sessions (or of one session) everywhere at once: their
    data keys are tombstoned on the keys topic, so every reader reads them as erased from now on,
    while chains, checkpoints and `verify` still pass. Runs as the admin principal; the receipt
    (which sessions and keys, when, signed with the judge's key) is appended to the erasures
    stream and printed as JSON. Compaction removes the wrapped keys from the broker's disks
    within about two hours (docs/privacy.md)."""
    if (subject is None) == (session is None):
        raise typer.BadParameter("give one of --subject or --session")
    cfg = settings()
    connection = require_connection(cfg, Role.ADMIN)
    receipt = asyncio.run(
        erase_keys(connection, cfg, subject=subject, session_id=session, reason=reason)
    )
    out = {
        "subject": receipt.subject,
        "erasure": receipt.erasure.model_dump(mode="json"),
        "record": {"stream": "erasures", "seq": receipt.seq, "hash": receipt.hash},
    }
    console.print(
        orjson.dumps(out, option=orjson.OPT_INDENT_2).decode(), markup=False, soft_wrap=True
    )
