"""A `rolltape serve worker` in a child process, whether one is running against a cluster, and
a worker judging for the duration of a command (the running one, or one started for it).

The demo, the benchmarks and `rolltape harness run --start-worker` need the processors running
while they record; they start the same worker a user starts by hand, as a child process with its
log in a file, and stop it when done.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from rolltape.infra._errors import InfraError
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


class NoWorkerError(InfraError):
    """No worker judges for a command that waits on one, and none was to be started here (or
    the one started here did not come up); the message says what to do."""


@contextmanager
def running_worker(s: Settings, start: bool) -> Iterator[None]:
    """A worker judging for the duration: the one already running, or (with `start`) one run
    here and stopped after."""
    with tempfile.TemporaryDirectory() as logs:
        worker = _worker(s, Path(logs), start)
        try:
            yield
        finally:
            if worker is not None:
                worker.stop()


def _worker(s: Settings, logs: Path, start: bool) -> WorkerProcess | None:
    if not start:
        if not worker_running(s):
            raise NoWorkerError(
                "no `rolltape serve worker` is running against "
                f"{require_connection(s, Role.PROCESSOR).bootstrap} (its consumer group "
                f"{s.worker_group} has no members): start one in another shell, or pass "
                "--start-worker"
            )
        return None
    worker = WorkerProcess(s, logs / "worker.log")
    deadline = time.monotonic() + 120
    while not worker_running(s):
        if not worker.alive() or time.monotonic() > deadline:
            worker.stop()
            raise NoWorkerError(f"the worker did not start: {worker.log_tail()}")
        time.sleep(0.5)
    return worker
