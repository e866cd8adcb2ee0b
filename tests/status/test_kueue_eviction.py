"""Kueue suspends a running run's RayCluster (a preemption, a deactivation, a stopped queue, ...): the run reads
`Suspended` with Kueue's own reason from its Workload's Evicted condition, and the job is not stopped while the Ray
pods KubeRay deletes are still there with grace left, since their preStop hooks are saving a checkpoint and a stop
would end miles first. Once the pods are gone (or their grace has run out) a job still running is stopped."""

from __future__ import annotations

from datetime import timedelta

import pytest
from grpo_operator.api.status import Phase, Reason
from grpo_operator.status.decision import StopJob
from grpo_operator.status.observation import ClusterObservation, GpuObservation, JobState, KueueEviction

from tests.support.status import READY, T0, at, healthy, intent, job, run_through

GRACE = 300


def queued(eviction: KueueEviction | None) -> ClusterObservation:
    return ClusterObservation(ready=False, message="waiting for Kueue", queue="team-a", eviction=eviction)


def evicted(reason: str, message: str = "") -> KueueEviction:
    return KueueEviction("raycluster-x-ray-5f2c1", reason, message)


RUNNING = (
    at(cluster=READY),
    at(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(3)),
)


# The reasons Kueue v0.17.0 writes on a Workload's Evicted condition (apis/kueue/v1beta2/workload_types.go:1010-1044).
@pytest.mark.parametrize(
    ("found", "reason", "says", "resumes"),
    [
        pytest.param(
            evicted("Preempted", "Preempted to accommodate a workload (UID: 4c1e)"),
            Reason.PREEMPTED,
            "preempted by Kueue for a workload of higher priority",
            "once Kueue admits it again",
            id="preempted",
        ),
        pytest.param(
            evicted("PodsReadyTimeout", "Exceeded the PodsReady timeout default/x"),
            Reason.PODS_READY_TIMEOUT,
            "pods were not all ready within waitForPodsReady's timeout",
            "Kueue requeues it after its backoff",
            id="pods-ready-timeout",
        ),
        pytest.param(
            evicted("ClusterQueueStopped", "The ClusterQueue is stopped"),
            Reason.QUEUE_STOPPED,
            "its ClusterQueue was stopped",
            "once the ClusterQueue is started again",
            id="cluster-queue-stopped",
        ),
        pytest.param(
            evicted("LocalQueueStopped", "The LocalQueue is stopped"),
            Reason.QUEUE_STOPPED,
            "its LocalQueue was stopped",
            "once the LocalQueue is started again",
            id="local-queue-stopped",
        ),
        pytest.param(
            evicted("Deactivated", "The workload is deactivated"),
            Reason.DEACTIVATED,
            "deactivated in Kueue",
            "stays suspended until the Workload is reactivated",
            id="deactivated",
        ),
        pytest.param(
            evicted("DeactivatedDueToRequeuingLimitExceeded", "The workload is deactivated due to exceeding ..."),
            Reason.DEACTIVATED,
            "deactivated in Kueue",
            "stays suspended until the Workload is reactivated",
            id="deactivated-with-a-cause",
        ),
        pytest.param(
            evicted("NodeFailures", "Workload was evicted due to node failures"),
            Reason.EVICTED,
            "evicted by Kueue (NodeFailures)",
            "once Kueue admits it again",
            id="node-failures",
        ),
        pytest.param(
            evicted("AdmissionCheck", "At least one admission check is false"),
            Reason.EVICTED,
            "evicted by Kueue (AdmissionCheck)",
            "once Kueue admits it again",
            id="admission-check",
        ),
        pytest.param(None, Reason.EVICTED, "no Kueue Workload of the RayCluster says why", "", id="no-workload-read"),
    ],
)
def test_each_kueue_eviction_is_its_own_reason_in_kueues_words(
    found: KueueEviction | None, reason: Reason, says: str, resumes: str
) -> None:
    d = run_through(intent(), *RUNNING, at(cluster=queued(found), gpus=GpuObservation(0)))
    assert (d.status.phase, d.status.reason) == (Phase.SUSPENDED, reason)
    message = d.status.message or ""
    assert says in message and resumes in message, message
    if found is not None:
        assert found.workload in message and found.reason in message and found.message in message, message
    if reason is not Reason.DEACTIVATED:
        assert "resumes from its last checkpoint" in message, message
    else:
        assert "once Kueue admits it again" not in message, message
    job_running = next(c for c in d.status.conditions or [] if c.type == "JobRunning")
    assert (job_running.status, job_running.reason) == ("False", reason)


