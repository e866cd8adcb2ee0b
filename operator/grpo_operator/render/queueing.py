"""What Kueue and the gang schedulers read from a run's RayCluster: labels, and whether it is created suspended.

Under a Kueue LocalQueue (`spec.scheduling.queueName`) the RayCluster carries Kueue's queue label and is
created suspended: Kueue makes one Workload of the head and every worker group and admits it whole by
unsuspending it, and KubeRay creates no pod before that, so a run that does not fit holds no GPU. Creating it
suspended ourselves means admission holds with or without Kueue's webhook. Topology Aware Scheduling needs no
setting of the run's own; `apply_steps` keeps what Kueue writes into the pod templates on admission.

For a gang scheduler (`spec.scheduling.gang`) the run only adds the labels KubeRay's batch-scheduler plugin for
it reads; which plugin runs is the KubeRay operator's own setting, the platform's choice, not a run's.
docs/integrations/kueue.md and kuberay.md: the upstream behaviour each of these relies on.
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

    Why never applied again: on admission Kueue writes its PodSet info into the pod templates (the flavor's
    node labels and tolerations, its podset label, and under Topology Aware Scheduling its workload
    annotation and topology scheduling gate) and unsuspends the cluster. `workerGroupSpecs` is an atomic list
    in KubeRay's CRD, so a forced apply of the rendered spec would drop all of that: a worker pod KubeRay makes
    afterwards would be ungated, placed wherever it fits, and counted as usage outside Kueue's Workload, and
    Kueue's equivalence check would not notice. The spec that renders the cluster is immutable, so a later
    apply has nothing to bring (docs/integrations/kueue.md: what Kueue writes on admission)."""
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
