"""The shell tools' sandbox, with the real bubblewrap: the world is the only writable place the
host shares, the system is read-only, the host's other folders, environment and network are
out of reach, limits hold, and without bubblewrap commands are refused unless the caller opts
out."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rolltape.producers import SandboxError
from rolltape.producers.agent import (
    Sandbox,
    SandboxLimits,
    SandboxResult,
    sandbox_problem,
    shell_tool,
)
from tests.support.waiting import wait_until


def _run(sandbox: Sandbox, command: str | list[str], **kwargs: float) -> SandboxResult:
    return asyncio.run(sandbox.run(command, **kwargs))


@pytest.fixture
def world(tmp_path: Path) -> Path:
    world = tmp_path / "world"
    world.mkdir()
    return world


def test_sandbox__the_world_is_the_writable_working_directory_at_world(world: Path) -> None:
    sandbox = Sandbox(world)
    result = _run(sandbox, "pwd; echo made > made.txt")
    assert (sandbox.mode, result.exit_code, result.output) == ("bubblewrap", 0, "/world\n")
    assert (world / "made.txt").read_text() == "made\n"


def test_sandbox__the_system_is_read_only_even_to_root_inside(world: Path) -> None:
    for command in ["touch /usr/x", "touch /etc/x", "mount -o remount,rw,bind /usr"]:
        result = _run(Sandbox(world), command)
        assert result.exit_code != 0, (command, result.output)
    assert not Path("/usr/x").exists() and not Path("/etc/x").exists()


def test_sandbox__the_hosts_other_folders_and_environment_are_hidden(
    world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("key")
    monkeypatch.setenv("ROLLTAPE_TEST_SECRET", "token")
    result = _run(Sandbox(world), f"cat {secret}; test -e {__file__} && echo visible; env")
    assert result.exit_code == 0
    assert "key" not in result.output and "visible" not in result.output
    assert "No such file or directory" in result.output
    assert "ROLLTAPE_TEST_SECRET" not in result.output
    assert "HOME=/world\n" in result.output


def test_sandbox__has_no_network(world: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        connect = [
            "python",
            "-c",
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "    print('connected')\n"
            "except OSError as e:\n"
            "    print(type(e).__name__)",
        ]
        inside = _run(Sandbox(world), connect)
        outside = _run(Sandbox(world, unsandboxed=True), connect)
    assert (inside.output, outside.output) == ("ConnectionRefusedError\n", "connected\n")
    interfaces = _run(Sandbox(world), "cat /proc/net/dev").output.splitlines()[2:]
    assert [line.split(":")[0].strip() for line in interfaces] == ["lo"]


@contextlib.contextmanager
def _held_open(world: Path) -> Iterator[Callable[[], bool]]:
    """A FIFO, `held` in the world, whose read end this process holds: a command that opens its
    write end (`exec 3>held`) passes it to every process it starts. The returned check reads
    the end of file once all of them are gone (a live one makes the read wait instead)."""
    fifo = world / "held"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)

    def gone() -> bool:
        try:
            return os.read(fd, 1) == b""
        except BlockingIOError:
            return False

    try:
        yield gone
    finally:
        os.close(fd)


@pytest.mark.parametrize("unsandboxed", [False, True])
def test_sandbox__the_time_limit_kills_the_command_and_its_background_jobs(
    world: Path, unsandboxed: bool
) -> None:
    sandbox = Sandbox(world, SandboxLimits(timeout_s=0.3), unsandboxed=unsandboxed)
    with _held_open(world) as gone:
        result = _run(sandbox, "exec 3>held; echo started; (sleep 30; touch late) & sleep 30")
        assert (result.exit_code, result.timed_out, result.output) == (124, True, "started\n")
        wait_until(gone, what="the timed-out command and its background job to be gone")
    assert not (world / "late").exists()


def test_sandbox__background_jobs_end_with_the_command(world: Path) -> None:
    with _held_open(world) as gone:
        result = _run(Sandbox(world), "exec 3>held; (sleep 30; touch late) & echo started")
        assert (result.exit_code, result.timed_out, result.output) == (0, False, "started\n")
        wait_until(gone, what="the command's background job to end with it")
    assert not (world / "late").exists()


def test_sandbox__the_memory_limit_fails_a_big_allocation(world: Path) -> None:
    sandbox = Sandbox(world, SandboxLimits(memory_bytes=512 << 20))
    small = _run(sandbox, ["python", "-c", "b = bytearray(64 << 20); print('ok')"])
    big = _run(sandbox, ["python", "-c", "b = bytearray(4 << 30); print('ok')"])
    assert (small.exit_code, small.output) == (0, "ok\n")
    assert big.exit_code != 0 and "MemoryError" in big.output


def test_sandbox__the_file_size_limit_stops_a_big_write(world: Path) -> None:
    sandbox = Sandbox(world, SandboxLimits(max_file_bytes=1 << 20))
    result = _run(sandbox, "head -c 2000000 /dev/zero > big")
    assert result.exit_code != 0
    assert (world / "big").stat().st_size == 1 << 20


def test_sandbox__output_past_the_limit_keeps_head_and_tail(world: Path) -> None:
    full = "".join(f"{n}\n" for n in range(1, 100_001))
    result = _run(Sandbox(world, SandboxLimits(max_output_bytes=1000)), "seq 1 100000")
    assert result.truncated == len(full) - 1000
    assert result.output == f"{full[:500]}\n[... {result.truncated} bytes cut ...]\n{full[-500:]}"


def test_sandbox__runs_pytest_with_this_interpreter(world: Path) -> None:
    (world / "test_inside.py").write_text("def test_adds():\n    assert 1 + 1 == 2\n")
    result = _run(Sandbox(world), ["python", "-m", "pytest", "-q", "test_inside.py"])
    assert result.exit_code == 0, result.output
    assert "1 passed" in result.output
    assert not (world / "__pycache__").exists()


def test_sandbox__extra_binds_are_writable_or_read_only(world: Path, tmp_path: Path) -> None:
    judge, data = tmp_path / "judge", tmp_path / "data"
    judge.mkdir()
    data.mkdir()
    (data / "in.txt").write_text("given")
    sandbox = Sandbox(world, binds={"/judge": judge}, ro_binds={"/data": data})
    result = _run(sandbox, "cat /data/in.txt > /judge/out.txt; touch /data/no")
    assert result.exit_code != 0
    assert (judge / "out.txt").read_text() == "given"
    assert not (data / "no").exists()


def test_sandbox__without_bubblewrap_refuses_and_says_how_to_opt_out(
    world: Path, tmp_path: Path
) -> None:
    missing = str(tmp_path / "no-bwrap")
    assert sandbox_problem(missing) == (
        f"bubblewrap ({missing}) is not installed: apt-get install bubblewrap"
    )
    with pytest.raises(SandboxError, match=r"apt-get install bubblewrap\..*unsandboxed=True"):
        _run(Sandbox(world, bwrap=missing), "touch ran")
    assert not (world / "ran").exists()


def test_sandbox_problem__gives_the_error_of_a_failed_trial_sandbox(tmp_path: Path) -> None:
    bwrap = tmp_path / "bwrap"
    bwrap.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    )
    bwrap.chmod(0o755)
    problem = sandbox_problem(str(bwrap))
    assert problem is not None
    assert problem.endswith(
        "cannot make a sandbox here (user namespaces disabled?): "
        "bwrap: No permissions to create new namespace"
    )


def test_sandbox__the_explicit_opt_out_runs_in_the_world_on_the_host(
    world: Path, tmp_path: Path
) -> None:
    sandbox = Sandbox(world, unsandboxed=True, bwrap=str(tmp_path / "no-bwrap"))
    result = _run(sandbox, "pwd; echo $HOME")
    assert sandbox.mode == "unsandboxed"
    assert (result.exit_code, result.output) == (0, f"{world}\n{world}\n")


def test_shell_tool__returns_the_exit_code_and_output_and_does_not_raise(world: Path) -> None:
    tool = shell_tool(Sandbox(world, SandboxLimits(timeout_s=0.5)))
    assert (tool.name, tool.spec.parameters["required"]) == ("shell", ["command"])
    assert "/world" in tool.spec.description and "no network" in tool.spec.description
    failed = asyncio.run(tool({"command": "echo out; echo err >&2; exit 3"}))
    timed_out = asyncio.run(tool({"command": "echo started; sleep 5"}))
    assert failed == "exit code 3\nout\nerr\n"
    assert timed_out == "timed out after 0.5 s\nstarted\n"


def test_sandbox__uses_this_interpreter(world: Path) -> None:
    result = _run(Sandbox(world), ["python", "-c", "import sys; print(sys.prefix)"])
    assert result.output == f"{sys.prefix}\n"
