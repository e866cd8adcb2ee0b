"""The reward client (miles's --custom-rm-path) against a misbehaving server: every answer ends as the reward
the service computed or as `RewardServiceFailed` with the failure file written, within the retry budget.

The waits and the budget are measured on a fake clock (`reward_stub.FakeClock`), never on the wall clock."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from grpo_launcher import reward_client
from grpo_launcher.reward_client import RewardServiceFailed

from tests.support.reward_stub import (
    FakeClock,
    drip,
    gzip_bomb,
    isolate,
    reply,
    retry_after,
    run,
    sample,
)


@pytest.fixture(autouse=True)
def failure_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    return isolate(monkeypatch, tmp_path, budget_s=20)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    return FakeClock().install(monkeypatch)


def fails(script: list[Any], samples: Any, failure_file: Path) -> str:
    """Run, expect `RewardServiceFailed`, and return the failure file's message."""
    with pytest.raises(RewardServiceFailed) as raised:
        run(script, samples)
    failure = json.loads(failure_file.read_text())
    assert failure["reason"] == "RewardServiceFailed" and failure["message"] == str(raised.value)
    return str(raised.value)


def test_a_retry_waits_the_retry_after_the_service_asked_for(clock: FakeClock) -> None:
    reward, stub = run([retry_after("3"), reply(body=0.75)], sample())
    assert reward == 0.75
    assert len(stub.requests) == 2
    assert clock.sleeps and clock.sleeps[0] >= 3.0  # never sooner than the service asked


def test_the_retries_of_one_request_carry_its_request_id_so_the_service_can_attach_them(clock: FakeClock) -> None:
    reward, stub = run([retry_after("1"), retry_after("1"), reply(body=1.0)], sample())
    ids = {seen.headers.get(reward_client.REQUEST_ID_HEADER.lower()) for seen in stub.requests}
    assert reward == 1.0 and len(stub.requests) == 3 and len(ids) == 1 and None not in ids


@pytest.mark.parametrize("header", ["0", "-5", "NaN", "inf", "Wed, 21 Oct 2015 07:28:00 GMT", "1e999"])
def test_a_retry_after_of_zero_or_nonsense_still_backs_off_and_ends_in_the_budget(
    header: str, clock: FakeClock, failure_file: Path
) -> None:
    message = fails([retry_after(header)], sample(), failure_file)
    assert "GRPO_REWARD_RETRY_BUDGET_S=20" in message
    assert all(wait >= 0.25 for wait in clock.sleeps)  # at least half the first backoff, jitter included
    assert sum(clock.sleeps) <= 20
    assert reward_client.STATS.requests <= 12  # 0.5 s doubling within 20 s, not 1025 in a second


def test_a_backoff_or_retry_after_never_runs_past_the_budget(clock: FakeClock, failure_file: Path) -> None:
    fails([retry_after("7")], sample(), failure_file)
    assert clock.sleeps == [7.0, 7.0]  # at 0 and 7 s; a third wait would end at 21 s, past the 20 s budget
    assert reward_client.STATS.requests == 3


def test_a_retry_after_longer_than_the_budget_fails_at_once(clock: FakeClock, failure_file: Path) -> None:
    fails([retry_after("3600")], sample(), failure_file)
    assert clock.sleeps == [] and reward_client.STATS.requests == 1


@pytest.mark.parametrize(
    "body",
    ["NaN", "Infinity", "-Infinity", "1e999", "true", "false", "null", '"0.5"', '{"0.5": 1}', "[0.5]", ""],
)
def test_an_answer_that_is_not_a_finite_number_is_no_reward(body: str, failure_file: Path) -> None:
    message = fails([reply(body=body, raw=True)], sample(), failure_file)
    assert "not" in message


@pytest.mark.parametrize(
    ("body", "samples", "named"),
    [
        pytest.param("1e300", 1, "1e+300", id="1e300"),
        pytest.param("3.5e38", 1, "3.5e+38", id="above-float32-max"),
        pytest.param("-3.5e38", 1, "-3.5e+38", id="below-float32-min"),
        pytest.param("1000000.5", 1, "1000000.5", id="just-above-1e6"),
        pytest.param("[0.5, 3.5e38]", 2, "3.5e+38", id="one-item-of-a-batch"),
    ],
)
def test_a_reward_outside_the_documented_range_is_a_failure_naming_it_never_a_reward(
    body: str, samples: int, named: str, failure_file: Path
) -> None:
    """miles keeps rewards as float32: 3.5e38 there is infinity, then NaN advantages for the whole group."""
    message = fails([reply(body=body, raw=True)], sample() if samples == 1 else [sample()] * samples, failure_file)
    assert "outside the reward range" in message and f"answer {named} " in message


