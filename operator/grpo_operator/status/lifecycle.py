"""The run's lifecycle: from the previous status and what was observed, the next status and the actions. Pure.

Phases: Pending -> Provisioning -> Running -> Succeeded | Failed, and Suspended. A terminal phase never
changes again (only `observedGeneration` and where the logs are kept move). `Succeeded` means verified: the
Ray job SUCCEEDED, the final rollout's metrics were observed (scraped, or in the launcher's end-of-run
summary) and they pass the guards; a success that cannot be verified is `Failed/Unverified`, never a plain
`Succeeded`. Each job is an attempt: a resume starts a new one with fresh guard state and stall clock.
Conditions follow metav1.Condition and persist across phases; a condition's lastTransitionTime moves only
when its status changes. `REASONS` lists every phase reason and condition this module can write; README's
status table is checked against it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from grpo_operator.api.spec import GRPORunSpec, GuardAction
from grpo_operator.api.status import (
    TERMINAL_PHASES,
    Condition,
    GRPORunStatus,
    Phase,
    RunLogs,
    RunMetrics,
    RunProvenance,
)
from grpo_operator.status import guards
from grpo_operator.status.observation import JobState, Observation, RunSummary, TrainerMetrics, parse_rfc3339, rfc3339

PREFLIGHT_MARK = "preflight failed:"
UNVERIFIED = "Unverified"
CONDITION_ORDER = (
    "Validated",
    "ResourcesReady",
    "RewardServiceReady",
    "JobRunning",
    "MetricsAvailable",
    "Healthy",
    "Complete",
)

# Phase reasons: what `status.reason` can be in each phase (a failure file's own reason is added to Failed).
REASONS: dict[Phase, tuple[str, ...]] = {
    Phase.PENDING: ("Provisioning", "Queued"),
    Phase.PROVISIONING: ("Provisioning", "Submitting", "WaitingForDriver"),
    Phase.RUNNING: ("Running", "Suspending", guards.DEGENERATE, guards.STALLED),
    Phase.SUSPENDED: ("Suspended", "Preempted"),
    Phase.SUCCEEDED: ("Succeeded",),
    Phase.FAILED: (
        "InvalidSpec",
        guards.DEGENERATE,
        guards.STALLED,
        UNVERIFIED,
        "PreflightFailed",
        "JobFailed",
        "JobStopped",
    ),
}
# Condition types and the reasons each can carry.
CONDITION_REASONS: dict[str, tuple[str, ...]] = {
    "Validated": ("Valid", "InvalidSpec"),
    "ResourcesReady": ("Ready", "Provisioning", "Suspended", "WaitingForAdmission"),
    "RewardServiceReady": ("NotRequired", "NotCreated", "NotReady", "ScoringErrors", "Ready"),
    "JobRunning": (
        "NotSubmitted",
        "Pending",
        "Running",
        "Suspending",
        "Suspended",
        "Preempted",
        "Stopped",
        "Succeeded",
        "Failed",
    ),
    "MetricsAvailable": (
        "NotRunning",
        "NotScraped",
        "Scraped",
        "NoRolloutYet",
        "ScrapeFailed",
        "ScrapeOutage",
        "RunSummary",
        "NoRunSummary",
    ),
    "Healthy": ("NoMetrics", "MetricsHealthy", guards.DEGENERATE, guards.STALLED),
    "Complete": (
        "InProgress",
        "Succeeded",
        UNVERIFIED,
        guards.DEGENERATE,
        guards.STALLED,
        "PreflightFailed",
        "JobFailed",
        "JobStopped",
    ),
}


@dataclass(frozen=True)
class Decision:
    status: GRPORunStatus
    apply_children: bool = False
    submit_job: bool = False
    stop_job: bool = False
    delete_cluster: bool = False
    request_checkpoint: bool = False
    warnings: list[str] = field(default_factory=list)


def _run_metrics(scraped: TrainerMetrics, now: datetime, source: Literal["Scrape", "RunSummary"]) -> RunMetrics:
    return RunMetrics(
        rollout=scraped.rollout,
        raw_reward=scraped.raw_reward,
        repetition_frac=scraped.repetition_frac,
        truncated_ratio=scraped.truncated_ratio,
        step_time_seconds=scraped.step_time_seconds,
        updated_at=rfc3339(now),
        source=source,
    )


def _as_trainer(metrics: RunMetrics | None) -> TrainerMetrics | None:
    if metrics is None:
        return None
    return TrainerMetrics(
        metrics.rollout, metrics.raw_reward, metrics.repetition_frac, metrics.truncated_ratio, metrics.step_time_seconds
    )


class _Conditions:
    """The condition list: every condition persists until set again; lastTransitionTime moves only when a
    condition's status changes."""

    def __init__(self, prev: GRPORunStatus | None, generation: int, now: datetime) -> None:
        self._old = {c.type: c for c in (prev.conditions if prev else [])}
        self._new: dict[str, Condition] = dict(self._old)
        self._generation, self._now = generation, now

    def get(self, type_: str) -> Condition | None:
        return self._old.get(type_)

    def set(self, type_: str, status: bool | None, reason: str, message: str = "") -> None:
        text: Literal["True", "False", "Unknown"] = "Unknown" if status is None else ("True" if status else "False")
        old = self._old.get(type_)
        since = old.last_transition_time if old is not None and old.status == text else rfc3339(self._now)
        self._new[type_] = Condition(
            type=type_,
            status=text,
            reason=reason,
            message=message[:32000],
            last_transition_time=since,
            observed_generation=self._generation,
        )

    def all(self) -> list[Condition]:
        rank = {t: i for i, t in enumerate(CONDITION_ORDER)}
        return sorted(self._new.values(), key=lambda c: (rank.get(c.type, len(rank)), c.type))


