"""`grpo doctor` judges the operator's ServiceAccount against `OPERATOR_RULES`: the chart's RBAC template renders
exactly those permissions for each setting that changes them (watched namespaces, replicas, network policies), so
doctor and the chart cannot drift apart."""

from __future__ import annotations

from typing import Any

import pytest
from grpo_operator.cli.doctorchecks import operator_needs

from tests.support.helm import by_kind, template

pytestmark = pytest.mark.integration


def _granted(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.mark.parametrize(
    ("sets", "kind", "all_namespaces", "peering", "policies"),
    [
        ((), "ClusterRole", True, False, True),
        (("networkPolicies.enabled=false",), "ClusterRole", True, False, False),
        (("replicas=2",), "ClusterRole", True, True, True),
        (("watchNamespaces={team-a}",), "Role", False, False, True),
        (("watchNamespaces={team-a}", "replicas=3", "networkPolicies.enabled=false"), "Role", False, True, False),
    ],
    ids=[
        "the defaults",
        "no network policies",
        "two replicas",
        "one namespace",
        "one namespace, three replicas, no network policies",
    ],
)
def test_the_chart_grants_the_operator_exactly_what_doctor_checks_for(
    sets: tuple[str, ...], kind: str, all_namespaces: bool, peering: bool, policies: bool
) -> None:
    # The GRPORuntime reader is a ClusterRole of its own in every mode, and the status key's Role is in the
    # operator's own namespace (test_chart.py checks both): doctor judges the namespaced rules.
    [role] = [
        r for r in by_kind(template(*sets), kind) if not r["metadata"]["name"].endswith(("-runtimes", "-status-key"))
    ]
    assert _granted(role) == operator_needs(all_namespaces=all_namespaces, peering=peering, policies=policies)
