"""Who may open a connection to which port of a run, read off the rendered NetworkPolicies.

`allowed` evaluates the policies the way the NetworkPolicy API defines them (k8s.io/api/networking/v1
types.go, NetworkPolicySpec/NetworkPolicyPeer): a pod no Ingress policy selects accepts everything; a selected
pod accepts a connection when some rule of some selecting policy matches both the source (any peer: a
podSelector alone means the policy's namespace, with a namespaceSelector it means those namespaces; both in
one peer must match together) and the port (no ports: every port). The API server's acceptance of the same
objects is tests/controlplane/test_networkpolicy_dry_run.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from grpo_operator.planning.plan import make_plan
from grpo_operator.render import RenderSettings, names, render
from grpo_operator.render.networkpolicy import network_policies

from tests.support.builders import SETTINGS, example, run_of

RUN, NS, OPS = "r1", "team-a", "grpo-system"
CHART = RenderSettings(
    reward_image=SETTINGS.reward_image,
    operator_namespace=OPS,
    operator_pod_labels={"app.kubernetes.io/name": "grpo-operator", "app.kubernetes.io/instance": "g"},
    prometheus_namespace_labels={"kubernetes.io/metadata.name": "monitoring"},
    prometheus_pod_labels={"app.kubernetes.io/name": "prometheus"},
)


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str] = field(default_factory=dict)

    def namespace_labels(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace}


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        value, op = labels.get(expr["key"]), expr["operator"]
        if (op == "In" and value not in expr["values"]) or (op == "NotIn" and value in expr["values"]):
            return False
        if (op == "Exists" and value is None) or (op == "DoesNotExist" and value is not None):
            return False
    return True


def peer_matches(peer: dict[str, Any], source: Pod, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        return False  # pod-to-pod questions only
    if "namespaceSelector" in peer:
        if not matches(peer["namespaceSelector"], source.namespace_labels()):
            return False
    elif source.namespace != policy_namespace:
        return False
    return matches(peer.get("podSelector", {}), source.labels)


def allowed(policies: list[dict[str, Any]], source: Pod, dest: Pod, port: int) -> bool:
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == dest.namespace
        and "Ingress" in p["spec"]["policyTypes"]
        and matches(p["spec"]["podSelector"], dest.labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress", []):
            ports = rule.get("ports")
            if ports is not None and not any(p.get("port") == port for p in ports):
                continue
            peers = rule.get("from")
            if peers is None or any(peer_matches(peer, source, policy["metadata"]["namespace"]) for peer in peers):
                return True
    return False


def run_pod(component: str, run: str = RUN, namespace: str = NS) -> Pod:
    return Pod(namespace, names.labels(run, component))


HEAD, WORKER, REWARD = run_pod("ray-head"), run_pod("ray-worker"), run_pod("reward")
OPERATOR = Pod(OPS, {"app.kubernetes.io/name": "grpo-operator", "app.kubernetes.io/instance": "g"})
PROMETHEUS = Pod("monitoring", {"app.kubernetes.io/name": "prometheus"})
NEIGHBOUR = Pod(NS, {"app": "notebook"})  # another pod in the run's namespace
OTHER_RUN_WORKER = run_pod("ray-worker", run="r2")
STRANGER = Pod("elsewhere", {"app.kubernetes.io/name": "grpo-operator"})  # right labels, wrong namespace
DASHBOARD, CLIENT, GCS, OBJECT_MANAGER, RAY_METRICS = 8265, 10001, 6379, 8076, 8080
TRAINER_METRICS, LAUNCHER_METRICS, REWARD_PORT = 9400, 9465, 8000

# (source, destination, port, may connect)
TABLE = [
    (OPERATOR, HEAD, DASHBOARD, True),
    (OPERATOR, HEAD, CLIENT, True),
    (OPERATOR, HEAD, GCS, False),
    (WORKER, HEAD, DASHBOARD, True),
    (WORKER, HEAD, GCS, True),
    (WORKER, HEAD, OBJECT_MANAGER, True),
    (REWARD, HEAD, DASHBOARD, True),
    (REWARD, HEAD, GCS, False),
    (HEAD, WORKER, OBJECT_MANAGER, True),
    (WORKER, WORKER, 12345, True),
    (NEIGHBOUR, HEAD, DASHBOARD, False),
    (NEIGHBOUR, HEAD, CLIENT, False),
    (NEIGHBOUR, HEAD, GCS, False),
    (NEIGHBOUR, WORKER, OBJECT_MANAGER, False),
    (NEIGHBOUR, REWARD, REWARD_PORT, False),
    (OTHER_RUN_WORKER, HEAD, DASHBOARD, False),
    (OTHER_RUN_WORKER, HEAD, GCS, False),
    (OTHER_RUN_WORKER, REWARD, REWARD_PORT, False),
    (STRANGER, HEAD, DASHBOARD, False),
    (STRANGER, WORKER, TRAINER_METRICS, False),
    (OPERATOR, WORKER, TRAINER_METRICS, True),
    (OPERATOR, WORKER, LAUNCHER_METRICS, True),
    (OPERATOR, WORKER, OBJECT_MANAGER, False),
    (PROMETHEUS, WORKER, TRAINER_METRICS, True),
    (PROMETHEUS, HEAD, RAY_METRICS, True),
    (PROMETHEUS, HEAD, DASHBOARD, False),
    (PROMETHEUS, REWARD, REWARD_PORT, True),
    (WORKER, REWARD, REWARD_PORT, True),
    (HEAD, REWARD, REWARD_PORT, False),
    (OPERATOR, REWARD, REWARD_PORT, True),
    (WORKER, REWARD, 9999, False),
]


def a_run(example_name: str = "qwen3-4b-disaggregated", **meta: str) -> Any:
    doc = example(example_name)
    doc["metadata"].update({"name": RUN, "namespace": NS, **meta})
    return run_of(doc)


def remote_run() -> Any:
    return a_run()


PODS = {"head": HEAD, "worker": WORKER, "reward": REWARD, "operator": OPERATOR, "prometheus": PROMETHEUS}
PODS |= {"a neighbour": NEIGHBOUR, "another run's worker": OTHER_RUN_WORKER, "a stranger": STRANGER}
PORTS = {DASHBOARD: "dashboard", CLIENT: "client", GCS: "gcs", OBJECT_MANAGER: "object manager"}
PORTS |= {RAY_METRICS: "ray metrics", TRAINER_METRICS: "trainer metrics", LAUNCHER_METRICS: "launcher metrics"}
PORTS |= {REWARD_PORT: "reward"}


def _row_id(source: Pod, dest: Pod, port: int, expected: bool) -> str:
    def pod(p: Pod) -> str:
        return next(name for name, q in PODS.items() if q is p)

    return f"{pod(source)} {'may' if expected else 'may not'} reach the {pod(dest)}'s {PORTS.get(port, port)} port"


@pytest.mark.parametrize(("source", "dest", "port", "expected"), TABLE, ids=[_row_id(*row) for row in TABLE])
def test_who_may_reach_which_port_of_a_run(source: Pod, dest: Pod, port: int, expected: bool) -> None:
    assert allowed(network_policies(remote_run(), CHART), source, dest, port) is expected


def test_without_a_prometheus_selector_only_the_operator_scrapes() -> None:
    bare = CHART.model_copy(update={"prometheus_namespace_labels": None, "prometheus_pod_labels": None})
    policies = network_policies(remote_run(), bare)
    assert not allowed(policies, PROMETHEUS, WORKER, TRAINER_METRICS)
    assert not allowed(policies, PROMETHEUS, HEAD, RAY_METRICS)
    assert allowed(policies, OPERATOR, WORKER, TRAINER_METRICS)


def test_every_pod_of_the_run_is_selected_by_a_policy() -> None:
    policies = network_policies(remote_run(), CHART)
    for pod in (HEAD, WORKER, REWARD):
        assert any(matches(p["spec"]["podSelector"], pod.labels) for p in policies), pod


def test_policies_come_with_the_run_are_owned_by_it_and_can_be_turned_off() -> None:
    run = a_run(uid="u-1")
    children = render(run, make_plan(run), CHART).children
    kinds = [c["kind"] for c in children]
    assert kinds.count("NetworkPolicy") == 3 and kinds.index("NetworkPolicy") < kinds.index("RayCluster")
    assert all(c["metadata"]["ownerReferences"][0]["uid"] == "u-1" for c in children if c["kind"] == "NetworkPolicy")
    off = render(run, make_plan(run), CHART.model_copy(update={"network_policies": False})).children
    assert "NetworkPolicy" not in [c["kind"] for c in off]


def test_a_run_with_a_local_reward_has_no_reward_policy() -> None:
    run = a_run("quickstart")
    assert [p["metadata"]["name"] for p in network_policies(run, CHART)] == [f"{RUN}-ray-head", f"{RUN}-ray-worker"]


def test_egress_is_open_unless_restricted_then_only_the_run_dns_and_the_cidrs() -> None:
    assert all("Egress" not in p["spec"]["policyTypes"] for p in network_policies(remote_run(), CHART))
    tight = CHART.model_copy(update={"egress_cidrs": ("10.20.0.0/16",)})
    for policy in network_policies(remote_run(), tight):
        egress = policy["spec"]["egress"]
        assert "Egress" in policy["spec"]["policyTypes"]
        assert {"podSelector": {"matchLabels": {names.RUN_LABEL: RUN}}} in egress[0]["to"]
        assert {"protocol": "UDP", "port": 53} in egress[1]["ports"]
        assert egress[2] == {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}]}


def test_without_the_operators_namespace_the_operator_is_looked_for_in_the_runs_namespace() -> None:
    local = CHART.model_copy(update={"operator_namespace": None})
    policies = network_policies(remote_run(), local)
    assert not allowed(policies, OPERATOR, HEAD, DASHBOARD)
    assert allowed(policies, Pod(NS, OPERATOR.labels), HEAD, DASHBOARD)


def test_a_prometheus_pod_selector_alone_admits_prometheus_in_the_runs_namespace_only() -> None:
    pods_only = CHART.model_copy(update={"prometheus_namespace_labels": None})
    policies = network_policies(remote_run(), pods_only)
    assert allowed(policies, Pod(WORKER.namespace, PROMETHEUS.labels), WORKER, TRAINER_METRICS)
    assert not allowed(policies, PROMETHEUS, WORKER, TRAINER_METRICS)  # the same labels in another namespace


def test_the_prometheus_selectors_admit_only_the_selected_pods_of_the_selected_namespace() -> None:
    grafana = Pod(PROMETHEUS.namespace, {"app.kubernetes.io/name": "grafana"})
    assert not allowed(network_policies(remote_run(), CHART), grafana, WORKER, TRAINER_METRICS)
    namespace_only = CHART.model_copy(update={"prometheus_pod_labels": None})
    policies = network_policies(remote_run(), namespace_only)
    assert allowed(policies, PROMETHEUS, WORKER, TRAINER_METRICS) and allowed(
        policies, grafana, WORKER, TRAINER_METRICS
    )
