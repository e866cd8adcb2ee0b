"""The operator's settings: every `GRPO_*` environment variable, its default, the rule of where it lands, and the
one line a bad value stops the operator with.

`load_settings` is the only entry point; kopf's startup handler (`controller/handlers.py`) calls it once and
passes the result on. Each value is bounded by what it becomes: a port is a containerPort beside the other
rendered ports, a label map a NetworkPolicy selector, a CIDR an `ipBlock`, a URL template the address of every
scrape, so a value that would break every run is refused at start instead of at the first apply or reconcile.
"""

from __future__ import annotations

import ipaddress
import re
import string
from collections.abc import Mapping
from functools import cached_property
from typing import Annotated, Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings import SettingsError as SourceError

from grpo_operator.api.catalog import InstanceTypeName
from grpo_operator.render.networkpolicy import CLIENT_PORT, RAY_METRICS_PORT
from grpo_operator.render.settings import DASHBOARD_PORT, RenderSettings

PREFIX = "GRPO_"
_RENDER = RenderSettings.model_fields
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# The placeholders of each URL template, with values of the type each will have.
_TEMPLATES: dict[str, dict[str, object]] = {
    "trainer_metrics_url": {"host": "10.0.0.1", "port": 9400},
    "reward_metrics_url": {"service": "run-reward", "namespace": "default", "port": 8000, "domain": "cluster.local"},
}


_SHAPES = {
    "entrypoint_prefix": 'list of strings, e.g. ["python3", "fake.py"]',
    "operator_pod_labels": 'object of label: value, e.g. {"app.kubernetes.io/name": "grpo-operator"}',
    "prometheus_namespace_labels": "object of label: value",
    "prometheus_pod_labels": "object of label: value",
    "egress_cidrs": 'list of CIDRs, e.g. ["10.0.0.0/8"]',
    "gpu_hour_prices_usd": 'object of instance type: USD per GPU-hour, e.g. {"p5en.48xlarge": 5.2}',
}


class SettingsError(ValueError):
    """An environment variable of the operator has a bad value; `str(error)` is the one line for the user."""


def _label_value_problem(value: str) -> str | None:
    if len(value) > 63:
        return "a label value has at most 63 characters"
    if value and not _LABEL_NAME.match(value):
        return "a label value is alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
    return None


def _label_key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"label key {key!r}: its prefix must be a DNS subdomain (lowercase, at most 253 characters)"
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return f"label key {key!r}: its name must be 1-63 alphanumerics, '-', '_' or '.', alphanumeric at both ends"
    return None


def _check_labels(labels: dict[str, str] | None) -> dict[str, str] | None:
    for key, value in (labels or {}).items():
        problem = _label_key_problem(key) or _label_value_problem(value)
        if problem:
            raise ValueError(f"{problem} (key {key!r}, value {value!r}); write valid Kubernetes labels")
    return labels


