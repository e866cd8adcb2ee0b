"""A dry run of a child that the real API server answers with a 500 is a server error, not a verdict on the run
(issue #46): within one reconcile the run's status says which child and what the server said, nothing is applied,
and no exception escapes; once the server answers, the next reconcile goes on.

The 500 is the API server's own: a validating webhook on RayClusters of the test's namespace that nothing serves
(failurePolicy Fail), which the API server reports as `failed calling webhook` with status 500, dry runs included
(sideEffects None). The reconciler runs in-process against it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from grpo_operator.controller.config import load_settings
from grpo_operator.controller.reconciler import Reconciler
from grpo_operator.edges.kube import Kube
from kubernetes import config

from tests.support.operator_harness import manifest

pytestmark = pytest.mark.integration


@pytest.fixture
def failing_webhook(namespace: str, kubectl: Callable[..., Any]) -> Iterator[str]:
    name = f"grpo-test-500-{namespace}"
    hook = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "fail.grpo.test",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 2,
                "clientConfig": {"url": "https://127.0.0.1:9/validate"},
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "rules": [
                    {
                        "apiGroups": ["ray.io"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["rayclusters"],
                    }
                ],
            }
        ],
    }
    kubectl("apply", "-f", "-", input=yaml.safe_dump(hook))
    try:
        yield name
    finally:
        kubectl("delete", "validatingwebhookconfiguration", name, "--ignore-not-found")


def test_a_500_from_the_dry_run_is_said_in_the_status_within_one_reconcile_and_nothing_is_applied(
    control_plane: Any, namespace: str, kubectl: Callable[..., Any], failing_webhook: str
) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=manifest("dry-500", namespace))
    body = json.loads(kubectl("get", "grporun", "dry-500", "-n", namespace, "-o", "json").stdout)
    api = config.new_client_from_config(config_file=str(control_plane.kubeconfig))  # type: ignore[no-untyped-call]
    reconciler = Reconciler(kube=Kube(api), settings=load_settings({"GRPO_RAY_ADDRESS": "http://127.0.0.1:9"}))
    outcome = reconciler.reconcile(body)  # no exception: the 500 is an answer of its own
    stored = json.loads(kubectl("get", "grporun", "dry-500", "-n", namespace, "-o", "json").stdout)["status"]
    assert (stored["phase"], stored["reason"]) == ("Pending", "APIServerUnavailable"), stored
    assert stored["message"].startswith("the API server answered 500 to the dry run of RayCluster dry-500"), stored
    assert "failed calling webhook" in stored["message"], stored
    assert outcome.status.message == stored["message"]
    assert kubectl("get", "raycluster", "-n", namespace, "-o", "name").stdout.strip() == "", "nothing is applied"

    kubectl("delete", "validatingwebhookconfiguration", failing_webhook)
    for _ in range(40):  # the API server drops the webhook from its admission chain shortly after the delete
        body = json.loads(kubectl("get", "grporun", "dry-500", "-n", namespace, "-o", "json").stdout)
        outcome = reconciler.reconcile(body)
        if outcome.status.reason != "APIServerUnavailable":
            break
        time.sleep(0.25)
    assert outcome.status.reason != "APIServerUnavailable", outcome.status
    assert kubectl("get", "raycluster", "-n", namespace, "-o", "name").stdout.strip(), "applied once it answers"
    api.close()
