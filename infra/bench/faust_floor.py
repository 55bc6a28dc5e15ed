"""The faust floor: a faust agent that consumes the raw topics like the worker and does nothing.

Run as `python -m rolltape.infra.bench.faust_floor RECORDS OUT` by the rules benchmark, with the
cluster, credentials and topic prefix in ROLLTAPE_* variables (as the processor): it writes the
records/s it reached to OUT and exits. The worker's throughput over
this is the cost of rolltape's processing; this over a plain consumer is the cost of faust.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import faust

from rolltape.infra.broker import require_connection
from rolltape.infra.settings import Settings
from rolltape.processors.worker import WorkerConfig
from rolltape.schemas import Role, Stream, topic_name


def main(records: int, out: Path) -> None:
    """Consume `records` records of the events and metrics topics in a faust agent that does
    nothing, write the records/s to `out` and end the process at once (`os._exit`, skipping
    faust's slow shutdown). Until then it runs: the caller's timeout bounds it."""
    settings = Settings()
    prefix = settings.topic_prefix
    connection = require_connection(settings, Role.PROCESSOR)
    config = WorkerConfig(connection=connection, topic_prefix=prefix)
    app = faust.App(
        # Inside the worker group's namespace: the processor may use groups and topics there.
        f"{settings.worker_group}-floor-{uuid.uuid4().hex[:6]}",
        broker=connection.faust_broker(),
        broker_credentials=connection.faust_credentials(),
        store="memory://",
        datadir=str(out.parent / "faust-floor-data"),
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
    )
    topic = app.topic(
        topic_name(Stream.EVENTS, prefix),
        topic_name(Stream.METRICS, prefix),
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
    )
    seen = {"n": 0, "t0": 0.0}

    @app.agent(topic, concurrency=1)
    async def floor(stream: Any) -> None:
        async for events in stream.take_events(config.batch_max, config.batch_within_s):
            if not seen["n"]:
                seen["t0"] = time.perf_counter()
            seen["n"] += len(events)
            if seen["n"] >= records:
                out.write_text(str(seen["n"] / (time.perf_counter() - seen["t0"])))
                os._exit(0)  # the measurement is taken; skip faust's slow shutdown

    faust.Worker(app, loglevel="warning", quiet=True).execute_from_commandline()


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]))
