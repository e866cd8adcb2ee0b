"""Runs under a Kueue queue, against Kueue's real controller manager on the simulated cluster.

`kueue` runs sigs.k8s.io/kueue's manager (built from its Go module, versions.KUEUE_VERSION) on the session's
`simulated_cluster` (real KubeRay v1.5.0, kube-scheduler, kwok p5en nodes), with no webhook registered
(grpo_dev/localcluster/kueue.py says why that is the same for a run). The `queue` tests get a ClusterQueue whose
GPU quota is ONE p5en node (8 GPUs): smaller than two quickstart runs, and smaller than one 2-node run. The
`two_node_queue` tests get quota for a whole 2-node run, with two of the three p5en nodes full: with Topology
Aware Scheduling Kueue counts the nodes' free capacity and waits; without, it admits a run that half-places.
Kueue admits; KubeRay makes the pods; kube-scheduler places them (Kueue's ungater first, under TAS); the
operator only reads what they did.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from grpo_dev.localcluster import SimulatedCluster
from grpo_dev.localcluster.kueue import start_kueue
from grpo_operator.render import names

from tests.support.operator_harness import fake, free_port, jobs_client, manifest, phase_is, running_operator, wait_for

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
    enough for several runs, so the GPUs are what is short): the YAML docs/queueing.md shows."""
    flavor, cluster_queue = f"f-{sim_namespace}"[:63], f"cq-{sim_namespace}"[:63]
    quota = {"cpu": "2000", "memory": "64Ti", "nvidia.com/gpu": str(GPU_QUOTA), "vpc.amazonaws.com/efa": "256"}
    objects = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor}},
        *cluster_and_local_queue(sim_namespace, cluster_queue, {flavor: quota}),
    ]
    with applied(kueue, objects):
        yield QUEUE


def cluster_and_local_queue(
    namespace: str, cluster_queue: str, quotas: dict[str, dict[str, str]], **spec: Any
) -> list[dict[str, Any]]:
    """A ClusterQueue for `namespace` (one resource group: a flavor per entry of `quotas`, each with its nominal
    quota) and its LocalQueue QUEUE there."""
    covered = list(next(iter(quotas.values())))
    groups = [
        {
            "coveredResources": covered,
            "flavors": [
                {"name": flavor, "resources": [{"name": k, "nominalQuota": q} for k, q in quota.items()]}
                for flavor, quota in quotas.items()
            ],
        }
    ]
    return [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                **spec,
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "resourceGroups": groups,
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": QUEUE, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue},
        },
    ]


@contextmanager
def applied(kueue: SimulatedCluster, objects: list[dict[str, Any]]) -> Iterator[None]:
    """The Kueue objects applied for the test, deleted after it (the last made first)."""
    kueue.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    try:
        yield
    finally:
        for obj in reversed(objects):
            where = ["-n", obj["metadata"]["namespace"]] if "namespace" in obj["metadata"] else []
            kueue.kubectl("delete", obj["kind"].lower(), obj["metadata"]["name"], *where, "--wait=false", check=False)


def reason_is(kubectl: Kubectl, namespace: str, name: str, reason: str) -> dict[str, Any] | None:
    run: dict[str, Any] = get(kubectl, "grporun", name, "-n", namespace)
    return run if run.get("status", {}).get("reason") == reason else None


def condition(run: dict[str, Any], type_: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in run["status"]["conditions"] if c["type"] == type_)
    return found


