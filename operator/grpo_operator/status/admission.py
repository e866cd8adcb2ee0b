"""Before the job runs: the spec's verdict, Kueue's admission (`Pending/Queued`, or `Suspended` with Kueue's own
eviction reason when Kueue suspends the admitted RayCluster again), the RayCluster and reward service getting ready,
the submission, and the driver waiting to start. On an eviction KubeRay deletes every Ray pod at once, head
included; their preStop hooks ask miles for a checkpoint and wait for it within the pods' grace
(docs/integrations/kuberay.md), so the job is not stopped while those pods are still there with grace left: a stop
would end miles before its save. Once readmitted, a new attempt resumes from that checkpoint."""

from __future__ import annotations

from datetime import datetime, timedelta

from grpo_operator.api.status import (
    KUEUE_EVICTIONS,
    TERMINAL_PHASES,
    ConditionType,
    GRPORunStatus,
    GuardMemory,
    Phase,
    Reason,
)
from grpo_operator.status import attempts, recovery
from grpo_operator.status.conditions import Conditions
from grpo_operator.status.decision import WARNING, Decision, Draft, Event, StopJob, Submit
from grpo_operator.status.intent import NoPlan
from grpo_operator.status.observation import KueueEviction, Seen, rfc3339

C, R = ConditionType, Reason


def invalid(prev: GRPORunStatus | None, why: NoPlan, conds: Conditions, now: datetime) -> Decision:
    """The spec cannot run: Failed/InvalidSpec in the validator's (or the API server's) words."""
    text = "; ".join(why.problems) or "the spec could not be read"
    conds.set(C.VALIDATED, False, R.INVALID_SPEC, text)
    keep = prev.model_dump(include={"start_time", "attempt", "ray_cluster_name", "job_submission_id"}) if prev else {}
    status = GRPORunStatus.model_validate(
        {
            **keep,
            "observed_generation": why.generation,
            "phase": Phase.FAILED,
            "reason": R.INVALID_SPEC,
            "message": text,
            "conditions": conds.all(),
            "completion_time": rfc3339(now),
            "logs": prev.logs if prev else None,
        }
    )
    return Decision(status, (), (Event("Warning", WARNING, text),))


def started(prev: GRPORunStatus | None) -> bool:
    """The run has started an attempt and not ended: an edit now must not end it (lifecycle._edit_refused)."""
    return prev is not None and bool(prev.attempt) and prev.phase not in (None, Phase.PENDING, *TERMINAL_PHASES)


def runtime_missing(why: NoPlan, conds: Conditions) -> Decision:
    """The GRPORuntime a run not yet started names does not exist: Pending/RuntimeNotFound until it is created."""
    text = why.runtime_missing or "the run's GRPORuntime does not exist"
    status = GRPORunStatus.model_validate(
        {
            "observed_generation": why.generation,
            "phase": Phase.PENDING,
            "reason": R.RUNTIME_NOT_FOUND,
            "message": text,
            "conditions": conds.all(),
        }
    )
    return Decision(status)


def api_unavailable(prev: GRPORunStatus | None, why: NoPlan, conds: Conditions) -> Decision:
    """The API server could not answer the dry run of a child (5xx, 429): nothing is applied, submitted or stopped.
    A run without a phase yet is Pending/APIServerUnavailable; any other keeps its phase and reason. The message
    names the child and the server's words until a later reconcile gets an answer."""
    text = why.api_unavailable or "the API server could not answer the dry run of the run's children"
    if prev is not None and prev.phase is not None:
        return Decision(prev.model_copy(update={"message": text}))
    status = GRPORunStatus.model_validate(
        {
            "observed_generation": why.generation,
            "phase": Phase.PENDING,
            "reason": R.API_SERVER_UNAVAILABLE,
            "message": text,
            "conditions": conds.all(),
        }
    )
    return Decision(status)


def runtime_held(prev: GRPORunStatus, why: NoPlan, conds: Conditions) -> Decision:
    """status.runtime failed its digest and the live GRPORuntime to check the run against does not exist: nothing
    is planned, applied or stopped; the phase stays (a running job runs on), Validated and the message say why."""
    text = why.runtime_missing or "status.runtime was altered and the run's GRPORuntime does not exist"
    conds.set(C.VALIDATED, False, R.RUNTIME_ALTERED, text)
    update = {"observed_generation": why.generation, "message": text, "conditions": conds.all()}
    return Decision(prev.model_copy(update=update))


def altered_runtime_events(prev: GRPORunStatus | None, altered: str | None, *, held: bool) -> tuple[Event, ...]:
    """The Warning event of a status.runtime that failed its digest (`altered`): each time it is replaced by the
    live GRPORuntime, and once when the run is first `held` for want of one (not again at every reconcile it stays
    held)."""
    if altered is None:
        return ()
    validated = next((c for c in prev.conditions if c.type is C.VALIDATED), None) if prev is not None else None
    if held and validated is not None and validated.reason == R.RUNTIME_ALTERED:
        return ()
    return (Event("Warning", R.RUNTIME_ALTERED, altered),)


