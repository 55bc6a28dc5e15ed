"""Test hosts: network namespaces joined by veth pairs to one bridge, as separate machines on one
switch (`ip netns` and `ip link` from iproute2; needs root, which CI has).

Each host is a namespace with its loopback and one veth link, addressed `10.<net>.0.<n>/24` on
that link only; the bridge lives in a namespace of its own with no address, so traffic goes
nowhere but between these hosts (and each host's loopback). The test runner's own namespace is
joined as the host `runner`, so the test can talk to the hosts it starts. `cut(host)` takes a
host's link down (it is cut off from the others, its processes keep running) and `heal(host)`
brings it back. Everything is removed on `close`, processes started on the hosts included.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Sequence
from typing import Any


def can_make_hosts() -> bool:
    """Whether this machine lets the tests make namespaces (root, iproute2)."""
    return os.geteuid() == 0 and shutil.which("ip") is not None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class Hosts:
    """`names` hosts on one switch; use as a context manager."""

    def __init__(self, names: Sequence[str]) -> None:
        tag = uuid.uuid4().hex[:6]
        self._net = 100 + int(tag[:2], 16) % 100
        self._switch = f"rt{tag}sw"
        self._names = list(names)
        self.namespaces = {name: f"rt{tag}{i}" for i, name in enumerate(self._names)}
        self.addresses = {name: f"10.{self._net}.0.{i + 1}" for i, name in enumerate(self._names)}
        self.addresses["runner"] = f"10.{self._net}.0.250"
        self._links = {name: f"rt{tag}s{i}" for i, name in enumerate([*self._names, "runner"])}
        self._procs: list[subprocess.Popen[Any]] = []

    def __enter__(self) -> Hosts:
        try:
            _ip("netns", "add", self._switch)
            _ip("-n", self._switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self._switch, "link", "set", "br0", "up")
            for name in [*self._names, "runner"]:
                self._join(name)
        except Exception:
            self.close()
            raise
        return self

    def _join(self, name: str) -> None:
        link = self._links[name]
        host_end = f"{link}h"
        _ip("link", "add", host_end, "type", "veth", "peer", "name", link)
        _ip("link", "set", link, "netns", self._switch)
        _ip("-n", self._switch, "link", "set", link, "master", "br0")
        _ip("-n", self._switch, "link", "set", link, "up")
        where: list[str] = []
        if name != "runner":
            ns = self.namespaces[name]
            _ip("netns", "add", ns)
            _ip("link", "set", host_end, "netns", ns)
            where = ["-n", ns]
            _ip(*where, "link", "set", "lo", "up")
        _ip(*where, "addr", "add", f"{self.addresses[name]}/24", "dev", host_end)
        _ip(*where, "link", "set", host_end, "up")

    def command(self, host: str, argv: Sequence[str]) -> list[str]:
        """`argv` as run on `host`."""
        return ["ip", "netns", "exec", self.namespaces[host], *argv]

    def start(self, host: str, argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
        """A process on `host`, stopped with the hosts."""
        proc = subprocess.Popen(self.command(host, argv), **popen)
        self._procs.append(proc)
        return proc

    def cut(self, host: str) -> None:
        """Take `host`'s link down: it is cut off from every other host."""
        _ip("-n", self._switch, "link", "set", self._links[host], "down")

    def heal(self, host: str) -> None:
        _ip("-n", self._switch, "link", "set", self._links[host], "up")

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
        for ns in [*self.namespaces.values(), self._switch]:
            subprocess.run(["ip", "netns", "pids", ns], capture_output=True, check=False)
            pids = subprocess.run(
                ["ip", "netns", "pids", ns], capture_output=True, text=True, check=False
            ).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        runner = f"{self._links['runner']}h"
        subprocess.run(["ip", "link", "del", runner], capture_output=True, check=False)

    def __exit__(self, *exc: object) -> None:
        self.close()
