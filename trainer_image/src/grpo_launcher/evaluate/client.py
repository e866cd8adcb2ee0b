"""A small blocking client for SGLang's HTTP server: readiness and OpenAI-compatible chat completions.

Readiness (``GET /health``): 200 is ready; 503 is what SGLang answers while it starts (and while it shuts
down), so it is waited on; a refused connection is waited on; any other HTTP status fails at once, and so does
the deadline (``curl -s`` exits 0 on a 4xx or 5xx, so polling with it announces a broken server as ready).
Generation uses ``POST /v1/chat/completions`` so the server applies the model's chat template.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

STARTING = 503


class ServerNotReadyError(Exception):
    """The server did not become ready; the message says what it answered."""


class RequestFailedError(Exception):
    """One generation request failed (HTTP error, bad body, timeout)."""


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float
    top_p: float


def _get_status(url: str, timeout: float) -> int:
    request = urllib.request.Request(url, method="GET")  # noqa: S310 (http(s) URL given by the user)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def wait_ready(
    base_url: str,
    timeout: float,
    interval: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Block until ``GET /health`` answers 200; return the seconds waited. Raises ServerNotReadyError."""
    url = base_url.rstrip("/") + "/health"
    start = clock()
    last = "no answer yet"
    while True:
        try:
            status = _get_status(url, timeout=min(30.0, max(timeout, 1.0)))
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            last = f"connection failed ({reason})"
        else:
            if status == 200:
                return clock() - start
            if status != STARTING:
                raise ServerNotReadyError(
                    f"GET {url} answered HTTP {status}; an SGLang server answers only 200 (ready) "
                    "and 503 (starting): check --base-url and the server's log"
                )
            last = "HTTP 503 (starting)"
        if clock() - start >= timeout:
            raise ServerNotReadyError(f"GET {url} not ready after {timeout:g} s; last answer: {last}")
        sleep(interval)


def chat(
    base_url: str, model: str, messages: Sequence[dict[str, str]], params: SamplingParams, timeout: float
) -> tuple[str, str]:
    """One completion; returns (content, finish_reason). Raises RequestFailedError."""
    body: dict[str, Any] = {
        "model": model,
        "messages": list(messages),
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "n": 1,
    }
    request = urllib.request.Request(  # noqa: S310 (http(s) URL given by the user)
        base_url.rstrip("/") + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            payload = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:200].decode(errors="replace")
        raise RequestFailedError(f"HTTP {exc.code}: {' '.join(detail.split())}") from None
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        raise RequestFailedError(f"request failed: {getattr(exc, 'reason', exc)}") from None
    except json.JSONDecodeError:
        raise RequestFailedError("the response body is not JSON") from None
    try:
        choice = payload["choices"][0]
        content = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise RequestFailedError(f"unexpected response shape: {json.dumps(payload)[:200]}") from None
    if not isinstance(content, str):
        raise RequestFailedError("choices[0].message.content is not a string")
    return content, str(choice.get("finish_reason"))
