"""A running job: the trainer's numbers (the end-of-run summary once the job ended, else the scrape, else the last
seen) with its evaluations (`status.evaluation`) and outputs, whether they can be read at all (a failing scrape is `MetricsAvailable=False`, not a stall), the guards'
verdict, and stopping the job when a guard trips under `guards.action: Stop`."""

from __future__ import annotations

from datetime import datetime

from grpo_operator.api.spec import GRPORunSpec, GuardAction
from grpo_operator.api.status import (
    ConditionType,
    EvalSetStatus,
    GRPORunStatus,
    GuardMemory,
    MetricsSource,
    Phase,
    Reason,
    RunMetrics,
    RunOutputs,
)
from grpo_operator.status import evaluation, forensics, guards
from grpo_operator.status.conditions import Conditions
from grpo_operator.status.decision import Decision, Draft, Progress, StopJob
from grpo_operator.status.guards import Trip
from grpo_operator.status.observation import (
    EvalReading,
    JobState,
    RunSummary,
    Seen,
    TrainerMetrics,
    parse_rfc3339,
    rfc3339,
)

C, R = ConditionType, Reason


def _run_metrics(seen: TrainerMetrics, now: datetime, source: MetricsSource) -> RunMetrics:
    return RunMetrics(
        rollout=seen.rollout,
        raw_reward=seen.raw_reward,
        repetition_frac=seen.repetition_frac,
        truncated_ratio=seen.truncated_ratio,
        step_time_seconds=seen.step_time_seconds,
        updated_at=rfc3339(now),
        source=source,
    )


def progress(prev: GRPORunStatus | None, seen: Seen, spec: GRPORunSpec, state: GuardMemory, now: datetime) -> Progress:
    """Fold what this reconcile saw into the metrics and the guards' memory; each rollout counts once."""
    job = seen.job
    summary = seen.summary if job is not None and not job.state.active else None
    metrics = prev.metrics if prev else None
    if summary is not None and summary.last is not None:
        metrics = _run_metrics(summary.last, now, MetricsSource.RUN_SUMMARY)
        for rollout in summary.rollouts:  # the rollouts no scrape caught count too
            if state.last_rollout is None or (rollout.rollout is not None and rollout.rollout > state.last_rollout):
                state = guards.advance(state, spec.guards, rollout, now)
    elif seen.metrics is not None and seen.metrics.rollout is not None:
        metrics = _run_metrics(seen.metrics, now, MetricsSource.SCRAPE)
        state = guards.advance(state, spec.guards, seen.metrics, now)
    evals, warnings = _evaluation(prev, seen, spec, summary)
    return Progress(metrics, state, spec.rollout.num_rollout, evals, _outputs(prev, summary), tuple(warnings))


def _evaluation(
    prev: GRPORunStatus | None, seen: Seen, spec: GRPORunSpec, summary: RunSummary | None
) -> tuple[list[EvalSetStatus] | None, list[str]]:
    """The eval sets with this reconcile's evaluations folded in: the summary's once the job ended, else the
    scrape's; the training reward of an evaluation's rollout where this reconcile or the last one saw it."""
    old = prev.evaluation if prev is not None else None
    rewards: dict[int | None, float | None] = {}
    evals: tuple[EvalReading, ...] = ()
    if prev is not None and prev.metrics is not None:
        rewards[prev.metrics.rollout] = prev.metrics.raw_reward
    if summary is not None:
        evals = summary.evals
        rewards.update({r.rollout: r.raw_reward for r in summary.rollouts})
    elif seen.metrics is not None:
        evals = seen.metrics.evals
        rewards[seen.metrics.rollout] = seen.metrics.raw_reward
    return evaluation.fold(old, evals, rewards.get, spec.guards.eval_regression)


def _outputs(prev: GRPORunStatus | None, summary: RunSummary | None) -> RunOutputs | None:
    found = summary.outputs if summary is not None else None
    if found is None or (found.checkpoint_iteration is None and found.huggingface_path is None):
        return prev.outputs if prev is not None else None
    return RunOutputs(
        checkpoint_iteration=found.checkpoint_iteration,
        checkpoint_path=found.checkpoint_path,
        huggingface_path=found.huggingface_path,
        huggingface_verified=found.huggingface_verified,
    )


def _scrape_failed(conds: Conditions, now: datetime, spec: GRPORunSpec, error: str) -> str | None:
    """A failing scrape; past the stall timeout it is an outage, warned about once. Returns that warning."""
    old = conds.get(C.METRICS_AVAILABLE)
    since = parse_rfc3339(old.last_transition_time) if old is not None and old.status == "False" else now
    outage = (now - (since or now)).total_seconds()
    if outage <= spec.guards.stall_timeout_seconds:
        conds.set(C.METRICS_AVAILABLE, False, R.SCRAPE_FAILED, error)
        return None
    text = (
        f"the trainer's metrics could not be read for {int(outage)} s: {error}; "
        "progress and the stall guard are blind until they come back"
    )
    conds.set(C.METRICS_AVAILABLE, False, R.SCRAPE_OUTAGE, text)
    return text if old is None or old.reason != R.SCRAPE_OUTAGE else None


