"""Recovery: a job that failed for a reason a fresh start can fix (`status.failures.RETRYABLE`: NCCL or fabric,
a lost node, a dead rollout engine, host memory, a GPU's hardware fault) restarts from the last checkpoint as a new
attempt, at most `spec.recovery.maxRestarts` times; a failure that follows a planned stop of one of the open
attempt's worker pods (a drain's eviction, a scheduler's preemption, a delete: the pod's preStop saved first)
restarts without counting against it, as a Kueue preemption or a suspend resumes. Anything else, and a failure past
that count, ends the run `Failed`. The restart forgets the failed job, so the next reconcile submits the next
attempt's id, and keeps its log tail like any ended job. When the failure's evidence blames a worker's node
(`status.failures.Blame`), the next attempt's workers keep off that node (`status.avoidedNodes`, a required node
affinity; the RayCluster is deleted and made again without it); the avoidance lasts that one attempt, so a node
blamed once is not lost to the run. A RayCluster with a pod unschedulable past the provisioning limit is deleted,
freeing the GPUs its scheduled pods hold: made again without the avoided nodes when it kept off some, else the run
ends `Failed/ProvisioningTimeout`."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from grpo_operator.api.status import ConditionType, Phase, Reason, StopReason
from grpo_operator.status import failures
from grpo_operator.status.decision import Action, Decision, DeleteRayCluster, Draft, Event, Recovery
from grpo_operator.status.observation import parse_rfc3339

C, R = ConditionType, Reason
# The provisioning limit when the spec sets none: time for a cluster autoscaler to bring GPU nodes (often 10-20
# minutes for a large instance), and more for a run of more nodes, before held GPUs are given back.
PROVISIONING_SECONDS = 1800
PROVISIONING_SECONDS_PER_NODE = 60


def used(draft: Draft) -> int:
    return (draft.prev.restarts or 0) if draft.prev is not None else 0


# Stops someone made on purpose, which the worker's preStop hook saves before: they cost the rollouts after the
# save, not a restart. A taint manager's or the kubelet's stop (a node gone bad, node pressure) may come again, so
# its failure counts like any other.
PLANNED_STOPS = frozenset({StopReason.EVICTION, StopReason.PREEMPTION, StopReason.DELETED})


def attempt_start(draft: Draft) -> datetime | None:
    """When the open attempt began, as the accounting recorded it (its job's submission); when none is open, the
    last one's end. None before any attempt."""
    accounting = draft.prev.accounting if draft.prev is not None else None
    last = accounting.attempts[-1] if accounting is not None and accounting.attempts else None
    if last is None:
        return None
    return parse_rfc3339(last.started if last.ended is None else last.ended)


def _before(moment: datetime, since: datetime | None, now: datetime) -> bool:
    """`moment` came before `since`, at the status's one-second grain (as status/accounting.py `_stops` judges)."""
    return since is not None and min(now, moment.replace(microsecond=0)) < since


def planned_stop(draft: Draft) -> str | None:
    """The planned stop of one of the open attempt's worker pods, seen now (stopped at or after the attempt's start:
    a pod of an earlier attempt stuck terminating is not this attempt's) or recorded before (attempts[].stoppedBy,
    recorded under the same rule)."""
    gpus = draft.seen.gpus
    seen = gpus.stopped_by if gpus is not None else None
    if gpus is not None and gpus.stopped_at is not None and _before(gpus.stopped_at, attempt_start(draft), draft.now):
        seen = None
    accounting = draft.prev.accounting if draft.prev is not None else None
    if seen is None and accounting is not None and accounting.attempts and accounting.attempts[-1].ended is None:
        seen = accounting.attempts[-1].stopped_by
    return seen if seen in PLANNED_STOPS else None


def host_oom(draft: Draft) -> tuple[str, str] | None:
    """The open attempt's failure as the kubelet's OOM kill of one of the run's containers during it says it:
    (HostOutOfMemory, the message); None without one. It comes before the log's classes: what the log shows after
    the kill (a lost node, a peer's remote error) is what the kill caused."""
    killed = draft.seen.oom_killed
    if killed is None or _before(killed[1], attempt_start(draft), draft.now):
        return None
    found = failures.oom_killed(*killed)
    logs = draft.seen.logs
    where = f" (log tail: ConfigMap {logs.config_map})" if logs is not None else ""
    return found.reason, f"{found.message}{where}"


def _blamed_node(draft: Draft, reason: str) -> tuple[str, str] | None:
    """The worker node the failure's evidence is against, and why (Ray names a node by its pod's IP)."""
    job = draft.seen.job
    text = draft.seen.log_text or (job.message if job else "")
    found = failures.classify(text, job.driver_ip if job is not None else None)
    if found is None or found.reason != reason or found.blamed is None:
        return None
    node = dict(draft.seen.worker_nodes).get(found.blamed)
    return (node, found.evidence) if node is not None else None


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
    blamed = _blamed_node(draft, reason) if stop is None else None  # a planned stop says nothing against its node
    actions: tuple[Action, ...] = ()
    avoided: list[str] | None = None  # an earlier attempt's avoidance ends with it
    if blamed is not None:
        node, why = blamed
        avoided, actions = [node], (DeleteRayCluster(),)
        text = f"{text}; the next attempt's workers keep off node {node} ({why})"
    draft.conds.set(C.COMPLETE, False, R.IN_PROGRESS, "")
    draft.events.append(Event("Normal", R.RESTARTED, text))
    forgotten = replace(draft.attempt, job_submission_id=None, job_status=None)  # the next reconcile submits anew
    return draft.decide(
        Phase.PROVISIONING, R.RESTARTING, text, actions, attempt=forgotten, recovery=Recovery(done or None, avoided)
    )


def provisioning_limit(draft: Draft) -> int | None:
    """The seconds a pod of the RayCluster may wait unschedulable: the spec's, else sized from the plan's GPU
    nodes; None for no limit (the spec's 0)."""
    chosen = draft.spec.recovery.provisioning_timeout_seconds
    if chosen is not None:
        return chosen or None
    nodes = draft.intent.plan.total_nodes if draft.intent.plan is not None else 1
    return PROVISIONING_SECONDS + PROVISIONING_SECONDS_PER_NODE * nodes


def unschedulable(draft: Draft) -> Decision | None:
    """The RayCluster has had a pod unschedulable past the provisioning limit: delete it, giving back the GPUs its
    scheduled pods hold, and make it again without the avoided nodes when it keeps off some (the pool may have no
    other), else end the run Failed/ProvisioningTimeout; in the scheduler's words (the cluster's message names each
    pod and why). None while within the limit."""
    since, limit = draft.seen.unschedulable_since, provisioning_limit(draft)
    if since is None or limit is None or draft.now < since + timedelta(seconds=limit):
        return None
    chosen = draft.spec.recovery.provisioning_timeout_seconds is not None
    rule = "recovery.provisioningTimeoutSeconds" if chosen else "the default for its GPU nodes"
    waited = f"a pod of the RayCluster was unschedulable for {int((draft.now - since).total_seconds())} s ({rule}: "
    waited += f"{limit} s)"
    cluster = draft.seen.cluster
    said = cluster.message if cluster is not None and cluster.message else "the scheduler gave no reason"
    avoided = (draft.prev.avoided_nodes or []) if draft.prev is not None else []
    if avoided:
        text = f"{waited} while the workers kept off node {', '.join(avoided)}: the RayCluster is made again without "
        text += f"keeping off it, not counted against recovery.maxRestarts: {said}"
        draft.conds.set(C.COMPLETE, False, R.IN_PROGRESS, "")
        draft.events.append(Event("Normal", R.RESTARTED, text))
        kept_off = Recovery(draft.prev.restarts if draft.prev is not None else None, None)
        return draft.decide(Phase.PROVISIONING, R.RESTARTING, text, (DeleteRayCluster(),), recovery=kept_off)
    text = f"{waited}: the RayCluster is deleted, giving back the GPUs its scheduled pods held: {said}"
    draft.conds.set(C.COMPLETE, True, R.PROVISIONING_TIMEOUT, text)
    draft.warn(text)
    return draft.decide(Phase.FAILED, R.PROVISIONING_TIMEOUT, text, (DeleteRayCluster(),))
