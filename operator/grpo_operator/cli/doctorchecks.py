"""`grpo doctor`'s judgement: what a cluster, read once into a `Cluster`, lacks for GRPORuns, and whether a given
run can be placed now. Pure (the reads are `cli.clusterread`'s): each check takes the objects as the API server
returned them and gives one `Check` per concern, ok / warn / fail, naming what was found and the fix.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from grpo_operator.api import GROUP, PLURAL, VERSION, GRPORun
from grpo_operator.api.status import RunPlan
from grpo_operator.planning.instances import INSTANCES
from grpo_operator.render import RenderSettings, render
from grpo_operator.render.raycluster import GPU_TOLERATION, INSTANCE_TYPE_LABEL

GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"
GRPORUN_CRD = f"{PLURAL}.{GROUP}"
RAYCLUSTER_CRD = "rayclusters.ray.io"
LOCALQUEUE_CRD = "localqueues.kueue.x-k8s.io"
CLUSTERQUEUE_CRD = "clusterqueues.kueue.x-k8s.io"
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
    missing); `pods` bound and not finished; `allowed` the user's access reviews, e.g. "create grporuns in ns";
    `unreadable` what could not be read (a kind's plural) and the API server's words."""

    crds: dict[str, dict[str, Any]] = field(default_factory=dict)
    deployments: list[dict[str, Any]] = field(default_factory=list)
    daemonsets: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    claim: dict[str, Any] | None = None
    local_queue: dict[str, Any] | None = None
    cluster_queue: dict[str, Any] | None = None
    flavors: list[dict[str, Any]] = field(default_factory=list)
    allowed: dict[str, bool] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)


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


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))


def _unread(cluster: Cluster, name: str, *kinds: str) -> Check | None:
    missing = [f"{kind} ({cluster.unreadable[kind]})" for kind in kinds if kind in cluster.unreadable]
    if not missing:
        return None
    return Check(
        name,
        Verdict.FAIL,
        "cannot read " + ", ".join(missing),
        "grant the user running grpo doctor get and list on them (read-only), or run it as a user who has them",
    )


def grporun_crd(cluster: Cluster) -> Check:
    crd = cluster.crds.get(GRPORUN_CRD)
    if crd is None:
        return _unread(cluster, "GRPORun CRD", "customresourcedefinitions") or Check(
            "GRPORun CRD",
            Verdict.FAIL,
            f"no CustomResourceDefinition {GRPORUN_CRD}",
            f"{OPERATOR_INSTALL}, or kubectl apply --server-side -f crds/",
        )
    served = [v["name"] for v in crd.get("spec", {}).get("versions", []) if v.get("served")]
    if VERSION not in served:
        return Check(
            "GRPORun CRD",
            Verdict.FAIL,
            f"{GRPORUN_CRD} serves {', '.join(served) or 'no version'}, not {VERSION}",
            "install the CRD of this grpo release: kubectl apply --server-side -f crds/",
        )
    return Check("GRPORun CRD", Verdict.OK, f"{GRPORUN_CRD} serves {VERSION}")


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    containers: list[dict[str, Any]] = obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
    return containers


def _ready(deployment: dict[str, Any]) -> tuple[int, int]:
    return int(deployment.get("status", {}).get("readyReplicas") or 0), int(deployment["spec"].get("replicas", 1))


def operator(cluster: Cluster) -> Check:
    key, value = OPERATOR_LABEL
    found = [d for d in cluster.deployments if (d["metadata"].get("labels") or {}).get(key) == value]
    if found:
        deployment = found[0]
        ready, wanted = _ready(deployment)
        container = _containers(deployment)[0]
        args = container.get("args", [])
        watching = [a.split("=", 1)[1] for a in args if a.startswith("--namespace=")] or ["all namespaces"]
        what = f"Deployment {_name(deployment)}: {ready}/{wanted} ready, image {container.get('image')}, "
        what += f"watching {', '.join(watching)}"
        if ready < 1:
            return Check(
                "operator", Verdict.FAIL, what, f"kubectl -n {deployment['metadata']['namespace']} describe pods"
            )
        return Check("operator", Verdict.OK, what)
    if unread := _unread(cluster, "operator", "deployments", "grporuns"):
        return unread
    current = [
        r
        for r in cluster.runs
        if r["metadata"].get("generation") is not None
        and r.get("status", {}).get("observedGeneration") == r["metadata"]["generation"]
    ]
    if current:
        return Check(
            "operator",
            Verdict.OK,
            f"no Deployment labelled {key}={value}; GRPORun {_name(current[0])} has a status for its current "
            "generation: an operator outside the cluster writes it",
        )
    return Check(
        "operator",
        Verdict.FAIL,
        f"no Deployment labelled {key}={value} and no GRPORun status written",
        OPERATOR_INSTALL,
    )


