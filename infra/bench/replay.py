"""`rolltape bench replay`: events/s from a topic through replay (audit, filters, a reward
function), fold and ShareGPT export, against the raw consume rate of the same topic.

Load: N events over S agent sessions (start, then user turn / assistant turn with reasoning /
tool call / tool result rounds, a reward, the end), sealed and chained as the recorder writes
them and produced straight to a scratch events topic. Each pass reads the whole topic:

- raw: a plain aiokafka scan of the same records, counting them (the ceiling of reading alone);
- pipeline: the same scan into replay records, `replay_order`, then a session at a time
  (`Replayer.sessions`) the processors' pure step (chain audit with hash check, filters, reward
  function), the fold of the events as the step decoded them (each record decoded once) with
  its derived outputs, and its `sharegpt_row` + JSON line rendered at once (as the export
  streams). Stage times are reported too;
- decode: every record of the pass read through the codec once (`read_event` and its payload
  model), nothing else. With the read stage it is the least a one-process pipeline that decodes
  each record once must spend, so `events / (read + decode)` is that pipeline's ceiling here,
  whatever its processing costs.

Then once each: `rolltape log replay --dry-run` itself (`run_replay`, one process) and with `--jobs`;
`rolltape log replay --dry-run --group` as commands, one member alone and two members in one group
started together; and `rolltape dataset export` (ShareGPT) as a command, its rate and peak RSS beside those of the same
export holding every record in memory (how export worked before it streamed) and of
`rolltape dataset export --help` (the import floor).

Medians over the passes; the topics are deleted afterwards.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rolltape.infra.bench._figures import Figures, machine_line
from rolltape.infra.bench._load import write_agent_sessions
from rolltape.infra.bench._machine import machine
from rolltape.infra.broker import require_connection
from rolltape.infra.commands.replay import run_replay
from rolltape.infra.kafka.readback import read_records
from rolltape.infra.kafka.topics import scratch_prefix
from rolltape.infra.settings import Settings
from rolltape.processors import (
    Emitted,
    ProcessorConfig,
    Replayer,
    ReplayRecord,
    ReplayResult,
    replay_order,
)
from rolltape.processors.audit import InputRecord, Position
from rolltape.projections import ExportOptions, build_export, checked_event, fold
from rolltape.projections.exporters import jsonl_line, sharegpt_row
from rolltape.schemas import Role, Stream, TypedEvent, read_event
from rolltape.schemas.clients import KafkaConnection


class ReplayBench(Figures):
    """What `rolltape bench replay` prints: the replay-fold-export pipeline against a raw scan
    of the same topic (medians over `passes`), the commands' own rates and export's memory."""

    machine: str
    partitions: int
    events: int
    sessions: int
    passes: int
    load_s: float
    raw_events_per_s: float
    pipeline_events_per_s: float
    pipeline_vs_raw: float
    read_s: float
    replay_s: float
    fold_s: float
    export_s: float
    export_lines: int
    export_bytes: int
    decode_s: float
    """Every record through the codec once (header, hash, payload model), in memory."""
    decode_ceiling_events_per_s: float
    """events / (read + decode): the rate of a pipeline that reads and decodes each record once
    and does nothing else (the ceiling of any processing done in one process after it)."""
    command_events_per_s: float
    """`rolltape log replay --dry-run` over the same topic (reads its own records, one partition
    number at a time), one process."""
    jobs: int
    command_jobs_events_per_s: float
    """The same with `--jobs`: partition numbers replayed in parallel processes."""
    group_one_events_per_s: float
    """`rolltape log replay --dry-run --group G`, one member alone (a fresh process: start, group
    settling and every partition)."""
    group_two_events_per_s: float
    """The same with two members started together in one group (the union of their partitions
    is every partition): events / the slower member's time."""
    pipeline_vs_decode_ceiling: float
    """pipeline_events_per_s / decode_ceiling_events_per_s (goal >= 0.5)."""
    group_two_vs_one: float
    """group_two_events_per_s / group_one_events_per_s (goal >= 1.6)."""
    export_events_per_s: float
    """`rolltape dataset export --format sharegpt` over the topic (read, fold, sort, write), as a
    command (process start included)."""
    export_peak_rss_mb: float
    """That process's peak resident memory."""
    in_memory_export_events_per_s: float
    in_memory_export_peak_rss_mb: float
    """The same export holding every record and trajectory in memory (before it streamed)."""
    idle_rss_mb: float
    """`rolltape dataset export --help`: the command's import floor under both."""

    def lines(self) -> Iterator[str]:
        yield machine_line(self.machine, f"{self.partitions} partitions")
        medians = f"medians of {self.passes} passes" if self.passes > 1 else "one pass"
        yield (
            f"{self.events:,} events over {self.sessions:,} sessions (written in "
            f"{self.load_s:.1f} s); {medians}"
        )
        yield f"  raw aiokafka scan of the topic:        {self.raw_events_per_s:,.0f} events/s"
        yield (
            f"  replay + fold + ShareGPT export:       {self.pipeline_events_per_s:,.0f} events/s "
            f"(ratio to raw {self.pipeline_vs_raw:.2f})"
        )
        yield (
            f"  stages: read {self.read_s:.2f} s, replay {self.replay_s:.2f} s, "
            f"fold {self.fold_s:.2f} s, export {self.export_s:.2f} s"
        )
        yield f"    ({self.export_lines:,} lines, {self.export_bytes / 1e6:.1f} MB)"
        yield (
            "  read + decode alone (no processing):   "
            f"{self.decode_ceiling_events_per_s:,.0f} events/s (decode {self.decode_s:.2f} s)"
        )
        verdict = "met" if self.pipeline_vs_decode_ceiling >= 0.5 else "MISSED"
        yield (
            f"    pipeline / (read + decode): {self.pipeline_vs_decode_ceiling:.2f} "
            f"(goal >= 0.5: {verdict})"
        )
        yield (
            "  rolltape log replay --dry-run, one process: "
            f"{self.command_events_per_s:,.0f} events/s"
        )
        yield (
            f"    --jobs {self.jobs}: {self.command_jobs_events_per_s:,.0f} events/s "
            f"({self.command_jobs_events_per_s / self.command_events_per_s:.2f}x)"
        )
        verdict = "met" if self.group_two_vs_one >= 1.6 else "MISSED"
        yield (
            "  rolltape log replay --dry-run --group, one member: "
            f"{self.group_one_events_per_s:,.0f} events/s; two members: "
            f"{self.group_two_events_per_s:,.0f} events/s "
            f"({self.group_two_vs_one:.2f}x, goal >= 1.6: {verdict})"
        )
        yield (
            "  rolltape dataset export -f sharegpt (command): "
            f"{self.export_events_per_s:,.0f} events/s, "
            f"peak RSS {self.export_peak_rss_mb:,.0f} MB"
        )
        yield (
            f"    same export held in memory: {self.in_memory_export_events_per_s:,.0f} events/s, "
            f"peak RSS {self.in_memory_export_peak_rss_mb:,.0f} MB"
        )
        yield f"    `export --help` alone: peak RSS {self.idle_rss_mb:,.0f} MB"