def _preempted(draft: Draft) -> bool:
    """A job of this run ran or was submitted before the RayCluster was suspended for admission again."""
    prev, job = draft.prev, draft.seen.job
    if job is not None and job.state.active:
        return True
    if prev is None:
        return False
    submitted = prev.job_submission_id is not None and prev.phase in (Phase.RUNNING, Phase.PROVISIONING)
    return submitted or (prev.phase is Phase.SUSPENDED and prev.reason in KUEUE_EVICTIONS)


# Kueue's reasons on a Workload's Evicted condition (sigs.k8s.io/kueue v0.17.0 apis/kueue/v1beta2/
# workload_types.go:1010-1044; a deactivation's may carry a cause, `DeactivatedDueTo<cause>`, workload.go:1373-1380):
# the run's reason, what happened, and what brings it back.
_READMITTED = "the run resumes from its last checkpoint once Kueue admits it again"
EVICTIONS: dict[str, tuple[Reason, str, str]] = {
    "Preempted": (R.PREEMPTED, "preempted by Kueue for a workload of higher priority", _READMITTED),
    "PodsReadyTimeout": (
        R.PODS_READY_TIMEOUT,
        "evicted by Kueue: its pods were not all ready within waitForPodsReady's timeout",
        "Kueue requeues it after its backoff; " + _READMITTED,
    ),
    "ClusterQueueStopped": (
        R.QUEUE_STOPPED,
        "evicted by Kueue: its ClusterQueue was stopped (stopPolicy)",
        "it resumes from its last checkpoint once the ClusterQueue is started again and Kueue admits it",
    ),
    "LocalQueueStopped": (
        R.QUEUE_STOPPED,
        "evicted by Kueue: its LocalQueue was stopped (stopPolicy)",
        "it resumes from its last checkpoint once the LocalQueue is started again and Kueue admits it",
    ),
    "Deactivated": (
        R.DEACTIVATED,
        "deactivated in Kueue (its Workload's spec.active is false)",
        "it stays suspended until the Workload is reactivated (spec.active: true); then it resumes from its last "
        "checkpoint once Kueue admits it",
    ),
}


def eviction(found: KueueEviction | None, queue: str) -> tuple[Reason, str]:
    """The run's reason and message for Kueue's suspension of its admitted RayCluster, in Kueue's own terms."""
    where = f"LocalQueue {queue}"
    if found is None:
        return R.EVICTED, (
            f"suspended again under {where}: no Kueue Workload of the RayCluster says why; {_READMITTED}"
        )
    key = "Deactivated" if found.reason.startswith("Deactivated") else found.reason
    reason, what, after = EVICTIONS.get(key, (R.EVICTED, f"evicted by Kueue ({found.reason})", _READMITTED))
    said = f": {found.message}" if found.message else ""
    return reason, f"{what} ({where}, Workload {found.workload}, {found.reason}{said}); {after}"


def save_pending(seen: Seen, now: datetime) -> bool:
    """The run's GPU pods are still there and their grace has not run out: their preStop hooks may be saving (or
    KubeRay has not deleted them yet). A job stopped now ends miles before its save."""
    gpus = seen.gpus
    if gpus is None or gpus.gpus == 0:
        return False
    if gpus.stopped_at is None or gpus.grace_seconds is None:
        return True
    return now < gpus.stopped_at + timedelta(seconds=gpus.grace_seconds)


def waiting_for_admission(draft: Draft, queue: str) -> Decision:
    """The RayCluster is suspended under a Kueue queue: not admitted yet, or evicted after it was."""
    conds, seen = draft.conds, draft.seen
    where = f"LocalQueue {queue}"
    conds.set(
        C.RESOURCES_READY, False, R.WAITING_FOR_ADMISSION, f"waiting for Kueue to admit the RayCluster in {where}"
    )
    conds.set(C.METRICS_AVAILABLE, None, R.NOT_RUNNING, "the trainer is not running")
    if draft.intent.reward_required:
        created_later = "the reward service is created once Kueue admits the RayCluster"
        conds.set(C.REWARD_SERVICE_READY, False, R.NOT_CREATED, created_later)
    conds.set(C.COMPLETE, False, R.IN_PROGRESS, "")
    if _preempted(draft):
        reason, message = eviction(seen.cluster.eviction if seen.cluster is not None else None, queue)
        # The evicted attempt's job: seen under the submission id this reconcile tracks on the eviction's first
        # reconcile, by the attempt's own id on the later ones (the next attempt's id is the tracked one by then).
        job, saving = seen.job or seen.evicted_job, save_pending(seen, draft.now)
        if saving:
            message = f"{message}; the Ray pods save a checkpoint before they go"
        conds.set(C.JOB_RUNNING, False, reason, message)
        stop = (StopJob(job.submission_id),) if job is not None and job.state.active and not saving else ()
        return draft.decide(Phase.SUSPENDED, reason, message, stop)
    conds.set(C.JOB_RUNNING, False, R.NOT_SUBMITTED, "waiting for admission")
    message = f"waiting for Kueue to admit the RayCluster (all of its pods at once) in {where}"
    return draft.decide(Phase.PENDING, R.QUEUED, message)


