"""A sandbox for the shell tools of agents and judges: bubblewrap, or a refusal.

A model's shell command is untrusted code. bubblewrap gives it its own mount, pid, network and
user namespaces without a daemon or a container image, in a few milliseconds per command, so
every call can get a fresh sandbox. Inside, the system is read-only, the world (the rollout's
working directory) and folders named explicitly are writable, there is no network, and the
command runs under time, memory and file-size limits; all its capabilities are dropped (root
in a user namespace could otherwise remount the read-only system writable).

The world is mounted at the fixed path /world, which is also the working directory, so what
a command prints does not depend on where the world lies on the host and rollouts stay
reproducible.

The system is not `/` made read-only: home and state folders hold secrets (signing keys, API
tokens) that a read-only mount would still let the command read and print. Only what programs
need is mounted: /usr (with the merged-usr links), /etc, and the running interpreter's
installation, so `python -m pytest` works inside with this environment's packages.

Where bubblewrap cannot run, commands are refused (`SandboxError`); they run unsandboxed only
when the caller opts out explicitly.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rolltape.producers._errors import SandboxError
from rolltape.producers.agent._tools import Tool, _object
from rolltape.schemas import ToolSpec

_WORLD = "/world"
_MERGED_USR = ("/bin", "/sbin", "/lib", "/lib64", "/lib32")
# Namespaces, and what a command inside must not keep: capabilities, its parent's session
# (a terminal it could push input into), a life of its own once its runner is killed.
_ISOLATION = (
    "--unshare-all",
    "--cap-drop",
    "ALL",
    "--die-with-parent",
    "--new-session",
    "--hostname",
    "sandbox",
)
_TIMED_OUT = 124  # timeout(1)'s exit code
_DRAIN_S = 1.0  # after the command ends, how long output may still arrive from what it left


class SandboxLimits(BaseModel):
    """What one command may use."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_s: float = Field(60.0, gt=0)
    memory_bytes: int = Field(2 << 30, gt=0)
    """Address space of each process (RLIMIT_AS)."""
    max_output_bytes: int = Field(64 << 10, gt=0)
    """Stdout and stderr together; past it the head and the tail are kept."""
    max_file_bytes: int = Field(256 << 20, gt=0)
    """Largest file a process may write (RLIMIT_FSIZE)."""
    tmp_bytes: int = Field(256 << 20, gt=0)
    """Size of the private /tmp (a tmpfs, in memory)."""


