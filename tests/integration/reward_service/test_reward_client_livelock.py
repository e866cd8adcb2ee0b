"""The reward client against the real reward service (uvicorn on 127.0.0.1) when the service answers later than
the client's per-attempt timeout: retries must not multiply the service's work (the service attaches a retry to the
work its request id already has), so every sample gets its reward within the budget."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from grpo_launcher import reward_client
from grpo_launcher.reward_client import RewardServiceFailed

from tests.support.reward_harness import eventually, run_server

pytestmark = pytest.mark.integration

SAMPLES = 40
WORK_OUTCOMES = ("scored", "no_answer", "timeout")  # each is an item a worker (or the inline path) scored


def slow_answer(n: int) -> SimpleNamespace:
    """Correct, distinct (never cached) and about a second of sympy: past a 0.5 s worker budget."""
    value = "1+\\frac{1}{" * 18 + str(n) + "}" * 18
    return SimpleNamespace(prompt="p", response="$\\boxed{" + value + "}$", label=value)


def test_forty_answers_retried_after_the_service_stalled_are_each_scored_once_and_every_sample_gets_its_reward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The service is frozen (SIGSTOP) until the client has timed an attempt out and retried, however fast this
    # machine scores; then it runs again and finds every first attempt and its retries in its backlog.
    monkeypatch.setattr(reward_client, "STATS", reward_client.Stats())
    monkeypatch.setenv("GRPO_REWARD_DEADLINE_S", "1")
    monkeypatch.setenv("GRPO_REWARD_RETRY_BUDGET_S", "300")
    monkeypatch.setenv("GRPO_FAILURE_FILE", str(tmp_path / "failure.json"))
    with run_server(tmp_path, workers="2", deadline_s="1") as server:
        args = SimpleNamespace(rm_url=server.url + "/score")

        def thaw_after_a_retry() -> None:
            try:
                eventually(lambda: reward_client.STATS.retries >= SAMPLES // 2, within_s=240)
            finally:
                os.kill(server.process.pid, signal.SIGCONT)

        async def rollout() -> list[object]:
            try:
                calls = (reward_client.reward(args, slow_answer(n)) for n in range(2, 2 + SAMPLES))
                return list(await asyncio.gather(*calls, return_exceptions=True))
            finally:
                await reward_client.close()

        os.kill(server.process.pid, signal.SIGSTOP)
        thaw = threading.Thread(target=thaw_after_a_retry)
        thaw.start()
        try:
            results = asyncio.run(rollout())
        finally:
            thaw.join()
        scored = sum(server.outcome(outcome) for outcome in WORK_OUTCOMES)

    failed = [r for r in results if isinstance(r, RewardServiceFailed)]
    assert [r for r in results if not isinstance(r, float | RewardServiceFailed)] == []
    assert failed == [], f"{len(failed)} of {SAMPLES} samples failed while the service was healthy: {failed[:1]}"
    assert reward_client.STATS.retries >= SAMPLES // 2  # the thaw waited for them: each is a second request
    assert scored <= 1.2 * SAMPLES, f"the service scored {scored:g} items for {SAMPLES} samples"