async def _raw(connection: KafkaConnection, prefix: str) -> float:
    start = time.perf_counter()
    count = 0
    async for _ in read_records(connection, [Stream.EVENTS], prefix=prefix):
        count += 1
    return count / (time.perf_counter() - start)


async def _read(connection: KafkaConnection, prefix: str) -> list[ReplayRecord]:
    return [
        ReplayRecord(
            InputRecord(r.stream.value, r.key, r.value, Position(r.topic, r.partition, r.offset)),
            r.broker_ts_ms,
        )
        async for r in read_records(connection, [Stream.EVENTS], prefix=prefix)
    ]


def _pipeline(
    connection: KafkaConnection, prefix: str, config: ProcessorConfig
) -> dict[str, float]:
    t0 = time.perf_counter()
    raw = asyncio.run(_read(connection, prefix))
    t1 = time.perf_counter()
    # A session at a time, as `rolltape dataset export` folds from its spill: holding every decoded
    # event of the topic at once made the cyclic GC the largest cost of this stage. Each session
    # is folded from the events its replay step decoded (no second decode of a record), and
    # rendered at once, as the export streams: holding every trajectory of a 1,000,000-event
    # topic until the end nearly doubled this stage (full collections traversing them).
    replayer = Replayer(config)
    result = ReplayResult()
    chains: dict[tuple[str, str], list[Emitted]] = defaultdict(list)
    lines: list[bytes] = []
    fold_s = export_s = 0.0
    clock = time.perf_counter
    events_stream = Stream.EVENTS.value
    for session in replayer.sessions(replay_order(raw), result):
        t2 = clock()
        for output in session.outputs:
            chains[(output.stream, output.session_id)].append(output)
        events = [e for e in session.events if e.stream == events_stream]
        trajectory = fold(events, [read_event(o.value) for o in session.outputs])
        t3 = clock()
        lines.append(jsonl_line(sharegpt_row(trajectory)))
        t4 = clock()
        fold_s += t3 - t2
        export_s += t4 - t3
    replayer.finish(result, chains)
    replay_s = clock() - t1 - fold_s - export_s  # the rest: ordering and the step
    t5 = clock()
    for item in raw:
        _ = read_event(item.record.value).body
    decode_s = clock() - t5
    return {
        "events": len(raw),
        "read": t1 - t0,
        "replay": replay_s,
        "fold": fold_s,
        "export": export_s,
        "decode": decode_s,
        "lines": len(lines),
        "bytes": sum(len(line) for line in lines),
    }