class SandboxResult(BaseModel):
    """How a command ended and what it printed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    exit_code: int
    output: str
    """Stdout and stderr interleaved, decoded as UTF-8 with replacement characters."""
    timed_out: bool
    truncated: int
    """Bytes of output cut between the kept head and tail."""
    seconds: float


def sandbox_problem(bwrap: str = "bwrap") -> str | None:
    """Why bubblewrap (`bwrap`, a program name or path) cannot make a sandbox here, or None
    when it can. A trial sandbox is made once per program; the answer is kept."""
    return _trial(bwrap)


@functools.cache
def _trial(bwrap: str) -> str | None:
    program = shutil.which(bwrap)
    if program is None:
        return f"bubblewrap ({bwrap}) is not installed: apt-get install bubblewrap"
    try:
        trial = subprocess.run(
            [program, *_system_args(), *_ISOLATION, "true"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap ({program}) does not run: {e}"
    if trial.returncode != 0:
        stderr = trial.stderr.decode(errors="replace").strip()
        return f"bubblewrap ({program}) cannot make a sandbox here (user namespaces disabled?): {stderr}"
    return None


class Sandbox:
    """Runs commands in `world`, mounted read-write at /world inside a bubblewrap sandbox.

    `binds` and `ro_binds` add folders (path inside -> path on the host), writable or
    read-only. `unsandboxed=True` is the explicit opt-out: commands run as plain processes in
    the world on the host, under the same time, memory and output limits.
    """

    def __init__(
        self,
        world: Path,
        limits: SandboxLimits | None = None,
        *,
        binds: Mapping[str, Path] | None = None,
        ro_binds: Mapping[str, Path] | None = None,
        unsandboxed: bool = False,
        bwrap: str = "bwrap",
    ) -> None:
        self.world = world.resolve()
        self.limits = limits or SandboxLimits()
        self.binds = {inside: host.resolve() for inside, host in (binds or {}).items()}
        self.ro_binds = {inside: host.resolve() for inside, host in (ro_binds or {}).items()}
        for inside in [*self.binds, *self.ro_binds]:
            if not inside.startswith("/"):
                raise ValueError(f"a path inside the sandbox must be absolute, not {inside!r}")
        self.unsandboxed = unsandboxed
        self.bwrap = bwrap

    @property
    def mode(self) -> Literal["bubblewrap", "unsandboxed"]:
        """How commands run: in a bubblewrap sandbox, or unsandboxed because the caller opted
        out."""
        return "unsandboxed" if self.unsandboxed else "bubblewrap"

    async def run(
        self, command: str | Sequence[str], *, timeout_s: float | None = None
    ) -> SandboxResult:
        """Run `command` (a string through /bin/sh -c, a sequence as argv) with stdin from
        /dev/null. On timeout every process it started is killed and the exit code is 124.
        `SandboxError` when bubblewrap cannot run here and the caller did not opt out."""
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        if self.unsandboxed:
            return await self._run(
                argv, cwd=self.world, env=_environment(str(self.world)), timeout_s=timeout_s
            )
        problem = sandbox_problem(self.bwrap)
        if problem is not None:
            raise SandboxError(
                f"{problem}. Shell commands run only inside a bubblewrap sandbox; run tools "
                "unsandboxed only by opting out explicitly (unsandboxed=True)."
            )
        # bubblewrap gets the host's environment to find itself; the command gets none of it.
        return await self._run(
            [self.bwrap, *self._bwrap_args(), *argv], cwd=None, env=None, timeout_s=timeout_s
        )

    def _bwrap_args(self) -> list[str]:
        args = [*_system_args(self.limits.tmp_bytes), "--bind", str(self.world), _WORLD]
        for inside, host in self.binds.items():
            args += ["--bind", str(host), inside]
        for inside, host in self.ro_binds.items():
            args += ["--ro-bind", str(host), inside]
        args += [*_ISOLATION, "--clearenv"]
        for name, value in {**_environment(_WORLD), "TMPDIR": "/tmp"}.items():
            args += ["--setenv", name, value]
        return [*args, "--chdir", _WORLD]

    async def _run(
        self,
        argv: list[str],
        *,
        cwd: Path | None,
        env: dict[str, str] | None,
        timeout_s: float | None,
    ) -> SandboxResult:
        timeout = self.limits.timeout_s if timeout_s is None else timeout_s
        started = time.monotonic()
        # A session of its own: killing its process group kills the command and what it
        # started (in the sandbox, bubblewrap's pid namespace takes the rest with it).
        transport, command = await asyncio.get_running_loop().subprocess_exec(
            lambda: _Command(self.limits.max_output_bytes),
            *argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
            preexec_fn=_rlimits(self.limits),
        )
        try:
            done, _ = await asyncio.wait({command.exited}, timeout=timeout)
        finally:
            # Background jobs the command left (or all of it, on timeout or cancellation).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(transport.get_pid(), signal.SIGKILL)
            # Unsandboxed, a process that left the session may keep the output open.
            await asyncio.wait({command.exited, command.output_ended}, timeout=_DRAIN_S)
            transport.close()
        text, truncated = command.output.text()
        return SandboxResult(
            exit_code=transport.get_returncode() if done else _TIMED_OUT,
            output=text,
            timed_out=not done,
            truncated=truncated,
            seconds=time.monotonic() - started,
        )


def shell_tool(sandbox: Sandbox, *, name: str = "shell") -> Tool:
    """A tool that runs one shell command in `sandbox`. A failing or timed-out command is a
    result the model reads (`exit code N` or `timed out after T s`, then the output); a
    `SandboxError` (no sandbox here) is raised."""
    timeout = f"{sandbox.limits.timeout_s:g}"
    writable = ", ".join([_WORLD, *sandbox.binds, "/tmp"])
    where = (
        f"in {_WORLD}, the working directory, with no network (only {writable} are writable)"
        if sandbox.mode == "bubblewrap"
        else "in the working directory"
    )

    async def shell(command: str) -> str:
        result = await sandbox.run(command)
        status = (
            f"timed out after {timeout} s" if result.timed_out else f"exit code {result.exit_code}"
        )
        return f"{status}\n{result.output}"

    return Tool(
        ToolSpec(
            name=name,
            description=(
                f"Run a shell command (sh -c) {where}; it is killed after {timeout} s. "
                "Returns its exit code, then its output (stdout and stderr)."
            ),
            parameters=_object(command={"type": "string"}),
        ),
        shell,
    )


def _system_args(tmp_bytes: int = 256 << 20) -> list[str]:
    """The sandbox without the world: /usr and /etc read-only, /bin and friends as the host
    has them (links under merged /usr, else read-only folders), its own /proc, /dev and /tmp,
    then the interpreter's folders read-only (after /tmp, which may hold a venv)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for path in _MERGED_USR:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev"]
    args += ["--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    for path in _interpreter_paths():
        args += ["--ro-bind", path, path]
    return args


@functools.cache
def _interpreter_paths() -> tuple[str, ...]:
    """The running interpreter's installation and environment (a venv, and the Python it was
    made from), each folder once and none under /usr, which is mounted already."""
    candidates = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
    }
    kept: list[Path] = []
    for path in sorted(Path(os.path.abspath(c)) for c in candidates):
        if not any(path.is_relative_to(root) for root in [Path("/usr"), *kept]):
            kept.append(path)
    return tuple(str(path) for path in kept)


def _environment(home: str) -> dict[str, str]:
    """All a command gets: none of the host's variables (API keys live there)."""
    return {
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _rlimits(limits: SandboxLimits) -> Callable[[], None]:
    """Set in the child before exec, so bubblewrap and every process of the command inherit
    them without a wrapper process."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.max_file_bytes, limits.max_file_bytes))

    return apply


class _Command(asyncio.SubprocessProtocol):
    """A running command: the bounded output, when the command exits and when its output ends
    (later, if something it started holds the output open)."""

    def __init__(self, max_output_bytes: int) -> None:
        self.output = _Output(max_output_bytes)
        loop = asyncio.get_running_loop()
        self.exited: asyncio.Future[None] = loop.create_future()
        self.output_ended: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        assert isinstance(data, bytes)
        self.output.add(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self.output_ended.set_result(None)

    def process_exited(self) -> None:
        self.exited.set_result(None)


class _Output:
    """The first and last bytes of a stream, and how many were between them."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = max(self.head_limit - len(self.head), 0)
        self.head += chunk[:room]
        self.tail += chunk[room:]
        del self.tail[: max(len(self.tail) - self.tail_limit, 0)]

    def text(self) -> tuple[str, int]:
        cut = self.total - len(self.head) - len(self.tail)
        head = self.head.decode(errors="replace")
        tail = self.tail.decode(errors="replace")
        if not cut:
            return head + tail, 0
        return f"{head}\n[... {cut} bytes cut ...]\n{tail}", cut
