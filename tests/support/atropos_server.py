"""Atropos's own API server app (atroposlib.api.server:app) run by uvicorn in a subprocess, so
the sink is tested against the server trainers really use."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from types import TracebackType

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AtroposServer:
    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> AtroposServer:
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "atroposlib.api.server:app",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/status", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self._process.poll() is not None:
                raise RuntimeError(f"the Atropos server exited with {self._process.returncode}")
            time.sleep(0.2)
        raise RuntimeError("the Atropos server did not answer within 60 s")

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
