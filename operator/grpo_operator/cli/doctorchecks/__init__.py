"""`grpo doctor`'s judgement: what a cluster, read once into a `Cluster`, lacks for GRPORuns, and whether a given
run can be placed now. Pure (the reads are `cli.clusterread`'s): each check takes the objects as the API server
returned them and gives one `Check` per concern, ok / warn / fail, naming what was found and the fix. One module per
family: the control plane, nodes, storage and Kueue, RBAC (who else may write a run's status too), the platform
(policies, monitoring), placement.
"""

from __future__ import annotations

from grpo_operator.cli.doctorchecks.access import (
    CLUSTER_RULES,
    OPERATOR_RULES,
    operator_needs,
    operator_rbac,
    rbac,
    status_writers,
)
from grpo_operator.cli.doctorchecks.controlplane import (
    grporun_crd,
    kuberay_crds,
    kuberay_operator,
    operator,
    schema_gaps,
)
from grpo_operator.cli.doctorchecks.model import (
    GRPORUN_CRD,
    GRPORUNTIME_CRD,
    LOCALQUEUE_CRD,
    PROMETHEUSRULE_CRD,
    RAYCLUSTER_CRD,
    SERVICEMONITOR_CRD,
    Check,
    Cluster,
    Target,
    Verdict,
    quantity,
)
from grpo_operator.cli.doctorchecks.nodes import device_plugins, gpu_nodes, taints, tolerates
from grpo_operator.cli.doctorchecks.placement import placement
from grpo_operator.cli.doctorchecks.platform import monitoring_crds, network_policies
from grpo_operator.cli.doctorchecks.storage import kueue, storage


def checks(cluster: Cluster, target: Target | None = None) -> list[Check]:
    """Every check, in the order of the table."""
    found: list[Check | None] = [
        grporun_crd(cluster),
        operator(cluster),
        kuberay_crds(cluster, target),
        kuberay_operator(cluster),
        gpu_nodes(cluster, target),
        device_plugins(cluster, target),
        taints(cluster, target),
        storage(cluster, target) if target else None,
        kueue(cluster, target),
        network_policies(cluster),
        monitoring_crds(cluster),
        rbac(cluster),
        operator_rbac(cluster),
        status_writers(cluster),
        placement(cluster, target) if target else None,
    ]
    return [c for c in found if c is not None]


__all__ = [
    "CLUSTER_RULES",
    "GRPORUNTIME_CRD",
    "GRPORUN_CRD",
    "LOCALQUEUE_CRD",
    "OPERATOR_RULES",
    "PROMETHEUSRULE_CRD",
    "RAYCLUSTER_CRD",
    "SERVICEMONITOR_CRD",
    "Check",
    "Cluster",
    "Target",
    "Verdict",
    "checks",
    "operator_needs",
    "quantity",
    "schema_gaps",
    "tolerates",
]
