"""Cron wired to settings: the scheduler's connection and principal, the agent's recorder."""

from __future__ import annotations

from typing import Any

from rolltape.infra import open_recorder
from rolltape.infra.broker import require_connection, scheduler_group
from rolltape.infra.settings import Settings
from rolltape.producers import Recorder
from rolltape.producers.agent import agent_runner
from rolltape.producers.cron import CronJobs, Runner, Scheduler
from rolltape.schemas import Role


def cron_jobs(settings: Settings) -> CronJobs:
    """Job administration as the scheduler principal (`async with cron_jobs(s) as jobs:`)."""
    connection = require_connection(settings, Role.SCHEDULER)
    return CronJobs(
        connection, prefix=settings.topic_prefix, principal=_principal(settings, Role.SCHEDULER)
    )


def open_scheduler(
    settings: Settings,
    *,
    recorder: Recorder | None = None,
    default_runner: Runner | None = None,
    **options: Any,
) -> Scheduler:
    """A scheduler in the prefix's scheduler group; its runs record as the agent principal.
    Jobs that name no runner run the reference agent (`rolltape.producers.agent`) with the
    endpoints of ROLLTAPE_MODELS."""
    connection = require_connection(settings, Role.SCHEDULER)
    return Scheduler(
        connection,
        recorder or open_recorder(settings),
        prefix=settings.topic_prefix,
        group_id=scheduler_group(settings.topic_prefix),
        principal=_principal(settings, Role.SCHEDULER),
        default_runner=default_runner or agent_runner(settings.models),
        **options,
    )


def _principal(settings: Settings, role: Role) -> str:
    """The envelope's principal on an unauthenticated cluster (else the SASL user wins)."""
    return settings.principal if settings.principal != "anonymous" else role.value
