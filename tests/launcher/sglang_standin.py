"""A stand-in for an SGLang server on 127.0.0.1: ``GET /health`` and ``POST /v1/chat/completions``.

It answers in SGLang's shapes (503 from /health while "starting", an OpenAI chat.completion body) with
scripted responses per prompt, can fail every Nth request with HTTP 500, and records how many requests
were in flight at once.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Behaviour:
    health: list[int] = field(default_factory=lambda: [200])  # statuses in order; the last one repeats
    answers: dict[str, list[str]] = field(default_factory=dict)  # prompt -> responses, cycled
    fail_every: int = 0  # every Nth chat request answers 500 (0: never)
    delay: float = 0.0
    finish_reason: str = "stop"
    # observed
    health_calls: int = 0
    chat_calls: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    per_prompt: dict[str, itertools.count[int]] = field(default_factory=lambda: defaultdict(itertools.count))


def _handler(b: Behaviour) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any] | None = None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path != "/health":
                self._send(404, {"detail": "Not Found"})
                return
            with b.lock:
                status = b.health[min(b.health_calls, len(b.health) - 1)]
                b.health_calls += 1
            self._send(status)

        def do_POST(self) -> None:
            if self.path != "/v1/chat/completions":
                self._send(404, {"detail": "Not Found"})
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with b.lock:
                b.chat_calls += 1
                call = b.chat_calls
                b.in_flight += 1
                b.max_in_flight = max(b.max_in_flight, b.in_flight)
                b.bodies.append(body)
            # The request stops counting as in flight before the reply is written: once the client has the
            # reply it may send its next request, which must not be counted against this one.
            try:
                time.sleep(b.delay)
                if b.fail_every and call % b.fail_every == 0:
                    status, reply = 500, {"object": "error", "message": "Internal server error", "code": 500}
                else:
                    prompt = body["messages"][-1]["content"]
                    with b.lock:
                        n = next(b.per_prompt[prompt])
                    replies = b.answers[prompt]
                    status, reply = (
                        200,
                        {
                            "id": f"chatcmpl-{call}",
                            "object": "chat.completion",
                            "model": body["model"],
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "content": replies[n % len(replies)]},
                                    "finish_reason": b.finish_reason,
                                }
                            ],
                            "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
                        },
                    )
            finally:
                with b.lock:
                    b.in_flight -= 1
            self._send(status, reply)

    return Handler


@contextmanager
def sglang_standin(behaviour: Behaviour) -> Iterator[str]:
    """Serve ``behaviour`` on 127.0.0.1 at a free port; yields the base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(behaviour))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
