"""`grpo doctor`'s RBAC checks: what the user may do with GRPORuns (their SelfSubjectAccessReviews), whether the
operator's ServiceAccount is granted what the operator needs (`OPERATOR_RULES`), and who else may write
`grporuns/status` (`status_writers`), judged from the Roles and bindings read, without acting as anyone.
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
# (grpo-operator.namespacedRules) is checked against this table (tests/integration/chart/test_doctor_operator_rules.py).
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


# What writes a run's status: patch and update on the status subresource. Kubernetes matches a rule's resource
# exactly, "*", or "*/<subresource>" (rbac ResourceMatches): "grporuns/*" is no wildcard and grants nothing.
STATUS_VERBS = ("patch", "update")
STATUS_RESOURCES = ("grporuns/status", "*/status", "*")


def _status_grant(rule: dict[str, Any]) -> list[str]:
    """The verbs of STATUS_VERBS `rule` grants on grporuns/status (for some runs when it names them)."""
    groups, resources, verbs = rule.get("apiGroups") or (), rule.get("resources") or (), rule.get("verbs") or ()
    if not ({"grpo.dev", "*"} & set(groups) and set(STATUS_RESOURCES) & set(resources)):
        return []
    return [v for v in STATUS_VERBS if v in verbs or "*" in verbs]


def _subject(subject: dict[str, Any], namespace: str | None) -> str:
    kind, name = subject.get("kind"), subject.get("name")
    return f"{kind} {subject.get('namespace') or namespace}/{name}" if kind == "ServiceAccount" else f"{kind} {name}"


def _kubernetes_own(subject: dict[str, Any]) -> bool:
    """Kubernetes' own components: the system:masters group, the control plane's system: users, and the
    controllers' ServiceAccounts in kube-system (the garbage collector patches every resource). Not the groups of
    every authenticated user or every ServiceAccount (system:authenticated, system:serviceaccounts[:<ns>])."""
    kind, name = subject.get("kind"), str(subject.get("name", ""))
    if kind == "ServiceAccount":
        return subject.get("namespace") == "kube-system"
    if kind == "Group":
        return name == "system:masters"
    account = name.startswith("system:serviceaccount:")
    return name.startswith("system:serviceaccount:kube-system:") or (name.startswith("system:") and not account)


def status_writers(cluster: Cluster) -> Check | None:
    """Who, besides the operator, may patch or update grporuns/status in the namespace doctor judges: they can
    rewrite status.runtime, the copy of the GRPORuntime a started run resolves against. The operator does not use
    a copy it did not seal (it checks the run against the live GRPORuntime instead), but a run whose runtime is gone
    is held until it exists, so the grant is a way to stop others' runs."""
    namespace = cluster.namespace
    if namespace is None:
        return None
    if cannot := unread(cluster, "status writers", "clusterroles", "clusterrolebindings", "roles", "rolebindings"):
        return Check(
            cannot.name, Verdict.WARN, cannot.found + ", so who may rewrite status.runtime is not known", cannot.fix
        )
    deployment = operator_deployment(cluster)
    operator = None
    if deployment is not None:
        account = deployment["spec"]["template"]["spec"].get("serviceAccountName") or "default"
        operator = f"ServiceAccount {deployment['metadata']['namespace']}/{account}"
    bindings: list[tuple[dict[str, Any], str | None]] = [(b, None) for b in cluster.cluster_role_bindings]
    bindings += [(b, namespace) for b in cluster.role_bindings if b["metadata"].get("namespace") == namespace]
    found: dict[str, list[str]] = {}
    for binding, home in bindings:
        ref = binding.get("roleRef") or {}
        rules = _rules_of(cluster, ref, home)
        verbs = sorted({v for r in rules for v in _status_grant(r)})
        if not verbs:
            continue
        named = sorted({n for r in rules if _status_grant(r) for n in r.get("resourceNames") or ()})
        how = f"{'/'.join(verbs)}{' on ' + ', '.join(named) if named else ''} by {ref.get('kind')} {ref.get('name')}"
        via = f"{'RoleBinding' if home else 'ClusterRoleBinding'} {binding['metadata']['name']}"
        for subject in binding.get("subjects") or []:
            who = _subject(subject, home)
            if who != operator and not _kubernetes_own(subject):
                found.setdefault(who, []).append(f"{how} ({via})")
    if not found:
        besides = f"{operator} and " if operator else ""
        return Check(
            "status writers",
            Verdict.OK,
            f"no subject but {besides}Kubernetes' own components may write grporuns/status in {namespace}",
        )
    listed = [f"{who}: {'; '.join(how)}" for who, how in sorted(found.items())]
    return Check(
        "status writers",
        Verdict.WARN,
        f"grporuns/status may be written in {namespace}, besides by the operator, by {len(found)} subject(s): "
        + " | ".join(listed[:5])
        + (" | ..." if len(listed) > 5 else ""),
        "grant grporuns/status (and */status, *) to the operator's ServiceAccount only: drop patch and update on it "
        "from those roles, or bind them to fewer subjects. Whoever has it can rewrite status.runtime: the operator "
        "does not use a copy it did not seal and checks the run against the live GRPORuntime, but holds the run while "
        "that runtime does not exist",
    )
