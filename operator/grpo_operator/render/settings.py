"""Operator settings that rendering needs beyond the spec (ports, paths, default images, head size).

A plain typed value: the operator builds it from its environment at start (`grpo_operator.controller.config`),
tests and the CLI build it directly. Rendering never reads the environment itself.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# The head's dashboard (the Jobs API) port is fixed: KubeRay's head probes check this port whatever Ray is told
# (docs/integrations/kuberay.md), so the operator also tells Ray (`--dashboard-port`) rather than trust its default.
DASHBOARD_PORT = 8265


class RenderSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    reward_image: str | None = Field(default=None, description="Default reward service image.")
    prometheus_port: int = Field(default=9400, description="miles --prometheus-port on the job driver's node.")
    launcher_metrics_port: int = Field(default=9465, description="grpo_launcher provenance metrics port.")
    reward_port: int = Field(default=8000, description="Reward service HTTP port.")
    config_dir: str = Field(default="/etc/grpo", description="Where the run config is mounted in Ray pods.")
    miles_train: str = Field(default="/root/miles/train.py", description="miles's synchronous GRPO entry point.")
    python: str = Field(default="python3", description="Interpreter in the trainer image.")
    launcher: tuple[str, ...] | None = Field(
        default=None,
        description="Entrypoint argv placed before miles's argv; default: the grpo launcher with the run config. "
        "Tests and local runs replace it with a stand-in for miles.",
    )
    max_grace_seconds: int = Field(
        default=3600, description="Most seconds a worker pod's grace period may be, whatever the run's spec asks."
    )
    cluster_domain: str = Field(
        default="cluster.local",
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        description="The cluster's DNS domain in Service names (<svc>.<ns>.svc.<domain>). Set it to what KubeRay's "
        "CLUSTER_DOMAIN is.",
    )
    head_cpu: str = "2"
    head_memory: str = "8Gi"
    reward_cpu: str = "2"
    reward_memory: str = "4Gi"
    head_do_not_disrupt: bool = Field(
        default=True,
        description="Keep voluntary disruptions off the Ray head: a PodDisruptionBudget (minAvailable 1) and "
        "karpenter.sh/do-not-disrupt on its pod. The head holds the job's record and GCS: losing it loses the attempt.",
    )
    # NetworkPolicies of every run (render/networkpolicy.py).
    network_policies: bool = Field(
        default=True, description="Render NetworkPolicies; off for clusters without a policy engine."
    )
    operator_namespace: str | None = Field(default=None, description="The operator's namespace (None: the run's).")
    operator_pod_labels: dict[str, str] = Field(
        default_factory=lambda: {"app.kubernetes.io/name": "grpo-operator"},
        description="Labels of the operator's pods, the only ones outside a run that reach its dashboard and metrics.",
    )
    prometheus_namespace_labels: dict[str, str] | None = Field(
        default=None, description="Labels of Prometheus's namespace, which may scrape a run's metrics ports."
    )
    prometheus_pod_labels: dict[str, str] | None = Field(default=None, description="Labels of Prometheus's pods.")
    egress_cidrs: tuple[str, ...] | None = Field(
        default=None, description="None: egress open. Set: a run's pods reach only the run, cluster DNS and these."
    )
