"""The GRPORuntime that describes the real node, as a platform team would describe one of its node types.

This module owns what makes the real node (grpo_dev.localcluster.realnode) a place the operator can plan and
render a run for, with no edit of the built-in AWS table and no hand-fitting of rendered objects:

- `advertise_gpus`: `nvidia.com/gpu` in the node's capacity and allocatable through a status patch, the documented
  way to advertise an extended resource where no device plugin runs. The GPUs are played: the `ray-node-gpu` dev
  layer (devtools/images/ray-node-gpu.Dockerfile) answers for them inside the pods.
- `real_node_runtime`: one instance type with the node's own CPUs and memory (read from the Node; the memory less
  what the head, reward, operator pods and the kubelet hold beside the worker), the GPUs it
  advertises, fabric `none` (one node), the node's label as node selector for the workers and, through
  `headNodeSelector`, for the head and the reward service; head and reward pods sized so all of a run fits the one
  node beside the operator; the trainer and reward images in the node's containerd; the stand-in GPUs' count and
  memory as pod env, where the stand-in reads them.
"""

from __future__ import annotations

import json
from typing import Any

from grpo_dev.localcluster.realnode import NODE_LABELS
from grpo_dev.localcluster.simcluster import bound_claim

GPU = "nvidia.com/gpu"
RUNTIME_NAME = "real-node"
INSTANCE_TYPE = "real-node"
# The played GPU: an H100's memory as nvidia-smi reports it (81559 MiB), so the memory plan is a real one.
STANDIN_GPU_MODEL = "NVIDIA H100 80GB HBM3 (stand-in)"
STANDIN_GPU_MEMORY_GIB = 79.6
# The stand-in's settings (devtools/images/gpu_standin/): how many GPUs it shows a pod and their memory.
STANDIN_ENV_GPUS = "GRPO_STANDIN_GPUS"
STANDIN_ENV_MEMORY = "GRPO_STANDIN_GPU_MEMORY_GIB"
# The CPU pods beside the worker: the Ray head (Ray's GCS, dashboard and Jobs API) and one reward service pod.
HEAD_SIZE = {"cpu": "300m", "memory": "2Gi"}
REWARD_SIZE = {"cpu": "200m", "memory": "512Mi"}
# Also beside the worker: the operator's pod (the chart's resources.requests.memory) and the kubelet's hard eviction
# threshold (realnode.py).
OPERATOR_MEMORY = "256Mi"
EVICTION_MEMORY = "100Mi"
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _memory_bytes(quantity: str) -> int:
    for suffix, factor in _BINARY.items():
        if quantity.endswith(suffix):
            return int(quantity[: -len(suffix)]) * factor
    return int(quantity)


def _cpus(quantity: str) -> float:
    return int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def _beside_the_worker() -> int:
    sizes = (HEAD_SIZE["memory"], REWARD_SIZE["memory"], OPERATOR_MEMORY, EVICTION_MEMORY)
    return sum(_memory_bytes(size) for size in sizes)


def gpu_patch(count: int) -> list[dict[str, Any]]:
    """The JSON patch of a node's status that advertises `count` GPUs."""
    return [
        {"op": "add", "path": f"/status/{field}/{GPU.replace('/', '~1')}", "value": str(count)}
        for field in ("capacity", "allocatable")
    ]


def advertise_gpus(kubectl: Any, node: str, count: int) -> None:
    """Patch `count` GPUs into the node's status (`kubectl` as `ControlPlane.kubectl`). The kubelet keeps an
    extended resource it does not manage as patched (it only zeroes those of device plugins that went away)."""
    kubectl("patch", "node", node, "--subresource=status", "--type=json", "-p", json.dumps(gpu_patch(count)))


def real_node_runtime(
    node: dict[str, Any],
    *,
    trainer_image: str,
    reward_image: str,
    claim_name: str,
    mount_path: str = "/shared",
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The GRPORuntime (a manifest) of the real `node` (the Node object, GPUs already advertised); `env` is more env
    for every Ray pod (the miles double's knobs directory)."""
    capacity = node["status"]["capacity"]
    gpus = int(capacity.get(GPU, "0"))
    if gpus < 1:
        raise ValueError(f"node {node['metadata']['name']} advertises no {GPU}; call advertise_gpus first")
    return {
        "apiVersion": "grpo.dev/v1alpha1",
        "kind": "GRPORuntime",
        "metadata": {"name": RUNTIME_NAME},
        "spec": {
            "instanceTypes": [
                {
                    "name": INSTANCE_TYPE,
                    "gpuModel": "H100",
                    "gpusPerNode": gpus,
                    "gpuMemoryGiB": STANDIN_GPU_MEMORY_GIB,
                    # What the kubelet found on this machine, whole units down; the memory less what the pods beside
                    # the worker hold (a worker requests 90% of an instance type's memory, render/raycluster.py).
                    "vcpus": max(1, int(_cpus(capacity["cpu"]))),
                    "memoryGiB": max(1, (_memory_bytes(capacity["memory"]) - _beside_the_worker()) // 2**30),
                    "nodeSelector": dict(NODE_LABELS),
                    "fabric": {"type": "none"},
                }
            ],
            "defaults": {
                "trainerImage": trainer_image,
                "rewardImage": reward_image,
                "storage": {"claimName": claim_name, "mountPath": mount_path},
                "scheduling": {
                    "headNodeSelector": dict(NODE_LABELS),
                    "headResources": dict(HEAD_SIZE),
                    "rewardResources": dict(REWARD_SIZE),
                },
                "env": {STANDIN_ENV_GPUS: str(gpus), STANDIN_ENV_MEMORY: str(STANDIN_GPU_MEMORY_GIB), **(env or {})},
            },
        },
    }


def shared_claim(namespace: str, claim: str, path: str, size_gib: int = 1200) -> list[dict[str, Any]]:
    """A ReadWriteMany claim bound to a hostPath PersistentVolume at `path` on the real node (a directory of
    `RealNode.shared_volume`): the run's shared volume, as a platform's FSx claim would be."""
    term = {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in NODE_LABELS.items()]}
    source = {"hostPath": {"path": path, "type": "Directory"}}
    return bound_claim(namespace, claim, f"{size_gib}Gi", source, {"required": {"nodeSelectorTerms": [term]}})