def ray_pods(kubectl: Kubectl, namespace: str, run: str) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = get(
        kubectl, "pods", "-n", namespace, "-l", f"ray.io/cluster={names.ray_cluster(run)}"
    )["items"]
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
    kueue: SimulatedCluster,
    sim_namespace: str,
    queue: str,
    ray_head: Any,
    tmp_path: Path,
) -> None:
    kubectl, ns = kueue.kubectl, sim_namespace
    with running_operator(kueue, ns, ray_head.dashboard_url, tmp_path):
        # The first run trains one rollout, then hangs: it holds its GPUs until something ends it.
        kubectl(
            "apply",
            "-f",
            "-",
            input=manifest("first", ns, fake("--fake-stall-after", "1", rollouts=5, scheduling={"queueName": queue})),
        )
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
        print(table)  # docs/queueing.md quotes this output
        [row] = [line.split() for line in table.splitlines()[1:] if line.startswith("second ")]
        assert row[1] == "Pending" and "Queued" in row, table

        # The first run finishes: its stall guard is tightened (guards may change after creation) and trips.
        kubectl(
            "patch",
            "grporun",
            "first",
            "-n",
            ns,
            "--type=merge",
            "-p",
            json.dumps({"spec": {"guards": {"stallTimeoutSeconds": 5, "startupGraceSeconds": 0}}}),
        )
        first = wait_for("the first run Failed", lambda: phase_is(kubectl, ns, "first", "Failed"), timeout=300)
        assert first["status"]["reason"] == "Stalled"
        second = wait_for(
            "the second run Succeeded", lambda: phase_is(kubectl, ns, "second", "Succeeded", "Failed"), timeout=400
        )
        assert second["status"]["phase"] == "Succeeded", second["status"]
        assert second["status"]["startTime"] >= first["status"]["completionTime"]


def test_a_run_larger_than_the_quota_never_holds_part_of_the_gpus(
    kueue: SimulatedCluster,
    sim_namespace: str,
    queue: str,
    ray_head: Any,
    tmp_path: Path,
) -> None:
    """2 p5en workers (16 GPUs) against an 8-GPU quota, with free p5en nodes for both workers: without Kueue
    one worker would take its node while the other waits; here Kueue admits all or nothing, and KubeRay
    creates no pod of a suspended cluster."""
    kubectl, ns = kueue.kubectl, sim_namespace
    with running_operator(kueue, ns, ray_head.dashboard_url, tmp_path):
        kubectl(
            "apply",
            "-f",
            "-",
            input=manifest("big", ns, {"scheduling": {"queueName": queue}}, example="qwen3-30b-a3b-pure-tp"),
        )
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
    items = [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": value}
        for n, value in ((low, 100), (high, 1000))
    ]
    kueue.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    yield low, high
    kueue.kubectl("delete", "priorityclass", low, high, "--wait=false", check=False)


