"""Every rendered pod template is judged by the API server's own pod rules before any child exists.

The reconciler runs in-process against the real API server. A value our types let through but Kubernetes
refuses on a pod (here a node-selector key that is no label name) must stop the run at Validated=False with
the API server's words, with no RayCluster, ConfigMap or Secret made: otherwise KubeRay is left retrying
pods it can never create while the run waits forever.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from grpo_operator.cli.loading import parse_run
from grpo_operator.controller.config import load_settings
from grpo_operator.controller.reconciler import Reconciler
from grpo_operator.edges.kube import Kube
from grpo_operator.planning.validation import check
from grpo_operator.render import RenderSettings, render
from kubernetes import config

from tests.support.builders import EXAMPLES
from tests.support.operator_harness import manifest

pytestmark = pytest.mark.integration


def _reconciler(control_plane: Any) -> tuple[Reconciler, Any]:
    api = config.new_client_from_config(config_file=str(control_plane.kubeconfig))  # type: ignore[no-untyped-call]
    return Reconciler(kube=Kube(api), settings=load_settings({"GRPO_RAY_ADDRESS": "http://127.0.0.1:9"})), api


def test_a_pod_rule_violation_stops_the_run_before_any_child_with_the_api_servers_words(
    control_plane: Any, namespace: str, kubectl: Callable[..., Any]
) -> None:
    spec = {"scheduling": {"gpuNodeSelector": {"bad key!": "x"}}}
    kubectl("apply", "-n", namespace, "-f", "-", input=manifest("bad-selector", namespace, spec, ray_token=None))
    body = json.loads(kubectl("get", "grporun", "bad-selector", "-n", namespace, "-o", "json").stdout)
    reconciler, api = _reconciler(control_plane)
    outcome = reconciler.reconcile(body)
    api.close()
    validated = next(c for c in outcome.status.conditions if c.type == "Validated")
    assert validated.status == "False"
    assert "refuses its pod template" in (validated.message or "") and "nodeSelector" in (validated.message or "")
    for kind in ("rayclusters", "configmaps", "secrets"):
        listed = kubectl("get", kind, "-n", namespace, "-l", "grpo.dev/run=bad-selector", "-o", "name").stdout
        assert not listed.strip(), f"{kind} made for a run the API server's pod rules refuse: {listed}"


@pytest.mark.parametrize("example", sorted(p.stem for p in EXAMPLES.glob("*.yaml") if "72b" not in p.stem))
def test_every_examples_pod_templates_pass_the_api_servers_pod_rules(control_plane: Any, example: str) -> None:
    import yaml

    run, _ = parse_run(yaml.safe_load((EXAMPLES / f"{example}.yaml").read_text()))
    assert run is not None
    checked = check(run)
    assert checked.plan is not None
    settings = RenderSettings(reward_image="registry.example/grpo/reward-service@sha256:" + "0" * 64)
    children = render(run, checked.plan, settings).children
    api = config.new_client_from_config(config_file=str(control_plane.kubeconfig))  # type: ignore[no-untyped-call]
    assert Kube(api).pod_template_problems("default", children) == []
    api.close()
