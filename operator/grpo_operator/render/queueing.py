"""What Kueue and the gang schedulers read from a run's RayCluster: labels, and whether it is created suspended.

Kueue (sigs.k8s.io/kueue v0.17.0, the version devtools/grpo_dev/localcluster/versions.py pins) manages a
RayCluster that carries the `kueue.x-k8s.io/queue-name` label (pkg/controller/constants/constants.go:23, read
by jobframework/interface.go:200-201): it makes one Workload of the head and every worker group
(pkg/controller/jobs/raycluster/raycluster_controller.go:105-150) and admits it whole by setting
`spec.suspend: false` (:152-158); preemption sets it back to true (:93-95). Under Topology Aware Scheduling
(feature gate on by default since v0.14, pkg/features/kube_features.go:402-405) the same integration reads a
PodSet topology request from each template's annotations (raycluster_controller.go:116-122, 140-146), and a
ClusterQueue whose flavors all name a Topology applies TAS to every PodSet without one
(scheduler/flavorassigner/tas_flavorassigner.go:211-220, cache/scheduler/clusterqueue.go:673-682): the
Workload is admitted only once every pod fits a node's free capacity, so a run needs no setting of its own
for it; `apply_steps` keeps what Kueue then writes into the pod templates. Kueue's mutating webhook would
suspend a labelled RayCluster on creation (raycluster_webhook.go:87-94, jobframework/defaults.go:36-45); the
operator creates it suspended itself, so admission holds with or without Kueue's webhooks. KubeRay v1.5.0
creates no pod of a suspended cluster (ray-operator/controllers/ray/raycluster_controller.go:552-578).

Gang schedulers, as KubeRay v1.5.0's batch-scheduler plugins read the RayCluster (ray-operator/controllers/ray/
batchscheduler/): Volcano makes one PodGroup of the whole cluster and takes its queue from
`volcano.sh/queue-name` and its priority from `ray.io/priority-class-name` (volcano/volcano_scheduler.go:31,
237-241); KAI needs `kai.scheduler/queue` (kai-scheduler/kai_scheduler.go:27, 50-56); scheduler-plugins'
coscheduling gangs a cluster labelled `ray.io/gang-scheduling-enabled` (scheduler-plugins/
scheduler_plugins.go:77-79, 110-113; utils/constant.go:51). Which plugin runs is the KubeRay operator's own
`batchScheduler` setting (schedulermanager.go:52-84), the platform's choice, not a run's.
"""

from __future__ import annotations

from typing import Any, Literal

from grpo_operator.api import GRPORun
from grpo_operator.api.spec import GangScheduler
from grpo_operator.render import names

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
VOLCANO_QUEUE_LABEL = "volcano.sh/queue-name"
RAY_PRIORITY_CLASS_LABEL = "ray.io/priority-class-name"
KAI_QUEUE_LABEL = "kai.scheduler/queue"
COSCHEDULING_LABEL = "ray.io/gang-scheduling-enabled"


def queued(run: GRPORun) -> bool:
    """Whether Kueue admits the run: its RayCluster is created suspended and its reward service waits."""
    return run.spec.scheduling.queue_name is not None


def cluster_labels(run: GRPORun) -> dict[str, str]:
    """The RayCluster labels Kueue and the chosen gang scheduler read."""
    scheduling = run.spec.scheduling
    labels: dict[str, str] = {}
    if scheduling.queue_name is not None:
        labels[KUEUE_QUEUE_LABEL] = scheduling.queue_name
    gang = scheduling.gang
    if gang is None:
        return labels
    if gang.scheduler is GangScheduler.VOLCANO:
        if gang.queue is not None:
            labels[VOLCANO_QUEUE_LABEL] = gang.queue
        if scheduling.priority_class_name:
            labels[RAY_PRIORITY_CLASS_LABEL] = scheduling.priority_class_name
    elif gang.scheduler is GangScheduler.KAI:
        labels[KAI_QUEUE_LABEL] = gang.queue or ""
    else:
        labels[COSCHEDULING_LABEL] = "true"
    return labels


def apply_steps(
    run: GRPORun, children: list[dict[str, Any]], *, cluster_exists: bool, admitted: bool
) -> list[tuple[Literal["create", "apply"], dict[str, Any]]]:
    """How the reconciler puts each child in place: `("apply", child)` (server-side apply) for all, except
    under a Kueue queue: the RayCluster is created as rendered (suspended) and never applied after that; the
    reward Deployment is left out until Kueue has admitted the cluster, so the scorers run with the GPUs or
    not at all.

    Why never applied again: when Kueue admits the cluster it writes its PodSet info into the pod templates
    (the flavor's node labels and tolerations, the `kueue.x-k8s.io/podset` label, and under Topology Aware
    Scheduling the `kueue.x-k8s.io/workload` annotation and the `kueue.x-k8s.io/topology` scheduling gate:
    Kueue v0.17.0 pkg/podset/podset.go:56-91, jobframework/reconciler.go:1506-1528, raycluster/common.go:169-187)
    and sets `spec.suspend: false`. KubeRay v1.5.0's CRD declares `workerGroupSpecs` an atomic list (no
    x-kubernetes-list-type: ray.io_rayclusters.yaml:4527) and `nodeSelector` an atomic map, so a forced apply
    of the rendered spec replaces all of that: a worker pod KubeRay makes afterwards (after a crash) would be ungated, placed by
    kube-scheduler wherever it fits, and counted by Kueue as usage outside its Workload. Kueue would not
    evict for it (its equivalence check compares only containers and counts, jobframework/reconciler.go:
    1196-1227, util/equality/podset.go:29-48), so nothing would say so. The run's spec that renders the cluster
    is immutable (api/spec.py MUTABLE_SPEC_FIELDS): a later apply has nothing to bring."""
    if not queued(run):
        return [("apply", child) for child in children]
    steps: list[tuple[Literal["create", "apply"], dict[str, Any]]] = []
    for child in children:
        if child["kind"] == "RayCluster":
            if not cluster_exists:
                steps.append(("create", child))
            continue
        if (
            child["kind"] == "Deployment"
            and child["metadata"]["labels"].get(names.COMPONENT_LABEL) == "reward"
            and not admitted
        ):
            continue
        steps.append(("apply", child))
    return steps
