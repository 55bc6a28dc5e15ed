"""`rolltape keys init | show | export FILE`: the judge's key, which signs checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rolltape.infra.cli._common import console, settings
from rolltape.infra.commands.keys import create_judge_key, export_judge_key, show_judge_key

app = typer.Typer(
    help="The judge's Ed25519 key, which signs checkpoints: create it, show or export its "
    "public half.",
    no_args_is_help=True,
)


@app.command()
def init(
    replace: Annotated[
        bool, typer.Option(help="Replace an existing key (earlier checkpoints stay signed by it).")
    ] = False,
) -> None:
    """Create the judge's key pair (`broker up` and `demo` do this when there is none)."""
    key = create_judge_key(settings(), replace=replace)
    console.print(f"judge key {key.key_id}: private {key.private} (mode 0600), public {key.public}")


@app.command()
def show() -> None:
    """The key id and the public key (PEM): what a verifier of exports needs."""
    key = show_judge_key(settings())
    console.print(f"key id {key.key_id} ({key.path})", highlight=False)
    console.print(key.pem.rstrip(), highlight=False, markup=False)


@app.command()
def export(
    path: Annotated[Path, typer.Argument(help="Where to write the public key (PEM).")],
) -> None:
    """Write the public key to a file, to hand to whoever verifies exports."""
    kid = export_judge_key(settings(), path)
    console.print(f"public key {kid} written to {path}")
