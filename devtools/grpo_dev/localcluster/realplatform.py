"""The platform on the real node, as a platform team would set one up: the operator installed by its chart, the
node's GRPORuntime, a namespace with its shared claim; and runs for it.

This module owns the steps between a started `SimulatedCluster(real_node=True)` and a `kubectl apply` of a
GRPORun that runs in real pods, shared by `make run` with `GRPO_REAL_NODE=1` (grpo_dev.devrun) and the real-node
tests (tests/e2e/test_operator_real.py): our images built and imported into the node's containerd (the
`ray-node-gpu` dev layer plays the GPU and holds the miles double), `nvidia.com/gpu` advertised, the chart
installed with the operator image (its pod on the real node, talking to the API server in-cluster), the
runtime from grpo_dev.localcluster.realruntime, and a tmpfs behind a hostPath claim as the run's shared file
system, where the double's knobs go (`FAKE_MILES_KNOBS_DIR`).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_dev.images import DEV_IMAGES, IMAGES, build_all, build_dev
from grpo_dev.localcluster.build import tool_path
from grpo_dev.localcluster.realnode import NODE_LABELS
from grpo_dev.localcluster.realruntime import RUNTIME_NAME, advertise_gpus, real_node_runtime, shared_claim
from grpo_dev.localcluster.simcluster import SimulatedCluster

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "grpo-operator"
OPERATOR_NAMESPACE = "grpo-system"
RELEASE = "grpo"
DEPLOYMENT = f"{RELEASE}-grpo-operator"
CLAIM = "shared"
MOUNT = "/shared"
KNOBS = f"{MOUNT}/fake-knobs"
# The double's knobs (fake_miles.py): gauges on the pod's address (miles binds every address), checkpoints as
# miles saves them, rewards scored through the reward service.
DOUBLE = [
    "--fake-bind-address",
    "0.0.0.0",  # noqa: S104 - the pod's own address, in its network namespace
    "--fake-checkpoints",
    "--fake-score-rewards",
]
_HELM_HOME = Path(tempfile.gettempdir()) / "grpo-realplatform-helm"


class PlatformError(RuntimeError):
    """A step of the platform's setup failed; the message says which and why."""


@dataclass(frozen=True)
class Platform:
    node: str
    namespace: str
    shared: Path  # the shared volume's directory on this machine


def helm(*args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """The pinned helm (grpo_dev.localcluster, never a system copy), its repository config and caches in a scratch
    directory, so neither the tests nor `make run` read or write the user's helm state."""
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(_HELM_HOME / "cache"),
        "HELM_CONFIG_HOME": str(_HELM_HOME / "config"),
        "HELM_DATA_HOME": str(_HELM_HOME / "data"),
    }
    result = subprocess.run(
        [str(tool_path("helm")), *args], capture_output=True, text=True, env=env, input=input, timeout=300, check=False
    )
    if check and result.returncode != 0:
        raise PlatformError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}{result.stdout}")
    return result


def import_images(cluster: SimulatedCluster, build: bool = True) -> None:
    """Our images (operator, reward service) and the dev layers (ray-node, ray-node-gpu), built from this tree
    when `build`, in the real node's containerd."""
    node = cluster.real_node
    if node is None:
        raise PlatformError("the cluster has no real node")
    if build:
        build_all(install=False)
        build_dev("ray-node-gpu")
    for image in (*IMAGES.values(), DEV_IMAGES["ray-node"], DEV_IMAGES["ray-node-gpu"]):
        node.import_image(image.reference)


