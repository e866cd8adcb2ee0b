"""The reconciler against the real API server: one status write per reconcile when the status changed and none
otherwise; a spec the API server refuses as a child (a label value from the spec) is Failed/InvalidSpec in the
server's words with no child made. Requests are recorded at `ApiClient.call_api`, which every call goes through."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from grpo_operator.controller.config import OperatorSettings
from grpo_operator.controller.reconciler import Reconciler
from grpo_operator.edges.kube import Kube
from grpo_operator.edges.kubecache import KubeCache
from kubernetes import config

from tests.support.operator_harness import get_run, manifest

pytestmark = pytest.mark.integration


def recorded(kube: Kube) -> list[str]:
    """The requests `kube` sends from now on, as "METHOD path"."""
    api = kube._api
    sent: list[str] = []
    call = api.call_api

    def counting(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(f"{method} {url}")
        return call(method, url, *args, **kwargs)

    api.call_api = counting  # type: ignore[method-assign]
    return sent


def _kube(control_plane: Any) -> Kube:
    return Kube(config.new_client_from_config(str(control_plane.kubeconfig)), KubeCache(resync_seconds=600))


def test_a_reconcile_writes_the_status_once_when_it_changed_and_never_when_it_did_not(
    control_plane: Any, namespace: str, kubectl: Callable[..., Any]
) -> None:
    # Ray on a closed port: the run waits for its RayCluster (never ready here), so only the API server is used.
    run = "writes"
    kubectl("apply", "-f", "-", input=manifest(run, namespace, ray_token=None))
    kube = _kube(control_plane)
    reconciler = Reconciler(kube=kube, settings=OperatorSettings(ray_address="http://127.0.0.1:9"))
    sent = recorded(kube)
    seen = []
    for _ in range(4):
        before = get_run(kubectl, namespace, run).get("status")
        sent.clear()
        reconciler.reconcile({"metadata": {"namespace": namespace, "name": run}})
        after = get_run(kubectl, namespace, run).get("status")
        writes = [r for r in sent if r.startswith("PATCH ") and r.endswith(f"/grporuns/{run}/status")]
        seen.append((after != before, len(writes), (after or {}).get("phase")))
    print("(status changed, status writes, phase) per reconcile:", seen)
    assert all(writes == (1 if changed else 0) for changed, writes, _ in seen), seen
    assert seen[0][:2] == (True, 1) and seen[-1][:2] == (False, 0), seen


def _refuse_rayclusters(kubectl: Callable[..., Any], namespace: str) -> None:
    """A cluster policy (a ValidatingAdmissionPolicy, as a platform team would write one) that refuses every
    RayCluster in `namespace`; returns once the API server enforces it (a policy is compiled asynchronously)."""
    name = f"no-rayclusters-{namespace}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["ray.io"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["rayclusters"],
                    }
                ]
            },
            "validations": [{"expression": "false", "message": "RayClusters are not allowed here by policy"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
        },
    }
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [policy, binding]}))
    probe = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "probe", "namespace": namespace}}
    for _ in range(120):  # bounded: the policy takes effect within a few seconds of its binding
        result = kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(probe), check=False)
        if result.returncode != 0 and "not allowed here by policy" in result.stderr:
            return
        time.sleep(0.5)
    raise AssertionError("the admission policy never took effect")


def test_a_child_the_api_server_refuses_fails_the_run_in_its_words_before_any_child_exists(
    control_plane: Any, namespace: str, kubectl: Callable[..., Any]
) -> None:
    # Spec values that would make a child invalid are refused at admission of the GRPORun itself now (CEL), so the
    # refusal comes from the cluster's own policy, which only the server-side dry run of every child can see.
    _refuse_rayclusters(kubectl, namespace)
    run = "refused"
    kubectl("apply", "-f", "-", input=manifest(run, namespace, ray_token=None))
    kube = _kube(control_plane)
    reconciler = Reconciler(kube=kube, settings=OperatorSettings(ray_address="http://127.0.0.1:9"))
    try:
        outcome = reconciler.reconcile({"metadata": {"namespace": namespace, "name": run}})
    finally:
        policy = f"no-rayclusters-{namespace}"
        kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", policy, check=False)
    status = get_run(kubectl, namespace, run)["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "InvalidSpec"), status
    assert "not allowed here by policy" in status["message"], status["message"]
    validated = next(c for c in status["conditions"] if c["type"] == "Validated")
    assert (validated["status"], validated["reason"]) == ("False", "InvalidSpec")
    assert outcome.status.reason == "InvalidSpec"
    made = json.loads(
        kubectl(
            "get",
            "configmaps,secrets,networkpolicies,rayclusters",
            "-n",
            namespace,
            "-l",
            f"grpo.dev/run={run}",
            "-o",
            "json",
        ).stdout
    )
    assert made["items"] == []
