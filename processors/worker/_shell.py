"""The Kafka side of one batch: load state, step the pure core, send outputs, save state.

Invariant (at-least-once without loss): a session's state is saved only after every output its
records produced is acknowledged by the broker. A crash before the save replays the same records
into byte-identical outputs (duplicates readers drop by event id); a crash after it finds the
records' offsets in the state and skips them.

States stay in memory between batches (`LIVE_STATES` of them, least recently used first out):
the store holds their bytes for recovery, and parsing a state again for every batch that touches
it cost as much as stepping its records when many sessions interleave. The shell is their only
writer while it owns their partitions; `forget_states` drops them when the partitions move.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

from aiokafka.errors import KafkaError

from rolltape.processors._judge_messages import JUDGE_RESULTS
from rolltape.processors._outputs import DeadLetter, Emitted, Output, Requested
from rolltape.processors._session import SessionProcessor, handle
from rolltape.processors._session_state import SessionState
from rolltape.processors.audit import InputRecord, Position, log_for_partition, raw_partition
from rolltape.processors.worker._keys import KeySource, sealed_keys
from rolltape.processors.worker._producers import OutgoingRecord, OutputProducer
from rolltape.processors.worker._reader import POSITION_KEY_PREFIX, position_key
from rolltape.processors.worker._states import StateStore
from rolltape.schemas import (
    HUMAN_CHAIN,
    ChainHeadLeaf,
    Stream,
    UnreadableRecord,
    read_event,
    split_stream,
    stream_of_topic,
    topic_name,
)
from rolltape.schemas.clients import Partition

log = logging.getLogger("rolltape.processors.worker")

LIVE_STATES = 20_000
"""Session states kept parsed between batches (a few KB each)."""


@dataclass
class ShellStats:
    """Counters and stage times of the batch loop, logged every 10 s."""

    records: int = 0
    emitted: int = 0
    dead_letters: int = 0
    batches: int = 0
    send_retries: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    step_s: float = 0.0
    send_s: float = 0.0
    save_s: float = 0.0
    logged_at: float = 0.0
    last_batch_at: float = 0.0
    """time.monotonic() at the end of the last batch (the worker's watchdog reads it)."""

    def summary(self) -> str:
        per = self.records / self.batches if self.batches else 0
        return (
            f"{self.records} records in {self.batches} batches ({per:.0f}/batch), "
            f"{self.emitted} emitted, {self.dead_letters} dead letters; "
            f"step {self.step_s:.2f}s send {self.send_s:.2f}s save {self.save_s:.2f}s"
        )


def _outbox_outputs(sid: str, outbox: list[tuple[str, str, str, bytes]]) -> list[Output]:
    return [Emitted(stream, sid, value, event_id, kind) for stream, kind, event_id, value in outbox]


def dead_letter_headers(letter: DeadLetter, processor: str) -> list[tuple[str, bytes]]:
    """Where the record came from and why it was refused; the value stays the original bytes
    (as Kafka Connect's dead-letter queues do), so nothing about it is lost or re-encoded."""
    source = letter.record.position
    where = (
        [
            ("rolltape.source.topic", source.topic.encode()),
            ("rolltape.source.partition", str(source.partition).encode()),
            ("rolltape.source.offset", str(source.offset).encode()),
        ]
        if source is not None
        else []
    )
    return [
        ("rolltape.reason", letter.reason.encode()),
        ("rolltape.detail", letter.detail.encode()),
        *where,
        ("rolltape.processor", processor.encode()),
    ]


class Shell:
    """One worker's batch loop over a state store (session id bytes -> state bytes)."""

    def __init__(
        self,
        processor: SessionProcessor,
        producer: OutputProducer,
        store: StateStore,
        topic_prefix: str,
        *,
        requests_topic: str = "",
        results_topic: str = "",
        partitions: int = 0,
        owned: Callable[[], Collection[int]] | None = None,
        keys: KeySource | None = None,
    ) -> None:
        self.processor = processor
        self.keys = keys
        """Made ready for the keys a batch's sealed records name before the batch is stepped
        (the processor config's keyring is its `keyring`)."""
        self.producer = producer
        self.store = store
        self.prefix = topic_prefix
        self.stats = ShellStats()
        self._processor_label = f"rolltape.processors/{processor.config.software_version}"
        self._topics = {s.value: topic_name(s, topic_prefix) for s in Stream}
        self.requests_topic = requests_topic
        self.results_topic = results_topic
        self._pending: list[Output] = []
        self.partitions = partitions
        """Of the raw topics: places read positions and names the checkpoint logs (0: a table
        without either, as unit tests drive it)."""
        self._logs: dict[int, str] = {}
        self._last_checkpoint: dict[int, float] = {}
        self._was_finished: dict[str, bool] = {}
        self._touched: dict[str, int] = {}
        """Sessions the batch's raw records touched -> their partition."""
        self._rejudged: set[str] = set()
        self._uncommitted: dict[int, set[str]] = {}
        """partition -> sessions advanced since their heads were last committed."""
        self._live: OrderedDict[str, SessionState] = OrderedDict()
        """Parsed states kept between batches, most recently used last (see the module)."""
        self._owned = owned
        """The raw partitions this worker reads now: checkpoints write only those logs. Empty
        from a revocation to the end of the recovery that follows, so a timer's checkpoint never
        writes a log whose state another worker may be restoring."""
        self._lock = asyncio.Lock()

    def to_input(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        ts: int,
    ) -> InputRecord:
        if topic == self.results_topic:
            name = JUDGE_RESULTS
        else:
            stream = stream_of_topic(topic, self.prefix)
            name = stream.value if stream else topic
            if stream is Stream.VERDICTS:
                name = HUMAN_CHAIN if _on_a_human_chain(value) else _OWN_OUTPUT
        return InputRecord(name, key, value or b"", Position(topic, partition, offset), ts)

    async def commit_due(self) -> None:
        """Commit the heads of sessions that went idle since their partition's last checkpoint
        (called on a timer: no batch may come to do it)."""
        if self._uncommitted:
            await self.process(())

    async def process(self, records: Iterable[InputRecord]) -> None:
        async with self._lock:  # the checkpoint timer and the stream's batches take turns
            await self._process(records)

    async def _process(self, records: Iterable[InputRecord]) -> None:
        """One batch, as an outbox: (1) step every record; (2) save each touched session's
        state together with the chained outputs it produced (none, possibly), and wait until
        that is durable;
        (3) send the outputs and wait for their acknowledgements; (4) save the states with the
        outbox emptied. A crash after (2) resends the saved outputs byte for byte (on recovery
        or when the session is next loaded); a crash before it leaves no trace to contradict."""
        clock = time.perf_counter
        t0 = clock()
        states: dict[str, SessionState] = {}
        outputs: list[Output] = []
        self._was_finished.clear()
        self._touched.clear()
        self._rejudged.clear()
        positions: dict[tuple[str, int], int] = {}
        records = list(records)
        if self.keys is not None:
            wanted = sealed_keys(records)
            if wanted:
                await self.keys.ready(wanted)
        for record in records:
            self.stats.records += 1
            if record.stream != _OWN_OUTPUT:  # the judge's own verdicts: read past
                outputs.extend(self._step(states, record))
            at = record.position
            assert at is not None, "the worker reads records from its topics"
            positions[(at.topic, at.partition)] = at.offset + 1
        outputs.extend(self._checkpoints(states))
        outputs = [*self._pending, *outputs]
        self._pending = []
        t1 = clock()
        for o in outputs:
            if isinstance(o, Emitted):  # every Emitted comes from a session in `states`
                states[o.session_id].outbox.append((o.stream, o.type, o.event_id, o.value))
        # Durable before the outputs leave: after a crash they are resent from here.
        self._save({sid: state for sid, state in states.items() if state.outbox})
        await self._durably("saving session states", self.store.commit)
        await self.send(outputs)
        t2 = clock()
        for state in states.values():
            state.outbox = []
        # The read positions go after the states, on the same changelog partitions: a position
        # that is durable means the states before it are. Only now, with every output
        # acknowledged: records past a lost position are read again, and sessions skip them.
        self._save(states, positions)
        await self._durably("saving session states", self.store.commit)
        self._keep_live(states)
        t3 = clock()
        stats = self.stats
        stats.batches += 1
        stats.last_batch_at = time.monotonic()
        stats.step_s, stats.send_s, stats.save_s = (
            stats.step_s + t1 - t0,
            stats.send_s + t2 - t1,
            stats.save_s + t3 - t2,
        )
        if t3 - stats.logged_at > 10:
            stats.logged_at = t3
            log.info("worker: %s", stats.summary())

    def _save(
        self, states: dict[str, SessionState], positions: dict[tuple[str, int], int] | None = None
    ) -> None:
        for sid, state in states.items():
            self.store.put(sid.encode(), state.to_bytes())
        if positions and self.partitions:
            for (topic, partition), offset in sorted(positions.items()):
                self.store.put(
                    position_key(topic, partition, self.partitions), str(offset).encode()
                )

    def _keep_live(self, states: dict[str, SessionState]) -> None:
        live = self._live
        for sid, state in states.items():
            live[sid] = state
            live.move_to_end(sid)
        while len(live) > LIVE_STATES:
            live.popitem(last=False)

    def forget_states(self) -> None:
        """Drop the states kept between batches (partitions moved: the store is the truth)."""
        self._live.clear()

    def saved_position(self, tp: Partition) -> int | None:
        """The offset a raw partition is read from next (None: from its start)."""
        stored = self.store.get(position_key(tp.topic, tp.partition, self.partitions))
        return int(stored) if stored else None

    async def settle(self) -> None:
        """Until the batch or timer commit in hand (if any) is done: after a revocation, so
        that nothing this worker writes lands while another restores the partitions."""
        async with self._lock:
            pass

    def owning(self, partitions: Collection[int]) -> None:
        """The partitions assigned after a rebalance: sessions advanced here on the others are
        not committed here any more (their new owner reads and commits them)."""
        for partition in [p for p in self._uncommitted if p not in partitions]:
            del self._uncommitted[partition]

    async def resend_outboxes(self, owned: Callable[[bytes], bool]) -> int:
        """After recovery: send what sessions saved but may not have sent, then empty their
        outboxes. Only sessions on partitions this worker owns (`owned(key)`) are touched."""
        async with self._lock:  # a timer's commit may be waiting to run
            return await self._resend_outboxes(owned)

    async def _resend_outboxes(self, owned: Callable[[bytes], bool]) -> int:
        states: dict[str, SessionState] = {}
        outputs: list[Output] = []
        self.forget_states()
        for key, stored in self.store.items():
            if not stored or key.startswith(POSITION_KEY_PREFIX) or not owned(key):
                continue
            state = SessionState.from_bytes(stored)
            if state.outbox:
                sid = key.decode()
                outputs += _outbox_outputs(sid, state.outbox)
                state.outbox = []
                states[sid] = state
        if outputs:
            log.info("resending %d saved outputs of %d sessions", len(outputs), len(states))
            await self.send(outputs)
            self._save(states)
            await self._durably("saving session states", self.store.commit)
        return len(outputs)

    def _checkpoints(self, states: dict[str, SessionState]) -> list[Output]:
        """Commit the chain heads of the sessions decided on in this batch (with the leaf that
        binds all their chains), and, once the signer's interval has passed on a partition,
        of every session advanced there since its last commit: one signed checkpoint per
        partition and batch."""
        signer = self.processor.config.signer
        if signer is None or not self.partitions:
            return []
        now = time.time()
        leaves: dict[int, list[ChainHeadLeaf]] = {}
        for sid, partition in sorted(self._touched.items()):
            state = states[sid]
            decided = state.finished and (
                not self._was_finished.get(sid, False) or sid in self._rejudged
            )
            if decided:
                leaves.setdefault(partition, []).extend(state.head_leaves(sid, binding=True))
                self._uncommitted.get(partition, set()).discard(sid)
            else:
                self._uncommitted.setdefault(partition, set()).add(sid)
        owned = self._owned() if self._owned is not None else None
        for partition in sorted(self._uncommitted):
            if owned is not None and partition not in owned:
                continue  # not read here now (perhaps again after a rebalance): kept for then
            if now - self._last_checkpoint.get(partition, 0.0) < signer.interval_s:
                continue
            for sid in sorted(self._uncommitted.pop(partition)):
                held = states.get(sid) or self._peek(sid)  # read, never written back
                if held is not None:
                    leaves.setdefault(partition, []).extend(held.head_leaves(sid))
        out: list[Output] = []
        for partition, new in sorted(leaves.items()):
            if not new:
                continue
            log_name = self._logs.get(partition)
            if log_name is None:
                log_name = self._logs[partition] = log_for_partition(partition, self.partitions)
            out.append(
                self.processor.checkpoint(
                    self._state(states, log_name), log_name, new, int(now * 1000)
                )
            )
            self._last_checkpoint[partition] = now
        return out

    def _peek(self, sid: str) -> SessionState | None:
        live = self._live.get(sid)
        if live is not None:
            return live
        stored = self.store.get(sid.encode())
        return SessionState.from_bytes(stored) if stored else None

    def _load(self, sid: str) -> SessionState:
        state = self._live.get(sid)
        if state is None:
            stored = self.store.get(sid.encode())
            state = SessionState.from_bytes(stored) if stored else SessionState()
        self._was_finished[sid] = state.finished
        if state.outbox:  # saved but perhaps never sent: send it first, as it was
            self._pending += _outbox_outputs(sid, state.outbox)
            state.outbox = []
        return state

    def _state(self, states: dict[str, SessionState], sid: str) -> SessionState:
        if sid not in states:
            states[sid] = self._load(sid)
        return states[sid]

    def _step(self, states: dict[str, SessionState], record: InputRecord) -> list[Output]:
        try:
            sid, outputs = handle(self.processor, states, record, self._load)
        except Exception as exc:  # loading the state failed: the record is kept with why
            log.exception("processing %s failed; dead-lettered", record.where)
            detail = "".join(traceback.format_exception_only(exc)).strip()
            return [DeadLetter(record, "processor_error", detail[:1000])]
        if sid is None:
            return outputs
        if record.stream in (JUDGE_RESULTS, HUMAN_CHAIN):
            # A verdict after the session's end (a judge's, or a reviewer's): its chains
            # change, so commit them again, on its raw partition's log (the results topic's
            # partition may differ).
            if self.partitions:
                self._touched[sid] = raw_partition(sid, self.partitions)
            self._rejudged.add(sid)
        elif record.position is not None:
            self._touched[sid] = record.position.partition
        return outputs

    async def send(self, outputs: Sequence[Output]) -> None:
        """Send until every output is acknowledged (resending all on failure)."""
        if not outputs:
            return
        records = [self._record(o) for o in outputs]
        # Resent whole on failure: outputs are deterministic and readers drop the copies.
        await self._durably(
            f"sending {len(outputs)} outputs", lambda: self.producer.send_all(records)
        )
        for o in outputs:
            if isinstance(o, Emitted):
                self.stats.emitted += 1
                self.stats.by_type[o.type] = self.stats.by_type.get(o.type, 0) + 1
            elif isinstance(o, DeadLetter):
                self.stats.dead_letters += 1

    async def _durably(self, what: str, attempt: Callable[[], Awaitable[None]]) -> None:
        """Until `attempt` succeeds: a worker never goes on past a write it could not make."""
        failures = 0
        while True:
            try:
                await attempt()
                return
            except KafkaError as exc:
                failures += 1
                self.stats.send_retries += 1
                log.warning("%s failed (%s); retry %d", what, exc, failures)
                await asyncio.sleep(min(5.0, 0.1 * 2**failures))

    def _record(self, output: Output) -> OutgoingRecord:
        """(topic, key, value, headers) of an output."""
        if isinstance(output, Requested):
            return self.requests_topic, output.session_id.encode(), output.value, None
        if isinstance(output, Emitted):
            topic = self._topics[split_stream(output.stream)[0].value]
            return topic, output.session_id.encode(), output.value, None
        return (
            self._topics[Stream.DEADLETTER.value],
            output.record.key,
            output.record.value,
            dead_letter_headers(output, self._processor_label),
        )


_OWN_OUTPUT = "verdicts (own)"
"""The name of a verdicts-topic record the worker reads past: its own verdicts, chain breaks
and checkpoints (it reads the topic for the reviewers' chains only)."""
_HUMAN_MARK = f'"stream":"{HUMAN_CHAIN}"'.encode()


def _on_a_human_chain(value: bytes | None) -> bool:
    """Whether a verdicts-topic record extends a reviewer's chain (`verdicts@human`): the
    canonical bytes name the stream; only a record that does is decoded to be sure (a
    checkpoint's leaves name it too). A record that cannot be read is the worker's to audit:
    it is dead-lettered as the raw topics' are."""
    if not value or _HUMAN_MARK not in value:
        return False
    try:
        return read_event(value).stream == HUMAN_CHAIN
    except UnreadableRecord:
        return False
