"""The reward service stays responsive while it judges a large batch itself: a 16 MB batch of newline-only
answers (each one a full scan of its lines on the inline path) must leave the event loop free for the probes."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from tests.support.reward_harness import eventually, run_server

pytestmark = pytest.mark.integration

ITEMS = 950
NEWLINES = 8000  # 16,000 bytes of JSON each: 15.2 MB in all, under the default REWARD_MAX_BODY_BYTES


def test_ready_is_answered_while_a_16_mb_batch_of_newline_only_answers_is_judged(tmp_path: Path) -> None:
    with run_server(tmp_path, workers="1", max_queue=str(ITEMS)) as server:
        batch = [{"prompt": "p", "response": "\n" * NEWLINES, "label": 1}] * ITEMS
        answers: list[httpx.Response] = []
        sender = threading.Thread(
            target=lambda: answers.append(httpx.post(server.url + "/score/batch", json=batch, timeout=600))
        )
        sender.start()
        try:

            def in_flight() -> float:
                try:
                    return server.metric("reward_service_queue_depth")
                except httpx.TimeoutException:  # a blocked loop answers no probe
                    return -1.0

            # The batch is admitted; on a blocked loop this cannot be seen until the batch has been judged.
            assert eventually(lambda: in_flight() == ITEMS or not sender.is_alive(), within_s=600)
            assert sender.is_alive(), "the batch was judged before the service answered a single probe"
            ready = httpx.get(server.url + "/ready", timeout=600)
            still = in_flight()
        finally:
            sender.join(600)
        assert ready.status_code == 200
        assert still == ITEMS, "/ready was answered only after the batch had been judged"
        assert answers and answers[0].status_code == 200 and answers[0].json() == [0.0] * ITEMS
