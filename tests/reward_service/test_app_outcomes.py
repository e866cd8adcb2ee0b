"""What a client gets back when a worker answers something other than a reward, and what the service shows around
it: a gold label the worker cannot read (422), a timeout (0.0, or 503 under REWARD_ON_TIMEOUT=unavailable), the
readiness probe with a live worker and under failures, the reward-model backend, the log lines an operator reads,
the error table of the OpenAPI document, and the start and stop of the worker pool.

Most tests run the app in process without its pool: `scripted_pool` stands in for `ScoringPool.score` (which
awaits a worker's `ItemResult`, pool.py:177) with the result a worker gives for each response; the worker's
own verdicts are in test_worker_verdicts.py. The app's lifespan runs with a pool that heals when its watchdog asks
(the real pool's start and stop are in tests/integration/reward_service)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from reward_service.app import create_app
from reward_service.pool import PoolError
from reward_service.settings import Backend, Extraction, RewardSettings, TimeoutPolicy

from reward_service import app as app_module
from reward_service import worker
from tests.support.reward_app import client, counted
from tests.support.reward_harness import eventually

GIVES_UP = worker.ItemResult(worker.TIMEOUT, 0.0, "gave up after the 1 s worker budget")
UNREADABLE = worker.ItemResult(worker.BAD_LABEL, 0.0, "math_verify cannot parse the gold label '\\\\boxed{}'")
HALF = worker.ItemResult(worker.SCORED, 1.0)


def sha1(text: bytes) -> str:
    return hashlib.sha1(text).hexdigest()[:12]  # what an operator matches against the response they hold


def scripted_pool(
    service: TestClient, monkeypatch: pytest.MonkeyPatch, results: dict[str, worker.ItemResult | Exception]
) -> list[tuple[str | None, str, Any]]:
    """Each response gets the worker result scripted for it; returns the (label, response, prompt) sent."""
    sent: list[tuple[str | None, str, Any]] = []

    async def score(label: str | None, response: str, prompt: Any = None) -> worker.ItemResult:
        sent.append((label, response, prompt))
        result = results[response]
        if isinstance(result, Exception):
            raise result
        return result

    monkeypatch.setattr(service.app.state.service.pool, "score", score)  # type: ignore[attr-defined]
    return sent


def one(response: str, label: object = "\\frac{1}{2}") -> dict[str, Any]:
    return {"prompt": "p", "response": response, "label": label}


def test_a_gold_label_the_worker_cannot_read_is_a_422_naming_the_item(monkeypatch: pytest.MonkeyPatch) -> None:
    service = client()
    scripted_pool(service, monkeypatch, {"bad": UNREADABLE, "fine": HALF})
    single = service.post("/score", json=one("bad", "\\boxed{}"))
    assert single.status_code == 422
    assert single.json() == {
        "detail": "math_verify cannot parse the gold label '\\\\boxed{}': send the gold answer as LaTeX or a number "
        "math_verify can parse",
        "outcome": "bad_label",
    }
    batch = service.post("/score/batch", json=[one("fine"), one("bad", "\\boxed{}")])
    assert batch.status_code == 422 and batch.json()["detail"].startswith("item 1: math_verify cannot parse")
    assert "retry-after" not in batch.headers  # sending it again cannot help
    assert (counted(service, "bad_label"), counted(service, "scored")) == (2.0, 1.0)


def test_a_timeout_scores_zero_by_default_and_is_logged_and_counted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    service = client()
    scripted_pool(service, monkeypatch, {"slow": GIVES_UP, "fine": HALF})
    with caplog.at_level(logging.WARNING, logger="reward_service"):
        assert service.post("/score/batch", json=[one("fine"), one("slow")]).json() == [1.0, 0.0]
    assert counted(service, "timeout") == 1.0
    assert [r.getMessage() for r in caplog.records] == [
        f"timeout while scoring (4 chars, sha1 {sha1(b'slow')}): gave up after the 1 s worker budget"
    ]


def test_a_timeout_is_a_503_with_retry_after_when_configured_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    service = client(on_timeout=TimeoutPolicy.UNAVAILABLE, retry_after_s=5)
    scripted_pool(service, monkeypatch, {"slow": GIVES_UP, "fine": HALF, "bad": UNREADABLE})
    refused = service.post("/score/batch", json=[one("fine"), one("slow")])
    assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
    assert refused.json() == {
        "detail": "item 1: scoring this response overran its deadline (gave up after the 1 s worker budget) and "
        "REWARD_ON_TIMEOUT=unavailable",
        "outcome": "timeout",
    }
    first_wins = service.post("/score/batch", json=[one("bad", "\\boxed{}"), one("slow")])
    assert first_wins.status_code == 422 and first_wins.json()["detail"].startswith("item 0: math_verify")
    assert service.post("/score", json=one("fine")).json() == 1.0


def test_a_service_failure_outranks_a_bad_label_and_is_logged_with_the_responses_digest(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    service = client()
    scripted_pool(
        service, monkeypatch, {"bad": UNREADABLE, "lost": PoolError("the scoring worker died (exit code -9)")}
    )
    with caplog.at_level(logging.ERROR, logger="reward_service"):
        failed = service.post("/score/batch", json=[one("bad", "\\boxed{}"), one("lost")])
    assert failed.status_code == 503 and failed.json()["outcome"] == "service_error"
    assert failed.json()["detail"].startswith("item 1: the service failed to score this item (the scoring worker died")
    assert [r.getMessage() for r in caplog.records] == [
        f"service error while scoring (4 chars, sha1 {sha1(b'lost')}): the scoring worker died (exit code -9)"
    ]


def test_the_reward_model_backend_sends_items_without_labels_to_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    service = client(backend=Backend.REWARD_MODEL)
    sent = scripted_pool(service, monkeypatch, {"12": worker.ItemResult(worker.SCORED, 0.25)})
    assert service.post("/score", json={"prompt": [{"role": "user", "content": "q"}], "response": "12"}).json() == 0.25
    assert service.post("/score", json={"prompt": "q", "response": "12", "label": 12}).json() == 0.25
    assert sent == [(None, "12", [{"role": "user", "content": "q"}]), (None, "12", "q")]  # no label, no shortcut


def test_every_setting_a_worker_needs_reaches_its_configuration() -> None:
    settings = RewardSettings(
        workers=1,
        extraction=Extraction.BOXED,
        deadline_s=8,
        soft_deadline_s=3,
        cache_mib=5,
        model_name="org/rm",
        max_length=300,
        torch_threads=2,
    )
    pool = create_app(settings).state.service.pool
    assert pool.config == worker.WorkerConfig(
        Backend.MATH_VERIFY, Extraction.BOXED, 3.0, 5 * 1024 * 1024, "org/rm", 300, 2
    )
    assert (pool.workers, pool.deadline_s) == (1, 8.0)


def live_worker(service: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool reports one live worker (as a pool whose workers are up) without starting one."""
    monkeypatch.setattr(service.app.state.service.pool, "alive_workers", lambda: 1)  # type: ignore[attr-defined]


