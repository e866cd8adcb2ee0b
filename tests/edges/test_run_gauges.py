"""The operator's per-run gauges: every condition and the phase reason of the run's last status, and not one
series of a run left once it is deleted (alerts built on them end with the run)."""

from __future__ import annotations

from datetime import UTC, datetime

from grpo_operator.api.status import Condition, ConditionType, GRPORunStatus, Phase, RunAccounting
from grpo_operator.edges import opmetrics
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families


def _samples(registry: CollectorRegistry) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, s.labels, s.value)
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        for s in f.samples
    ]


def test_a_runs_conditions_and_reason_are_gauges_and_all_its_series_go_when_it_is_forgotten() -> None:
    collector = opmetrics.RunCollector()
    registry = CollectorRegistry()
    registry.register(collector)
    now = datetime(2026, 12, 1, tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = GRPORunStatus(
        phase=Phase.FAILED,
        reason="DegenerateOutput",
        attempt=2,
        conditions=[
            Condition(type=ConditionType.HEALTHY, status="False", reason="DegenerateOutput", last_transition_time=now),
            Condition(
                type=ConditionType.METRICS_AVAILABLE, status="True", reason="RunSummary", last_transition_time=now
            ),
        ],
    )
    collector.update("ml", "r", status)
    collector.update("ml", "other", GRPORunStatus(phase=Phase.RUNNING, reason="Running"))
    samples = _samples(registry)
    assert (
        "grpo_run_condition",
        {"namespace": "ml", "name": "r", "type": "Healthy", "status": "False", "reason": "DegenerateOutput"},
        1.0,
    ) in samples
    assert (
        "grpo_run_status",
        {"namespace": "ml", "name": "r", "phase": "Failed", "reason": "DegenerateOutput"},
        1.0,
    ) in samples
    assert ("grpo_run_attempt", {"namespace": "ml", "name": "r"}, 2.0) in samples
    collector.forget("ml", "r")
    left = [s for s in _samples(registry) if s[1].get("name") == "r"]
    assert left == []
    assert any(s[1].get("name") == "other" for s in _samples(registry))


def test_a_runs_gpu_hours_lost_gpu_hours_goodput_and_time_to_first_rollout_are_gauges_gone_when_forgotten() -> None:
    collector = opmetrics.RunCollector()
    registry = CollectorRegistry()
    registry.register(collector)
    accounting = RunAccounting(
        updated_at="2026-12-01T00:00:00Z",
        gpu_seconds=56160,
        gpu_hours=15.6,
        lost_gpu_hours=5.4222,
        goodput=0.5584,
        time_to_first_rollout_seconds=1200,
    )
    collector.update("ml", "r", GRPORunStatus(phase=Phase.RUNNING, reason="Running", accounting=accounting))
    collector.update("ml", "new", GRPORunStatus(phase=Phase.PENDING, reason="Queued"))
    run = {"namespace": "ml", "name": "r"}
    samples = _samples(registry)
    assert {
        ("grpo_run_gpu_hours", 15.6),
        ("grpo_run_lost_gpu_hours", 5.4222),
        ("grpo_run_goodput", 0.5584),
        ("grpo_run_time_to_first_rollout_seconds", 1200.0),
    } == {
        (n, v)
        for n, labels, v in samples
        if labels == run and n.startswith(("grpo_run_gpu", "grpo_run_lost", "grpo_run_good", "grpo_run_time"))
    }
    assert not [s for s in samples if s[1].get("name") == "new" and s[0] == "grpo_run_goodput"]
    collector.forget("ml", "r")
    assert [s for s in _samples(registry) if s[1].get("name") == "r"] == []
