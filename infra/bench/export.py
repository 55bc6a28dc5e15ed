"""`rolltape bench export`: what opening sealed content costs an export.

Two sets of the same agent sessions, one recorded plainly and one recorded with a subject (its
content sealed under a data key per session, as the sender seals it), exported to ShareGPT by
the export code (`run_export`) in alternation; the sealed set is opened with a keyring as
`rolltape dataset export` opens it. Kafka reading is left out, the same work for both sets (a sealed
record is about a third larger), so the ratio is the code's own and a conservative one: with
the broker's reads in both, opening is a smaller share of the whole.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rolltape.infra.bench._chains import chained_session
from rolltape.infra.bench._figures import Figures, machine_line
from rolltape.infra.bench._machine import machine
from rolltape.infra.commands.export import Collected, run_export
from rolltape.projections import ExportOptions
from rolltape.schemas import DataKeyRecord, read_event
from rolltape.schemas.privacy import ContentKey, KeyEncryptionKey, Keyring

TOOLS = [{"name": "search", "parameters": {"type": "object"}}]
GOAL_RATIO = 0.85
"""The issue's goal: an export that opens sealed content runs at >= 0.85 of one that need not."""

_PROSE = (
    "The customer wrote in about an order that arrived late and asked whether the shipping fee "
    "could be refunded; the account shows two earlier orders, both delivered on time, and a "
    "note from the courier about a missed delivery window. "
)


class ExportFigures(Figures):
    """Export throughput of the same sessions in clear and sealed (opened on export)."""

    machine: str
    sessions: int
    events_per_session: int
    repeats: int
    clear_sessions_per_s: float
    sealed_sessions_per_s: float
    ratio: float
    goal_ratio: float = GOAL_RATIO
    open_us_per_event: float
    """Opening alone (the keyring's `open_event`), per sealed event, median."""

    def lines(self) -> Iterator[str]:
        yield machine_line(self.machine, f"{self.repeats} repeats (medians)")
        yield (
            f"export of {self.sessions} sessions ({self.events_per_session} events each) to "
            "ShareGPT"
        )
        yield "(Kafka reading left out: the same work for both)"
        yield f"    in clear                        {self.clear_sessions_per_s:10,.0f} sessions/s"
        yield f"    sealed, opened on export        {self.sealed_sessions_per_s:10,.0f} sessions/s"
        yield f"    opening alone                   {self.open_us_per_event:10.1f} µs/event"
        verdict = "met" if self.ratio >= self.goal_ratio else "MISSED"
        yield f"    ratio (sealed / clear): {self.ratio:.3f}; goal >= {self.goal_ratio}: {verdict}"


def _payloads(n: int) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("session_started", {"task": f"support ticket {n}", "tools": TOOLS}),
        ("turn", {"role": "user", "content": f"ticket {n}: " + _PROSE * 2}),
        (
            "turn",
            {"role": "assistant", "content": "Let me look that up.", "reasoning": _PROSE * 3},
        ),
        ("tool_call", {"id": "c1", "name": "search", "arguments": {"order": f"A-{n}"}}),
        ("tool_result", {"call_id": "c1", "content": _PROSE}),
        ("turn", {"role": "assistant", "content": _PROSE * 2}),
        ("session_ended", {"status": "completed"}),
    ]


def _collected(count: int, kek: KeyEncryptionKey | None) -> tuple[Collected, list[bytes]]:
    """The sessions in a scan, sealed when a KEK is given (its keyring then holds their keys);
    and the sealed records, for timing opening alone."""
    keyring = Keyring(kek) if kek is not None else None
    collected = Collected(keyring=keyring)
    sealed_values = []
    for n in range(count):
        sid = f"bench-{n:06d}"
        key = ContentKey.generate() if kek is not None else None
        if keyring is not None and key is not None and kek is not None:
            record = DataKeyRecord(
                session_id=sid,
                subject=f"user-{n}",
                key_id=key.key_id,
                wrapped=kek.wrap(key, sid),
                ts_ns=1,
            )
            keyring.add(f"{sid}/{key.key_id}".encode(), record.value())
        for value in chained_session(sid, n, _payloads(n), key):
            collected.add(value)
            if key is not None:
                sealed_values.append(value)
    return collected, sealed_values


def run_export_bench(sessions: int = 2000, repeats: int = 5) -> ExportFigures:
    """Export both sets `repeats` times, alternating, and time opening alone. RuntimeError when
    the sealed export does not hold every session: its rate would be meaningless."""
    kek = KeyEncryptionKey.generate()
    clear, _ = _collected(sessions, None)
    sealed, values = _collected(sessions, kek)
    options = ExportOptions(format="sharegpt")
    times: dict[str, list[float]] = {"clear": [], "sealed": []}
    opens: list[float] = []
    assert sealed.keyring is not None
    events = [read_event(v) for v in values]
    with tempfile.TemporaryDirectory() as tmp, clear, sealed:
        for r in range(repeats):
            for name, collected in (("clear", clear), ("sealed", sealed)):
                t = time.perf_counter()
                manifest = run_export(collected, options, Path(tmp) / f"{name}-{r}")
                times[name].append(time.perf_counter() - t)
                if manifest.sessions_exported != sessions:
                    raise RuntimeError(
                        f"the {name} export holds {manifest.sessions_exported} of {sessions} "
                        f"sessions (left out: {manifest.skipped})"
                    )
            t = time.perf_counter()
            for event in events:
                sealed.keyring.open_event(event)
            opens.append(time.perf_counter() - t)
    clear_rate = sessions / statistics.median(times["clear"])
    sealed_rate = sessions / statistics.median(times["sealed"])
    return ExportFigures(
        machine=machine(),
        sessions=sessions,
        events_per_session=len(_payloads(0)),
        repeats=repeats,
        clear_sessions_per_s=clear_rate,
        sealed_sessions_per_s=sealed_rate,
        ratio=sealed_rate / clear_rate,
        open_us_per_event=statistics.median(opens) / len(events) * 1e6,
    )