def test_ready_with_a_live_worker_and_no_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    service = client()
    live_worker(service, monkeypatch)
    service.post("/score", json=one("$\\boxed{3}$", 3))
    ready = service.get("/ready")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "workers": 1, "items_in_window": 1, "service_errors": 0}
    assert "reward_service_ready 1.0" in service.get("/metrics").text


def test_ready_turns_503_once_service_errors_pass_the_ratio(monkeypatch: pytest.MonkeyPatch) -> None:
    service = client(ready_min_requests=3, ready_max_error_ratio=0.5)
    live_worker(service, monkeypatch)
    for _ in range(3):
        assert service.post("/score", json=one("so $\\boxed{0.5}$")).status_code == 503  # no pool: a failure
    ready = service.get("/ready")
    assert ready.status_code == 503
    assert ready.json() == {
        "detail": "scoring is failing: 3 service errors in the last 3 items (over REWARD_READY_MAX_ERROR_RATIO=0.5)",
        "outcome": "not_ready",
        "workers": 1,
        "items_in_window": 3,
        "service_errors": 3,
    }
    assert "reward_service_ready 0.0" in service.get("/metrics").text


def test_the_request_latency_recorded_is_within_the_time_the_client_waited() -> None:
    service = client()
    started = time.perf_counter()
    service.post("/score", json=one("$\\boxed{3}$", 3))
    waited = time.perf_counter() - started
    text = service.get("/metrics").text
    found = re.search(r'^reward_service_request_duration_seconds_sum{endpoint="score"} (\S+)$', text, re.MULTILINE)
    assert found is not None and 0 < float(found.group(1)) <= waited


