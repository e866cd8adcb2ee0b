"""What `make run` on the real node waits on: the operator pod's container crash-looping (grpo_dev.localcluster.
realplatform.operator_crash), read from the real API server. The pod's status is written here as the kubelet
writes it, through the status subresource: no kubelet runs the pod, so the test needs no node."""

from __future__ import annotations

import json
from typing import Any

from grpo_dev.localcluster.controlplane import ControlPlane
from grpo_dev.localcluster.realplatform import DEPLOYMENT, operator_crash

LABELS = {"app.kubernetes.io/name": "grpo-operator", "app.kubernetes.io/instance": "grpo"}
CONTAINER = {"name": "operator", "image": "localhost/grpo-operator:dev"}


def _apply(plane: ControlPlane, manifest: dict[str, Any]) -> None:
    plane.kubectl("apply", "-f", "-", input=json.dumps(manifest))


def _pod(plane: ControlPlane, namespace: str, name: str, labels: dict[str, str]) -> None:
    meta = {"name": name, "namespace": namespace, "labels": labels}
    _apply(
        plane,
        {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": "gone", "containers": [CONTAINER]}},
    )


def _container_status(plane: ControlPlane, namespace: str, pod: str, **state: Any) -> None:
    status = {
        "name": "operator",
        "image": CONTAINER["image"],
        "imageID": "",
        "ready": False,
        "restartCount": 3,
        **state,
    }
    patch = {"status": {"containerStatuses": [status]}}
    plane.kubectl("patch", "pod", pod, "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(patch))


def test_the_operator_pods_crash_loop_ends_the_wait_with_its_last_exit_code(
    control_plane: ControlPlane, namespace: str
) -> None:
    assert operator_crash(control_plane.kubectl, namespace) is None  # no operator installed yet: keep waiting
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": namespace},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": LABELS},
            "template": {"metadata": {"labels": LABELS}, "spec": {"containers": [CONTAINER]}},
        },
    }
    _apply(control_plane, deployment)
    _pod(control_plane, namespace, "operator", LABELS)
    _pod(control_plane, namespace, "other", {"app.kubernetes.io/name": "something-else"})
    running = {"state": {"running": {"startedAt": "2026-12-03T05:00:00Z"}}}
    _container_status(control_plane, namespace, "operator", **running)
    assert operator_crash(control_plane.kubectl, namespace) is None
    terminated = {
        "terminated": {
            "exitCode": 3,
            "reason": "Error",
            "startedAt": "2026-12-03T05:00:00Z",
            "finishedAt": "2026-12-03T05:00:01Z",
        }
    }
    # Between restarts of a container that keeps failing: the kubelet is backing off, the pod will not come up.
    waiting = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}}
    _container_status(control_plane, namespace, "other", state=waiting, lastState=terminated)
    assert operator_crash(control_plane.kubectl, namespace) is None  # not the operator's pod
    _container_status(control_plane, namespace, "operator", state=waiting, lastState=terminated)
    assert operator_crash(control_plane.kubectl, namespace) == 3
    # Restarting after one failure (not backing off yet) is not the end.
    _container_status(
        control_plane, namespace, "operator", state={"waiting": {"reason": "ContainerCreating"}}, lastState=terminated
    )
    assert operator_crash(control_plane.kubectl, namespace) is None