def in_memory_export() -> None:
    """The baseline (`python -m rolltape.infra.bench.replay`): export the topic of the
    ROLLTAPE_* settings as ShareGPT holding every record and trajectory in memory (how export
    worked before it streamed)."""
    settings = Settings()
    reader = require_connection(settings, Role.READER)
    trajectories = asyncio.run(_fold_in_memory(reader, settings.topic_prefix))
    build_export(trajectories, ExportOptions(format="sharegpt"))


async def _fold_in_memory(connection: KafkaConnection, prefix: str) -> list[Any]:
    events: dict[str, list[TypedEvent]] = defaultdict(list)
    async for record in read_records(connection, [Stream.EVENTS], prefix=prefix):
        env, _ = checked_event(record.value)
        if env is not None:
            events[env.session_id].append(env)
    return [fold(events[sid]) for sid in sorted(events)]


_PEAK_AT_EXIT = """
import atexit, runpy, sys
def peak():
    with open("/proc/self/status") as status:
        kib = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    sys.__stderr__.write(f"\\npeak-rss-kib {kib}\\n")
atexit.register(peak)
module, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""
"""Runs a module as `python -m` would, then writes the process's peak RSS (VmHWM: the kernel's
high-water mark of this program's memory; the rusage of a child counts its parent's memory from
before exec, so it cannot be used)."""


def _measured(settings: Settings, module: str, *args: str) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of `python -m module *args` with the scratch topics'
    settings, in a fresh process."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_AT_EXIT, module, *args],
        env={**os.environ, **settings.child_env()},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    seconds = time.perf_counter() - start
    errors = done.stderr.decode(errors="replace")
    peaks = [line.split()[1] for line in errors.splitlines() if line.startswith("peak-rss-kib ")]
    if done.returncode != 0 or not peaks:
        raise RuntimeError(f"python -m {module} {' '.join(args)} failed: {errors[-2000:]}")
    return seconds, int(peaks[-1]) / 1024


def _group_replay(settings: Settings, members: int) -> float:
    """Seconds until `members` processes of `rolltape log replay --dry-run --group` (a fresh group),
    started together, have all returned (process start, the group's settling and the wait for
    the others included: what a user on that many hosts waits)."""
    group = f"benchreplay-{uuid.uuid4().hex[:8]}"
    cli = [sys.executable, "-m", "rolltape.infra", "log", "replay", "--judge-version", "live"]
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [*cli, "--dry-run", "--group", group],
            env={**os.environ, **settings.child_env()},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(members)
    ]
    errors = [p.communicate()[1].decode(errors="replace") for p in procs]
    seconds = time.perf_counter() - start
    failed = [e for p, e in zip(procs, errors, strict=True) if p.returncode != 0]
    if failed:
        raise RuntimeError(f"a member of replay group {group} failed: {failed[0][-2000:]}")
    return seconds


def _export_figures(settings: Settings) -> tuple[tuple[float, float], ...]:
    """`rolltape dataset export`, the in-memory baseline and the command's import floor, each in a
    fresh process: (seconds, peak RSS MB) each."""
    with tempfile.TemporaryDirectory() as out:
        cli = ("rolltape.infra", "dataset", "export")
        streamed = _measured(settings, *cli, "-f", "sharegpt", "-o", str(Path(out) / "x"))
        in_memory = _measured(settings, "rolltape.infra.bench.replay")
        idle = _measured(settings, *cli, "--help")
    return streamed, in_memory, idle


def run_replay_bench(
    settings: Settings,
    *,
    partitions: int,
    events: int = 1_000_000,
    sessions: int = 10_000,
    passes: int = 3,
    jobs: int = 2,
) -> ReplayBench:
    """Write the load to a scratch prefix (deleted after), time the raw scan and the pipeline
    per pass, then `replay --dry-run` (one process and `jobs`) and `export` in fresh processes.
    Needs a broker; peak RSS is read from /proc, so Linux only."""
    require_connection(settings, Role.ADMIN)  # a clear error when there is no broker
    config = ProcessorConfig(rewards=("final_reward",))
    with scratch_prefix(settings, "benchreplay", partitions=partitions) as scratch:
        prefix = scratch.topic_prefix
        reader = require_connection(scratch, Role.READER)
        start = time.perf_counter()
        written = asyncio.run(
            write_agent_sessions(require_connection(scratch, Role.AGENT), prefix, events, sessions)
        )
        load_s = time.perf_counter() - start
        raw_rates, runs = [], []
        for _ in range(passes):
            raw_rates.append(asyncio.run(_raw(reader, prefix)))
            runs.append(_pipeline(reader, prefix, config))
        command = asyncio.run(run_replay(scratch, config, dry_run=True))
        parallel = asyncio.run(run_replay(scratch, config, dry_run=True, jobs=jobs))
        group_one = _group_replay(scratch, 1)
        group_two = _group_replay(scratch, 2)
        streamed, in_memory, idle = _export_figures(scratch)

    def median(key: str) -> float:
        return statistics.median(run[key] for run in runs)

    total = statistics.median(
        run["read"] + run["replay"] + run["fold"] + run["export"] for run in runs
    )
    raw_rate = statistics.median(raw_rates)
    pipeline_rate = written / total
    ceiling = written / statistics.median(run["read"] + run["decode"] for run in runs)
    return ReplayBench(
        machine=machine(),
        partitions=partitions,
        events=written,
        sessions=sessions,
        passes=passes,
        load_s=load_s,
        raw_events_per_s=raw_rate,
        pipeline_events_per_s=pipeline_rate,
        pipeline_vs_raw=pipeline_rate / raw_rate,
        read_s=median("read"),
        replay_s=median("replay"),
        fold_s=median("fold"),
        export_s=median("export"),
        export_lines=int(median("lines")),
        export_bytes=int(median("bytes")),
        decode_s=median("decode"),
        decode_ceiling_events_per_s=ceiling,
        pipeline_vs_decode_ceiling=pipeline_rate / ceiling,
        command_events_per_s=command.records_read / command.seconds,
        jobs=jobs,
        command_jobs_events_per_s=parallel.records_read / parallel.seconds,
        group_one_events_per_s=written / group_one,
        group_two_events_per_s=written / group_two,
        group_two_vs_one=group_one / group_two,
        export_events_per_s=written / streamed[0],
        export_peak_rss_mb=streamed[1],
        in_memory_export_events_per_s=written / in_memory[0],
        in_memory_export_peak_rss_mb=in_memory[1],
        idle_rss_mb=idle[1],
    )


if __name__ == "__main__":  # the in-memory baseline, run by `_export_figures`
    in_memory_export()
