"""`grpo doctor`'s "status writers" check as a table: a Role or ClusterRole bound in the judged namespace that grants
patch or update on grporuns/status to anyone but the operator's ServiceAccount warns, naming the subject, the verbs,
the role and the binding; Kubernetes' own components and grants that do not reach the status (as Kubernetes matches
rules: `grporuns/*` is no wildcard, checked with `kubectl auth can-i` on the real API server) do not."""

from __future__ import annotations

from typing import Any

import pytest
from grpo_operator.cli.doctorchecks import Cluster, Verdict, checks
from grpo_operator.cli.doctorchecks.access import status_writers

from tests.support.doctor import healthy, target

NS = "team-a"
STATUS = {"apiGroups": ["grpo.dev"], "resources": ["grporuns/status"], "verbs": ["patch"]}


def cluster() -> Cluster:
    """The healthy cluster judged for team-a, with the bindings every cluster has: cluster-admin for system:masters
    and the garbage collector's ClusterRole (every verb but create on every resource) for its ServiceAccount."""
    found = healthy()
    found.namespace = NS
    found.cluster_roles += [
        {"metadata": {"name": "cluster-admin"}, "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]},
        {
            "metadata": {"name": "system:controller:generic-garbage-collector"},
            "rules": [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["delete", "get", "list", "patch", "update", "watch"]}
            ],
        },
    ]
    found.cluster_role_bindings += [
        _binding("cluster-admin", "ClusterRole", "cluster-admin", {"kind": "Group", "name": "system:masters"}),
        _binding(
            "system:controller:generic-garbage-collector",
            "ClusterRole",
            "system:controller:generic-garbage-collector",
            {"kind": "ServiceAccount", "name": "generic-garbage-collector", "namespace": "kube-system"},
        ),
    ]
    return found


def _binding(
    name: str, kind: str, role: str, *subjects: dict[str, Any], namespace: str | None = None
) -> dict[str, Any]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"metadata": meta, "roleRef": {"kind": kind, "name": role}, "subjects": list(subjects)}


def grant(rule: dict[str, Any], subject: dict[str, Any], *, scope: str = "Role", namespace: str = NS) -> Cluster:
    """`cluster()` with `rule` in a role bound to `subject`: a Role and RoleBinding in `namespace`, a ClusterRole and
    RoleBinding there ("ClusterRole in namespace"), or a ClusterRole and ClusterRoleBinding ("ClusterRole")."""
    found = cluster()
    if scope == "Role":
        found.roles.append({"metadata": {"name": "writer", "namespace": namespace}, "rules": [rule]})
        found.role_bindings.append(_binding("writers", "Role", "writer", subject, namespace=namespace))
    else:
        found.cluster_roles.append({"metadata": {"name": "writer"}, "rules": [rule]})
        if scope == "ClusterRole":
            found.cluster_role_bindings.append(_binding("writers", "ClusterRole", "writer", subject))
        else:
            found.role_bindings.append(_binding("writers", "ClusterRole", "writer", subject, namespace=namespace))
    return found


ALICE = {"kind": "User", "name": "alice"}
CI = {"kind": "ServiceAccount", "name": "ci-bot", "namespace": NS}
OPERATOR = {"kind": "ServiceAccount", "name": "grpo-operator", "namespace": "grpo-system"}

