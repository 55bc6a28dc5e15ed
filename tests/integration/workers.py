"""A real `rolltape serve worker` process for the tests, and reading its outputs back."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rolltape.infra.kafka.readback import RawRecord, read_records
from rolltape.schemas import ChainReport, ChainVerifier, Stream, decode
from tests.integration.conftest import Topics
from tests.support.waiting import DEFAULT_TIMEOUT_S, wait_until

OUTPUT_STREAMS = (Stream.RULES, Stream.VERDICTS, Stream.FILTERED, Stream.DEADLETTER)


class WorkerProcess:
    """`python -m rolltape.infra worker` on the test's topics; logs go to a file."""

    def __init__(
        self, topics: Topics, log_dir: Path, *, on: list[str] | None = None, **env: str
    ) -> None:
        self.topics = topics
        self.log_dir = log_dir
        self.on = on or []
        """The command prefix that runs it on a test host (`Hosts.command(host, [])`)."""
        self.env = {**topics.env(), **env}
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> WorkerProcess:
        self.starts += 1
        log = open(self.log_dir / f"worker-{self.starts}.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [
                *self.on,
                sys.executable,
                "-m",
                "rolltape.infra",
                "serve",
                "worker",
                "--log-level",
                "info",
            ],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self._log = log
        return self

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        self._log.close()
        return code

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def full_log(self) -> str:
        return "\n".join(
            p.read_text(errors="replace") for p in sorted(self.log_dir.glob("worker-*.log"))
        )

    def log(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-4000:] for p in sorted(self.log_dir.glob("worker-*.log"))
        )


def read_all(topics: Topics, streams: tuple[Stream, ...] = OUTPUT_STREAMS) -> list[RawRecord]:
    async def go() -> list[RawRecord]:
        return [r async for r in read_records(topics.reader, streams, prefix=topics.prefix)]

    return asyncio.run(go())


def wait_for(
    topics: Topics,
    done: Callable[[list[RawRecord]], bool],
    *,
    worker: WorkerProcess | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    streams: tuple[Stream, ...] = OUTPUT_STREAMS,
) -> list[RawRecord]:
    """Read the outputs until `done` holds (a `wait_until` on the topics); fail with what was
    read and the worker's log when it never does, at once when the worker exited."""

    def exited() -> str | None:
        return None if worker is None or worker.alive() else "the worker exited"

    return wait_until(
        lambda: read_all(topics, streams),
        done,
        what=f"the records on {', '.join(s.value for s in streams)}",
        timeout_s=timeout_s,
        every_s=0.5,
        abort=exited,
        describe=lambda records: f"{len(records)} read; {_outputs_summary(records)}",
        explain=worker.log if worker is not None else None,
    )


def _outputs_summary(records: list[RawRecord]) -> str:
    """Distinct outputs by type, and the sessions holding two different outputs of a type that
    a session gets once (a restart that recomputed something differently): what a failed wait
    was missing or had too much of."""
    kinds: dict[str, set[str]] = {}
    once: dict[tuple[str, str], set[str]] = {}
    breaks: dict[str, str] = {}
    for r in records:
        env = decode(r.value)
        kinds.setdefault(str(env["type"]), set()).add(str(env["event_id"]))
        if env["type"] == "chain_broken":
            breaks[str(env["event_id"])] = f"{env['session_id']}: {env['payload']}"
        if env["type"] in ("verdict", "filter_outcome"):
            key = (str(env["type"]), str(env["session_id"]))
            once.setdefault(key, set()).add(str(env["event_id"]))
    counts = ", ".join(f"{kind} {len(ids)}" for kind, ids in sorted(kinds.items()))
    doubled = sorted(f"{t}:{sid}" for (t, sid), ids in once.items() if len(ids) > 1)
    found = "".join(f"\n  chain break {b}" for b in breaks.values())
    return f"distinct: {counts}; differing copies: {', '.join(doubled) or 'none'}{found}"


def payloads(
    records: list[RawRecord], event_type: str, session_id: str | None = None
) -> list[dict[str, Any]]:
    """Payloads of one event type, first copy per event id, in log order."""
    seen: set[str] = set()
    out = []
    for r in records:
        if r.stream == Stream.DEADLETTER:
            continue
        env = decode(r.value)
        if env["type"] != event_type or (session_id and env["session_id"] != session_id):
            continue
        if env["event_id"] in seen:
            continue
        seen.add(env["event_id"])
        out.append(env["payload"])
    return out


def dead_letters(records: list[RawRecord]) -> list[dict[str, str]]:
    return [
        {k: v.decode() for k, v in r.headers} | {"value": r.value.decode("utf-8", "replace")}
        for r in records
        if r.stream == Stream.DEADLETTER
    ]


def chain_reports(records: list[RawRecord]) -> list[ChainReport]:
    """Verify the chains among records read back (dead letters carry foreign bytes: skipped)."""
    verifier = ChainVerifier()
    for r in records:
        if r.stream != Stream.DEADLETTER:
            verifier.add(r.value, key=r.key, expected_stream=r.stream.value, position=r.position)
    return verifier.reports()
