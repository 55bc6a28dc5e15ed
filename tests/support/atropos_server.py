"""Atropos's own API server app (atroposlib.api.server:app) run by uvicorn in a subprocess, so
the sink is tested against the server trainers really use."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType

import httpx

from tests.support.waiting import wait_until


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AtroposServer:
    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None
        handle, name = tempfile.mkstemp(prefix="atropos-", suffix=".log")
        os.close(handle)
        self.log = Path(name)
        """uvicorn's output, its access log included: what `requests` counts."""

    def __enter__(self) -> AtroposServer:
        with self.log.open("wb") as log:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "atroposlib.api.server:app",
                    "--port",
                    str(self.port),
                    "--log-level",
                    "info",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        process = self._process

        def answers() -> bool:
            return httpx.get(f"{self.url}/status", timeout=1).status_code == 200

        def exited() -> str | None:
            code = process.poll()
            return None if code is None else f"the Atropos server exited with {code}"

        try:
            wait_until(
                answers,
                what=f"the Atropos server at {self.url} to answer /status",
                every_s=0.2,
                abort=exited,
                explain=lambda: self.log.read_text(errors="replace")[-4000:],
                ignoring=(httpx.HTTPError,),
            )
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def requests(self, method: str, path: str) -> int:
        """How many `method path` requests the server has answered so far (its access log)."""
        line = f'"{method} {path} HTTP/'
        return sum(line in entry for entry in self.log.read_text(errors="replace").splitlines())

    def register_trainer(self, batch_size: int) -> None:
        """What a trainer does when it starts: `/register`, then its first `/batch`."""
        response = httpx.post(
            f"{self.url}/register",
            json={
                "wandb_group": "rolltape-test",
                "wandb_project": "rolltape-test",
                "batch_size": batch_size,
                "max_token_len": 4096,
                "checkpoint_dir": "checkpoints",
                "save_checkpoint_interval": 1000,
                "starting_step": 0,
                "num_steps": 10,
            },
            timeout=10,
        )
        response.raise_for_status()
        # A trainer asks for its first batch right after registering: only then does the server
        # let environments register (`started`).
        httpx.get(f"{self.url}/batch", timeout=10).raise_for_status()

    def batch(self) -> object:
        return httpx.get(f"{self.url}/batch", timeout=10).json()["batch"]

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
            self._process = None
        self.log.unlink(missing_ok=True)