def schema_gaps(value: Any, schema: dict[str, Any], path: str) -> Iterator[str]:
    """Paths in `value` the structural `schema` has no field for: the API server drops them silently."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if properties is not None and key in properties:
                yield from schema_gaps(item, properties[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                yield from schema_gaps(item, extra, f"{path}.{key}")
            elif properties is not None:
                yield f"{path}.{key}"
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            yield from schema_gaps(item, schema["items"], f"{path}[]")


def kuberay_crds(cluster: Cluster, target: Target | None) -> Check:
    crd = cluster.crds.get(RAYCLUSTER_CRD)
    if crd is None:
        return _unread(cluster, "KubeRay CRDs", "customresourcedefinitions") or Check(
            "KubeRay CRDs", Verdict.FAIL, f"no CustomResourceDefinition {RAYCLUSTER_CRD}", KUBERAY_INSTALL
        )
    versions = {v["name"]: v for v in crd.get("spec", {}).get("versions", []) if v.get("served")}
    if "v1" not in versions:
        return Check(
            "KubeRay CRDs", Verdict.FAIL, f"{RAYCLUSTER_CRD} serves {', '.join(versions)}, not v1", KUBERAY_INSTALL
        )
    if target is not None:
        schema = versions["v1"].get("schema", {}).get("openAPIV3Schema", {}).get("properties", {}).get("spec", {})
        gaps = sorted(set(schema_gaps(target.ray_cluster_spec(), schema, "spec")))
        if gaps:
            return Check(
                "KubeRay CRDs",
                Verdict.FAIL,
                f"{RAYCLUSTER_CRD} has no field {', '.join(gaps[:3])}{' ...' if len(gaps) > 3 else ''}, which "
                f"{target.run.metadata.name}'s RayCluster sets: the API server would drop it (an older KubeRay CRD)",
                f"apply the CRDs of KubeRay {'.'.join(map(str, MIN_KUBERAY))} or later: {KUBERAY_INSTALL}",
            )
    return Check(
        "KubeRay CRDs", Verdict.OK, f"{RAYCLUSTER_CRD} serves v1" + (" with every field the run sets" * bool(target))
    )


def _version(image: str) -> tuple[int, ...] | None:
    found = re.search(r":v?(\d+)\.(\d+)\.(\d+)", image)
    return tuple(int(part) for part in found.groups()) if found else None


def _env(container: dict[str, Any], name: str) -> str | None:
    return next((e.get("value") for e in container.get("env") or [] if e.get("name") == name), None)


def kuberay_operator(cluster: Cluster) -> Check:
    found = [
        (d, c) for d in cluster.deployments for c in _containers(d) if "kuberay/operator" in str(c.get("image", ""))
    ]
    if not found:
        return _unread(cluster, "KubeRay operator", "deployments") or Check(
            "KubeRay operator", Verdict.FAIL, "no Deployment runs a kuberay/operator image", KUBERAY_INSTALL
        )
    deployment, container = found[0]
    ready, wanted = _ready(deployment)
    image = str(container["image"])
    version = _version(image)
    what = f"Deployment {_name(deployment)}: {ready}/{wanted} ready, image {image}"
    if ready < 1:
        return Check("KubeRay operator", Verdict.FAIL, what, f"kubectl -n {deployment['metadata']['namespace']} logs")
    minimum = ".".join(map(str, MIN_KUBERAY))
    if version is None or version < MIN_KUBERAY:
        return Check(
            "KubeRay operator",
            Verdict.FAIL if version else Verdict.WARN,
            f"{what}: version {'.'.join(map(str, version)) if version else 'unknown (no x.y.z tag)'}; runs need "
            f"{minimum} or later",
            f"upgrade KubeRay: {KUBERAY_INSTALL}",
        )
    ours = _operator_setting(cluster, "GRPO_CLUSTER_DOMAIN") or RenderSettings().cluster_domain
    theirs = _env(container, "CLUSTER_DOMAIN") or "cluster.local"
    if theirs != ours:
        return Check(
            "KubeRay operator",
            Verdict.FAIL,
            f"{what}: CLUSTER_DOMAIN {theirs}, the grpo operator's {ours}",
            "set the grpo chart's clusterDomain (GRPO_CLUSTER_DOMAIN) to KubeRay's CLUSTER_DOMAIN",
        )
    return Check("KubeRay operator", Verdict.OK, f"{what}, CLUSTER_DOMAIN {theirs}")


def _operator_setting(cluster: Cluster, name: str) -> str | None:
    key, value = OPERATOR_LABEL
    for deployment in cluster.deployments:
        if (deployment["metadata"].get("labels") or {}).get(key) == value:
            return next((s for c in _containers(deployment) if (s := _env(c, name))), None)
    return None


def _gpu_nodes(cluster: Cluster, target: Target | None) -> list[dict[str, Any]]:
    wanted = {str(target.plan.instance_type)} if target else {str(name) for name in INSTANCES}
    return [n for n in cluster.nodes if (n["metadata"].get("labels") or {}).get(INSTANCE_TYPE_LABEL) in wanted]


def _type_of(node: dict[str, Any]) -> Any:
    return INSTANCES[node["metadata"]["labels"][INSTANCE_TYPE_LABEL]]


def gpu_nodes(cluster: Cluster, target: Target | None) -> Check:
    if unread := _unread(cluster, "GPU nodes", "nodes"):
        return unread
    nodes = _gpu_nodes(cluster, target)
    types = str(target.plan.instance_type) if target else ", ".join(sorted(map(str, INSTANCES)))
    if not nodes:
        return Check(
            "GPU nodes",
            Verdict.FAIL,
            f"no node labelled {INSTANCE_TYPE_LABEL} {types}",
            "add a node group of that instance type (or pick a type the cluster has in spec.topology.instanceType)",
        )
    short: list[str] = []
    for node in nodes:
        instance = _type_of(node)
        allocatable = node.get("status", {}).get("allocatable") or {}
        for resource, count in ((GPU, instance.gpus), (EFA, instance.efa)):
            have = int(quantity(allocatable.get(resource, 0)))
            if have < count:
                short.append(f"{node['metadata']['name']}: {resource} {have} of {instance.name}'s {count}")
    counts: dict[str, int] = {}
    for node in nodes:
        counts[str(_type_of(node).name)] = counts.get(str(_type_of(node).name), 0) + 1
    summary = ", ".join(f"{n} x {t}" for t, n in sorted(counts.items()))
    if short:
        return Check(
            "GPU nodes",
            Verdict.FAIL,
            f"{summary}; allocatable short: {'; '.join(short)} (without EFA, NCCL falls back to TCP sockets)",
            "check the device plugin pod on each node named (kubectl get pods -A -o wide --field-selector "
            "spec.nodeName=<node>) and the devices the instance has",
        )
    if target is not None and len(nodes) < target.plan.worker_replicas:
        return Check(
            "GPU nodes",
            Verdict.FAIL,
            f"{summary}; the run needs {target.plan.worker_replicas} nodes of {types}",
            "add nodes to the node group, or lower spec.topology.actor.nodes",
        )
    return Check("GPU nodes", Verdict.OK, f"{summary}, each with every GPU and EFA device allocatable")


def _plugin_of(daemonset: dict[str, Any]) -> str | None:
    images = " ".join(str(c.get("image", "")) for c in _containers(daemonset)).lower()
    if "device-plugin" not in images:
        return None
    return EFA if "efa" in images else GPU if "nvidia" in images else None


def _pod_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def device_plugins(cluster: Cluster, target: Target | None) -> Check:
    if unread := _unread(cluster, "device plugins", "nodes", "daemonsets", "pods"):
        return unread
    plugins = {_name(d): kind for d in cluster.daemonsets if (kind := _plugin_of(d))}
    serving: dict[tuple[str, str], bool] = {}
    for pod in cluster.pods:
        owner = next((o for o in pod["metadata"].get("ownerReferences") or [] if o.get("kind") == "DaemonSet"), None)
        kind = plugins.get(f"{pod['metadata'].get('namespace')}/{owner['name']}") if owner else None
        node = pod.get("spec", {}).get("nodeName")
        if kind and node:
            serving[(node, kind)] = serving.get((node, kind), False) or _pod_ready(pod)
    missing = []
    nodes = _gpu_nodes(cluster, target)
    for node in nodes:
        needs = [GPU] + ([EFA] if _type_of(node).efa else [])
        missing += [
            f"{PLUGINS[k]} on {node['metadata']['name']}"
            for k in needs
            if not serving.get((node["metadata"]["name"], k))
        ]
    if missing:
        return Check(
            "device plugins",
            Verdict.FAIL,
            f"no Ready pod of the {'; '.join(missing[:4])}{' ...' if len(missing) > 4 else ''} "
            f"(DaemonSets found: {', '.join(sorted(plugins)) or 'none'})",
            "install the NVIDIA device plugin and the EFA device plugin (aws-efa-k8s-device-plugin) DaemonSets, "
            "tolerating the GPU taint, and check their pods on the nodes named",
        )
    return Check(
        "device plugins", Verdict.OK, f"{', '.join(sorted(plugins)) or 'none needed'}: Ready on {len(nodes)} GPU nodes"
    )


def tolerates(tolerations: Iterable[dict[str, Any]], taint: dict[str, Any]) -> bool:
    """Whether a pod's tolerations let it onto a node with `taint` (the scheduler's rule)."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t["key"] == taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _blocking(node: dict[str, Any], tolerations: list[dict[str, Any]], *, state: bool = True) -> list[str]:
    """The node's taints the tolerations do not cover; `state=False` leaves out those the node's state puts there
    (node.kubernetes.io/unschedulable on a cordoned node, not-ready, ...)."""
    taints = node.get("spec", {}).get("taints") or []
    return [
        f"{t['key']}={t.get('value', '')}:{t['effect']}"
        for t in taints
        if t.get("effect") in ("NoSchedule", "NoExecute")
        and not tolerates(tolerations, t)
        and (state or not str(t.get("key", "")).startswith("node.kubernetes.io/"))
    ]


