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
