"""The Helm chart installed into the real API server, and the operator running with nothing but the chart's
ServiceAccount token: its RBAC is enough for a run to reach Succeeded, and no broader than that.

Both RBAC modes are covered: a ClusterRole (the default, every namespace) and a Role in each watched
namespace (`watchNamespaces`). The operator's own pod cannot run here (no kubelet), so the same code runs as
a subprocess with a kubeconfig holding the ServiceAccount's token instead of the admin certificate. The run
uses a remote reward service, so every kind of child (ConfigMap, NetworkPolicy, RayCluster, Deployment, Service,
PodDisruptionBudget) is applied, read and, for the RayCluster, deleted under that token, and its Ray auth token
Secret is read under it. Secrets: get and create only, never list or watch.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from grpo_dev.localcluster import tool_path
from grpo_operator.render import names
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from tests.support.argocd import health as argocd_health
from tests.support.chartinstall import (
    ChartOperator,
    Install,
    assert_nothing_denied_but_kopf_scanning,
    can_i,
    installed,
)
from tests.support.operator_harness import (
    REWARD_IMAGE,
    fake,
    free_port,
    manifest,
    phase_is,
    play_kubelet_ready,
    play_kuberay_ready,
    wait_for,
)

pytestmark = pytest.mark.integration


@pytest.fixture(params=["cluster", "namespaced"])
def install(request: pytest.FixtureRequest, control_plane: Any, namespace: str, kubectl: Any) -> Iterator[Install]:
    """The chart installed with `helm install`: cluster-wide into the run's namespace, or into its own
    namespace watching only the run's namespace."""
    with installed(control_plane, kubectl, namespace, request.param) as found:
        yield found


