"""`grpo doctor` on the simulated cluster shaped like `make run`'s (kube-scheduler, kwok nodes, the real KubeRay
operator, the device plugins' DaemonSets, the operator running outside the cluster with the quickstart applied in
`default`), with Kueue's real manager: each check set up broken and then fixed, the answer for the quickstart
(it can start; with one GPU node cordoned and the other filled, it would wait and why), and proof that doctor
needs only read access and changes nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_dev.localcluster import SimulatedCluster
from grpo_dev.localcluster.kueue import start_kueue
from grpo_dev.localcluster.simcluster import gpu_node
from grpo_operator.planning.documents import parse_runtime
from grpo_operator.planning.instances import INSTANCES, InstanceType

from tests.support.builders import EXAMPLES
from tests.support.cli import GRPO
from tests.support.helm import CHART, helm
from tests.support.operator_harness import Operator, wait_for

QUICKSTART = EXAMPLES / "quickstart.yaml"
P5EN = [f"p5en-48xlarge-{i}" for i in range(3)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulatedCluster]:
    """make run's cluster: the claim and the quickstart in `default`, the operator outside the cluster; the
    quickstart's worker holds one of the three p5en nodes. Kueue's manager beside it."""
    with SimulatedCluster() as plane:
        plane.provide_claim("default", "fsx-claim")
        operator = Operator(plane.kubeconfig, "default", "http://127.0.0.1:9", tmp_path_factory.mktemp("operator"))
        operator.args = ["--standalone", "--all-namespaces"]
        operator.start()
        plane.operator = operator  # type: ignore[attr-defined]
        try:
            plane.kubectl("apply", "-f", str(QUICKSTART))
            start_kueue(plane)  # while the operator starts and provisions the quickstart (it has no queueName)
            wait_for("the quickstart's worker on a p5en node", lambda: _worker_node(plane), timeout=240)
            yield plane
        finally:
            operator.stop()


@pytest.fixture
def chart(cluster: SimulatedCluster) -> Iterator[str]:
    """The grpo chart installed into grpo-system (the CRD is there already): the operator's Deployment, whose pod
    kwok plays, its ServiceAccount and ClusterRole. The operator outside the cluster still reconciles the runs."""
    kubeconfig = f"--kubeconfig={cluster.kubeconfig}"
    helm("install", "grpo-operator", str(CHART), "-n", "grpo-system", "--create-namespace", "--skip-crds", kubeconfig)
    try:
        cluster.kubectl("rollout", "status", "-n", "grpo-system", "deployment/grpo-operator", "--timeout=120s")
        yield "grpo-operator"
    finally:
        helm("uninstall", "grpo-operator", "-n", "grpo-system", "--wait", kubeconfig)


def _worker_node(plane: SimulatedCluster) -> str | None:
    pods = json.loads(plane.kubectl("get", "pods", "-n", "default", "-o", "json").stdout)["items"]
    return next((p["spec"].get("nodeName") for p in pods if "worker" in p["metadata"]["name"]), None)


def doctor(plane: SimulatedCluster, *args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [*GRPO, "doctor", "--kubeconfig", str(kubeconfig or plane.kubeconfig), *args]
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=120)


def verdicts(plane: SimulatedCluster, *args: str, kubeconfig: Path | None = None) -> dict[str, dict[str, str]]:
    result = doctor(plane, *args, "-o", "json", kubeconfig=kubeconfig)
    assert "Traceback" not in result.stderr, result.stderr
    return {c["name"]: c for c in json.loads(result.stdout)["checks"]}


def check(plane: SimulatedCluster, name: str, *args: str) -> tuple[str, str]:
    found = verdicts(plane, *args)[name]
    return found["verdict"], f"{found['found']} fix: {found['fix']}"


def apply(plane: SimulatedCluster, *objects: dict[str, Any]) -> None:
    plane.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def run_file(tmp_path: Path, **spec: Any) -> str:
    doc = yaml.safe_load(QUICKSTART.read_text())
    doc["spec"].update(spec)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_the_quickstart_on_make_runs_cluster_is_all_ok_and_can_start_and_waits_once_its_nodes_are_taken(
    cluster: SimulatedCluster,
) -> None:
    result = doctor(cluster, "-f", str(QUICKSTART))
    assert result.returncode == 0, result.stdout + result.stderr
    rows = result.stdout.splitlines()
    # make run's cluster has no CNI: the quickstart's NetworkPolicies are stored and nothing enforces them
    assert all(line.startswith(("ok ", " ", "warn  network policies")) for line in rows), result.stdout
    assert "2 of 3 p5en.48xlarge nodes have 8 GPUs free; the run needs 1: it can start" in result.stdout
    held = _worker_node(cluster)
    cordoned, filled = [n for n in P5EN if n != held]
    filler = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "filler", "namespace": "kube-public"},
        "spec": {
            "nodeName": filled,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
    }
    cluster.kubectl("cordon", cordoned)
    apply(cluster, filler)
    try:
        result = doctor(cluster, "-f", str(QUICKSTART))
        assert result.returncode == 0, result.stdout  # waiting is a warning: the cluster itself is fine
        text = " ".join(result.stdout.split())
        assert "0 of 3 p5en.48xlarge nodes have 8 GPUs free; the run needs 1, 0 free: it would wait" in text
        assert f"{cordoned}: cordoned" in text and f"{filled}: nvidia.com/gpu in use" in text
        assert f"{held}: nvidia.com/gpu" in text  # the quickstart's own worker (its CPU and memory too)
    finally:
        cluster.kubectl("uncordon", cordoned)
        cluster.kubectl("delete", "pod", "filler", "-n", "kube-public", "--grace-period=0", "--wait=true")
    assert "it can start" in doctor(cluster, "-f", str(QUICKSTART)).stdout


def _as_applied(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as read, less what the API server sets, to apply again."""
    obj = json.loads(json.dumps(obj))
    for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "annotations"):
        obj["metadata"].pop(key, None)
    obj.pop("status", None)
    return obj


