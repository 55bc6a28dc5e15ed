"""`rolltape serve console` as a test starts it, and plain HTTP requests to it."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.waiting import wait_until


class ConsoleProcess:
    """`rolltape serve console --port 0` with the given settings; its address from its first
    line."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log_path = log
        self._log = open(log, "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rolltape.infra", "serve", "console", "--port", "0"],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        line = wait_until(
            lambda: re.search(r"console on (http://\S+/)", log.read_text(errors="replace")),
            lambda m: m is not None or self.proc.poll() is not None,
            what="the console listening",
            explain=self.output,
        )
        assert line is not None, self.output()
        self.url = line.group(1).rstrip("/")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        code = self.proc.wait(60)
        self._log.close()
        return code


def get(url: str, **headers: str) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def post(url: str, body: bytes, **headers: str) -> tuple[int, dict[str, str], str]:
    """A form posted as a script elsewhere would post it (no browser, no cookies but those
    given)."""
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/x-www-form-urlencoded", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()
