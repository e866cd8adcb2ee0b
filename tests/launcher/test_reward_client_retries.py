"""What the reward client waits, retries and scores on each answer the service can give, on a fake clock: the
backoff schedule, which statuses are retried, Retry-After against the backoff, the 422 score, the 1 MiB answer
bound and the one-line failure message."""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import socket
import time
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from grpo_launcher import reward_client
from grpo_launcher.reward_client import RewardServiceFailed

from tests.support.reward_stub import GUARD_S, FakeClock, drip, isolate, reply, retry_after, run, sample


@pytest.fixture(autouse=True)
def failure_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    return isolate(monkeypatch, tmp_path, budget_s=600)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    return FakeClock().install(monkeypatch)


def fails(script: list[Any], samples: Any, failure_file: Path) -> str:
    with pytest.raises(RewardServiceFailed) as raised:
        run(script, samples)
    assert json.loads(failure_file.read_text())["message"] == str(raised.value)
    return str(raised.value)


def unavailable(status: int = 503) -> Any:
    return reply(status, {"detail": "a worker is being replaced", "outcome": "service_error"})


@pytest.mark.parametrize(("jitter", "share"), [("top", 1.0), ("bottom", 0.5)])
def test_the_backoff_starts_at_half_a_second_and_doubles_to_thirty_seconds_with_jitter_down_to_half(
    jitter: str, share: float, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(random, "uniform", (lambda a, b: b) if jitter == "top" else (lambda a, b: a))
    reward, stub = run([unavailable()] * 9 + [reply(body=0.25)], sample())
    assert reward == 0.25 and len(stub.requests) == 10
    assert clock.sleeps == [share * s for s in (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0)]
    assert reward_client.STATS.retries == 9 and reward_client.STATS.requests == 10


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_an_overloaded_or_unreachable_service_is_retried_until_it_answers(status: int, clock: FakeClock) -> None:
    reward, stub = run([unavailable(status), unavailable(status), reply(body=0.75)], sample())
    assert reward == 0.75 and len(stub.requests) == 3 and len(clock.sleeps) == 2


@pytest.mark.parametrize("status", [400, 401, 403, 500, 501, 505])
def test_any_other_error_status_fails_at_once_naming_it(status: int, clock: FakeClock, failure_file: Path) -> None:
    message = fails([unavailable(status), reply(body=1.0)], sample(), failure_file)
    assert f"answered {status}" in message and "not retried" in message
    assert clock.sleeps == [] and reward_client.STATS.requests == 1


def test_a_retry_after_of_zero_means_the_backoff_alone(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(random, "uniform", lambda a, b: b)
    reward, _ = run([retry_after("0"), reply(body=1.0)], sample())
    assert reward == 1.0 and clock.sleeps == [0.5]


def test_a_retry_after_shorter_than_the_backoff_waits_the_backoff(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(random, "uniform", lambda a, b: b)
    reward, _ = run([unavailable()] * 3 + [retry_after("1"), reply(body=1.0)], sample())
    assert reward == 1.0 and clock.sleeps == [0.5, 1.0, 2.0, 4.0]  # the fourth backoff (4 s) beats Retry-After 1


def test_a_retry_after_as_a_future_http_date_waits_until_then(clock: FakeClock) -> None:
    when = email.utils.formatdate(time.time() + 120, usegmt=True)
    reward, _ = run([retry_after(when), reply(body=1.0)], sample())
    assert reward == 1.0 and len(clock.sleeps) == 1 and 100 <= clock.sleeps[0] <= 120


def test_the_budget_counts_from_the_first_attempt_and_a_wait_that_would_reach_it_is_not_taken(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, failure_file: Path
) -> None:
    monkeypatch.setenv("GRPO_REWARD_RETRY_BUDGET_S", "10")
    monkeypatch.setattr(random, "uniform", lambda a, b: b)
    message = fails([retry_after("5")], sample(), failure_file)
    # waits at 0 and 5 s; the next would end at exactly 10 s, the budget: not taken
    assert clock.sleeps == [5.0] and reward_client.STATS.requests == 2
    assert message.endswith(
        ": no reward after 2 attempts in 5 s (GRPO_REWARD_RETRY_BUDGET_S=10); last: 503: queue full"
    )


def test_a_label_the_service_cannot_read_scores_zero_and_is_counted_and_logged(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    unreadable = reply(422, {"detail": "label '\\\\frac{' cannot be parsed", "outcome": "bad_label"})
    with caplog.at_level(logging.WARNING, "grpo_launcher.reward_client"):
        reward, _ = run([unreadable], sample())
    assert reward == 0.0 and reward_client.STATS.unscorable == 1
    assert "cannot be parsed" in caplog.text and "(1 so far)" in caplog.text


def test_one_unreadable_label_in_a_batch_scores_only_that_item_zero() -> None:
    async def label_two_unreadable(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        items = body if isinstance(body, list) else [body]
        if any(item["label"] == "two" for item in items):
            return web.json_response({"detail": "label 'two' cannot be parsed"}, status=422)
        rewards = [1.0 if item["response"] == str(item["label"]) else 0.5 for item in items]
        return web.json_response(rewards if isinstance(body, list) else rewards[0])

    samples = [sample("1", 1), sample("x", "two"), sample("3", 3), sample("4", 5)]
    rewards, stub = run([label_two_unreadable], samples)
    assert rewards == [1.0, 0.0, 1.0, 0.5]
    assert [seen.path for seen in stub.requests] == ["/score/batch"] + ["/score"] * 4


@pytest.mark.parametrize(("size", "accepted"), [(1024 * 1024, True), (1024 * 1024 + 1, False)])
def test_an_answer_of_up_to_one_mib_is_read_and_one_byte_more_is_refused(
    size: int, accepted: bool, failure_file: Path
) -> None:
    body = "0.5".ljust(size)  # JSON allows the trailing whitespace
    if accepted:
        assert run([reply(body=body, raw=True)], sample())[0] == 0.5
    else:
        assert "larger than 1048576 bytes" in fails([reply(body=body, raw=True)], sample(), failure_file)


def test_the_failure_message_is_one_line_of_at_most_300_characters(failure_file: Path) -> None:
    overloaded = reply(503, {"detail": "the\nqueue is full " * 40}, {"Retry-After": "3600"})
    message = fails([overloaded], sample(), failure_file)  # the wait is past the budget: it fails at once
    assert "\n" not in message and len(message) == 300 and message.endswith("...")


def test_a_failure_message_of_exactly_300_characters_is_kept_whole(failure_file: Path) -> None:
    async def overloaded_to_300(request: web.Request) -> web.StreamResponse:
        prefix = f"{request.url}: no reward after 1 attempts in 0 s (GRPO_REWARD_RETRY_BUDGET_S=600); last: 503: "
        detail = "x" * (300 - len(prefix))
        return web.json_response({"detail": detail}, status=503, headers={"Retry-After": "3600"})

    message = fails([overloaded_to_300], sample(), failure_file)
    assert len(message) == 300 and message.endswith("x")


def test_a_failure_file_that_cannot_be_written_is_logged_and_the_failure_still_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    unwritable = tmp_path / "no-such-dir" / "failure.json"
    monkeypatch.setenv("GRPO_FAILURE_FILE", str(unwritable))
    with caplog.at_level(logging.ERROR, "grpo_launcher.reward_client"), pytest.raises(RewardServiceFailed):
        run([reply(404, {"detail": "Not Found"})], sample())
    assert f"could not write GRPO_FAILURE_FILE={unwritable}" in caplog.text


def test_the_failure_is_also_printed_on_stdout_for_the_driver_to_read(
    failure_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fails([reply(404, {"detail": "Not Found"})], sample(), failure_file)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("GRPO_FAILURE ")]
    assert len(lines) == 1 and json.loads(lines[0].removeprefix("GRPO_FAILURE ")) == json.loads(
        failure_file.read_text()
    )


def test_the_failure_is_logged_as_an_error(failure_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, "grpo_launcher.reward_client"):
        message = fails([reply(404, {"detail": "Not Found"})], sample(), failure_file)
    assert f"reward service failed: {message}" in caplog.text


def test_an_answer_in_an_encoding_the_client_does_not_decode_is_no_reward(failure_file: Path) -> None:
    brotli = reply(body="0.5", headers={"Content-Encoding": "br"}, raw=True)
    assert "Content-Encoding 'br'" in fails([brotli], sample(), failure_file)


def _stored_gzip(size: int) -> bytes:
    """A gzip body of stored (uncompressed) blocks: a little larger than the `size` bytes it inflates to."""
    squeeze = zlib.compressobj(0, zlib.DEFLATED, 31)
    return squeeze.compress(b"0.5".ljust(size)) + squeeze.flush()


@pytest.mark.parametrize(("inflated", "accepted"), [(1048473, True), (1048474, False)])
def test_a_compressed_answer_of_up_to_one_mib_on_the_wire_is_read(
    inflated: int, accepted: bool, failure_file: Path
) -> None:
    body = _stored_gzip(inflated)
    assert len(body) == 1024 * 1024 + (0 if accepted else 1)
    answer = reply(body=body, headers={"Content-Encoding": "gzip"}, raw=True)
    if accepted:
        assert run([answer], sample())[0] == 0.5
    else:
        assert "larger than 1048576 bytes" in fails([answer], sample(), failure_file)


def _gzip(size: int) -> bytes:
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)
    return squeeze.compress(b"0.5".ljust(size)) + squeeze.flush()


def test_a_compressed_answer_that_inflates_to_exactly_one_mib_is_read(failure_file: Path) -> None:
    answer = reply(body=_gzip(1024 * 1024), headers={"Content-Encoding": "gzip"}, raw=True)
    assert run([answer], sample())[0] == 0.5


def test_a_compressed_answer_that_inflates_to_one_byte_over_one_mib_is_refused(failure_file: Path) -> None:
    answer = reply(body=_gzip(1024 * 1024 + 1), headers={"Content-Encoding": "gzip"}, raw=True)
    assert "the answer is larger than 1048576 bytes" in fails([answer], sample(), failure_file)


def test_a_compressed_answer_cut_before_its_end_is_no_reward(failure_file: Path) -> None:
    cut = reply(body=_gzip(3)[:-8], headers={"Content-Encoding": "gzip"}, raw=True)  # without its CRC and length
    assert "not a complete compressed body" in fails([cut], sample(), failure_file)


def test_a_redirect_is_not_followed(failure_file: Path) -> None:
    async def moved(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(str(request.url.with_path("/score/batch")))  # the stub would answer 0.5 there

    async def half(request: web.Request) -> web.StreamResponse:
        return web.json_response(0.5)

    with pytest.raises(RewardServiceFailed, match="answered 302"):
        run([moved, half], sample())


def test_a_300_answer_is_no_reward(failure_file: Path) -> None:
    assert "answered 300: 0.5 (not retried" in fails([reply(300, 0.5)], sample(), failure_file)


@pytest.mark.parametrize(
    ("size", "shown"), [(3, "queue full"), (64 * 1024, "queue full"), (64 * 1024 + 1, "(an unreadable body)")]
)
def test_the_services_message_is_read_from_an_error_body_of_up_to_64_kib(
    size: int, shown: str, failure_file: Path
) -> None:
    body = json.dumps({"detail": "queue full"})
    refused = reply(404, body.ljust(max(size, len(body))), raw=True)
    assert f"answered 404: {shown} (not retried" in fails([refused], sample(), failure_file)


def test_an_unreachable_service_is_retried_and_the_failure_names_the_connection_error(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, failure_file: Path
) -> None:
    monkeypatch.setenv("GRPO_REWARD_RETRY_BUDGET_S", "5")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens there once the socket is closed

    async def call() -> Any:
        try:
            return await reward_client.reward(SimpleNamespace(rm_url=f"http://127.0.0.1:{port}/score"), sample())
        finally:
            await reward_client.close()

    with pytest.raises(RewardServiceFailed) as raised:
        asyncio.run(asyncio.wait_for(call(), GUARD_S))
    assert reward_client.STATS.requests > 1
    assert f"last: ClientConnectorError: Cannot connect to host 127.0.0.1:{port}" in str(raised.value)


def test_an_attempt_is_bounded_by_what_is_left_of_the_budget(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, failure_file: Path
) -> None:
    monkeypatch.setenv("GRPO_REWARD_RETRY_BUDGET_S", "10")
    monkeypatch.setattr(random, "uniform", lambda a, b: b)

    async def slow_then_overloaded(request: web.Request) -> web.StreamResponse:
        clock.now += 8  # this answer took 8 s of the budget
        return web.json_response({"detail": "queue full"}, status=503)

    message = fails([slow_then_overloaded, drip(b" ", every_s=0.05)], sample(), failure_file)
    # 8 s + the first backoff (0.5 s) leave 1.5 s for the second attempt, then 0.5 s for the third
    assert clock.sleeps == [0.5, 1.0]
    assert message.endswith(
        "no reward after 3 attempts in 10 s (GRPO_REWARD_RETRY_BUDGET_S=10); last: no whole answer within 0.5 s"
    )


def test_each_retry_is_logged_with_the_reason_the_attempt_and_the_wait(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(random, "uniform", lambda a, b: b)
    long = reply(503, {"detail": "x" * 200})
    with caplog.at_level(logging.WARNING, "grpo_launcher.reward_client"):
        run([unavailable(), long, reply(body=1.0)], sample())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "reward service 503: a worker is being replaced; retry 1 in 0.5 s",
        "reward service 503: " + "x" * 192 + "...; retry 2 in 1.0 s",  # the reason cut to 200 characters
    ]


@pytest.mark.parametrize("as_json", [True, False], ids=["json-detail", "plain-text"])
def test_the_services_message_is_cut_to_200_characters_in_the_failure(as_json: bool, failure_file: Path) -> None:
    text = "y" * 300
    refused = reply(404, {"detail": text}) if as_json else reply(404, text, raw=True)
    message = fails([refused], sample(), failure_file)
    assert message.endswith(" answered 404: " + "y" * 197 + "... (not retried: fix the request)")


def test_a_plain_text_error_body_is_named_in_the_failure(failure_file: Path) -> None:
    message = fails([reply(404, "no such route on this proxy", raw=True)], sample(), failure_file)
    assert message.endswith(" answered 404: no such route on this proxy (not retried: fix the request)")


def test_an_empty_group_scores_nothing_and_asks_the_service_nothing() -> None:
    rewards, stub = run([reply(body=[0.5])], [])
    assert rewards == [] and stub.requests == []


def test_without_an_rm_url_the_client_fails_naming_the_flag(failure_file: Path) -> None:
    with pytest.raises(RewardServiceFailed, match="--rm-url is not set"):
        asyncio.run(reward_client.reward(SimpleNamespace(rm_url=None), sample()))
    assert "--rm-url is not set" in json.loads(failure_file.read_text())["message"]


@pytest.mark.parametrize(
    ("body", "kind"), [({"0.5": 1, "1.0": 1}, "dict"), ("ab", "str")], ids=["a mapping", "a string"]
)
def test_a_batch_answer_with_one_entry_per_sample_that_is_not_a_list_is_no_reward(
    body: Any, kind: str, failure_file: Path
) -> None:
    message = fails([reply(body=body)], [sample(), sample()], failure_file)
    assert f"the answer to a batch of 2 is a {kind}, not a list" in message


def test_an_answer_later_than_what_is_left_of_the_budget_is_not_waited_for(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, failure_file: Path
) -> None:
    monkeypatch.setenv("GRPO_REWARD_RETRY_BUDGET_S", "10")
    monkeypatch.setattr(random, "uniform", lambda a, b: b)

    async def slow_then_overloaded(request: web.Request) -> web.StreamResponse:
        clock.now += 9.25
        return web.json_response({"detail": "queue full"}, status=503)

    async def late(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(0.75)  # three times what is left of the budget
        return web.json_response(0.75)

    message = fails([slow_then_overloaded, late], sample(), failure_file)
    assert message.endswith("last: no whole answer within 0.25 s")
