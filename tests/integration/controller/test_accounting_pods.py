"""GPU-hours from real pod objects: the reconciler against the real API server (Ray on a closed port, so the run
waits for its RayCluster), with the clock handed in. A worker pod of the run, bound to a node with a PodScheduled
time, holds its 8 GPUs from that time until the reconcile that sees it gone; a pod not bound to a node holds none."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from grpo_operator.controller.config import OperatorSettings
from grpo_operator.controller.reconciler import Reconciler
from grpo_operator.edges.kube import Kube
from grpo_operator.edges.kubecache import KubeCache
from grpo_operator.render import names
from kubernetes import config

from tests.support.operator_harness import get_run, manifest

pytestmark = pytest.mark.integration
STAMP = "%Y-%m-%dT%H:%M:%SZ"


def _pod(name: str, namespace: str, run: str, node: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "ray-worker",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}},
            }
        ]
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {names.RUN_LABEL: run}},
        "spec": spec,
    }


def test_gpu_seconds_run_from_the_pods_binding_until_it_is_seen_gone(
    control_plane: Any, namespace: str, kubectl: Callable[..., Any]
) -> None:
    run = "billed"
    kubectl("apply", "-f", "-", input=manifest(run, namespace, ray_token=None))
    kube = Kube(config.new_client_from_config(str(control_plane.kubeconfig)), KubeCache(resync_seconds=600))
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=5)
    clock = [start]
    reconciler = Reconciler(
        kube=kube, settings=OperatorSettings(ray_address="http://127.0.0.1:9"), clock=lambda: clock[0]
    )

    def at(seconds: int) -> dict[str, Any]:
        clock[0] = start + timedelta(seconds=seconds)
        reconciler.reconcile({"metadata": {"namespace": namespace, "name": run}})
        acc: dict[str, Any] = get_run(kubectl, namespace, run)["status"]["accounting"]
        return acc

    assert at(0)["gpuSeconds"] == 0
    kubectl("apply", "-f", "-", input=json.dumps(_pod("billed-worker", namespace, run, "p5en-1")))
    kubectl("apply", "-f", "-", input=json.dumps(_pod("billed-pending", namespace, run, None)))  # not bound
    scheduled = {
        "type": "PodScheduled",
        "status": "True",
        "lastTransitionTime": (start + timedelta(seconds=10)).strftime(STAMP),
    }
    kubectl(
        "patch", "pod", "billed-worker", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"conditions": [scheduled]}}),
    )  # fmt: skip
    seen = at(70)
    assert (seen["gpus"], seen["gpuSeconds"]) == (8, 8 * 60)  # from its binding at 10 s, not from 0 s
    assert at(140)["gpuSeconds"] == 8 * 130
    kubectl("delete", "pod", "billed-worker", "-n", namespace, "--grace-period=0", "--force", "--wait=true")
    gone = at(190)
    assert (gone["gpus"], gone["gpuSeconds"]) == (0, 8 * 180)
    later = at(400)
    assert later["gpuSeconds"] == 8 * 180 and later["gpuHours"] == 0.4
    assert later["unattributedGpuSeconds"] == 8 * 180  # no attempt started: the first one will take them
