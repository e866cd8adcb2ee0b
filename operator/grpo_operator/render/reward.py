"""The CPU reward service of a run (only for `reward.type: remote`): Deployment, Service, PodDisruptionBudget.

Probes follow the service's contract: startup and readiness on `/ready` (it turns 503 when scoring errors
pass a threshold or no worker is alive, so miles is never sent to a broken scorer), liveness on `/healthz`
(answered by the event loop whatever the pool does, so one bad input cannot crash-loop the pod).
"""

from __future__ import annotations

from typing import Any

from grpo_operator.api import GRPORun
from grpo_operator.api.spec import RemoteRewardSpec
from grpo_operator.planning.instances import runtime_of
from grpo_operator.render import names
from grpo_operator.render.raycluster import metadata
from grpo_operator.render.settings import RenderSettings

COMPONENT = "reward"


class MissingRewardImage(ValueError):
    """No image for the reward service: neither in the spec nor in the operator's settings."""


def reward_image(remote: RemoteRewardSpec, settings: RenderSettings) -> str:
    image = remote.image or settings.reward_image
    if not image:
        raise MissingRewardImage(
            "spec.reward.remote.image: not set and the operator has no default reward image; set it, or set "
            "the operator's GRPO_REWARD_IMAGE (chart value rewardService.image)"
        )
    return image


def reward_size(run: GRPORun, settings: RenderSettings) -> tuple[str, str]:
    """CPU and memory of a reward pod: the runtime's when it sizes them, else the operator's."""
    size = runtime_of(run.spec).spec.defaults.scheduling.reward_resources
    return (size.cpu, size.memory) if size is not None else (settings.reward_cpu, settings.reward_memory)


def scoring_processes(cpu: str) -> int:
    """One scoring process per whole requested CPU, at least one (`500m` and `1.5` give 1)."""
    cores = int(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
    return max(1, int(cores))


def deployment(run: GRPORun, remote: RemoteRewardSpec, settings: RenderSettings) -> dict[str, Any]:
    name = names.reward_service(run.metadata.name)
    cpu, memory = reward_size(run, settings)
    port = settings.reward_port
    probe = {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 10, "timeoutSeconds": 5}
    pod: dict[str, Any] = {
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "reward",
                "image": reward_image(remote, settings),
                "command": ["python", "-m", "reward_service", "--host", "0.0.0.0", "--port", str(port)],
                "ports": [{"name": "http", "containerPort": port}],
                "env": [
                    {"name": "REWARD_BACKEND", "value": remote.backend.value},
                    {"name": "REWARD_DEADLINE_S", "value": repr(remote.timeout_seconds)},
                    # One scoring process per requested CPU (without it, one per CPU of the node).
                    {"name": "REWARD_WORKERS", "value": str(scoring_processes(cpu))},
                ],
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                "resources": {
                    "requests": {"cpu": cpu, "memory": memory},
                    "limits": {"memory": memory},
                },
                "startupProbe": {**probe, "failureThreshold": 30},
                "readinessProbe": {**probe, "failureThreshold": 3},
                "livenessProbe": {
                    "httpGet": {"path": "/healthz", "port": "http"},
                    "periodSeconds": 10,
                    "timeoutSeconds": 5,
                    "failureThreshold": 6,
                },
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
        # The root filesystem is read-only; the worker pool's forkserver needs a writable /tmp for its socket.
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}],
    }
    if run.spec.scheduling.head_node_selector:
        pod["nodeSelector"] = dict(run.spec.scheduling.head_node_selector)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(run, name, COMPONENT),
        "spec": {
            "replicas": remote.replicas,
            "selector": {"matchLabels": names.selector(run.metadata.name, COMPONENT)},
            "template": {"metadata": {"labels": names.labels(run.metadata.name, COMPONENT)}, "spec": pod},
        },
    }


def service(run: GRPORun, settings: RenderSettings) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(run, names.reward_service(run.metadata.name), COMPONENT),
        "spec": {
            "selector": names.selector(run.metadata.name, COMPONENT),
            "ports": [{"name": "http", "port": settings.reward_port, "targetPort": "http"}],
        },
    }


def disruption_budget(run: GRPORun) -> dict[str, Any]:
    # One scorer at a time may be evicted: with several replicas the others keep scoring (and the reward client
    # retries what the evicted one dropped); with one, a node drain can still proceed, which a minAvailable
    # of 1 would block forever.
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(run, names.reward_service(run.metadata.name), COMPONENT),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": names.selector(run.metadata.name, COMPONENT)},
        },
    }


def reward_children(run: GRPORun, settings: RenderSettings) -> list[dict[str, Any]]:
    remote = run.spec.reward.remote
    if remote is None:
        return []
    return [deployment(run, remote, settings), service(run, settings), disruption_budget(run)]
