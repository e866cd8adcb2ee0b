"""Builders for the status tables: a spec from the base example with a patch, observations and jobs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.api.status import ConditionType, GRPORunStatus
from grpo_operator.cli.loading import parse_run
from grpo_operator.status.decision import Decision
from grpo_operator.status.lifecycle import decide
from grpo_operator.status.observation import (
    ClusterObservation,
    JobObservation,
    JobState,
    KueueEviction,
    Observation,
    TrainerMetrics,
)

from tests.support.builders import base, merge

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
READY = ClusterObservation(ready=True)
# Kueue suspended the admitted RayCluster for a workload of higher priority: its Workload's Evicted condition, as
# Kueue v0.17 writes it (pkg/scheduler/preemption: "Preempted to accommodate a workload ...").
PREEMPTED_BY_KUEUE = ClusterObservation(
    ready=False,
    message="waiting for Kueue",
    queue="team-a",
    eviction=KueueEviction(
        "raycluster-x-ray-5f2c1",
        "Preempted",
        "Preempted to accommodate a workload (UID: 4c1e) due to prioritization in the ClusterQueue",
    ),
)
SID = "grpo-x-1"


def spec(patch: dict[str, Any] | None = None) -> GRPORunSpec:
    run, problems = parse_run(merge(base(), {"spec": patch or {}}))
    assert run is not None, problems
    return run.spec


def job(state: JobState, message: str = "", submission_id: str = SID) -> JobObservation:
    return JobObservation(submission_id, state, message, driver_ip="10.0.0.5")


def healthy(rollout: int, repetition: float = 0.0, reward: float = 0.5) -> TrainerMetrics:
    return TrainerMetrics(rollout=rollout, raw_reward=reward, repetition_frac=repetition)


def observe(**kw: Any) -> Observation:
    kw.setdefault("now", T0)
    kw.setdefault("generation", 1)
    kw.setdefault("submission_id", SID)
    return Observation(**kw)


def run_through(s: GRPORunSpec, *observations: Observation, prev: GRPORunStatus | None = None) -> Decision:
    """Decide each observation in turn from the status the one before wrote."""
    decision: Decision | None = None
    for obs in observations:
        decision = decide(prev, obs, s)
        prev = decision.status
    assert decision is not None
    return decision


def cond(decision: Decision, type_: ConditionType) -> tuple[str, str]:
    c = next(c for c in decision.status.conditions if c.type == type_)
    return c.status, c.reason
