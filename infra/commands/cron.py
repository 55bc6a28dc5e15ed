"""Cron wired to settings: the scheduler's connection and principal, the agent's recorder."""

from __future__ import annotations

from collections import Counter
from typing import Any

from pydantic import BaseModel

from rolltape.infra import open_recorder
from rolltape.infra.broker import require_connection, scheduler_group
from rolltape.infra.commands.export import collect
from rolltape.infra.settings import Settings
from rolltape.producers import Recorder
from rolltape.producers.cron import CronJobs, JobError, Runner, Scheduler, agent_runner
from rolltape.producers.environments import Item
from rolltape.projections import fold
from rolltape.schemas import FINAL_STATUSES, LIVE_JUDGE_VERSION, Role, RunStatus


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


class ToEnvReport(BaseModel):
    """What `cron to-env` turns a job's runs into: the items, and how many runs were left out
    by reason (still_open, not_successful, no_session, no_score, below_min_reward), so no run
    goes missing silently."""

    items: list[Item]
    skipped: dict[str, int]


async def cron_items(
    settings: Settings,
    job_id: str,
    *,
    min_reward: float | None,
    include_failures: bool,
    score: str = "reward",
) -> ToEnvReport:
    """A job's runs as environment items (`rolltape cron to-env`): each successful run (and,
    with `include_failures`, each failed one) whose session scores at least `min_reward`, with
    the job's prompt, skills and workdir, the answer a successful run gave as the reference, and
    where it came from."""
    async with cron_jobs(settings) as admin:
        book = admin.book
    job = book.jobs.get(job_id)
    if job is None:
        raise JobError(f"no job {job_id!r}; see `rolltape cron list`")
    with await collect(
        require_connection(settings, Role.READER),
        prefix=settings.topic_prefix,
        judge_version=LIVE_JUDGE_VERSION,
        keys_from=settings,
    ) as collected:
        items: list[Item] = []
        skipped: Counter[str] = Counter()
        for run in book.runs_of(job_id):
            if run.status not in FINAL_STATUSES:
                skipped["still_open"] += 1
                continue
            success = run.status == RunStatus.SUCCESS
            if not success and not include_failures:
                skipped["not_successful"] += 1
                continue
            recorded = collected.session(run.session_id)
            if recorded is None or not recorded.events:
                skipped["no_session"] += 1
                continue
            session, access = collected.opened(recorded)
            if session is None:
                skipped[access.replace(" ", "_")] += 1  # erased, key_unavailable
                continue
            trajectory = fold(session.events, session.derived)
            reward = trajectory.score(score)
            if min_reward is not None and reward is None:
                skipped["no_score"] += 1
                continue
            if min_reward is not None and reward is not None and reward < min_reward:
                skipped["below_min_reward"] += 1
                continue
            answers = [
                m.content for m in trajectory.messages if m.role == "assistant" and m.content
            ]
            items.append(
                Item(
                    item_id=run.run_id.replace("@", "-").lower()[:64],
                    split="train",
                    data={
                        "prompt": job.prompt,
                        "skills": list(job.skills),
                        "workdir": job.workdir,
                        "reference": answers[-1] if success and answers else None,
                        "source": {
                            "job_id": job_id,
                            "run_id": run.run_id,
                            "session_id": run.session_id,
                            "status": run.status.value,
                            "reason": run.reason,
                            "score": reward,
                        },
                    },
                )
            )
    return ToEnvReport(items=items, skipped=dict(sorted(skipped.items())))
