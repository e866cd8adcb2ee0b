"""Settings: invalid values fail at start with one line naming the variable, the value and the rule."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from reward_service.health import HealthWindow, Outcome
from reward_service.settings import (
    Backend,
    SettingsError,
    cgroup_cpu_limit,
    load_settings,
    missing_reward_model_packages,
    unknown_variables,
)

from tests.support.reward_harness import REPO, free_port, service_env


def start_cli(**settings: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reward_service", "--host", "127.0.0.1", "--port", str(free_port())],
        cwd=REPO,
        env=service_env(**settings),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_unknown_backend_fails_at_start_naming_the_variable_value_and_allowed_values() -> None:
    result = start_cli(backend="math-verify")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "REWARD_BACKEND='math-verify'" in lines[0]
    assert "'math_verify' or 'reward_model'" in lines[0]
    assert "Traceback" not in result.stderr


def test_each_invalid_setting_gets_its_own_line() -> None:
    result = start_cli(workers="zero", on_timeout="sometimes", max_queue="-5")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 3, result.stderr
    assert any("REWARD_WORKERS='zero'" in line and "integer" in line for line in lines)
    assert any("REWARD_ON_TIMEOUT='sometimes'" in line and "'zero' or 'unavailable'" in line for line in lines)
    assert any("REWARD_MAX_QUEUE='-5'" in line and "greater than or equal to 1" in line for line in lines)


@pytest.mark.skipif(not missing_reward_model_packages(), reason="torch and transformers are installed here")
def test_the_reward_model_backend_without_its_extra_fails_at_start_with_the_install_command() -> None:
    result = start_cli(backend="reward_model")
    assert result.returncode == 2
    assert "pip install 'grpo-reward-service[reward-model]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_soft_deadline_must_be_below_the_hard_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REWARD_DEADLINE_S", "1")
    monkeypatch.setenv("REWARD_SOFT_DEADLINE_S", "2")
    rule = r"REWARD_SOFT_DEADLINE_S=2 must be smaller .* REWARD_DEADLINE_S=1"
    with pytest.raises(SettingsError, match=rule):
        load_settings()


def test_defaults_are_math_verify_with_a_two_second_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("REWARD_"):
            monkeypatch.delenv(name)
    settings = load_settings()
    assert settings.backend is Backend.MATH_VERIFY
    assert settings.hard_deadline_s == 2.0
    assert settings.worker_budget_s == 1.0


def test_service_link_variables_are_reported_as_unknown_not_fatal() -> None:
    env = {"REWARD_BACKEND": "math_verify", "REWARD_SERVICE_HOST": "10.0.0.1", "REWARD_BAKEND": "x"}
    assert unknown_variables(env) == ["REWARD_BAKEND", "REWARD_SERVICE_HOST"]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_readiness_fails_past_the_error_ratio_and_recovers_when_errors_age_out() -> None:
    clock = FakeClock()
    window = HealthWindow(window_s=10, min_requests=5, max_ratio=0.2, clock=clock)
    window.record(Outcome.SCORED)
    for _ in range(3):
        window.record(Outcome.SERVICE_ERROR)
    assert not window.failing()  # fewer than min_requests items
    window.record(Outcome.SERVICE_ERROR)
    assert window.failing()  # 4 of 5
    clock.now += 11
    assert not window.failing()
    for _ in range(9):
        window.record(Outcome.SCORED)
    window.record(Outcome.SERVICE_ERROR)
    assert not window.failing()  # 1 of 10 is under 0.2


def test_overload_and_bad_bodies_do_not_count_towards_readiness() -> None:
    window = HealthWindow(window_s=10, min_requests=1, max_ratio=0.1, clock=FakeClock())
    for _ in range(50):
        window.record(Outcome.OVERLOADED)
        window.record(Outcome.BAD_REQUEST)
    assert window.counts() == (0, 0)


def test_a_read_only_temp_dir_is_named_with_the_fix() -> None:
    from reward_service.__main__ import temp_dir_problem

    assert temp_dir_problem() is None
    problem = temp_dir_problem("/proc")  # not writable, even for root
    assert problem is not None
    assert "/proc" in problem
    assert "(an emptyDir) at /tmp" in problem


@pytest.mark.parametrize(
    ("files", "cpus"),
    [
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu.max": "250000 100000\n"}, 3),
        ({"cpu.max": "50000 100000"}, 1),
        ({"cpu/cpu.cfs_quota_us": "400000", "cpu/cpu.cfs_period_us": "100000"}, 4),
        ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),
        ({}, None),
    ],
    ids=[
        "cgroup v2 unlimited",
        "cgroup v2 2.5 CPUs",
        "cgroup v2 half a CPU",
        "cgroup v1 4 CPUs",
        "cgroup v1 unlimited",
        "no cgroup files",
    ],
)
def test_the_default_worker_count_follows_the_container_cpu_limit(
    tmp_path: Path, files: dict[str, str], cpus: int | None
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cgroup_cpu_limit(tmp_path) == cpus