def test_no_kuberay_or_an_old_one_fails_and_the_current_one_passes(cluster: SimulatedCluster) -> None:
    read = cluster.kubectl("get", "deployment", "-n", "kuberay-system", "kuberay-operator", "-o", "json").stdout
    deployment = _as_applied(json.loads(read))
    rollout = ["rollout", "status", "-n", "kuberay-system", "deployment/kuberay-operator", "--timeout=120s"]
    cluster.kubectl("delete", "deployment", "-n", "kuberay-system", "kuberay-operator")
    try:
        verdict, said = check(cluster, "KubeRay operator")
        assert verdict == "fail" and "no Deployment runs a kuberay/operator image" in said
        assert "helm install kuberay-operator" in said
        apply(cluster, json.loads(json.dumps(deployment).replace(":v1.5.0", ":v1.3.0")))
        cluster.kubectl(*rollout)
        verdict, said = check(cluster, "KubeRay operator")
        assert verdict == "fail" and "version 1.3.0; runs need 1.5.0 or later" in said
    finally:
        apply(cluster, deployment)
    cluster.kubectl(*rollout)
    assert check(cluster, "KubeRay operator")[0] == "ok"


def test_an_old_kuberay_crd_without_a_field_the_run_sets_fails_and_the_current_one_passes(
    cluster: SimulatedCluster,
) -> None:
    crd = json.loads(cluster.kubectl("get", "crd", "rayclusters.ray.io", "-o", "json").stdout)
    old = json.loads(json.dumps(crd))
    version = next(v for v in old["spec"]["versions"] if v["name"] == "v1")
    worker = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["workerGroupSpecs"]["items"]
    del worker["properties"]["numOfHosts"]  # a field older KubeRay CRDs lack
    cluster.kubectl("replace", "-f", "-", input=json.dumps(old))
    try:
        verdict, said = check(cluster, "KubeRay CRDs", "-f", str(QUICKSTART))
        assert verdict == "fail"
        assert "no field spec.workerGroupSpecs[].numOfHosts" in said and "the API server would drop it" in said
        assert "apply the CRDs of KubeRay 1.5.0 or later" in said
    finally:
        current = json.loads(cluster.kubectl("get", "crd", "rayclusters.ray.io", "-o", "json").stdout)
        crd["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        cluster.kubectl("replace", "-f", "-", input=json.dumps(crd))
    assert check(cluster, "KubeRay CRDs", "-f", str(QUICKSTART))[0] == "ok"


def remove_nodes(cluster: SimulatedCluster, *names: str) -> None:
    """Delete nodes a test added, and their DaemonSet pods with them: left to the pod garbage collector, which
    deletes a gone node's pods some 40 s later, they would vanish in whatever test comes next (the one checking
    that doctor changes nothing saw exactly that)."""
    cluster.kubectl("delete", "node", *names, "--ignore-not-found")
    for name in names:
        selector = f"spec.nodeName={name}"
        cluster.kubectl("delete", "pods", "-A", f"--field-selector={selector}", "--force", "--grace-period=0")

    def settled() -> bool:
        sets = json.loads(cluster.kubectl("get", "daemonsets", "-n", "kube-system", "-o", "json").stdout)["items"]
        pods = json.loads(cluster.kubectl("get", "pods", "-n", "kube-system", "-o", "json").stdout)["items"]
        on = [p for p in pods if p["spec"].get("nodeName") in names]
        counts = {(s["status"].get("desiredNumberScheduled"), s["status"].get("currentNumberScheduled")) for s in sets}
        return not on and all(desired == current for desired, current in counts)

    wait_for(f"no pod left on {', '.join(names)} and the DaemonSets counting without them", settled, timeout=120)


def test_a_node_without_efa_allocatable_fails_and_passes_once_it_is_gone(cluster: SimulatedCluster) -> None:
    cluster.add_nodes([gpu_node("p5en-no-efa", INSTANCES["p5en.48xlarge"], devices=0)])  # type: ignore[index]
    try:
        verdict, said = check(cluster, "GPU nodes")
        efa = INSTANCES["p5en.48xlarge"].efa  # type: ignore[index]
        assert verdict == "fail" and f"p5en-no-efa: vpc.amazonaws.com/efa 0 of p5en.48xlarge's {efa}" in said
        assert "NCCL falls back to TCP" in said
    finally:
        remove_nodes(cluster, "p5en-no-efa")
    assert check(cluster, "GPU nodes")[0] == "ok"


def test_a_run_on_a_platform_runtime_is_judged_against_the_clusters_runtime_and_its_nodes(
    cluster: SimulatedCluster,
) -> None:
    run, runtime_file = EXAMPLES / "runtimes" / "quickstart.yaml", EXAMPLES / "runtimes" / "h100-infiniband.yaml"
    missing = doctor(cluster, "-f", str(run))
    assert missing.returncode == 1 and "Traceback" not in missing.stderr, missing
    assert "GRPORuntime h100-ib is not on the cluster" in missing.stderr and "RuntimeNotFound" in missing.stderr
    runtime, problems = parse_runtime(yaml.safe_load(runtime_file.read_text()))
    assert runtime is not None, problems
    h100 = InstanceType.of(runtime.spec.instance_types[0])
    cluster.kubectl("apply", "-f", str(runtime_file))
    try:
        verdict, said = check(cluster, "GPU nodes", "-f", str(run))
        assert verdict == "fail" and said.startswith("no node of h100-ib (nvidia.com/gpu.product=NVIDIA-H100"), said
        cluster.add_nodes([gpu_node("h100-ib-0", h100), gpu_node("h100-ib-1", h100, devices=0)])
        verdict, said = check(cluster, "GPU nodes", "-f", str(run))
        assert verdict == "fail" and "allocatable short: h100-ib-1: rdma/ib 0 of h100-ib's 8" in said, said
        verdict, said = check(cluster, "GPU nodes")  # no run: every type of the cluster's runtimes, and AWS's
        assert "2 x h100-ib" in said and "p5en.48xlarge" in said, said
    finally:
        remove_nodes(cluster, "h100-ib-0", "h100-ib-1")
        cluster.kubectl("delete", "-f", str(runtime_file))


def test_a_device_plugin_missing_from_the_gpu_nodes_fails_and_passes_once_it_runs_there(
    cluster: SimulatedCluster,
) -> None:
    patch = {"spec": {"template": {"spec": {"nodeSelector": {"doctor-test": "nowhere"}}}}}
    undo = {"spec": {"template": {"spec": {"nodeSelector": None}}}}
    name = "nvidia-device-plugin-daemonset"
    cluster.kubectl("patch", "daemonset", "-n", "kube-system", name, "--type=merge", "-p", json.dumps(patch))
    try:
        wait_for("the plugin's pods gone", lambda: check(cluster, "device plugins")[0] == "fail", timeout=120)
        said = check(cluster, "device plugins")[1]
        assert "no Ready pod of the NVIDIA device plugin on p5" in said and "install the NVIDIA device plugin" in said
    finally:
        cluster.kubectl("patch", "daemonset", "-n", "kube-system", name, "--type=merge", "-p", json.dumps(undo))
    cluster.kubectl("rollout", "status", "-n", "kube-system", f"daemonset/{name}", "--timeout=120s")
    assert check(cluster, "device plugins")[0] == "ok"


def test_a_taint_the_workers_do_not_tolerate_fails_and_passes_once_removed(cluster: SimulatedCluster) -> None:
    cluster.kubectl("taint", "node", "p5en-48xlarge-0", "gpu=h200:NoSchedule")
    try:
        verdict, said = check(cluster, "taints")
        assert verdict == "fail" and "p5en-48xlarge-0 (gpu=h200:NoSchedule)" in said
        assert "spec.scheduling.tolerations" in said
    finally:
        cluster.kubectl("taint", "node", "p5en-48xlarge-0", "gpu=h200:NoSchedule-")
    assert check(cluster, "taints")[0] == "ok"


def _claim(cluster: SimulatedCluster, name: str, mode: str, size: str) -> None:
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"default-{name}"},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": [mode],
            "storageClassName": "",
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": f"vol-{name}"},
            "claimRef": {"namespace": "default", "name": name},
        },
    }
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "accessModes": [mode],
            "storageClassName": "",
            "volumeName": f"default-{name}",
            "resources": {"requests": {"storage": size}},
        },
    }
    apply(cluster, volume, claim)
    cluster.kubectl("wait", "-n", "default", "--for=jsonpath={.status.phase}=Bound", "--timeout=120s", f"pvc/{name}")