def install(
    cluster: SimulatedCluster, namespace: str, *, reconcile_seconds: int = 2, max_grace_seconds: int = 60
) -> Platform:
    """The chart with the operator image on the real node, the node's GRPORuntime, `namespace` with the shared
    claim. The images must be in the node (`import_images`)."""
    node = cluster.real_node
    if node is None:
        raise PlatformError("the cluster has no real node")
    advertise_gpus(cluster.kubectl, node.name, 1)
    repository, tag = IMAGES["operator"].reference.rsplit(":", 1)
    helm(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        OPERATOR_NAMESPACE,
        "--create-namespace",
        "--force-conflicts",
        f"--kubeconfig={cluster.kubeconfig}",
        "--set",
        f"image.repository={repository}",
        "--set",
        f"image.tag={tag}",
        "--set",
        "image.pullPolicy=Never",
        "--set",
        f"rewardService.image={IMAGES['reward-service'].reference}",
        "--set",
        f"settings.reconcileIntervalSeconds={reconcile_seconds}",
        # Ray's containers run `bash -c "...; ray start --block"` as PID 1, which ignores SIGTERM: a worker pod goes
        # only when its grace ends, after the preStop save. A small cap keeps a deleted pod's wait short.
        "--set",
        f"settings.maxGraceSeconds={max_grace_seconds}",
        "--set-json",
        f"nodeSelector={json.dumps(NODE_LABELS)}",
    )
    cluster.kubectl("rollout", "status", "-n", OPERATOR_NAMESPACE, f"deployment/{DEPLOYMENT}", "--timeout=180s")
    cluster.kubectl("create", "namespace", namespace)
    shared = node.shared_volume(namespace)
    (shared / "fake-knobs").mkdir(mode=0o777)
    found = cluster.get_json("node", node.name)
    runtime = real_node_runtime(
        found,
        trainer_image=DEV_IMAGES["ray-node-gpu"].reference,
        reward_image=IMAGES["reward-service"].reference,
        claim_name=CLAIM,
        mount_path=MOUNT,
        env={"FAKE_MILES_KNOBS_DIR": KNOBS},
    )
    items = [*shared_claim(namespace, CLAIM, str(shared)), runtime]
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    cluster.kubectl("wait", "-n", namespace, "--for=jsonpath={.status.phase}=Bound", "--timeout=60s", f"pvc/{CLAIM}")
    return Platform(node=node.name, namespace=namespace, shared=shared)


def uninstall(cluster: SimulatedCluster) -> None:
    helm("uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, f"--kubeconfig={cluster.kubeconfig}", check=False)


def operator_crash(
    kubectl: Callable[..., subprocess.CompletedProcess[str]], namespace: str = OPERATOR_NAMESPACE
) -> int | None:
    """The operator container's last exit code once the kubelet backs off restarting it (CrashLoopBackOff: it will
    not come up by itself), else None; what `make run` waits on, as it waits on the operator process off the node.
    An API server that does not answer is None: the next look decides."""
    found = kubectl("get", "deployment", DEPLOYMENT, "-n", namespace, "-o", "json", check=False)
    if found.returncode != 0:
        return None
    labels = json.loads(found.stdout)["spec"]["selector"].get("matchLabels") or {}
    selector = ",".join(f"{key}={value}" for key, value in labels.items())
    pods = kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json", check=False)
    if pods.returncode != 0:
        return None
    for pod in json.loads(pods.stdout)["items"]:
        for container in pod.get("status", {}).get("containerStatuses", []):
            waiting = (container.get("state") or {}).get("waiting") or {}
            ended = (container.get("lastState") or {}).get("terminated") or {}
            if waiting.get("reason") == "CrashLoopBackOff" and "exitCode" in ended:
                return int(ended["exitCode"])
    return None


def operator_log(cluster: SimulatedCluster) -> str:
    """The operator pod's log as `kubectl logs` gives it (empty when there is none)."""
    found = cluster.kubectl("logs", "-n", OPERATOR_NAMESPACE, f"deployment/{DEPLOYMENT}", check=False)
    return found.stdout if found.returncode == 0 else ""


def run_manifest(name: str, namespace: str, *, rollouts: int, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """A short GRPORun on the real node's runtime: the image, claim, node and sizes all come from the runtime."""
    return {
        "apiVersion": "grpo.dev/v1alpha1",
        "kind": "GRPORun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runtimeRef": {"name": RUNTIME_NAME},
            "model": {
                # The smallest profile: its offloaded training state fits this machine's host memory (a 4B's 82 GiB
                # of pinned host memory does not: the plan refuses it, as it should).
                "profile": "qwen3-0.6b",
                "hfCheckpoint": f"{MOUNT}/models/Qwen3-0.6B",
                "torchDistCheckpoint": f"{MOUNT}/models/Qwen3-0.6B_torch_dist",
            },
            "data": {"promptData": f"{MOUNT}/data/prompts.jsonl"},
            "rollout": {"numRollout": rollouts, "batchSize": 4, "samplesPerPrompt": 2},
            "training": {"globalBatchSize": 8},
            "topology": {"actor": {"nodes": 1, "gpusPerNode": 1}, "rollout": {"memFraction": 0.7}},
            "reward": {"type": "remote", "remote": {"replicas": 1}},
            **(spec or {}),
        },
    }


def start(cluster: SimulatedCluster, platform: Platform, run: dict[str, Any], knobs: list[str]) -> str:
    """Write the double's knobs for `run` into the shared volume and apply it; return its name."""
    name = str(run["metadata"]["name"])
    (platform.shared / "fake-knobs" / f"{name}.json").write_text(json.dumps(DOUBLE + knobs))
    cluster.kubectl("apply", "-f", "-", input=json.dumps(run))
    return name
