"""Attempts: which job the status tracks, the submission id of each attempt, and suspending with a checkpoint."""

from __future__ import annotations

from datetime import timedelta

import pytest
from grpo_operator.api.status import GRPORunStatus, Phase, Reason
from grpo_operator.render.names import submission_id
from grpo_operator.status.attempts import submit_refused
from grpo_operator.status.decision import DeleteRayCluster, RequestCheckpoint, StopJob, Submit
from grpo_operator.status.lifecycle import decide
from grpo_operator.status.observation import JobObservation, JobState

from tests.status.runs import READY, SID, T0, healthy, job, observe, run_through, spec

UID = "0123456789abcdef"


@pytest.mark.parametrize(
    ("prev", "expected"),
    [
        (None, "grpo-r-01234567-g2"),
        (GRPORunStatus(phase=Phase.PROVISIONING, job_submission_id="grpo-r-old", attempt=1), "grpo-r-old"),
        (GRPORunStatus(phase=Phase.SUSPENDED, job_submission_id="grpo-r-old", attempt=1), "grpo-r-01234567-g2-a2"),
        (GRPORunStatus(phase=Phase.PENDING, attempt=3), "grpo-r-01234567-g2-a4"),
        (GRPORunStatus(phase=Phase.PENDING), "grpo-r-01234567-g2"),
    ],
)
def test_each_attempt_has_its_own_deterministic_submission_id(prev: GRPORunStatus | None, expected: str) -> None:
    assert submission_id("r", UID, 2, prev) == expected


def test_the_submit_decision_holds_the_new_attempt_and_a_resubmit_of_the_same_job_keeps_it() -> None:
    s = spec()
    first = decide(None, observe(cluster=READY), s)
    assert Submit("grpo-x-1") in first.actions
    assert (first.status.job_submission_id, first.status.attempt, first.status.reason) == ("grpo-x-1", 1, "Submitting")
    again = decide(first.status, observe(cluster=READY), s)  # the job was not found: submitted again, same attempt
    assert Submit("grpo-x-1") in again.actions and again.status.attempt == 1


def test_a_job_the_status_has_not_seen_is_a_new_attempt_with_fresh_guard_state() -> None:
    s = spec()
    running = run_through(s, observe(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(7, repetition=0.9)))
    assert running.status.repetition_streak == 1 and running.status.attempt == 1
    other = decide(running.status, observe(cluster=READY, job=job(JobState.RUNNING, submission_id="grpo-x-2")), s)
    assert other.status.attempt == 2 and other.status.repetition_streak == 0 and other.status.guard_rollout is None


def test_a_suspend_without_checkpoint_stops_the_job_and_deletes_the_cluster() -> None:
    s = spec({"suspend": True, "storage": {"checkpointOnSuspend": False}})
    d = decide(None, observe(suspend=True, cluster=READY, job=job(JobState.RUNNING), metrics=healthy(3)), s)
    assert (d.status.phase, d.status.reason) == (Phase.SUSPENDED, Reason.SUSPENDED)
    assert d.actions == (StopJob("grpo-x-1"), DeleteRayCluster())


def test_a_suspend_with_checkpoint_asks_once_then_stops_two_rollouts_after_the_sentinel() -> None:
    s = spec({"suspend": True, "storage": {"checkpointOnSuspend": True}})
    seen = {"suspend": True, "cluster": READY, "job": job(JobState.RUNNING)}
    asked = run_through(s, observe(**seen, metrics=healthy(5)))
    assert asked.actions == (RequestCheckpoint("grpo-x-1"),) and asked.status.reason == Reason.SUSPENDING
    written = decide(asked.status, observe(**seen, metrics=healthy(5), checkpoint_job=JobState.SUCCEEDED), s)
    assert written.actions == () and written.status.suspend_requested_rollout == 5
    later = T0 + timedelta(minutes=1)
    saving = decide(written.status, observe(**seen, now=later, metrics=healthy(6)), s)
    assert saving.status.phase is Phase.RUNNING and saving.actions == ()
    saved = decide(saving.status, observe(**seen, now=later, metrics=healthy(7)), s)
    assert saved.status.phase is Phase.SUSPENDED and saved.actions == (StopJob("grpo-x-1"), DeleteRayCluster())


def test_a_resume_submits_a_new_attempt_with_its_own_id() -> None:
    s = spec()
    suspended = GRPORunStatus(phase=Phase.SUSPENDED, reason="Suspended", job_submission_id="grpo-x-1", attempt=1)
    d = decide(suspended, observe(cluster=READY, submission_id="grpo-x-1-a2"), s)
    assert Submit("grpo-x-1-a2") in d.actions and d.status.attempt == 2 and d.status.guard_rollout is None


def test_a_job_that_ran_and_ended_between_two_reconciles_has_the_start_ray_recorded() -> None:
    s = spec()
    submitted = decide(None, observe(cluster=READY), s).status
    ray_start = T0 - timedelta(seconds=40)
    ended = JobObservation(SID, JobState.SUCCEEDED, "done", submitted_at=ray_start)
    d = decide(submitted, observe(cluster=READY, job=ended, metrics=healthy(1)), s)
    assert d.status.start_time == "2026-11-30T11:59:20Z"
    unknown = decide(submitted, observe(cluster=READY, job=job(JobState.FAILED)), s)
    assert unknown.status.start_time is None  # never seen running, and Ray kept no start: nothing is claimed


def test_a_running_job_starts_the_run_when_first_seen_and_keeps_that_start() -> None:
    s = spec()
    first = decide(None, observe(cluster=READY, job=job(JobState.RUNNING)), s).status
    assert first.start_time == "2026-11-30T12:00:00Z"
    later = observe(cluster=READY, job=job(JobState.RUNNING), now=T0 + timedelta(minutes=5), metrics=healthy(2))
    assert decide(first, later, s).status.start_time == "2026-11-30T12:00:00Z"


def test_a_refused_submission_claims_no_new_attempt_and_says_why() -> None:
    s = spec()
    first = decide(None, observe(cluster=READY), s)
    refused = submit_refused(first, None, "401 Unauthorized")
    assert (refused.status.job_submission_id, refused.status.attempt) == (None, None)
    assert refused.status.message == "the Ray job could not be submitted: 401 Unauthorized"
    assert refused.actions == first.actions  # what was done is still what was decided
    resumed = GRPORunStatus(phase=Phase.SUSPENDED, job_submission_id="grpo-x-1", job_status="STOPPED", attempt=1)
    again = submit_refused(decide(resumed, observe(cluster=READY), s), resumed, "timed out")
    assert (again.status.job_submission_id, again.status.job_status, again.status.attempt) == ("grpo-x-1", "STOPPED", 1)
