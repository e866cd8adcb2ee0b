"""The reward client's limits, from the environment the operator renders (no service needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from grpo_launcher.reward_client import Policy, RewardServiceFailed, _retry_after_s


def test_the_per_request_timeout_follows_the_services_deadline_and_the_budget_is_bounded() -> None:
    policy = Policy.from_env({"GRPO_REWARD_DEADLINE_S": "10.0"})
    assert policy.timeout_s == 25.0  # 2 x the service's REWARD_DEADLINE_S + 5 s
    assert policy.budget_s == 600.0
    assert Policy.from_env({"GRPO_REWARD_RETRY_BUDGET_S": "30"}).budget_s == 30.0


def test_retry_after_in_seconds_or_as_an_http_date() -> None:
    assert _retry_after_s("3") == 3.0
    assert _retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past: retry now
    assert _retry_after_s("soon") is None and _retry_after_s(None) is None


def test_a_bad_budget_fails_with_the_failure_file_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRPO_FAILURE_FILE", str(tmp_path / "failure.json"))
    with pytest.raises(
        RewardServiceFailed, match="GRPO_REWARD_RETRY_BUDGET_S='-1' must be a finite number greater than 0"
    ):
        Policy.from_env({"GRPO_REWARD_RETRY_BUDGET_S": "-1"})
    assert json.loads((tmp_path / "failure.json").read_text())["reason"] == "RewardServiceFailed"


def test_without_the_operators_deadline_a_request_waits_65_seconds() -> None:
    assert Policy.from_env({}) == Policy(timeout_s=65.0, budget_s=600.0)  # 2 x the service's default 30 s + 5 s


@pytest.mark.parametrize("value", ["0", "0.0", "nan", "inf", "soon"])
def test_a_budget_of_zero_or_not_a_finite_number_fails_naming_the_variable(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRPO_FAILURE_FILE", str(tmp_path / "failure.json"))
    with pytest.raises(RewardServiceFailed, match=f"GRPO_REWARD_RETRY_BUDGET_S='{value}'"):
        Policy.from_env({"GRPO_REWARD_RETRY_BUDGET_S": value})