def test_the_oldest_kept_answer_goes_when_two_answers_exceed_the_queue() -> None:
    service = client(max_queue=2)
    service.post("/score", json=one("$\\boxed{3}$", 3), headers={"X-Request-Id": "a"})
    service.post("/score/batch", json=[one("$\\boxed{3}$", 3)] * 2, headers={"X-Request-Id": "b"})
    assert counted(service, "scored") == 3.0
    service.post("/score/batch", json=[one("$\\boxed{3}$", 3)] * 2, headers={"X-Request-Id": "b"})
    assert counted(service, "scored") == 3.0  # "b" kept
    service.post("/score", json=one("$\\boxed{3}$", 3), headers={"X-Request-Id": "a"})
    assert counted(service, "scored") == 4.0  # "a" was dropped: 3 items kept would pass the queue of 2


def test_the_openapi_document_lists_each_error_status() -> None:
    responses = client().get("/openapi.json").json()["paths"]["/score"]["post"]["responses"]
    assert sorted(responses) == ["200", "400", "413", "422", "503"]
    assert responses["413"]["description"].startswith("The batch is larger than the queue")
    assert responses["503"]["description"] == "Queue full or service failure (Retry-After is set)"


def test_a_chunked_body_over_the_limit_is_refused_with_413_and_the_connection_closed() -> None:
    service = client(max_body_bytes=1024)
    chunks = iter([b'{"response": "', b"x" * 800, b"x" * 800, b'", "label": 1}'])
    refused = service.post("/score", content=chunks, headers={"Content-Type": "application/json"})
    assert refused.status_code == 413 and refused.headers["connection"] == "close"
    assert refused.json() == {
        "detail": "the request body (over 1024 bytes so far) is larger than REWARD_MAX_BODY_BYTES=1024: send smaller "
        "batches, or raise the setting",
        "outcome": "bad_request",
    }
    assert counted(service, "bad_request") == 1.0


def test_a_body_that_is_not_utf8_is_a_400_with_the_fix() -> None:
    service = client()
    refused = service.post(
        "/score", content=b'{"response": "\xff", "label": 1}', headers={"Content-Type": "application/json"}
    )
    assert refused.status_code == 400
    assert refused.json() == {
        "detail": "the body could not be read as JSON (There was an error parsing the body); send UTF-8 JSON with "
        "Content-Type: application/json",
        "outcome": "bad_request",
    }
    assert counted(service, "bad_request") == 1.0


@pytest.mark.parametrize("length", [80, 81])
def test_a_long_value_in_a_validation_message_is_cut_to_80_characters(length: int) -> None:
    value = ["z" * (length - 4)]  # its repr, ['zz...'], is `length` characters
    detail = client().post("/score", json={"response": value, "label": 1}).json()["detail"]
    shown = repr(value) if length <= 80 else repr(value)[:77] + "..."
    assert detail.startswith(f"body.response must be a string (the generated text) (got {shown}). Send")


