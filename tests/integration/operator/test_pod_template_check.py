"""Every rendered pod template is judged by the API server's own pod rules before any child exists.

The reconciler runs in-process against the real API server. A value Kubernetes refuses on a pod
must never leave KubeRay retrying pods it can never create: the types refuse what they can (here a node-selector
key that is no label name, refused at the run's own admission), and every example's templates pass the pod rules.
"""

from __future__ import annotations

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


def test_a_node_selector_key_no_pod_may_carry_is_refused_at_the_runs_own_admission_and_nothing_is_made(
    control_plane: Any, namespace: str, kubectl: Callable[..., Any]
) -> None:
    # The type now holds the pod's rule (the CRD's pattern), so the run never reaches the reconciler's pod-template
    # dry run: the API server refuses the GRPORun itself, naming the field.
    spec = {"scheduling": {"gpuNodeSelector": {"bad key!": "x"}}}
    applied = kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input=manifest("bad-selector", namespace, spec, ray_token=None),
        check=False,
    )
    assert applied.returncode != 0
    assert "spec.scheduling.gpuNodeSelector" in applied.stderr and "label key" in applied.stderr, applied.stderr
    for kind in ("grporuns", "rayclusters", "configmaps", "secrets"):
        listed = kubectl("get", kind, "-n", namespace, "-o", "name").stdout
        made = [line for line in listed.split() if "bad-selector" in line]
        assert not made, f"{kind} made for a run the API server refuses: {made}"


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
