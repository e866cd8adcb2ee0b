"""The run's lifecycle: from the previous status and what was observed, the next status and the actions. Pure.

Phases: Pending -> Provisioning -> Running -> Succeeded | Failed, and Suspended. A terminal phase never
changes again. A Ray job that SUCCEEDED with degenerate metrics is not Succeeded. Conditions follow
metav1.Condition; a condition's lastTransitionTime moves only when its status changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from grpo_operator.api.spec import GRPORunSpec, GuardAction
from grpo_operator.api.status import TERMINAL_PHASES, Condition, GRPORunStatus, Phase, RunMetrics
from grpo_operator.status import guards
from grpo_operator.status.observation import JobState, Observation, TrainerMetrics, parse_rfc3339, rfc3339

PREFLIGHT_MARK = "preflight failed:"


@dataclass(frozen=True)
class Decision:
    status: GRPORunStatus
    apply_children: bool = False
    submit_job: bool = False
    stop_job: bool = False
    delete_cluster: bool = False
    request_checkpoint: bool = False
    warnings: list[str] = field(default_factory=list)


def _metrics(prev: GRPORunStatus | None, scraped: TrainerMetrics | None, now: datetime) -> RunMetrics | None:
    if scraped is None or scraped.rollout is None:
        return prev.metrics if prev else None
    return RunMetrics(
        rollout=scraped.rollout,
        raw_reward=scraped.raw_reward,
        repetition_frac=scraped.repetition_frac,
        truncated_ratio=scraped.truncated_ratio,
        step_time_seconds=scraped.step_time_seconds,
        updated_at=rfc3339(now),
    )


def _as_trainer(metrics: RunMetrics | None) -> TrainerMetrics | None:
    if metrics is None:
        return None
    return TrainerMetrics(metrics.rollout, metrics.raw_reward, metrics.repetition_frac, metrics.truncated_ratio,
                          metrics.step_time_seconds)  # fmt: skip


class _Conditions:
    """Builds the condition list, keeping lastTransitionTime when a condition's status is unchanged."""

    def __init__(self, prev: GRPORunStatus | None, generation: int, now: datetime) -> None:
        self._old = {c.type: c for c in (prev.conditions if prev else [])}
        self._new: dict[str, Condition] = {}
        self._generation, self._now = generation, now

    def set(self, type_: str, status: bool | None, reason: str, message: str = "") -> None:
        text: Literal["True", "False", "Unknown"] = "Unknown" if status is None else ("True" if status else "False")
        old = self._old.get(type_)
        since = old.last_transition_time if old is not None and old.status == text else rfc3339(self._now)
        self._new[type_] = Condition(type=type_, status=text, reason=reason, message=message[:32000],
                                     last_transition_time=since, observed_generation=self._generation)  # fmt: skip

    def all(self) -> list[Condition]:
        return list(self._new.values())


def _job_failure(message: str) -> tuple[str, str]:
    for line in reversed(message.splitlines()):
        if PREFLIGHT_MARK in line:
            return "PreflightFailed", line[line.index(PREFLIGHT_MARK):].strip()
    return "JobFailed", message.strip()[-2000:] or "the Ray job failed"


def _checkpoint_before_suspend(prev: GRPORunStatus | None, obs: Observation, spec: GRPORunSpec,
                               state: guards.GuardState, now: datetime) -> tuple[int | None, str, bool] | None:  # fmt: skip
    """While a suspended run waits for its checkpoint: (rollout when the sentinel existed, when it was asked for,
    whether to ask now); None when the job should stop now.

    miles checks the sentinel at the end of each rollout, after that rollout's metrics are out; a checkpoint
    is therefore surely written once the rollout after the next one reports.
    """
    job = obs.job
    if not spec.storage.checkpoint_on_suspend or job is None or job.state is not JobState.RUNNING:
        return None
    asked = prev.suspend_requested_time if prev is not None else None
    if asked is None:
        return None if state.last_rollout is None else (None, rfc3339(now), True)
    if (now - (parse_rfc3339(asked) or now)).total_seconds() > spec.guards.stall_timeout_seconds:
        return None
    sentinel = obs.checkpoint_job
    if sentinel is not None and sentinel in (JobState.FAILED, JobState.STOPPED):
        return None  # the sentinel could not be written: stop without a checkpoint
    requested = prev.suspend_requested_rollout if prev is not None else None
    if requested is None:
        requested = state.last_rollout if sentinel is JobState.SUCCEEDED else None
        return requested, asked, False
    if state.last_rollout is not None and state.last_rollout >= requested + 2:
        return None
    return requested, asked, False


