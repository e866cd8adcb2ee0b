"""A cluster as `grpo doctor` reads it, healthy for the quickstart, built from the simulated cluster's own node and
platform manifests (grpo_dev.localcluster.simcluster), for the table tests of `cli.doctorchecks`."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from grpo_dev.localcluster.simcluster import cpu_node, default_nodes, platform_manifests
from grpo_operator.api import GROUP, PLURAL, VERSION
from grpo_operator.cli.doctorchecks import CLUSTER_RULES, OPERATOR_RULES, Cluster, Target
from grpo_operator.planning import validation

from tests.support.builders import EXAMPLES, REPO, example, run_of

DIGEST = "0" * 64


def target(name: str = "quickstart", patch: dict[str, Any] | None = None) -> Target:
    run = run_of(example(name, patch))
    result = validation.check(run)
    assert result.plan is not None
    return Target(run, result.plan)


def _ready(obj: dict[str, Any], node: str | None = None) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    if node is not None:
        obj["spec"]["nodeName"] = node
    return obj


def _pod_of(daemonset: dict[str, Any], node: str) -> dict[str, Any]:
    meta = daemonset["metadata"]
    pod = {
        "metadata": {
            "name": f"{meta['name']}-{node}",
            "namespace": meta["namespace"],
            "ownerReferences": [{"kind": "DaemonSet", "name": meta["name"]}],
        },
        "spec": copy.deepcopy(daemonset["spec"]["template"]["spec"]),
    }
    return _ready(pod, node)


def _types(daemonset: dict[str, Any]) -> list[str]:
    affinity = daemonset["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    term = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    values: list[str] = term["matchExpressions"][0]["values"]
    return values


def healthy() -> Cluster:
    """Nodes Ready with their device plugins' pods Ready, KubeRay and the operator running, the claim bound."""
    nodes = default_nodes()
    for node in nodes:
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    platform = platform_manifests()
    daemonsets = [m for m in platform if m["kind"] == "DaemonSet"]
    deployments = [m | {"status": {"readyReplicas": 1}} for m in platform if m["kind"] == "Deployment"]
    crd = yaml.safe_load((REPO / "crds" / f"{PLURAL}.{GROUP}.yaml").read_text())
    selector = {"app.kubernetes.io/name": "grpo-operator", "app.kubernetes.io/instance": "grpo"}
    image = f"ghcr.io/grpo-operator/grpo-operator@sha256:{DIGEST}"
    operator = {
        "metadata": {"name": "grpo-operator", "namespace": "grpo-system", "labels": dict(selector)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {
                "spec": {
                    "serviceAccountName": "grpo-operator",
                    "containers": [{"name": "operator", "image": image, "args": ["--all-namespaces"]}],
                }
            },
        },
        "status": {"readyReplicas": 1},
    }
    pod = {"metadata": {"name": "grpo-operator-0", "namespace": "grpo-system", "labels": selector}, "spec": {}}
    operator_pod = _ready(pod, node="cpu-0")
    operator_pod["status"]["containerStatuses"] = [{"name": "operator", "imageID": image}]
    cilium = {
        "metadata": {"name": "cilium", "namespace": "kube-system"},
        "spec": {"template": {"spec": {"containers": [{"name": "cilium-agent", "image": "quay.io/cilium/cilium"}]}}},
        "status": {"numberReady": 6},
    }
    pods = []
    for daemonset in daemonsets:
        pods += [
            _pod_of(daemonset, n["metadata"]["name"])
            for n in nodes
            if n["metadata"]["labels"]["node.kubernetes.io/instance-type"] in _types(daemonset)
        ]
    ray = {
        "metadata": {"name": "rayclusters.ray.io"},
        "spec": {
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "schema": {
                        "openAPIV3Schema": {"properties": {"spec": {"x-kubernetes-preserve-unknown-fields": True}}}
                    },
                }
            ]
        },
    }
    claim = {
        "metadata": {"name": "fsx-claim", "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteMany"]},
        "status": {"phase": "Bound", "capacity": {"storage": "1200Gi"}},
    }
    return Cluster(
        crds={f"{PLURAL}.{GROUP}": crd, "rayclusters.ray.io": ray},
        deployments=[*deployments, operator],
        daemonsets=[*daemonsets, cilium],
        nodes=nodes,
        pods=[*pods, operator_pod],
        claim=claim,
        allowed={f"{verb} grporuns in default": True for verb in ("create", "get", "list", "delete")},
        **operator_rbac(),
    )


def operator_rbac() -> dict[str, list[dict[str, Any]]]:
    """The chart's ClusterRoles bound to the operator's ServiceAccount: grpo-operator (its rules as the chart renders
    them with networkPolicies on: OPERATOR_RULES, which a chart test compares with the template) and
    grpo-operator-runtimes (CLUSTER_RULES: reading the cluster-scoped GRPORuntimes)."""
    rules = [
        {"apiGroups": [r.group], "resources": list(r.resources), "verbs": list(r.verbs)}
        for r in OPERATOR_RULES
        if r.when in ("", "network policies")
    ]
    runtimes = [{"apiGroups": [r.group], "resources": list(r.resources), "verbs": list(r.verbs)} for r in CLUSTER_RULES]
    account = {"kind": "ServiceAccount", "name": "grpo-operator", "namespace": "grpo-system"}
    roles = {"grpo-operator": rules, "grpo-operator-runtimes": runtimes}
    return {
        "cluster_roles": [{"metadata": {"name": name}, "rules": rules} for name, rules in roles.items()],
        "cluster_role_bindings": [
            {"metadata": {"name": name}, "roleRef": {"kind": "ClusterRole", "name": name}, "subjects": [dict(account)]}
            for name in roles
        ],
    }


def gpu_pod(node: str, gpus: int, efa: int = 0) -> dict[str, Any]:
    """A pod bound to `node` holding GPUs (and EFA devices)."""
    requests = {"nvidia.com/gpu": str(gpus), **({"vpc.amazonaws.com/efa": str(efa)} if efa else {})}
    return {
        "metadata": {"name": f"holder-{node}", "namespace": "other"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": requests}}]},
    }


__all__ = ["DIGEST", "EXAMPLES", "VERSION", "cpu_node", "gpu_pod", "healthy", "target"]
