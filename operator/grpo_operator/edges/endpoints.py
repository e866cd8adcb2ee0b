"""Where a run's Ray Jobs API and metrics live: in-cluster Service DNS names by default, overridable for local
runs and tests (a local Ray head on loopback). The one place these addresses are decided.

The values come in through `Addressing`, the part of the operator's settings read here (the settings check
the URL templates at start, so formatting one here cannot fail).
"""

from __future__ import annotations

from typing import Protocol

from grpo_operator.render import names
from grpo_operator.render.settings import DASHBOARD_PORT, RenderSettings


class Addressing(Protocol):
    @property
    def ray_address(self) -> str | None: ...
    @property
    def trainer_metrics_url(self) -> str | None: ...
    @property
    def reward_metrics_url(self) -> str | None: ...
    @property
    def render(self) -> RenderSettings: ...


def ray_address(namespace: str, run: str, settings: Addressing) -> str:
    if settings.ray_address:
        return settings.ray_address
    host = f"{names.head_service(run)}.{namespace}.svc.{settings.render.cluster_domain}"
    return f"http://{host}:{DASHBOARD_PORT}"


def trainer_metrics_url(driver_ip: str, settings: Addressing) -> str:
    port = settings.render.prometheus_port
    template = settings.trainer_metrics_url or "http://{host}:{port}/metrics"
    host = f"[{driver_ip}]" if ":" in driver_ip else driver_ip
    return template.format(host=host, port=port)


def reward_metrics_url(namespace: str, run: str, settings: Addressing) -> str:
    service = names.reward_service(run)
    template = settings.reward_metrics_url or "http://{service}.{namespace}.svc.{domain}:{port}/metrics"
    return template.format(
        service=service, namespace=namespace, port=settings.render.reward_port, domain=settings.render.cluster_domain
    )
