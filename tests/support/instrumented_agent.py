"""An agent as users instrument one: the real `openai` client, a real instrumentation, the
OpenTelemetry SDK's own providers and OTLP exporters. Run as a script by the tests, with the
Python of whichever environment holds the instrumentation (some cannot share one), so it imports
nothing of rolltape.

    python instrumented_agent.py --instrumentation openai-v2 --endpoint http://127.0.0.1:4318 \
        --transport http --openai-url http://127.0.0.1:PORT/v1 --order logs-first

It runs one conversation under an `invoke_agent weather` span: the model asks for the weather
tool, the agent runs it (an `execute_tool` span when the instrumentation's conventions have one:
the agent writes it itself, as frameworks do), and the model answers. Content settings come from
the environment, as the instrumentations read them. `--order` says which signal is exported
first (`logs-first`, `spans-first`); `--batch` splits each signal into exports of that many
items. It prints the trace ids.
"""

from __future__ import annotations

import argparse
import json
import sys

SYSTEM = "You are a weather bot."
QUESTION = "Weather in Paris?"
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def _providers(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if args.transport == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        spans = OTLPSpanExporter(endpoint=args.endpoint, insecure=True)
        logs = OTLPLogExporter(endpoint=args.endpoint, insecure=True)
    else:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        spans = OTLPSpanExporter(endpoint=f"{args.endpoint}/v1/traces")
        logs = OTLPLogExporter(endpoint=f"{args.endpoint}/v1/logs")
    resource = Resource.create({"service.name": "weather-agent"})
    # Exported only when flushed, in the order asked (a long delay, big queues).
    hold = {"schedule_delay_millis": 600_000, "max_queue_size": 4096}
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(
        BatchSpanProcessor(spans, max_export_batch_size=args.batch, **hold)
    )
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(logs, max_export_batch_size=args.batch, **hold)
    )
    return tracer_provider, logger_provider


def _instrument(name: str, tracer_provider, logger_provider):  # type: ignore[no-untyped-def]
    if name in ("openai-v2", "genai-openai"):
        module = (
            "opentelemetry.instrumentation.openai_v2"
            if name == "openai-v2"
            else "opentelemetry.instrumentation.genai.openai"
        )
        instrumentor = __import__(module, fromlist=["OpenAIInstrumentor"]).OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=tracer_provider, logger_provider=logger_provider)
        return instrumentor
    if name == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor

        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=tracer_provider)
        return instrumentor
    raise SystemExit(f"unknown instrumentation {name!r}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instrumentation", required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--transport", choices=["http", "grpc"], default="http")
    parser.add_argument("--openai-url", required=True)
    parser.add_argument("--order", choices=["logs-first", "spans-first"], default="logs-first")
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--session", default=None, help="OpenInference session.id")
    parser.add_argument("--user", default=None, help="OpenInference user.id")
    parser.add_argument(
        "--conversation",
        default=None,
        help="gen_ai.conversation.id, set by util-genai's agent invocation (genai-openai)",
    )
    parser.add_argument("--tool-span", action="store_true", help="write an execute_tool span")
    parser.add_argument(
        "--follow-up", default=None, help="ask this next, in a trace of its own (a chat session)"
    )
    parser.add_argument(
        "--no-logs", action="store_true", help="export no logs (the SDK's default: no provider)"
    )
    args = parser.parse_args()

    import openai
    from opentelemetry.trace import SpanKind

    tracer_provider, logger_provider = _providers(args)
    instrumentor = _instrument(
        args.instrumentation, tracer_provider, None if args.no_logs else logger_provider
    )
    tracer = tracer_provider.get_tracer("weather-agent")
    client = openai.OpenAI(base_url=args.openai_url, api_key="test", max_retries=0)
    with (
        _grouping(args, tracer_provider, logger_provider),
        tracer.start_as_current_span(
            "invoke_agent weather",
            kind=SpanKind.INTERNAL,
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather"},
        ) as root,
    ):
        messages: list = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTION},
        ]
        first = client.chat.completions.create(model="qwen3", messages=messages, tools=[WEATHER])
        call = first.choices[0].message.tool_calls[0]
        messages.append(first.choices[0].message.model_dump(exclude_none=True))
        result = json.dumps({"sky": "sunny"})
        if args.tool_span:
            with tracer.start_as_current_span(
                f"execute_tool {call.function.name}",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": call.function.name,
                    "gen_ai.tool.call.id": call.id,
                },
            ):
                pass
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        answer = client.chat.completions.create(model="qwen3", messages=messages, tools=[WEATHER])
        messages.append(answer.choices[0].message.model_dump(exclude_none=True))
        traces = [format(root.get_span_context().trace_id, "032x")]
    if args.follow_up is not None:
        with (
            _grouping(args, tracer_provider, logger_provider),
            tracer.start_as_current_span("invoke_agent weather") as root,
        ):
            messages.append({"role": "user", "content": args.follow_up})
            client.chat.completions.create(model="qwen3", messages=messages, tools=[WEATHER])
            traces.append(format(root.get_span_context().trace_id, "032x"))
    first_provider, second = (
        (logger_provider, tracer_provider)
        if args.order == "logs-first"
        else (tracer_provider, logger_provider)
    )
    ok = first_provider.force_flush() and second.force_flush()
    instrumentor.uninstrument()
    tracer_provider.shutdown()
    logger_provider.shutdown()
    print(" ".join(traces))
    sys.exit(0 if ok else 3)


def _grouping(args: argparse.Namespace, tracer_provider, logger_provider):  # type: ignore[no-untyped-def]
    """OpenInference's context for session.id and user.id on every span, or util-genai's agent
    invocation naming the conversation (its spans, and the chat spans under it, carry
    `gen_ai.conversation.id`), when asked."""
    import contextlib

    if args.conversation is not None:
        from opentelemetry.util.genai.handler import TelemetryHandler

        handler = TelemetryHandler(tracer_provider=tracer_provider, logger_provider=logger_provider)
        return handler.invoke_local_agent(agent_name="weather", conversation_id=args.conversation)
    if args.session is None and args.user is None:
        return contextlib.nullcontext()
    from openinference.instrumentation import using_attributes

    return using_attributes(session_id=args.session, user_id=args.user)


if __name__ == "__main__":
    main()