def test_a_read_write_once_or_too_small_claim_fails_and_the_shared_one_passes(
    cluster: SimulatedCluster, tmp_path: Path
) -> None:
    _claim(cluster, "ebs-claim", "ReadWriteOnce", "2000Gi")
    _claim(cluster, "small-claim", "ReadWriteMany", "40Gi")
    verdict, said = check(cluster, "storage", "-f", run_file(tmp_path, storage={"claimName": "ebs-claim"}))
    assert verdict == "fail" and "default/ebs-claim is ReadWriteOnce" in said and "ReadWriteMany volume" in said
    verdict, said = check(cluster, "storage", "-f", run_file(tmp_path, storage={"claimName": "small-claim"}))
    assert verdict == "fail" and "ReadWriteMany, 40 GiB" in said and "grow the volume" in said
    verdict, said = check(cluster, "storage", "-f", run_file(tmp_path, storage={"claimName": "no-claim"}))
    assert verdict == "fail" and "no PersistentVolumeClaim default/no-claim" in said
    assert check(cluster, "storage", "-f", str(QUICKSTART))[0] == "ok"


def test_a_missing_local_queue_or_too_little_quota_fails_and_enough_quota_passes(
    cluster: SimulatedCluster, tmp_path: Path
) -> None:
    queued = run_file(tmp_path, scheduling={"queueName": "team"})
    verdict, said = check(cluster, "Kueue", "-f", queued)
    assert verdict == "fail" and "no LocalQueue default/team" in said
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "gpus"}}
    resources = [{"name": "nvidia.com/gpu", "nominalQuota": "4"}]
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "doctor"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "gpus", "resources": resources}]}
            ],
        },
    }
    local = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "team", "namespace": "default"},
        "spec": {"clusterQueue": "doctor"},
    }
    apply(cluster, flavor, queue, local)
    verdict, said = check(cluster, "Kueue", "-f", queued)
    assert verdict == "fail" and "nvidia.com/gpu quota 4" in said and "the run needs 8: Kueue never admits it" in said
    resources[0]["nominalQuota"] = "8"
    apply(cluster, queue)
    assert check(cluster, "Kueue", "-f", queued)[0] == "ok"


