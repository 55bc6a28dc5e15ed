"""Signed checkpoints as the judge writes them: a log whose tree heads verify with the judge's
public key, extend each other, and include every committed head; any forgery is named."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rolltape.processors import ProcessorConfig, SessionProcessor, SessionState
from rolltape.processors.audit import CheckpointSigner, log_for_partition
from rolltape.schemas import ChainHeadLeaf, Checkpoint, decode
from rolltape.schemas.trust import LogTree
from rolltape.schemas.trust._merkle import verify_inclusion
from tests.unit.processors.scripted import Tape, dead_letters, run

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
LOG = "checkpoints.p0.0"


def heads(first: int, n: int) -> list[ChainHeadLeaf]:
    return [
        ChainHeadLeaf(stream="events", session_id=f"s{i}", seq=i, hash=f"{i:064x}")
        for i in range(first, first + n)
    ]


def checkpoints(sizes: list[int], key: Ed25519PrivateKey = KEY) -> list[Checkpoint]:
    processor = SessionProcessor(ProcessorConfig(signer=CheckpointSigner(key)))
    state = SessionState()
    out, done = [], 0
    for n in sizes:
        emitted = processor.checkpoint(state, LOG, heads(done, n), timestamp_ms=1_000 + done)
        done += n
        out.append(Checkpoint.model_validate(decode(emitted.value)["payload"]))
    return out


def test_log__every_tree_head_verifies_extends_the_last_and_includes_its_leaves() -> None:
    tree = LogTree(LOG, KEY.public_key())
    for checkpoint in checkpoints([1, 3, 4, 1, 7]):
        assert tree.add(checkpoint) == []
    assert len(tree.leaves) == 16 and len(tree.heads) == 5
    head = tree.heads[-1][0]
    for index in range(16):
        proof = tree.inclusion(index, head.tree_size)
        root = bytes.fromhex(head.root_hash)
        assert verify_inclusion(tree.hashes[index], index, head.tree_size, proof, root)
    assert tree.find(heads(5, 1)[0]) == 5


def test_log__a_checkpoint_signed_by_another_key_is_named() -> None:
    forged = checkpoints([2], key=Ed25519PrivateKey.from_private_bytes(bytes(32)))[0]
    forged = forged.model_copy(update={"tree_head": checkpoints([2])[0].tree_head})
    (problem,) = LogTree(LOG, KEY.public_key()).add(forged)
    assert "signature is not the judge key's" in problem


def test_log__an_edited_root_or_leaf_is_named() -> None:
    first, second = checkpoints([2, 2])
    edited_head = second.tree_head.model_copy(update={"root_hash": "0" * 64})
    tree = LogTree(LOG, KEY.public_key())
    assert tree.add(first) == []
    problems = tree.add(second.model_copy(update={"tree_head": edited_head}))
    assert any("signature" in p for p in problems) and any("root is not" in p for p in problems)
    swapped = second.model_copy(update={"leaves": tuple(heads(7, 2))})
    other = LogTree(LOG, KEY.public_key())
    assert other.add(first) == []
    assert any("root is not" in p for p in other.add(swapped))


def test_log__a_rewritten_history_fails_consistency_even_when_signed() -> None:
    honest = checkpoints([2, 2])
    # The judge's key signs a second tree whose first leaves differ: consistent with nothing.
    processor = SessionProcessor(ProcessorConfig(signer=CheckpointSigner(KEY)))
    state = SessionState()
    processor.checkpoint(state, LOG, heads(10, 2), 1)
    rewritten = Checkpoint.model_validate(
        decode(processor.checkpoint(state, LOG, heads(2, 2), 2).value)["payload"]
    )
    tree = LogTree(LOG, KEY.public_key())
    assert tree.add(honest[0]) == []
    problems = tree.add(rewritten)
    assert any("not consistent" in p for p in problems)


def test_log__a_missing_checkpoint_is_named() -> None:
    first, _, third = checkpoints([1, 2, 3])
    tree = LogTree(LOG, KEY.public_key())
    assert tree.add(first) == []
    (problem,) = tree.add(third)
    assert "a checkpoint is missing or repeated" in problem


def test_log_names__put_each_log_on_its_own_partition() -> None:
    from aiokafka.partitioner import DefaultPartitioner

    every = list(range(6))
    for partition in every:
        name = log_for_partition(partition, 6)
        assert DefaultPartitioner()(name.encode(), every, every) == partition


def test_reserved_session_ids__a_raw_record_posing_as_a_checkpoint_log_is_dead_lettered() -> None:
    tape = Tape()
    outputs, states = run([tape.start("checkpoints.p0.0")])
    assert dead_letters(outputs) == ["reserved_session_id"] and states == {}
