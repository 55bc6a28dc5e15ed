"""Metric records with made-up values, for benchmarks and tests of the processors only.

Training code has no way to pass a metric value: the public SDK records metrics through the
training monitor alone. A load generator or a test of the rule engine still needs metric records
without a model; this writes them as a monitor would, on the session's metrics chain, under the
recorder's principal (with the broker's ACLs, only a monitor principal may write that topic).
"""

from __future__ import annotations

from typing import Any

from rolltape.producers import Recorder, Session
from rolltape.schemas import Stream

_METRICS = Stream.METRICS.value


def synthetic_metric(recorder: Recorder, session: Session, epoch: int, **fields: Any) -> None:
    """A metric event with these values on `session`'s metrics chain."""
    session._expect(_METRICS)
    recorder._enqueue(session.session_id, _METRICS, "metric", {**fields, "epoch": epoch})


def end_synthetic_metrics(recorder: Recorder, session: Session, status: str = "completed") -> None:
    """The session_ended that closes the metrics chain (a monitor writes it at finish)."""
    recorder._enqueue(
        session.session_id,
        _METRICS,
        "session_ended",
        {"status": status, "outcome": {}, "error": None, "streams": []},
    )
