"""A real PostgreSQL server for the tests, from Debian's packages (scripts/test.sh installs
them): a cluster made with `initdb` in a temporary folder, its postmaster listening on a free
port of 127.0.0.1 (and on a socket in that folder), stopped and removed afterwards.

PostgreSQL refuses to run as root: as root the cluster is made and run as the `postgres` system
user (which Debian's package creates), the folder handed to it, through util-linux's `setpriv`
(which execs the command: the process the tests hold is the postmaster itself). Each test takes a database of
its own (`fresh_database`), so that no two share tables.

The fixtures: `postgres_server` (a `PostgresServer`: its URL and data folder, for a test that
looks at the server's files) and `postgres_url` (the URL alone), one server per test process;
a conftest registers them with `pytest_plugins = ["tests.support.postgres"]` (or imports both).
"""

from __future__ import annotations

import glob
import itertools
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.waiting import wait_until

SUPERUSER = "rolltape"
"""The cluster's superuser (the one `postgres_server`'s URL names)."""

_START_TRIES = 3
"""Starts on another free port when the one picked was taken meanwhile."""

_databases = itertools.count(1)


@dataclass(frozen=True)
class PostgresServer:
    """A running server: the URL of its `rolltape` database
    (`postgresql://rolltape:PASSWORD@127.0.0.1:PORT/rolltape`) and its data folder."""

    url: str
    data_dir: Path


@contextmanager
def postgres_server(settings: Mapping[str, str] | None = None) -> Iterator[str]:
    """The URL (`postgresql://rolltape:PASSWORD@127.0.0.1:PORT/rolltape`) of a fresh server
    that runs until the block ends; `settings` are more `-c name=value` of the postmaster
    (the defaults: `fsync=off`, `wal_recycle=off`)."""
    with running_postgres(settings) as server:
        yield server.url


@contextmanager
def running_postgres(settings: Mapping[str, str] | None = None) -> Iterator[PostgresServer]:
    """`postgres_server`, with the server's data folder beside its URL."""
    bindir = _bindir()
    runas = _run_as()
    root = Path(tempfile.mkdtemp(prefix="rolltape-pg-"))
    try:
        if runas:
            shutil.chown(root, user=runas, group=runas)
        data = root / "data"
        password = secrets.token_hex(16)
        pwfile = root / "pwfile"
        pwfile.write_text(password + "\n")
        if runas:
            shutil.chown(pwfile, user=runas, group=runas)
        _run(
            runas,
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                SUPERUSER,
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ],
            cwd=root,
        )
        pwfile.unlink()
        # fsync off: a test server needs no durability. wal_recycle off: a checkpoint deletes
        # the WAL segments it no longer needs instead of renaming them for reuse with their old
        # bytes, so a test can take an erased text out of pg_wal too (pg_switch_wal() then
        # CHECKPOINT, as the superuser).
        options = {"fsync": "off", "wal_recycle": "off", **(settings or {})}
        process, url = _start(runas, bindir, data, root, password, options)
        try:
            _run_sql(url, f"CREATE DATABASE {SUPERUSER}")
            yield PostgresServer(url=_with_database(url, SUPERUSER), data_dir=data)
        finally:
            _stop(runas, bindir, data, root, process)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session", name="postgres_server")
def postgres_server_fixture() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the test session; give each test a database of its own with
    `fresh_database(postgres_server.url)`."""
    with running_postgres() as server:
        yield server


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    """The session's PostgreSQL server's URL (its `rolltape` database); give each test a
    database of its own with `fresh_database(postgres_url)`."""
    return postgres_server.url


def fresh_database(url: str) -> str:
    """The URL of a new, empty database on the server of `url` (`test_<n>`)."""
    name = f"test_{os.getpid()}_{next(_databases)}"
    _run_sql(url, f"CREATE DATABASE {name}")
    return _with_database(url, name)


def data_dir(url: str) -> Path:
    """The data folder of the server at `url` (its files, as the server sees them)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SHOW data_directory").fetchone()
    assert row is not None
    return Path(str(row[0]))