_EXIT = re.compile(r"exit code (-?\d+)")


def _last_line(message: str) -> str:
    """The last line of the job's output that says something: not the launcher's own bookkeeping."""
    for line in reversed(message.splitlines()):
        text = " ".join(line.split())
        if (
            text
            and "GRPO_RUN_SUMMARY" not in text
            and "last available logs" not in text
            and not text.startswith("[info] miles exited")
        ):
            return text[:500]
    return ""


def job_failure(message: str, summary: RunSummary | None, logs: RunLogs | None) -> tuple[str, str]:
    """The Failed reason and ONE line saying why: the failure file's reason when a component inside miles wrote
    one, the preflight's own line, else the exit code and the job's last line of output."""
    where = f" (log tail: ConfigMap {logs.config_map})" if logs is not None else ""
    if summary is not None and summary.failure is not None:
        return summary.failure.reason, f"{summary.failure.message}{where}"
    for line in reversed(message.splitlines()):
        if PREFLIGHT_MARK in line:
            return "PreflightFailed", line[line.index(PREFLIGHT_MARK) :].strip()
    found = _EXIT.search(message)
    code = (
        summary.exit_code
        if summary is not None and summary.exit_code is not None
        else (int(found.group(1)) if found else None)
    )
    head = f"the Ray job failed with exit code {code}" if code is not None else "the Ray job failed"
    last = _last_line(message)
    return "JobFailed", f"{head}: {last}{where}" if last else f"{head}{where}"


def _checkpoint_before_suspend(
    prev: GRPORunStatus | None, obs: Observation, spec: GRPORunSpec, state: guards.GuardState, now: datetime
) -> tuple[int | None, str, bool] | None:
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


def _provenance(prev: GRPORunStatus | None, obs: Observation) -> RunProvenance | None:
    old = prev.provenance if prev is not None else None
    facts = obs.summary.provenance if obs.summary is not None else {}
    values = old.model_dump() if old is not None else {}
    if obs.trainer_image:
        values["image"] = obs.trainer_image
    if obs.trainer_image_id:
        values["image_id"] = obs.trainer_image_id
    for key in ("miles_commit", "megatron_commit", "ray", "sglang", "megatron", "torch", "launcher"):
        if facts.get(key):
            values[key] = facts[key]
    return RunProvenance.model_validate(values) if any(v is not None for v in values.values()) else None


def new_attempt(status: GRPORunStatus, submission_id: str, state: JobState) -> GRPORunStatus:
    """The status once a new job (attempt) of the run exists: fresh guard state and stall clock."""
    return status.model_copy(
        update={
            "job_submission_id": submission_id,
            "job_status": state.value,
            "attempt": (status.attempt or 0) + 1,
            "attempt_start_time": None,
            "guard_rollout": None,
            "repetition_streak": 0,
            "last_progress_time": None,
            "suspend_requested_rollout": None,
            "suspend_requested_time": None,
        }
    )


