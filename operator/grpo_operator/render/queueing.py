"""What Kueue and the gang schedulers read from a run's RayCluster: labels, and whether it is created suspended.

Kueue (sigs.k8s.io/kueue v0.17.0, the version devtools/grpo_dev/localcluster/versions.py pins) manages a
RayCluster that carries the `kueue.x-k8s.io/queue-name` label (pkg/controller/constants/constants.go:23, read
by jobframework/interface.go:200-201): it makes one Workload of the head and every worker group
(pkg/controller/jobs/raycluster/raycluster_controller.go:105-150) and admits it whole by setting
`spec.suspend: false` (:152-158); preemption sets it back to true (:93-95). Kueue's mutating webhook would
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


def apply_steps(run: GRPORun, children: list[dict[str, Any]], *, cluster_exists: bool,
                admitted: bool) -> list[tuple[Literal["create", "apply"], dict[str, Any]]]:  # fmt: skip
    """How the reconciler puts each child in place: `("apply", child)` (server-side apply) for all, except
    under a Kueue queue: the RayCluster is created as rendered (suspended) and later applied without
    `spec.suspend`, which Kueue sets from then on (a forced apply of `true` would undo an admission); the
    reward Deployment is left out until Kueue has admitted the cluster, so the scorers run with the GPUs or
    not at all."""
    if not queued(run):
        return [("apply", child) for child in children]
    steps: list[tuple[Literal["create", "apply"], dict[str, Any]]] = []
    for child in children:
        if child["kind"] == "RayCluster":
            if not cluster_exists:
                steps.append(("create", child))
                continue
            steps.append(("apply", {**child, "spec": {k: v for k, v in child["spec"].items() if k != "suspend"}}))
            continue
        if child["kind"] == "Deployment" and child["metadata"]["labels"].get(names.COMPONENT_LABEL) == "reward" \
                and not admitted:  # fmt: skip
            continue
        steps.append(("apply", child))
    return steps
