"""Spool mode: sealed records go to the spool on disk while the broker is away.

Why a module of its own: an outage changes where every sealed record goes, and a full spool
changes what a record call does (it raises `SpoolFullError`); both are decided here, apart from
the sending (_delivery.py, which decides when an outage starts and ends and drains the spool)
and from the spool's file format (_spool.py).

Invariant: records reach the spool in the order they were sealed. What does not fit in a full
spool waits in memory (the overflow), always newer than everything spooled, and moves in as
room appears; meanwhile the sender's `error` makes record calls raise, and it is lifted once
the overflow is all in the spool. A barrier met on the way settles once the records before it
are fsynced.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from rolltape.producers._errors import SpoolFullError
from rolltape.producers._queued import Barrier, Outgoing, Record
from rolltape.producers._spool import SpooledRecord

if TYPE_CHECKING:
    from rolltape.producers._sender import Sender

log = logging.getLogger("rolltape.producers")


class SpoolHandoff:
    """Spool mode and the overflow of a full spool. Used on the sender's loop only."""

    def __init__(
        self,
        sender: Sender,
        feed: asyncio.Event,
        settle: Callable[[Barrier], None],
        quiet_s: Callable[[], float],
    ) -> None:
        self._sender = sender
        self.spool = sender.spool
        self.stats = sender.stats
        self._feed = feed
        """Set when records were spooled: the feeder drains them once the broker is back."""
        self._settle = settle
        self._quiet_s = quiet_s
        """Seconds since the broker last made progress (for the full spool's message)."""
        self.active = False
        """Spool mode: sealed records go to the spool instead of the outbox."""
        self.overflow: collections.deque[Record] = collections.deque()
        """Sealed records that did not fit in a full spool; always newer than everything spooled."""
        self._spooled_before_outage = 0
        self._outage_started = time.monotonic()

    @property
    def pending(self) -> bool:
        """Records wait in the spool (or its overflow) for the broker."""
        return not self.spool.empty or bool(self.overflow)

    def begin(self, now: float) -> None:
        """Enter spool mode (the records waiting for the broker follow through `put`)."""
        self._spooled_before_outage = self.stats.spooled
        self._outage_started = now
        self.active = True
        self.stats.mode = "spool"

    def end(self) -> None:
        """Leave spool mode: the spool is drained and nothing is in flight."""
        self.active = False
        self.stats.mode = "direct"
        sender = self._sender
        if isinstance(sender.error, SpoolFullError):
            sender.error = None
        if sender.config.connection is not None:
            log.warning(
                "rolltape: the broker is back; %d spooled records delivered after %.0fs, "
                "recording directly again",
                self.stats.spooled - self._spooled_before_outage,
                time.monotonic() - self._outage_started,
            )

    def put(self, items: list[Outgoing]) -> None:
        """Spool sealed records in order; each barrier settles once those before it are fsynced."""
        records: list[SpooledRecord] = []
        for item in items:
            if isinstance(item, Barrier):
                self._append(records)
                records = []
                self.spool.sync()
                self._settle(item)
            else:
                records.append(item)
        self._append(records)

    def _append(self, records: list[SpooledRecord]) -> None:
        if not records:
            return
        if self.overflow or not self.spool.has_room(sum(len(r[2]) + 64 for r in records)):
            # Keep them in memory behind everything spooled, and refuse new events meanwhile.
            self.overflow.extend(records)
            self._sender.error = SpoolFullError(
                f"the spool in {self.spool.directory} holds {self.spool.unread_bytes} bytes, its "
                f"limit (ROLLTAPE_SPOOL_MAX_BYTES={self.spool.max_bytes}); the broker at "
                f"{self._sender.config.connection} has not acknowledged for "
                f"{self._quiet_s():.0f}s. Restore the broker or raise "
                "the limit; the events recorded so far are kept."
            )
            return
        self.spool.append(records)
        self.stats.spooled += len(records)
        self._feed.set()

    def refill(self) -> None:
        """Move overflow into the spool as room appears; lift the error once it all fits."""
        moved = 0
        while self.overflow and self.spool.has_room(len(self.overflow[0][2]) + 64):
            self.spool.append([self.overflow.popleft()])
            moved += 1
        self.stats.spooled += moved
        if not self.overflow and isinstance(self._sender.error, SpoolFullError):
            self._sender.error = None
