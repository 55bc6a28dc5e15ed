"""A local OpenAI-compatible HTTP server for tests: real HTTP for the real `openai` client.

Replies come from a function of the request body, so a test scripts a grader without a model.
Every request is kept for assertions (e.g. that structured output was asked for).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = str | tuple[int, str] | dict[str, Any]
"""The assistant's content; or (HTTP status, body) for an error; or {"refusal": text}."""


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
