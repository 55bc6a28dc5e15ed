"""A local OpenAI-compatible HTTP server for tests: real HTTP for the real `openai` client.

Replies come from a function of the request body, so a test scripts a grader without a model.
Every request is kept for assertions (e.g. that structured output was asked for).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Completion:
    """A full reply, as a serving engine such as vLLM sends it (token ids and logprobs when
    asked for); streamed as chunks when the request says `stream`. `hang_up_after` chunks, the
    connection is dropped mid-stream."""

    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)
    """(id, name, arguments JSON text)."""
    finish_reason: str = "stop"
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    hang_up_after: int | None = None


Reply = str | tuple[int, str] | dict[str, Any] | Completion
"""The assistant's content; or (HTTP status, body) for an error; or {"refusal": text}; or a
Completion."""


class OpenAICompatibleServer:
    def __init__(self, reply: Callable[[dict[str, Any]], Reply]) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, **body})
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                answer = server.reply(body)
                if isinstance(answer, Completion):
                    if body.get("stream"):
                        self._stream(answer, body)
                    else:
                        self._send(200, _completion(answer, body, len(server.requests)))
                    return
                if isinstance(answer, tuple):
                    self._send(answer[0], {"error": {"message": answer[1], "type": "server_error"}})
                    return
                content, refusal = (
                    (None, answer["refusal"]) if isinstance(answer, dict) else (answer, None)
                )
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{len(server.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "local"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {
                                    "role": "assistant",
                                    "content": content,
                                    "refusal": refusal,
                                },
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                    },
                )

            def _stream(self, answer: Completion, body: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for number, chunk in enumerate(_chunks(answer, body)):
                    if answer.hang_up_after is not None and number == answer.hang_up_after:
                        self.wfile.flush()
                        self.connection.shutdown(2)  # mid-stream, without the final chunk
                        return
                    self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> OpenAICompatibleServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


def _logprobs(values: list[float] | None, start: int, end: int) -> dict[str, Any] | None:
    if values is None:
        return None
    return {
        "content": [
            {"token": f"t{i}", "logprob": values[i], "bytes": None, "top_logprobs": []}
            for i in range(start, min(end, len(values)))
        ]
    }


def _completion(answer: Completion, body: dict[str, Any], number: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.content}
    if answer.reasoning_content is not None:
        message["reasoning_content"] = answer.reasoning_content
    if answer.tool_calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in answer.tool_calls
        ]
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "finish_reason": answer.finish_reason,
        "logprobs": _logprobs(answer.logprobs, 0, len(answer.logprobs or [])),
    }
    out: dict[str, Any] = {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "local"),
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(answer.prompt_token_ids or [0] * 10),
            "completion_tokens": len(answer.token_ids or [0] * 5),
            "total_tokens": 15,
        },
    }
    if body.get("return_token_ids"):  # vLLM's extension
        choice["token_ids"] = answer.token_ids
        out["prompt_token_ids"] = answer.prompt_token_ids
    return out


def _chunks(answer: Completion, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The reply as vLLM streams it: role, reasoning, content in pieces (with their token ids
    and logprobs), each call's id and name then its arguments in two pieces, the finish reason,
    and usage when asked for."""
    base = {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": body.get("model", "local"),
    }
    ids = body.get("return_token_ids")

    def chunk(delta: dict[str, Any], **choice: Any) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None, **choice}]}

    first = chunk({"role": "assistant", "content": ""})
    if ids:
        first["prompt_token_ids"] = answer.prompt_token_ids
    yield first
    if answer.reasoning_content:
        yield chunk({"reasoning_content": answer.reasoning_content})
    text = answer.content or ""
    tokens = answer.token_ids or []
    pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
    per = max(1, -(-len(tokens) // max(1, len(pieces)))) if tokens else 0
    for n, piece in enumerate(pieces):
        extra: dict[str, Any] = {"logprobs": _logprobs(answer.logprobs, n * per, (n + 1) * per)}
        if ids:
            extra["token_ids"] = tokens[n * per : (n + 1) * per]
        yield chunk({"content": piece}, **extra)
    if ids and len(pieces) * per < len(tokens):
        yield chunk({}, token_ids=tokens[len(pieces) * per :])
    for index, (cid, name, args) in enumerate(answer.tool_calls):
        head = {
            "index": index,
            "id": cid,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        yield chunk({"tool_calls": [head]})
        half = len(args) // 2
        for part in (args[:half], args[half:]):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
    yield chunk({}, finish_reason=answer.finish_reason)
    if (body.get("stream_options") or {}).get("include_usage"):
        yield {
            **base,
            "choices": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }


def grade_by_answer(body: dict[str, Any]) -> Reply:
    """A scripted grader: the answer "4" is right, anything else wrong; a session mentioning
    "garble" gets a reply that is not JSON, "refuse" a refusal, "crash" an HTTP 500."""
    prompt = body["messages"][-1]["content"]
    if "garble" in prompt:
        return "I think it is fine?"
    if "refuse" in prompt:
        return {"refusal": "I cannot grade this."}
    if "crash" in prompt:
        return (500, "the grader fell over")
    right = "ASSISTANT: 4" in prompt
    return json.dumps(
        {
            "score": 1.0 if right else 0.0,
            "passed": right,
            "rationale": "2+2 is 4" if right else "wrong sum",
        }
    )
