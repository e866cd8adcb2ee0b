"""Edges of an attempt a user sees in the status: when the run and the attempt started, the repetition guard of
a fresh submission, and a suspend that waits for a checkpoint only up to guards.stallTimeoutSeconds."""

from __future__ import annotations

from datetime import timedelta

from grpo_operator.api.status import ConditionType, Phase, Reason
from grpo_operator.status.decision import Decision, DeleteRayCluster, StopJob, Submit
from grpo_operator.status.observation import JobObservation, JobState

from tests.support.status import READY, SID, T0, at, healthy, intent, job, run_through, spec

C, R = ConditionType, Reason


def test_a_pending_driver_has_not_started_the_run_even_when_ray_recorded_a_submission_time() -> None:
    pending = JobObservation(SID, JobState.PENDING, submitted_at=T0)
    d = run_through(intent(), at(cluster=READY), at(T0 + timedelta(minutes=1), cluster=READY, job=pending))
    assert (d.status.start_time, d.status.attempt_start_time) == (None, None)


def test_a_job_that_ended_unseen_between_two_reconciles_gives_its_attempt_rays_start_too() -> None:
    ended = JobObservation(SID, JobState.FAILED, "boom", submitted_at=T0 + timedelta(seconds=30))
    d = run_through(intent(), at(cluster=READY), at(T0 + timedelta(hours=1), cluster=READY, job=ended))
    assert d.status.attempt_start_time == "2026-11-30T12:00:30Z"


def test_a_fresh_submission_needs_the_full_streak_of_repetitive_rollouts_to_trip_the_guard() -> None:
    s = spec({"guards": {"consecutiveRollouts": 2, "maxRepetitionFrac": 0.3}})
    submitted = run_through(intent(s), at(cluster=READY))
    assert submitted.has(Submit) and submitted.status.guards.repetition_streak == 0
    one = run_through(
        intent(s), at(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(1, 0.6)), prev=submitted.status
    )
    assert (one.status.phase, one.status.reason) == (Phase.RUNNING, R.RUNNING)
    assert not one.has(StopJob)


def _suspending(seconds: float) -> tuple[Decision, Decision]:
    s = spec({"suspend": True, "storage": {"checkpointOnSuspend": True}, "guards": {"stallTimeoutSeconds": 600}})
    running = run_through(
        intent(s), at(cluster=READY), at(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(4))
    )
    asked = run_through(
        intent(s, suspend=True), at(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(4)), prev=running.status
    )
    later = at(
        T0 + timedelta(seconds=seconds),
        cluster=READY,
        job=job(JobState.RUNNING),
        metrics=healthy(4),
        checkpoint_job=JobState.PENDING,
    )
    return asked, run_through(intent(s, suspend=True), later, prev=asked.status)


def test_a_suspend_waiting_for_its_checkpoint_shows_the_job_still_running_as_suspending() -> None:
    asked, _ = _suspending(1)
    running = next(c for c in asked.status.conditions if c.type == C.JOB_RUNNING)
    assert (running.status, running.reason) == ("True", R.SUSPENDING)


def test_a_suspend_waits_for_the_checkpoint_up_to_the_stall_timeout_and_stops_after_it() -> None:
    _, at_limit = _suspending(600)
    assert (at_limit.status.phase, at_limit.status.reason) == (Phase.RUNNING, R.SUSPENDING)
    assert not at_limit.has(StopJob)
    _, past = _suspending(601)
    assert (past.status.phase, past.status.reason) == (Phase.SUSPENDED, R.SUSPENDED)
    assert past.has(StopJob) and past.has(DeleteRayCluster)


def test_a_suspended_run_shows_its_resources_and_metrics_as_unknown_not_ready() -> None:
    _, past = _suspending(601)
    conditions = {c.type: (c.status, c.reason) for c in past.status.conditions}
    assert conditions[C.RESOURCES_READY] == ("Unknown", R.SUSPENDED)
    assert conditions[C.JOB_RUNNING] == ("False", R.SUSPENDED)
    assert conditions[C.METRICS_AVAILABLE] == ("Unknown", R.NOT_RUNNING)


def test_the_status_names_the_trainer_image_and_digest_the_pods_run_and_keeps_them() -> None:
    image, digest = "ghcr.io/x/trainer:1.2", "ghcr.io/x/trainer@sha256:" + "a" * 64
    running = run_through(
        intent(),
        at(cluster=READY),
        at(cluster=READY, job=job(JobState.RUNNING), trainer_image=image, trainer_image_id=digest),
    )
    assert running.status.provenance is not None
    assert (running.status.provenance.image, running.status.provenance.image_id) == (image, digest)
    later = run_through(intent(), at(cluster=READY, job=job(JobState.RUNNING)), prev=running.status)
    assert later.status.provenance == running.status.provenance
