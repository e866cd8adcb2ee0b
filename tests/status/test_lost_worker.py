"""A worker lost mid-run, in the words KubeRay v1.5.0 uses (seen in tests/integration/operator/test_simulated_cluster.py):
`state` stays `ready` and RayClusterProvisioned stays True; only readyWorkerReplicas drops."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from grpo_operator.api.status import Phase
from grpo_operator.edges.childstate import cluster_observation
from grpo_operator.status.decision import DeleteRayCluster, StopJob, Submit
from grpo_operator.status.lifecycle import decide
from grpo_operator.status.observation import JobObservation, JobState, Seen

from tests.support.status import intent

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def kuberay_status(ready_workers: int) -> dict[str, object]:
    conditions = [
        {"type": "RayClusterProvisioned", "status": "True", "reason": "AllPodRunningAndReadyFirstTime"},
        {"type": "HeadPodReady", "status": "True", "reason": "HeadPodRunningAndReady"},
    ]
    return {
        "status": {
            "state": "ready",
            "readyWorkerReplicas": ready_workers,
            "desiredWorkerReplicas": 1,
            "conditions": conditions,
        }
    }


def test_a_running_run_that_loses_its_worker_is_provisioning_and_running_again_once_it_is_back() -> None:
    job = JobObservation("grpo-x-1", JobState.RUNNING, "", driver_ip="10.0.0.5")
    running = decide(None, Seen(cluster=cluster_observation(kuberay_status(1), 1, []), job=job), intent(), T0)
    assert running.status.phase is Phase.RUNNING
    lost = decide(
        running.status,
        Seen(cluster=cluster_observation(kuberay_status(0), 1, []), job=job),
        intent(),
        T0 + timedelta(seconds=15),
    )
    assert lost.status.phase is Phase.PROVISIONING and lost.status.reason == "Provisioning"
    assert lost.status.message == "waiting for KubeRay: 0/1 workers ready"
    assert not (lost.has(StopJob) or lost.has(Submit) or lost.has(DeleteRayCluster))
    back = decide(
        lost.status,
        Seen(cluster=cluster_observation(kuberay_status(1), 1, []), job=job),
        intent(),
        T0 + timedelta(seconds=30),
    )
    assert back.status.phase is Phase.RUNNING and back.status.job_submission_id == running.status.job_submission_id