def resources(draft: Draft) -> bool:
    """Set RewardServiceReady and ResourcesReady; whether both the RayCluster and the reward service are ready."""
    seen, conds = draft.seen, draft.conds
    reward_ok = True
    if draft.intent.reward_required:
        reward = seen.reward
        reward_ok = reward is not None and reward.ready
        if reward is None:
            conds.set(C.REWARD_SERVICE_READY, False, R.NOT_CREATED, "the reward service is not created yet")
        else:
            conds.set(C.REWARD_SERVICE_READY, reward.ready, reward.reason, reward.message)
    else:
        conds.set(C.REWARD_SERVICE_READY, True, R.NOT_REQUIRED, "reward is computed inside miles")
    cluster_ok = seen.cluster is not None and seen.cluster.ready
    ended = seen.job is not None and not seen.job.state.active
    if cluster_ok and reward_ok:
        conds.set(C.RESOURCES_READY, True, R.READY, "the RayCluster is ready")
    elif not ended:
        detail = seen.cluster.message if seen.cluster else "creating the RayCluster"
        conds.set(C.RESOURCES_READY, False, R.PROVISIONING, detail)
    return cluster_ok and reward_ok


def before_submit(draft: Draft, ready: bool) -> Decision:
    """No job yet: keep the children applied until everything is ready, then submit."""
    intent, conds = draft.intent, draft.conds
    conds.set(C.JOB_RUNNING, False, R.NOT_SUBMITTED, "waiting for resources")
    if draft.progress.metrics is None:
        conds.set(C.HEALTHY, None, R.NO_METRICS, "no metrics yet")
    conds.set(C.COMPLETE, False, R.IN_PROGRESS, "")
    if not ready:
        return _not_ready(draft)
    if intent.edit_problems:  # an edit that cannot run (lifecycle._edit_refused): no attempt starts from it
        message = (
            f"the next attempt is not submitted: generation {intent.generation} cannot run: "
            f"{'; '.join(intent.edit_problems)}"
        )
        return draft.decide(Phase.PROVISIONING, R.PROVISIONING, message)
    submission = intent.submission_id
    fresh = attempts.submitted(draft, submission)
    if fresh is not None:  # the verdict on the attempt before (a stall that restarted it) says nothing of this one
        conds.set(C.HEALTHY, None, R.NO_METRICS, f"no metrics yet from attempt {fresh.attempt}")
    return draft.decide(
        Phase.PROVISIONING,
        R.SUBMITTING,
        f"submitting Ray job {submission}",
        (Submit(submission),),
        attempt=fresh,
        guards=GuardMemory() if fresh is not None else None,
        ray_cluster_name=intent.ray_cluster_name,
    )


def _not_ready(draft: Draft) -> Decision:
    """The RayCluster or the reward service is not ready yet: wait, in KubeRay's or the scheduler's words."""
    seen, conds = draft.seen, draft.conds
    cluster = seen.cluster
    if cluster is not None and cluster.preflight_failure:
        # The node failed a check of the worker's preflight (driver, GPUs, fabric, shm, disk): the kubelet's
        # retries run the same checks on the same node, so the run ends here, before any job holds its GPUs.
        message = cluster.preflight_failure
        conds.set(C.COMPLETE, True, R.PREFLIGHT_FAILED, message)
        draft.warn(message)
        return draft.decide(Phase.FAILED, R.PREFLIGHT_FAILED, message)
    message = "creating the RayCluster" if cluster is None else (cluster.message or "waiting for the RayCluster")
    if draft.intent.reward_required and not (seen.reward is not None and seen.reward.ready):
        message = f"{message}; reward service: {seen.reward.message if seen.reward else 'not created yet'}"
    phase = Phase.PENDING if cluster is None else Phase.PROVISIONING
    return recovery.unschedulable(draft) or draft.decide(phase, R.PROVISIONING, message)


def waiting_for_driver(draft: Draft) -> Decision:
    job = draft.seen.job
    assert job is not None
    draft.conds.set(C.JOB_RUNNING, False, R.PENDING, job.message or "waiting for the driver to start")
    draft.conds.set(C.COMPLETE, False, R.IN_PROGRESS, "")
    return draft.decide(Phase.PROVISIONING, R.WAITING_FOR_DRIVER, job.message or "job pending")
