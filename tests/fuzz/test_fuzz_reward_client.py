"""Fuzz target: the reward client against a stub server whose answers hypothesis draws (status, body,
Retry-After, Content-Encoding). Whatever the server says, the client returns finite rewards, one per sample, or
raises `RewardServiceFailed`, and never waits past its budget."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from grpo_launcher import reward_client
from grpo_launcher.reward_client import RewardServiceFailed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.reward_stub import Answer, FakeClock, StubRewardServer, sample

BUDGET_S = 20.0

_bodies = st.one_of(
    st.binary(max_size=48),
    st.sampled_from([b"NaN", b"1e999", b"true", b'"0.5"', b"[0.5]", b"{}", b"0.5", b"1", b"[0.5, 1]", b"", b"null"]),
    st.recursive(
        st.one_of(st.floats(allow_nan=False), st.integers(), st.booleans(), st.none(), st.text(max_size=4)),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
        max_leaves=6,
    ).map(lambda value: json.dumps(value).encode()),
)
_retry_after = st.sampled_from(["", "0", "-1", "NaN", "inf", "1e999", "2", "soon", "Wed, 21 Oct 2015 07:28:00 GMT"])
_statuses = st.sampled_from([200, 204, 400, 404, 413, 422, 429, 500, 502, 503, 504])


@st.composite
def answers(draw: st.DrawFn) -> Answer:
    status, body, after = draw(_statuses), draw(_bodies), draw(_retry_after)
    encoding = draw(st.sampled_from(["", "gzip", "br"]))
    headers = {"Retry-After": after} if after else {}
    if encoding:
        headers["Content-Encoding"] = encoding  # the body is not compressed: a lying server

    async def answer(request: web.Request) -> web.StreamResponse:
        return web.Response(status=status, body=None if status == 204 else body, headers=headers)

    return answer


@pytest.fixture(autouse=True)
def budget(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GRPO_REWARD_RETRY_BUDGET_S", str(BUDGET_S))
    monkeypatch.setenv("GRPO_FAILURE_FILE", str(tmp_path / "failure.json"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(answers(), min_size=1, max_size=4), group=st.booleans())
def test_any_answer_ends_as_finite_rewards_or_reward_service_failed_within_the_budget(
    monkeypatch: pytest.MonkeyPatch, script: list[Answer], group: bool
) -> None:
    clock = FakeClock()
    with monkeypatch.context() as patch:
        clock.install(patch)
        samples: Any = [sample(), sample()] if group else sample()

        async def call() -> Any:
            async with StubRewardServer(script) as stub:
                return await reward_client.reward(stub.args, samples)

        try:
            result = asyncio.run(asyncio.wait_for(call(), 60))
        except RewardServiceFailed:
            result = None
    assert sum(clock.sleeps) <= BUDGET_S
    if result is not None:
        rewards = result if group else [result]
        assert len(rewards) == (2 if group else 1)
        assert all(type(r) is float and math.isfinite(r) for r in rewards)