READ_ONLY = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "doctor-read-only"},
    "rules": [
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["nodes", "pods", "persistentvolumeclaims"], "verbs": ["get", "list"]},
        {"apiGroups": ["apps"], "resources": ["deployments", "daemonsets"], "verbs": ["get", "list"]},
        {"apiGroups": ["grpo.dev"], "resources": ["grporuns"], "verbs": ["get", "list"]},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["*"], "verbs": ["get", "list"]},
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["get", "list"]},
        {
            "apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["clusterroles", "clusterrolebindings", "roles", "rolebindings"],
            "verbs": ["get", "list"],
        },
    ],
}


def _service_account(cluster: SimulatedCluster, name: str, role: str | None) -> Path:
    cluster.kubectl("create", "serviceaccount", name, "-n", "default")
    if role is not None:
        cluster.kubectl(
            "create", "clusterrolebinding", name, f"--clusterrole={role}", f"--serviceaccount=default:{name}"
        )
    return cluster.token_kubeconfig("default", name)


def test_doctor_needs_only_get_and_list_and_a_missing_verb_is_named(cluster: SimulatedCluster, chart: str) -> None:
    """A ServiceAccount with get and list only (SelfSubjectAccessReview is every user's) gets the admin's verdict
    on every check but its own RBAC, where it is told what it cannot do; granting the verb passes it."""
    apply(cluster, READ_ONLY)
    kubeconfig = _service_account(cluster, "doctor-reader", "doctor-read-only")
    admin = verdicts(cluster, "-f", str(QUICKSTART))
    reader = verdicts(cluster, "-f", str(QUICKSTART), kubeconfig=kubeconfig)
    assert {k: v["verdict"] for k, v in reader.items() if k != "RBAC"} == {
        k: v["verdict"] for k, v in admin.items() if k != "RBAC"
    }
    assert not any("cannot read" in v["found"] for v in reader.values())
    assert {"operator", "operator RBAC", "network policies", "Prometheus Operator CRDs"} <= set(reader)
    assert reader["RBAC"]["verdict"] == "fail"
    assert "you cannot create grporuns in default; delete grporuns in default" in reader["RBAC"]["found"]
    # the admin checks the reader's access by impersonating it (kubectl's --as); the reader may not impersonate
    user = "system:serviceaccount:default:doctor-reader"
    as_reader = verdicts(cluster, "-f", str(QUICKSTART), "--as", user)["RBAC"]
    assert as_reader["verdict"] == "fail", as_reader
    assert as_reader["found"] == f"{user} cannot create grporuns in default; delete grporuns in default"
    refused = doctor(cluster, "--as", "system:admin", kubeconfig=kubeconfig)
    assert refused.returncode == 1 and refused.stdout == "" and "Traceback" not in refused.stderr
    assert "cannot impersonate" in refused.stderr, refused.stderr  # the API server's words
    assert refused.stderr.strip().endswith("drop --as, or have the kubeconfig's user granted impersonate on that user")
    writer = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "doctor-runs", "namespace": "default"},
        "rules": [{"apiGroups": ["grpo.dev"], "resources": ["grporuns"], "verbs": ["create", "delete"]}],
    }
    apply(cluster, writer)
    cluster.kubectl(
        "create",
        "rolebinding",
        "doctor-runs",
        "-n",
        "default",
        "--role=doctor-runs",
        "--serviceaccount=default:doctor-reader",
    )
    assert verdicts(cluster, "-f", str(QUICKSTART), kubeconfig=kubeconfig)["RBAC"]["verdict"] == "ok"
    assert verdicts(cluster, "-f", str(QUICKSTART), "--as", user)["RBAC"]["found"].startswith(f"{user} can create")


