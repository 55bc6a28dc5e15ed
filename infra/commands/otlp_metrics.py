"""The receiver's counters in the Prometheus text format (`GET /metrics` on its HTTP port).

Every span and log record the receiver acknowledged is in one of these counters, and what it
did not record is counted by reason (`rolltape_otlp_unmapped_total{reason=...}`), so a user
scraping or curling the endpoint sees what was lost and why. prometheus_client writes the
format; the counters are the receiver's own (`ReceiverStats`), read at scrape time through a
collector of its own registry, never the library's global one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rolltape.infra.commands.otlp_serve import ReceiverStats
from rolltape.producers.otlp import UNMAPPED_REASONS

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _StatsCollector:
    """A prometheus_client collector (anything with `collect`) of one receiver's counters;
    prometheus_client is the `otlp` extra's, imported when a scrape comes."""

    def __init__(self, stats: ReceiverStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        s = self.stats
        requests = CounterMetricFamily(
            "rolltape_otlp_requests", "Export requests answered, by signal.", labels=["signal"]
        )
        for signal in ("traces", "logs", "metrics"):
            requests.add_metric([signal], s.requests[signal])
        yield requests
        yield CounterMetricFamily(
            "rolltape_otlp_failed_requests",
            "Requests answered with an error (bad request, or not durable in time: retried).",
            value=s.failed_requests,
        )
        for name, value, text in (
            ("spans_received", s.spans, "Spans in the requests taken."),
            ("spans_recorded", s.recorded, "Spans recorded in sessions."),
            ("spans_redelivered", s.redelivered, "Spans sent again, recorded once."),
            ("spans_rejected", s.rejected, "Spans and log records refused with why."),
            ("log_records_received", s.logs, "Log records in the requests taken."),
            ("log_records_joined", s.logs_joined, "GenAI log records recorded with their span."),
            ("log_records_redelivered", s.logs_redelivered, "Log records sent again."),
            ("sessions_started", s.sessions_started, "Sessions started."),
            (
                "inference_spans_without_content",
                s.without_content,
                "Inference spans recorded without message content (the session is flagged).",
            ),
        ):
            yield CounterMetricFamily(f"rolltape_otlp_{name}", text, value=value)
        unmapped = CounterMetricFamily(
            "rolltape_otlp_unmapped",
            "Spans, log records and metrics requests acknowledged but not recorded, by reason.",
            labels=["reason"],
        )
        for reason in sorted({*UNMAPPED_REASONS, "metrics_not_recorded", *s.unmapped}):
            unmapped.add_metric([reason], s.unmapped[reason])
        yield unmapped
        yield GaugeMetricFamily(
            "rolltape_otlp_waiting",
            "Spans and log records acknowledged and held in the journal, not recorded yet.",
            value=s.waiting,
        )


def exposition(stats: ReceiverStats) -> bytes:
    """The counters as a Prometheus scrape reads them."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StatsCollector(stats))
    return generate_latest(registry)
