"""Rules of the reward service's scoring a user would see in their rewards: the verdict cache answers only for
the same gold label, the parse cache keeps no entry over an eighth of its budget (so one huge answer cannot
flush the others), and a batch that would push the queue past REWARD_MAX_QUEUE is refused as a whole."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from fastapi.testclient import TestClient
from reward_service.app import create_app
from reward_service.cache import ByteLRU
from reward_service.settings import Backend, Extraction, RewardSettings

from reward_service import worker


def test_a_cached_verdict_for_one_gold_label_is_not_reused_for_another() -> None:
    config = worker.WorkerConfig(Backend.MATH_VERIFY, Extraction.BOXED, 30, 64 << 20, "", 2048, 1)  # no reward model
    context = multiprocessing.get_context("spawn")  # the worker's alarm and SIGTERM setup stay out of pytest
    with ProcessPoolExecutor(1, context, initializer=worker.initialize, initargs=(config,)) as one_worker:
        answer = "so $\\boxed{0.5}$"
        half = one_worker.submit(worker.score, "\\frac{1}{2}", answer).result(timeout=300)
        third = one_worker.submit(worker.score, "\\frac{1}{3}", answer).result(timeout=300)
        half_again = one_worker.submit(worker.score, "\\frac{1}{2}", answer).result(timeout=300)
    assert (half.reward, third.reward, half_again.reward) == (1.0, 0.0, 1.0)


def test_an_entry_over_an_eighth_of_the_budget_is_computed_each_time_and_evicts_nothing() -> None:
    computed: list[str] = []

    def compute(key: str) -> str:
        computed.append(key)
        return key * (2_000 if key == "huge" else 1)

    cache: ByteLRU[str, str] = ByteLRU(compute, max_bytes=8 * 1_200)  # an eighth: 1,200 bytes
    small = [f"s{i}" for i in range(20)]
    for key in [*small, "huge", "huge", *small]:
        cache(key)
    assert computed.count("huge") == 2  # never kept: about 8 KB > 1,200 bytes
    assert computed.count("s0") == 1  # the small entries all stayed


def _post_batch(client: TestClient, count: int) -> Any:
    return client.post("/score/batch", json=[{"response": "$\\boxed{1}$", "label": 1}] * count)


def test_a_batch_that_would_push_the_queue_past_max_queue_is_refused_with_retry_after() -> None:
    app = create_app(RewardSettings(workers=1, max_queue=4, retry_after_s=2))
    client = TestClient(app)  # no lifespan: nothing may reach the (unstarted) pool
    app.state.service.in_flight = 3  # three items already being scored
    refused = _post_batch(client, 2)
    assert refused.status_code == 503 and refused.headers["retry-after"] == "2"
    assert "3 of 4 items in flight" in refused.json()["detail"]
    too_large = _post_batch(client, 5)
    assert too_large.status_code == 413 and "REWARD_MAX_QUEUE=4" in too_large.json()["detail"]