def taints(cluster: Cluster, target: Target | None) -> Check:
    if unread := _unread(cluster, "taints", "nodes"):
        return unread
    tolerations = target.templates()["worker"].get("tolerations", []) if target else [GPU_TOLERATION]
    # node.kubernetes.io/* taints follow the node's state (cordoned, not ready): placement reports those
    blocked = [
        f"{n['metadata']['name']} ({', '.join(b)})"
        for n in _gpu_nodes(cluster, target)
        if (b := _blocking(n, tolerations, state=False))
    ]
    if blocked:
        return Check(
            "taints",
            Verdict.FAIL,
            f"taints the workers do not tolerate: {'; '.join(blocked[:4])}",
            "add the taint to spec.scheduling.tolerations, or taint GPU nodes nvidia.com/gpu=true:NoSchedule only",
        )
    return Check("taints", Verdict.OK, "the workers tolerate every taint of the GPU nodes")


def storage(cluster: Cluster, target: Target) -> Check:
    spec = target.run.spec.storage
    where = f"PersistentVolumeClaim {target.namespace}/{spec.claim_name}"
    if cluster.claim is None:
        return _unread(cluster, "storage", "persistentvolumeclaims") or Check(
            "storage", Verdict.FAIL, f"no {where}", f"create a ReadWriteMany claim named {spec.claim_name} there"
        )
    modes = cluster.claim.get("spec", {}).get("accessModes") or []
    status = cluster.claim.get("status", {})
    if status.get("phase") != "Bound":
        return Check(
            "storage", Verdict.FAIL, f"{where} is {status.get('phase', 'not bound')}", "bind it to a volume first"
        )
    if "ReadWriteMany" not in modes:
        return Check(
            "storage",
            Verdict.FAIL,
            f"{where} is {', '.join(modes)}: the head and {target.plan.worker_replicas} worker(s) mount it at once",
            "use a ReadWriteMany volume (FSx for Lustre, EFS, a CSI driver with RWX)",
        )
    plan = target.plan
    saves = math.ceil(target.run.spec.rollout.num_rollout / plan.save_interval)
    model_gib = 2 * plan.params_billions * 1e9 * 2 / 2**30  # bf16 HF weights and the torch_dist copy
    needed = saves * plan.checkpoint_gib + model_gib
    capacity = quantity(status.get("capacity", {}).get("storage", 0)) / 2**30
    what = (
        f"{where}: ReadWriteMany, {capacity:.0f} GiB; the run writes {saves} checkpoint(s) x "
        f"{plan.checkpoint_gib:.0f} GiB beside the model ({model_gib:.0f} GiB) = {needed:.0f} GiB"
    )
    if needed > capacity:
        return Check("storage", Verdict.FAIL, what, "grow the volume, or save less often (spec.storage.saveInterval)")
    if needed > NEAR_FULL * capacity:
        return Check(
            "storage",
            Verdict.WARN,
            f"{what}: over {NEAR_FULL:.0%} of it (a shared filesystem save failed with ENOSPC at 90% full)",
            "grow the volume before the run fills it",
        )
    return Check("storage", Verdict.OK, what)