def availability(draft: Draft) -> bool:
    """Set MetricsAvailable: can the trainer's numbers be read at all. True when they can."""
    seen, conds, job = draft.seen, draft.conds, draft.seen.job
    if job is None or job.state is JobState.PENDING:
        conds.set(C.METRICS_AVAILABLE, None, R.NOT_RUNNING, "the trainer is not running")
        return False
    if job.state is JobState.RUNNING:
        if seen.metrics is not None and seen.metrics.rollout is None:
            answer = "the trainer's metrics endpoint answers; miles serves gauges only after its first rollout"
            conds.set(C.METRICS_AVAILABLE, True, R.NO_ROLLOUT_YET, answer)
        elif seen.metrics is not None:
            conds.set(C.METRICS_AVAILABLE, True, R.SCRAPED, f"rollout {seen.metrics.rollout} scraped")
        elif seen.metrics_error is not None:
            warning = _scrape_failed(conds, draft.now, draft.spec, seen.metrics_error)
            if warning is not None:
                draft.warn(warning)
        else:
            conds.set(C.METRICS_AVAILABLE, None, R.NOT_SCRAPED, "waiting for the driver's node address")
        return seen.metrics is not None
    if seen.summary is not None:
        last = f"end-of-run summary read from the job log: last rollout {seen.summary.last_rollout}"
        conds.set(C.METRICS_AVAILABLE, True, R.RUN_SUMMARY, last)
        return True
    conds.set(C.METRICS_AVAILABLE, False, R.NO_RUN_SUMMARY, "the job ended without an end-of-run summary in its log")
    return False


def _as_trainer(metrics: RunMetrics | None) -> TrainerMetrics | None:
    if metrics is None:
        return None
    return TrainerMetrics(
        metrics.rollout, metrics.raw_reward, metrics.repetition_frac, metrics.truncated_ratio, metrics.step_time_seconds
    )


def health(draft: Draft) -> Trip | None:
    """Set Healthy from the guards; the trip, if one tripped. The stall guard judges only a running job. Without
    metrics read this reconcile (a scrape outage) Healthy keeps its last verdict: nothing new was observed."""
    state, spec, metrics = draft.progress.guard, draft.spec, draft.progress.metrics
    job = draft.seen.job
    trip = guards.degenerate(state, spec.guards, _as_trainer(metrics))
    trip = trip or evaluation.regression(draft.progress.evaluation, spec.guards.eval_regression)
    if trip is None and job is not None and job.state is JobState.RUNNING:
        since = parse_rfc3339(draft.attempt.attempt_start_time)
        trip = guards.stalled(state, spec.guards, since, draft.now, draft.metrics_available)
    if trip is not None:
        draft.conds.set(C.HEALTHY, False, trip.reason, trip.message)
    elif metrics is not None and draft.metrics_available:
        draft.conds.set(C.HEALTHY, True, R.METRICS_HEALTHY, f"rollout {draft.progress.text}")
    elif metrics is None:
        draft.conds.set(C.HEALTHY, None, R.NO_METRICS, "no metrics observed yet")
    return trip


def running(draft: Draft, trip: Trip | None) -> Decision:
    """The job runs: stop it when a guard tripped under Stop, warn under Warn; a lost worker is Provisioning."""
    job, conds, cluster = draft.seen.job, draft.conds, draft.seen.cluster
    assert job is not None
    conds.set(C.JOB_RUNNING, True, R.RUNNING, f"submission {job.submission_id}")
    conds.set(C.COMPLETE, False, R.IN_PROGRESS, "")
    if trip is not None and draft.spec.guards.action is GuardAction.STOP:
        conds.set(C.JOB_RUNNING, False, R.STOPPED, f"stopped by the operator: {trip.message}")
        conds.set(C.COMPLETE, True, trip.reason, trip.message)
        draft.warn(trip.message)
        before = forensics.kept(draft.prev)
        name, now = draft.intent.evidence_config_map, draft.now
        capture, bundles, events = forensics.capture(
            before, job, trip.reason, "before it is stopped", name=name, now=now
        )
        draft.events.extend(events)
        return draft.decide(
            Phase.FAILED, trip.reason, trip.message, (*capture, StopJob(job.submission_id)), forensics=bundles
        )
    if trip is not None:
        draft.warn(trip.message)
    if cluster is not None and not cluster.ready:
        # A lost worker: KubeRay keeps the cluster `ready` and only lowers readyWorkerReplicas
        # (docs/integrations/kuberay.md); the job runs short of its GPUs.
        return draft.decide(Phase.PROVISIONING, R.PROVISIONING, cluster.message)
    if trip is not None:
        return draft.decide(Phase.RUNNING, trip.reason, trip.message)
    return draft.decide(Phase.RUNNING, R.RUNNING, f"rollout {draft.progress.text}")
