"""Recovery: a job that failed for a reason a fresh start can fix (`status.failures.RETRYABLE`: NCCL or fabric,
a lost node, a dead rollout engine, host memory) restarts from the last checkpoint as a new attempt, at most
`spec.recovery.maxRestarts` times. Anything else, and a failure past that count, ends the run `Failed`. The
restart forgets the failed job, so the next reconcile submits the next attempt's id, and keeps its log tail like
any ended job. When the failure's line names a worker's node, the workers keep off that node from then on
(`status.avoidedNodes`, a required node affinity): the RayCluster is deleted and made again without it."""

from __future__ import annotations

from grpo_operator.api.status import ConditionType, Phase, Reason
from grpo_operator.status import failures
from grpo_operator.status.decision import Action, Decision, DeleteRayCluster, Draft, Event

C, R = ConditionType, Reason


def used(draft: Draft) -> int:
    return (draft.prev.restarts or 0) if draft.prev is not None else 0


def _failed_node(draft: Draft, reason: str) -> str | None:
    """The worker node the failure's line came from (Ray prefixes a line with its node's IP, the pod's IP)."""
    job = draft.obs.job
    found = failures.classify(draft.obs.log_text or (job.message if job else ""))
    if found is None or found.reason != reason or found.node is None:
        return None
    return dict(draft.obs.worker_nodes).get(found.node)


def restart(draft: Draft, reason: str, message: str) -> Decision | None:
    """The restart after a job failed with `reason`, or None when the run should fail."""
    limit = draft.spec.recovery.max_restarts
    done = used(draft)
    if reason not in failures.RETRYABLE or done >= limit:
        return None
    text = f"restart {done + 1} of recovery.maxRestarts {limit}, from the last checkpoint, after {reason}: {message}"
    avoided = list(draft.prev.avoided_nodes or []) if draft.prev is not None else []
    node = _failed_node(draft, reason)
    actions: tuple[Action, ...] = ()
    if node is not None and node not in avoided:
        avoided.append(node)
        actions = (DeleteRayCluster(),)
        text = f"{text}; the workers now keep off node {node}"
    draft.conds.set(C.COMPLETE, False, R.IN_PROGRESS, "")
    draft.events.append(Event("Normal", R.RESTARTED, text))
    return draft.decide(
        Phase.PROVISIONING,
        R.RESTARTING,
        text,
        actions,
        restarts=done + 1,
        job_submission_id=None,
        job_status=None,
        avoided_nodes=avoided or None,
    )