def test_a_run_kueue_preempts_is_suspended_preempted_and_resumes_as_a_new_attempt_once_readmitted(  # noqa: PLR0917
    kueue: SimulatedCluster,
    sim_namespace: str,
    queue: str,
    priorities: tuple[str, str],
    ray_head: Any,
    tmp_path: Path,
) -> None:
    kubectl, ns = kueue.kubectl, sim_namespace
    low, high = priorities
    kubectl(
        "patch",
        "clusterqueue",
        f"cq-{ns}"[:63],
        "--type=merge",
        "-p",
        json.dumps({"spec": {"preemption": {"withinClusterQueue": "LowerPriority"}}}),
    )
    # The low run's double saves every 2 rollouts and makes no progress after rollout 4 (so the checkpoint is 3),
    # in each of its jobs: the resumed one loads checkpoint 3 and its first rollout, 4, is seen for sure.
    shared = tmp_path / "shared"
    low_spec = fake(
        "--fake-checkpoints",
        "--fake-stall-after",
        "5",
        rollouts=8,
        scheduling={"queueName": queue, "priorityClassName": low},
        storage={"mountPath": str(shared), "saveInterval": 2},
    )
    with running_operator(kueue, ns, ray_head.dashboard_url, tmp_path):
        kubectl("apply", "-f", "-", input=manifest("low", ns, low_spec))
        running = wait_for(
            "the low-priority run Running at rollout 4",
            lambda: (
                (r := phase_is(kubectl, ns, "low", "Running"))
                and (r["status"].get("metrics") or {}).get("rollout") == 4
                and r
            ),
            timeout=300,
        )
        first_job = running["status"]["jobSubmissionId"]
        # Every worker KubeRay made carries the preStop hook that asks miles for a checkpoint, and the plan's grace.
        grace = running["status"]["plan"]["preemptionGrace"]
        assert grace["stepSource"] == "Spec" and grace["seconds"] == grace["wantedSeconds"]
        workers = ",".join(f"{k}={v}" for k, v in names.selector("low", "ray-worker").items())
        [worker] = get(kubectl, "pods", "-n", ns, "-l", workers)["items"]
        assert worker["spec"]["terminationGracePeriodSeconds"] == grace["seconds"]
        hook = worker["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
        assert hook[3:] == [
            "presave",
            "--sentinel",
            f"{running['status']['plan']['checkpointDir']}/.grpo-save-now",
            "--checkpoint-dir",
            running["status"]["plan"]["checkpointDir"],
            "--wait-seconds",
            str(grace["seconds"] - 15),
            "--stop-ray",
        ]
        # The preempted run's job goes on (stalled) while its pods have grace to save in (status/admission.py
        # save_pending; kwok runs no hook), and on kwok every run's job runs on the one local Ray head: the high run's
        # double serves its gauges on a port of its own, as each run's driver has its own pod on a cluster. Its end
        # is verified from the launcher's run summary.
        own_port = ("--prometheus-port", str(free_port()))
        kubectl(
            "apply",
            "-f",
            "-",
            input=manifest(
                "high", ns, fake(*own_port, rollouts=2, scheduling={"queueName": queue, "priorityClassName": high})
            ),
        )

        # Kueue evicts the low-priority Workload and suspends its RayCluster; KubeRay deletes its pods.
        preempted = wait_for("the low run Preempted", lambda: reason_is(kubectl, ns, "low", "Preempted"), timeout=300)
        assert preempted["status"]["phase"] == "Suspended"
        assert f"LocalQueue {queue}" in preempted["status"]["message"]
        assert get(kubectl, "raycluster", names.ray_cluster("low"), "-n", ns)["spec"]["suspend"] is True
        saved = int(
            (Path(preempted["status"]["plan"]["checkpointDir"]) / "latest_checkpointed_iteration.txt").read_text()
        )
        log = jobs_client(ray_head.dashboard_url).get_job_logs(first_job)
        last = max(int(n) for n in re.findall(r"rollout (\d+): \{", log))
        assert saved < last
        done = wait_for(
            "the high run Succeeded", lambda: phase_is(kubectl, ns, "high", "Succeeded", "Failed"), timeout=400
        )
        assert done["status"]["phase"] == "Succeeded", done["status"]

        # The quota is free again: Kueue re-admits the low run, which starts a new attempt under a new job id.
        again = wait_for(
            "the low run Running again",
            lambda: (r := phase_is(kubectl, ns, "low", "Running")) and r["status"]["attempt"] == 2 and r,
            timeout=400,
        )
        assert again["status"]["jobSubmissionId"] != first_job

        # The preempted attempt's rollouts after the checkpoint are lost, with their share of its GPU time.
        resumed = wait_for(
            "the second attempt's first rollout recorded",
            lambda: (
                (r := phase_is(kubectl, ns, "low", "Running"))
                and len(r["status"]["accounting"]["attempts"]) == 2
                and r["status"]["accounting"]["attempts"][1].get("firstRollout") is not None
                and r
            ),
        )
        first, second = resumed["status"]["accounting"]["attempts"]
        assert (first["endPhase"], first["endReason"], first["gpus"]) == ("Suspended", "Preempted", 8)
        assert second["firstRollout"] == saved + 1 and first["lastRollout"] == last
        assert first["rolloutsLost"] == last - saved
        # kwok runs no preStop hook and its stand-in stalls mid-step, so no save was made before the pods went: the
        # status says only that, with the checkpoint the resumed attempt loaded, and no save time it did not see.
        assert first["save"]["outcome"] == "NotSaved" and first["save"]["rollout"] == saved
        assert first["save"]["graceSeconds"] == grace["seconds"]
        assert first["save"]["seconds"] == first["podsGoneSeconds"] <= grace["seconds"]
        events = get(kubectl, "events", "-n", ns, "--field-selector", "involvedObject.name=low")["items"]
        [save_event] = [e["message"] for e in events if e["reason"] == "NotSavedBeforeStop"]
        assert save_event.startswith(f"attempt 1 made no checkpoint after rollout {last} before preemption")
        assert save_event.endswith(f"attempt 2 resumed from rollout {saved + 1}, {last - saved} rollout(s) lost")
        rollout_time = first["gpuSeconds"] - first["gpuSecondsToFirstRollout"]
        share = round(rollout_time * (last - saved) / first["rolloutsCompleted"])
        assert first["lostGpuHours"] == round(share / 3600, 4)


# --- Topology Aware Scheduling: admitted only when every pod fits the nodes' free capacity ---------------------

P5EN, CPU_POOL = "p5en.48xlarge", "m7i.4xlarge"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
HOSTNAME = "kubernetes.io/hostname"


@pytest.fixture
def two_node_queue(kueue: SimulatedCluster, sim_namespace: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """LocalQueue `team-a` of a ClusterQueue with quota for a whole 2-node p5en run (16 GPUs) and its head: a
    flavor for the p5en nodes and one for the CPU pool (the head's affinity keeps it off GPU nodes). With
    `request.param` true both flavors name a Topology with one level, `kubernetes.io/hostname`: Kueue's Topology
    Aware Scheduling then admits the run only where every pod fits a node's free capacity (docs/queueing.md's YAML)."""
    tas: bool = request.param
    suffix = sim_namespace[:50]
    topology, cluster_queue = f"t-{suffix}", f"cq-{suffix}"
    flavors = {
        f"p5en-{suffix}": (
            P5EN,
            {"cpu": "400", "memory": "4Ti", "nvidia.com/gpu": "16", "vpc.amazonaws.com/efa": "32"},
        ),
        f"cpu-{suffix}": (
            CPU_POOL,
            {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": "0", "vpc.amazonaws.com/efa": "0"},
        ),
    }
    objects: list[dict[str, Any]] = []
    if tas:
        objects.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Topology",
                "metadata": {"name": topology},
                "spec": {"levels": [{"nodeLabel": HOSTNAME}]},
            }
        )
    for flavor, (instance_type, _) in flavors.items():
        spec: dict[str, Any] = {"nodeLabels": {INSTANCE_TYPE: instance_type}}
        if tas:
            spec["topologyName"] = topology
        objects.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": flavor},
                "spec": spec,
            }
        )
    # StrictFIFO with TAS: the head of the queue is retried every scheduling cycle. Under BestEffortFIFO Kueue
    # v0.17.0 retries an inadmissible workload only on a queue, flavor, node or workload event, and a pod Kueue
    # does not manage freeing a node is none of those (see docs/queueing.md).
    strategy = {"queueingStrategy": "StrictFIFO"} if tas else {}
    objects += cluster_and_local_queue(
        sim_namespace, cluster_queue, {f: quota for f, (_, quota) in flavors.items()}, **strategy
    )
    with applied(kueue, objects):
        yield QUEUE


