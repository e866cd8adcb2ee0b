"""Recovery: a job that failed for a reason a fresh start can fix (`status.failures.RETRYABLE`: NCCL or fabric,
a lost node, a dead rollout engine, host memory) restarts from the last checkpoint as a new attempt, at most
`spec.recovery.maxRestarts` times. Anything else, and a failure past that count, ends the run `Failed`. The
restart forgets the failed job (the next reconcile submits the next attempt's id into the same RayCluster, whose
lost pods KubeRay replaces) and keeps its log tail like any ended job."""

from __future__ import annotations

from grpo_operator.api.status import ConditionType, Phase, Reason
from grpo_operator.status.decision import Decision, Draft, Event
from grpo_operator.status.failures import RETRYABLE

C, R = ConditionType, Reason


def used(draft: Draft) -> int:
    return (draft.prev.restarts or 0) if draft.prev is not None else 0


def restart(draft: Draft, reason: str, message: str) -> Decision | None:
    """The restart after a job failed with `reason`, or None when the run should fail."""
    limit = draft.spec.recovery.max_restarts
    done = used(draft)
    if reason not in RETRYABLE or done >= limit:
        return None
    text = f"restart {done + 1} of recovery.maxRestarts {limit}, from the last checkpoint, after {reason}: {message}"
    draft.conds.set(C.COMPLETE, False, R.IN_PROGRESS, "")
    draft.events.append(Event("Warning", R.RESTARTED, text))
    return draft.decide(
        Phase.PROVISIONING, R.RESTARTING, text, restarts=done + 1, job_submission_id=None, job_status=None
    )