# -- how --------------------------------------------------------------------------------------------
def _bindir() -> Path:
    """Where initdb and pg_ctl are: Debian's /usr/lib/postgresql/<version>/bin (the highest
    version), else the PATH."""
    found = sorted(
        (Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")),
        key=lambda bindir: _version_key(bindir.parent.name),
    )
    if found and (found[-1] / "pg_ctl").exists():
        return found[-1]
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl and Path(initdb).parent == Path(pg_ctl).parent:
        return Path(initdb).parent
    pytest.fail(
        "PostgreSQL's server (initdb, pg_ctl) is not installed, neither under "
        "/usr/lib/postgresql/*/bin nor on the PATH: scripts/test.sh installs it "
        "(Debian's postgresql, apt-get)"
    )


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", name)) or (0,)


def _run_as() -> str | None:
    """The user the server runs as: None (this one), or `postgres` where this one is root."""
    if os.geteuid() != 0:
        return None
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        pytest.fail(
            "running as root, and PostgreSQL refuses to: there is no `postgres` system user "
            "to run it as (Debian's postgresql package creates it; scripts/test.sh installs it)"
        )
    if shutil.which("setpriv") is None:
        pytest.fail(
            "running as root, and util-linux's setpriv is missing to run PostgreSQL as `postgres`"
        )
    return "postgres"


def _command(runas: str | None, argv: list[str]) -> list[str]:
    if runas is None:
        return argv
    return ["setpriv", f"--reuid={runas}", f"--regid={runas}", "--init-groups", "--", *argv]


def _run(runas: str | None, argv: list[str], *, cwd: Path) -> None:
    done = subprocess.run(
        _command(runas, argv), cwd=cwd, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} exited with {done.returncode}:\n{done.stdout}{done.stderr}"
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(
    runas: str | None,
    bindir: Path,
    data: Path,
    root: Path,
    password: str,
    options: Mapping[str, str],
) -> tuple[subprocess.Popen[bytes], str]:
    """The postmaster, run in the foreground (its exit is seen at once), once it accepts
    connections; another port is tried where the one picked was taken meanwhile."""
    import psycopg

    log = root / "postgres.log"
    for attempt in range(1, _START_TRIES + 1):
        port = _free_port()
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(port),
            "unix_socket_directories": str(root),
            **options,
        }
        argv = [str(bindir / "postgres"), "-D", str(data)]
        for name, value in settings.items():
            argv += ["-c", f"{name}={value}"]
        with open(log, "ab") as out:
            process = subprocess.Popen(
                _command(runas, argv), cwd=root, stdout=out, stderr=subprocess.STDOUT
            )
        url = f"postgresql://{SUPERUSER}:{password}@127.0.0.1:{port}/postgres"

        def accepts(url: str = url) -> bool:
            psycopg.connect(url, connect_timeout=5).close()
            return True

        def exited(process: subprocess.Popen[bytes] = process) -> str | None:
            code = process.poll()
            return None if code is None else f"postgres exited with {code}"

        try:
            wait_until(
                accepts,
                what=f"PostgreSQL to accept connections on 127.0.0.1:{port}",
                ignoring=(psycopg.OperationalError,),
                abort=exited,
                explain=lambda: f"its log ({log}):\n{log.read_text(errors='replace')[-4000:]}",
            )
            return process, url
        except AssertionError:
            if process.poll() is None:
                process.kill()
                process.wait()
            taken = "could not bind" in log.read_text(errors="replace")
            if attempt == _START_TRIES or not taken:
                raise
    raise AssertionError("unreachable")


def _stop(
    runas: str | None,
    bindir: Path,
    data: Path,
    root: Path,
    process: subprocess.Popen[bytes],
) -> None:
    if process.poll() is None:
        subprocess.run(
            _command(runas, [str(bindir / "pg_ctl"), "stop", "-D", str(data), "-m", "fast", "-w"]),
            cwd=root,
            capture_output=True,
            check=False,
        )
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _run_sql(url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


def _with_database(url: str, name: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))
