"""Attempts: which job the status tracks, and suspending one. A run's jobs are attempts; a resume (after
spec.suspend or a Kueue preemption) starts a new one with its own submission id, fresh guard state and stall
clock. A suspend asks miles for a checkpoint first when `storage.checkpointOnSuspend` is set."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from grpo_operator.api.status import ConditionType, GRPORunStatus, Phase, Reason
from grpo_operator.status.decision import (
    Attempt,
    CheckpointAsk,
    Decision,
    DeleteRayCluster,
    Draft,
    RequestCheckpoint,
    StopJob,
)
from grpo_operator.status.observation import JobObservation, JobState, Seen, parse_rfc3339, rfc3339

C, R = ConditionType, Reason


def current(prev: GRPORunStatus | None, seen: Seen, now: datetime) -> Attempt:
    """The attempt this reconcile tracks. A suspended run's job is not carried over: the resume submits a new one."""
    carried = prev if prev is not None and prev.phase is not Phase.SUSPENDED else None
    attempt = Attempt(
        job_submission_id=carried.job_submission_id if carried else None,
        job_status=carried.job_status if carried else None,
        attempt=prev.attempt if prev else None,
        start_time=prev.start_time if prev else None,
        attempt_start_time=carried.attempt_start_time if carried else None,
        same=carried is not None,
    )
    job = seen.job
    if job is None:
        return attempt
    if job.submission_id != attempt.job_submission_id:  # a job this status has not seen: resume, or a lost write
        attempt = replace(
            attempt,
            job_submission_id=job.submission_id,
            attempt=(attempt.attempt or 0) + 1,
            attempt_start_time=None,
            same=False,
        )
    return _started(replace(attempt, job_status=job.state.value), job, now)


def _started(attempt: Attempt, job: JobObservation, now: datetime) -> Attempt:
    """When the run and this attempt started: first seen RUNNING, or, for a job that ran and ended between two
    reconciles and so was never seen RUNNING, the start Ray recorded."""
    if job.state is JobState.PENDING:
        return attempt
    if job.state is JobState.RUNNING:
        first: str | None = rfc3339(now)
    else:
        first = rfc3339(job.submitted_at) if job.submitted_at else None
    return replace(
        attempt,
        start_time=attempt.start_time or first,
        attempt_start_time=attempt.attempt_start_time or first,
    )


def submitted(draft: Draft, submission_id: str) -> Attempt | None:
    """The attempt `submission_id` opens once submitted (its guards' memory starts afresh); None when the status
    tracks that job already (a Ray API hiccup hid it; its guards' memory, e.g. the repetition streak, must stay)."""
    if submission_id == draft.attempt.job_submission_id:
        return None
    prev_attempt = draft.prev.attempt if draft.prev else None
    return replace(
        draft.attempt,
        job_submission_id=submission_id,
        job_status=None,
        attempt=(prev_attempt or 0) + 1,
        attempt_start_time=None,
        same=False,
    )


def submit_refused(decision: Decision, prev: GRPORunStatus | None, why: str) -> Decision:
    """The decision once its submission was refused: the attempt it opened did not start (no job exists), so the
    status keeps the previous attempt's job and says why; the next reconcile submits again."""
    fields = ("job_submission_id", "job_status", "attempt", "accounting")
    kept = {key: getattr(prev, key) if prev else None for key in fields}
    status = decision.status.model_copy(update={**kept, "message": f"the Ray job could not be submitted: {why}"})
    return replace(decision, status=status)


def _checkpoint_wait(draft: Draft) -> tuple[int | None, str, bool] | None:
    """While a suspending run waits for its checkpoint: (rollout when the sentinel existed, when it was asked for,
    whether to ask now); None when the job should stop now. miles checks the sentinel after each rollout's
    metrics are out, so a checkpoint is surely written once the rollout after the next one reports."""
    prev, seen, spec, state = draft.prev, draft.seen, draft.spec, draft.progress.guard
    job = seen.job
    if not spec.storage.checkpoint_on_suspend or job is None or job.state is not JobState.RUNNING:
        return None
    asked = prev.suspend_requested_time if prev is not None else None
    if asked is None:
        return None if state.last_rollout is None else (None, rfc3339(draft.now), True)
    if (draft.now - (parse_rfc3339(asked) or draft.now)).total_seconds() > spec.guards.stall_timeout_seconds:
        return None
    sentinel = seen.checkpoint_job
    if sentinel in (JobState.FAILED, JobState.STOPPED):
        return None  # the sentinel could not be written: stop without a checkpoint
    requested = prev.suspend_requested_rollout if prev is not None else None
    if requested is None:
        return (state.last_rollout if sentinel is JobState.SUCCEEDED else None), asked, False
    if state.last_rollout is not None and state.last_rollout >= requested + 2:
        return None
    return requested, asked, False


def suspend(draft: Draft) -> Decision:
    """spec.suspend: checkpoint first when asked to, then stop the job and delete the RayCluster."""
    job, conds = draft.seen.job, draft.conds
    waiting = _checkpoint_wait(draft)
    if waiting is not None and job is not None:
        rollout, asked, request = waiting
        conds.set(C.JOB_RUNNING, True, R.SUSPENDING, "waiting for the checkpoint before stopping")
        message = (
            "suspending: asking miles for a checkpoint"
            if rollout is None
            else f"suspending: miles saves a checkpoint after rollout {rollout + 1}; the job stops then"
        )
        actions = (RequestCheckpoint(job.submission_id),) if request else ()
        return draft.decide(Phase.RUNNING, R.SUSPENDING, message, actions, checkpoint=CheckpointAsk(rollout, asked))
    conds.set(C.RESOURCES_READY, None, R.SUSPENDED, "the RayCluster is deleted while suspended")
    conds.set(C.JOB_RUNNING, False, R.SUSPENDED, "stopped by spec.suspend")
    conds.set(C.METRICS_AVAILABLE, None, R.NOT_RUNNING, "the trainer is not running")
    stop = (StopJob(job.submission_id),) if job is not None and job.state.active else ()
    return draft.decide(
        Phase.SUSPENDED, R.SUSPENDED, "stopped by spec.suspend; set it to false to resume", (*stop, DeleteRayCluster())
    )


def job_seen(draft: Draft) -> bool:
    """The status saw the job this reconcile looks for (the driver waiting or running): a job absent now was lost,
    not yet to be submitted."""
    prev = draft.prev
    if prev is None or not prev.job_submission_id or prev.job_submission_id != draft.intent.submission_id:
        return False
    return prev.phase is Phase.RUNNING or prev.reason == R.WAITING_FOR_DRIVER


def unreachable(draft: Draft) -> Decision:
    """The Ray Jobs API did not answer (a blip, the head restarting, the client's backoff): nothing new is known of
    the job, so the last phase stands and nothing is submitted; a head that answers without the job is `head_lost`."""
    prev = draft.prev
    assert prev is not None and prev.phase is not None
    why = draft.seen.ray_unavailable or "no answer"
    message = (
        f"the Ray Jobs API cannot be reached ({why}): the last phase ({prev.phase}/{prev.reason}) is kept and "
        f"nothing is submitted until it answers"
    )
    return draft.decide(prev.phase, prev.reason or R.RUNNING, message)
