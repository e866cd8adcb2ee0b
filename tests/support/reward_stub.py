"""A scripted, misbehaving reward server for the reward client's tests: an in-process aiohttp app on 127.0.0.1.

`StubRewardServer(script)` answers the n-th request with `script[n]` (the last entry repeats) and records
every request (path, headers, JSON body). The answers are what a broken or hostile service, proxy or
network can send: the helpers below build each (`reply`, `drip`, `gzip_bomb`). The tests of
`grpo_launcher.reward_client` and its fuzz target share this module (import it; it is no conftest).

`FakeClock` replaces the client's clock and sleep, so a test measures the waits the client chose and the
budget it spent without waiting for them.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from grpo_launcher import reward_client

Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]


def reply(status: int = 200, body: Any = 0.5, headers: dict[str, str] | None = None, raw: bool = False) -> Answer:
    """A whole answer: `body` as JSON (any value, NaN included), or as bytes/str when `raw`."""
    data = (body.encode() if isinstance(body, str) else bytes(body)) if raw else json.dumps(body).encode()
    kind = "text/plain" if raw else "application/json"

    async def answer(request: web.Request) -> web.StreamResponse:
        return web.Response(status=status, body=data if status != 204 else None, headers=headers, content_type=kind)

    return answer


def retry_after(value: str, status: int = 503) -> Answer:
    return reply(status, {"detail": "queue full", "outcome": "overloaded"}, {"Retry-After": value})


def drip(chunk: bytes = b" ", every_s: float = 0.2, status: int = 200) -> Answer:
    """Headers at once, then `chunk` every `every_s` seconds, never ending (a slowloris answer)."""

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=status, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        while True:
            await response.write(chunk)
            await asyncio.sleep(every_s)

    return answer


def gzip_bomb(inflated_bytes: int = 256 * 1024 * 1024) -> Answer:
    """A small gzip body that inflates to `inflated_bytes` of spaces (valid JSON whitespace around a number)."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b" " * (1024 * 1024)
    parts = [squeeze.compress(block) for _ in range(inflated_bytes // len(block))]
    data = b"".join(parts) + squeeze.compress(b"0.5") + squeeze.flush()

    async def answer(request: web.Request) -> web.StreamResponse:
        return web.Response(body=data, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})

    return answer


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class StubRewardServer:
    script: Sequence[Answer]
    requests: list[Seen] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(Seen(request.path, {k.lower(): v for k, v in request.headers.items()}, body))
        answer = self.script[min(len(self.requests), len(self.script)) - 1]
        return await answer(request)

    async def __aenter__(self) -> StubRewardServer:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/score", self._handle)
        app.router.add_post("/score/batch", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}/score"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await reward_client.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def args(self) -> SimpleNamespace:
        return SimpleNamespace(rm_url=self.url)  # what --rm-url carries


def sample(response: str = "$\\boxed{1}$", label: object = 1) -> SimpleNamespace:
    # miles.utils.types.Sample: the client reads .prompt, .response and .label.
    return SimpleNamespace(prompt="p", response=response, label=label)


@dataclass
class FakeClock:
    """The client's clock and sleep: a sleep advances the clock at once and is recorded."""

    now: float = 1000.0
    sleeps: list[float] = field(default_factory=list)

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeClock:
        monkeypatch.setattr(reward_client, "_monotonic", self.monotonic, raising=False)
        monkeypatch.setattr(reward_client, "_sleep", self.sleep, raising=False)
        return self


async def score(script: Sequence[Answer], samples: Any) -> tuple[Any, StubRewardServer]:
    """The client's answer for `samples` (one or a list) from a stub playing `script`, and the stub."""
    async with StubRewardServer(script) as stub:
        return await reward_client.reward(stub.args, samples), stub


GUARD_S = 120  # a hang guard only: a client that never returns fails here instead of blocking the suite


def run(script: Sequence[Answer], samples: Any) -> tuple[Any, StubRewardServer]:
    """`score`, from synchronous tests."""
    return asyncio.run(asyncio.wait_for(score(script, samples), GUARD_S))


def isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, budget_s: int) -> Path:
    """A fresh client state, its retry budget, no deadline from the environment, and the failure file it writes
    (returned)."""
    monkeypatch.setattr(reward_client, "STATS", reward_client.Stats())
    path = tmp_path / "failure.json"
    monkeypatch.setenv("GRPO_FAILURE_FILE", str(path))
    monkeypatch.setenv("GRPO_REWARD_RETRY_BUDGET_S", str(budget_s))
    monkeypatch.delenv("GRPO_REWARD_DEADLINE_S", raising=False)
    return path
