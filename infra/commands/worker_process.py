"""A `rolltape serve worker` in a child process, and whether one is running against a cluster.

The demo, the benchmarks and `rolltape harness run --start-worker` need the processors running
while they record; they start the same worker a user starts by hand, as a child process with its
log in a file, and stop it when done.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from rolltape.infra.broker import require_connection
from rolltape.infra.settings import Settings
from rolltape.schemas import Role
from rolltape.schemas.clients import group_members


class WorkerProcess:
    """`python -m rolltape.infra worker` with `settings` (cluster, credentials, topic prefix)."""

    def __init__(self, settings: Settings, log: Path, **env: str) -> None:
        self.log_path = log
        self._log: IO[bytes] = open(log, "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rolltape.infra", "serve", "worker"],
            env={
                **os.environ,
                **settings.child_env(),
                **env,
            },
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, chars: int = 1500) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def worker_members(settings: Settings) -> int:
    """How many members the worker group of `settings` has, as its coordinator sees it (a
    SIGKILLed worker stays one until its session times out). Asked as the processor, whose
    group it is."""
    connection = require_connection(settings, Role.PROCESSOR)
    return asyncio.run(group_members(connection, settings.worker_group))


def worker_running(settings: Settings) -> bool:
    """Whether the worker group of `settings` has members (a worker is up)."""
    return worker_members(settings) > 0