class OperatorSettings(BaseSettings):
    """Every setting; its environment variable is `GRPO_` + the field name in capitals."""

    model_config = SettingsConfigDict(env_prefix=PREFIX, frozen=True, extra="forbid")

    reward_image: str | None = Field(default=None, description="Default reward service image.")
    prometheus_port: int = Field(
        default=_RENDER["prometheus_port"].default, ge=1, le=65535, description="miles --prometheus-port (driver node)."
    )
    cluster_domain: str = Field(
        default=_RENDER["cluster_domain"].default,
        pattern=_DNS_SUBDOMAIN.pattern,
        description="The cluster's DNS domain in Service names (<svc>.<ns>.svc.<domain>); KubeRay's CLUSTER_DOMAIN.",
    )
    entrypoint_prefix: tuple[str, ...] | None = Field(
        default=None, description="argv placed before miles's (local runs and tests: a stand-in for miles)."
    )
    ray_address: str | None = Field(default=None, description="Jobs API URL for every run (local runs, tests).")
    trainer_metrics_url: str | None = Field(
        default=None, description="Template of the trainer's metrics URL: {host} (driver IP) and {port}."
    )
    reward_metrics_url: str | None = Field(
        default=None,
        description="Template of the reward service's metrics URL: {service}, {namespace}, {port}, {domain}.",
    )
    # Floors: below them a run is polled (or a scrape given up) faster than the API server or a pod can answer.
    reconcile_interval_seconds: float = Field(default=15.0, ge=1, le=3600)
    reward_error_ratio_max: float = Field(default=0.1, gt=0, le=1)
    http_timeout_seconds: float = Field(default=5.0, ge=0.1, le=120)
    capture_budget_seconds: float = Field(
        default=60.0,
        ge=1,
        le=600,
        description="The whole evidence capture's deadline, its requests side by side: the stop after it waits no longer.",
    )
    metrics_port: int = Field(default=8081, ge=0, le=65535, description="Operator /metrics port; 0 disables it.")
    workers: int = Field(default=16, ge=1, le=256, description="Threads for reconciles (kopf's executor).")
    peering_lifetime_seconds: int = Field(
        default=30, ge=5, le=600, description="With peering: how long a silent replica counts as alive."
    )
    network_policies: bool = _RENDER["network_policies"].default
    head_do_not_disrupt: bool = _RENDER["head_do_not_disrupt"].default
    max_grace_seconds: int = Field(
        default=_RENDER["max_grace_seconds"].default,
        ge=30,
        le=86400,
        description="Most seconds a worker pod's grace period may be (a preemptor waits this long for the GPUs).",
    )
    operator_namespace: str | None = Field(
        default=None,
        max_length=63,
        pattern=_DNS_LABEL.pattern,
        description="The operator's namespace: its pods' NetworkPolicy peer, and where its status key Secret lives "
        "(unset: the runs' namespaces are the peer, and the key lives in default).",
    )
    status_key_secret: str = Field(
        default="grpo-operator-status-key",
        max_length=253,
        pattern=_DNS_SUBDOMAIN.pattern,
        description="Secret in the operator's namespace holding the key that seals each run's status.runtime; the "
        "operator makes it when it is missing.",
    )
    operator_pod_labels: dict[str, str] = Field(default_factory=_RENDER["operator_pod_labels"].default_factory)  # type: ignore[arg-type]
    prometheus_namespace_labels: dict[str, str] | None = None
    prometheus_pod_labels: dict[str, str] | None = None
    egress_cidrs: tuple[str, ...] | None = None
    gpu_hour_prices_usd: dict[InstanceTypeName, Annotated[float, Field(gt=0, allow_inf_nan=False)]] | None = Field(
        default=None,
        description="USD per GPU-hour of each instance type: status.accounting gains costUSD and lostCostUSD.",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Only what the caller passes: `load_settings` reads the environment it is given, never os.environ itself.
        return (init_settings,)

    @field_validator("reward_image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        if value is not None and (not value.isprintable() or any(c.isspace() for c in value)):
            raise ValueError(
                "an image reference has no whitespace or control characters; write it as `docker pull` takes it"
            )
        return value

    @field_validator("operator_pod_labels")
    @classmethod
    def _operator_labels(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError(
                "an empty selector matches every pod in the namespace and would open each run's Ray head to all of "
                'them; give the operator pods\' labels, e.g. {"app.kubernetes.io/name": "grpo-operator"}'
            )
        return _check_labels(value) or {}

    @field_validator("prometheus_namespace_labels", "prometheus_pod_labels")
    @classmethod
    def _labels(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return _check_labels(value)

    @field_validator("egress_cidrs")
    @classmethod
    def _cidrs(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for cidr in value or ():
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                cidr_ok = False
            else:
                cidr_ok = "/" in cidr
            if not cidr_ok:
                raise ValueError(f'{cidr!r} is not a CIDR; write address/prefix, e.g. ["10.0.0.0/8"]')
        return value

    @field_validator("trainer_metrics_url", "reward_metrics_url")
    @classmethod
    def _template(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Formatted once here, as every scrape will format it, so no reconcile meets a KeyError."""
        if value is None:
            return value
        allowed = _TEMPLATES[str(info.field_name)]
        use = f"use only {', '.join('{' + a + '}' for a in allowed)}"
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(value) if f is not None]
        except ValueError as exc:
            raise ValueError(f"not a URL template ({exc}); {use}") from None
        unknown = [f for f in fields if f not in allowed]
        if unknown:
            raise ValueError(f"unknown placeholder {{{unknown[0]}}}; {use}")
        try:
            url = value.format(**allowed)
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a URL template ({exc!r}); {use}") from None
        if not url.startswith(("http://", "https://")):
            raise ValueError("only http(s) metrics URLs are scraped; start it with http:// or https://")
        return value

    @model_validator(mode="after")
    def _ports_are_distinct(self) -> OperatorSettings:
        taken = {
            _RENDER["launcher_metrics_port"].default: "the launcher's metrics port, on the same trainer container",
            RAY_METRICS_PORT: "the Ray metrics port KubeRay adds to every Ray container",
            6379: "Ray's GCS port",
            DASHBOARD_PORT: "the Ray dashboard port",
            CLIENT_PORT: "the Ray client port",
        }
        if self.prometheus_port in taken:
            raise ValueError(
                f"GRPO_PROMETHEUS_PORT={self.prometheus_port} is {taken[self.prometheus_port]} (a port of a run's Ray "
                f"pods is used once); pick another, e.g. the default {_RENDER['prometheus_port'].default}"
            )
        return self

    @property
    def status_key_ref(self) -> tuple[str, str]:
        """(namespace, name) of the Secret holding the operator's status key."""
        return self.operator_namespace or "default", self.status_key_secret

    @cached_property
    def render(self) -> RenderSettings:
        """What rendering needs from these settings."""
        return RenderSettings(
            reward_image=self.reward_image,
            prometheus_port=self.prometheus_port,
            cluster_domain=self.cluster_domain,
            launcher=self.entrypoint_prefix,
            network_policies=self.network_policies,
            head_do_not_disrupt=self.head_do_not_disrupt,
            max_grace_seconds=self.max_grace_seconds,
            operator_namespace=self.operator_namespace,
            operator_pod_labels=self.operator_pod_labels,
            prometheus_namespace_labels=self.prometheus_namespace_labels,
            prometheus_pod_labels=self.prometheus_pod_labels,
            egress_cidrs=self.egress_cidrs,
        )


def _variable(field: str) -> str:
    return (PREFIX + field).upper()


def _describe(error: Mapping[str, Any], environ: Mapping[str, str]) -> str:
    loc = error.get("loc") or ()
    message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    if not loc:  # a rule across settings: its message names the variables itself
        return message
    field = str(loc[0])
    variable = _variable(field)
    raw = environ.get(variable, error.get("input"))
    shown = raw if not isinstance(raw, str) or len(raw) <= 80 else raw[:80] + "..."
    if error.get("type") == "value_error":  # our own rules: the message says the fix
        return f"{variable}={shown!r}: {message}"
    fix = f"write a JSON {_SHAPES[field]}" if field in _SHAPES else "unset it for the default"
    return f"{variable}={shown!r}: {message}; {fix}"


class _Environment(EnvSettingsSource):
    """pydantic-settings' reading of `GRPO_*` variables (prefix, JSON for maps and lists), from a given mapping."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._given = {k.lower(): v for k, v in environ.items() if v != ""}  # empty: unset, as the chart leaves it
        super().__init__(OperatorSettings, env_prefix=PREFIX, case_sensitive=False)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return self._given


def load_settings(environ: Mapping[str, str]) -> OperatorSettings:
    """The settings from `environ`, validated; raises `SettingsError` with one line naming the first bad one."""
    known = {_variable(name) for name in OperatorSettings.model_fields}
    unknown = sorted(k for k in environ if k.upper().startswith(PREFIX) and k.upper() not in known)
    if unknown:
        raise SettingsError(f"{unknown[0]}: unknown setting; known: {', '.join(sorted(known))}")
    try:
        values = _Environment(environ)()
    except SourceError as exc:  # a map or list that is not JSON; pydantic-settings names the field
        field = next((f for f in OperatorSettings.model_fields if f'"{f}"' in str(exc)), "")
        variable = _variable(field)
        raise SettingsError(
            f"{variable}={environ.get(variable)!r}: not JSON; write a JSON {_SHAPES.get(field, 'value')}"
        ) from None
    try:
        return OperatorSettings(**values)
    except ValidationError as exc:
        raise SettingsError(_describe(exc.errors(include_url=False)[0], environ)) from None