def hold_all_p5en_nodes_but_one(kubectl: Kubectl, namespace: str, nodes: list[str]) -> tuple[list[str], str]:
    """Another team's pods (not Kueue's) take every GPU of all p5en nodes but one; returns (held, free)."""
    p5en = sorted(n for n in nodes if n.startswith("p5en-48xlarge-"))
    assert len(p5en) >= 2, nodes
    held, free = p5en[:-1], p5en[-1]
    pods: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"other-team-{node}", "namespace": namespace},
            "spec": {
                "nodeSelector": {HOSTNAME: node},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [
                    {
                        "name": "job",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}},
                    }
                ],
            },
        }
        for node in held
    ]
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    for pod in pods:
        name = pod["metadata"]["name"]
        wait_for(f"{name} Running", functools.partial(pod_running, kubectl, namespace, name))
    return held, free


def pod_running(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any] | None:
    pod: dict[str, Any] = get(kubectl, "pod", name, "-n", namespace)
    return pod if pod["status"].get("phase") == "Running" else None


def worker_pods(kubectl: Kubectl, namespace: str, run: str) -> list[dict[str, Any]]:
    return [p for p in ray_pods(kubectl, namespace, run) if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]


def workers_in(kubectl: Kubectl, namespace: str, run: str, *phases: str) -> list[dict[str, Any]] | None:
    """The run's worker pods once their phases are `phases` (in any order), else None."""
    pods = worker_pods(kubectl, namespace, run)
    return pods if sorted(p["status"].get("phase", "") for p in pods) == sorted(phases) else None