def test_a_deactivated_run_stays_deactivated_on_later_reconciles_and_never_claims_it_resumes_by_itself() -> None:
    off = queued(evicted("Deactivated", "The workload is deactivated"))
    first = run_through(intent(), *RUNNING, at(cluster=off, gpus=GpuObservation(0)))
    later = run_through(intent(), at(cluster=off, gpus=GpuObservation(0)), prev=first.status)
    assert (later.status.phase, later.status.reason) == (Phase.SUSPENDED, Reason.DEACTIVATED)


PREEMPTED = queued(evicted("Preempted", "Preempted to accommodate a workload (UID: 4c1e)"))
STOPPED_AT = T0 + timedelta(minutes=5)


@pytest.mark.parametrize(
    ("gpus", "seconds_after", "stops"),
    [
        pytest.param(GpuObservation(8, T0, GRACE), 0, False, id="pods-not-deleted-yet"),
        pytest.param(GpuObservation(8, T0, GRACE, "Deleted", STOPPED_AT), 0, False, id="pods-terminating-at-once"),
        pytest.param(GpuObservation(8, T0, GRACE, "Deleted", STOPPED_AT), GRACE - 1, False, id="one-second-of-grace"),
        pytest.param(GpuObservation(8, T0, GRACE, "Deleted", STOPPED_AT), GRACE, True, id="grace-run-out"),
        pytest.param(GpuObservation(0), 0, True, id="pods-gone"),
        pytest.param(None, 0, True, id="pods-not-observed"),
    ],
)
def test_no_stop_while_the_ray_pods_kuberay_deletes_still_have_grace_to_save_in(
    gpus: GpuObservation | None, seconds_after: int, stops: bool
) -> None:
    """Kueue's suspension reaches KubeRay, which deletes every Ray pod; the job still runs on them and their hooks
    are asking miles for a checkpoint. The repro of the review: a Running run, then the queued cluster, the job
    RUNNING and the GPU pods stopped by deletion: the decision held StopJob."""
    now = STOPPED_AT + timedelta(seconds=seconds_after)
    seen = at(now, cluster=PREEMPTED, job=job(JobState.RUNNING), gpus=gpus)
    d = run_through(intent(), *(o._replace(now=T0) for o in RUNNING), seen)
    assert (d.status.phase, d.status.reason) == (Phase.SUSPENDED, Reason.PREEMPTED)
    assert (StopJob("grpo-x-1") in d.actions) is stops, d.actions
    assert ("save a checkpoint before they go" in (d.status.message or "")) is not stops, d.status.message


@pytest.mark.parametrize(
    ("gpus", "stops"),
    [
        pytest.param(GpuObservation(8, T0, GRACE, "Deleted", STOPPED_AT), False, id="pods-still-saving"),
        pytest.param(GpuObservation(0), True, id="pods-gone"),
    ],
)
def test_the_evicted_attempts_job_is_stopped_on_a_later_reconcile_once_its_pods_are_gone(
    gpus: GpuObservation, stops: bool
) -> None:
    """The eviction's first reconcile saw the pods still there and stopped nothing; on the next ones the tracked id
    is the next attempt's, so the evicted attempt's job is looked up by its own id (status.accounting's last
    attempt) and stopped once its pods are gone: a job left running would outlive its pods on a head that stays."""
    first = run_through(
        intent(),
        *(o._replace(now=T0) for o in RUNNING),
        at(
            STOPPED_AT,
            cluster=PREEMPTED,
            job=job(JobState.RUNNING),
            gpus=GpuObservation(8, T0, GRACE, "Deleted", STOPPED_AT),
        ),
    )
    assert not first.has(StopJob)
    later = at(STOPPED_AT + timedelta(seconds=30), cluster=PREEMPTED, gpus=gpus, evicted_job=job(JobState.RUNNING))
    d = run_through(intent(), later, prev=first.status)
    assert (d.status.phase, d.status.reason) == (Phase.SUSPENDED, Reason.PREEMPTED)
    assert (StopJob("grpo-x-1") in d.actions) is stops, d.actions
