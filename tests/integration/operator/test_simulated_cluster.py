"""The operator's RayClusters on a simulated p5en cluster: the real KubeRay operator, kube-scheduler, kwok nodes.

`simulated_cluster` (tests/conftest.py) runs the KubeRay v1.5.0 operator built from its Go module against the
local control plane, with kube-scheduler placing pods on kwok nodes shaped like EKS GPU nodes (the NVIDIA and
EFA device plugins' resources, the GPU taint) and a CPU pool. KubeRay creates the pods and writes the
RayCluster status; nothing here patches it. Faults are made where a kubelet would make them: on nodes (fewer
GPUs or EFA devices than the instance type) and on pod status (a worker whose readiness probe fails).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_dev.localcluster import SimulatedCluster
from grpo_dev.localcluster.simcluster import gpu_node, runtime_nodes
from grpo_operator.api.runtime import GRPORuntime
from grpo_operator.cli.loading import parse_run
from grpo_operator.planning.documents import parse_runtime
from grpo_operator.planning.instances import INSTANCES, InstanceTypeName
from grpo_operator.planning.plan import make_plan
from grpo_operator.render import names, render

from tests.support.builders import EXAMPLES, SETTINGS, valid_examples
from tests.support.operator_harness import Operator, fake, manifest, phase_is, running_operator, wait_for

pytestmark = pytest.mark.integration

Kubectl = Callable[..., Any]
# A safety net, not a speed assertion: on 2 shared cores the operator, KubeRay, kwok and the scheduler can
# take minutes between them.
PATIENCE = 300.0


def get(kubectl: Kubectl, *args: str) -> Any:
    return json.loads(kubectl("get", *args, "-o", "json").stdout)


def rendered_children(example: Path, namespace: str) -> list[dict[str, Any]]:
    run, _ = parse_run(yaml.safe_load(example.read_text()))
    assert run is not None
    run.metadata.namespace = namespace
    children = render(run, make_plan(run), SETTINGS).children
    for child in children:
        child["metadata"]["namespace"] = namespace
    return children


def ray_pods(kubectl: Kubectl, namespace: str, cluster: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get(kubectl, "pods", "-n", namespace, "-l", f"ray.io/cluster={cluster}")["items"]
    return items


def kuberay_ready(kubectl: Kubectl, namespace: str, cluster: str, workers: int) -> dict[str, Any] | None:
    """The RayCluster's status once KubeRay reports the head and every worker ready, else None."""
    status: dict[str, Any] = get(kubectl, "raycluster", cluster, "-n", namespace).get("status") or {}
    return status if status.get("state") == "ready" and status.get("readyWorkerReplicas") == workers else None


@pytest.mark.parametrize("example", valid_examples(), ids=lambda p: p.stem)
def test_kuberay_makes_every_valid_example_ready_with_the_head_on_the_cpu_pool_and_one_gpu_node_per_worker(
    simulated_cluster: SimulatedCluster, sim_namespace: str, example: Path
) -> None:
    kubectl, ns = simulated_cluster.kubectl, sim_namespace
    children = rendered_children(example, ns)
    [cluster] = [c for c in children if c["kind"] == "RayCluster"]
    name, workers = cluster["metadata"]["name"], cluster["spec"]["workerGroupSpecs"][0]["replicas"]
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": children}))

    status = wait_for(
        f"KubeRay to make {name} ready", lambda: kuberay_ready(kubectl, ns, name, workers), timeout=PATIENCE
    )
    assert {c["type"]: c["status"] for c in status["conditions"]}.items() >= {
        "RayClusterProvisioned": "True",
        "HeadPodReady": "True",
    }.items()
    nodes = {n["metadata"]["name"]: n for n in get(kubectl, "nodes")["items"]}
    pods = ray_pods(kubectl, ns, name)
    [head] = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head"]
    worker_nodes = [p["spec"]["nodeName"] for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]
    assert nodes[head["spec"]["nodeName"]]["metadata"]["labels"]["eks.amazonaws.com/nodegroup"] == "cpu"
    assert len(worker_nodes) == workers and len(set(worker_nodes)) == workers, worker_nodes
    assert all("nvidia.com/gpu" in nodes[n]["status"]["allocatable"] for n in worker_nodes)

    events = get(kubectl, "events", "-n", ns)["items"]
    warnings = [
        f"{e['involvedObject']['kind']}/{e['involvedObject']['name']}: {e['reason']}: {e['message']}"
        for e in events
        if e["type"] == "Warning"
    ]
    assert warnings == []
    # A write conflict between two of KubeRay's own reconciles is retried by controller-runtime; anything else
    # KubeRay logs at error level about this RayCluster is a problem with what we rendered.
    errors = [
        f"{e.get('msg', '')}: {e.get('error', '')}"
        for e in simulated_cluster.kuberay_errors(ns)
        if "the object has been modified" not in e.get("error", "")
    ]
    assert errors == []


