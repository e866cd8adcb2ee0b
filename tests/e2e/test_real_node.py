"""Pods from our own images run for real on the real node: the reward service Ready through its rendered
probes, `kubectl logs` and `kubectl exec` through the local API server, and the Service name resolving and
answering from inside a pod (CoreDNS, kube-proxy), with pod traffic held on the node's bridge."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from grpo_dev.localcluster import SimulatedCluster
from grpo_dev.localcluster.realnode import BRIDGE, CLUSTER_DNS, NODE_LABELS, RULE_COMMENT
from grpo_operator.planning.plan import make_plan
from grpo_operator.render import RenderSettings, render

from tests.support.builders import example, run_of

pytestmark = pytest.mark.integration


def reward_children(image: str) -> list[dict[str, Any]]:
    """The reward Deployment and Service the operator renders for a remote-reward run, placed on the real node
    (one scoring process, so its CPU request fits a small machine) and using the imported image."""
    run = run_of(example("qwen3-4b-disaggregated", {"reward": {"remote": {"image": image, "replicas": 1}}}))
    result = render(run, make_plan(run), RenderSettings(reward_cpu="1", reward_memory="1Gi"))
    children = [c for c in result.children if c["kind"] in ("Deployment", "Service")]
    for child in children:
        child["metadata"].pop("ownerReferences", None)
        child["metadata"].pop("namespace", None)
    [deployment] = [c for c in children if c["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    pod["nodeSelector"] = dict(NODE_LABELS)
    for container in pod["containers"]:
        container["imagePullPolicy"] = "Never"
    return children


@pytest.fixture(scope="module")
def reward(real_cluster: SimulatedCluster, node_images: dict[str, str]) -> Iterator[dict[str, Any]]:
    """The rendered reward service, Available on the real node: its namespace, Service and pod."""
    namespace = f"real-reward-{uuid.uuid4().hex[:6]}"
    real_cluster.kubectl("create", "namespace", namespace)
    children = reward_children(node_images["reward-service"])
    real_cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps({"kind": "List", "apiVersion": "v1", "items": children})
    )
    [deployment] = [c["metadata"]["name"] for c in children if c["kind"] == "Deployment"]
    [service] = [c for c in children if c["kind"] == "Service"]
    waited = real_cluster.kubectl(
        "wait", "-n", namespace, "--for=condition=Available", "--timeout=180s", f"deployment/{deployment}", check=False
    )
    pods = real_cluster.get_json("pods", "-n", namespace)["items"]
    assert waited.returncode == 0, json.dumps([p.get("status") for p in pods], indent=1)
    [pod] = pods
    yield {"namespace": namespace, "service": service, "pod": pod}
    real_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_reward_pod_runs_in_containerd_and_is_ready_through_its_probes(
    real_cluster: SimulatedCluster, reward: dict[str, Any]
) -> None:
    pod = reward["pod"]
    assert pod["spec"]["nodeName"] == real_cluster.real_node.name if real_cluster.real_node else False
    [status] = pod["status"]["containerStatuses"]
    assert status["ready"] is True and status["started"] is True
    assert status["containerID"].startswith("containerd://")
    # the container is a task of the node's containerd, i.e. a process really started from our image
    tasks = (
        subprocess.run(
            ["ctr", "--address", str(real_cluster.real_node.socket), "-n", "k8s.io", "tasks", "ls"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        if real_cluster.real_node
        else ""
    )
    container_id = status["containerID"].removeprefix("containerd://")
    assert any(line.startswith(container_id) and "RUNNING" in line for line in tasks.splitlines()), tasks
    assert pod["status"]["podIP"].startswith("10.245.0.")


def test_kubectl_logs_and_exec_reach_the_container(real_cluster: SimulatedCluster, reward: dict[str, Any]) -> None:
    name, namespace = reward["pod"]["metadata"]["name"], reward["namespace"]
    logs = real_cluster.kubectl("logs", "-n", namespace, name).stdout
    assert "Uvicorn running on http://0.0.0.0:8000" in logs or "Application startup complete" in logs, logs
    whoami = real_cluster.kubectl("exec", "-n", namespace, name, "--", "id", "-u").stdout.strip()
    assert whoami == "10001"  # the image's non-root user, so this ran inside the container
    resolv = real_cluster.kubectl("exec", "-n", namespace, name, "--", "cat", "/etc/resolv.conf").stdout
    assert [line.split()[1] for line in resolv.splitlines() if line.startswith("nameserver")] == [CLUSTER_DNS]


def test_service_name_resolves_and_answers_from_inside_a_pod(
    real_cluster: SimulatedCluster, reward: dict[str, Any]
) -> None:
    service, namespace = reward["service"], reward["namespace"]
    port = service["spec"]["ports"][0]["port"]
    url = f"http://{service['metadata']['name']}.{namespace}.svc.cluster.local:{port}/ready"
    script = f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=10).status)"
    answer = real_cluster.kubectl(
        "exec", "-n", namespace, reward["pod"]["metadata"]["name"], "--", "python", "-c", script
    )
    assert answer.stdout.strip() == "200"


def test_in_cluster_client_reaches_the_api_server_through_the_kubernetes_service(
    real_cluster: SimulatedCluster, reward: dict[str, Any], node_images: dict[str, str]
) -> None:
    """A pod's default ServiceAccount CA and `https://kubernetes.default.svc` (10.96.0.1 through kube-proxy to
    the address the API server listens on for pods) give a verified TLS connection."""
    namespace = reward["namespace"]
    probe = (
        "import ssl, urllib.request\n"
        "ctx = ssl.create_default_context(cafile='/var/run/secrets/kubernetes.io/serviceaccount/ca.crt')\n"
        "print(urllib.request.urlopen('https://kubernetes.default.svc/version', context=ctx, timeout=10).status)\n"
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "in-cluster-client"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": dict(NODE_LABELS),
            "containers": [
                {
                    "name": "client",
                    "image": node_images["reward-service"],
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", probe],
                }
            ],
        },
    }
    real_cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod))
    real_cluster.kubectl(
        "wait", "-n", namespace, "--for=jsonpath={.status.phase}=Succeeded", "--timeout=120s", "pod/in-cluster-client"
    )
    assert real_cluster.kubectl("logs", "-n", namespace, "in-cluster-client").stdout.strip() == "200"


def test_pod_traffic_to_other_interfaces_is_dropped_while_the_node_runs(real_cluster: SimulatedCluster) -> None:
    rules = subprocess.run(["iptables", "-w", "-S", "FORWARD"], capture_output=True, text=True, check=True).stdout
    ours = [line for line in rules.splitlines() if RULE_COMMENT in line]
    assert any(f"-i {BRIDGE} ! -o {BRIDGE}" in line and line.endswith("-j DROP") for line in ours), rules
