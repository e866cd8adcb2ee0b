"""The smallest `reward.remote.timeoutSeconds` the API accepts is enough to verify simple answers: the real service
with that REWARD_DEADLINE_S (the worker gives up after half of it) scores correct answers 1.0, through the client."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
from grpo_launcher import reward_client
from grpo_operator.api.spec import RemoteRewardSpec

from tests.support.reward_harness import run_server

pytestmark = pytest.mark.integration

SIMPLE = [  # (gold, answer): each needs math_verify in a worker (none is an integer the server judges itself)
    ("\\frac{1}{2}", "0.5"),
    ("\\sqrt{8}", "2\\sqrt{2}"),
    ("\\frac{\\pi}{4}", "\\pi/4"),
    ("x^2+2x+1", "(x+1)^2"),
]


def test_the_smallest_deadline_the_spec_accepts_verifies_simple_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    floor = RemoteRewardSpec.model_fields["timeout_seconds"].metadata[0].ge
    monkeypatch.setenv("GRPO_REWARD_DEADLINE_S", str(floor))
    with run_server(tmp_path, workers="1", deadline_s=str(floor)) as server:
        args = SimpleNamespace(rm_url=server.url + "/score")
        samples = [SimpleNamespace(prompt="p", response=f"so $\\boxed{{{a}}}$", label=g) for g, a in SIMPLE]

        async def rollout() -> list[object]:
            try:
                return [await reward_client.reward(args, s) for s in samples]
            finally:
                await reward_client.close()

        assert asyncio.run(rollout()) == [1.0] * len(SIMPLE)
        assert server.outcome("timeout") == 0
