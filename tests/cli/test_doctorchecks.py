"""`grpo doctor`'s judgement as tables: a healthy cluster for the quickstart passes every check; each break fails
(or warns) exactly its check, with a message naming what was found and the fix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from grpo_operator.cli.doctorchecks import Cluster, Verdict, checks, quantity, schema_gaps
from grpo_operator.planning.instances import INSTANCES

from tests.support.doctor import DIGEST, gpu_pod, healthy, target


def _node(cluster: Cluster, name: str) -> dict[str, Any]:
    return next(n for n in cluster.nodes if n["metadata"]["name"] == name)


def _deployment(cluster: Cluster, name: str) -> dict[str, Any]:
    return next(d for d in cluster.deployments if d["metadata"]["name"] == name)


def _no_crd(name: str) -> Callable[[Cluster], None]:
    return lambda c: c.crds.pop(name)


def _set_efa(c: Cluster) -> None:
    _node(c, "p5en-48xlarge-1")["status"]["allocatable"]["vpc.amazonaws.com/efa"] = "0"


def _plugin_not_ready(c: Cluster) -> None:
    for pod in c.pods:
        if pod["spec"]["nodeName"] == "p5en-48xlarge-2" and "nvidia" in pod["metadata"]["name"]:
            pod["status"]["conditions"][0]["status"] = "False"


def _taint(c: Cluster) -> None:
    _node(c, "p5en-48xlarge-0")["spec"]["taints"].append({"key": "gpu", "value": "h200", "effect": "NoSchedule"})


def _old_kuberay(c: Cluster) -> None:
    container = _deployment(c, "kuberay-operator")["spec"]["template"]["spec"]["containers"][0]
    container["image"] = "quay.io/kuberay/operator:v1.3.0"


def _other_domain(c: Cluster) -> None:
    container = _deployment(c, "kuberay-operator")["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "CLUSTER_DOMAIN", "value": "corp.local"}]


def _operator_down(c: Cluster) -> None:
    _deployment(c, "grpo-operator")["status"] = {}


def _no_operator(c: Cluster) -> None:
    c.deployments.remove(_deployment(c, "grpo-operator"))


def _rwo(c: Cluster) -> None:
    assert c.claim is not None
    c.claim["spec"]["accessModes"] = ["ReadWriteOnce"]


def _small(c: Cluster) -> None:
    assert c.claim is not None
    c.claim["status"]["capacity"]["storage"] = "40Gi"


def _near_full(c: Cluster) -> None:
    assert c.claim is not None
    c.claim["status"]["capacity"]["storage"] = "72Gi"


def _denied(c: Cluster) -> None:
    c.allowed["create grporuns in default"] = False


def _forbidden_nodes(c: Cluster) -> None:
    c.nodes = []
    c.unreadable["nodes"] = "forbidden"


def _tagged(c: Cluster) -> None:
    container = _deployment(c, "grpo-operator")["spec"]["template"]["spec"]["containers"][0]
    container["image"] = "ghcr.io/grpo-operator/grpo-operator:0.1.0"


def _no_cni(c: Cluster) -> None:
    c.daemonsets = [d for d in c.daemonsets if d["metadata"]["name"] != "cilium"]


def _cni_not_ready(c: Cluster) -> None:
    next(d for d in c.daemonsets if d["metadata"]["name"] == "cilium")["status"]["numberReady"] = 0


def _monitoring_values(c: Cluster) -> None:
    c.chart_values = {"metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": False}}}


def _no_verb(c: Cluster) -> None:
    rules = c.cluster_roles[0]["rules"]
    ray = next(r for r in rules if r["apiGroups"] == ["ray.io"])
    ray["verbs"].remove("delete")


def _unbound(c: Cluster) -> None:
    for binding in c.cluster_role_bindings:
        binding["subjects"][0]["namespace"] = "default"


def _no_runtimes(c: Cluster) -> None:
    c.cluster_role_bindings[:] = [
        b for b in c.cluster_role_bindings if b["roleRef"]["name"] != "grpo-operator-runtimes"
    ]


BREAKS: list[tuple[str, Callable[[Cluster], None], str, Verdict, list[str]]] = [
    (
        "no GRPORun CRD",
        _no_crd("grporuns.grpo.dev"),
        "GRPORun CRD",
        Verdict.FAIL,
        ["no CustomResourceDefinition", "helm install"],
    ),
    (
        "no KubeRay CRD",
        _no_crd("rayclusters.ray.io"),
        "KubeRay CRDs",
        Verdict.FAIL,
        ["rayclusters.ray.io", "kuberay-operator"],
    ),
    ("operator not ready", _operator_down, "operator", Verdict.FAIL, ["0/1 ready", "describe pods"]),
    ("no operator", _no_operator, "operator", Verdict.FAIL, ["no Deployment labelled", "helm install grpo-operator"]),
    ("old KubeRay", _old_kuberay, "KubeRay operator", Verdict.FAIL, ["version 1.3.0", "1.5.0 or later", "upgrade"]),
    (
        "KubeRay's domain",
        _other_domain,
        "KubeRay operator",
        Verdict.FAIL,
        ["CLUSTER_DOMAIN corp.local", "GRPO_CLUSTER_DOMAIN"],
    ),
    (
        "no EFA allocatable",
        _set_efa,
        "GPU nodes",
        Verdict.FAIL,
        ["p5en-48xlarge-1: vpc.amazonaws.com/efa 0 of", "TCP", "device plugin pod"],
    ),
    (
        "plugin not ready",
        _plugin_not_ready,
        "device plugins",
        Verdict.FAIL,
        ["NVIDIA device plugin on p5en-48xlarge-2", "install"],
    ),
    (
        "wrong taint",
        _taint,
        "taints",
        Verdict.FAIL,
        ["p5en-48xlarge-0 (gpu=h200:NoSchedule)", "spec.scheduling.tolerations"],
    ),
    ("ReadWriteOnce claim", _rwo, "storage", Verdict.FAIL, ["ReadWriteOnce", "ReadWriteMany volume"]),
    ("too small claim", _small, "storage", Verdict.FAIL, ["40 GiB", "grow the volume"]),
    ("claim near full", _near_full, "storage", Verdict.WARN, ["ENOSPC at 90% full", "grow the volume"]),
    ("RBAC missing a verb", _denied, "RBAC", Verdict.FAIL, ["you cannot create grporuns in default", "Role"]),
    (
        "operator on a tag",
        _tagged,
        "operator",
        Verdict.WARN,
        ["image ghcr.io/grpo-operator/grpo-operator:0.1.0 (running ghcr.io/", "mutable tag", "image.digest"],
    ),
    ("no CNI", _no_cni, "network policies", Verdict.WARN, ["GRPO_NETWORK_POLICIES=true", "Cilium", "enforce"]),
    ("CNI not ready", _cni_not_ready, "network policies", Verdict.WARN, ["no policy-enforcing CNI", "Calico"]),
    (
        "ServiceMonitor without its CRD",
        _monitoring_values,
        "Prometheus Operator CRDs",
        Verdict.FAIL,
        ["no servicemonitors.monitoring.coreos.com", "metrics.serviceMonitor.enabled", "helm install fails", "CRDs"],
    ),
    (
        "operator RBAC missing a verb",
        _no_verb,
        "operator RBAC",
        Verdict.FAIL,
        ["ServiceAccount grpo-system/grpo-operator", "cannot delete rayclusters.ray.io cluster-wide", "rbac.create"],
    ),
    (
        "operator RBAC bound to another account",
        _unbound,
        "operator RBAC",
        Verdict.FAIL,
        ["bound to no Role or ClusterRole", "cannot create configmaps cluster-wide"],
    ),
    (
        "operator RBAC without the runtimes ClusterRole",
        _no_runtimes,
        "operator RBAC",
        Verdict.FAIL,
        [
            "(bound to ClusterRole grpo-operator) cannot get grporuntimes.grpo.dev (cluster-scoped)",
            "a ClusterRole with a ClusterRoleBinding for the cluster-scoped ones",
        ],
    ),
    ("nodes forbidden", _forbidden_nodes, "GPU nodes", Verdict.FAIL, ["cannot read nodes (forbidden)", "get and list"]),
]


def _verdicts(cluster: Cluster) -> dict[str, Any]:
    return {c.name: c for c in checks(cluster, target())}


def test_a_healthy_cluster_passes_every_check_and_the_quickstart_can_start() -> None:
    found = _verdicts(healthy())
    assert {name: c.verdict for name, c in found.items() if c.verdict is not Verdict.OK} == {}
    assert found["placement"].found.endswith("the run needs 1: it can start")
    assert set(found) >= {"GRPORun CRD", "operator", "KubeRay CRDs", "KubeRay operator", "GPU nodes", "storage"}
    assert f"running ghcr.io/grpo-operator/grpo-operator@sha256:{DIGEST}" in found["operator"].found
    assert "enforced by Cilium (DaemonSet kube-system/cilium, 6 ready)" in found["network policies"].found
    assert found["operator RBAC"].found.endswith(
        "(bound to ClusterRole grpo-operator, ClusterRole grpo-operator-runtimes) has the 35 permissions it needs"
    )


def test_the_operator_rbac_needs_follow_its_watched_namespaces_replicas_and_policies() -> None:
    cluster = healthy()
    operator = _deployment(cluster, "grpo-operator")
    operator["spec"]["template"]["spec"]["containers"][0]["args"] = ["--namespace=team-a"]
    operator["spec"]["replicas"] = 2
    check = _verdicts(cluster)["operator RBAC"]
    assert check.verdict is Verdict.FAIL  # the ClusterRole covers team-a, but not the peering object
    assert "cannot get kopfpeerings.kopf.dev in team-a" in check.found
    assert "clusterkopfpeerings" not in check.found
    operator["spec"]["replicas"] = 1
    assert _verdicts(cluster)["operator RBAC"].verdict is Verdict.OK
    rules = cluster.cluster_roles[0]["rules"]
    rules[:] = [r for r in rules if r["apiGroups"] != ["networking.k8s.io"]]
    assert "cannot create networkpolicies.networking.k8s.io in team-a" in _verdicts(cluster)["operator RBAC"].found
    operator["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "GRPO_NETWORK_POLICIES", "value": "false"}]
    assert _verdicts(cluster)["operator RBAC"].verdict is Verdict.OK
    assert _verdicts(cluster)["network policies"].found.startswith("runs get no NetworkPolicies")


def test_the_prometheus_operator_crds_fail_only_where_the_chart_values_render_their_objects() -> None:
    cluster = healthy()
    check = _verdicts(cluster)["Prometheus Operator CRDs"]
    assert check.verdict is Verdict.OK and "(pass --values to check your chart values)" in check.found
    _monitoring_values(cluster)
    assert _verdicts(cluster)["Prometheus Operator CRDs"].verdict is Verdict.FAIL
    served = {"spec": {"versions": [{"name": "v1", "served": True}]}}
    cluster.crds |= {f"{n}.monitoring.coreos.com": served for n in ("servicemonitors", "prometheusrules")}
    check = _verdicts(cluster)["Prometheus Operator CRDs"]
    assert check.verdict is Verdict.OK and "serve v1" in check.found


def test_a_pod_of_the_operator_elsewhere_or_of_another_deployment_lends_it_no_image_id() -> None:
    cluster = healthy()
    pod = next(p for p in cluster.pods if p["metadata"]["name"] == "grpo-operator-0")
    pod["metadata"]["namespace"] = "other"
    assert "running no imageID reported yet" in _verdicts(cluster)["operator"].found


@pytest.mark.parametrize(("case", "breaks", "name", "verdict", "words"), BREAKS, ids=[b[0] for b in BREAKS])
def test_each_break_fails_its_check_naming_what_was_found_and_the_fix(
    case: str, breaks: Callable[[Cluster], None], name: str, verdict: Verdict, words: list[str]
) -> None:
    cluster = healthy()
    breaks(cluster)
    check = _verdicts(cluster)[name]
    assert check.verdict is verdict, check
    said = f"{check.found} fix: {check.fix}"
    for word in words:
        assert word in said, (word, said)


def test_the_run_waits_when_the_nodes_of_its_type_are_cordoned_or_full() -> None:
    cluster = healthy()
    cordoned = _node(cluster, "p5en-48xlarge-0")["spec"]
    cordoned["unschedulable"] = True  # and the taint kubectl cordon's controller adds, which is no taints problem
    cordoned["taints"].append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    cluster.pods += [gpu_pod("p5en-48xlarge-1", 8), gpu_pod("p5en-48xlarge-2", 4)]
    check = _verdicts(cluster)["placement"]
    assert _verdicts(cluster)["taints"].verdict is Verdict.OK
    assert check.verdict is Verdict.WARN
    assert "0 of 3 p5en.48xlarge nodes have 8 GPUs free; the run needs 1, 0 free: it would wait" in check.found
    assert "p5en-48xlarge-0: cordoned" in check.found and "p5en-48xlarge-1: nvidia.com/gpu in use" in check.found
    cluster.pods.pop()  # p5en-48xlarge-2 has its 8 GPUs again
    assert _verdicts(cluster)["placement"].found.startswith("1 of 3 p5en.48xlarge nodes")


def test_a_two_node_run_needs_two_nodes_with_every_gpu_and_efa_device_free() -> None:
    cluster = healthy()
    two = target("quickstart", {"topology": {"actor": {"nodes": 2, "gpusPerNode": 8}}})
    efa = two.plan.efa_per_node
    assert efa == INSTANCES["p5en.48xlarge"].efa  # type: ignore[index]
    placement = {c.name: c for c in checks(cluster, two)}["placement"]
    assert f"3 of 3 p5en.48xlarge nodes have 8 GPUs and {efa} efa devices free; the run needs 2: it can start" in (
        placement.found
    )
    cluster.pods.append(gpu_pod("p5en-48xlarge-1", 1))
    assert {c.name: c for c in checks(cluster, two)}["placement"].found.startswith("2 of 3")
    cluster.pods.append(gpu_pod("p5en-48xlarge-0", 0, efa=1))
    placement = {c.name: c for c in checks(cluster, two)}["placement"]
    assert "needs 2, 1 free: it would wait" in placement.found
    assert "p5en-48xlarge-0: vpc.amazonaws.com/efa in use" in placement.found


def test_kueue_checks_the_local_queue_its_cluster_queue_and_the_gpu_quota_on_a_matching_flavor() -> None:
    queued = target("quickstart", {"scheduling": {"queueName": "team"}})
    cluster = healthy()
    cluster.crds["localqueues.kueue.x-k8s.io"] = {"spec": {"versions": [{"name": "v1beta2", "served": True}]}}
    kueue = {c.name: c for c in checks(cluster, queued)}["Kueue"]
    assert kueue.verdict is Verdict.FAIL and "no LocalQueue default/team" in kueue.found
    cluster.local_queue = {"metadata": {"name": "team"}, "spec": {"clusterQueue": "gpus"}}
    kueue = {c.name: c for c in checks(cluster, queued)}["Kueue"]
    assert kueue.verdict is Verdict.FAIL and "ClusterQueue gpus, which does not exist" in kueue.found
    flavor = {"name": "p5en", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "4"}]}
    cluster.cluster_queue = {"spec": {"resourceGroups": [{"flavors": [flavor]}]}}
    cluster.flavors = [
        {"metadata": {"name": "p5en"}, "spec": {"nodeLabels": {"node.kubernetes.io/instance-type": "p5en.48xlarge"}}}
    ]
    kueue = {c.name: c for c in checks(cluster, queued)}["Kueue"]
    assert kueue.verdict is Verdict.FAIL and "quota 4" in kueue.found and "never admits it" in kueue.found
    assert "nominalQuota" in kueue.fix
    flavor["resources"][0]["nominalQuota"] = "8"
    assert {c.name: c for c in checks(cluster, queued)}["Kueue"].verdict is Verdict.OK
    cluster.flavors[0]["spec"]["nodeLabels"]["node.kubernetes.io/instance-type"] = "p5.48xlarge"
    assert (
        "quota 0 on flavors covering p5en.48xlarge (none)"
        in {c.name: c for c in checks(cluster, queued)}["Kueue"].found
    )


def test_a_crd_schema_without_a_field_the_run_sets_is_a_gap() -> None:
    schema = {"properties": {"a": {"properties": {"b": {"type": "string"}}}, "l": {"items": {"properties": {}}}}}
    assert list(schema_gaps({"a": {"b": "x", "c": 1}, "l": [{"n": 1}]}, schema, "spec")) == ["spec.a.c", "spec.l[].n"]
    assert list(schema_gaps({"a": {"c": 1}}, {"x-kubernetes-preserve-unknown-fields": True}, "spec")) == []


@pytest.mark.parametrize(("text", "value"), [("8", 8), ("7910m", 7.91), ("2Gi", 2 * 2**30), ("1200Gi", 1200 * 2**30)])
def test_quantities_read_as_kubernetes_writes_them(text: str, value: float) -> None:
    assert quantity(text) == pytest.approx(value)
