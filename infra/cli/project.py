"""`rolltape serve projector`: publish folded trajectories to the compacted trajectories topic."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from rolltape.infra.cli._common import (
    check_judge_version,
    err_console,
    settings,
    stop_on_signals,
)
from rolltape.infra.commands.project import LIVE_JUDGE_VERSION
from rolltape.infra.commands.project import project as run_project


def project(
    judge_version: Annotated[
        str, typer.Option(help="The judge version whose verdicts and filter outcomes to fold with.")
    ] = LIVE_JUDGE_VERSION,
) -> None:
    """Fold every session once the judge version has decided on it and publish the trajectory to
    <prefix>.trajectories.v1 (compacted, keyed by session; `sid@V` for versions other than live).
    Runs until Ctrl-C or SIGTERM; restarts resume where the projector's group left off."""
    check_judge_version(judge_version)
    s = settings()

    def started(bootstrap: str) -> None:
        err_console.print(f"projecting judge version {judge_version} from {bootstrap}")

    async def main() -> int:
        return await run_project(s, judge_version, stop_on_signals(), on_started=started)

    published = asyncio.run(main())
    err_console.print(f"published {published} trajectories")