def test_the_installed_chart_creates_a_restricted_operator_pod(install: Install, kubectl: Any) -> None:
    # No kubelet runs it, but the ReplicaSet controller only gets a Pod past admission if it is restricted-compliant.
    pods = wait_for(
        "operator pod",
        lambda: json.loads(
            kubectl(
                "get",
                "pods",
                "-n",
                install.operator_namespace,
                "-l",
                "app.kubernetes.io/name=grpo-operator",
                "-o",
                "json",
            ).stdout
        )["items"],
    )
    [pod] = pods
    assert pod["spec"]["serviceAccountName"] == install.service_account
    [container] = pod["spec"]["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    events = kubectl("get", "events", "-n", install.operator_namespace, "-o", "json").stdout
    assert "violates PodSecurity" not in events


@pytest.fixture
def reward_metrics() -> Iterator[int]:
    """The reward service's /metrics, played by a registry with a healthy error ratio."""
    registry = CollectorRegistry()
    Gauge("reward_service_service_error_ratio", "service errors / requests", registry=registry).set(0.0)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    yield port
    server.shutdown()
    thread.join(timeout=5)


def test_the_service_account_token_alone_takes_a_remote_reward_run_to_succeeded(  # noqa: PLR0917 - pytest fixtures
    install: Install,
    control_plane: Any,
    namespace: str,
    kubectl: Any,
    ray_head: Any,
    reward_metrics: int,
    tmp_path: Path,
) -> None:
    token = control_plane.token_kubeconfig(install.operator_namespace, install.service_account)
    op = ChartOperator(
        install,
        token,
        namespace,
        ray_head.dashboard_url,
        tmp_path,
        GRPO_REWARD_METRICS_URL=f"http://127.0.0.1:{reward_metrics}/metrics",
    )
    op.start()
    try:
        spec = fake(
            "--fake-reward",
            "0.5",
            rollouts=3,
            reward={"type": "remote", "remote": {"replicas": 1, "image": REWARD_IMAGE}},
        )
        kubectl("apply", "-f", "-", input=manifest("rbac", namespace, spec))
        wait_for(
            "reward pods", lambda: play_kubelet_ready(kubectl, namespace, "grpo.dev/run=rbac,grpo.dev/component=reward")
        )
        provisioning = wait_for("Provisioning", lambda: phase_is(kubectl, namespace, "rbac", "Pending", "Provisioning"))
        assert argocd_health(provisioning)["status"] == "Progressing"  # what Argo CD shows for the live object
        play_kuberay_ready(kubectl, namespace, "rbac")
        done = wait_for("Succeeded", lambda: phase_is(kubectl, namespace, "rbac", "Succeeded", "Failed"), timeout=180)
        assert done["status"]["phase"] == "Succeeded", (done["status"], op.logs()[-3000:])
        assert argocd_health(done)["status"] == "Healthy"
        reward = next(c for c in done["status"]["conditions"] if c["type"] == "RewardServiceReady")
        assert reward["status"] == "True"
        # Every child kind was applied under the token; the finished run's RayCluster was deleted under it.
        for kind, name in (
            ("configmap", names.config_map("rbac")),
            ("deployment", names.reward_service("rbac")),
            ("service", names.reward_service("rbac")),
            ("pdb", names.reward_service("rbac")),
            ("networkpolicy", names.network_policy("rbac", "reward")),
        ):
            kubectl("get", kind, name, "-n", namespace)
        wait_for(
            "RayCluster deleted",
            lambda: (
                kubectl("get", "raycluster", names.ray_cluster("rbac"), "-n", namespace, check=False).returncode != 0
            ),
        )
        events = json.loads(kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
        assert "Succeeded" in {e["reason"] for e in events if e["involvedObject"]["name"] == "rbac"}
        # Deleting the run goes through kopf's finalizer, removed under the token too.
        kubectl("delete", "grporun", "rbac", "-n", namespace, "--wait=true", "--timeout=60s")
    finally:
        op.stop()
    assert_nothing_denied_but_kopf_scanning(op.logs())


NEEDED = [
    ("list", "grporuns.grpo.dev"),
    ("watch", "grporuns.grpo.dev"),
    ("patch", "grporuns.grpo.dev"),
    ("patch", "grporuns.grpo.dev", "--subresource=status"),
    ("create", "events"),
    ("create", "configmaps"),
    ("patch", "configmaps"),
    ("create", "services"),
    ("patch", "services"),
    ("create", "deployments.apps"),
    ("patch", "deployments.apps"),
    ("get", "deployments.apps"),
    ("create", "poddisruptionbudgets.policy"),
    ("patch", "poddisruptionbudgets.policy"),
    ("create", "rayclusters.ray.io"),
    ("patch", "rayclusters.ray.io"),
    ("get", "rayclusters.ray.io"),
    ("delete", "rayclusters.ray.io"),
    ("list", "pods"),
    ("watch", "pods"),  # pods watched (edges/watchcache.py)
    ("list", "rayclusters.ray.io"),
    ("watch", "rayclusters.ray.io"),  # children watched (controller/children.py)
    ("list", "deployments.apps"),
    ("watch", "deployments.apps"),
    ("get", "secrets"),
    ("create", "secrets"),  # the run's Ray auth token Secret, by name
    ("create", "podtemplates"),  # dry runs of the rendered pod templates (nothing is stored)
    ("create", "networkpolicies.networking.k8s.io"),
    ("patch", "networkpolicies.networking.k8s.io"),
]

FORBIDDEN = [
    ("list", "secrets"),
    ("watch", "secrets"),
    ("patch", "secrets"),
    ("update", "secrets"),
    ("delete", "secrets"),
    ("delete", "networkpolicies.networking.k8s.io"),
    ("list", "networkpolicies.networking.k8s.io"),
    ("delete", "grporuns.grpo.dev"),
    ("create", "grporuns.grpo.dev"),
    ("update", "grporuns.grpo.dev"),
    ("create", "pods"),
    ("delete", "pods"),
    ("create", "pods", "--subresource=exec"),
    ("get", "pods", "--subresource=log"),
    ("delete", "configmaps"),
    ("get", "configmaps"),
    ("delete", "deployments.apps"),
    ("delete", "services"),
    ("create", "rayjobs.ray.io"),
    ("get", "rayjobs.ray.io"),
    ("create", "rayservices.ray.io"),
    ("create", "serviceaccounts", "--subresource=token"),
    ("create", "roles.rbac.authorization.k8s.io"),
    ("create", "rolebindings.rbac.authorization.k8s.io"),
    ("impersonate", "serviceaccounts"),
    ("create", "persistentvolumeclaims"),
    ("patch", "events"),
    ("get", "podtemplates"),
    ("list", "podtemplates"),
    ("delete", "podtemplates"),
    ("patch", "podtemplates"),
]

CLUSTER_FORBIDDEN = [
    ("delete", "namespaces"),
    ("create", "namespaces"),
    ("list", "nodes"),
    ("list", "secrets", "--all-namespaces"),
    ("watch", "secrets", "--all-namespaces"),
    ("create", "customresourcedefinitions.apiextensions.k8s.io"),
    ("delete", "customresourcedefinitions.apiextensions.k8s.io"),
    ("patch", "customresourcedefinitions.apiextensions.k8s.io"),
    ("create", "clusterroles.rbac.authorization.k8s.io"),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
    ("escalate", "clusterroles.rbac.authorization.k8s.io"),
    ("bind", "clusterroles.rbac.authorization.k8s.io"),
    ("create", "mutatingwebhookconfigurations.admissionregistration.k8s.io"),
    # GRPORuntimes belong to the platform team: the operator only reads them
    ("create", "grporuntimes.grpo.dev"),
    ("patch", "grporuntimes.grpo.dev"),
    ("update", "grporuntimes.grpo.dev"),
    ("delete", "grporuntimes.grpo.dev"),
]

# Cluster-scoped, so granted in both modes: the runtime a run names (GET), watched for the runs waiting on it.
CLUSTER_NEEDED = [
    ("get", "grporuntimes.grpo.dev"),
    ("list", "grporuntimes.grpo.dev"),
    ("watch", "grporuntimes.grpo.dev"),
]


def test_the_service_account_can_do_what_the_operator_calls_and_nothing_broader(
    install: Install, namespace: str, kubectl: Any
) -> None:
    missing = [check for check in NEEDED if not can_i(kubectl, install, *check, "-n", namespace)]
    missing += [check for check in CLUSTER_NEEDED if not can_i(kubectl, install, *check)]
    assert missing == []
    allowed = [check for check in FORBIDDEN if can_i(kubectl, install, *check, "-n", namespace)]
    allowed += [check for check in CLUSTER_FORBIDDEN if can_i(kubectl, install, *check)]
    assert allowed == []
    other = "default"  # a namespace the operator was not installed for
    if install.mode == "namespaced":
        assert not can_i(kubectl, install, "list", "grporuns.grpo.dev", "-n", other)
        assert not can_i(kubectl, install, "create", "rayclusters.ray.io", "-n", other)
        assert not can_i(kubectl, install, "list", "grporuns.grpo.dev", "--all-namespaces")
    else:
        assert can_i(kubectl, install, "list", "grporuns.grpo.dev", "--all-namespaces")


def test_acting_with_the_token_listing_or_changing_secrets_is_refused_by_the_api_server(
    install: Install, control_plane: Any, namespace: str, kubectl: Any
) -> None:
    kubectl("create", "secret", "generic", "hf-token", "-n", namespace, "--from-literal=token=not-for-the-operator")
    token = control_plane.token_kubeconfig(install.operator_namespace, install.service_account)
    assert kubectl("get", "secrets", "-n", namespace, check=False).returncode == 0  # the admin lists them ...
    refused = _kubectl_with(token, "get", "secrets", "-n", namespace)
    assert refused.returncode != 0 and "Forbidden" in refused.stderr  # ... the operator cannot find them
    refused = _kubectl_with(token, "delete", "secret", "hf-token", "-n", namespace)
    assert refused.returncode != 0 and "Forbidden" in refused.stderr
    refused = _kubectl_with(token, "delete", "namespace", namespace, "--wait=false")
    assert refused.returncode != 0 and "Forbidden" in refused.stderr
    assert _kubectl_with(token, "get", "grporuns", "-n", namespace).returncode == 0


def _kubectl_with(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tool_path("kubectl")), f"--kubeconfig={kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
