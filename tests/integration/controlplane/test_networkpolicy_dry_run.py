"""The rendered NetworkPolicies of every example are accepted by the real API server (server-side dry run, which
runs the API server's full validation of networking.k8s.io/v1), with the chart's settings and with egress
restricted. Who may reach which port is tests/render/test_networkpolicy.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_operator.render import RenderSettings
from grpo_operator.render.networkpolicy import network_policies

from tests.support.builders import SETTINGS, run_of, valid_examples

pytestmark = pytest.mark.integration

CHART = RenderSettings(
    reward_image=SETTINGS.reward_image,
    operator_namespace="grpo-system",
    operator_pod_labels={"app.kubernetes.io/name": "grpo-operator", "app.kubernetes.io/instance": "g"},
    prometheus_namespace_labels={"kubernetes.io/metadata.name": "monitoring"},
    prometheus_pod_labels={"app.kubernetes.io/name": "prometheus"},
)
VARIANTS = {
    "chart": CHART,
    "egress-restricted": CHART.model_copy(update={"egress_cidrs": ("10.0.0.0/8", "fd00::/8")}),
    "defaults": RenderSettings(reward_image=SETTINGS.reward_image),
}


def policies_of(example: Path, namespace: str, settings: RenderSettings) -> list[dict[str, Any]]:
    doc = yaml.safe_load(example.read_text())
    doc["metadata"]["namespace"] = namespace
    return network_policies(run_of(doc), settings)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_api_server_accepts_the_policies_of_every_example(variant: str, namespace: str, kubectl: Any) -> None:
    for example in valid_examples():
        policies = policies_of(example, namespace, VARIANTS[variant])
        assert policies, example.name
        out = kubectl(
            "apply",
            "--dry-run=server",
            "-o",
            "json",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": policies}),
        ).stdout
        returned = json.loads(out)
        items = returned.get("items", [returned])
        # What the API server would store is what we rendered (no field dropped or defaulted away).
        assert [i["spec"] for i in items] == [p["spec"] for p in policies], example.name
