"""Names and labels of every child object of a GRPORun: render, status lookup and tests all use these."""

from __future__ import annotations

from grpo_operator.api import API_VERSION, KIND
from grpo_operator.api.status import GRPORunStatus, Phase

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


def head_budget(run: str) -> str:
    """The Ray head's PodDisruptionBudget."""
    return f"{ray_cluster(run)}-head"


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


def forensics(run: str, index: int) -> str:
    """The ConfigMap of the run's `index`-th evidence bundle (status.forensics)."""
    return f"{run}-forensics-{index}"


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


def submission_id(run: str, uid: str, generation: int, prev: GRPORunStatus | None = None) -> str:
    """The Ray job id of the run's current attempt; the only place it is made. Deterministic (a restarted
    operator finds the job it submitted instead of submitting a second one): the job the status tracks, unless
    the run is suspended; else one per spec generation, and per attempt after the first, since a resume of the
    same generation (after a Kueue preemption) needs an id the Ray head does not know yet."""
    if prev is not None and prev.job_submission_id and prev.phase is not Phase.SUSPENDED:
        return prev.job_submission_id
    first = f"grpo-{run}-{uid[:8]}-g{generation}"
    return f"{first}-a{prev.attempt + 1}" if prev is not None and prev.attempt else first


def checkpoint_submission_id(submission_id: str) -> str:
    """The one-line job that asks the job `submission_id` for a checkpoint before a suspend."""
    return f"{submission_id}-save"


def stacks_submission_id(submission_id: str, bundle: str) -> str:
    """The stacks job of the evidence bundle `bundle` (`forensics`, which ends in its index) of job `submission_id`:
    one per bundle, so a later capture of the same attempt is a new job, and a retried one finds its own."""
    return f"{submission_id}-stacks-{bundle.rsplit('-', 1)[-1]}"
