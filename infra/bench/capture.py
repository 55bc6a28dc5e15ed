"""`rolltape bench capture`: what recording adds to a `chat.completions.create` call.

A local OpenAI-compatible server (its own process) answers every request at once with the same reply
(HTTP/1.1, keep-alive). The same agent loop runs with a bare `openai.OpenAI` client and with a
captured copy of it, call by call in turn (this machine's drift is far larger than the figure
sought); each call is timed from the caller's side, and the added latency is the median of the
paired differences. The loop is realistic: every call sends the conversation so far (system, user,
the earlier replies) and the session ends every `turns_per_session` calls. The captured client
records to a spool in a temporary folder (no broker; the sender thread runs as it would in
production).
"""

from __future__ import annotations

import json
import multiprocessing
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from rolltape.infra.bench._figures import Figures, machine_line
from rolltape.infra.bench._machine import machine

REPLY = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 0,
    "model": "bench",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "The answer is 4.5, from 342 / 76."},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 60, "completion_tokens": 12, "total_tokens": 72},
}


class CaptureFigures(BaseModel):
    """One `rolltape bench capture` run: bare and captured clients timed call by call in turn,
    back to back or with `gap_ms` between calls (the command runs both)."""

    machine: str
    gap_ms: float
    calls_each: int
    bare_p50_us: float
    bare_p99_us: float
    captured_p50_us: float
    captured_p99_us: float
    added_p50_us: float
    """End to end: median of the paired differences (captured call minus its bare partner)."""
    in_call_p50_us: float
    """Time a captured call spends outside the openai client's own `create` (recording the
    request and the reply), minus the same for a bare call: precise where the end-to-end figure
    drowns in the client's own milliseconds of jitter."""
    in_call_p99_us: float
    code_alone_p50_us: float
    """The recording code alone per call (request + reply into a session, no HTTP), measured
    on its own in the same run: what the caller's thread executes, without waiting for the
    interpreter while the recorder's sender thread chains and writes."""
    goal_added_p50_us: float = 50.0


class CaptureBench(Figures):
    """Everything `rolltape bench capture` prints: a run back to back, then one with a pause
    between calls (`--json` dumps the two runs as a list)."""

    runs: list[CaptureFigures]

    def lines(self) -> Iterator[str]:
        yield machine_line(self.runs[0].machine)
        yield "bare and captured clients take turns call by call against a local server"
        yield "that answers at once; added = median of the paired differences"
        for r in self.runs:
            when = "back to back" if not r.gap_ms else f"{r.gap_ms:.0f} ms pause between calls"
            yield f"({when}, {r.calls_each} calls each)"
            yield f"    bare openai client   p50 {r.bare_p50_us:8.1f} us  p99 {r.bare_p99_us:8.1f} us"
            yield (
                f"    captured             p50 {r.captured_p50_us:8.1f} us  "
                f"p99 {r.captured_p99_us:8.1f} us"
            )
            yield f"    added, end to end    p50 {r.added_p50_us:8.1f} us"
            yield (
                f"    recording in call    p50 {r.in_call_p50_us:8.1f} us  "
                f"p99 {r.in_call_p99_us:8.1f} us"
            )
            yield f"    recording code alone p50 {r.code_alone_p50_us:8.1f} us (no HTTP)"
        yield f"goal: added p50 <= {self.runs[0].goal_added_p50_us:.0f} us"

    def to_json(self) -> str:
        return json.dumps([r.model_dump() for r in self.runs], indent=2)


_ANSWER = REPLY["choices"][0]["message"]["content"]  # type: ignore[index]
_EMPTY = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n"


def _json_response(payload: Mapping[str, Any]) -> bytes:
    body = json.dumps(payload).encode()
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


Replier = Callable[[dict[str, Any]], Mapping[str, Any]]
"""A completion made from the request's body (a bench whose model answers by what it is asked)."""


class _AtOnce(BaseHTTPRequestHandler):
    """Answers with one write and TCP_NODELAY: no Nagle / delayed-ACK stall in the figures. A
    chat completion gets `chat` (or what `replier` makes of the request); any other POST (an
    OTLP export) an empty 200."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    chat = b""
    replier: Replier | None = None

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.path.endswith("/chat/completions"):
            self.wfile.write(_EMPTY)
        elif self.replier is not None:
            self.wfile.write(_json_response(type(self).replier(json.loads(body))))  # type: ignore[misc]
        else:
            self.wfile.write(self.chat)
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    # Room for 64 clients connecting at once (the default backlog of 5 resets connections).
    request_queue_size = 256
    daemon_threads = True


def _serve(ports: multiprocessing.Queue[int], chat: bytes, replier: Replier | None) -> None:
    """The server, in its own process: its threads must not share the client's interpreter."""
    handler = type("_Answering", (_AtOnce,), {"chat": chat, "replier": replier})
    server = _Server(("127.0.0.1", 0), handler)
    ports.put(server.server_address[1])
    server.serve_forever()


