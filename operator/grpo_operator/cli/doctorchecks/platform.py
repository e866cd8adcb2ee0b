"""`grpo doctor`'s platform checks: whether the NetworkPolicies the operator renders for every run are enforced (a
known policy-enforcing CNI's DaemonSet is running) and whether the Prometheus Operator's CRDs the chart's
ServiceMonitors and PrometheusRule need are served.
"""

from __future__ import annotations

from typing import Any

from grpo_operator.cli.doctorchecks.controlplane import operator_setting
from grpo_operator.cli.doctorchecks.model import (
    PROMETHEUSRULE_CRD,
    SERVICEMONITOR_CRD,
    Check,
    Cluster,
    Verdict,
    chart_value,
    containers,
    name_of,
    operator_deployment,
    unread,
)
from grpo_operator.render.names import MANAGED_BY

# DaemonSets of CNIs that enforce NetworkPolicy, by name (their charts' and operators' default names).
ENFORCERS = {
    "calico-node": "Calico",
    "canal": "Canal (Calico)",
    "cilium": "Cilium",
    "anetd": "GKE Dataplane V2 (Cilium)",
    "antrea-agent": "Antrea",
    "kube-router": "kube-router",
    "weave-net": "Weave Net",
    "kube-ovn-cni": "Kube-OVN",
}
# The Amazon VPC CNI enforces policies only with its network policy agent on (enableNetworkPolicy).
AWS_NODE = "aws-node"
AWS_POLICY_FLAG = "--enable-network-policy=true"


def _enforcer(daemonset: dict[str, Any]) -> str | None:
    name = str(daemonset["metadata"].get("name"))
    if name in ENFORCERS:
        return ENFORCERS[name]
    if name == AWS_NODE and any(AWS_POLICY_FLAG in (c.get("args") or []) for c in containers(daemonset)):
        return "Amazon VPC CNI network policy agent"
    return None


def _policies_on(cluster: Cluster) -> tuple[bool, str] | None:
    """Whether the operator renders NetworkPolicies and how that is known; None when nothing says."""
    if operator_deployment(cluster) is not None:
        setting = operator_setting(cluster, "GRPO_NETWORK_POLICIES")
        return (setting or "true").lower() != "false", f"the operator's GRPO_NETWORK_POLICIES={setting or 'true'}"
    if (value := chart_value(cluster, "networkPolicies.enabled")) is not None:
        return bool(value), f"--values networkPolicies.enabled={str(value).lower()}"
    rendered = [
        p
        for p in cluster.network_policies
        if (p["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == MANAGED_BY
    ]
    if rendered:
        return True, f"{len(rendered)} NetworkPolicies of runs (e.g. {name_of(rendered[0])})"
    return None


def network_policies(cluster: Cluster) -> Check | None:
    if cannot := unread(cluster, "network policies", "daemonsets"):
        return cannot
    known = _policies_on(cluster)
    if known is None:
        return None
    on, why = known
    if not on:
        return Check("network policies", Verdict.OK, f"runs get no NetworkPolicies ({why})")
    enforcers = [
        f"{kind} (DaemonSet {name_of(d)}, {int(d.get('status', {}).get('numberReady') or 0)} ready)"
        for d in cluster.daemonsets
        if (kind := _enforcer(d)) and int(d.get("status", {}).get("numberReady") or 0) > 0
    ]
    if enforcers:
        return Check("network policies", Verdict.OK, f"runs get NetworkPolicies ({why}), enforced by {enforcers[0]}")
    return Check(
        "network policies",
        Verdict.WARN,
        f"runs get NetworkPolicies ({why}), but no policy-enforcing CNI was detected (no ready DaemonSet of "
        f"{', '.join(sorted(set(ENFORCERS.values())))}, nor aws-node with {AWS_POLICY_FLAG}): without one the "
        "policies are stored and nothing enforces them",
        "run a CNI that enforces NetworkPolicy (Calico, Cilium; on EKS the VPC CNI's enableNetworkPolicy), or "
        "ignore this if yours does under another name; networkPolicies.enabled=false stops rendering them",
    )


def monitoring_crds(cluster: Cluster) -> Check:
    if cannot := unread(cluster, "Prometheus Operator CRDs", "customresourcedefinitions"):
        return cannot
    wanted = {
        SERVICEMONITOR_CRD: "metrics.serviceMonitor.enabled",
        PROMETHEUSRULE_CRD: "metrics.prometheusRule.enabled",
    }
    served = {
        name
        for name in wanted
        if any(
            v.get("name") == "v1" and v.get("served")
            for v in (cluster.crds.get(name) or {}).get("spec", {}).get("versions", [])
        )
    }
    missing = [name for name in wanted if name not in served]
    if not missing:
        return Check("Prometheus Operator CRDs", Verdict.OK, f"{' and '.join(wanted)} serve v1")
    enabled = [(name, wanted[name]) for name in missing if chart_value(cluster, wanted[name]) is True]
    what = f"no {', '.join(missing)} (monitoring.coreos.com/v1)"
    if enabled:
        return Check(
            "Prometheus Operator CRDs",
            Verdict.FAIL,
            f"{what}, but --values sets {', '.join(v for _, v in enabled)}: helm install fails (no matches for "
            "kind ServiceMonitor/PrometheusRule in monitoring.coreos.com/v1)",
            "install the Prometheus Operator's CRDs (the prometheus-operator-crds chart, or kube-prometheus-stack), "
            f"or set {' and '.join(v for _, v in enabled)} to false",
        )
    return Check(
        "Prometheus Operator CRDs",
        Verdict.OK,
        f"{what}: keep the chart's {' and '.join(wanted[n] for n in missing)} false"
        + ("" if cluster.chart_values is not None else " (pass --values to check your chart values)"),
    )
