"""The Helm chart installed into the real API server, and the operator run on nothing but the chart's ServiceAccount
token: what the chart RBAC tests (tests/integration/operator/test_chart_rbac.py) and the runtime copy's
(tests/integration/chart/test_runtime_copy_rbac.py) share.

`installed(...)` installs the chart cluster-wide into the run's namespace ("cluster") or into a namespace of its own
watching only the run's ("namespaced"), and uninstalls it after. The operator's own pod cannot run here (no
kubelet), so `ChartOperator` runs the same code as a subprocess with the installed Deployment's arguments and
GRPO_* settings, and a kubeconfig holding the ServiceAccount's token instead of the admin certificate.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from tests.support.helm import CHART, helm
from tests.support.operator_harness import Operator, free_port, wait_for


@dataclass
class Install:
    release: str
    operator_namespace: str
    service_account: str
    mode: str
    container: dict[str, Any]  # the operator container of the installed Deployment

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.operator_namespace}:{self.service_account}"

    def container_env(self, name: str) -> str:
        """The value the chart gives the operator's environment variable `name`."""
        return str(next(e["value"] for e in self.container.get("env", []) if e["name"] == name))


@contextmanager
def installed(control_plane: Any, kubectl: Any, namespace: str, mode: str) -> Iterator[Install]:
    """The chart installed with `helm install`: cluster-wide into the run's namespace (`mode` "cluster"), or into
    its own namespace watching only the run's namespace ("namespaced")."""
    release = f"grpo-{uuid.uuid4().hex[:6]}"
    operator_ns = namespace if mode == "cluster" else f"grpo-system-{uuid.uuid4().hex[:6]}"
    if mode == "namespaced":
        kubectl("create", "namespace", operator_ns)
    # The Deployment's pod must pass the "restricted" Pod Security Standard (enforced by the API server).
    kubectl("label", "namespace", operator_ns, "pod-security.kubernetes.io/enforce=restricted")
    sets = ["--set", f"watchNamespaces={{{namespace}}}"] if mode == "namespaced" else []
    # The control plane fixture applied crds/ already (field manager grpo-localcluster); helm applies the chart's
    # copy server-side: the same file (test_the_chart_ships_the_generated_crd), so it may take the fields over.
    helm(
        "install",
        release,
        str(CHART),
        "--namespace",
        operator_ns,
        f"--kubeconfig={control_plane.kubeconfig}",
        "--force-conflicts",
        *sets,
    )
    deployment = json.loads(
        kubectl("get", "deployment", f"{release}-grpo-operator", "-n", operator_ns, "-o", "json").stdout
    )
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    found = Install(release, operator_ns, f"{release}-grpo-operator", mode, container)
    # The API server's RBAC authorizer learns new bindings from its informers, a moment after helm returns (longer
    # under load): the operator started before that would be refused for what the chart does grant. Wait until
    # each of the chart's bindings authorizes, as a pod that starts after its RBAC would see it.
    for check in (
        ("list", "grporuns.grpo.dev", "-n", namespace),  # the run namespaces' (Cluster)Role
        ("create", "secrets", "-n", operator_ns),  # the status key's Role
        ("list", "grporuntimes.grpo.dev"),  # the runtimes' ClusterRole
    ):
        wait_for(f"the chart's RBAC to authorize {' '.join(check)}", partial(can_i, kubectl, found, *check))
    try:
        yield found
    finally:
        helm("uninstall", release, "--namespace", operator_ns, f"--kubeconfig={control_plane.kubeconfig}", check=False)
        # The chart keeps its default GRPORuntime on uninstall (helm.sh/resource-policy: keep): the next install
        # in this control plane would find it owned by this release and refuse to install.
        kubectl("delete", "grporuntime", "default", "--ignore-not-found", check=False)
        if mode == "namespaced":
            kubectl("delete", "namespace", operator_ns, "--wait=false", check=False)


class ChartOperator(Operator):
    """The operator started with the installed Deployment's own arguments and GRPO_* settings (the liveness
    endpoint moved to loopback), authenticated by the ServiceAccount token instead of the pod's mount."""

    def __init__(self, install: Install, kubeconfig: Path, namespace: str, ray_url: str, log_dir: Path, **env: str):
        chart_env = {e["name"]: e["value"] for e in install.container.get("env", []) if "value" in e}
        super().__init__(kubeconfig, namespace, ray_url, log_dir, **{**chart_env, "GRPO_METRICS_PORT": "0", **env})
        self.args = [
            a if not a.startswith("--liveness=") else f"--liveness=http://127.0.0.1:{free_port()}/healthz"
            for a in install.container["args"]
        ]


def can_i(kubectl: Any, install: Install, *args: str) -> bool:
    out: str = kubectl("auth", "can-i", f"--as={install.user}", *args, check=False).stdout
    return out.strip() == "yes"


def assert_nothing_denied_but_kopf_scanning(logs: str) -> None:
    """No call of the operator was refused. Allowed: kopf's optional scanning of namespaces and CRDs (it falls
    back to the namespaces it was given), and writes into namespaces other tests left terminating."""
    denied = [line for line in logs.splitlines() if "403" in line or "Forbidden" in line]
    tolerated = (
        "Not enough permissions",
        "'kind': 'namespaces'",
        "'kind': 'customresourcedefinitions'",
        "because it is being terminated",
    )
    refused = [line for line in denied if not any(t in line for t in tolerated)]
    assert refused == [], "\n".join(refused)
