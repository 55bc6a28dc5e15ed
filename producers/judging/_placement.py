"""Where each judge of a rollout runs, so that every judge reads the one recorded world.

- `rollout` placement: a tools judge runs in the live workdir after the policy finished; judges
  sharing it run one after another, and the workdir is reset to the recorded snapshot before
  each (what a scorer or an earlier judge changed is undone: judges grade the rollout, not each
  other's work). With no live workdir (a replay), each runs in a restored copy, still in turn.
- `clean_room` placement: each judge gets a fresh copy restored from the snapshot and runs
  concurrently with the others.
- A null judge touches no world and runs concurrently too.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rolltape.producers._world import WorldError, reset_world, restore_snapshot
from rolltape.producers.judging._inputs import JudgeInputs, WorldView
from rolltape.producers.judging._runtime import JudgeRuntime
from rolltape.schemas import JudgeSpec, Verdict, WorldSnapshot


@dataclass(frozen=True)
class RecordedWorld:
    """A rollout's recorded world: its snapshot and kept contents, and the live workdir while
    the rollout's runner still has it (None on replay)."""

    snapshot: WorldSnapshot
    blobs: Mapping[str, bytes]
    live: Path | None = None


async def run_judges(
    runtime: JudgeRuntime,
    specs: Sequence[JudgeSpec],
    judged_session_id: str,
    *,
    inputs: JudgeInputs,
    world: RecordedWorld | None,
    workdir_root: Path | None = None,
) -> list[Verdict]:
    """Run every spec on the judged session where its placement says; the verdicts in the order
    of `specs` (error verdicts for judges that failed, never an exception for them)."""
    verdicts: dict[int, Verdict] = {}

    async def in_copy(spec: JudgeSpec, recorded: RecordedWorld) -> Verdict:
        with tempfile.TemporaryDirectory(prefix="rolltape-world-", dir=workdir_root) as folder:
            path = Path(folder) / "world"
            try:
                await asyncio.to_thread(restore_snapshot, recorded.snapshot, recorded.blobs, path)
            except (WorldError, OSError, ValueError) as exc:
                return runtime.error(spec, f"the world could not be restored: {exc}")
            view = WorldView(path, recorded.snapshot, restored=True)
            return await runtime.run(spec, judged_session_id, inputs=inputs, world=view)

    async def one(index: int, spec: JudgeSpec) -> None:
        if spec.agent.harness == "null" or world is None:
            verdicts[index] = await runtime.run(spec, judged_session_id, inputs=inputs)
        else:
            verdicts[index] = await in_copy(spec, world)

    async def in_turn(judges: list[tuple[int, JudgeSpec]]) -> None:
        for index, spec in judges:
            if world is None or world.live is None:
                await one(index, spec)
                continue
            try:
                await asyncio.to_thread(reset_world, world.live, world.snapshot, world.blobs)
            except (WorldError, OSError, ValueError) as exc:
                verdicts[index] = runtime.error(spec, f"the world could not be reset: {exc}")
                continue
            view = WorldView(world.live, world.snapshot, restored=False)
            verdicts[index] = await runtime.run(spec, judged_session_id, inputs=inputs, world=view)

    shared = [
        (i, s)
        for i, s in enumerate(specs)
        if s.agent.harness == "tools" and s.agent.placement == "rollout"
    ]
    alone = [(i, s) for i, s in enumerate(specs) if (i, s) not in shared]
    await asyncio.gather(in_turn(shared), *(one(i, s) for i, s in alone))
    return [verdicts[i] for i in range(len(specs))]
