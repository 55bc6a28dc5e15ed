"""Taking over a chain another writer started (`session(resume=True)`, `Recorder.resume`).

Why a module of its own: it is the one place the sender reads from the log and waits for a
single record's fate, with rules of its own (_resume.py has the protocol and the reads): the
takeover's record is sealed onto the head read in the log, sent on its own and read back, and
the chain is this recorder's only if that record stands. A sealed session's data key goes to
the keys topic first.

Invariant: the chain's head is published to the sealer only for the takeover's seal and is
withdrawn unless the takeover is confirmed, so a timeout, a cancel or a lost race never leaves
a chain that a retry would take as this recorder's own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from rolltape.producers._errors import ChainConflictError, ResumeError
from rolltape.producers._resume import first_record_from, read_head
from rolltape.schemas import Stream
from rolltape.schemas.clients import LogReader, Partition

if TYPE_CHECKING:
    from rolltape.producers._sender import Sender

log = logging.getLogger("rolltape.producers")

_KEYS = Stream.KEYS.value


async def _start_of(sender: Sender, tp: Partition, session_id: str) -> int:
    """Where to start reading the session's partition for its head: where the sender's locator
    says, else its start (logged in one line, with why)."""
    locator = sender.config.head_locator
    found: int | str = "no head locator (a Recorder made without the read model)"
    if locator is not None:
        try:
            found = await asyncio.to_thread(locator, tp.topic, tp.partition, session_id)
        except Exception as exc:  # a locator that fails leaves the slow, sure way
            found = f"the head locator failed: {exc!r}"
    if isinstance(found, str):
        log.info(
            "resuming %s: reading %s[%d] from its start, not from the read model: %s",
            session_id,
            tp.topic,
            tp.partition,
            found,
        )
        return 0
    return found


async def take_over(
    sender: Sender,
    stream: str,
    session_id: str,
    first: tuple[str, dict[str, Any]] | None,
    writer: str,
    deadline: float,
    data_key: dict[str, Any] | None = None,
) -> int:
    """`Sender.resume` on the sender's loop: the seq of the next record the sender will seal on
    the chain."""
    sealer, delivery = sender.sealer, sender.delivery
    chain = (stream, session_id)
    if chain in sealer.writer.heads:  # this recorder is its writer already
        if data_key is not None and session_id not in sealer.content_keys:
            raise ResumeError(
                f"this recorder is recording {session_id} without a subject; resume it with "
                "a subject from another recorder, or record a new session"
            )
        return sealer.writer.head(chain)[0]
    connection = sender.config.connection
    if connection is None:
        raise ResumeError(
            "resume reads the session's head from the broker, and this recorder has no "
            "broker configured (ROLLTAPE_BOOTSTRAP)"
        )
    # The head in the log is the head only once this machine's spool has been delivered:
    # it may hold the end of the very chain (a restart after an outage).
    while delivery.producer is None or delivery.handoff.pending:
        if time.monotonic() > deadline:
            raise ResumeError(
                f"cannot resume {session_id}: the broker at {connection} has not taken "
                f"this machine's spooled records yet ({sender.spool.directory}); the head of "
                "the chain may be among them. Resume once the broker is back."
            )
        await asyncio.sleep(0.05)
    producer = delivery.producer
    topic = sealer.topics[stream]
    key = session_id.encode()
    tp = Partition(topic, await delivery.placement.of(producer, topic, key))
    # Published for the seal below; withdrawn unless the takeover is confirmed (a timeout or
    # a cancel must not leave a chain a retry would take as this recorder's own).
    taken = False
    try:
        reader = await LogReader(connection, client_id="rolltape-resume").start()
        try:
            reader.assign([tp])
            start = await _start_of(sender, tp, session_id)
            head = await read_head(reader, tp, session_id, stream, deadline, from_offset=start)
            if head.ended:
                raise ResumeError(
                    f"session {session_id} ended at seq {head.seq} on {stream}; record a new "
                    f"session linked to it (linked_session_id={session_id!r}) instead"
                )
            if head.report is not None and not head.report.ok:
                log.warning(
                    "resuming %s on %s from seq %d; its chain has breaks: %s",
                    session_id,
                    stream,
                    head.seq,
                    head.report.break_counts,
                )
            if head.seq >= 0:
                event_type, payload = (
                    "session_resumed",
                    {"writer": writer, "head_seq": head.seq},
                )
            elif first is not None:
                event_type, payload = first
            else:
                return 0  # nothing to take over: the chain starts at its genesis
            if data_key is not None:  # the key first: its record, then the sealed ones
                entry = sealer.seal((session_id, _KEYS, "data_key", data_key, time.time_ns()))
                assert entry is not None  # a data key is never refused
                try:
                    await producer.send_and_wait(entry[0], entry[2], key=entry[1])
                except Exception as exc:
                    sealer.content_keys.pop(session_id, None)
                    raise ResumeError(
                        f"the broker did not take the data key of the resumed {session_id}: "
                        f"{exc!r}; resume again"
                    ) from exc
            sealer.writer.take_over(chain, head.seq + 1, head.hash)
            record = sealer.seal((session_id, stream, event_type, payload, time.time_ns()))
            if record is None:
                raise ResumeError(f"the first record of the resumed {session_id} was rejected")
            try:
                sent = await producer.send_and_wait(
                    topic, record[2], key=key, partition=tp.partition
                )
            except Exception as exc:
                raise ResumeError(
                    f"the broker did not take the record resuming {session_id}: {exc!r}; "
                    "resume again (a record that did land is set aside or becomes the head)"
                ) from exc
            sender.stats.acked += 1
            delivery.last_progress = time.monotonic()
            landed = await first_record_from(
                reader, tp, head.end_offset, sent.offset, session_id, deadline
            )
        finally:
            await reader.stop()
        if landed != record[2]:
            raise ChainConflictError(
                f"another writer appended to session {session_id} on {stream} while this "
                "recorder took it over; its records stand and this one's are set aside by every "
                "reader. Stop the other writer, or resume again to continue after its records."
            )
        taken = True
        return head.seq + 2
    finally:
        if not taken:
            sealer.writer.forget(chain)