def test_a_user_who_may_read_nothing_gets_one_line_per_check_and_no_traceback(cluster: SimulatedCluster) -> None:
    kubeconfig = _service_account(cluster, "doctor-nobody", None)
    result = doctor(cluster, "-f", str(QUICKSTART), kubeconfig=kubeconfig)
    assert result.returncode == 1 and "Traceback" not in result.stderr + result.stdout
    text = " ".join(result.stdout.split())
    assert "fail GPU nodes cannot read nodes (forbidden)" in text
    assert "fail storage cannot read persistentvolumeclaims (forbidden)" in text
    assert "grant the user running grpo doctor get and list on them" in text


def _versions(cluster: SimulatedCluster) -> dict[str, str]:
    """resourceVersion of every object of every kind that can be listed, Leases aside (the kubelets' and the API
    server's heartbeats renew them every few seconds whatever else happens)."""
    kinds = cluster.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()
    kinds = [k for k in kinds if not k.startswith("leases.")]
    listed = json.loads(cluster.kubectl("get", ",".join(kinds), "-A", "-o", "json").stdout)["items"]
    return {
        f"{o['kind']} {o['metadata'].get('namespace', '')}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
        for o in listed
        if "resourceVersion" in o["metadata"]  # kinds computed on read (e.g. componentstatuses) have none
    }


