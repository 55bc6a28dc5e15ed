"""`rolltape project`: publish folded trajectories to the compacted trajectories topic."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from rolltape.infra.broker import require_connection
from rolltape.infra.cli._common import (
    check_judge_version,
    err_console,
    settings,
    stop_on_signals,
)
from rolltape.projections import run_projector
from rolltape.schemas import LIVE_JUDGE_VERSION, Role


def project(
    judge_version: Annotated[
        str, typer.Option(help="Fold with this version's verdicts and filter outcomes.")
    ] = LIVE_JUDGE_VERSION,
) -> None:
    """Fold every session once the judge version has decided on it and publish the trajectory to
    <prefix>.trajectories.v1 (compacted, keyed by session; `sid@V` for versions other than live).
    Runs until Ctrl-C or SIGTERM; restarts resume where the projector's group left off."""
    check_judge_version(judge_version)
    s = settings()
    connection = require_connection(s, Role.PROJECTOR)

    async def main() -> int:
        stop = stop_on_signals()
        err_console.print(f"projecting judge version {judge_version} from {connection.bootstrap}")
        return await run_projector(
            connection, prefix=s.topic_prefix, judge_version=judge_version, stop=stop
        )

    published = asyncio.run(main())
    err_console.print(f"published {published} trajectories")
