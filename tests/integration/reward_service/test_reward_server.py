"""The reward service over HTTP: a real uvicorn server on 127.0.0.1 (python -m reward_service)."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import psutil
import pytest
from math_verify import parse, verify

from tests.support.reward_harness import RewardServer, eventually

pytestmark = pytest.mark.integration

COT = "Count the pairs. We have $\\binom{6}{2} = 15$ ways to choose two of six.\n"
HANGS = "Simplifying, the result is $\\boxed{9^{9^{9^{9}}}}$."  # runs for minutes without a deadline
_distinct = itertools.count(2)


def slow_but_fine() -> str:
    """A legitimate answer costing 0.2-0.4 s of sympy (a continued fraction; distinct, so never cached)."""
    return "$\\boxed{" + "1+\\frac{1}{" * 12 + str(next(_distinct)) + "}" * 12 + "}$"


def score(server: RewardServer, response: str, label: object = "42") -> httpx.Response:
    return server.score(response, label)


# --- the remote_rm contract --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "response", "reward"),
    [
        (42, "so $\\boxed{42}$", 1.0),
        (42, "so $\\boxed{41}$", 0.0),
        (3.0, "so $\\boxed{3}$", 1.0),
        (0.5, "so $\\boxed{\\frac{1}{2}}$", 1.0),
        (-7, "Answer: -7", 1.0),
        ("\\frac{3}{4}", "so $\\boxed{0.75}$", 1.0),
        ("15", COT + "so $\\boxed{15}$", 1.0),
    ],
)
def test_integer_float_and_string_labels_get_a_bare_number(
    shared_server: RewardServer, label: object, response: str, reward: float
) -> None:
    reply = score(shared_server, response, label)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == "application/json"
    assert reply.json() == reward
    assert isinstance(reply.json(), float)


def test_integer_answers_decided_in_the_server_match_the_workers_verdicts(
    shared_server: RewardServer,
    reward_server: Callable[..., contextlib.AbstractContextManager[RewardServer]],
) -> None:
    cases = [
        ("so $\\boxed{42}$", 42),
        ("so $\\boxed{41}$", 42),
        ("Answer: -7", -7),
        ("no answer", 3),
        ("$\\boxed{}$", 15),
        ("so $\\boxed{42.0}$", 42),
        ("so $\\boxed{007}$", 7),
    ]
    inline = [score(shared_server, response, label).json() for response, label in cases]
    with reward_server(workers="1", inline_max_chars="0") as pool_only:
        assert [score(pool_only, response, label).json() for response, label in cases] == inline
    assert inline == [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0]


def test_an_empty_final_box_scores_zero_where_math_verify_alone_would_rescue_it(
    shared_server: RewardServer,
) -> None:
    response = COT + "Therefore the answer is $\\boxed{}$."
    # the seed's scoring (math_verify on the whole response) falls back to the earlier "= 15"
    assert verify(
        parse("\\boxed{15}", parsing_timeout=None), parse(response, parsing_timeout=None), timeout_seconds=None
    )
    before = shared_server.outcome("no_answer")
    reply = score(shared_server, response, 15)
    assert reply.status_code == 200
    assert reply.json() == 0.0
    assert shared_server.outcome("no_answer") == before + 1


def test_a_response_without_a_final_answer_scores_zero(shared_server: RewardServer) -> None:
    assert score(shared_server, COT + "I think it is fifteen, as computed above.", 15).json() == 0.0


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ({"prompt": "p", "response": "x", "label": None}, "label is null"),
        ({"prompt": "p", "response": "x", "label": ""}, "label is empty"),
        ({"prompt": "p", "response": "x", "label": True}, "body.label must be a string, an integer"),
        ({"prompt": "p", "label": "1"}, "body.response is required"),
        ({"prompt": "p", "response": 5, "label": "1"}, "body.response must be a string"),
    ],
    ids=["a null label", "an empty label", "a boolean label", "no response", "a number for the response"],
)
def test_an_unusable_body_or_label_is_a_422_that_names_the_field(
    shared_server: RewardServer, body: dict[str, object], names: str
) -> None:
    reply = httpx.post(shared_server.url + "/score", json=body, timeout=30)
    assert reply.status_code == 422
    assert names in reply.json()["detail"]


def test_a_gold_label_math_verify_cannot_parse_is_a_counted_422(shared_server: RewardServer) -> None:
    before = shared_server.outcome("bad_label")
    reply = score(shared_server, "$\\boxed{1}$", "}")
    assert reply.status_code == 422, reply.text
    assert "cannot parse the gold label" in reply.json()["detail"]
    assert shared_server.outcome("bad_label") == before + 1


def test_a_batch_returns_rewards_in_order_and_names_a_bad_item(shared_server: RewardServer) -> None:
    items = [{"prompt": "p", "response": f"$\\boxed{{{i}}}$", "label": 2} for i in range(5)]
    reply = httpx.post(shared_server.url + "/score/batch", json=items, timeout=60)
    assert reply.status_code == 200
    assert reply.json() == [0.0, 0.0, 1.0, 0.0, 0.0]
    items[3]["label"] = None
    reply = httpx.post(shared_server.url + "/score/batch", json=items, timeout=60)
    assert reply.status_code == 422
    assert reply.json()["detail"].startswith("item 3: label is null")


def test_metrics_are_prometheus_text_with_every_outcome_and_the_pool(shared_server: RewardServer) -> None:
    metrics = shared_server.metrics()
    outcomes = {dict(labels).get("outcome") for name, labels in metrics if name == "reward_service_requests_total"}
    assert outcomes == {"scored", "no_answer", "timeout", "bad_label", "bad_request", "overloaded", "service_error"}
    assert metrics[("reward_service_pool_workers", ())] == 2
    assert ("reward_service_queue_depth", ()) in metrics
    assert ("reward_service_worker_restarts_total", ()) in metrics
    assert ("reward_service_request_duration_seconds_count", (("endpoint", "score"),)) in metrics


def test_ready_and_healthz_answer_200_on_a_healthy_service(shared_server: RewardServer) -> None:
    assert httpx.get(shared_server.url + "/healthz").status_code == 200
    ready = httpx.get(shared_server.url + "/ready")
    assert ready.status_code == 200
    assert ready.json()["workers"] == 2


# --- deadlines ---------------------------------------------------------------------------------------


def test_a_pathological_response_is_killed_at_the_deadline_scored_zero_and_its_worker_replaced(
    reward_server: Callable[..., contextlib.AbstractContextManager[RewardServer]],
) -> None:
    # no soft budget: only the hard deadline (kill and replace) can stop this item
    with reward_server(workers="1", deadline_s="1", soft_deadline_s="0") as server:
        (worker_before,) = server.worker_pids()
        reply = server.score(HANGS, timeout=60)  # without the deadline this runs for minutes
        assert reply.status_code == 200
        assert reply.json() == 0.0
        assert server.outcome("timeout") == 1
        assert eventually(lambda: server.metric("reward_service_worker_restarts_total") == 1)
        assert worker_before not in server.worker_pids()
        assert not psutil.pid_exists(worker_before) or psutil.Process(worker_before).status() == "zombie"
        assert server.score("$\\boxed{42}$").json() == 1.0  # the replacement scores normally
        assert len(server.worker_pids()) == 1
        assert "worker killed at the 1 s hard deadline" in server.log()


def test_the_worker_budget_stops_a_pathological_item_without_losing_the_worker(
    reward_server: Callable[..., contextlib.AbstractContextManager[RewardServer]],
) -> None:
    with reward_server(workers="1", deadline_s="5", soft_deadline_s="1") as server:
        pids = server.worker_pids()
        assert server.score(HANGS).json() == 0.0
        assert server.outcome("timeout") == 1
        assert server.worker_pids() == pids
        assert server.metric("reward_service_worker_restarts_total") == 0


def test_a_timeout_can_be_configured_to_return_503_instead_of_zero(
    reward_server: Callable[..., contextlib.AbstractContextManager[RewardServer]],
) -> None:
    with reward_server(workers="1", deadline_s="2", on_timeout="unavailable") as server:
        reply = server.score(HANGS)
        assert reply.status_code == 503
        assert "REWARD_ON_TIMEOUT=unavailable" in reply.json()["detail"]
        assert server.outcome("timeout") == 1


def test_liveness_answers_while_every_worker_is_stuck(
    reward_server: Callable[..., contextlib.AbstractContextManager[RewardServer]],
) -> None:
    with reward_server(workers="1", deadline_s="8", soft_deadline_s="0") as server, ThreadPoolExecutor(1) as pool:
        stuck = pool.submit(server.score, HANGS, "42", 90)
        assert eventually(lambda: server.metric("reward_service_queue_depth") == 1)
        assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200
        assert not stuck.done()  # the liveness answer did not wait for the stuck worker
        assert stuck.result().json() == 0.0


# --- overload and failures -----------------------------------------------------------------------------


def test_a_full_queue_answers_503_with_retry_after_and_counts_it(
    reward_server: Callable[..., contextlib.AbstractContextManager[RewardServer]],
) -> None:
    with (
        reward_server(workers="1", max_queue="2", retry_after_s="3", deadline_s="30") as server,
        ThreadPoolExecutor(8) as pool,
    ):
        replies = list(pool.map(lambda _: server.score(slow_but_fine(), "1"), range(8)))
        rejected = [r for r in replies if r.status_code == 503]
        assert rejected, [r.status_code for r in replies]
        assert all(r.headers["retry-after"] == "3" for r in rejected)
        assert all(r.status_code in (200, 503) for r in replies)
        assert server.outcome("overloaded") == len(rejected)
        reply = httpx.post(server.url + "/score/batch", json=[{"response": "x", "label": 1}] * 3, timeout=30)
        assert reply.status_code == 413
        assert "REWARD_MAX_QUEUE=2" in reply.json()["detail"]


def test_a_worker_that_dies_mid_item_is_a_503_and_never_a_reward(
    reward_server: Callable[..., contextlib.AbstractContextManager[RewardServer]],
) -> None:
    # seed review, batch 3: the seed turned every handler exception into HTTP 200 with reward 0.0
    with reward_server(workers="1", deadline_s="60", soft_deadline_s="0") as server, ThreadPoolExecutor(1) as pool:
        (worker,) = server.worker_pids()
        idle_cpu = psutil.Process(worker).cpu_times().user
        pending = pool.submit(server.score, HANGS, "42", 90)
        # the worker is inside the item once it burns CPU on it
        assert eventually(lambda: psutil.Process(worker).cpu_times().user > idle_cpu + 0.3, within_s=30)
        os.kill(worker, signal.SIGKILL)  # what the OOM killer does
        reply = pending.result()
        assert reply.status_code == 503
        assert "no reward was computed" in reply.json()["detail"]
        assert reply.json()["outcome"] == "service_error"
        assert "retry-after" in reply.headers
        assert server.outcome("service_error") == 1
        assert server.outcome("scored") == 0
        assert server.score("$\\boxed{42}$").json() == 1.0  # a replacement worker took over


def _kill_workers_until(server: RewardServer, stop: threading.Event) -> None:
    while not stop.is_set():
        for pid in server.worker_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        stop.wait(0.05)


def test_ready_flips_under_sustained_service_errors_and_recovers(
    reward_server: Callable[..., contextlib.AbstractContextManager[RewardServer]],
) -> None:
    settings = {
        "workers": "2",
        "deadline_s": "5",
        "ready_window_s": "6",
        "ready_min_requests": "5",
        "ready_max_error_ratio": "0.2",
    }
    with reward_server(**settings) as server:
        assert httpx.get(server.url + "/ready").status_code == 200
        stop = threading.Event()
        killer = threading.Thread(target=_kill_workers_until, args=(server, stop))
        killer.start()
        statuses = []
        try:
            with ThreadPoolExecutor(4) as pool:
                for _ in range(40):  # bounded: at most 40 rounds of 4 requests
                    statuses += [
                        r.status_code for r in pool.map(lambda _: server.score(slow_but_fine(), "1"), range(4))
                    ]
                    if "scoring is failing" in httpx.get(server.url + "/ready").text:
                        break
        finally:
            stop.set()
            killer.join()
        assert 503 in statuses, statuses
        assert all(status in (200, 503) for status in statuses)  # a failure is never a reward of 0
        # a broken pool is replaced without traffic; wait for its workers
        assert eventually(lambda: server.metric("reward_service_pool_workers") == 2)
        ready = httpx.get(server.url + "/ready")
        assert ready.status_code == 503
        assert "scoring is failing" in ready.json()["detail"]
        assert server.outcome("service_error") >= 1
        assert httpx.get(server.url + "/healthz").status_code == 200  # liveness is not readiness

        # the errors age out of the 6 s window
        assert eventually(lambda: httpx.get(server.url + "/ready").status_code == 200, within_s=30)
        assert server.score("$\\boxed{42}$").json() == 1.0
        assert len(server.worker_pids()) == 2
