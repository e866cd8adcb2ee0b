"""Read the state of a run's children in the children's own words: the RayCluster's status as KubeRay writes
it, pod problems as the scheduler and kubelet state them, the reward Deployment's readiness. Pure.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from kubernetes import client

from grpo_operator.api.status import Reason, StopReason
from grpo_operator.render import names, queueing
from grpo_operator.status.observation import ClusterObservation, GpuObservation, KueueEviction, RewardObservation

GPU_RESOURCE = "nvidia.com/gpu"
PREFLIGHT_FAILED = "preflight failed: "
WAITING_PROBLEMS = {
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
}


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)


def cluster_ready(cluster: dict[str, Any], workers: int) -> tuple[bool, str]:
    """KubeRay v1.5 reports `RayClusterProvisioned` (all pods ready once) and `HeadPodReady`; older versions
    only `state: ready`. Ready needs the head and every worker."""
    status = cluster.get("status") or {}
    provisioned = _condition(status, "RayClusterProvisioned")
    head = _condition(status, "HeadPodReady")
    ready_workers = int(status.get("readyWorkerReplicas") or 0)
    if provisioned is not None or head is not None:
        ok = bool(provisioned and provisioned.get("status") == "True" and head and head.get("status") == "True")
    else:
        ok = status.get("state") == "ready"
    ok = ok and ready_workers >= workers
    if ok:
        return True, "the RayCluster is ready"
    return False, f"waiting for KubeRay: {ready_workers}/{workers} workers ready" + (
        f", head: {head.get('reason')}" if head is not None and head.get("status") != "True" else ""
    )


def preflight_failure(container: client.V1ContainerStatus) -> str | None:
    """The `preflight failed: <check>: <reason>` line of a worker's failed preflight init container: the kubelet
    keeps its log tail as the termination message (`terminationMessagePolicy: FallbackToLogsOnError`), in the
    current state or, once it restarts, the last one. The prefix is grpo_launcher/checks.py FAILED_PREFIX."""
    for state in (container.state, container.last_state):
        ended = state.terminated if state else None
        if ended is not None and ended.exit_code and ended.message and PREFLIGHT_FAILED in ended.message:
            line = [x for x in ended.message.splitlines() if PREFLIGHT_FAILED in x][-1]
            return line[line.index(PREFLIGHT_FAILED) :].strip()
    return None


def pod_problems(pods: list[client.V1Pod]) -> list[str]:
    """One line per pod that cannot make progress, with the scheduler's or kubelet's own words."""
    lines = []
    for pod in pods:
        name = pod.metadata.name if pod.metadata else "?"
        status = pod.status
        if status is None:
            continue
        for cond in status.conditions or []:
            if cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable":
                lines.append(f"pod {name} unschedulable: {cond.message}")
        for container in status.init_container_statuses or []:
            failure = preflight_failure(container)
            if failure is not None:
                node = pod.spec.node_name if pod.spec and pod.spec.node_name else "?"
                lines.append(f"pod {name} on node {node}: {failure}")
        for container in (status.init_container_statuses or []) + (status.container_statuses or []):
            if container.name == names.PREFLIGHT_CONTAINER and preflight_failure(container) is not None:
                continue  # said above, in the preflight's words
            waiting = container.state.waiting if container.state else None
            if waiting is not None and waiting.reason in WAITING_PROBLEMS:
                detail = f": {waiting.message}" if waiting.message else ""
                lines.append(f"pod {name} container {container.name} {waiting.reason}{detail}")
    return lines


def admission_queue(cluster: dict[str, Any]) -> str | None:
    """The Kueue LocalQueue a RayCluster waits in: it carries the queue label and is suspended (created so,
    or suspended again by a preemption); Kueue admits it by setting `spec.suspend: false` (render/queueing.py)."""
    queue = ((cluster.get("metadata") or {}).get("labels") or {}).get(queueing.KUEUE_QUEUE_LABEL)
    return queue if queue and (cluster.get("spec") or {}).get("suspend") is True else None


def kueue_eviction(workloads: list[dict[str, Any]]) -> KueueEviction | None:
    """The Evicted condition (status True) of the RayCluster's Kueue Workload, in Kueue's words; the newest when
    Kueue has made more than one (a Workload is made again after its job's pod sets change)."""
    found: list[tuple[str, KueueEviction]] = []
    for workload in workloads:
        name = (workload.get("metadata") or {}).get("name") or "?"
        for cond in (workload.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "Evicted" and cond.get("status") == "True" and cond.get("reason"):
                eviction = KueueEviction(name, str(cond["reason"]), str(cond.get("message") or ""))
                found.append((str(cond.get("lastTransitionTime") or ""), eviction))
    return max(found, key=lambda pair: pair[0])[1] if found else None


def cluster_observation(
    cluster: dict[str, Any] | None,
    workers: int,
    pods: list[client.V1Pod],
    workloads: list[dict[str, Any]] | None = None,
) -> ClusterObservation | None:
    """What the run's status needs of its RayCluster: ready or not and why, the Kueue queue it waits in while
    suspended under one, and, from its Kueue `workloads`, why Kueue suspended it."""
    if cluster is None:
        return None
    if (cluster.get("metadata") or {}).get("deletionTimestamp"):  # a restart away from a node deleted it
        return ClusterObservation(ready=False, message="the RayCluster is being deleted; it is made again next")
    queue = admission_queue(cluster)
    if queue is not None:
        return ClusterObservation(
            ready=False,
            message=f"waiting for Kueue to admit the RayCluster in LocalQueue {queue}",
            queue=queue,
            eviction=kueue_eviction(workloads or []),
        )
    ready, message = cluster_ready(cluster, workers)
    problems = pod_problems(pods)
    if problems:
        message = "; ".join(problems)
    failed = [line for line in problems if f": {PREFLIGHT_FAILED}" in line]
    return ClusterObservation(ready=ready, message=message, preflight_failure=failed[0] if failed else "")


def worker_nodes(pods: list[client.V1Pod]) -> tuple[tuple[str, str], ...]:
    """(pod IP, node name) of each scheduled Ray worker: Ray names a node by its pod's IP."""
    found = []
    for pod in pods:
        labels = (pod.metadata.labels if pod.metadata else None) or {}
        ip = pod.status.pod_ip if pod.status else None
        node = pod.spec.node_name if pod.spec else None
        if labels.get(names.COMPONENT_LABEL) == "ray-worker" and ip and node:
            found.append((ip, node))
    return tuple(found)


def trainer_image(pods: list[client.V1Pod]) -> tuple[str | None, str | None]:
    """(image, imageID) of a running Ray container of the run, as the kubelet reports it: the digest that
    actually runs, whatever tag the spec named."""
    for pod in pods:
        for container in (pod.status.container_statuses or []) if pod.status else []:
            if container.name.startswith("ray") and container.image_id:
                return container.image, container.image_id
    return None, None


def reward_observation(
    deployment: client.V1Deployment | None, error_ratio: float | None, max_ratio: float
) -> RewardObservation | None:
    if deployment is None:
        return None
    status = deployment.status
    ready = int((status.ready_replicas if status else 0) or 0)
    if ready < 1:
        return RewardObservation(False, Reason.NOT_READY, "no reward service replica is ready")
    if error_ratio is not None and error_ratio > max_ratio:
        return RewardObservation(
            False, Reason.SCORING_ERRORS, f"service error ratio {error_ratio:g} above {max_ratio:g}: scoring is failing"
        )
    return RewardObservation(True, Reason.READY, f"{ready} replica(s) ready")


def _pod_gpus(pod: client.V1Pod) -> int:
    """The GPUs the scheduler set aside for the pod: its containers' requests (the limit when no request)."""
    total = 0
    for container in pod.spec.containers if pod.spec else []:
        resources = container.resources
        wanted = (resources.requests or {}).get(GPU_RESOURCE) if resources else None
        if wanted is None and resources is not None:
            wanted = (resources.limits or {}).get(GPU_RESOURCE)
        total += int(str(wanted)) if wanted is not None else 0
    return total


def _bound_at(pod: client.V1Pod) -> datetime | None:
    for cond in (pod.status.conditions or []) if pod.status else []:
        if cond.type == "PodScheduled" and cond.status == "True":
            moment: datetime | None = cond.last_transition_time
            return moment
    return None


def stopped(pod: client.V1Pod) -> tuple[str, datetime] | None:
    """Why and since when a pod is terminating, in Kubernetes's words: the reason of the DisruptionTarget condition
    the API server, scheduler, taint manager or kubelet set before deleting it (EvictionByEvictionAPI for a drain,
    PreemptionByScheduler, DeletionByTaintManager, TerminationByKubelet) and when it was set; `Deleted` and the
    deletion's start (its deletionTimestamp less the grace period) for a pod deleted without one. None while it
    is not terminating."""
    deleting = pod.metadata.deletion_timestamp if pod.metadata else None
    if deleting is None:
        return None
    for cond in (pod.status.conditions or []) if pod.status else []:
        if cond.type == "DisruptionTarget" and cond.status == "True" and cond.reason:
            return str(cond.reason), cond.last_transition_time or deleting
    grace = (pod.spec.termination_grace_period_seconds if pod.spec else None) or 0
    return StopReason.DELETED.value, deleting - timedelta(seconds=grace)


def gpu_observation(pods: list[client.V1Pod]) -> GpuObservation:
    """The GPUs the run's pods hold: those bound to a node and not finished (a finished pod's GPUs are free); the
    first of them that is terminating, and why."""
    gpus, earliest, grace = 0, None, None
    stop: tuple[str, datetime] | None = None
    for pod in pods:
        bound = pod.spec is not None and bool(pod.spec.node_name)
        finished = pod.status is not None and pod.status.phase in ("Succeeded", "Failed")
        held = _pod_gpus(pod) if bound and not finished else 0
        if held:
            gpus += held
            at = _bound_at(pod)
            earliest = at if earliest is None or (at is not None and at < earliest) else earliest
            seconds = pod.spec.termination_grace_period_seconds if pod.spec else None
            grace = seconds if grace is None or (seconds is not None and seconds < grace) else grace
            going = stopped(pod)
            stop = going if going is not None and (stop is None or going[1] < stop[1]) else stop
    return GpuObservation(
        gpus=gpus,
        bound_at=earliest,
        grace_seconds=grace,
        stopped_by=stop[0] if stop else None,
        stopped_at=stop[1] if stop else None,
    )


RAY_COMPONENTS = ("ray-head", "ray-worker")


def oom_killed(pods: list[client.V1Pod]) -> tuple[str, datetime] | None:
    """The latest container of the run's Ray pods the kernel killed for memory, in the kubelet's words: its state or,
    once restarted (KubeRay leaves restartPolicy to Kubernetes' Always), its last state `terminated.reason:
    OOMKilled`; named "pod <p> container <c> on node <n>", with when it ended. On cgroup v2 the kubelet makes each
    container one OOM unit (memory.oom.group), so the kill of any process in it ends the container and shows here.
    The reward service's pods are not the job's: their restarts show as scoring errors."""
    found: tuple[str, datetime] | None = None
    for pod in pods:
        labels = (pod.metadata.labels if pod.metadata else None) or {}
        if labels.get(names.COMPONENT_LABEL) not in RAY_COMPONENTS:
            continue
        name = pod.metadata.name if pod.metadata else "?"
        node = pod.spec.node_name if pod.spec and pod.spec.node_name else "?"
        for container in (pod.status.container_statuses or []) if pod.status else []:
            for state in (container.state, container.last_state):
                ended = state.terminated if state else None
                at = ended.finished_at if ended is not None and ended.reason == "OOMKilled" else None
                if at is not None and (found is None or at > found[1]):
                    found = (f"pod {name} container {container.name} on node {node}", at)
    return found


def unschedulable_since(cluster: dict[str, Any] | None, pods: list[client.V1Pod]) -> datetime | None:
    """Since when the RayCluster's longest-waiting pod has been unschedulable, as the scheduler set its PodScheduled
    condition (False, Unschedulable); None while none is. A RayCluster being deleted has none: its pods go with it,
    and a restart that deleted it is not to be judged by them."""
    if cluster is None or (cluster.get("metadata") or {}).get("deletionTimestamp"):
        return None
    waiting: list[datetime] = []
    for pod in pods:
        if pod.metadata is not None and pod.metadata.deletion_timestamp is not None:
            continue
        for cond in (pod.status.conditions or []) if pod.status else []:
            unschedulable = cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable"
            if unschedulable and cond.last_transition_time is not None:
                waiting.append(cond.last_transition_time)
    return min(waiting) if waiting else None