def decide(prev: GRPORunStatus | None, obs: Observation, spec: GRPORunSpec | None) -> Decision:
    if prev is not None and prev.phase in TERMINAL_PHASES:
        # Terminal: nothing changes; a job we decided to stop is stopped until it is.
        return Decision(status=prev, stop_job=obs.job is not None and obs.job.state.active)
    now = obs.now
    conds = _Conditions(prev, obs.generation, now)
    # A resumed run starts a new job: what the suspended one was called is not carried over.
    carried = prev if prev is not None and prev.phase is not Phase.SUSPENDED else None
    base = {
        "observed_generation": obs.generation,
        "plan": obs.plan,
        "ray_cluster_name": prev.ray_cluster_name if prev else None,
        "job_submission_id": obs.job.submission_id if obs.job else (carried.job_submission_id if carried else None),
        "job_status": obs.job.state.value if obs.job else (carried.job_status if carried else None),
        "start_time": carried.start_time if carried else None,
    }

    def status(phase: Phase, reason: str, message: str, **extra: object) -> GRPORunStatus:
        values = {**base, "phase": phase, "reason": reason, "message": message, "conditions": conds.all(), **extra}
        if phase in TERMINAL_PHASES:
            values["completion_time"] = rfc3339(now)
        return GRPORunStatus.model_validate(values)

    if obs.problems or spec is None:
        text = "; ".join(obs.problems) or "the spec could not be read"
        conds.set("Validated", False, "InvalidSpec", text)
        return Decision(status=status(Phase.FAILED, "InvalidSpec", text), warnings=[text])
    conds.set("Validated", True, "Valid", "spec passed validation and fits")

    metrics = _metrics(prev, obs.metrics, now)
    total = spec.rollout.num_rollout
    progress = f"{metrics.rollout + 1 if metrics and metrics.rollout is not None else 0}/{total}"
    state = guards.GuardState(
        last_rollout=prev.metrics.rollout if prev and prev.metrics else None,
        streak=prev.repetition_streak or 0 if prev else 0,
        last_progress=parse_rfc3339(prev.last_progress_time) if prev else None,
    )
    state = guards.advance(state, spec.guards, obs.metrics, now)
    tracked = {
        "metrics": metrics,
        "progress": progress,
        "repetition_streak": state.streak,
        "last_progress_time": rfc3339(state.last_progress) if state.last_progress else None,
    }
    job = obs.job

    if obs.suspend:
        waiting = _checkpoint_before_suspend(prev, obs, spec, state, now)
        if waiting is not None:
            requested_rollout, requested_time, request = waiting
            conds.set("JobRunning", True, "Suspending", "waiting for the checkpoint before stopping")
            message = ("suspending: asking miles for a checkpoint" if requested_rollout is None else
                       f"suspending: miles saves a checkpoint after rollout {requested_rollout + 1}; the job stops then")  # fmt: skip
            return Decision(status=status(Phase.RUNNING, "Suspending", message, suspend_requested_rollout=requested_rollout,
                                          suspend_requested_time=requested_time, **tracked),
                            request_checkpoint=request)
        conds.set("ResourcesReady", None, "Suspended", "the RayCluster is deleted while suspended")
        conds.set("JobRunning", False, "Suspended", "stopped by spec.suspend")
        return Decision(status=status(Phase.SUSPENDED, "Suspended", "stopped by spec.suspend; set it to false to resume",
                                      **tracked),
                        stop_job=job is not None and job.state.active, delete_cluster=True)

    reward_ok = True
    if obs.reward_required:
        reward = obs.reward
        reward_ok = reward is not None and reward.ready
        if reward is None:
            conds.set("RewardServiceReady", False, "NotCreated", "the reward service is not created yet")
        else:
            conds.set("RewardServiceReady", reward.ready, reward.reason, reward.message)
    else:
        conds.set("RewardServiceReady", True, "NotRequired", "reward is computed inside miles")

    cluster_ok = obs.cluster is not None and obs.cluster.ready
    if cluster_ok and reward_ok:
        conds.set("ResourcesReady", True, "Ready", "the RayCluster is ready")
    else:
        detail = obs.cluster.message if obs.cluster else "creating the RayCluster"
        conds.set("ResourcesReady", False, "Provisioning", detail)

    if job is None:
        conds.set("JobRunning", False, "NotSubmitted", "waiting for resources")
        conds.set("Healthy", None, "NoMetrics", "no metrics yet")
        conds.set("Complete", False, "InProgress", "")
        if not (cluster_ok and reward_ok):
            phase = Phase.PENDING if obs.cluster is None else Phase.PROVISIONING
            message = "creating the RayCluster" if obs.cluster is None else (obs.cluster.message or "waiting for the RayCluster")
            if not reward_ok:
                message = f"{message}; reward service: {obs.reward.message if obs.reward else 'not created yet'}"
            return Decision(status=status(phase, "Provisioning", message, **tracked), apply_children=True)
        return Decision(status=status(Phase.PROVISIONING, "Submitting", "submitting the Ray job", **tracked),
                        apply_children=True, submit_job=True)  # fmt: skip

    # A job exists.
    running_since = parse_rfc3339(base["start_time"]) if isinstance(base["start_time"], str) else None
    if job.state is JobState.RUNNING and running_since is None:
        base["start_time"] = rfc3339(now)
        running_since = now
    trip = guards.degenerate(state, spec.guards, _as_trainer(metrics))
    if trip is None and job.state is JobState.RUNNING:
        trip = guards.stalled(state, spec.guards, running_since, now)
    if trip is not None:
        conds.set("Healthy", False, trip.reason, trip.message)
    elif metrics is not None:
        conds.set("Healthy", True, "MetricsHealthy", f"rollout {progress}")
    else:
        conds.set("Healthy", None, "NoMetrics", "no metrics scraped yet")

    if job.state is JobState.PENDING:
        conds.set("JobRunning", False, "Pending", job.message or "waiting for the driver to start")
        conds.set("Complete", False, "InProgress", "")
        return Decision(status=status(Phase.PROVISIONING, "WaitingForDriver", job.message or "job pending", **tracked))
    if job.state is JobState.RUNNING:
        conds.set("JobRunning", True, "Running", f"submission {job.submission_id}")
        conds.set("Complete", False, "InProgress", "")
        if trip is not None and spec.guards.action is GuardAction.STOP:
            conds.set("JobRunning", False, "Stopped", f"stopped by the operator: {trip.message}")
            conds.set("Complete", True, trip.reason, trip.message)
            return Decision(status=status(Phase.FAILED, trip.reason, trip.message, **tracked), stop_job=True,
                            warnings=[trip.message])  # fmt: skip
        warnings = [trip.message] if trip is not None else []
        return Decision(status=status(Phase.RUNNING, trip.reason if trip else "Running",
                                      trip.message if trip else f"rollout {progress}", **tracked), warnings=warnings)  # fmt: skip
    conds.set("JobRunning", False, job.state.value.capitalize(), job.message[-2000:])
    if job.state is JobState.SUCCEEDED:
        if trip is not None:
            conds.set("Complete", True, trip.reason, trip.message)
            message = f"the Ray job succeeded but the output is degenerate: {trip.message}"
            return Decision(status=status(Phase.FAILED, trip.reason, message, **tracked), warnings=[message])
        conds.set("Complete", True, "Succeeded", f"{progress} rollouts")
        return Decision(status=status(Phase.SUCCEEDED, "Succeeded", f"completed {progress} rollouts", **tracked))
    reason, message = ("JobStopped", "the Ray job was stopped outside the operator") if job.state is JobState.STOPPED \
        else _job_failure(job.message)  # fmt: skip
    conds.set("Complete", True, reason, message)
    return Decision(status=status(Phase.FAILED, reason, message, **tracked), warnings=[message])