def test_the_workers_land_on_nodes_of_the_runs_instance_type(
    simulated_cluster: SimulatedCluster, sim_namespace: str
) -> None:
    kubectl, ns = simulated_cluster.kubectl, sim_namespace
    children = rendered_children(Path(__file__).resolve().parents[3] / "examples" / "quickstart.yaml", ns)
    [cluster] = [c for c in children if c["kind"] == "RayCluster"]
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": children}))
    name = cluster["metadata"]["name"]
    wait_for("ready", lambda: kuberay_ready(kubectl, ns, name, 1), timeout=PATIENCE)
    nodes = {n["metadata"]["name"]: n for n in get(kubectl, "nodes")["items"]}
    types = {
        nodes[p["spec"]["nodeName"]]["metadata"]["labels"]["node.kubernetes.io/instance-type"]
        for p in ray_pods(kubectl, ns, name)
        if p["metadata"]["labels"]["ray.io/node-type"] == "worker"
    }
    assert types == {"p5en.48xlarge"}


@pytest.fixture
def operator(
    simulated_cluster: SimulatedCluster, ray_head: Any, sim_namespace: str, tmp_path: Path
) -> Iterator[Operator]:
    with running_operator(simulated_cluster, sim_namespace, ray_head.dashboard_url, tmp_path) as op:
        yield op


@pytest.fixture
def test_pool(simulated_cluster: SimulatedCluster, sim_namespace: str) -> Iterator[Callable[..., str]]:
    """Add degraded GPU nodes labelled `grpo.dev/test-pool=<namespace>`; they are deleted after the test."""
    added: list[str] = []

    def add(**overrides: Any) -> str:
        name = f"{sim_namespace}-{len(added)}"
        node = gpu_node(
            name, INSTANCES[InstanceTypeName.P5EN], labels={"grpo.dev/test-pool": sim_namespace}, **overrides
        )
        added.extend(simulated_cluster.add_nodes([node]))
        return name

    yield add
    if added:
        simulated_cluster.kubectl("delete", "nodes", *added, "--wait=false", check=False)


@pytest.mark.parametrize(
    ("degraded", "words"),
    [
        ({"devices": 8}, "Insufficient vpc.amazonaws.com/efa"),
        ({"gpus": 4}, "Insufficient nvidia.com/gpu"),
    ],
    ids=["partial-efa", "too-few-gpus"],
)
def test_a_worker_no_node_can_take_is_provisioning_in_the_schedulers_own_words(  # noqa: PLR0917 - fixtures
    simulated_cluster: SimulatedCluster,
    sim_namespace: str,
    operator: Operator,
    test_pool: Callable[..., str],
    degraded: dict[str, int],
    words: str,
) -> None:
    kubectl, ns = simulated_cluster.kubectl, sim_namespace
    test_pool(**degraded)
    spec = fake(rollouts=3, scheduling={"gpuNodeSelector": {"grpo.dev/test-pool": ns}})
    kubectl("apply", "-f", "-", input=manifest("stuck", ns, spec, example="qwen3-4b-disaggregated"))

    def scheduler_says() -> list[str]:
        return [
            c["message"]
            for p in ray_pods(kubectl, ns, names.ray_cluster("stuck"))
            for c in p["status"].get("conditions") or []
            if c["type"] == "PodScheduled" and c["status"] == "False"
        ]

    said = wait_for("the scheduler's verdict on the workers", scheduler_says, timeout=PATIENCE)
    assert all(words in message for message in said), said
    run = wait_for(
        "the scheduler's words in the GRPORun",
        lambda: (
            (r := phase_is(kubectl, ns, "stuck", "Provisioning")) and words in (r["status"].get("message") or "") and r
        ),
        timeout=PATIENCE,
    )
    assert said[0] in run["status"]["message"]
    assert run["status"]["message"].startswith(f"pod {names.ray_cluster('stuck')}-")


def set_pod_ready(kubectl: Kubectl, namespace: str, pod: str, ready: bool) -> None:
    """What the kubelet writes when the Ray container's readiness probe starts failing or passes again."""
    value = "True" if ready else "False"
    conditions = [
        {"type": t, "status": value, **({} if ready else {"reason": "ContainersNotReady"})}
        for t in ("Ready", "ContainersReady")
    ]
    kubectl(
        "patch",
        "pod",
        pod,
        "-n",
        namespace,
        "--subresource=status",
        "--type=strategic",
        "-p",
        json.dumps({"status": {"conditions": conditions}}),
    )


def test_a_lost_worker_sends_a_running_run_back_to_provisioning_until_it_is_back(
    simulated_cluster: SimulatedCluster, sim_namespace: str, operator: Operator
) -> None:
    kubectl, ns, cluster = simulated_cluster.kubectl, sim_namespace, names.ray_cluster("lossy")
    kubectl("apply", "-f", "-", input=manifest("lossy", ns, fake(rollouts=400)))
    running = wait_for("Running", lambda: phase_is(kubectl, ns, "lossy", "Running"), timeout=PATIENCE)
    [worker] = [p for p in ray_pods(kubectl, ns, cluster) if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]
    set_pod_ready(kubectl, ns, worker["metadata"]["name"], ready=False)

    # readyWorkerReplicas is omitted at 0 (omitempty)
    lost = wait_for(
        "KubeRay to count the worker out",
        lambda: not (s := get(kubectl, "raycluster", cluster, "-n", ns)["status"]).get("readyWorkerReplicas") and s,
        timeout=PATIENCE,
    )
    assert lost["state"] == "ready"  # KubeRay keeps the state; only the count says a worker is gone
    back = wait_for("Provisioning", lambda: phase_is(kubectl, ns, "lossy", "Provisioning"), timeout=PATIENCE)
    assert "0/1 workers ready" in back["status"]["message"]

    set_pod_ready(kubectl, ns, worker["metadata"]["name"], ready=True)
    again = wait_for("Running again", lambda: phase_is(kubectl, ns, "lossy", "Running"), timeout=PATIENCE)
    assert again["status"]["jobSubmissionId"] == running["status"]["jobSubmissionId"]


