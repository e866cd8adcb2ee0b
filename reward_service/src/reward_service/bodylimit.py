"""A request-body limit for the reward service, answered with 413 before the body is held in memory.

An ASGI middleware: a request whose `Content-Length` is over `max_bytes` is answered 413 at once, without
reading the body; a body without a length (chunked) is counted as it arrives and stopped with 413 as soon
as it passes the limit. The 413 is raised as Starlette's `HTTPException` from inside `receive`, so
FastAPI's body reading lets it through unchanged (fastapi/routing.py re-raises `HTTPException` while it
turns other errors into 400) and the app's own error handler writes it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SETTING = "REWARD_MAX_BODY_BYTES"


class BodyTooLarge(HTTPException):
    """A body over the limit; `detail` says how large it was, the limit, and what to do."""

    def __init__(self, size: str, max_bytes: int) -> None:
        super().__init__(
            413,
            f"the request body ({size}) is larger than {SETTING}={max_bytes}: "
            "send smaller batches, or raise the setting",
        )


class BodyLimit:
    """Refuse request bodies larger than `max_bytes` with 413."""

    def __init__(self, app: ASGIApp, max_bytes: int, on_refused: Callable[[], None] = lambda: None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.on_refused = on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope.get("headers", ()) if k.lower() == b"content-length"), None)
        if declared is not None and declared.isdigit() and (len(declared) > 12 or int(declared) > self.max_bytes):
            self.on_refused()
            shown = f"{int(declared)} bytes" if len(declared) <= 12 else "over a terabyte"
            await _reply(send, BodyTooLarge(shown, self.max_bytes))
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    self.on_refused()
                    raise BodyTooLarge(f"over {self.max_bytes} bytes so far", self.max_bytes)
            return message

        await self.app(scope, limited, send)


async def _reply(send: Send, error: BodyTooLarge) -> None:
    body = json.dumps({"detail": error.detail, "outcome": "bad_request"}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
