"""The receiver's OTLP/HTTP side (aiohttp): `POST /v1/traces`, `/v1/logs` and `/v1/metrics`
with `application/x-protobuf` or `application/json`, gzip or deflate; `GET /metrics` for the
receiver's counters. Each request goes to the one `ReceiverFront`; this module only speaks HTTP.
"""

from __future__ import annotations

import contextlib

from aiohttp import web

from rolltape.infra.commands.otlp_metrics import CONTENT_TYPE, exposition
from rolltape.infra.commands.otlp_serve import Answer, ReceiverFront
from rolltape.producers.otlp import (
    JSON,
    PROTOBUF,
    Encoding,
    OtlpRequestError,
    Signal,
    encoding_of,
)

TRACES_PATH = "/v1/traces"
LOGS_PATH = "/v1/logs"
METRICS_PATH = "/v1/metrics"
SCRAPE_PATH = "/metrics"


def _response(answer: Answer) -> web.Response:
    response = web.Response(
        status=answer.status,
        body=answer.body,
        content_type=PROTOBUF if answer.encoding == "protobuf" else JSON,
    )
    if answer.status == 503:
        response.headers["Retry-After"] = "2"
    return response


class HttpSide:
    """The aiohttp application of one front."""

    def __init__(self, front: ReceiverFront) -> None:
        self.front = front

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.front.config.max_body_bytes)
        app.router.add_route("*", TRACES_PATH, self.traces)
        app.router.add_route("*", LOGS_PATH, self.logs)
        app.router.add_route("*", METRICS_PATH, self.otlp_metrics)
        app.router.add_route("GET", SCRAPE_PATH, self.scrape)
        app.router.add_route("*", "/{tail:.*}", self.elsewhere)
        return app

    async def elsewhere(self, request: web.Request) -> web.Response:
        message = (
            f"no such endpoint {request.path}: send traces to POST {TRACES_PATH} and logs to "
            f"POST {LOGS_PATH}; the receiver's counters are at GET {SCRAPE_PATH}"
        )
        return _response(self.front.refused("other", message, 404, "json"))

    async def scrape(self, request: web.Request) -> web.Response:
        return web.Response(
            body=exposition(self.front.stats), headers={"Content-Type": CONTENT_TYPE}
        )

    async def traces(self, request: web.Request) -> web.Response:
        return await self._export(request, "traces", TRACES_PATH)

    async def logs(self, request: web.Request) -> web.Response:
        return await self._export(request, "logs", LOGS_PATH)

    async def otlp_metrics(self, request: web.Request) -> web.Response:
        try:
            encoding = encoding_of(request.headers.get("Content-Type"))
        except OtlpRequestError as exc:
            return _response(self.front.refused("metrics", str(exc), exc.status, "json"))
        await request.read()
        return _response(self.front.metrics_request(encoding))

    async def _export(self, request: web.Request, signal: Signal, path: str) -> web.Response:
        encoding: Encoding = "json"
        with contextlib.suppress(OtlpRequestError):  # the front says what is wrong with it
            encoding = encoding_of(request.headers.get("Content-Type"))
        if request.method != "POST":
            return _response(self.front.refused(signal, f"use POST for {path}", 405, encoding))
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            message = (
                f"the body is over {self.front.config.max_body_bytes} bytes: send smaller "
                "batches (the exporter's max_export_batch_size)"
            )
            return _response(self.front.refused(signal, message, 413, encoding))
        answer = await self.front.export(
            signal,
            body,
            request.headers.get("Content-Type"),
            request.headers.get("Content-Encoding"),
            peer=request.remote,
        )
        return _response(answer)


async def start_http(front: ReceiverFront, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Listen for OTLP/HTTP on `host:port` (0 picks a free port); the runner and its port."""
    # Bodies are inflated by unpack (bounded, with OTLP's error answers), not by aiohttp.
    runner = web.AppRunner(HttpSide(front).app(), access_log=None, auto_decompress=False)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError:
        await runner.cleanup()
        raise
    return runner, int(runner.addresses[0][1])