def test_deleting_a_run_removes_its_raycluster_pods_services_and_config(
    simulated_cluster: SimulatedCluster, sim_namespace: str, operator: Operator
) -> None:
    kubectl, ns = simulated_cluster.kubectl, sim_namespace
    kubectl("apply", "-f", "-", input=manifest("gone", ns, fake(rollouts=400)))
    wait_for("Running", lambda: phase_is(kubectl, ns, "gone", "Running"), timeout=PATIENCE)
    owned = "pods,services,rayclusters,configmaps,deployments"

    def left() -> list[str]:
        out = kubectl("get", owned, "-n", ns, "-o", "name").stdout.split()
        return [o for o in out if o != "configmap/kube-root-ca.crt"]

    assert any(o.startswith("pod/") for o in left()) and any(o.startswith("service/") for o in left())
    kubectl("delete", "grporun", "gone", "-n", ns, "--wait=true", "--timeout=120s")
    wait_for("every child gone", lambda: "none left" if not left() else None, timeout=PATIENCE)


IB_RUNTIME = yaml.safe_load((EXAMPLES / "runtimes" / "h100-infiniband.yaml").read_text())


@pytest.fixture
def ib_runtime(simulated_cluster: SimulatedCluster, sim_namespace: str) -> Iterator[GRPORuntime]:
    """The InfiniBand example runtime, under a name of this test's and without its Kueue queue (no Kueue runs
    here), with its node group: two of its H100 nodes and a node for the Ray head where the runtime puts it.
    Afterwards the nodes go first, then this namespace's pods at once (KubeRay's new ones stay Pending): a pod on
    a deleted node would wait for the pod garbage collector."""
    kubectl = simulated_cluster.kubectl
    doc = copy.deepcopy(IB_RUNTIME)
    doc["metadata"]["name"] = f"h100-ib-{sim_namespace[-6:]}"
    doc["spec"]["defaults"]["scheduling"].pop("queueName")
    doc["spec"]["locks"]["fields"].remove("scheduling.queueName")
    runtime, problems = parse_runtime(doc)
    assert runtime is not None, problems
    kubectl("apply", "-f", "-", input=json.dumps(doc))
    added = simulated_cluster.add_nodes(runtime_nodes(runtime, {"h100-ib": 2}))
    yield runtime
    kubectl("delete", "grporuntime", runtime.metadata.name, "--wait=false", check=False)
    kubectl("delete", "nodes", *added, check=False)
    kubectl("delete", "pods", "--all", "-n", sim_namespace, "--force", "--grace-period=0", check=False)


def test_a_run_on_a_non_aws_runtime_runs_on_the_node_group_the_runtime_describes(
    simulated_cluster: SimulatedCluster, sim_namespace: str, operator: Operator, ib_runtime: GRPORuntime
) -> None:
    kubectl, ns, runtime = simulated_cluster.kubectl, sim_namespace, ib_runtime.metadata.name
    simulated_cluster.provide_claim(ns, "shared-rwx")  # the runtime's default claim
    spec = fake(rollouts=400, runtimeRef={"name": runtime})
    kubectl("apply", "-f", "-", input=manifest("ib", ns, spec, example="runtimes/quickstart"))

    run = wait_for("Running", lambda: phase_is(kubectl, ns, "ib", "Running"), timeout=PATIENCE)
    assert run["status"]["runtime"]["name"] == runtime
    nodes = {n["metadata"]["name"]: n for n in get(kubectl, "nodes")["items"]}
    pods = ray_pods(kubectl, ns, names.ray_cluster("ib"))
    [head] = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head"]
    workers = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]
    assert head["spec"]["nodeName"] == f"{runtime}-head-0"
    assert sorted(p["spec"]["nodeName"] for p in workers) == [f"{runtime}-h100-ib-0", f"{runtime}-h100-ib-1"]
    for pod in workers:
        assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
        [container] = pod["spec"]["containers"]
        limits = container["resources"]["limits"]
        assert (limits["nvidia.com/gpu"], limits["rdma/ib"]) == ("8", "8")
        assert "vpc.amazonaws.com/efa" not in limits
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["NCCL_IB_HCA"] == "mlx5" and "FI_PROVIDER" not in env
        assert nodes[pod["spec"]["nodeName"]]["status"]["allocatable"]["rdma/ib"] == "8"