@pytest.mark.parametrize("body", ["1000000", "-1000000", "1e6", "0.5"])
def test_a_reward_at_the_bound_is_a_reward(body: str) -> None:
    reward, _ = run([reply(body=body, raw=True)], sample())
    assert reward == float(body)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ('{"0.5": 1, "1.0": 1}', "not a list"),
        ("[0.5]", "has 1 rewards"),
        ("[0.5, 1, 0]", "has 3 rewards"),
        ("[0.5, NaN]", "not JSON"),
        ("[0.5, true]", "not a number"),
        ('[0.5, "1"]', "not a number"),
    ],
)
def test_a_batch_answer_must_be_one_finite_number_per_sample(body: str, why: str, failure_file: Path) -> None:
    assert why in fails([reply(body=body, raw=True)], [sample(), sample()], failure_file)


@pytest.mark.parametrize(
    "answer",
    [
        reply(200, "<html><body>Welcome to nginx</body></html>", raw=True),
        reply(200, "not json", raw=True),
        reply(204, "", raw=True),
        reply(500, "<html>Internal Server Error</html>", raw=True),
        reply(404, {"detail": "Not Found"}),
        reply(200, b"\xff\xfe0.5", raw=True),
        reply(302, "", {"Location": "http://127.0.0.1:1/elsewhere"}, raw=True),
    ],
    ids=["html", "text", "204", "500-html", "404", "not-utf8", "redirect"],
)
def test_every_other_answer_ends_as_reward_service_failed_with_the_failure_file(
    answer: Any, failure_file: Path
) -> None:
    fails([answer], sample(), failure_file)


def test_an_oversized_answer_is_refused_without_reading_it_all(failure_file: Path) -> None:
    huge = "[" + ", ".join(["0.5"] * 2_000_000) + "]"  # about 10 MB
    assert "larger than" in fails([reply(body=huge, raw=True)], sample(), failure_file)


def test_a_gzip_bomb_is_refused_while_it_inflates(failure_file: Path) -> None:
    assert "decompresses to more than" in fails([gzip_bomb()], sample(), failure_file)


def test_a_slowly_dripping_answer_is_bounded_in_total_time_and_by_the_budget(
    monkeypatch: pytest.MonkeyPatch, failure_file: Path
) -> None:
    monkeypatch.setenv("GRPO_REWARD_DEADLINE_S", "0.01")  # each attempt: 5.02 s in total
    monkeypatch.setenv("GRPO_REWARD_RETRY_BUDGET_S", "6")
    message = fails([drip(b" ", every_s=0.2)], sample(), failure_file)
    assert "no reward after" in message


def test_a_batch_too_large_for_the_queue_is_split_in_halves_and_keeps_its_order() -> None:
    async def queue_of_two(request: web.Request) -> web.StreamResponse:
        items = await request.json()
        if len(items) > 2:
            return web.json_response({"detail": f"a batch of {len(items)} items is larger than the queue"}, status=413)
        return web.json_response([len(item["response"]) / 10 for item in items])

    rewards, stub = run([queue_of_two], [sample("x" * n) for n in range(1, 6)])
    assert rewards == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert [len(seen.body) for seen in stub.requests] == [5, 2, 3, 1, 2]


def test_a_single_sample_too_large_ends_the_split_instead_of_recursing(failure_file: Path) -> None:
    too_large = reply(413, {"detail": "the request body is larger than REWARD_MAX_BODY_BYTES"})
    message = fails([too_large], [sample("x" * 100)], failure_file)
    assert "too large" in message


def test_an_unusable_rm_url_ends_as_reward_service_failed(failure_file: Path) -> None:
    async def call() -> Any:
        try:
            return await reward_client.reward(type("Args", (), {"rm_url": "not a url"})(), sample())
        finally:
            await reward_client.close()

    with pytest.raises(RewardServiceFailed):
        asyncio.run(call())
    assert json.loads(failure_file.read_text())["reason"] == "RewardServiceFailed"


def test_a_body_that_lies_about_its_compression_ends_as_reward_service_failed(failure_file: Path) -> None:
    lying = reply(body="0.5", headers={"Content-Encoding": "gzip"}, raw=True)  # found by the fuzz target
    assert "compressed" in fails([lying], sample(), failure_file)
