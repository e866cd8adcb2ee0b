"""The operator's settings, read once from its environment at start; a bad value stops it with one clear line.

Everything downstream receives these as typed values: rendering gets `render`, the reconciler the rest.
The Ray address and the metrics targets can be overridden here for local runs and tests (a local Ray head
on loopback instead of the RayCluster's head Service); see `grpo_operator.edges.endpoints`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from grpo_operator.render.settings import RenderSettings

PREFIX = "GRPO_"


class OperatorSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    render: RenderSettings = Field(default_factory=RenderSettings)
    ray_address: str | None = Field(default=None, description="Jobs API URL for every run (local runs, tests).")
    trainer_metrics_url: str | None = Field(
        default=None, description="Template for the trainer's metrics URL: {host} (driver IP) and {port}."
    )
    reward_metrics_url: str | None = Field(
        default=None, description="Template for the reward service's metrics URL: {service}, {namespace}, {port}."
    )
    reconcile_interval_seconds: float = Field(default=15.0, gt=0, le=3600)
    reward_error_ratio_max: float = Field(default=0.1, gt=0, le=1)
    http_timeout_seconds: float = Field(default=5.0, gt=0, le=120)
    metrics_port: int = Field(default=8081, ge=0, le=65535, description="Operator /metrics port; 0 disables it.")
    workers: int = Field(
        default=16, ge=1, le=256, description="Threads for reconciles (kopf's executor for sync handlers)."
    )
    peering_lifetime_seconds: int = Field(
        default=30,
        ge=5,
        le=600,
        description="With peering (two replicas): how long a silent replica counts as alive, the failover bound.",
    )


class SettingsError(ValueError):
    """An environment variable of the operator has a bad value."""


_ENV: dict[str, tuple[str, str]] = {
    # variable: (section, field)
    "GRPO_REWARD_IMAGE": ("render", "reward_image"),
    "GRPO_PROMETHEUS_PORT": ("render", "prometheus_port"),
    "GRPO_CLUSTER_DOMAIN": ("render", "cluster_domain"),
    "GRPO_ENTRYPOINT_PREFIX": ("render", "launcher"),
    "GRPO_RAY_ADDRESS": ("", "ray_address"),
    "GRPO_TRAINER_METRICS_URL": ("", "trainer_metrics_url"),
    "GRPO_REWARD_METRICS_URL": ("", "reward_metrics_url"),
    "GRPO_RECONCILE_INTERVAL_SECONDS": ("", "reconcile_interval_seconds"),
    "GRPO_REWARD_ERROR_RATIO_MAX": ("", "reward_error_ratio_max"),
    "GRPO_HTTP_TIMEOUT_SECONDS": ("", "http_timeout_seconds"),
    "GRPO_METRICS_PORT": ("", "metrics_port"),
    "GRPO_WORKERS": ("", "workers"),
    "GRPO_PEERING_LIFETIME_SECONDS": ("", "peering_lifetime_seconds"),
    # NetworkPolicies (render/networkpolicy.py); the JSON ones take a JSON value.
    "GRPO_NETWORK_POLICIES": ("render", "network_policies"),
    "GRPO_OPERATOR_NAMESPACE": ("render", "operator_namespace"),
    "GRPO_OPERATOR_POD_LABELS": ("render", "operator_pod_labels"),
    "GRPO_PROMETHEUS_NAMESPACE_LABELS": ("render", "prometheus_namespace_labels"),
    "GRPO_PROMETHEUS_POD_LABELS": ("render", "prometheus_pod_labels"),
    "GRPO_EGRESS_CIDRS": ("render", "egress_cidrs"),
}
_JSON = {
    "GRPO_OPERATOR_POD_LABELS": "an object of label: value",
    "GRPO_PROMETHEUS_NAMESPACE_LABELS": "an object",
    "GRPO_PROMETHEUS_POD_LABELS": "an object",
    "GRPO_EGRESS_CIDRS": 'a list of CIDRs, e.g. ["10.0.0.0/8"]',
}


def _value(name: str, raw: str) -> object:
    if name == "GRPO_ENTRYPOINT_PREFIX":
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SettingsError(f"{name}={raw!r}: not JSON ({exc.msg}); write a JSON list of strings") from None
        if not isinstance(parsed, list) or not all(isinstance(x, str) for x in parsed):
            raise SettingsError(f'{name}={raw!r}: must be a JSON list of strings, e.g. ["python3", "fake.py"]')
        return tuple(parsed)
    if name in _JSON:
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SettingsError(f"{name}={raw!r}: not JSON ({exc.msg}); write {_JSON[name]}") from None
    return raw


def load_settings(environ: Mapping[str, str]) -> OperatorSettings:
    unknown = sorted(k for k in environ if k.startswith(PREFIX) and k not in _ENV)
    if unknown:
        raise SettingsError(f"{unknown[0]}: unknown setting; known: {', '.join(sorted(_ENV))}")
    render: dict[str, object] = {}
    top: dict[str, object] = {}
    for name, (section, field) in _ENV.items():
        if name in environ and environ[name] != "":
            (render if section == "render" else top)[field] = _value(name, environ[name])
    try:
        return OperatorSettings(render=RenderSettings.model_validate(render), **top)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        field = str(err["loc"][-1])
        variable = next((n for n, (_, f) in _ENV.items() if f == field), field)
        raise SettingsError(f"{variable}={err.get('input')!r}: {err['msg']}") from None
