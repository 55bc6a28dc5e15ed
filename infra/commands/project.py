"""`rolltape serve projector` wiring: the projector (rolltape.projections.run_projector) run as the
projector principal, on the settings' topic prefix, until stopped; with the key-encryption key
where this machine has it, following the keys topic to open subject sessions and tombstone the
trajectories of erased ones."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from rolltape.infra.broker import require_connection
from rolltape.infra.kafka.keyring import keys_follower_if_any
from rolltape.infra.settings import Settings
from rolltape.projections import run_projector
from rolltape.schemas import LIVE_JUDGE_VERSION as LIVE_JUDGE_VERSION
from rolltape.schemas import Role


async def project(
    settings: Settings,
    judge_version: str,
    stop: asyncio.Event,
    *,
    on_started: Callable[[str], None] | None = None,
) -> int:
    """Publish every session's trajectory once `judge_version` decided on it, until `stop` is
    set; returns how many were published. `on_started(bootstrap)` hears where it reads from.
    Restarts resume where the projector's group left off."""
    connection = require_connection(settings, Role.PROJECTOR)
    keys = keys_follower_if_any(connection, settings)
    async with contextlib.AsyncExitStack() as stack:
        if keys is not None:  # subject sessions opened, erased ones tombstoned
            await stack.enter_async_context(keys)
        if on_started is not None:
            on_started(connection.bootstrap)
        return await run_projector(
            connection,
            prefix=settings.topic_prefix,
            judge_version=judge_version,
            stop=stop,
            keys=keys,
        )