def half_placed(kubectl: Kubectl, namespace: str, run: str) -> list[dict[str, Any]] | None:
    """The run's two workers once one is Running and kube-scheduler has found no node for the other, else None."""
    pods = workers_in(kubectl, namespace, run, "Pending", "Running")
    if pods and any(c.get("reason") == "Unschedulable" for p in pods for c in p["status"].get("conditions", [])):
        return pods
    return None


def new_worker(kubectl: Kubectl, namespace: str, run: str, known: set[str]) -> dict[str, Any] | None:
    return next((p for p in worker_pods(kubectl, namespace, run) if p["metadata"]["name"] not in known), None)


def topology_refusal(kubectl: Kubectl, namespace: str, run: str) -> str | None:
    """What Kueue's TAS said when it found no placement for the run on the nodes: the Warning event on the
    run's Workload (`kubectl describe workload`), else None. The event, not the QuotaReserved condition: Kueue
    moves on to the next flavor at the next attempt and the condition then names that flavor's reason."""
    workload = workload_of(kubectl, namespace, run)
    if workload is None:
        return None
    events = get(
        kubectl,
        "events",
        "-n",
        namespace,
        "--field-selector",
        f"involvedObject.kind=Workload,involvedObject.name={workload['metadata']['name']}",
    )["items"]
    return next((e["message"] for e in events if "allows to fit only" in e.get("message", "")), None)


