"""Status while Kueue holds a run: waiting for admission is Pending/Queued naming the LocalQueue; a preemption
(Kueue suspends the admitted RayCluster again) is Suspended/Preempted until re-admission starts a new attempt."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from grpo_operator.api.status import Phase
from grpo_operator.edges.childstate import cluster_observation
from grpo_operator.status.decision import Decision, DeleteRayCluster, StopJob, Submit
from grpo_operator.status.lifecycle import decide
from grpo_operator.status.observation import ClusterObservation, JobObservation, JobState, Seen

from tests.support.builders import base, check, merge
from tests.support.status import intent

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def spec(patch: dict[str, Any] | None = None) -> Any:
    run, _ = check(merge(base(), {"spec": {"scheduling": {"queueName": "team-a"}, **(patch or {})}}))
    assert run is not None
    return run.spec


def raycluster(suspend: bool | None, queue: str | None = "team-a") -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    body: dict[str, Any] = {"metadata": {"name": "r-ray", "labels": labels}, "spec": {}}
    if suspend is not None:
        body["spec"]["suspend"] = suspend
    return body


def cond(decision: Decision, type_: str) -> tuple[str, str, str]:
    c = next(c for c in decision.status.conditions if c.type == type_)
    return c.status, c.reason, c.message


def test_a_suspended_cluster_with_a_queue_label_is_observed_as_waiting_in_that_queue() -> None:
    assert cluster_observation(raycluster(True), 1, []) == ClusterObservation(
        ready=False, message="waiting for Kueue to admit the RayCluster in LocalQueue team-a", queue="team-a"
    )
    assert cluster_observation(raycluster(False), 1, []).queue is None  # type: ignore[union-attr]
    assert cluster_observation(raycluster(True, queue=None), 1, []).queue is None  # type: ignore[union-attr]


def test_a_run_waiting_for_admission_is_pending_queued_and_says_in_which_queue() -> None:
    d = decide(None, Seen(cluster=cluster_observation(raycluster(True), 1, [])), intent(), T0)
    assert (d.status.phase, d.status.reason) == (Phase.PENDING, "Queued")
    assert "LocalQueue team-a" in (d.status.message or "")
    status, reason, message = cond(d, "ResourcesReady")
    assert (status, reason) == ("False", "WaitingForAdmission") and "LocalQueue team-a" in message
    assert not (d.has(Submit) or d.has(DeleteRayCluster) or d.has(StopJob))


def test_a_remote_reward_is_not_created_while_the_run_waits_for_admission() -> None:
    s = spec({"reward": {"type": "remote", "remote": {"replicas": 1}}})
    d = decide(None, Seen(cluster=cluster_observation(raycluster(True), 1, [])), intent(s), T0)
    assert cond(d, "RewardServiceReady")[:2] == ("False", "NotCreated")
    assert "once Kueue admits" in cond(d, "RewardServiceReady")[2]


def test_a_preempted_run_is_suspended_preempted_keeps_its_cluster_and_starts_a_new_attempt_once_readmitted() -> None:
    running = decide(None, Seen(cluster=ClusterObservation(ready=True)), intent(), T0)
    assert running.has(Submit)
    prev = running.status.model_copy(update={"job_submission_id": "grpo-r-1", "attempt": 1})
    on = decide(
        prev,
        Seen(
            cluster=ClusterObservation(ready=True),
            job=JobObservation("grpo-r-1", JobState.RUNNING, driver_ip="10.0.0.5"),
        ),
        intent(),
        T0 + timedelta(minutes=1),
    )
    assert on.status.phase is Phase.RUNNING
    evicted = {
        "metadata": {"name": "raycluster-r-ray-5f2c1"},
        "status": {"conditions": [{"type": "Evicted", "status": "True", "reason": "Preempted", "message": "for w2"}]},
    }
    queued = cluster_observation(raycluster(True), 1, [], [evicted])
    pre = decide(on.status, Seen(cluster=queued), intent(), T0 + timedelta(minutes=2))
    assert (pre.status.phase, pre.status.reason) == (Phase.SUSPENDED, "Preempted")
    assert "LocalQueue team-a" in (pre.status.message or "") and not pre.has(DeleteRayCluster)  # Kueue re-admits it
    assert cond(pre, "JobRunning")[:2] == ("False", "Preempted")
    still = decide(pre.status, Seen(cluster=queued), intent(), T0 + timedelta(minutes=3))
    assert (still.status.phase, still.status.reason) == (Phase.SUSPENDED, "Preempted")
    back = decide(
        still.status,
        Seen(cluster=ClusterObservation(ready=True)),
        intent(submission_id="grpo-r-1-a2"),
        T0 + timedelta(minutes=4),
    )
    # A new attempt with its own id, as after spec.suspend; the decision to submit it already holds it.
    assert back.actions[-1] == Submit("grpo-r-1-a2")
    assert (back.status.job_submission_id, back.status.attempt) == ("grpo-r-1-a2", 2)


def test_a_queued_run_that_never_ran_is_not_called_preempted() -> None:
    queued = cluster_observation(raycluster(True), 1, [])
    first = decide(None, Seen(cluster=queued), intent(), T0)
    again = decide(first.status, Seen(cluster=queued), intent(), T0 + timedelta(minutes=1))
    assert (again.status.phase, again.status.reason) == (Phase.PENDING, "Queued")


def test_a_worker_whose_node_fails_its_preflight_ends_the_run_failed_preflightfailed_naming_pod_and_node() -> None:
    line = "pod r-ray-worker-x on node gpu-7: preflight failed: libcuda: libcuda.so.1 cannot be loaded"
    cluster = ClusterObservation(
        ready=False, message=f"{line}; pod r-ray-head-y container ray-head", preflight_failure=line
    )
    d = decide(None, Seen(cluster=cluster), intent(), T0)
    assert (d.status.phase, d.status.reason, d.status.message) == (Phase.FAILED, "PreflightFailed", line)
    assert cond(d, "Complete") == ("True", "PreflightFailed", line)
    assert [e.message for e in d.events if e.type == "Warning"] == [line]
    assert not d.has(Submit)
    # a pod problem that is not the preflight's keeps the run provisioning
    waiting = ClusterObservation(ready=False, message="pod w-0 unschedulable: 0/4 nodes are available")
    still = decide(None, Seen(cluster=waiting), intent(), T0)
    assert (still.status.phase, still.status.reason) == (Phase.PROVISIONING, "Provisioning")
