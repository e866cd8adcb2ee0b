"""A runtime of one small node (2 CPUs, 1 GPU) that sizes the head and reward pods, and a run on it: what the pod
size and debug access render tests share."""

from __future__ import annotations

from typing import Any

SMALL_NODE = {"grpo.dev/small": "true"}
RUNTIME: dict[str, Any] = {
    "apiVersion": "grpo.dev/v1alpha1",
    "kind": "GRPORuntime",
    "metadata": {"name": "small"},
    "spec": {
        "instanceTypes": [
            {
                "name": "small-1x",
                "gpuModel": "H100",
                "gpusPerNode": 1,
                "gpuMemoryGiB": 79.6,
                "vcpus": 2,
                "memoryGiB": 24,
                "nodeSelector": SMALL_NODE,
                "fabric": {"type": "none"},
            }
        ],
        "defaults": {
            "trainerImage": "registry.example/trainer:1",
            "storage": {"claimName": "shared", "mountPath": "/shared"},
            "scheduling": {
                "headNodeSelector": SMALL_NODE,
                "headResources": {"cpu": "300m", "memory": "2Gi"},
                "rewardResources": {"cpu": "500m", "memory": "512Mi"},
            },
        },
    },
}
RUN: dict[str, Any] = {
    "apiVersion": "grpo.dev/v1alpha1",
    "kind": "GRPORun",
    "metadata": {"name": "small-run", "namespace": "team"},
    "spec": {
        "runtimeRef": {"name": "small"},
        "model": {"profile": "qwen3-4b", "hfCheckpoint": "/shared/m", "torchDistCheckpoint": "/shared/t"},
        "data": {"promptData": "/shared/d.jsonl"},
        "rollout": {"numRollout": 4, "batchSize": 4, "samplesPerPrompt": 2},
        "training": {"globalBatchSize": 8},
        "topology": {"actor": {"nodes": 1, "gpusPerNode": 1}},
        "reward": {"type": "remote", "remote": {"replicas": 1}},
    },
}