@pytest.mark.parametrize("two_node_queue", [True], indirect=True, ids=["tas"])
def test_with_topology_aware_scheduling_a_run_whose_workers_do_not_fit_the_free_nodes_holds_no_gpu_until_they_do(
    kueue: SimulatedCluster,
    sim_namespace: str,
    two_node_queue: str,
    ray_head: Any,
    tmp_path: Path,
) -> None:
    """Quota for the whole 2-node run, but only one p5en node free: Kueue's TAS reads the nodes and the pods on
    them, so it does not admit the run, and no Ray pod exists. Once a second node is freed, it admits the run and
    both workers land, each on a node of its own."""
    kubectl, ns = kueue.kubectl, sim_namespace
    held, free = hold_all_p5en_nodes_but_one(kubectl, ns, kueue.nodes)
    with running_operator(kueue, ns, ray_head.dashboard_url, tmp_path) as operator:
        kubectl(
            "apply",
            "-f",
            "-",
            input=manifest(
                "big",
                ns,
                fake("--fake-stall-after", "1", rollouts=5, scheduling={"queueName": two_node_queue}),
                example="qwen3-30b-a3b-pure-tp",
            ),
        )
        run = wait_for("the 2-node run Queued", lambda: reason_is(kubectl, ns, "big", "Queued"), timeout=180)
        assert run["status"]["phase"] == "Pending"
        refusal = wait_for("Kueue's TAS to find no placement", lambda: topology_refusal(kubectl, ns, "big"))
        print(refusal)
        # Quota alone would admit it (16 GPUs): what stops it is the nodes, two of three full.
        assert "allows to fit only 1 out of 2 pod(s)" in refusal and 'excluded: resource "nvidia.com/gpu": 2' in refusal
        # No pod, so no GPU held.
        assert ray_pods(kubectl, ns, "big") == []
        assert get(kubectl, "raycluster", names.ray_cluster("big"), "-n", ns)["spec"]["suspend"] is True
        print(kubectl("get", "grporuns", "-n", ns, "-o", "wide").stdout)

        kubectl("delete", "pod", f"other-team-{held[0]}", "-n", ns, "--wait=true")
        workers = wait_for(
            "both workers Running", lambda: workers_in(kubectl, ns, "big", "Running", "Running"), timeout=300
        )
        nodes = sorted(p["spec"]["nodeName"] for p in workers)
        assert nodes == sorted([held[0], free]), nodes
        # Placed by Kueue: the pods were gated until TAS assigned their node, then given that node's hostname.
        assert all(p["spec"]["nodeSelector"].get(HOSTNAME) == p["spec"]["nodeName"] for p in workers)
        print(kubectl("get", "pods", "-n", ns, "-o", "wide").stdout)
        print(kubectl("get", "grporuns", "-n", ns, "-o", "wide").stdout)

        # Later: the operator restarts (an upgrade) and reconciles the run again, then a worker's pod goes (a
        # crash, an eviction) and KubeRay makes a new one from the RayCluster's template. Kueue wrote its gate
        # and workload annotation into that template when it admitted the run; the new pod must still carry
        # them, so that Kueue places it on the node its admission counted and not kube-scheduler anywhere.
        operator.restart()
        wait_for(
            "the restarted operator to reconcile the run",
            lambda: f"[{ns}/big] Timer 'on_timer' succeeded" in (tmp_path / "operator-2.log").read_text(),
        )
        gone = workers[0]
        kubectl("delete", "pod", gone["metadata"]["name"], "-n", ns, "--wait=true")
        known = {w["metadata"]["name"] for w in workers}
        again = wait_for("a new worker pod", lambda: new_worker(kubectl, ns, "big", known))
        workload = workload_of(kubectl, ns, "big")
        assert workload is not None
        annotations = again["metadata"].get("annotations", {})
        assert annotations.get("kueue.x-k8s.io/workload") == workload["metadata"]["name"], again["metadata"]
        placed = wait_for(
            "the new worker Running", lambda: pod_running(kubectl, ns, again["metadata"]["name"]), timeout=300
        )
        assert placed["spec"]["nodeSelector"].get(HOSTNAME) == placed["spec"]["nodeName"] == gone["spec"]["nodeName"]


@pytest.mark.parametrize("two_node_queue", [False], indirect=True, ids=["quota-only"])
def test_with_quota_alone_the_same_run_is_admitted_and_half_placed(
    kueue: SimulatedCluster,
    sim_namespace: str,
    two_node_queue: str,
    ray_head: Any,
    tmp_path: Path,
) -> None:
    """The contrast: the same quota and nodes with flavors that name no Topology. Kueue counts only quota, admits
    the run, and one worker takes the free node's 8 GPUs while the other stays Pending: what TAS avoids."""
    kubectl, ns = kueue.kubectl, sim_namespace
    _, free = hold_all_p5en_nodes_but_one(kubectl, ns, kueue.nodes)
    with running_operator(kueue, ns, ray_head.dashboard_url, tmp_path):
        kubectl(
            "apply",
            "-f",
            "-",
            input=manifest(
                "big",
                ns,
                fake("--fake-stall-after", "1", rollouts=5, scheduling={"queueName": two_node_queue}),
                example="qwen3-30b-a3b-pure-tp",
            ),
        )
        workers = wait_for(
            "one worker Running and one unschedulable", lambda: half_placed(kubectl, ns, "big"), timeout=300
        )
        [running] = [p for p in workers if p["status"]["phase"] == "Running"]
        assert running["spec"]["nodeName"] == free  # 8 GPUs held while the run cannot start
        assert get(kubectl, "raycluster", names.ray_cluster("big"), "-n", ns)["spec"].get("suspend") is False
        print(kubectl("get", "pods", "-n", ns, "-o", "wide").stdout)
        print(kubectl("get", "grporuns", "-n", ns, "-o", "wide").stdout)