@contextmanager
def paused(operator: Operator) -> Iterator[None]:
    """The operator stopped (SIGSTOP) meanwhile: its reconciles write the run's status and events on their own."""
    assert operator.process is not None
    os.killpg(operator.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(operator.process.pid, signal.SIGCONT)


def test_doctor_changes_nothing_in_the_cluster(cluster: SimulatedCluster, chart: str, tmp_path: Path) -> None:
    with paused(cluster.operator):  # type: ignore[attr-defined]
        _compare(cluster, tmp_path)


def _compare(cluster: SimulatedCluster, tmp_path: Path) -> None:
    before = _versions(cluster)
    assert len(before) > 100  # nodes, pods, CRDs, the run and its children, Kueue's objects...
    doctor(cluster, "-f", str(QUICKSTART))
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"metrics": {"serviceMonitor": {"enabled": True}}}))
    doctor(cluster, "-f", run_file(tmp_path, scheduling={"queueName": "team"}), "-o", "json", "--values", str(values))
    after = _versions(cluster)
    assert {k: (v, after.get(k)) for k, v in before.items() if after.get(k) != v} == {}
    assert set(after) == set(before)


def test_the_operator_on_a_mutable_tag_warns_and_a_pinned_digest_passes(cluster: SimulatedCluster, chart: str) -> None:
    verdict, said = check(cluster, "operator")
    assert verdict == "warn" and "Deployment grpo-system/grpo-operator: 1/1 ready, image ghcr.io/" in said
    assert "mutable tag without a digest" in said and "set the chart's image.digest" in said
    digest = "sha256:" + "ab" * 32
    kubeconfig = f"--kubeconfig={cluster.kubeconfig}"
    upgrade = ["upgrade", chart, str(CHART), "-n", "grpo-system", "--skip-crds", "--reuse-values", kubeconfig]
    helm(*upgrade, "--set", f"image.digest={digest}")
    cluster.kubectl("rollout", "status", "-n", "grpo-system", "deployment/grpo-operator", "--timeout=120s")
    verdict, said = check(cluster, "operator")
    assert verdict == "ok" and f"image ghcr.io/grpo-operator/grpo-operator@{digest}" in said, said


