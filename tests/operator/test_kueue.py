"""Runs under a Kueue queue, against Kueue's real controller manager on the simulated cluster.

`kueue` runs sigs.k8s.io/kueue's manager (built from its Go module, versions.KUEUE_VERSION) on the session's
`simulated_cluster` (real KubeRay v1.5.0, kube-scheduler, kwok p5en nodes), with no webhook registered
(grpo_dev/localcluster/kueue.py says why that is the same for a run). Each test gets a ClusterQueue whose GPU
quota is ONE p5en node (8 GPUs): smaller than two quickstart runs, and smaller than one 2-node run. Kueue
admits; KubeRay makes the pods; kube-scheduler places them; the operator only reads what they did.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from grpo_dev.localcluster import SimulatedCluster
from grpo_dev.localcluster.kueue import start_kueue
from grpo_operator.render import names

from tests.operator.harness import fake, manifest, phase_is, running_operator, wait_for

pytestmark = pytest.mark.integration

Kubectl = Callable[..., Any]
QUEUE = "team-a"
GPU_QUOTA = 8  # one p5en.48xlarge


def get(kubectl: Kubectl, *args: str) -> Any:
    return json.loads(kubectl("get", *args, "-o", "json").stdout)


@pytest.fixture(scope="module")
def kueue(simulated_cluster: SimulatedCluster) -> SimulatedCluster:
    start_kueue(simulated_cluster)
    return simulated_cluster


@pytest.fixture
def queue(kueue: SimulatedCluster, sim_namespace: str) -> Iterator[str]:
    """LocalQueue `team-a` in the test's namespace, of a ClusterQueue with 8 GPUs (and CPU, memory and EFA
    enough for several runs, so the GPUs are what is short): the YAML README's "Queues" section shows."""
    flavor, cluster_queue = f"f-{sim_namespace}"[:63], f"cq-{sim_namespace}"[:63]
    quota = {"cpu": "2000", "memory": "64Ti", "nvidia.com/gpu": str(GPU_QUOTA), "vpc.amazonaws.com/efa": "256"}
    objects = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cluster_queue},
         "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": sim_namespace}},
                  "resourceGroups": [{"coveredResources": list(quota), "flavors": [{
                      "name": flavor, "resources": [{"name": k, "nominalQuota": q} for k, q in quota.items()]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": QUEUE, "namespace": sim_namespace}, "spec": {"clusterQueue": cluster_queue}},
    ]  # fmt: skip
    kueue.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    yield QUEUE
    kueue.kubectl("delete", "localqueue", QUEUE, "-n", sim_namespace, "--wait=false", check=False)
    kueue.kubectl("delete", "clusterqueue", cluster_queue, "--wait=false", check=False)
    kueue.kubectl("delete", "resourceflavor", flavor, "--wait=false", check=False)


def reason_is(kubectl: Kubectl, namespace: str, name: str, reason: str) -> dict[str, Any] | None:
    run: dict[str, Any] = get(kubectl, "grporun", name, "-n", namespace)
    return run if run.get("status", {}).get("reason") == reason else None


def condition(run: dict[str, Any], type_: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in run["status"]["conditions"] if c["type"] == type_)
    return found


def ray_pods(kubectl: Kubectl, namespace: str, run: str) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = get(kubectl, "pods", "-n", namespace, "-l", f"ray.io/cluster={names.ray_cluster(run)}")["items"]
    return pods


def refused_for_gpus(kubectl: Kubectl, namespace: str, run: str) -> dict[str, Any] | None:
    """Kueue's Workload of the run once Kueue's scheduler has tried it and reserved no quota for lack of GPUs
    (its QuotaReserved condition, in Kueue's words), else None."""
    workload = workload_of(kubectl, namespace, run)
    conditions = (workload or {}).get("status", {}).get("conditions", [])
    reserved = next((c for c in conditions if c["type"] == "QuotaReserved"), None)
    if reserved is not None and reserved["status"] == "False" and "nvidia.com/gpu" in reserved["message"]:
        return workload
    return None


def workload_of(kubectl: Kubectl, namespace: str, run: str) -> dict[str, Any] | None:
    """Kueue's Workload for the run's RayCluster (it owns it by ownerReference)."""
    cluster = get(kubectl, "raycluster", names.ray_cluster(run), "-n", namespace)
    for item in get(kubectl, "workloads.kueue.x-k8s.io", "-n", namespace)["items"]:
        if any(o.get("uid") == cluster["metadata"]["uid"] for o in item["metadata"].get("ownerReferences", [])):
            found: dict[str, Any] = item
            return found
    return None


def test_a_second_run_waits_whole_while_the_first_holds_the_quota_and_starts_when_the_first_finishes(
    kueue: SimulatedCluster, sim_namespace: str, queue: str, ray_head: Any, tmp_path: Path,
) -> None:
    kubectl, ns = kueue.kubectl, sim_namespace
    with running_operator(kueue, ns, ray_head.dashboard_url, tmp_path):
        # The first run trains one rollout, then hangs: it holds its GPUs until something ends it.
        kubectl("apply", "-f", "-", input=manifest("first", ns, fake("--fake-stall-after", "1", rollouts=5,
                                                                     scheduling={"queueName": queue})))  # fmt: skip
        wait_for("the first run Running", lambda: phase_is(kubectl, ns, "first", "Running"), timeout=300)
        kubectl("apply", "-f", "-", input=manifest("second", ns, fake(rollouts=2, scheduling={"queueName": queue})))

        waiting = wait_for("the second run Queued", lambda: reason_is(kubectl, ns, "second", "Queued"), timeout=180)
        assert waiting["status"]["phase"] == "Pending"
        assert f"LocalQueue {queue}" in waiting["status"]["message"]
        ready = condition(waiting, "ResourcesReady")
        assert (ready["status"], ready["reason"]) == ("False", "WaitingForAdmission")
        # Whole: its RayCluster exists, suspended, and KubeRay made no pod of it, so it holds no GPU.
        assert get(kubectl, "raycluster", names.ray_cluster("second"), "-n", ns)["spec"]["suspend"] is True
        assert ray_pods(kubectl, ns, "second") == []
        # Kueue's own reason: the Workload it made for the cluster has no quota reserved, for lack of GPUs.
        wait_for("Kueue to refuse the second run for lack of GPUs", lambda: refused_for_gpus(kubectl, ns, "second"))
        assert ray_pods(kubectl, ns, "second") == []
        assert phase_is(kubectl, ns, "first", "Running")
        table = kubectl("get", "grporuns", "-n", ns, "-o", "wide").stdout
        print(table)  # README's "Queues and gangs" section quotes this output
        [row] = [line.split() for line in table.splitlines()[1:] if line.startswith("second ")]
        assert row[1] == "Pending" and "Queued" in row, table

        # The first run finishes: its stall guard is tightened (guards may change after creation) and trips.
        kubectl("patch", "grporun", "first", "-n", ns, "--type=merge",
                "-p", json.dumps({"spec": {"guards": {"stallTimeoutSeconds": 5, "startupGraceSeconds": 0}}}))  # fmt: skip
        first = wait_for("the first run Failed", lambda: phase_is(kubectl, ns, "first", "Failed"), timeout=300)
        assert first["status"]["reason"] == "Stalled"
        second = wait_for("the second run Succeeded", lambda: phase_is(kubectl, ns, "second", "Succeeded", "Failed"),
                          timeout=400)  # fmt: skip
        assert second["status"]["phase"] == "Succeeded", second["status"]
        assert second["status"]["startTime"] >= first["status"]["completionTime"]


def test_a_run_larger_than_the_quota_never_holds_part_of_the_gpus(
    kueue: SimulatedCluster, sim_namespace: str, queue: str, ray_head: Any, tmp_path: Path,
) -> None:
    """2 p5en workers (16 GPUs) against an 8-GPU quota, with free p5en nodes for both workers: without Kueue
    one worker would take its node while the other waits; here Kueue admits all or nothing, and KubeRay
    creates no pod of a suspended cluster."""
    kubectl, ns = kueue.kubectl, sim_namespace
    with running_operator(kueue, ns, ray_head.dashboard_url, tmp_path):
        kubectl("apply", "-f", "-", input=manifest("big", ns, {"scheduling": {"queueName": queue}},
                                                    example="qwen3-30b-a3b-pure-tp"))  # fmt: skip
        run = wait_for("the 2-node run Queued", lambda: reason_is(kubectl, ns, "big", "Queued"), timeout=180)
        assert run["status"]["plan"]["workerReplicas"] == 2
        wait_for("Kueue to refuse the run for lack of GPUs", lambda: refused_for_gpus(kubectl, ns, "big"))
        # Kueue has tried it and said no: no pod, so no GPU held.
        assert ray_pods(kubectl, ns, "big") == []
        assert get(kubectl, "raycluster", names.ray_cluster("big"), "-n", ns)["spec"]["suspend"] is True


@pytest.fixture
def priorities(kueue: SimulatedCluster, sim_namespace: str) -> Iterator[tuple[str, str]]:
    """Two PriorityClasses (low, high); Kueue takes a Workload's priority from its pods' priorityClassName
    (pkg/controller/jobframework/reconciler.go:1485-1492), which spec.scheduling.priorityClassName sets."""
    low, high = f"low-{sim_namespace}"[:63], f"high-{sim_namespace}"[:63]
    items = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": value}
             for n, value in ((low, 100), (high, 1000))]  # fmt: skip
    kueue.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    yield low, high
    kueue.kubectl("delete", "priorityclass", low, high, "--wait=false", check=False)


def test_a_run_kueue_preempts_is_suspended_preempted_and_resumes_as_a_new_attempt_once_readmitted(  # noqa: PLR0917
    kueue: SimulatedCluster, sim_namespace: str, queue: str, priorities: tuple[str, str], ray_head: Any,
    tmp_path: Path,
) -> None:
    kubectl, ns = kueue.kubectl, sim_namespace
    low, high = priorities
    kubectl("patch", "clusterqueue", f"cq-{ns}"[:63], "--type=merge",
            "-p", json.dumps({"spec": {"preemption": {"withinClusterQueue": "LowerPriority"}}}))  # fmt: skip
    with running_operator(kueue, ns, ray_head.dashboard_url, tmp_path):
        kubectl("apply", "-f", "-", input=manifest("low", ns, fake("--fake-stall-after", "1", rollouts=5, scheduling={
            "queueName": queue, "priorityClassName": low})))  # fmt: skip
        running = wait_for("the low-priority run Running", lambda: phase_is(kubectl, ns, "low", "Running"), timeout=300)
        first_job = running["status"]["jobSubmissionId"]
        kubectl("apply", "-f", "-", input=manifest("high", ns, fake(rollouts=2, scheduling={
            "queueName": queue, "priorityClassName": high})))  # fmt: skip

        # Kueue evicts the low-priority Workload and suspends its RayCluster; KubeRay deletes its pods.
        preempted = wait_for("the low run Preempted", lambda: reason_is(kubectl, ns, "low", "Preempted"), timeout=300)
        assert preempted["status"]["phase"] == "Suspended"
        assert f"LocalQueue {queue}" in preempted["status"]["message"]
        assert get(kubectl, "raycluster", names.ray_cluster("low"), "-n", ns)["spec"]["suspend"] is True
        done = wait_for("the high run Succeeded", lambda: phase_is(kubectl, ns, "high", "Succeeded", "Failed"),
                        timeout=400)  # fmt: skip
        assert done["status"]["phase"] == "Succeeded", done["status"]

        # The quota is free again: Kueue re-admits the low run, which starts a new attempt under a new job id.
        again = wait_for("the low run Running again",
                         lambda: (r := phase_is(kubectl, ns, "low", "Running")) and r["status"]["attempt"] == 2 and r,
                         timeout=400)  # fmt: skip
        assert again["status"]["jobSubmissionId"] != first_job
