"""`rolltape keys init | show | export FILE`: the judge's checkpoint signing key;
`rolltape keys rotate-kek`: a new key-encryption key for the data keys."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from rolltape.infra.broker import require_connection
from rolltape.infra.cli._common import console, settings
from rolltape.infra.commands.rotate_kek import rotate_kek as rotate
from rolltape.infra.keys import judge_key, kek_path
from rolltape.schemas import Role

app = typer.Typer(
    help="The judge's Ed25519 key, which signs checkpoints: create it, show its public half; "
    "rotate the key-encryption key that wraps the data keys of subject sessions.",
    no_args_is_help=True,
)


@app.command()
def init(
    replace: Annotated[
        bool, typer.Option(help="Replace an existing key (earlier checkpoints stay signed by it).")
    ] = False,
) -> None:
    """Create the judge's key pair (`broker up` and `demo` do this when there is none)."""
    key = judge_key(settings())
    kid = key.create(replace=replace)
    console.print(f"judge key {kid}: private {key.path} (mode 0600), public {key.public_path}")


@app.command()
def show() -> None:
    """The key id and the public key (PEM): what a verifier of exports needs."""
    key = judge_key(settings())
    kid, pem = key.key_id(), key.public_pem().decode()
    console.print(f"key id {kid} ({key.path})", highlight=False)
    console.print(pem.rstrip(), highlight=False, markup=False)


@app.command()
def export(
    path: Annotated[Path, typer.Argument(help="Where to write the public key (PEM).")],
) -> None:
    """Write the public key to a file, to hand to whoever verifies exports."""
    key = judge_key(settings())
    path.write_bytes(key.public_pem())
    kid = key.key_id()
    console.print(f"public key {kid} written to {path}")


@app.command("rotate-kek")
def rotate_kek() -> None:
    """Re-wrap every live data key under a new key-encryption key and retire the old one (its
    file overwritten, or destroyed by the provider that serves it), so that a copy of a wrapped
    key taken before (a backup of the keys topic) is useless. Runs as the admin; readers need the
    new KEK file afterwards. A rotation cut short goes on where it stopped when run again
    (docs/privacy.md)."""
    cfg = settings()
    connection = require_connection(cfg, Role.ADMIN)
    done = asyncio.run(rotate(connection, cfg))
    where = cfg.kek_provider or kek_path(cfg)
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
