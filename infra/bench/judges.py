"""`rolltape bench judges`: what judging in the world costs beside the plain tools.

(a) Recording a world and restoring it, against `tar` of the same tree in the same run: the
    record is the snapshot (every file read and hashed, links read, modes kept) plus the blob
    records the recorder hands its sender (chunked, with headers), not the broker's time; the
    restore is a fresh folder rebuilt from the snapshot and its blobs. `tar -cf` and `tar -xf`
    (GNU tar, into and out of an archive on the same file system) are the baseline. Two trees:
    200 files of 5 MB in all, and 2,000 files of the same total, both in nested folders.
(b) A shell tool call in the bubblewrap sandbox against the same command run unsandboxed: the
    added time per call (namespaces, mounts, the capability drop), median of many calls.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic import BaseModel

from rolltape.infra.bench._figures import Figures, machine_line
from rolltape.infra.bench._machine import machine
from rolltape.producers import restore_snapshot, take_snapshot
from rolltape.producers.agent import Sandbox, sandbox_problem
from rolltape.schemas import blob_records


class SnapshotFigures(BaseModel):
    files: int
    bytes: int
    record_p50_ms: float
    restore_p50_ms: float
    tar_create_p50_ms: float
    tar_extract_p50_ms: float
    record_ratio: float
    """record / tar -cf (goal: at most 2)."""
    restore_ratio: float
    """restore / tar -xf (goal: at most 2)."""


class SandboxFigures(BaseModel):
    command: str
    calls: int
    sandboxed_p50_ms: float
    unsandboxed_p50_ms: float
    added_p50_ms: float
    """Goal: at most 20 ms."""


class JudgesFigures(Figures):
    """Everything `rolltape bench judges` prints: worlds recorded and restored against tar, and
    a sandboxed shell tool call against the same command unsandboxed."""

    machine: str
    repeats: int
    snapshots: list[SnapshotFigures]
    sandbox: SandboxFigures | None
    sandbox_problem: str | None = None

    def lines(self) -> Iterator[str]:
        yield machine_line(self.machine, f"{self.repeats} repeats, medians")
        yield "(a) a world recorded (snapshot + blob records) and restored, against GNU tar"
        yield "    (goal: each ratio at most 2)"
        for s in self.snapshots:
            yield f"    {s.files:,} files, {s.bytes / 2**20:.0f} MB:"
            yield (
                f"      record  {s.record_p50_ms:7.1f} ms  tar -cf {s.tar_create_p50_ms:7.1f} ms  "
                f"ratio {s.record_ratio:.2f}"
            )
            yield (
                f"      restore {s.restore_p50_ms:7.1f} ms  tar -xf {s.tar_extract_p50_ms:7.1f} ms  "
                f"ratio {s.restore_ratio:.2f}"
            )
        if self.sandbox is None:
            yield f"(b) sandbox: not measured: {self.sandbox_problem}"
            return
        b = self.sandbox
        yield f"(b) a shell tool call ({b.command!r}, {b.calls} each way)"
        yield (
            f"    bubblewrap {b.sandboxed_p50_ms:.1f} ms, unsandboxed {b.unsandboxed_p50_ms:.1f} "
            f"ms, added {b.added_p50_ms:.1f} ms (goal: at most 20 ms)"
        )


def _tree(root: Path, files: int, total_bytes: int, seed: int = 7) -> None:
    """`files` files of random bytes (incompressible, as built artefacts are) in folders of 20,
    two levels deep, `total_bytes` in all."""
    rng = random.Random(seed)
    size = total_bytes // files
    for n in range(files):
        folder = root / f"pkg{n // 200:02d}" / f"mod{n // 20:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"file{n:04d}.py").write_bytes(rng.randbytes(size))


def _alternating(operations: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median milliseconds of each operation over `repeats` rounds, one call of each per round:
    file creation on a virtual disk stalls now and then (journal commits), and alternating
    lets a stall hit every operation alike instead of one block of runs."""
    runs: dict[str, list[float]] = {name: [] for name in operations}
    for _ in range(repeats):
        for name, operation in operations.items():
            started = time.perf_counter()
            operation()
            runs[name].append((time.perf_counter() - started) * 1000)
    return {name: statistics.median(values) for name, values in runs.items()}


def _snapshot_figures(files: int, total_bytes: int, repeats: int) -> SnapshotFigures:
    tar = shutil.which("tar")
    if tar is None:
        raise RuntimeError("the baseline needs GNU tar")
    with tempfile.TemporaryDirectory(prefix="rolltape-bench-judges-") as tmp:
        base = Path(tmp)
        root = base / "world"
        _tree(root, files, total_bytes)
        taken = take_snapshot(root)
        counter = iter(range(10**6))

        def record() -> None:  # what Session.world does before the sender takes over
            snapshot, blobs = take_snapshot(root)
            for sha, data in (*blobs.items(), (snapshot.digest, snapshot.manifest)):
                blob_records(data, sha256=sha)

        def restore() -> None:
            restore_snapshot(*taken, base / f"restored{next(counter)}")

        archive = base / "world.tar"

        def tar_create() -> None:
            subprocess.run([tar, "-cf", str(archive), "-C", str(root), "."], check=True)

        def tar_extract() -> None:
            dest = base / f"extracted{next(counter)}"
            dest.mkdir()
            subprocess.run([tar, "-xf", str(archive), "-C", str(dest)], check=True)

        tar_create()
        figures = _alternating(
            {
                "record": record,
                "restore": restore,
                "tar_create": tar_create,
                "tar_extract": tar_extract,
            },
            repeats,
        )
    return SnapshotFigures(
        files=files,
        bytes=total_bytes,
        record_p50_ms=figures["record"],
        restore_p50_ms=figures["restore"],
        tar_create_p50_ms=figures["tar_create"],
        tar_extract_p50_ms=figures["tar_extract"],
        record_ratio=figures["record"] / figures["tar_create"],
        restore_ratio=figures["restore"] / figures["tar_extract"],
    )


async def _sandbox_figures(calls: int) -> SandboxFigures:
    command = "true"
    with tempfile.TemporaryDirectory(prefix="rolltape-bench-sandbox-") as tmp:
        world = Path(tmp)
        sandboxed, plain = Sandbox(world), Sandbox(world, unsandboxed=True)
        boxed: list[float] = []
        unboxed: list[float] = []
        for _ in range(calls):  # alternating, so drift in the machine's load hits both
            for sandbox, runs in ((sandboxed, boxed), (plain, unboxed)):
                started = time.perf_counter()
                result = await sandbox.run(command)
                runs.append((time.perf_counter() - started) * 1000)
                if result.exit_code != 0:
                    raise RuntimeError(f"{command!r} failed in {sandbox.mode}: {result.output}")
    boxed_p50, unboxed_p50 = statistics.median(boxed), statistics.median(unboxed)
    return SandboxFigures(
        command=command,
        calls=calls,
        sandboxed_p50_ms=boxed_p50,
        unsandboxed_p50_ms=unboxed_p50,
        added_p50_ms=boxed_p50 - unboxed_p50,
    )


def run_judges_bench(*, repeats: int = 9, calls: int = 200) -> JudgesFigures:
    snapshots = [
        _snapshot_figures(200, 5 * 1024 * 1024, repeats),
        _snapshot_figures(2000, 5 * 1024 * 1024, repeats),
    ]
    problem = sandbox_problem()
    sandbox = asyncio.run(_sandbox_figures(calls)) if problem is None else None
    return JudgesFigures(
        machine=machine(),
        repeats=repeats,
        snapshots=snapshots,
        sandbox=sandbox,
        sandbox_problem=problem,
    )
