"""The conditions a user reads (`kubectl get grpo -o yaml`, `kubectl wait --for=condition=...`) in each state
before the job runs: every condition type present with the status and reason of that state, so a wait on
ResourcesReady, JobRunning or Complete never sees a stale or missing condition."""

from __future__ import annotations

from grpo_operator.api.status import ConditionType, Phase, Reason
from grpo_operator.status.decision import Decision, StopJob, Submit
from grpo_operator.status.intent import NoPlan
from grpo_operator.status.lifecycle import unplanned
from grpo_operator.status.observation import ClusterObservation, JobState, RewardObservation

from tests.support.status import PREEMPTED_BY_KUEUE, READY, T0, at, healthy, intent, job, run_through, spec

C, R = ConditionType, Reason
QUEUED = ClusterObservation(ready=False, message="waiting for Kueue", queue="team-a")
REMOTE = {"reward": {"type": "remote", "remote": {"replicas": 1}}}


def conditions(decision: Decision) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in decision.status.conditions}


def test_a_queued_run_has_every_condition_of_waiting_for_admission() -> None:
    d = run_through(intent(spec(REMOTE)), at(cluster=QUEUED))
    assert (d.status.phase, d.status.reason) == (Phase.PENDING, R.QUEUED)
    assert conditions(d) == {
        C.VALIDATED: ("True", R.VALID),
        C.RESOURCES_READY: ("False", R.WAITING_FOR_ADMISSION),
        C.REWARD_SERVICE_READY: ("False", R.NOT_CREATED),
        C.JOB_RUNNING: ("False", R.NOT_SUBMITTED),
        C.METRICS_AVAILABLE: ("Unknown", R.NOT_RUNNING),
        C.COMPLETE: ("False", R.IN_PROGRESS),
    }


def test_a_run_whose_cluster_is_being_created_waits_with_a_missing_reward_service_named() -> None:
    d = run_through(intent(spec(REMOTE)), at(cluster=ClusterObservation(False, "2/3 pods ready")))
    assert (d.status.phase, d.status.reason) == (Phase.PROVISIONING, R.PROVISIONING)
    assert d.status.message == "2/3 pods ready; reward service: not created yet"
    assert conditions(d) == {
        C.VALIDATED: ("True", R.VALID),
        C.RESOURCES_READY: ("False", R.PROVISIONING),
        C.REWARD_SERVICE_READY: ("False", R.NOT_CREATED),
        C.JOB_RUNNING: ("False", R.NOT_SUBMITTED),
        C.METRICS_AVAILABLE: ("Unknown", R.NOT_RUNNING),
        C.HEALTHY: ("Unknown", R.NO_METRICS),
        C.COMPLETE: ("False", R.IN_PROGRESS),
    }


def test_a_run_with_a_ready_cluster_and_inline_reward_submits_with_resources_ready() -> None:
    d = run_through(intent(), at(cluster=READY))
    assert (d.status.phase, d.status.reason) == (Phase.PROVISIONING, R.SUBMITTING)
    assert conditions(d) == {
        C.VALIDATED: ("True", R.VALID),
        C.RESOURCES_READY: ("True", R.READY),
        C.REWARD_SERVICE_READY: ("True", R.NOT_REQUIRED),
        C.JOB_RUNNING: ("False", R.NOT_SUBMITTED),
        C.METRICS_AVAILABLE: ("Unknown", R.NOT_RUNNING),
        C.HEALTHY: ("Unknown", R.NO_METRICS),
        C.COMPLETE: ("False", R.IN_PROGRESS),
    }


def test_a_pending_driver_shows_rays_message_in_the_status_and_job_running() -> None:
    d = run_through(intent(), at(cluster=READY), at(cluster=READY, job=job(JobState.PENDING, "pulling image")))
    assert (d.status.phase, d.status.reason, d.status.message) == (
        Phase.PROVISIONING,
        R.WAITING_FOR_DRIVER,
        "pulling image",
    )
    running = next(c for c in d.status.conditions if c.type == C.JOB_RUNNING)
    assert (running.status, running.reason, running.message) == ("False", R.PENDING, "pulling image")
    assert conditions(d)[C.COMPLETE] == ("False", R.IN_PROGRESS)


