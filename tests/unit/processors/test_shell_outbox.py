"""The worker's batch loop over a plain dict table, with a producer that can die mid-send:
what was saved is resent byte for byte, so a restart that reads the raw topics in another
interleaving cannot fork an output chain. (A stand-in producer is fine here: this pins the
wrapper's ordering; the integration tests run the real worker against a real broker.)"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from rolltape.processors import ProcessorConfig, SessionProcessor, SessionState
from rolltape.processors.audit import InputRecord
from rolltape.processors.worker import Shell
from rolltape.processors.worker._states import MemoryStates
from rolltape.schemas import ChainVerifier, decode
from tests.unit.processors.scripted import Tape

HEALTHY = {"steps": 5, "max_layer_grad_norm": 1.0, "min_layer_grad_norm": 1e-3}


class Died(Exception):
    """The process was killed."""


class Producer:
    def __init__(self, die_after: int | None = None) -> None:
        self.sent: list[tuple[str, bytes, bytes | None]] = []
        self.die_after = die_after

    async def send(
        self, topic: str, value: bytes, key: bytes | None = None, headers: Any = None
    ) -> asyncio.Future[None]:
        if self.die_after is not None and len(self.sent) >= self.die_after:
            raise Died()
        self.sent.append((topic, value, key))
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    async def send_all(self, records: list[tuple[str, bytes | None, bytes, Any]]) -> None:
        for topic, key, value, headers in records:
            await self.send(topic, value, key=key, headers=headers)


def session_with_breaks(tape: Tape) -> tuple[list[InputRecord], list[InputRecord]]:
    """A training session whose events and metrics chains both have a gap: several outputs on
    the verdicts chain, triggered from both topics."""
    sid = "t1"
    events = [tape.start(sid, kind="training")]
    tape.event(sid, "feedback", text="lost")  # never delivered: a gap on the events chain
    events.append(tape.event(sid, "feedback", text="after the gap"))
    metrics = [tape.metric(sid, 0, **HEALTHY)]
    tape.metric(sid, 1, **HEALTHY)  # lost: a gap on the metrics chain
    metrics += [tape.metric(sid, e, **HEALTHY) for e in (2, 3)]
    ends = tape.end(sid, streams=("metrics",))
    return [*events, ends[1]], [*metrics, ends[0]]


def shell(table: dict[bytes, Any], producer: Producer) -> Shell:
    return Shell(SessionProcessor(ProcessorConfig()), producer, MemoryStates(table), "t")  # type: ignore[arg-type]


def test_outbox__a_crash_mid_send_then_another_interleaving_never_forks_an_output_chain() -> None:
    events, metrics = session_with_breaks(Tape())
    table: dict[bytes, Any] = {}
    dying = Producer(die_after=2)
    with contextlib.suppress(Died):
        asyncio.run(shell(table, dying).process([*events, *metrics]))
    assert len(dying.sent) == 2  # some outputs went out, the rest were lost with the process

    restarted = Producer()
    again = shell(table, restarted)
    resent = asyncio.run(again.resend_outboxes(lambda key: True))
    assert resent > 0
    # the consumer group had not committed: the records come again, metrics first this time
    asyncio.run(again.process([*metrics, *events]))

    outputs = [value for _, value, _ in dying.sent + restarted.sent]
    verifier = ChainVerifier()
    for value in outputs:
        env = decode(value)
        verifier.add(value, key=env["session_id"].encode(), expected_stream=env["stream"])
    reports = {r.stream: r for r in verifier.reports()}
    assert all(r.ok for r in reports.values()), reports
    assert reports["verdicts"].records - reports["verdicts"].redelivered == 3  # 2 breaks + verdict
    assert reports["rules"].records - reports["rules"].redelivered == 3


def test_outbox__is_empty_once_a_batch_is_sent() -> None:
    events, metrics = session_with_breaks(Tape())
    table: dict[bytes, Any] = {}
    asyncio.run(shell(table, Producer()).process([*events, *metrics]))
    assert b'"outbox":[]' in table[b"t1"]


class BufferedStates(MemoryStates):
    """A store whose puts become durable only on commit, as the changelog's are;
    `after_crash()` is what a restarted worker restores."""

    def __init__(self) -> None:
        super().__init__()
        self.durable: dict[bytes, bytes] = {}
        self.reads: list[bytes] = []

    def get(self, key: bytes) -> bytes | None:
        self.reads.append(key)
        return super().get(key)

    async def commit(self) -> None:
        self.durable = dict(self.data)

    def after_crash(self) -> dict[bytes, bytes]:
        return dict(self.durable)


def test_state__of_a_batch_without_outputs_is_durable_when_the_batch_returns() -> None:
    # The reader moves on once a batch returns: the state it produced must be durable by then,
    # or a crash loses it for good (its records are not read again: the saved position is past
    # them).
    tape = Tape()
    started = tape.start("a1")
    said = tape.event("a1", "turn", role="assistant", content="done")
    (events_end,) = tape.end("a1")
    states = BufferedStates()
    first = Shell(SessionProcessor(ProcessorConfig()), Producer(), states, "t")  # type: ignore[arg-type]
    asyncio.run(first.process([started]))  # produces no output, only state

    restored = states.after_crash()
    producer = Producer()
    asyncio.run(shell(restored, producer).process([said, events_end]))
    types = [decode(value)["type"] for _, value, _ in producer.sent]
    assert types == ["filter_outcome"]  # lost state: ["chain_broken", "filter_outcome"]


def test_states__are_kept_parsed_between_batches_until_the_partitions_move() -> None:
    tape = Tape()
    started = tape.start("a1")
    turns = [tape.event("a1", "turn", role="user", content=f"q{n}") for n in range(3)]
    states = BufferedStates()
    loop = Shell(SessionProcessor(ProcessorConfig()), Producer(), states, "t")  # type: ignore[arg-type]
    for batch in ([started], [turns[0]], [turns[1]]):
        asyncio.run(loop.process(batch))
    assert states.reads.count(b"a1") == 1  # read from the store once, then kept
    loop.forget_states()
    asyncio.run(loop.process([turns[2]]))
    assert states.reads.count(b"a1") == 2  # after a rebalance the store is the truth again
    saved = SessionState.from_bytes(states.durable[b"a1"])
    assert saved.chains["events"].next_seq == 4 and saved.outbox == []  # every batch counted


def test_record_from_a_newer_producer__after_a_gap__sends_every_sealed_output() -> None:
    # The reproduction of a lost output: the turn's unknown field passed the lenient parse and
    # then raised in the strict filter parse, after the gap's chain_broken was sealed; the
    # worker dead-lettered the record and sent nothing of it, while the saved state had moved
    # the verdicts chain past the lost record.
    tape = Tape()
    started = tape.start("newer")
    tape.event("newer", "turn", role="user", content="never delivered")  # the gap
    turn = {"role": "assistant", "content": "4", "sentiment": "calm"}
    newer = tape.sealed("newer", "events", "turn", turn)
    producer = Producer()
    asyncio.run(shell({}, producer).process([started, newer, *tape.end("newer")]))
    sent = [decode(value) for _, value, _ in producer.sent]
    assert [e["type"] for e in sent] == ["chain_broken", "filter_outcome"]  # no dead letter
    assert [e["seq"] for e in sent if e["stream"] == "verdicts"] == [0]
    assert sent[-1]["payload"]["turns"] == 1


def test_position_keys__land_on_the_changelog_partition_of_their_raw_partition() -> None:
    from aiokafka.partitioner import murmur2

    from rolltape.processors.worker._reader import POSITION_KEY_PREFIX, position_key

    for partitions in (1, 3, 6, 12):
        keys = {position_key("t.events", p, partitions) for p in range(partitions)}
        assert len(keys) == partitions
        for p in range(partitions):
            key = position_key("t.events", p, partitions)
            assert key.startswith(POSITION_KEY_PREFIX)
            assert (murmur2(key) & 0x7FFFFFFF) % partitions == p


def test_positions__are_saved_after_the_batch_and_skipped_when_outboxes_are_resent() -> None:
    from aiokafka import TopicPartition

    events, metrics = session_with_breaks(Tape())
    table: dict[bytes, Any] = {}
    loop = Shell(
        SessionProcessor(ProcessorConfig()), Producer(), MemoryStates(table), "t", partitions=1
    )  # type: ignore[arg-type]
    asyncio.run(loop.process([*events, *metrics]))
    for records in (events, metrics):
        first, last = records[0].position, records[-1].position
        assert first is not None and last is not None
        assert loop.saved_position(TopicPartition(first.topic, 0)) == last.offset + 1
    assert loop.saved_position(TopicPartition("t.other", 0)) is None
    assert asyncio.run(loop.resend_outboxes(lambda key: True)) == 0