class HealingPool:
    """A pool that has lost its workers until its watchdog asks it to heal (`ScoringPool.ensure_running` replaces
    a broken pool, pool.py:142); started and closed by the app's lifespan."""

    def __init__(self) -> None:
        self.workers = 0
        self.events: list[str] = []
        self.restarts = self.rebuilds = 0

    def start(self) -> None:
        self.events.append("start")

    def close(self) -> None:
        self.events.append("close")

    def ensure_running(self) -> None:
        self.workers = 1

    def alive_workers(self) -> int:
        return self.workers


def test_a_pool_that_lost_its_workers_is_healed_without_traffic(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(RewardSettings(workers=1))
    pool = HealingPool()
    monkeypatch.setattr(app.state.service, "pool", pool)
    with caplog.at_level(logging.INFO, logger="reward_service"), TestClient(app) as service:
        assert pool.events == ["start"]
        assert any(r.getMessage().startswith("reward service ready: {") for r in caplog.records)
        assert eventually(lambda: service.get("/ready").status_code == 200, within_s=60)  # it looks every 0.5 s
    assert pool.events == ["start", "close"]


def test_the_watchdog_looks_at_the_pool_every_half_second_however_long_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool that lost its workers is healed at most half a second later: the watchdog's waits, taken from a fake
    sleep (no clock), are each 0.5 s, with one look at the pool after each."""
    waits: list[float] = []
    looks: list[int] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    class CountingPool:
        def ensure_running(self) -> None:
            looks.append(len(waits))
            if len(looks) == 3:
                raise asyncio.CancelledError  # the lifespan's cancel, after three looks

    monkeypatch.setattr(app_module.asyncio, "sleep", sleep)
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(app_module._watch_pool(CountingPool()))  # type: ignore[arg-type]
    assert (waits, looks) == ([0.5, 0.5, 0.5], [1, 2, 3])


def test_answers_up_to_the_queues_size_are_all_kept_for_retries() -> None:
    service = client(max_queue=2)
    for request_id in ("a", "b", "a", "b"):
        service.post("/score", json=one("$\\boxed{3}$", 3), headers={"X-Request-Id": request_id})
    assert counted(service, "scored") == 2.0  # both answers kept: 2 items fill the queue of 2, they do not pass it


def test_a_refusal_of_a_request_with_an_id_logs_no_error(caplog: pytest.LogCaptureFixture) -> None:
    service = client(max_queue=1)
    service.app.state.service.in_flight = 1  # type: ignore[attr-defined]
    with caplog.at_level(logging.ERROR):
        refused = service.post("/score", json=one("$\\boxed{3}$", 3), headers={"X-Request-Id": "r"})
    assert refused.status_code == 503
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.parametrize(
    ("route", "first", "second", "expected"),
    [
        pytest.param("/score", one("$\\boxed{3}$", 3), one("$\\boxed{4}$", 3), 0.0, id="other-response"),
        pytest.param("/score", one("$\\boxed{3}$", 3), one("$\\boxed{3}$", 4), 0.0, id="other-label"),
        pytest.param(
            "/score/batch",
            [one("$\\boxed{3}$", 3), one("$\\boxed{5}$", 5)],
            [one("$\\boxed{3}$", 3), one("$\\boxed{6}$", 5)],
            [1.0, 0.0],
            id="batch-of-the-same-size",
        ),
    ],
)
def test_a_reused_request_id_with_another_body_is_scored_anew_never_given_the_first_bodys_rewards(
    route: str, first: Any, second: Any, expected: Any
) -> None:
    """The id is bound to the body: a client that reuses one (or a colliding id generator) cannot get a wrong
    answer credited with the right one's 1.0."""
    service = client()
    service.post(route, json=first, headers={"X-Request-Id": "reused"})
    again = service.post(route, json=second, headers={"X-Request-Id": "reused"})
    assert again.status_code == 200 and again.json() == expected
    retry = service.post(route, json=second, headers={"X-Request-Id": "reused"})
    assert retry.json() == expected
    assert counted(service, "scored") == 2 * (2 if route.endswith("batch") else 1)  # the retry attached
