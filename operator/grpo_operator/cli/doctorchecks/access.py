"""`grpo doctor`'s RBAC checks: what the user may do with GRPORuns (their SelfSubjectAccessReviews), and whether the
operator's ServiceAccount is granted what the operator needs (`OPERATOR_RULES`), judged from the Roles and bindings
read, without acting as it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grpo_operator.cli.doctorchecks.controlplane import operator_setting
from grpo_operator.cli.doctorchecks.model import Check, Cluster, Verdict, containers, operator_deployment, unread


def rbac(cluster: Cluster) -> Check:
    who = cluster.user or "you"
    denied = [what for what, ok in cluster.allowed.items() if not ok]
    if denied:
        return Check(
            "RBAC",
            Verdict.FAIL,
            f"{who} cannot " + "; ".join(denied),
            f"bind {'them' if cluster.user else 'you'} a Role granting those verbs on grporuns.grpo.dev in that namespace",
        )
    return Check("RBAC", Verdict.OK, f"{who} can " + "; ".join(cluster.allowed) if cluster.allowed else "nothing asked")


@dataclass(frozen=True)
class Rule:
    """Verbs the operator needs on resources of an API group; `when` names the setting that adds the rule."""

    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    when: str = ""


# What the operator's ServiceAccount needs in each namespace it watches. The chart's RBAC template
# (grpo-operator.namespacedRules) is checked against this table (tests/integration/chart/test_operator_rules.py).
OPERATOR_RULES = (
    Rule("grpo.dev", ("grporuns",), ("get", "list", "watch", "patch")),
    Rule("grpo.dev", ("grporuns/status",), ("patch",)),
    Rule("grpo.dev", ("grporuns/finalizers",), ("update",)),
    Rule("", ("events",), ("create",)),
    Rule("", ("configmaps", "services"), ("create", "patch")),
    Rule("apps", ("deployments",), ("create", "patch", "get", "list", "watch")),
    Rule("policy", ("poddisruptionbudgets",), ("create", "patch")),
    Rule("ray.io", ("rayclusters",), ("create", "patch", "get", "delete", "list", "watch")),
    Rule("", ("pods",), ("list", "watch")),
    Rule("", ("secrets",), ("get", "create")),
    Rule("", ("podtemplates",), ("create",)),
    Rule("kueue.x-k8s.io", ("workloads",), ("list",)),  # why Kueue suspended a run (edges/kube.py kueue_workloads)
    Rule("kopf.dev", ("clusterkopfpeerings",), ("get", "list", "watch", "patch"), when="peering, all namespaces"),
    Rule("kopf.dev", ("kopfpeerings",), ("get", "list", "watch", "patch"), when="peering, some namespaces"),
    Rule("networking.k8s.io", ("networkpolicies",), ("create", "patch"), when="network policies"),
)

# What the operator's ServiceAccount needs cluster-wide whatever namespaces it watches: cluster-scoped objects, which
# only a ClusterRole bound by a ClusterRoleBinding grants (the chart's <release>-runtimes ClusterRole).
CLUSTER_RULES = (Rule("grpo.dev", ("grporuntimes",), ("get", "list", "watch")),)


def operator_needs(*, all_namespaces: bool, peering: bool, policies: bool) -> set[tuple[str, str, str]]:
    """(group, resource, verb) the operator needs in each namespace it watches, for the chart's settings."""
    on = {"network policies": policies, "peering, all namespaces": peering and all_namespaces}
    on["peering, some namespaces"] = peering and not all_namespaces
    return {
        (rule.group, resource, verb)
        for rule in OPERATOR_RULES
        if not rule.when or on[rule.when]
        for resource in rule.resources
        for verb in rule.verbs
    }


