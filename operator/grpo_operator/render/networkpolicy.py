"""The NetworkPolicies of a run: who may open a connection to which port of its Ray pods and reward service.

Without them any pod in the cluster can reach the Ray head's dashboard (8265, the Jobs API: it runs any
command on the GPU workers, the ShadowRay class of attack, CVE-2023-48022), its client server (10001) and GCS
(6379), and the reward service. Token auth (render/raycluster.py) is the first lock; these are the second,
for a token that leaked and for the ports Ray does not authenticate at all (the object manager, workers).

Per run, ingress only (a pod that no policy selects stays open, so each Ray pod and the reward pods are
selected by one):
- Ray head: dashboard and client server from the operator's pods and the run's own pods; every port from the
  run's Ray pods (GCS, raylet, object manager, worker ports); Ray's metrics port from Prometheus, if set.
- Ray workers: every port from the run's Ray pods; the trainer's metrics ports (miles's collector, the
  launcher's provenance metric) from the operator and Prometheus; Ray's metrics port from Prometheus.
- Reward service: its port from the run's workers (rollouts call it), and from the operator and Prometheus,
  which read its /metrics on the same port (the operator's reward-error guard).
Egress stays open (the shared volume, a model hub) unless `egress_cidrs` is set: then each pod may reach the
run's pods, cluster DNS and those CIDRs only.

Ports are numbers, never names, so a policy means the same whatever a container calls its ports. KubeRay's
probes are `exec` (wget on localhost), so no policy stands in their way (docs/integrations/kuberay.md).
Turned off with `network_policies=False` (clusters without a policy engine).
"""

from __future__ import annotations

from typing import Any

from grpo_operator.api import GRPORun
from grpo_operator.api.spec import RewardType
from grpo_operator.render import names
from grpo_operator.render.raycluster import metadata
from grpo_operator.render.settings import DASHBOARD_PORT, RenderSettings

CLIENT_PORT = 10001  # KubeRay's Ray client server port (docs/integrations/kuberay.md: ports)
RAY_METRICS_PORT = 8080  # KubeRay adds it to every Ray container as its "metrics" port
DNS_PORT = 53


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def run_pods(run: str) -> dict[str, Any]:
    """Every pod of the run (Ray pods, reward pods), in the run's namespace."""
    return {"podSelector": {"matchLabels": {names.RUN_LABEL: run}}}


def ray_pods(run: str) -> dict[str, Any]:
    return {
        "podSelector": {
            "matchLabels": {names.RUN_LABEL: run},
            "matchExpressions": [
                {"key": names.COMPONENT_LABEL, "operator": "In", "values": ["ray-head", "ray-worker"]}
            ],
        }
    }


def operator_pods(settings: RenderSettings) -> dict[str, Any]:
    """The operator's pods: in its namespace when known (the chart passes it), else in the run's namespace."""
    peer: dict[str, Any] = {"podSelector": {"matchLabels": dict(settings.operator_pod_labels)}}
    if settings.operator_namespace:
        peer["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": settings.operator_namespace}}
    return peer


def prometheus_pods(settings: RenderSettings) -> list[dict[str, Any]]:
    """Prometheus's pods, when a selector is configured (none: nothing outside the run scrapes it)."""
    if settings.prometheus_namespace_labels is None and settings.prometheus_pod_labels is None:
        return []
    peer: dict[str, Any] = {"podSelector": {"matchLabels": dict(settings.prometheus_pod_labels or {})}}
    if settings.prometheus_namespace_labels is not None:
        peer["namespaceSelector"] = {"matchLabels": dict(settings.prometheus_namespace_labels)}
    return [peer]


def _egress(run: str, settings: RenderSettings) -> list[dict[str, Any]]:
    dns = {
        "to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
        "ports": [{"protocol": "UDP", "port": DNS_PORT}, {"protocol": "TCP", "port": DNS_PORT}],
    }
    rules: list[dict[str, Any]] = [{"to": [run_pods(run)]}, dns]
    if settings.egress_cidrs:
        rules.append({"to": [{"ipBlock": {"cidr": cidr}} for cidr in settings.egress_cidrs]})
    return rules


def _policy(run: GRPORun, component: str, ingress: list[dict[str, Any]], settings: RenderSettings) -> dict[str, Any]:
    name = run.metadata.name
    spec: dict[str, Any] = {
        "podSelector": {"matchLabels": names.selector(name, component)},
        "policyTypes": ["Ingress"],
        "ingress": ingress,
    }
    if settings.egress_cidrs is not None:
        spec["policyTypes"].append("Egress")
        spec["egress"] = _egress(name, settings)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(run, names.network_policy(name, component), "network-policy"),
        "spec": spec,
    }


def network_policies(run: GRPORun, settings: RenderSettings) -> list[dict[str, Any]]:
    if not settings.network_policies:
        return []
    name = run.metadata.name
    prometheus = prometheus_pods(settings)
    scrapers = [operator_pods(settings), *prometheus]
    ray_metrics = [{"from": prometheus, "ports": _tcp(RAY_METRICS_PORT)}] if prometheus else []
    head = [
        {"from": [operator_pods(settings), run_pods(name)], "ports": _tcp(DASHBOARD_PORT, CLIENT_PORT)},
        {"from": [ray_pods(name)]},  # GCS 6379, raylet, object manager, worker ports: the run's Ray pods only
        *ray_metrics,
    ]
    workers = [
        {"from": [ray_pods(name)]},
        {"from": scrapers, "ports": _tcp(settings.prometheus_port, settings.launcher_metrics_port)},
        *ray_metrics,
    ]
    policies = [_policy(run, "ray-head", head, settings), _policy(run, "ray-worker", workers, settings)]
    if run.spec.reward.type is RewardType.REMOTE:
        workers_only = {"podSelector": {"matchLabels": names.selector(name, "ray-worker")}}
        reward = [{"from": [workers_only, *scrapers], "ports": _tcp(settings.reward_port)}]
        policies.append(_policy(run, "reward", reward, settings))
    return policies
