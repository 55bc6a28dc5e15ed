"""Runners the cron tests name as `tests.integration.cron_runners:FUNC` (importable by a
`rolltape serve cron` started from the repository root)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from rolltape.producers.cron import CronRunContext, RunOutcome
from rolltape.schemas import RunStatus


def answer(run: CronRunContext) -> str:
    run.session.turn("user", run.prompt)
    run.session.turn("assistant", f"done: {run.run_id}")
    return f"answer for {run.run_id}"


async def flaky(run: CronRunContext) -> RunOutcome:
    await asyncio.sleep(0)
    raise ConnectionError("HTTP 429 from the model: rate limited")


def wants_review(run: CronRunContext) -> RunOutcome:
    return RunOutcome(
        status=RunStatus.NEEDS_HUMAN_REVIEW, reason="two open PRs edit the same file", output="?"
    )


def credentials_expired(run: CronRunContext) -> RunOutcome:
    return RunOutcome(status=RunStatus.TERMINAL_FAILURE, reason="API key expired")


def schedules_more(run: CronRunContext) -> str:
    """Tries to create a cron job from inside a run, the way an agent's shell tool would."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rolltape.infra",
            "cron",
            "add",
            "--schedule",
            "every 1m",
            "--task",
            "more",
        ],
        env=run.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return f"exit {done.returncode}: {done.stderr.strip()}"


_scores = iter([0.9, 0.2, 0.7])


def scored(run: CronRunContext) -> str:
    """Answers, and scores the answer: 0.9, then 0.2, then 0.7."""
    run.session.turn("user", run.prompt)
    answer = f"The open PRs are 12 and 14 (run {run.attempt})"
    run.session.turn("assistant", answer)
    run.session.reward(next(_scores), name="reward")
    return answer
