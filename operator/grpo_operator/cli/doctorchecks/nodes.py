"""`grpo doctor`'s node checks: GPU nodes of the run's instance type with every GPU and EFA device allocatable,
the device plugins' pods Ready on them, and their taints against the tolerations runs carry.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from grpo_operator.cli.doctorchecks.model import (
    EFA,
    GPU,
    PLUGINS,
    Check,
    Cluster,
    Target,
    Verdict,
    containers,
    instance_types,
    is_ready,
    name_of,
    quantity,
    selector_text,
    typed_gpu_nodes,
    unread,
)


def _wanted(cluster: Cluster, target: Target | None) -> str:
    """The node types looked for, each with how its nodes are selected."""
    types = instance_types(cluster, target)
    return "; ".join(f"{t.name} ({selector_text(t)})" for t in sorted(types, key=lambda t: t.name))


def gpu_nodes(cluster: Cluster, target: Target | None) -> Check:
    if cannot := unread(cluster, "GPU nodes", "nodes"):
        return cannot
    typed = typed_gpu_nodes(cluster, target)
    if not typed:
        return Check(
            "GPU nodes",
            Verdict.FAIL,
            f"no node of {_wanted(cluster, target)}",
            "add a node group of that instance type (or pick a type the cluster has in spec.topology.instanceType)",
        )
    short: list[str] = []
    for node, instance in typed:
        allocatable = node.get("status", {}).get("allocatable") or {}
        needs = [(GPU, instance.gpus)] + (
            [(str(instance.fabric.resource_name), instance.devices)] if instance.devices else []
        )
        for resource, count in needs:
            have = int(quantity(allocatable.get(resource, 0)))
            if have < count:
                short.append(f"{node['metadata']['name']}: {resource} {have} of {instance.name}'s {count}")
    counts: dict[str, int] = {}
    for _, instance in typed:
        counts[instance.name] = counts.get(instance.name, 0) + 1
    summary = ", ".join(f"{n} x {t}" for t, n in sorted(counts.items()))
    if short:
        return Check(
            "GPU nodes",
            Verdict.FAIL,
            f"{summary}; allocatable short: {'; '.join(short)} (without the fabric, NCCL falls back to TCP sockets)",
            "check the device plugin pod on each node named (kubectl get pods -A -o wide --field-selector "
            "spec.nodeName=<node>) and the devices the instance has",
        )
    if target is not None and len(typed) < target.plan.worker_replicas:
        return Check(
            "GPU nodes",
            Verdict.FAIL,
            f"{summary}; the run needs {target.plan.worker_replicas} nodes of {target.plan.instance_type}",
            "add nodes to the node group, or lower spec.topology.actor.nodes",
        )
    return Check("GPU nodes", Verdict.OK, f"{summary}, each with every GPU and fabric device allocatable")


def _plugin_of(daemonset: dict[str, Any]) -> str | None:
    images = " ".join(str(c.get("image", "")) for c in containers(daemonset)).lower()
    if "device-plugin" not in images:
        return None
    return EFA if "efa" in images else GPU if "nvidia" in images else None


def device_plugins(cluster: Cluster, target: Target | None) -> Check:
    if cannot := unread(cluster, "device plugins", "nodes", "daemonsets", "pods"):
        return cannot
    plugins = {name_of(d): kind for d in cluster.daemonsets if (kind := _plugin_of(d))}
    serving: dict[tuple[str, str], bool] = {}
    for pod in cluster.pods:
        owner = next((o for o in pod["metadata"].get("ownerReferences") or [] if o.get("kind") == "DaemonSet"), None)
        kind = plugins.get(f"{pod['metadata'].get('namespace')}/{owner['name']}") if owner else None
        node = pod.get("spec", {}).get("nodeName")
        if kind and node:
            serving[(node, kind)] = serving.get((node, kind), False) or is_ready(pod)
    missing = []
    typed = typed_gpu_nodes(cluster, target)
    for node, instance in typed:
        needs = [GPU] + ([EFA] if instance.efa else [])  # the plugins doctor knows by their images
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
        "device plugins", Verdict.OK, f"{', '.join(sorted(plugins)) or 'none needed'}: Ready on {len(typed)} GPU nodes"
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


def blocking(node: dict[str, Any], tolerations: list[dict[str, Any]], *, state: bool = True) -> list[str]:
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
    if cannot := unread(cluster, "taints", "nodes"):
        return cannot
    worker = target.templates()["worker"].get("tolerations", []) if target else None
    # node.kubernetes.io/* taints follow the node's state (cordoned, not ready): placement reports those. Without
    # a run, a node's workers carry its type's tolerations.
    blocked = [
        f"{n['metadata']['name']} ({', '.join(b)})"
        for n, instance in typed_gpu_nodes(cluster, target)
        if (b := blocking(n, worker if worker is not None else list(instance.tolerations), state=False))
    ]
    if blocked:
        return Check(
            "taints",
            Verdict.FAIL,
            f"taints the workers do not tolerate: {'; '.join(blocked[:4])}",
            "add the taint to spec.scheduling.tolerations, or taint GPU nodes nvidia.com/gpu=true:NoSchedule only",
        )
    return Check("taints", Verdict.OK, "the workers tolerate every taint of the GPU nodes")
