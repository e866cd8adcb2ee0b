"""`grpo doctor`'s RBAC checks: what the user may do with GRPORuns (their SelfSubjectAccessReviews)."""

from __future__ import annotations

from grpo_operator.cli.doctorchecks.model import Check, Cluster, Verdict


def rbac(cluster: Cluster) -> Check:
    denied = [what for what, ok in cluster.allowed.items() if not ok]
    if denied:
        return Check(
            "RBAC",
            Verdict.FAIL,
            "you cannot " + "; ".join(denied),
            "bind a Role granting those verbs on grporuns.grpo.dev in that namespace",
        )
    return Check("RBAC", Verdict.OK, "you can " + "; ".join(cluster.allowed) if cluster.allowed else "nothing asked")
