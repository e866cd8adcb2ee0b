"""Attempts: which job the status tracks, the submission id of each attempt, and suspending with a checkpoint."""

from __future__ import annotations

from datetime import timedelta

import pytest
from grpo_operator.api.status import GRPORunStatus, Phase, Reason
from grpo_operator.render.names import submission_id
from grpo_operator.status.attempts import submit_refused
from grpo_operator.status.decision import DeleteRayCluster, RequestCheckpoint, StopJob, Submit
from grpo_operator.status.lifecycle import decide
from grpo_operator.status.observation import JobObservation, JobState, Seen

from tests.support.status import READY, SID, T0, at, healthy, intent, job, run_through, spec

UID = "0123456789abcdef"


@pytest.mark.parametrize(
    ("prev", "expected"),
    [
        pytest.param(None, "grpo-r-01234567-g2", id="the first attempt of generation 2"),
        pytest.param(
            GRPORunStatus(phase=Phase.PROVISIONING, job_submission_id="grpo-r-old", attempt=1),
            "grpo-r-old",
            id="a job already submitted keeps its id",
        ),
        pytest.param(
            GRPORunStatus(phase=Phase.SUSPENDED, job_submission_id="grpo-r-old", attempt=1),
            "grpo-r-01234567-g2-a2",
            id="a resume after a suspend is attempt 2",
        ),
        pytest.param(
            GRPORunStatus(phase=Phase.PENDING, attempt=3),
            "grpo-r-01234567-g2-a4",
            id="a new attempt after three is the fourth",
        ),
        pytest.param(
            GRPORunStatus(phase=Phase.PENDING), "grpo-r-01234567-g2", id="a pending run without an attempt is the first"
        ),
    ],
)
def test_each_attempt_has_its_own_deterministic_submission_id(prev: GRPORunStatus | None, expected: str) -> None:
    assert submission_id("r", UID, 2, prev) == expected


def test_the_submit_decision_holds_the_new_attempt_and_a_resubmit_of_the_same_job_keeps_it() -> None:
    s = spec()
    first = decide(None, Seen(cluster=READY), intent(s), T0)
    assert Submit("grpo-x-1") in first.actions
    assert (first.status.job_submission_id, first.status.attempt, first.status.reason) == ("grpo-x-1", 1, "Submitting")
    again = decide(
        first.status, Seen(cluster=READY), intent(s), T0
    )  # the job was not found: submitted again, same attempt
    assert Submit("grpo-x-1") in again.actions and again.status.attempt == 1


def test_a_job_the_status_has_not_seen_is_a_new_attempt_with_fresh_guard_state() -> None:
    s = spec()
    running = run_through(intent(s), at(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(7, repetition=0.9)))
    assert running.status.guards.repetition_streak == 1 and running.status.attempt == 1
    other = decide(
        running.status, Seen(cluster=READY, job=job(JobState.RUNNING, submission_id="grpo-x-2")), intent(s), T0
    )
    assert (
        other.status.attempt == 2
        and other.status.guards.repetition_streak == 0
        and other.status.guards.last_rollout is None
    )


def test_a_suspend_without_checkpoint_stops_the_job_and_deletes_the_cluster() -> None:
    s = spec({"suspend": True, "storage": {"checkpointOnSuspend": False}})
    d = decide(None, Seen(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(3)), intent(s), T0)
    assert (d.status.phase, d.status.reason) == (Phase.SUSPENDED, Reason.SUSPENDED)
    assert d.actions == (StopJob("grpo-x-1"), DeleteRayCluster())


def test_a_suspend_with_checkpoint_asks_once_then_stops_two_rollouts_after_the_sentinel() -> None:
    s = spec({"suspend": True, "storage": {"checkpointOnSuspend": True}})
    seen = {"cluster": READY, "job": job(JobState.RUNNING)}
    asked = run_through(intent(s), at(**seen, metrics=healthy(5)))
    assert asked.actions == (RequestCheckpoint("grpo-x-1"),) and asked.status.reason == Reason.SUSPENDING
    written = decide(asked.status, Seen(**seen, metrics=healthy(5), checkpoint_job=JobState.SUCCEEDED), intent(s), T0)
    assert written.actions == () and written.status.suspend_requested_rollout == 5
    later = T0 + timedelta(minutes=1)
    saving = decide(written.status, Seen(**seen, metrics=healthy(6)), intent(s), later)
    assert saving.status.phase is Phase.RUNNING and saving.actions == ()
    saved = decide(saving.status, Seen(**seen, metrics=healthy(7)), intent(s), later)
    assert saved.status.phase is Phase.SUSPENDED and saved.actions == (StopJob("grpo-x-1"), DeleteRayCluster())


def test_a_resume_submits_a_new_attempt_with_its_own_id() -> None:
    s = spec()
    suspended = GRPORunStatus(phase=Phase.SUSPENDED, reason="Suspended", job_submission_id="grpo-x-1", attempt=1)
    d = decide(suspended, Seen(cluster=READY), intent(s, submission_id="grpo-x-1-a2"), T0)
    assert Submit("grpo-x-1-a2") in d.actions and d.status.attempt == 2 and d.status.guards.last_rollout is None


def test_a_job_that_ran_and_ended_between_two_reconciles_has_the_start_ray_recorded() -> None:
    s = spec()
    submitted = decide(None, Seen(cluster=READY), intent(s), T0).status
    ray_start = T0 - timedelta(seconds=40)
    ended = JobObservation(SID, JobState.SUCCEEDED, "done", submitted_at=ray_start)
    d = decide(submitted, Seen(cluster=READY, job=ended, metrics=healthy(1)), intent(s), T0)
    assert d.status.start_time == "2026-11-30T11:59:20Z"
    unknown = decide(submitted, Seen(cluster=READY, job=job(JobState.FAILED)), intent(s), T0)
    assert unknown.status.start_time is None  # never seen running, and Ray kept no start: nothing is claimed


def test_a_running_job_starts_the_run_when_first_seen_and_keeps_that_start() -> None:
    s = spec()
    first = decide(None, Seen(cluster=READY, job=job(JobState.RUNNING)), intent(s), T0).status
    assert first.start_time == "2026-11-30T12:00:00Z"
    later = Seen(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(2))
    assert decide(first, later, intent(s), T0 + timedelta(minutes=5)).status.start_time == "2026-11-30T12:00:00Z"


def test_a_refused_submission_claims_no_new_attempt_and_says_why() -> None:
    s = spec()
    first = decide(None, Seen(cluster=READY), intent(s), T0)
    refused = submit_refused(first, None, "401 Unauthorized")
    assert (refused.status.job_submission_id, refused.status.attempt) == (None, None)
    assert refused.status.message == "the Ray job could not be submitted: 401 Unauthorized"
    assert refused.actions == first.actions  # what was done is still what was decided
    resumed = GRPORunStatus(phase=Phase.SUSPENDED, job_submission_id="grpo-x-1", job_status="STOPPED", attempt=1)
    again = submit_refused(decide(resumed, Seen(cluster=READY), intent(s), T0), resumed, "timed out")
    assert (again.status.job_submission_id, again.status.job_status, again.status.attempt) == ("grpo-x-1", "STOPPED", 1)