CASES: list[tuple[str, Cluster, list[str]]] = [
    ("a Role in the namespace for a user", grant(STATUS, ALICE), ["User alice: patch by Role writer (RoleBinding writers)"]),
    ("a ClusterRole bound cluster-wide to a group, update on */status", grant({**STATUS, "resources": ["*/status"], "verbs": ["update"]}, {"kind": "Group", "name": "devs"}, scope="ClusterRole"), ["Group devs: update by ClusterRole writer (ClusterRoleBinding writers)"]),
    ("a ClusterRole of everything bound in the namespace", grant({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, ALICE, scope="ClusterRole in namespace"), ["User alice: patch/update by ClusterRole writer (RoleBinding writers)"]),
    ("every group's grporuns/status", grant({**STATUS, "apiGroups": ["*"]}, ALICE), ["User alice: patch"]),
    ("a ServiceAccount of the namespace", grant(STATUS, CI), ["ServiceAccount team-a/ci-bot: patch"]),
    ("some runs by name", grant({**STATUS, "resourceNames": ["run-a", "run-b"]}, ALICE), ["User alice: patch on run-a, run-b by Role writer"]),
    ("every authenticated user", grant(STATUS, {"kind": "Group", "name": "system:authenticated"}), ["Group system:authenticated: patch"]),
    ("every ServiceAccount of the namespace", grant(STATUS, {"kind": "Group", "name": f"system:serviceaccounts:{NS}"}), [f"Group system:serviceaccounts:{NS}"]),
    ("a ServiceAccount named as a user", grant(STATUS, {"kind": "User", "name": f"system:serviceaccount:{NS}:ci-bot"}), [f"User system:serviceaccount:{NS}:ci-bot"]),
]  # fmt: skip

QUIET: list[tuple[str, Cluster]] = [
    ("only the cluster's own bindings", cluster()),
    ("grporuns/* is no wildcard in Kubernetes RBAC", grant({**STATUS, "resources": ["grporuns/*"], "verbs": ["*"]}, ALICE)),
    ("the object, not its status", grant({**STATUS, "resources": ["grporuns"], "verbs": ["patch", "update"]}, ALICE)),
    ("reading the status", grant({**STATUS, "verbs": ["get", "list", "watch"]}, ALICE)),
    ("another API group's status", grant({**STATUS, "apiGroups": ["apps"], "resources": ["*/status"]}, ALICE)),
    ("a Role in another namespace", grant(STATUS, ALICE, namespace="team-b")),
    ("the operator's own ServiceAccount", grant(STATUS, OPERATOR, scope="ClusterRole")),
    ("a controller of Kubernetes", grant(STATUS, {"kind": "User", "name": "system:kube-controller-manager"}, scope="ClusterRole")),
]  # fmt: skip


@pytest.mark.parametrize(("case", "found", "words"), CASES, ids=[c[0] for c in CASES])
def test_a_grant_of_writing_grporuns_status_to_another_subject_warns_naming_it(
    case: str, found: Cluster, words: list[str]
) -> None:
    check = status_writers(found)
    assert check is not None and check.verdict is Verdict.WARN, (case, check)
    for word in [*words, "may be written in team-a", "1 subject(s)"]:
        assert word in check.found, (case, word, check.found)
    assert "to the operator's ServiceAccount only" in check.fix and "status.runtime" in check.fix


@pytest.mark.parametrize(("case", "found"), QUIET, ids=[c[0] for c in QUIET])
def test_grants_that_do_not_write_the_status_or_are_the_operators_pass(case: str, found: Cluster) -> None:
    check = status_writers(found)
    assert check is not None and check.verdict is Verdict.OK, (case, check)
    assert check.found == (
        "no subject but ServiceAccount grpo-system/grpo-operator and Kubernetes' own components may write "
        "grporuns/status in team-a"
    )


def test_every_subject_is_listed_once_with_each_grant() -> None:
    found = grant(STATUS, ALICE)
    found.role_bindings.append(_binding("more", "Role", "writer", ALICE, CI, namespace=NS))
    check = status_writers(found)
    assert check is not None
    assert "2 subject(s)" in check.found
    assert (
        "User alice: patch by Role writer (RoleBinding writers); patch by Role writer (RoleBinding more)" in check.found
    )


def test_unreadable_roles_warn_that_the_writers_are_not_known() -> None:
    found = cluster()
    found.unreadable["rolebindings"] = "forbidden"
    check = status_writers(found)
    assert check is not None and check.verdict is Verdict.WARN
    assert "cannot read rolebindings (forbidden)" in check.found and "not known" in check.found


def test_without_a_namespace_judged_there_is_no_check_and_the_healthy_cluster_passes_it() -> None:
    assert status_writers(healthy()) is None
    assert {c.name: c.verdict for c in checks(cluster(), target())}["status writers"] is Verdict.OK
