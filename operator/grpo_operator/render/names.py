"""Names and labels of every child object of a GRPORun: render, status lookup and tests all use these."""

from __future__ import annotations

from grpo_operator.api import API_VERSION, KIND

MANAGED_BY = "grpo-operator"
RUN_LABEL = "grpo.dev/run"
COMPONENT_LABEL = "grpo.dev/component"
WORKER_GROUP = "gpu"
CONFIG_FILE = "run-config.json"


def ray_cluster(run: str) -> str:
    return f"{run}-ray"


def head_service(run: str) -> str:
    """The Service KubeRay creates for the head (`<cluster>-head-svc`)."""
    return f"{ray_cluster(run)}-head-svc"


def reward_service(run: str) -> str:
    return f"{run}-reward"


def config_map(run: str) -> str:
    return f"{run}-config"


def labels(run: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "grpo-run",
        "app.kubernetes.io/instance": run,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        RUN_LABEL: run,
        COMPONENT_LABEL: component,
    }


def selector(run: str, component: str) -> dict[str, str]:
    return {RUN_LABEL: run, COMPONENT_LABEL: component}


def owner_reference(run: str, uid: str) -> dict[str, object]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": run,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def submission_id(run: str, uid: str, generation: int) -> str:
    """Deterministic: the same run and spec generation always give the same id, so a restarted operator
    finds the job it submitted instead of submitting a second one."""
    return f"grpo-{run}-{uid[:8]}-g{generation}"