def _covers(flavor: dict[str, Any], nodes: list[dict[str, Any]]) -> bool:
    wanted = (flavor.get("spec") or {}).get("nodeLabels") or {}
    return any(all((n["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items()) for n in nodes)


def kueue(cluster: Cluster, target: Target | None) -> Check | None:
    queue = target.run.spec.scheduling.queue_name if target else None
    if queue is None or target is None:
        if LOCALQUEUE_CRD in cluster.crds:
            return Check("Kueue", Verdict.OK, "installed; runs without spec.scheduling.queueName do not use it")
        return None
    where = f"LocalQueue {target.namespace}/{queue}"
    if LOCALQUEUE_CRD not in cluster.crds:
        return _unread(cluster, "Kueue", "customresourcedefinitions") or Check(
            "Kueue", Verdict.FAIL, f"spec.scheduling.queueName {queue} but Kueue is not installed", "install Kueue"
        )
    if cluster.local_queue is None:
        return _unread(cluster, "Kueue", "localqueues") or Check(
            "Kueue", Verdict.FAIL, f"no {where}", f"create {where} pointing at a ClusterQueue, or fix queueName"
        )
    cq_name = cluster.local_queue.get("spec", {}).get("clusterQueue")
    if cluster.cluster_queue is None:
        return _unread(cluster, "Kueue", "clusterqueues") or Check(
            "Kueue", Verdict.FAIL, f"{where} points at ClusterQueue {cq_name}, which does not exist", "create it"
        )
    nodes = _gpu_nodes(cluster, target)
    flavors = {f["metadata"]["name"]: f for f in cluster.flavors}
    quota = 0.0
    names = []
    for group in cluster.cluster_queue.get("spec", {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            if flavor["name"] in flavors and _covers(flavors[flavor["name"]], nodes):
                names.append(flavor["name"])
                quota += sum(quantity(r["nominalQuota"]) for r in flavor.get("resources") or [] if r["name"] == GPU)
    need = target.plan.total_gpus
    what = f"{where} -> ClusterQueue {cq_name}: {GPU} quota {quota:g} on flavors covering {target.plan.instance_type}"
    what += f" ({', '.join(names) or 'none'}); the run needs {need}"
    if quota < need:
        return Check(
            "Kueue",
            Verdict.FAIL,
            what + ": Kueue never admits it",
            f"raise the ClusterQueue's nominalQuota of {GPU} on a flavor whose nodeLabels match {target.plan.instance_type}",
        )
    return Check("Kueue", Verdict.OK, what)


def rbac(cluster: Cluster) -> Check:
    denied = [what for what, ok in cluster.allowed.items() if not ok]
    if denied:
        return Check(
            "RBAC",
            Verdict.FAIL,
            "you cannot " + "; ".join(denied),
            "bind a Role granting those verbs on grporuns.grpo.dev in that namespace",
        )
    return Check("RBAC", Verdict.OK, "you can " + "; ".join(cluster.allowed) if cluster.allowed else "nothing asked")


def _requests(pod: dict[str, Any]) -> dict[str, float]:
    """What the scheduler counts for a pod: its containers' requests summed, or an init container's if larger."""
    total: dict[str, float] = {}
    for container in pod.get("containers") or []:
        for key, value in ((container.get("resources") or {}).get("requests") or {}).items():
            total[key] = total.get(key, 0.0) + quantity(value)
    for container in pod.get("initContainers") or []:
        for key, value in ((container.get("resources") or {}).get("requests") or {}).items():
            total[key] = max(total.get(key, 0.0), quantity(value))
    return total


def _free(cluster: Cluster, node: dict[str, Any]) -> dict[str, float]:
    free = {k: quantity(v) for k, v in (node.get("status", {}).get("allocatable") or {}).items()}
    for pod in cluster.pods:
        if pod.get("spec", {}).get("nodeName") == node["metadata"]["name"]:
            for key, value in _requests(pod["spec"]).items():
                free[key] = free.get(key, 0.0) - value
    return free


def _why_not(cluster: Cluster, node: dict[str, Any], pod: dict[str, Any]) -> str | None:
    """Why `pod` cannot go on `node` now, in the scheduler's terms, or None when it fits."""
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (pod.get("nodeSelector") or {}).items()):
        return "node selector"
    if node.get("spec", {}).get("unschedulable"):
        return "cordoned"
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions") or []
    )
    if not ready:
        return "not Ready"
    if blocking := _blocking(node, pod.get("tolerations") or []):
        return f"taint {blocking[0]}"
    free = _free(cluster, node)
    short = [key for key, value in _requests(pod).items() if free.get(key, 0.0) + 1e-9 < value]
    return f"{', '.join(short)} {'in use' if short else ''}".strip() or None


def placement(cluster: Cluster, target: Target) -> Check:
    """Whether the run's pods fit on the nodes now, as the scheduler would count it."""
    if unread := _unread(cluster, "placement", "nodes", "pods"):
        return unread
    templates = target.templates()
    plan = target.plan
    worker_nodes = _gpu_nodes(cluster, target)
    reasons = {n["metadata"]["name"]: _why_not(cluster, n, templates["worker"]) for n in worker_nodes}
    fit = [name for name, why in reasons.items() if why is None]
    need = plan.worker_replicas
    what = (
        f"{len(fit)} of {len(worker_nodes)} {plan.instance_type} nodes have {plan.gpus_per_node} GPUs"
        + (f" and {plan.efa_per_node} EFA devices" if plan.efa_per_node else "")
        + f" free; the run needs {need}"
    )
    elsewhere = []
    for role in ("head", "reward service"):
        if role in templates and not any(_why_not(cluster, n, templates[role]) is None for n in cluster.nodes):
            elsewhere.append(f"no node has room for the {role} ({_describe(_requests(templates[role]))})")
    if len(fit) >= need and not elsewhere:
        return Check("placement", Verdict.OK, f"{what}: it can start")
    held = [f"{name}: {why}" for name, why in reasons.items() if why is not None]
    why = "; ".join(held[:4] + elsewhere)
    return Check(
        "placement",
        Verdict.WARN,
        f"{what}, {len(fit)} free: it would wait ({why})",
        "wait for the pods holding those GPUs to end, uncordon nodes, or add nodes of the type",
    )


def _describe(requests: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in sorted(requests.items()))


def checks(cluster: Cluster, target: Target | None = None) -> list[Check]:
    """Every check, in the order of the table."""
    found: list[Check | None] = [
        grporun_crd(cluster),
        operator(cluster),
        kuberay_crds(cluster, target),
        kuberay_operator(cluster),
        gpu_nodes(cluster, target),
        device_plugins(cluster, target),
        taints(cluster, target),
        storage(cluster, target) if target else None,
        kueue(cluster, target),
        rbac(cluster),
        placement(cluster, target) if target else None,
    ]
    return [c for c in found if c is not None]
