"""Our reward client (grpo_launcher.reward_client, miles's --custom-rm-path) against the real reward service on
127.0.0.1: what miles gets back under a full queue (503), an unreadable label (422), a hung service (timeout),
a restart mid-rollout, and a service that stays down. docs/reward-service.md "Reward client" tabulates these tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
from grpo_launcher import reward_client
from grpo_launcher.reward_client import RewardServiceFailed, reward

from tests.support import reward_harness
from tests.support.reward_harness import RewardServer, eventually, free_port, run_server

pytestmark = pytest.mark.integration

_distinct = iter(range(2, 1_000_000))


def sample(response: str, label: object) -> SimpleNamespace:
    # miles.utils.types.Sample: the client reads .prompt, .response and .label (rm_hub/__init__.py:19-24).
    return SimpleNamespace(prompt="p", response=response, label=label)


def slow_sample() -> SimpleNamespace:
    """Correct (reward 1.0) and costing 0.2-0.4 s of sympy; distinct, so never cached (as test_reward_server)."""
    n = next(_distinct)
    value = "1+\\frac{1}{" * 12 + str(n) + "}" * 12
    return sample("$\\boxed{" + value + "}$", value)


def args_for(server_url: str) -> SimpleNamespace:
    return SimpleNamespace(rm_url=server_url + "/score")  # what --rm-url carries


def run(coro_fn: Callable[[], Any]) -> Any:
    async def main() -> Any:
        try:
            return await coro_fn()
        finally:
            await reward_client.close()

    return asyncio.run(main())


@pytest.fixture(autouse=True)
def fresh_stats(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(reward_client, "STATS", reward_client.Stats())
    failure = tmp_path / "failure.json"
    monkeypatch.setenv("GRPO_FAILURE_FILE", str(failure))
    monkeypatch.delenv("GRPO_REWARD_RETRY_BUDGET_S", raising=False)
    monkeypatch.delenv("GRPO_REWARD_DEADLINE_S", raising=False)
    return failure


@contextlib.contextmanager
def server_on(port: int, tmp_path: Path, **settings: str) -> Iterator[RewardServer]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reward_harness, "free_port", lambda: port)
        with run_server(tmp_path, **settings) as server:
            mp.undo()
            yield server


def test_one_sample_and_a_group_get_the_services_rewards_over_one_session(tmp_path: Path) -> None:
    with run_server(tmp_path, workers="2") as server:
        args = args_for(server.url)

        async def rollout() -> tuple[Any, Any, int]:
            one = await reward(args, sample("so $\\boxed{42}$", 42))
            group = await reward(args, [sample(f"$\\boxed{{{i}}}$", 2) for i in range(4)])
            return one, group, len(reward_client._sessions)

        one, group, sessions = run(rollout)
        assert one == 1.0 and group == [0.0, 0.0, 1.0, 0.0]
        assert sessions == 1
        assert server.outcome("scored") >= 5  # 1 + 4 items


def test_a_full_queue_is_retried_after_retry_after_and_every_sample_gets_its_reward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []

    async def recorded_sleep(seconds: float) -> None:  # the client's wait, recorded and then really waited
        waits.append(seconds)
        await asyncio.sleep(seconds)

    monkeypatch.setattr(reward_client, "_sleep", recorded_sleep, raising=False)
    with run_server(tmp_path, workers="1", max_queue="2", retry_after_s="2", deadline_s="30") as server:
        args = args_for(server.url)
        samples = [slow_sample() for _ in range(8)]

        async def rollout() -> list[Any]:
            return list(await asyncio.gather(*(reward(args, s) for s in samples)))

        assert run(rollout) == [1.0] * 8
        assert server.outcome("overloaded") >= 1  # the service did answer 503s...
        assert reward_client.STATS.retries >= server.outcome("overloaded")  # ...and each was retried
        assert len(waits) == reward_client.STATS.retries  # ...after a wait...
        assert min(waits) >= 2.0  # ...never shorter than the Retry-After the service sent


def test_a_label_the_service_cannot_read_scores_zero_counted_and_the_rest_of_the_group_is_scored(
    tmp_path: Path,
) -> None:
    with run_server(tmp_path, workers="2") as server:
        args = args_for(server.url)
        group = [sample("$\\boxed{2}$", 2), sample("$\\boxed{1}$", "}"), sample("$\\boxed{3}$", 3)]
        assert run(lambda: reward(args, group)) == [1.0, 0.0, 1.0]
        assert run(lambda: reward(args, sample("$\\boxed{1}$", None))) == 0.0
        assert reward_client.STATS.unscorable == 2
        assert server.outcome("bad_label") >= 2


def test_a_hung_service_times_out_and_is_retried_until_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRPO_REWARD_DEADLINE_S", "0.5")  # per-request timeout 2 x 0.5 + 5 = 6 s
    with run_server(tmp_path, workers="1") as server:
        args = args_for(server.url)
        os.kill(server.process.pid, signal.SIGSTOP)  # the service hangs: accepts nothing, answers nothing
        result: list[Any] = []
        worker = threading.Thread(target=lambda: result.append(run(lambda: reward(args, sample("$\\boxed{7}$", 7)))))
        worker.start()
        try:
            assert eventually(lambda: reward_client.STATS.retries >= 1, within_s=60)  # a timeout was retried
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
        worker.join(120)
        assert result == [1.0]


def test_a_restart_mid_rollout_loses_no_sample(tmp_path: Path) -> None:
    port = free_port()
    samples = [slow_sample() for _ in range(16)]
    done: list[Any] = []
    results: list[Any] = []

    async def rollout(args: SimpleNamespace) -> list[Any]:
        async def one(s: SimpleNamespace) -> Any:
            value = await reward(args, s)
            done.append(value)
            return value

        return list(await asyncio.gather(*(one(s) for s in samples)))

    # What is asked here is that a restart loses no sample, not how slow a sample may be: a deadline well above a
    # sample's cost on a loaded machine (the default 2 s, 1 s in the worker, scored 0.0 three times under CI's load).
    deadline = {"workers": "1", "deadline_s": "60"}
    (tmp_path / "first").mkdir()
    with server_on(port, tmp_path / "first", **deadline) as first:
        args = args_for(first.url)
        worker = threading.Thread(target=lambda: results.append(run(lambda: rollout(args))))
        worker.start()
        assert eventually(lambda: len(done) >= 2, within_s=60)  # mid-rollout: some scored, most not
        # The pod is killed (OOM, node drain past its grace period): no graceful finish of what is in flight.
        for proc in [*first.descendants(), psutil.Process(first.process.pid)]:
            proc.kill()
        first.process.wait(30)
    assert len(done) < len(samples)
    (tmp_path / "second").mkdir()
    with server_on(port, tmp_path / "second", **deadline):
        worker.join(300)
    assert results == [[1.0] * 16]
    assert reward_client.STATS.retries >= 1


def test_a_service_that_stays_down_fails_the_run_with_reward_service_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_stats: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GRPO_REWARD_RETRY_BUDGET_S", "3")
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(RewardServiceFailed, match="no reward after"):
        run(lambda: reward(args_for(url), sample("$\\boxed{1}$", 1)))
    failure = json.loads(fresh_stats.read_text())
    assert failure["reason"] == "RewardServiceFailed"
    assert url in failure["message"] and "GRPO_REWARD_RETRY_BUDGET_S=3" in failure["message"]
    assert "\n" not in failure["message"]
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("GRPO_FAILURE ")]
    assert json.loads(line.removeprefix("GRPO_FAILURE ")) == failure


def test_the_rendered_custom_rm_path_loads_and_is_awaited_as_miles_does_it(tmp_path: Path) -> None:
    import importlib

    from grpo_operator.render.job import REWARD_CLIENT

    # miles/utils/misc.py:60-62 (load_function), then rm_hub/__init__.py:46-48: `await fn(args, sample)`.
    module_path, _, attr = REWARD_CLIENT.rpartition(".")
    fn = getattr(importlib.import_module(module_path), attr)
    with run_server(tmp_path, workers="1") as server:
        assert run(lambda: fn(args_for(server.url), sample("$\\boxed{5}$", 5))) == 1.0
