"""Names and labels of every child object of a GRPORun: render, status lookup and tests all use these."""

from __future__ import annotations

from grpo_operator.api import API_VERSION, KIND

MANAGED_BY = "grpo-operator"
RUN_LABEL = "grpo.dev/run"
COMPONENT_LABEL = "grpo.dev/component"
WORKER_GROUP = "gpu"
CONFIG_FILE = "run-config.json"
PREFLIGHT_CONTAINER = "preflight"  # the worker pods' init container running the launcher's preflight


def ray_cluster(run: str) -> str:
    return f"{run}-ray"


def head_service(run: str) -> str:
    """The Service KubeRay creates for the head (`<cluster>-head-svc`)."""
    return f"{ray_cluster(run)}-head-svc"


def reward_service(run: str) -> str:
    return f"{run}-reward"


def config_map(run: str) -> str:
    return f"{run}-config"


def ray_auth_secret(run: str) -> str:
    """The Secret holding the run's Ray auth token (key `AUTH_TOKEN_KEY`): made by the operator, owned by the run."""
    return f"{run}-ray-auth"


AUTH_TOKEN_KEY = "token"  # noqa: S105 - the key's name in the Secret, not a token


def network_policy(run: str, component: str) -> str:
    return f"{run}-{component}"


def job_logs(run: str) -> str:
    """The ConfigMap that keeps the last job's log tail after the RayCluster is gone."""
    return f"{run}-job-logs"


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
