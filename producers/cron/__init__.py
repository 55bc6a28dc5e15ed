"""rolltape.producers.cron: cron jobs as a continuous task source, built on the log.

Job definitions and run states are records of the compacted jobs topic (`schemas._cron`), so
the job list and the failure and review queues are projections of the log. `Scheduler` fires
due jobs of the partitions it owns in the scheduler consumer group; each attempt of a run is a
fresh session on the events topic, tagged with the job and run; its outcome is routed by status
(retryable failures back off and retry, failures and reviews wait in their queues) and
delivered through a channel.
"""

from rolltape.producers.cron._agent_runner import agent_runner
from rolltape.producers.cron._book import Expire, Fire, Head, JobBook
from rolltape.producers.cron._channels import (
    Channel,
    Delivery,
    DeliveryError,
    FileChannel,
    WebhookChannel,
    open_channel,
    register_channel,
)
from rolltape.producers.cron._jobs import CronJobs, JobError, JobSpec, job_id_from
from rolltape.producers.cron._log import JobsLog, read_book
from rolltape.producers.cron._routing import (
    RunOutcome,
    attempt_session_id,
    backoff_s,
    run_id,
    settle,
    tick_label,
)
from rolltape.producers.cron._runs import (
    CRON_RUN_ENV,
    CronRecursionError,
    CronRunContext,
    Runner,
    guard_against_recursion,
    load_runner,
)
from rolltape.producers.cron._schedule import ACCEPTED, Schedule, ScheduleError, parse_schedule
from rolltape.producers.cron._scheduler import Owned, Scheduler

__all__ = [
    "ACCEPTED",
    "CRON_RUN_ENV",
    "Channel",
    "CronJobs",
    "CronRecursionError",
    "CronRunContext",
    "Delivery",
    "DeliveryError",
    "Expire",
    "FileChannel",
    "Fire",
    "Head",
    "JobBook",
    "JobError",
    "JobSpec",
    "JobsLog",
    "Owned",
    "RunOutcome",
    "Runner",
    "Schedule",
    "ScheduleError",
    "Scheduler",
    "WebhookChannel",
    "agent_runner",
    "attempt_session_id",
    "backoff_s",
    "guard_against_recursion",
    "job_id_from",
    "load_runner",
    "open_channel",
    "parse_schedule",
    "read_book",
    "register_channel",
    "run_id",
    "settle",
    "tick_label",
]
