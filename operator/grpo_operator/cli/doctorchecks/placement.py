"""`grpo doctor -f`'s placement: whether the run's pods fit on the nodes now, counted as the scheduler counts
(selectors, cordons, readiness, taints, the requests of the pods bound there), and why not.
"""

from __future__ import annotations

from typing import Any

from grpo_operator.cli.doctorchecks.model import (
    Check,
    Cluster,
    Target,
    Verdict,
    gpu_nodes_of,
    is_ready,
    quantity,
    unread,
)
from grpo_operator.cli.doctorchecks.nodes import blocking


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
    if not is_ready(node):
        return "not Ready"
    if taint := blocking(node, pod.get("tolerations") or []):
        return f"taint {taint[0]}"
    free = _free(cluster, node)
    short = [key for key, value in _requests(pod).items() if free.get(key, 0.0) + 1e-9 < value]
    return f"{', '.join(short)} {'in use' if short else ''}".strip() or None


def placement(cluster: Cluster, target: Target) -> Check:
    """Whether the run's pods fit on the nodes now, as the scheduler would count it."""
    if cannot := unread(cluster, "placement", "nodes", "pods"):
        return cannot
    templates = target.templates()
    plan = target.plan
    worker_nodes = gpu_nodes_of(cluster, target)
    reasons = {n["metadata"]["name"]: _why_not(cluster, n, templates["worker"]) for n in worker_nodes}
    fit = [name for name, why in reasons.items() if why is None]
    need = plan.worker_replicas
    what = (
        f"{len(fit)} of {len(worker_nodes)} {plan.instance_type} nodes have {plan.gpus_per_node} GPUs"
        + (f" and {plan.fabric_devices_per_node} {plan.fabric} devices" if plan.fabric_devices_per_node else "")
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
