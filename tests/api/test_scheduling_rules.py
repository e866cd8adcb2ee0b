"""The rules of spec.scheduling that `grpo validate` holds in Python as the API server holds them in CEL: a
toleration as Kubernetes takes it (a value only with Equal, an empty key only with Exists, tolerationSeconds
only with NoExecute, an int64), and the gang scheduler's queue (required with KAI, refused with
SchedulerPlugins, optional with Volcano). Each rule is met on both sides: what it refuses names the field and
the fix, and its neighbours pass."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.builders import base, check, merge


def _problems(scheduling: dict[str, Any]) -> list[str]:
    _, found = check(merge(base(), {"spec": {"scheduling": scheduling}}))
    return [str(p) for p in found if p.severity.name == "ERROR"]


def _toleration(**fields: Any) -> list[str]:
    return _problems({"tolerations": [fields]})


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"operator": "Exists"},  # an empty key with Exists tolerates every taint
        {"key": "dedicated", "operator": "Equal", "value": "grpo"},
        {"key": "spot", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2**63 - 1},
    ],
    ids=[
        "a key that exists",
        "an empty key tolerating every taint",
        "a key equal to a value",
        "NoExecute for the largest int64 seconds",
    ],
)
def test_a_toleration_kubernetes_takes_is_accepted(toleration: dict[str, Any]) -> None:
    assert _toleration(**toleration) == []


def test_a_value_with_exists_is_refused_naming_the_value_and_the_fix() -> None:
    [problem] = _toleration(key="dedicated", operator="Exists", value="grpo")
    assert "spec.scheduling.tolerations[0]" in problem, problem
    assert "value 'grpo' must be empty when `operator` is 'Exists'; remove value, or use operator Equal" in problem


def test_an_empty_key_with_equal_is_refused() -> None:
    [problem] = _toleration(operator="Equal", value="grpo")
    assert "operator must be Exists when `key` is empty" in problem, problem


def test_toleration_seconds_without_noexecute_is_refused() -> None:
    [problem] = _toleration(key="spot", operator="Exists", effect="NoSchedule", tolerationSeconds=30)
    assert "effect must be 'NoExecute' when `tolerationSeconds` is set" in problem, problem


def test_toleration_seconds_beyond_an_int64_is_refused() -> None:
    [problem] = _toleration(key="spot", operator="Exists", effect="NoExecute", tolerationSeconds=2**63)
    assert "beyond an int64" in problem, problem


@pytest.mark.parametrize(
    "gang",
    [
        {"scheduler": "Volcano"},
        {"scheduler": "Volcano", "queue": "research"},
        {"scheduler": "KAI", "queue": "research"},
        {"scheduler": "SchedulerPlugins"},
    ],
    ids=["Volcano without a queue", "Volcano with a queue", "KAI with its queue", "SchedulerPlugins without a queue"],
)
def test_a_gang_scheduler_with_the_queue_it_reads_is_accepted(gang: dict[str, Any]) -> None:
    assert _problems({"gang": gang}) == []


def test_kai_without_a_queue_is_refused() -> None:
    [problem] = _problems({"gang": {"scheduler": "KAI"}})
    assert "queue is required with scheduler KAI" in problem and "set queue to a KAI queue" in problem, problem


def test_scheduler_plugins_with_a_queue_is_refused_naming_the_queue() -> None:
    [problem] = _problems({"gang": {"scheduler": "SchedulerPlugins", "queue": "research"}})
    assert "queue 'research' must be unset with scheduler SchedulerPlugins" in problem, problem