def _waiting_for_admission(
    prev: GRPORunStatus | None,
    obs: Observation,
    queue: str,
    *,
    conds: _Conditions,
    status: Callable[..., GRPORunStatus],
    tracked: Mapping[str, object],
) -> Decision:
    """The RayCluster is suspended under a Kueue queue: not admitted yet (`Pending/Queued`), or suspended again
    by a preemption after its job ran (`Suspended/Preempted`). KubeRay v1.5.0 deletes every pod of a suspended
    cluster at once (ray-operator/controllers/ray/raycluster_controller.go:552-567), so a preempted job cannot
    save a checkpoint first: once Kueue admits the cluster again a new attempt starts and resumes, like a resume
    after spec.suspend, from the last checkpoint saved (storage.saveInterval)."""
    where = f"LocalQueue {queue}"
    conds.set("ResourcesReady", False, "WaitingForAdmission", f"waiting for Kueue to admit the RayCluster in {where}")
    conds.set("MetricsAvailable", None, "NotRunning", "the trainer is not running")
    if obs.reward_required:
        conds.set(
            "RewardServiceReady", False, "NotCreated", "the reward service is created once Kueue admits the RayCluster"
        )
    conds.set("Complete", False, "InProgress", "")
    ran = prev is not None and prev.job_submission_id is not None and prev.phase in (Phase.RUNNING, Phase.PROVISIONING)
    preempted = ran or (prev is not None and prev.phase is Phase.SUSPENDED and prev.reason == "Preempted")
    if preempted:
        message = (
            f"preempted by Kueue ({where}): KubeRay deleted the Ray pods; the run resumes from its last "
            "checkpoint once Kueue admits it again"
        )
        conds.set("JobRunning", False, "Preempted", message)
        return Decision(
            status=status(Phase.SUSPENDED, "Preempted", message, **tracked),
            stop_job=obs.job is not None and obs.job.state.active,
        )
    conds.set("JobRunning", False, "NotSubmitted", "waiting for admission")
    return Decision(
        status=status(
            Phase.PENDING,
            "Queued",
            f"waiting for Kueue to admit the RayCluster (all of its pods at once) in {where}",
            **tracked,
        )
    )


