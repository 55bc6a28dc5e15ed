"""The receiver's OTLP/gRPC side (grpcio's asyncio server): the collector's
`TraceService/Export`, `LogsService/Export` and `MetricsService/Export`, on the port OTLP gives
gRPC (4317). Requests are taken as the bytes they came as and handed to the one `ReceiverFront`,
so both transports decode, record and acknowledge alike; this module only speaks gRPC.

Status codes follow OTLP/gRPC: a batch that is not durable in time is UNAVAILABLE (exporters
retry it), a body that cannot be read INVALID_ARGUMENT, one too large RESOURCE_EXHAUSTED without
retry information (not retried), a failure of ours INTERNAL; each with the front's message.
"""

from __future__ import annotations

from typing import Any

import grpc
from grpc import aio

from rolltape.infra.commands.otlp_serve import Answer, ReceiverFront
from rolltape.producers.otlp import PROTOBUF, Signal

TRACES_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
LOGS_METHOD = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
METRICS_METHOD = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"

_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    415: grpc.StatusCode.INVALID_ARGUMENT,
    503: grpc.StatusCode.UNAVAILABLE,
}


class _Services(grpc.GenericRpcHandler):
    """The three Export methods, with no (de)serializers: bytes in, bytes out."""

    def __init__(self, front: ReceiverFront) -> None:
        self.front = front

    def service(
        self, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[bytes, bytes] | None:
        method = details.method
        if method == TRACES_METHOD:
            return grpc.unary_unary_rpc_method_handler(self._traces)
        if method == LOGS_METHOD:
            return grpc.unary_unary_rpc_method_handler(self._logs)
        if method == METRICS_METHOD:
            return grpc.unary_unary_rpc_method_handler(self._metrics)
        return None  # UNIMPLEMENTED, as gRPC answers any unknown method

    async def _traces(self, request: bytes, context: aio.ServicerContext[Any, Any]) -> bytes:
        return await self._export("traces", request, context)

    async def _logs(self, request: bytes, context: aio.ServicerContext[Any, Any]) -> bytes:
        return await self._export("logs", request, context)

    async def _metrics(self, request: bytes, context: aio.ServicerContext[Any, Any]) -> bytes:
        return self.front.metrics_request("protobuf").body

    async def _export(
        self, signal: Signal, request: bytes, context: aio.ServicerContext[Any, Any]
    ) -> bytes:
        # gRPC has already undone its own compression; the body is the message.
        answer: Answer = await self.front.export(
            signal, request, PROTOBUF, None, peer=context.peer()
        )
        if answer.status != 200:
            await context.abort(_CODES.get(answer.status, grpc.StatusCode.INTERNAL), answer.message)
        return answer.body


async def start_grpc(front: ReceiverFront, host: str, port: int) -> tuple[aio.Server, int]:
    """Listen for OTLP/gRPC on `host:port` (0 picks a free port); the server and its port."""
    limit = front.config.max_body_bytes
    server = aio.server(
        options=[("grpc.max_receive_message_length", limit), ("grpc.so_reuseport", 0)]
    )
    server.add_generic_rpc_handlers((_Services(front),))
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as exc:  # grpcio's way of saying the port is taken
        raise OSError(f"gRPC: {exc}") from exc
    if bound == 0:
        raise OSError("gRPC could not bind the address")
    await server.start()
    return server, bound
