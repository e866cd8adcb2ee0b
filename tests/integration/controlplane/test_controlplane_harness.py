"""The test control plane behaves like a cluster: real versions, authn, RBAC, KubeRay CRDs, controllers."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from grpo_dev.localcluster import ControlPlane, tool_path
from grpo_dev.localcluster.build import kuberay_crd_dir, kwok_stage_dir
from grpo_dev.localcluster.versions import KUBERNETES_VERSION

pytestmark = pytest.mark.integration

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def kubectl_as(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tool_path("kubectl")), f"--kubeconfig={kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_api_server_is_ready_and_runs_the_pinned_kubernetes_release(kubectl: Kubectl) -> None:
    readyz = kubectl("get", "--raw", "/readyz?verbose").stdout
    assert "readyz check passed" in readyz
    assert "[+]etcd ok" in readyz
    version = json.loads(kubectl("version", "-o", "json", check=False).stdout)
    assert version["serverVersion"]["gitVersion"] == KUBERNETES_VERSION


def test_the_python_client_talks_to_the_same_api_server(control_plane: ControlPlane, namespace: str) -> None:
    from kubernetes import client

    with control_plane.api_client() as api:
        names = [ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items]
    assert namespace in names


def test_serviceaccount_token_is_authenticated_and_rbac_denies_what_no_role_grants(
    control_plane: ControlPlane, namespace: str, kubectl: Kubectl
) -> None:
    kubectl("create", "serviceaccount", "reader", "-n", namespace)
    token_config = control_plane.token_kubeconfig(namespace, "reader")

    whoami = kubectl_as(token_config, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
    assert whoami.returncode == 0, whoami.stderr
    assert whoami.stdout == f"system:serviceaccount:{namespace}:reader"

    denied = kubectl_as(token_config, "get", "configmaps", "-n", namespace)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()
    assert 'cannot list resource "configmaps"' in denied.stderr

    kubectl("create", "role", "cm-reader", "--verb=get,list", "--resource=configmaps", "-n", namespace)
    kubectl(
        "create",
        "rolebinding",
        "cm-reader",
        "--role=cm-reader",
        f"--serviceaccount={namespace}:reader",
        "-n",
        namespace,
    )
    deadline = time.monotonic() + 60  # the RBAC authorizer sees new bindings through its informer
    while time.monotonic() < deadline:
        allowed = kubectl(
            "auth",
            "can-i",
            "list",
            "configmaps",
            "-n",
            namespace,
            f"--as=system:serviceaccount:{namespace}:reader",
            check=False,
        )
        if allowed.stdout.strip() == "yes":
            break
        time.sleep(0.5)
    listed = kubectl_as(token_config, "get", "configmaps", "-n", namespace, "-o", "name")
    assert listed.returncode == 0, listed.stderr
    assert "configmap/kube-root-ca.crt" in listed.stdout

    secrets = kubectl_as(token_config, "get", "secrets", "-n", namespace)
    assert secrets.returncode != 0
    assert 'cannot list resource "secrets"' in secrets.stderr


def test_kuberay_crds_are_established_and_enforce_their_schema(namespace: str, kubectl: Kubectl) -> None:
    for crd in ("rayclusters.ray.io", "rayjobs.ray.io"):
        established = kubectl(
            "get", "crd", crd, "-o", "jsonpath={.status.conditions[?(@.type=='Established')].status}"
        ).stdout
        assert established == "True", crd
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "probe", "namespace": namespace},
        "spec": {
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.55.0"}]}},
            }
        },
    }
    accepted = kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(cluster))
    assert "raycluster.ray.io/probe created (server dry run)" in accepted.stdout

    cluster["spec"]["headGroupSpec"]["rayStartParams"] = "num-cpus=1"  # type: ignore[index]
    rejected = kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(cluster), check=False)
    assert rejected.returncode != 0
    assert "spec.headGroupSpec.rayStartParams" in rejected.stderr


def test_deleting_an_owner_garbage_collects_its_children(namespace: str, kubectl: Kubectl) -> None:
    kubectl("create", "configmap", "owner", "-n", namespace)
    uid = kubectl("get", "configmap", "owner", "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout
    child = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "child",
            "namespace": namespace,
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}],
        },
    }
    kubectl("apply", "-f", "-", input=json.dumps(child))
    kubectl("delete", "configmap", "owner", "-n", namespace)
    kubectl("wait", "--for=delete", "configmap/child", "-n", namespace, "--timeout=120s")
    assert kubectl("get", "configmap", "child", "-n", namespace, check=False).returncode != 0


def test_deleting_a_namespace_removes_it_and_its_contents(kubectl: Kubectl) -> None:
    name = f"doomed-{time.monotonic_ns() % 10**8}"
    kubectl("create", "namespace", name)
    kubectl("create", "configmap", "data", "-n", name)
    kubectl("delete", "namespace", name, "--timeout=120s")
    gone = kubectl("get", "namespace", name, check=False)
    assert gone.returncode != 0
    assert "NotFound" in gone.stderr


def test_existing_binaries_are_used_without_building_anything(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in (
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubectl",
        "helm",
        "kwok",
        "ray-operator",
    ):
        (bin_dir / name).symlink_to(tool_path(name))
    for path in tool_path("kueue").parent.iterdir():  # Kueue's component holds its manager and its CRDs
        if not (bin_dir / path.name).exists():
            (bin_dir / path.name).symlink_to(path)
    crd_dir = kuberay_crd_dir()
    empty_cache = tmp_path / "cache"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "GRPO_CACHE_DIR": str(empty_cache),
        "GRPO_CONTROL_PLANE_BIN_DIR": str(bin_dir),
        "GRPO_KUBERAY_CRD_DIR": str(crd_dir),
        "GRPO_KWOK_STAGE_DIR": str(kwok_stage_dir()),
    }
    result = subprocess.run(
        [sys.executable, "-m", "grpo_dev.localcluster", "build"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(" external ") == 9, result.stdout
    assert not empty_cache.exists()


def test_a_missing_go_toolchain_is_reported_with_the_fix(tmp_path: Path) -> None:
    env = {"PATH": "/nonexistent", "HOME": str(tmp_path), "GRPO_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "-m", "grpo_dev.localcluster", "build"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "the `go` command is not on PATH" in result.stderr
    assert "GRPO_CONTROL_PLANE_BIN_DIR" in result.stderr


def test_a_legacy_serviceaccount_token_secret_is_filled_and_accepted(
    control_plane: ControlPlane, namespace: str, kubectl: Kubectl
) -> None:
    kubectl("create", "serviceaccount", "legacy", "-n", namespace)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/service-account-token",
        "metadata": {
            "name": "legacy-token",
            "namespace": namespace,
            "annotations": {"kubernetes.io/service-account.name": "legacy"},
        },
    }
    kubectl("apply", "-f", "-", input=json.dumps(secret))
    kubectl("wait", "secret/legacy-token", "-n", namespace, "--for=jsonpath={.data.token}", "--timeout=60s")
    encoded = kubectl("get", "secret", "legacy-token", "-n", namespace, "-o", "jsonpath={.data.token}").stdout
    token = base64.b64decode(encoded).decode()
    whoami = kubectl_as(
        Path("/dev/null"),
        f"--server={control_plane.server}",
        f"--token={token}",
        f"--certificate-authority={control_plane.workdir / 'pki' / 'ca.crt'}",
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    )
    assert whoami.stdout == f"system:serviceaccount:{namespace}:legacy", whoami.stderr