def decide(prev: GRPORunStatus | None, obs: Observation, spec: GRPORunSpec | None) -> Decision:
    if prev is not None and prev.phase in TERMINAL_PHASES:
        # Terminal: nothing changes but the generation processed and where the logs are; a job we decided to
        # stop is stopped until it is.
        update: dict[str, object] = {"observed_generation": obs.generation}
        if obs.logs is not None:
            update["logs"] = obs.logs
        return Decision(status=prev.model_copy(update=update), stop_job=obs.job is not None and obs.job.state.active)
    now = obs.now
    conds = _Conditions(prev, obs.generation, now)
    # A resumed run starts a new job: what the suspended one was called is not carried over.
    carried = prev if prev is not None and prev.phase is not Phase.SUSPENDED else None
    job = obs.job
    base = {
        "observed_generation": obs.generation,
        "plan": obs.plan,
        "ray_cluster_name": prev.ray_cluster_name if prev else None,
        "job_submission_id": carried.job_submission_id if carried else None,
        "job_status": carried.job_status if carried else None,
        "start_time": prev.start_time if prev else None,
        "attempt": prev.attempt if prev else None,
        "attempt_start_time": carried.attempt_start_time if carried else None,
        "provenance": _provenance(prev, obs),
        "logs": obs.logs or (prev.logs if prev else None),
    }
    fresh = job is not None and job.submission_id != base["job_submission_id"]
    if fresh and job is not None:  # a job this status has not seen yet: a new attempt (resume, or a lost write)
        base.update(
            job_submission_id=job.submission_id, attempt=(prev.attempt or 0) + 1 if prev else 1, attempt_start_time=None
        )
    if job is not None:
        base["job_status"] = job.state.value
    same_attempt = carried is not None and not fresh

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

    # Metrics: the end-of-run summary when the job has ended and left one, else the scrape, else the last seen.
    ended = job is not None and not job.state.active
    summary = obs.summary if ended else None
    metrics = prev.metrics if prev else None
    state = guards.GuardState(
        last_rollout=prev.guard_rollout if prev and same_attempt else None,
        streak=(prev.repetition_streak or 0) if prev and same_attempt else 0,
        last_progress=parse_rfc3339(prev.last_progress_time) if prev and same_attempt else None,
    )
    if summary is not None and summary.last is not None:
        metrics = _run_metrics(summary.last, now, "RunSummary")
        for seen in summary.rollouts:  # the rollouts no scrape caught count too, each once
            if state.last_rollout is None or (seen.rollout is not None and seen.rollout > state.last_rollout):
                state = guards.advance(state, spec.guards, seen, now)
    elif obs.metrics is not None and obs.metrics.rollout is not None:
        metrics = _run_metrics(obs.metrics, now, "Scrape")
        state = guards.advance(state, spec.guards, obs.metrics, now)
    total = spec.rollout.num_rollout
    done = metrics.rollout + 1 if metrics and metrics.rollout is not None else 0
    progress = f"{done}/{total}"
    tracked = {
        "metrics": metrics,
        "progress": progress,
        "guard_rollout": state.last_rollout,
        "repetition_streak": state.streak,
        "last_progress_time": rfc3339(state.last_progress) if state.last_progress else None,
    }
    warnings: list[str] = []

    # MetricsAvailable: can the trainer's numbers be read at all (a failing scrape is not a stall).
    available = False
    if job is None or job.state is JobState.PENDING:
        conds.set("MetricsAvailable", None, "NotRunning", "the trainer is not running")
    elif job.state is JobState.RUNNING:
        if obs.metrics is not None:
            available = True
            if obs.metrics.rollout is None:
                conds.set(
                    "MetricsAvailable",
                    True,
                    "NoRolloutYet",
                    "the trainer's metrics endpoint answers; miles serves gauges only after its first rollout",
                )
            else:
                conds.set("MetricsAvailable", True, "Scraped", f"rollout {obs.metrics.rollout} scraped")
        elif obs.metrics_error is not None:
            old = conds.get("MetricsAvailable")
            since = parse_rfc3339(old.last_transition_time) if old is not None and old.status == "False" else now
            outage = (now - (since or now)).total_seconds()
            if outage > spec.guards.stall_timeout_seconds:
                text = (
                    f"the trainer's metrics could not be read for {int(outage)} s: {obs.metrics_error}; "
                    "progress and the stall guard are blind until they come back"
                )
                if old is None or old.reason != "ScrapeOutage":
                    warnings.append(text)
                conds.set("MetricsAvailable", False, "ScrapeOutage", text)
            else:
                conds.set("MetricsAvailable", False, "ScrapeFailed", obs.metrics_error)
        else:
            conds.set("MetricsAvailable", None, "NotScraped", "waiting for the driver's node address")
    elif summary is not None:
        available = True
        conds.set(
            "MetricsAvailable",
            True,
            "RunSummary",
            f"end-of-run summary read from the job log: last rollout {summary.last_rollout}",
        )
    else:
        conds.set("MetricsAvailable", False, "NoRunSummary", "the job ended without an end-of-run summary in its log")

    if obs.suspend:
        waiting = _checkpoint_before_suspend(prev, obs, spec, state, now)
        if waiting is not None:
            requested_rollout, requested_time, request = waiting
            conds.set("JobRunning", True, "Suspending", "waiting for the checkpoint before stopping")
            message = (
                "suspending: asking miles for a checkpoint"
                if requested_rollout is None
                else f"suspending: miles saves a checkpoint after rollout {requested_rollout + 1}; the job stops then"
            )
            return Decision(
                status=status(
                    Phase.RUNNING,
                    "Suspending",
                    message,
                    suspend_requested_rollout=requested_rollout,
                    suspend_requested_time=requested_time,
                    **tracked,
                ),
                request_checkpoint=request,
            )
        conds.set("ResourcesReady", None, "Suspended", "the RayCluster is deleted while suspended")
        conds.set("JobRunning", False, "Suspended", "stopped by spec.suspend")
        conds.set("MetricsAvailable", None, "NotRunning", "the trainer is not running")
        return Decision(
            status=status(
                Phase.SUSPENDED, "Suspended", "stopped by spec.suspend; set it to false to resume", **tracked
            ),
            stop_job=job is not None and job.state.active,
            delete_cluster=True,
        )

    if obs.cluster is not None and obs.cluster.queue is not None:
        return _waiting_for_admission(prev, obs, obs.cluster.queue, conds=conds, status=status, tracked=tracked)

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
    elif not ended:
        detail = obs.cluster.message if obs.cluster else "creating the RayCluster"
        conds.set("ResourcesReady", False, "Provisioning", detail)

    if job is None:
        conds.set("JobRunning", False, "NotSubmitted", "waiting for resources")
        if metrics is None:
            conds.set("Healthy", None, "NoMetrics", "no metrics yet")
        conds.set("Complete", False, "InProgress", "")
        if not (cluster_ok and reward_ok):
            phase = Phase.PENDING if obs.cluster is None else Phase.PROVISIONING
            message = (
                "creating the RayCluster"
                if obs.cluster is None
                else (obs.cluster.message or "waiting for the RayCluster")
            )
            if not reward_ok:
                message = f"{message}; reward service: {obs.reward.message if obs.reward else 'not created yet'}"
            return Decision(status=status(phase, "Provisioning", message, **tracked), apply_children=True)
        return Decision(
            status=status(Phase.PROVISIONING, "Submitting", "submitting the Ray job", **tracked),
            apply_children=True,
            submit_job=True,
        )

    # A job exists.
    if job.state is JobState.RUNNING:
        if base["start_time"] is None:
            base["start_time"] = rfc3339(now)
        if base["attempt_start_time"] is None:
            base["attempt_start_time"] = rfc3339(now)
    attempt_since = parse_rfc3339(base["attempt_start_time"]) if isinstance(base["attempt_start_time"], str) else None
    trip = guards.degenerate(state, spec.guards, _as_trainer(metrics))
    if trip is None and job.state is JobState.RUNNING:
        trip = guards.stalled(state, spec.guards, attempt_since, now, available)
    if trip is not None:
        conds.set("Healthy", False, trip.reason, trip.message)
    elif metrics is not None and (available or not ended):
        conds.set("Healthy", True, "MetricsHealthy", f"rollout {progress}")
    elif metrics is None:
        conds.set("Healthy", None, "NoMetrics", "no metrics observed yet")

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
            return Decision(
                status=status(Phase.FAILED, trip.reason, trip.message, **tracked),
                stop_job=True,
                warnings=[*warnings, trip.message],
            )
        if trip is not None:
            warnings.append(trip.message)
        if obs.cluster is not None and not obs.cluster.ready:
            # A lost worker: KubeRay v1.5.0 keeps `state: ready` and RayClusterProvisioned=True and only lowers
            # readyWorkerReplicas (edges/childstate.cluster_ready counts it); the job runs short of its GPUs.
            return Decision(
                status=status(Phase.PROVISIONING, "Provisioning", obs.cluster.message, **tracked), warnings=warnings
            )
        return Decision(
            status=status(
                Phase.RUNNING,
                trip.reason if trip else "Running",
                trip.message if trip else f"rollout {progress}",
                **tracked,
            ),
            warnings=warnings,
        )
    conds.set("JobRunning", False, job.state.value.capitalize(), _last_line(job.message))
    if job.state is JobState.SUCCEEDED:
        if trip is not None:
            conds.set("Complete", True, trip.reason, trip.message)
            message = f"the Ray job succeeded but the output is degenerate: {trip.message}"
            return Decision(status=status(Phase.FAILED, trip.reason, message, **tracked), warnings=[*warnings, message])
        final = metrics is not None and metrics.rollout == total - 1
        if not final:
            last = (
                f"the last rollout observed is {progress}"
                if metrics is not None
                else "no rollout metrics were observed"
            )
            how = "" if summary is not None else " and its log has no end-of-run summary"
            message = f"the Ray job succeeded but the end cannot be verified: {last}{how}"
            conds.set("Complete", True, UNVERIFIED, message)
            return Decision(status=status(Phase.FAILED, UNVERIFIED, message, **tracked), warnings=[*warnings, message])
        conds.set("Complete", True, "Succeeded", f"{progress} rollouts")
        return Decision(
            status=status(Phase.SUCCEEDED, "Succeeded", f"completed {progress} rollouts", **tracked), warnings=warnings
        )
    if job.state is JobState.STOPPED:
        reason, message = "JobStopped", "the Ray job was stopped outside the operator"
    else:
        reason, message = job_failure(job.message, summary, obs.logs)
    conds.set("Complete", True, reason, message)
    return Decision(status=status(Phase.FAILED, reason, message, **tracked), warnings=[*warnings, message])
