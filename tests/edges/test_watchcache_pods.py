"""The watch cache's slim pods keep what the reconcile reads: a pod served from the cache holds the same GPUs as
the pod the API server sent and its grace period (the accounting counts GPU-hours and names the grace from them)."""

from __future__ import annotations

from grpo_operator.edges.childstate import gpu_observation
from grpo_operator.edges.watchcache import as_model, slim_pod

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "w-0", "namespace": "ns", "labels": {"grpo.dev/run": "r"}, "managedFields": [{}]},
    "spec": {
        "nodeName": "gpu-node-1",
        "terminationGracePeriodSeconds": 645,
        "containers": [
            {
                "name": "ray-worker",
                "image": "trainer@sha256:abc",
                "resources": {
                    "requests": {"cpu": "180", "nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "16"},
                    "limits": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "16"},
                },
            },
            {"name": "sidecar", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
        ],
    },
    "status": {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-02T01:00:00Z"}],
    },
}


def test_a_cached_pod_holds_the_gpus_the_api_servers_pod_holds() -> None:
    cached, sent = gpu_observation([slim_pod(POD)]), gpu_observation([as_model(POD, "V1Pod")])
    assert cached == sent
    assert (
        cached.gpus == 9 and cached.bound_at is not None and cached.bound_at.isoformat() == "2026-12-02T01:00:00+00:00"
    )
    assert cached.grace_seconds == 645  # the grace a save before the pods go had (status.accounting)


def test_the_cached_pod_keeps_only_the_gpu_resources() -> None:
    [worker, sidecar] = slim_pod(POD).spec.containers
    assert worker.resources.requests == {"nvidia.com/gpu": "8"} and worker.image is None
    assert sidecar.resources.requests is None and sidecar.resources.limits == {"nvidia.com/gpu": "1"}


def _stopping(condition: dict[str, str] | None = None) -> dict[str, object]:
    """POD terminating: its deletionTimestamp set, and `condition`, the DisruptionTarget condition the Eviction API
    (a drain), the scheduler or the kubelet sets before the delete."""
    conditions = [*POD["status"]["conditions"], *([condition] if condition else [])]  # type: ignore[index]
    meta = {**POD["metadata"], "deletionTimestamp": "2026-12-02T01:10:45Z"}  # type: ignore[dict-item]
    return {**POD, "metadata": meta, "status": {**POD["status"], "conditions": conditions}}  # type: ignore[dict-item]


EVICTED = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "EvictionByEvictionAPI",
    "message": "Eviction API: evicting",
    "lastTransitionTime": "2026-12-02T01:00:05Z",
}


def test_a_stopped_pod_says_why_and_since_when_from_the_cache_as_from_the_api_server() -> None:
    evicted = _stopping(EVICTED)
    cached, sent = gpu_observation([slim_pod(evicted)]), gpu_observation([as_model(evicted, "V1Pod")])
    assert cached == sent
    assert cached.stopped_by == "EvictionByEvictionAPI" and cached.stopped_at is not None
    assert cached.stopped_at.isoformat() == "2026-12-02T01:00:05+00:00"
    # Deleted without a condition (`kubectl delete pod`): since its deletionTimestamp less its grace (645 s).
    deleted = gpu_observation([slim_pod(_stopping())])
    assert deleted.stopped_by == "Deleted" and deleted.stopped_at is not None
    assert deleted.stopped_at.isoformat() == "2026-12-02T01:00:00+00:00"  # 01:10:45 - 645 s
    # A pod not terminating is not stopped.
    assert gpu_observation([slim_pod(POD)]).stopped_by is None