def test_a_running_job_whose_cluster_loses_readiness_shows_resources_not_ready() -> None:
    d = run_through(
        intent(),
        at(cluster=READY),
        at(cluster=READY, job=job(JobState.RUNNING)),
        at(cluster=ClusterObservation(False, "1/3 pods ready"), job=job(JobState.RUNNING)),
    )
    ready = next(c for c in d.status.conditions if c.type == C.RESOURCES_READY)
    assert (ready.status, ready.reason, ready.message) == ("False", R.PROVISIONING, "1/3 pods ready")


def test_a_run_suspended_again_before_any_submission_is_queued_not_preempted() -> None:
    d = run_through(intent(), at(cluster=QUEUED), at(cluster=ClusterObservation(False)), at(cluster=QUEUED))
    assert (d.status.phase, d.status.reason) == (Phase.PENDING, R.QUEUED)
    assert not d.has(StopJob)


def test_a_preempted_run_whose_job_is_gone_stays_suspended_preempted_on_later_reconciles() -> None:
    first = run_through(
        intent(), at(cluster=READY), at(cluster=READY, job=job(JobState.RUNNING)), at(cluster=PREEMPTED_BY_KUEUE)
    )
    assert (first.status.phase, first.status.reason) == (Phase.SUSPENDED, R.PREEMPTED)
    later = run_through(intent(), at(cluster=PREEMPTED_BY_KUEUE), prev=first.status)
    assert (later.status.phase, later.status.reason) == (Phase.SUSPENDED, R.PREEMPTED)


def test_a_remote_reward_that_is_not_ready_keeps_the_run_provisioning_with_its_reason() -> None:
    reward = RewardObservation(False, R.NOT_READY, "0/1 replicas ready")
    d = run_through(intent(spec(REMOTE)), at(cluster=READY, reward=reward))
    assert d.status.message == "waiting for the RayCluster; reward service: 0/1 replicas ready"
    assert conditions(d)[C.REWARD_SERVICE_READY] == ("False", R.NOT_READY)
    assert conditions(d)[C.RESOURCES_READY] == ("False", R.PROVISIONING)


def test_a_spec_that_parses_but_fails_validation_fails_in_the_validators_words_and_submits_nothing() -> None:
    problem = "spec.rollout.globalBatchSize: 100 must be divisible by the data-parallel size 8"
    d = unplanned(None, NoPlan(1, problems=(problem,)), T0)
    assert (d.status.phase, d.status.reason, d.status.message) == (Phase.FAILED, R.INVALID_SPEC, problem)
    assert conditions(d)[C.VALIDATED] == ("False", R.INVALID_SPEC)
    assert not d.has(Submit)


def test_a_running_job_is_job_running_and_not_complete() -> None:
    d = run_through(intent(), at(cluster=READY), at(cluster=READY, job=job(JobState.RUNNING)))
    assert (d.status.phase, d.status.reason) == (Phase.RUNNING, R.RUNNING)
    assert conditions(d)[C.JOB_RUNNING] == ("True", R.RUNNING)
    assert conditions(d)[C.COMPLETE] == ("False", R.IN_PROGRESS)


def test_a_preemption_seen_while_the_job_still_runs_stops_it_and_says_the_trainer_is_not_running() -> None:
    d = run_through(
        intent(),
        at(cluster=READY),
        at(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(2)),
        at(cluster=PREEMPTED_BY_KUEUE, job=job(JobState.RUNNING), metrics=healthy(2)),
    )
    assert (d.status.phase, d.status.reason) == (Phase.SUSPENDED, R.PREEMPTED)
    assert d.has(StopJob)
    assert conditions(d)[C.METRICS_AVAILABLE] == ("Unknown", R.NOT_RUNNING)


def test_a_run_the_user_suspended_then_resumed_under_a_queue_is_queued_not_preempted() -> None:
    suspended = run_through(intent(suspend=True), at(cluster=READY), at())
    assert (suspended.status.phase, suspended.status.reason) == (Phase.SUSPENDED, R.SUSPENDED)
    d = run_through(intent(), at(cluster=QUEUED), prev=suspended.status)
    assert (d.status.phase, d.status.reason) == (Phase.PENDING, R.QUEUED)


def test_a_pending_driver_first_seen_after_a_lost_status_write_is_not_complete() -> None:
    d = run_through(intent(), at(cluster=READY, job=job(JobState.PENDING)))
    assert conditions(d)[C.COMPLETE] == ("False", R.IN_PROGRESS)
