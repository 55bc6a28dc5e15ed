"""The live feed as a training dataset on the real broker and worker: ranks read disjoint
samples whose union is the whole, and a trainer killed and restored from its checkpoint repeats
no sample the checkpoint had seen."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from rolltape.producers import Recorder
from rolltape.projections import Selection
from tests.integration.conftest import Topics
from tests.integration.workers import WorkerProcess, payloads, wait_for
from tests.support.captured import captured_exchange
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
torch = pytest.importorskip("torch")

SESSIONS = 12


def record_captured(topics: Topics, spool: Path, count: int = SESSIONS) -> set[str]:
    """Sessions as a captured client against vLLM records them (exact ids and logprobs)."""
    with Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=spool) as rec:
        for i in range(count):
            with rec.session("count", session_id=f"tok-{i:02d}", group_id=f"g{i // 2}") as s:
                captured_exchange(s, i)
                s.reward(float(i % 3))
    return {f"tok-{i:02d}" for i in range(count)}


def _decided(topics: Topics, tmp_path: Path, count: int = SESSIONS) -> set[str]:
    sessions = record_captured(topics, tmp_path / "spool", count)
    worker = WorkerProcess(topics, tmp_path).start()
    try:
        wait_for(topics, lambda rs: len(payloads(rs, "filter_outcome")) >= count, worker=worker)
    finally:
        worker.stop()
    return sessions


def _stream(topics: Topics, **kw: Any) -> Any:
    from rolltape.projections.dataset import TokenStream

    return TokenStream(topics.reader, prefix=topics.prefix, selection=Selection(), **kw)


def _read(
    streams: dict[int, Any], enough: Any, views: dict[int, Any] | None = None
) -> dict[int, list[dict[str, Any]]]:
    """Every stream read in a thread of its own (a rank's process) until `enough(rows)`;
    `views`: what to iterate instead of a stream (its Hugging Face dataset)."""
    got: dict[int, list[dict[str, Any]]] = {n: [] for n in streams}

    def rank(number: int) -> None:
        got[number].extend((views or {}).get(number, streams[number]))

    threads = [threading.Thread(target=rank, args=(n,), daemon=True) for n in streams]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: got, enough, what="the samples", timeout_s=120)
    finally:
        for stream in streams.values():
            stream.stop()
        for thread in threads:
            thread.join(30)
    return got


def test_two_ranks_read_disjoint_samples_whose_union_is_the_whole(
    topics: Topics, tmp_path: Path
) -> None:
    sessions = _decided(topics, tmp_path)
    from rolltape.projections.dataset import hf_dataset

    streams = {n: _stream(topics, group_id="ddp", rank=n, world_size=2) for n in (0, 1)}
    # Rank 1 reads through the Hugging Face dataset the stream makes.
    views = {1: hf_dataset(streams[1])}
    got = _read(streams, lambda got: sum(map(len, got.values())) >= SESSIONS, views)
    ids = {n: {row["session_id"] for row in rows} for n, rows in got.items()}
    assert ids[0] and ids[1] and not ids[0] & ids[1]
    assert ids[0] | ids[1] == sessions
    assert sum(len(rows) for rows in got.values()) == SESSIONS  # nothing twice
    # What a training run's lineage records of a stream: the samples it gave, where from
    # (the partitions it owned when it stopped: none, if a rebalance was under way).
    consumed, positions = streams[0].take_consumed()
    assert {sid for sid, _ in consumed} == ids[0]
    assert all(start <= end for start, end in positions.values())
    assert streams[0].take_consumed()[0] == []  # each sample once
    row = got[0][0]
    assert row["mask"] == [0, 0, 0, 1, 1] and row["logprobs"][3:] == [-0.5, -0.01]


TRAINER = """
import sys, os, time, torch
from rolltape.infra.settings import Settings
from rolltape.infra.broker import require_connection
from rolltape.projections import Selection
from rolltape.projections.dataset import TokenStream
from rolltape.schemas import Role

out, checkpoint = sys.argv[1], sys.argv[2]
settings = Settings()
stream = TokenStream(require_connection(settings, Role.READER), group_id="trainer",
                     prefix=settings.topic_prefix, selection=Selection(), stack="verl")
with open(out, "a") as seen:
    for n, row in enumerate(stream, 1):
        if n == 11:  # a long step, in which it is killed
            time.sleep(3600)
        seen.write(row["extra_fields"]["sample_id"] + "\\n")
        seen.flush()
        if n % 4 == 0:  # the trainer's checkpoint: the model's step and the stream's place
            torch.save({"step": n, "data": stream.state_dict()}, checkpoint + ".tmp")
            os.replace(checkpoint + ".tmp", checkpoint)
            seen.write(f"checkpoint {n}\\n")
            seen.flush()
"""


def test_a_trainer_killed_and_restored_repeats_no_sample_it_had_checkpointed(
    topics: Topics, tmp_path: Path
) -> None:
    sessions = _decided(topics, tmp_path)
    out, checkpoint = tmp_path / "seen.txt", tmp_path / "ckpt.pt"
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER, str(out), str(checkpoint)],
        env=topics.env(),
        start_new_session=True,
    )
    try:
        # Killed past its second checkpoint (after 8 samples), with 2 yielded after it.
        wait_until(
            lambda: out.exists() and len(out.read_text().splitlines()) >= 12,
            timeout_s=120,
            what="the trainer to read ten samples",
        )
    finally:
        os.killpg(trainer.pid, signal.SIGKILL)
        trainer.wait()
    lines = out.read_text().splitlines()
    state = torch.load(checkpoint, weights_only=True)
    step = state["step"]
    mark = lines.index(f"checkpoint {step}")
    before = [line for line in lines[:mark] if " " not in line]
    after = [line for line in lines[mark + 1 :] if " " not in line]
    assert len(before) == step and after  # some samples came after the checkpoint

    restored = _stream(topics, group_id="trainer", stack="verl")
    restored.load_state_dict(state["data"])
    rows = _read({0: restored}, lambda got: len(got[0]) >= len(sessions) - step)[0]
    again = [row["extra_fields"]["sample_id"] for row in rows]
    assert not set(again) & set(before)  # nothing the checkpoint had seen comes again
    assert set(after) <= set(again)  # what came after it does: the model never learned it
    everything = [*before, *again]
    assert len(everything) == len(set(everything))
    assert len(everything) == len(sessions)
