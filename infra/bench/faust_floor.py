"""The faust floor: a faust agent that consumes the raw topics like the worker and does nothing.

Run as `python -m rolltape.infra.bench.faust_floor BOOTSTRAP PREFIX RECORDS OUT` by the rules
benchmark: it writes the records/s it reached to OUT and exits. The worker's throughput over
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

from rolltape.processors.worker import WorkerConfig
from rolltape.schemas import Stream, topic_name


def main(bootstrap: str, prefix: str, records: int, out: Path) -> None:
    config = WorkerConfig(bootstrap=bootstrap, topic_prefix=prefix)
    app = faust.App(
        f"{prefix}-floor-{uuid.uuid4().hex[:6]}",
        broker=f"kafka://{bootstrap}",
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
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