def test_the_operator_account_missing_a_verb_fails_naming_it_and_passes_once_restored(
    cluster: SimulatedCluster, chart: str
) -> None:
    assert check(cluster, "operator RBAC") == (
        "ok",
        "ServiceAccount grpo-system/grpo-operator (bound to ClusterRole grpo-operator, ClusterRole "
        "grpo-operator-runtimes) has the 35 permissions it needs fix: ",
    )
    role = json.loads(cluster.kubectl("get", "clusterrole", chart, "-o", "json").stdout)
    role["metadata"].pop("resourceVersion")
    broken = json.loads(json.dumps(role))
    next(r for r in broken["rules"] if r["apiGroups"] == ["ray.io"])["verbs"].remove("delete")
    cluster.kubectl("replace", "-f", "-", input=json.dumps(broken))
    try:
        verdict, said = check(cluster, "operator RBAC")
        assert verdict == "fail", said
        assert "ClusterRole grpo-operator-runtimes) cannot delete rayclusters.ray.io cluster-wide" in said
        assert "helm upgrade with rbac.create=true" in said
    finally:
        cluster.kubectl("replace", "-f", "-", input=json.dumps(role))
    assert check(cluster, "operator RBAC")[0] == "ok"


def test_network_policies_without_an_enforcing_cni_warn_and_a_ready_one_passes(cluster: SimulatedCluster) -> None:
    verdict, said = check(cluster, "network policies")
    assert (
        verdict == "warn" and "runs get NetworkPolicies (" in said and "NetworkPolicies of runs (e.g. default/" in said
    )
    assert "no policy-enforcing CNI was detected" in said and "run a CNI that enforces NetworkPolicy" in said
    labels = {"k8s-app": "cilium"}
    cilium = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "cilium", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "cilium-agent", "image": "quay.io/cilium/cilium:v1.16.5"}],
                },
            },
        },
    }
    apply(cluster, cilium)
    try:
        cluster.kubectl("rollout", "status", "-n", "kube-system", "daemonset/cilium", "--timeout=120s")
        verdict, said = check(cluster, "network policies")
        assert verdict == "ok" and "enforced by Cilium (DaemonSet kube-system/cilium, " in said, said
    finally:
        cluster.kubectl("delete", "daemonset", "-n", "kube-system", "cilium", "--wait=true")


def _monitoring_crd(kind: str) -> dict[str, Any]:
    """A monitoring.coreos.com/v1 CRD of `kind` with an open schema: the Prometheus Operator's own CRDs cannot be
    fetched here, and the check reads only which versions are served."""
    plural = kind.lower() + "s"
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": schema}],
        },
    }


def test_service_monitors_in_the_chart_values_fail_without_the_prometheus_operator_crds_and_pass_with_them(
    cluster: SimulatedCluster, tmp_path: Path
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"metrics": {"serviceMonitor": {"enabled": True}}}))
    monitor = helm("template", "grpo-operator", str(CHART), "-f", str(values), "-s", "templates/servicemonitor.yaml")
    dry_run = ["apply", "--dry-run=server", "-n", "default", "-f", "-"]
    assert "no matches for kind" in cluster.kubectl(*dry_run, input=monitor.stdout, check=False).stderr
    verdict, said = check(cluster, "Prometheus Operator CRDs", "--values", str(values))
    assert verdict == "fail" and "no servicemonitors.monitoring.coreos.com, prometheusrules." in said
    assert "--values sets metrics.serviceMonitor.enabled: helm install fails" in said
    assert "install the Prometheus Operator's CRDs" in said and "set metrics.serviceMonitor.enabled to false" in said
    assert check(cluster, "Prometheus Operator CRDs")[0] == "ok"  # without --values nothing says they are needed
    apply(cluster, _monitoring_crd("ServiceMonitor"), _monitoring_crd("PrometheusRule"))
    try:
        names = ["crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com"]
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
        cluster.kubectl(*dry_run, input=monitor.stdout)
        verdict, said = check(cluster, "Prometheus Operator CRDs", "--values", str(values))
        assert verdict == "ok" and "prometheusrules.monitoring.coreos.com serve v1" in said, said
    finally:
        cluster.kubectl("delete", *names, "--wait=true")
