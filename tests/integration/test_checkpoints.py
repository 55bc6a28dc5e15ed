"""The worker commits the chain heads it verified to signed checkpoint logs on the verdicts
stream: every tree head verifies with the judge's public key and extends the one before it, and
every session's head is included, ended sessions at once and running ones periodically."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rolltape.infra.keys import judge_key
from rolltape.producers import Recorder
from rolltape.schemas import Checkpoint, Role, Stream, decode
from rolltape.schemas.trust import LogTree
from rolltape.schemas.trust._merkle import verify_inclusion
from tests.integration.conftest import Topics
from tests.integration.workers import WorkerProcess, payloads, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def worker(topics: Topics, tmp_path: Path) -> Iterator[WorkerProcess]:
    process = WorkerProcess(topics, tmp_path, ROLLTAPE_CHECKPOINT_INTERVAL_S="1").start()
    try:
        yield process
    finally:
        process.stop()


def test_checkpoints__sign_every_verified_head_in_consistent_logs(
    topics: Topics, worker: WorkerProcess, tmp_path: Path
) -> None:
    agent = Recorder(topics.connection(Role.AGENT), topic_prefix=topics.prefix, spool_dir=tmp_path)
    with agent:
        for i in range(8):
            with agent.session("2+2", session_id=f"ck-{i}") as s:
                s.turn("user", "2+2?")
                s.turn("assistant", "4")
        running = agent.session("still going", session_id="ck-running")
        running.turn("user", "hello")
        agent.flush()
        heads = {
            (r.session_id, r.last_seq, r.head_hash)
            for r in topics.verify().reports()
            if r.stream == Stream.EVENTS.value
        }

        def committed(records: list) -> set[tuple[str, int, str]]:
            return {
                (leaf["session_id"], leaf["seq"], leaf["hash"])
                for cp in payloads(records, "checkpoint")
                for leaf in cp["leaves"]
            }

        records = wait_for(topics, lambda rs: heads <= committed(rs), worker=worker)
        running.end()

    public = judge_key(topics.settings).private_key().public_key()
    logs: dict[str, list[tuple[int, Checkpoint]]] = {}
    for record in records:
        env = decode(record.value)
        if env["type"] == "checkpoint":
            payload = Checkpoint.model_validate(env["payload"])
            logs.setdefault(env["session_id"], []).append((env["seq"], payload))
    assert logs and all(name.startswith("checkpoints.p") for name in logs)
    included = set()
    for name, entries in logs.items():
        tree = LogTree(name, public)
        for _, checkpoint in sorted(dict(entries).items()):
            assert tree.add(checkpoint) == [], name
        head = tree.heads[-1][0]
        root = bytes.fromhex(head.root_hash)
        for index, leaf in enumerate(tree.leaves):
            proof = tree.inclusion(index, head.tree_size)
            assert verify_inclusion(tree.hashes[index], index, head.tree_size, proof, root)
            included.add((leaf.session_id, leaf.seq, leaf.hash))
    assert heads <= included
    assert ("ck-running", 1, next(h for s, _, h in heads if s == "ck-running")) in included
