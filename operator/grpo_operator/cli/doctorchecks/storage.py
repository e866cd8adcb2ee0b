"""`grpo doctor`'s capacity checks for a run: its claim (bound, ReadWriteMany, room for its checkpoints and the
model) and, when it names a queue, Kueue's LocalQueue, ClusterQueue and GPU quota on a flavor covering its nodes.
"""

from __future__ import annotations

import math
from typing import Any

from grpo_operator.cli.doctorchecks.model import (
    GPU,
    LOCALQUEUE_CRD,
    NEAR_FULL,
    Check,
    Cluster,
    Target,
    Verdict,
    gpu_nodes_of,
    quantity,
    unread,
)


def storage(cluster: Cluster, target: Target) -> Check:
    spec = target.run.spec.storage
    where = f"PersistentVolumeClaim {target.namespace}/{spec.claim_name}"
    if cluster.claim is None:
        return unread(cluster, "storage", "persistentvolumeclaims") or Check(
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
        return unread(cluster, "Kueue", "customresourcedefinitions") or Check(
            "Kueue", Verdict.FAIL, f"spec.scheduling.queueName {queue} but Kueue is not installed", "install Kueue"
        )
    if cluster.local_queue is None:
        return unread(cluster, "Kueue", "localqueues") or Check(
            "Kueue", Verdict.FAIL, f"no {where}", f"create {where} pointing at a ClusterQueue, or fix queueName"
        )
    cq_name = cluster.local_queue.get("spec", {}).get("clusterQueue")
    if cluster.cluster_queue is None:
        return unread(cluster, "Kueue", "clusterqueues") or Check(
            "Kueue", Verdict.FAIL, f"{where} points at ClusterQueue {cq_name}, which does not exist", "create it"
        )
    nodes = gpu_nodes_of(cluster, target)
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