def start_instant_server(
    reply: Mapping[str, Any] | Replier = REPLY,
) -> tuple[str, multiprocessing.Process]:
    """An OpenAI-compatible server in its own process that answers every chat completion at
    once with `reply` (or what `reply`, a function of the request's body, returns for it; a
    module-level function, so that it reaches the server's process), and any other POST (an
    OTLP export) with an empty 200: (base URL, the process to terminate)."""
    ports: multiprocessing.Queue[int] = multiprocessing.Queue()
    fixed = b"" if callable(reply) else _json_response(reply)
    args = (ports, fixed, reply if callable(reply) else None)
    server = multiprocessing.Process(target=_serve, args=args, daemon=True)
    server.start()
    return f"http://127.0.0.1:{ports.get(timeout=30)}/v1", server


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_capture_bench(
    calls: int = 3000, turns_per_session: int = 8, gap_ms: float = 0.0
) -> CaptureFigures:
    """`gap_ms`: an untimed pause after each pair of calls, as a real model's seconds give the
    recorder's background thread time to chain and write what the last call recorded."""
    import openai
    from openai.resources.chat.completions import Completions
    from openai.types.chat import ChatCompletion

    from rolltape.producers import Recorder
    from rolltape.producers.capture import capture

    base_url, server = start_instant_server()
    bare = openai.OpenAI(base_url=base_url, api_key="bench", max_retries=0)
    clock = time.perf_counter
    inner = {"s": 0.0}
    real_create = Completions.create

    def timed_create(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = clock()
        try:
            return real_create(self, *args, **kwargs)
        finally:
            inner["s"] += clock() - t0

    total: dict[str, list[float]] = {"bare": [], "captured": []}
    outside: dict[str, list[float]] = {"bare": [], "captured": []}
    Completions.create = timed_create  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            recorder = Recorder(None, spool_dir=Path(tmp), spool_after_s=0.0)
            try:
                made = -40  # the first calls warm up connections and caches, untimed
                while made < calls:
                    session = recorder.session("bench")
                    clients = {"bare": bare, "captured": capture(bare, session=session)}
                    conversations = {"bare": _conversation(), "captured": _conversation()}
                    for _ in range(turns_per_session):
                        # Call by call in turn, in alternating order, so drift and the cost of
                        # going first after a pause hit both alike.
                        order = ("bare", "captured") if made % 2 else ("captured", "bare")
                        for name in order:
                            messages = conversations[name]
                            inner["s"] = 0.0
                            t0 = clock()
                            reply = clients[name].chat.completions.create(
                                model="bench", messages=messages
                            )
                            elapsed = clock() - t0
                            if made >= 0:
                                total[name].append(elapsed * 1e6)
                                outside[name].append((elapsed - inner["s"]) * 1e6)
                            messages.append(
                                {"role": "assistant", "content": reply.choices[0].message.content}
                            )
                            messages.append({"role": "user", "content": "And doubled?"})
                        made += 1
                        if gap_ms:
                            time.sleep(gap_ms / 1000)
                    session.end()
                recorder.flush(60)
            finally:
                recorder.close(60)
    finally:
        Completions.create = real_create  # type: ignore[method-assign]
        server.terminate()
        server.join(10)
    bare_us, captured_us = total["bare"], total["captured"]
    added = [c - b for b, c in zip(bare_us, captured_us, strict=True)]
    shim = statistics.median(outside["bare"])
    return CaptureFigures(
        machine=machine(),
        gap_ms=gap_ms,
        calls_each=len(bare_us),
        bare_p50_us=statistics.median(bare_us),
        bare_p99_us=_percentile(bare_us, 0.99),
        captured_p50_us=statistics.median(captured_us),
        captured_p99_us=_percentile(captured_us, 0.99),
        added_p50_us=statistics.median(added),
        in_call_p50_us=statistics.median(outside["captured"]) - shim,
        in_call_p99_us=_percentile(outside["captured"], 0.99) - shim,
        code_alone_p50_us=_code_alone(ChatCompletion.model_validate(REPLY), turns_per_session),
    )


def run_capture_benches(calls: int = 3000) -> CaptureBench:
    """`rolltape bench capture`: `calls` back to back, then half as many with a 5 ms pause."""
    return CaptureBench(
        runs=[run_capture_bench(calls=calls), run_capture_bench(calls=calls // 2, gap_ms=5.0)]
    )


def _code_alone(canned: Any, turns_per_session: int, sessions: int = 200) -> float:
    """Median per-call time of the capture's request and reply recording on a canned reply."""
    from rolltape.producers import Recorder
    from rolltape.producers.capture._conversation import Conversation
    from rolltape.producers.capture._reply import Reply

    clock = time.perf_counter
    times: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        recorder = Recorder(None, spool_dir=Path(tmp), spool_after_s=0.0)
        try:
            for _ in range(sessions):
                session = recorder.session("bench")
                conversation = Conversation(session, None)
                messages = _conversation()
                for _ in range(turns_per_session):
                    t0 = clock()
                    conversation.request(messages)
                    conversation.reply(Reply.from_completion(canned), 1.0)
                    times.append((clock() - t0) * 1e6)
                    messages.append({"role": "assistant", "content": _ANSWER})
                    messages.append({"role": "user", "content": "And doubled?"})
                session.end()
            recorder.flush(60)  # spooled before close: nothing left for a later recorder
        finally:
            recorder.close(60)
    return statistics.median(times)


def _conversation() -> list[Any]:
    return [
        {"role": "system", "content": "You are a calculator."},
        {"role": "user", "content": "What is 342/76?"},
    ]
