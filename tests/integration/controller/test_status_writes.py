"""The reconciler against the real API server: one status write per reconcile when the status changed and none
otherwise; a spec the API server refuses as a child (a label value from the spec) is Failed/InvalidSpec in the
server's words with no child made. Requests are recorded at `ApiClient.call_api`, which every call goes through."""

from __future__ import annotations

import json
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


def test_a_spec_value_the_api_server_refuses_as_a_label_fails_the_run_in_its_words_before_any_child(
    control_plane: Any, namespace: str, kubectl: Callable[..., Any]
) -> None:
    run = "longlabel"
    priority = "p" * 70  # a valid priorityClassName (a DNS subdomain) but over a label value's 63 characters
    spec = {"scheduling": {"priorityClassName": priority, "gang": {"scheduler": "Volcano"}}}
    kubectl("apply", "-f", "-", input=manifest(run, namespace, spec, ray_token=None))
    kube = _kube(control_plane)
    reconciler = Reconciler(kube=kube, settings=OperatorSettings(ray_address="http://127.0.0.1:9"))
    outcome = reconciler.reconcile({"metadata": {"namespace": namespace, "name": run}})
    status = get_run(kubectl, namespace, run)["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "InvalidSpec"), status
    assert "63" in status["message"], status["message"]
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
