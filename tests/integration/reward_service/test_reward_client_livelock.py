"""The reward client against the real reward service (uvicorn on 127.0.0.1) when scoring is slower than the
client's per-attempt timeout: retries must not multiply the service's work (the service attaches a retry to the
work its request id already has), so every sample gets its reward within the budget."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
from grpo_launcher import reward_client
from grpo_launcher.reward_client import RewardServiceFailed

from tests.support.reward_harness import run_server

pytestmark = pytest.mark.integration

SAMPLES = 40
WORK_OUTCOMES = ("scored", "no_answer", "timeout")  # each is an item a worker (or the inline path) scored


def slow_answer(n: int) -> SimpleNamespace:
    """Correct, distinct (never cached) and about a second of sympy: past a 0.5 s worker budget."""
    value = "1+\\frac{1}{" * 18 + str(n) + "}" * 18
    return SimpleNamespace(prompt="p", response="$\\boxed{" + value + "}$", label=value)


def test_forty_slow_answers_on_two_workers_are_each_scored_once_and_every_sample_gets_its_reward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # REWARD_DEADLINE_S=1: each item gives up after 0.5 s, 40 items on 2 workers take about 10 s, longer than
    # the client's attempt (2 x 1 + 5 = 7 s), so the last samples time out and are retried.
    monkeypatch.setattr(reward_client, "STATS", reward_client.Stats())
    monkeypatch.setenv("GRPO_REWARD_DEADLINE_S", "1")
    monkeypatch.setenv("GRPO_REWARD_RETRY_BUDGET_S", "120")
    monkeypatch.setenv("GRPO_FAILURE_FILE", str(tmp_path / "failure.json"))
    with run_server(tmp_path, workers="2", deadline_s="1") as server:
        args = SimpleNamespace(rm_url=server.url + "/score")

        async def rollout() -> list[object]:
            try:
                calls = (reward_client.reward(args, slow_answer(n)) for n in range(2, 2 + SAMPLES))
                return list(await asyncio.gather(*calls, return_exceptions=True))
            finally:
                await reward_client.close()

        results = asyncio.run(rollout())
        scored = sum(server.outcome(outcome) for outcome in WORK_OUTCOMES)

    failed = [r for r in results if isinstance(r, RewardServiceFailed)]
    assert [r for r in results if not isinstance(r, float | RewardServiceFailed)] == []
    assert failed == [], f"{len(failed)} of {SAMPLES} samples failed while the service was healthy: {failed[:1]}"
    assert reward_client.STATS.retries >= 1  # the scenario did time attempts out (else it tests nothing)
    assert scored <= 1.2 * SAMPLES, f"the service scored {scored:g} items for {SAMPLES} samples"
