"""What `grpo doctor`'s checks share: the `Cluster` as read, the `Target` run of `-f`, a `Check` row and its
`Verdict`, and the small readers of API objects (quantities, names, containers, readiness) every check family uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from grpo_operator.api import GROUP, PLURAL, GRPORun
from grpo_operator.api.runtime import DEFAULT_RUNTIME_NAME, RUNTIME_PLURAL
from grpo_operator.api.status import RunPlan
from grpo_operator.planning.documents import parse_runtime
from grpo_operator.planning.instances import DEFAULT_RUNTIME, EFA_RESOURCE, InstanceType, instance_of
from grpo_operator.render import RenderSettings, render

GPU = "nvidia.com/gpu"
EFA = EFA_RESOURCE
GRPORUN_CRD = f"{PLURAL}.{GROUP}"
GRPORUNTIME_CRD = f"{RUNTIME_PLURAL}.{GROUP}"
RAYCLUSTER_CRD = "rayclusters.ray.io"
LOCALQUEUE_CRD = "localqueues.kueue.x-k8s.io"
CLUSTERQUEUE_CRD = "clusterqueues.kueue.x-k8s.io"
SERVICEMONITOR_CRD = "servicemonitors.monitoring.coreos.com"
PROMETHEUSRULE_CRD = "prometheusrules.monitoring.coreos.com"
# The KubeRay release the operator renders for (docs/integrations/kuberay.md) and the oldest it accepts.
MIN_KUBERAY = (1, 5, 0)
KUBERAY_INSTALL = "helm install kuberay-operator kuberay/kuberay-operator --version 1.5.0 (CRDs included)"
OPERATOR_LABEL = ("app.kubernetes.io/name", "grpo-operator")
OPERATOR_INSTALL = "helm install grpo-operator charts/grpo-operator"
# The seed's FSx for Lustre save failed with ENOSPC at 90% full: past this a shared filesystem is near capacity.
NEAR_FULL = 0.9
PLUGINS = {GPU: "NVIDIA device plugin", EFA: "EFA device plugin"}
_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "m": 1e-3, "k": 1e3, "M": 1e6}
_SUFFIXES |= {"G": 1e9, "T": 1e12, "P": 1e15}


class Verdict(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    """One row of the table: what was found and, unless ok, the fix."""

    name: str
    verdict: Verdict
    found: str
    fix: str = ""


@dataclass
class Cluster:
    """What doctor read: objects as the API server returned them (camelCase dicts). `crds` by name (absent ones
    missing); `pods` bound and not finished; `runtimes` the cluster's GRPORuntimes; `allowed` the user's access
    reviews, e.g. "create grporuns in ns"; `unreadable` what could not be read (a kind's plural) and the API
    server's words; `chart_values` the grpo chart's values of `--values`, when given; `user` the one `--as`
    impersonates."""

    crds: dict[str, dict[str, Any]] = field(default_factory=dict)
    deployments: list[dict[str, Any]] = field(default_factory=list)
    daemonsets: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    runtimes: list[dict[str, Any]] = field(default_factory=list)
    claim: dict[str, Any] | None = None
    local_queue: dict[str, Any] | None = None
    cluster_queue: dict[str, Any] | None = None
    flavors: list[dict[str, Any]] = field(default_factory=list)
    allowed: dict[str, bool] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    network_policies: list[dict[str, Any]] = field(default_factory=list)
    cluster_roles: list[dict[str, Any]] = field(default_factory=list)
    cluster_role_bindings: list[dict[str, Any]] = field(default_factory=list)
    roles: list[dict[str, Any]] = field(default_factory=list)
    role_bindings: list[dict[str, Any]] = field(default_factory=list)
    chart_values: dict[str, Any] | None = None
    user: str | None = None
    namespace: str | None = None  # the namespace judged: the run's (-f), else the kubeconfig context's


@dataclass(frozen=True)
class Target:
    """The run of `-f`, its plan and the pod templates the operator would render for it."""

    run: GRPORun
    plan: RunPlan

    @property
    def namespace(self) -> str:
        return self.run.metadata.namespace or "default"

    def templates(self) -> dict[str, dict[str, Any]]:
        """Pod spec per role: head, worker, and the reward service when the run has one."""
        rendered = render(self.run, self.plan, RenderSettings(reward_image="reward-image"))
        found: dict[str, dict[str, Any]] = {}
        for child in rendered.children:
            if child["kind"] == "RayCluster":
                found["head"] = child["spec"]["headGroupSpec"]["template"]["spec"]
                found["worker"] = child["spec"]["workerGroupSpecs"][0]["template"]["spec"]
            elif child["kind"] == "Deployment":
                found["reward service"] = child["spec"]["template"]["spec"]
        return found

    def ray_cluster_spec(self) -> dict[str, Any]:
        rendered = render(self.run, self.plan, RenderSettings(reward_image="reward-image"))
        return next(c["spec"] for c in rendered.children if c["kind"] == "RayCluster")


def quantity(text: str | int | float) -> float:
    """A Kubernetes quantity ("7910m", "2Gi", "8") as a number."""
    found = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(text).strip())
    if found is None:
        return 0.0
    return float(found[1]) * _SUFFIXES.get(found[2], 1)


def name_of(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))


def unread(cluster: Cluster, name: str, *kinds: str) -> Check | None:
    missing = [f"{kind} ({cluster.unreadable[kind]})" for kind in kinds if kind in cluster.unreadable]
    if not missing:
        return None
    return Check(
        name,
        Verdict.FAIL,
        "cannot read " + ", ".join(missing),
        "grant the user running grpo doctor get and list on them (read-only), or run it as a user who has them",
    )


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    containers: list[dict[str, Any]] = obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
    return containers


def replicas_ready(deployment: dict[str, Any]) -> tuple[int, int]:
    return int(deployment.get("status", {}).get("readyReplicas") or 0), int(deployment["spec"].get("replicas", 1))


def env_of(container: dict[str, Any], name: str) -> str | None:
    return next((e.get("value") for e in container.get("env") or [] if e.get("name") == name), None)


def instance_types(cluster: Cluster, target: Target | None) -> list[InstanceType]:
    """The GPU node types the checks look for: the run's (from the runtime it resolved against); without a run,
    every type of the cluster's GRPORuntimes, and the built-in AWS types unless a runtime named default replaces
    them (as for a run that names no runtime)."""
    if target is not None:
        return [instance_of(target.run.spec)]
    runtimes = [found for doc in cluster.runtimes if (found := parse_runtime(doc)[0]) is not None]
    if not any(r.metadata.name == DEFAULT_RUNTIME_NAME for r in runtimes):
        runtimes.append(DEFAULT_RUNTIME)
    types: dict[str, InstanceType] = {}
    for runtime in runtimes:
        for spec in runtime.spec.instance_types:
            types.setdefault(spec.name, InstanceType.of(spec))
    return list(types.values())


def selects(instance: InstanceType, node: dict[str, Any]) -> bool:
    """Whether `node` is of the type: its labels hold the type's nodeSelector (the scheduler's rule); a type with
    no selector takes any node that has GPUs allocatable."""
    labels = node["metadata"].get("labels") or {}
    if instance.node_selector:
        return all(labels.get(key) == value for key, value in instance.node_selector)
    return quantity((node.get("status") or {}).get("allocatable", {}).get(GPU, 0)) > 0


def type_of(node: dict[str, Any], types: list[InstanceType]) -> InstanceType | None:
    return next((t for t in types if selects(t, node)), None)


def typed_gpu_nodes(cluster: Cluster, target: Target | None) -> list[tuple[dict[str, Any], InstanceType]]:
    """Each GPU node with its type."""
    types = instance_types(cluster, target)
    return [(n, t) for n in cluster.nodes if (t := type_of(n, types)) is not None]


def gpu_nodes_of(cluster: Cluster, target: Target | None) -> list[dict[str, Any]]:
    return [node for node, _ in typed_gpu_nodes(cluster, target)]


def selector_text(instance: InstanceType) -> str:
    """How a node of the type is found, as a user would select it."""
    if not instance.node_selector:
        return f"{GPU} allocatable"
    return ",".join(f"{key}={value}" for key, value in instance.node_selector)


def is_ready(obj: dict[str, Any]) -> bool:
    """A pod's or a node's Ready condition."""
    conditions = obj.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def operator_deployment(cluster: Cluster) -> dict[str, Any] | None:
    """The grpo operator's Deployment (the chart's), or None when it runs outside the cluster or is not installed."""
    key, value = OPERATOR_LABEL
    return next((d for d in cluster.deployments if (d["metadata"].get("labels") or {}).get(key) == value), None)


def chart_value(cluster: Cluster, path: str) -> Any:
    """A value of `--values` by its dotted path ("metrics.serviceMonitor.enabled"), None when not set."""
    found: Any = cluster.chart_values
    for key in path.split("."):
        found = found.get(key) if isinstance(found, dict) else None
    return found
