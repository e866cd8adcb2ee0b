"""The reward service under hostile input: bodies over the limit, caches that grow with answers, a
readiness window that must not flap, settings that must stay within reach."""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest
from reward_service.cache import ByteLRU, deep_size
from reward_service.health import HealthWindow, Outcome
from reward_service.settings import Extraction, RewardSettings, SettingsError, load_settings

from reward_service import worker
from tests.support.reward_harness import RewardServer

ServerFactory = Callable[..., AbstractContextManager[RewardServer]]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_ready_does_not_flap_back_when_old_successes_age_out_after_recovery() -> None:
    clock = FakeClock()
    window = HealthWindow(window_s=60, min_requests=20, max_ratio=0.1, clock=clock)
    for _ in range(1000):
        window.record(Outcome.SCORED)
    clock.now += 30
    for _ in range(20):
        window.record(Outcome.SERVICE_ERROR)
    assert not window.failing()  # 20 errors in 1020 items
    clock.now += 1
    for _ in range(5):
        window.record(Outcome.SCORED)  # scoring works again
    clock.now += 30  # the 1000 old successes leave the window; the errors and the 5 new successes stay
    assert not window.failing()
    window.record(Outcome.SCORED)
    assert not window.failing()


def test_unready_recovers_once_successes_bring_the_ratio_under_the_threshold() -> None:
    clock = FakeClock()
    window = HealthWindow(window_s=60, min_requests=10, max_ratio=0.1, clock=clock)
    for _ in range(10):
        window.record(Outcome.SERVICE_ERROR)
    assert window.failing()
    for _ in range(89):
        window.record(Outcome.SCORED)
    assert window.failing()  # 10 of 99 is over 0.1
    window.record(Outcome.SCORED)
    assert not window.failing()  # 10 of 100
    window.record(Outcome.SERVICE_ERROR)  # a new error is judged on the window as it is then
    assert window.failing()  # 11 of 101
    clock.now += 61
    assert not window.failing()  # the errors aged out: nobody has to send traffic to an unready pod


def _bounds(field: Any) -> tuple[bool, bool]:
    meta = field.metadata
    upper = any(getattr(m, "le", None) is not None or getattr(m, "lt", None) is not None for m in meta)
    longest = any(getattr(m, "max_length", None) is not None for m in meta)
    return upper, longest


@pytest.mark.parametrize("name", sorted(RewardSettings.model_fields))
def test_every_setting_is_bounded(name: str) -> None:
    field = RewardSettings.model_fields[name]
    annotation = field.annotation
    upper, longest = _bounds(field)
    if annotation in (int, float, int | None, float | None):
        assert upper, f"REWARD_{name.upper()} has no upper bound"
    elif annotation is str:
        assert longest, f"REWARD_{name.upper()} has no maximum length"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("REWARD_READY_MIN_REQUESTS", "1000000000"),
        ("REWARD_INLINE_MAX_CHARS", "1000000"),
        ("REWARD_MAX_BODY_BYTES", "100"),
        ("REWARD_CACHE_MIB", "100000"),
        ("REWARD_MODEL_NAME", "x" * 100_000),
    ],
    ids=["ready min requests", "inline max chars", "max body bytes", "cache MiB", "a 100000-character model name"],
)
def test_an_out_of_range_setting_stops_the_start_with_one_short_line(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    for name in [n for n in os.environ if n.upper().startswith("REWARD_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as raised:
        load_settings()
    lines = str(raised.value).splitlines()
    assert len(lines) == 1 and lines[0].startswith(variable) and len(lines[0]) < 400


def _raw_post(url: str, head: str, body_chunks: list[bytes]) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head.encode())
        try:
            for chunk in body_chunks:
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before the whole body is sent
        data = b""
        while True:  # the server closes the connection after a 413
            try:
                piece = sock.recv(65536)
            except ConnectionResetError:
                break
            if not piece:
                break
            data += piece
        return data


def test_a_body_over_the_limit_is_a_413_before_it_is_read(reward_server: ServerFactory) -> None:
    with reward_server(workers="1", max_body_bytes="65536") as server:
        declared = _raw_post(
            server.url,
            "POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n",
            [],
        )
        assert declared.startswith(b"HTTP/1.1 413"), declared[:200]
        chunk = b"x" * 40_000
        chunked = _raw_post(
            server.url,
            "POST /score/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n",
            [f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"] * 2 + [b"0\r\n\r\n"],
        )
        assert chunked.startswith(b"HTTP/1.1 413"), chunked[:200]
        assert b"REWARD_MAX_BODY_BYTES=65536" in chunked
        assert server.score("Answer: 42").json() == 1.0
        assert server.outcome("bad_request") == 2


def test_the_parse_cache_holds_its_byte_budget_whatever_the_answers() -> None:
    budget = 64 * 1024
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGALRM)}
    try:
        _fill_the_cache(budget)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _fill_the_cache(budget: int) -> None:
    worker.initialize(
        worker.WorkerConfig(
            backend=RewardSettings.model_fields["backend"].default,
            extraction=Extraction.BOXED,
            budget_s=0,
            cache_bytes=budget,
            model_name="",
            max_length=2048,
            torch_threads=1,
        )
    )
    cache = worker._state.parse_cached
    sizes = []
    for i in range(16):
        answer = "\\text{" + f"{i:02d}" * 1000 + "}"  # distinct 2000-character answers, about 4 KB per entry
        worker.score("7", "\\boxed{" + answer + "}")
        sizes.append(cache.bytes)  # type: ignore[attr-defined]
    assert max(sizes) <= budget * 3 // 4
    assert 4 < len(cache) < 16  # type: ignore[arg-type]  # it kept some and evicted others by their size


def test_an_entry_is_charged_at_least_what_its_objects_take() -> None:
    value = [list(range(1000)), "y" * 100_000]
    size = deep_size("k", value)
    assert size is not None and size >= sys.getsizeof(value[1]) + sum(sys.getsizeof(i) for i in value[0])
    cache: ByteLRU[str, list[Any]] = ByteLRU(lambda key: [key * 100_000], max_bytes=1_000_000)
    for key in "abcdefghij":
        cache(key)
    assert cache.bytes <= 1_000_000 and len(cache) == 9  # each ~100 KB: the tenth evicts the first


def test_a_deeply_nested_body_gets_a_short_422() -> None:
    from fastapi.testclient import TestClient
    from reward_service.app import create_app

    client = TestClient(create_app(RewardSettings(workers=1)))  # no lifespan: the pool is never started
    body = '{"response": "x", "label": "1", "prompt": ' + "[" * 900 + "]" * 900 + "}"
    reply = client.post("/score", content=body, headers={"content-type": "application/json"})
    assert reply.status_code == 422 and len(reply.text) < 600, reply.text[:300]