def _grants(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    """Whether RBAC rules allow `verb` on every object of `resource` (Kubernetes' rule matching, wildcards too)."""
    return any(
        (group in r.get("apiGroups", ()) or "*" in r.get("apiGroups", ()))
        and (resource in r.get("resources", ()) or "*" in r.get("resources", ()))
        and (verb in r.get("verbs", ()) or "*" in r.get("verbs", ()))
        and not r.get("resourceNames")
        for r in rules
    )


def _rules_of(cluster: Cluster, ref: dict[str, Any], namespace: str | None) -> list[dict[str, Any]]:
    if ref.get("kind") == "ClusterRole":
        found = [r for r in cluster.cluster_roles if r["metadata"]["name"] == ref.get("name")]
    else:
        found = [
            r
            for r in cluster.roles
            if r["metadata"]["name"] == ref.get("name") and r["metadata"].get("namespace") == namespace
        ]
    return [rule for role in found for rule in role.get("rules") or []]


def _bound(cluster: Cluster, account: tuple[str, str], namespace: str | None) -> tuple[list[dict[str, Any]], list[str]]:
    """The rules bound to the ServiceAccount that hold cluster-wide (namespace None) or in `namespace`, and the
    names of the roles they come from."""
    name, home = account
    bindings = list(cluster.cluster_role_bindings)
    if namespace is not None:
        bindings += [b for b in cluster.role_bindings if b["metadata"].get("namespace") == namespace]
    rules: list[dict[str, Any]] = []
    roles: list[str] = []
    for binding in bindings:
        subjects = binding.get("subjects") or []
        if any(
            s.get("kind") == "ServiceAccount" and s.get("name") == name and s.get("namespace") == home for s in subjects
        ):
            ref = binding.get("roleRef") or {}
            rules += _rules_of(cluster, ref, binding["metadata"].get("namespace"))
            roles.append(f"{ref.get('kind')} {ref.get('name')}")
    return rules, roles


def operator_rbac(cluster: Cluster) -> Check | None:
    """The operator ServiceAccount's RBAC, evaluated from the Roles and bindings read (no access review is made on
    its behalf: that would need impersonation rights)."""
    deployment = operator_deployment(cluster)
    if deployment is None:
        return None  # outside the cluster the operator runs with its own credentials
    if cannot := unread(cluster, "operator RBAC", "clusterroles", "clusterrolebindings", "roles", "rolebindings"):
        return cannot
    pod = deployment["spec"]["template"]["spec"]
    account = (str(pod.get("serviceAccountName") or "default"), str(deployment["metadata"]["namespace"]))
    args = containers(deployment)[0].get("args") or []
    watched: list[str | None] = [a.split("=", 1)[1] for a in args if a.startswith("--namespace=")] or [None]
    policies = (operator_setting(cluster, "GRPO_NETWORK_POLICIES") or "true").lower() != "false"
    needs = operator_needs(
        all_namespaces=watched == [None], peering=int(deployment["spec"].get("replicas", 1)) > 1, policies=policies
    )
    lacking: list[str] = []
    sources: set[str] = set()
    for namespace in watched:
        rules, roles = _bound(cluster, account, namespace)
        sources |= set(roles)
        where = f"in {namespace}" if namespace else "cluster-wide"
        lacking += [
            f"{verb} {resource}{'.' + group if group else ''} {where}"
            for group, resource, verb in sorted(needs)
            if not _grants(rules, group, resource, verb)
        ]
    cluster_needs = {(r.group, res, verb) for r in CLUSTER_RULES for res in r.resources for verb in r.verbs}
    rules, roles = _bound(cluster, account, None)
    sources |= set(roles)
    cluster_lacking = [
        f"{verb} {resource}.{group} (cluster-scoped)"
        for group, resource, verb in sorted(cluster_needs)
        if not _grants(rules, group, resource, verb)
    ]
    lacking += cluster_lacking
    who = f"ServiceAccount {account[1]}/{account[0]}"
    bound = ", ".join(sorted(sources)) or "no Role or ClusterRole"
    if lacking:
        where = " (a ClusterRole with a ClusterRoleBinding for the cluster-scoped ones)" if cluster_lacking else ""
        return Check(
            "operator RBAC",
            Verdict.FAIL,
            f"{who} (bound to {bound}) cannot {'; '.join(lacking[:6])}{' ...' if len(lacking) > 6 else ''}",
            "restore the chart's RBAC (helm upgrade with rbac.create=true), or add those verbs to the role bound to "
            f"it{where}",
        )
    total = len(needs) + len(cluster_needs)
    return Check("operator RBAC", Verdict.OK, f"{who} (bound to {bound}) has the {total} permissions it needs")
