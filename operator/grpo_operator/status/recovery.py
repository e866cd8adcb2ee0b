"""Recovery: a job that failed for a reason a fresh start can fix (`status.failures.RETRYABLE`: NCCL or fabric,
a lost node, a dead rollout engine, host memory) restarts from the last checkpoint as a new attempt, at most
`spec.recovery.maxRestarts` times; a failure that follows a planned stop of a worker pod (a drain's eviction, a
scheduler's preemption, a delete: the pod's preStop saved first) restarts without counting against it, as a
Kueue preemption or a suspend resumes. Anything else, and a failure past that count, ends the run `Failed`. The
restart forgets the failed job, so the next reconcile submits the next attempt's id, and keeps its log tail like
any ended job. When the failure's line names a worker's node, the workers keep off that node from then on
(`status.avoidedNodes`, a required node affinity): the RayCluster is deleted and made again without it."""

from __future__ import annotations

from grpo_operator.api.status import ConditionType, Phase, Reason, StopReason
from grpo_operator.status import failures
from grpo_operator.status.decision import Action, Decision, DeleteRayCluster, Draft, Event

C, R = ConditionType, Reason


def used(draft: Draft) -> int:
    return (draft.prev.restarts or 0) if draft.prev is not None else 0


# Stops someone made on purpose, which the worker's preStop hook saves before: they cost the rollouts after the
# save, not a restart. A taint manager's or the kubelet's stop (a node gone bad, node pressure) may come again, so
# its failure counts like any other.
PLANNED_STOPS = frozenset({StopReason.EVICTION, StopReason.PREEMPTION, StopReason.DELETED})


def planned_stop(draft: Draft) -> str | None:
    """The planned stop of one of the open attempt's worker pods, seen now or recorded before (attempts[].stoppedBy)."""
    seen = draft.obs.gpus.stopped_by if draft.obs.gpus is not None else None
    accounting = draft.prev.accounting if draft.prev is not None else None
    if seen is None and accounting is not None and accounting.attempts and accounting.attempts[-1].ended is None:
        seen = accounting.attempts[-1].stopped_by
    return seen if seen in PLANNED_STOPS else None


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
    stop = planned_stop(draft)
    if reason not in failures.RETRYABLE or (done >= limit and stop is None):
        return None
    if stop is not None:
        text = f"restart from the last checkpoint after a worker pod was stopped ({stop}), not counted against "
        text += f"recovery.maxRestarts: {reason}: {message}"
    else:
        text = (
            f"restart {done + 1} of recovery.maxRestarts {limit}, from the last checkpoint, after {reason}: {message}"
        )
        done += 1
    avoided = list(draft.prev.avoided_nodes or []) if draft.prev is not None else []
    node = _failed_node(draft, reason) if stop is None else None  # a planned stop says nothing against its node
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
        restarts=done or None,
        job_submission_id=None,
        job_status=None,
        avoided_nodes=avoided or None,
    )
