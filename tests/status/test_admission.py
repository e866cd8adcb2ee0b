"""Before the job runs: the spec's verdict, Kueue admission and preemption, readiness, submission, the driver."""

from __future__ import annotations

import pytest
from grpo_operator.api.status import ConditionType, GRPORunStatus, Phase, Reason
from grpo_operator.status.decision import ApplyChildren, CreateTokenSecret, StopJob, Submit
from grpo_operator.status.lifecycle import decide
from grpo_operator.status.observation import ClusterObservation, JobState, RewardObservation

from tests.status.runs import PREEMPTED_BY_KUEUE, READY, cond, job, observe, run_through, spec

C = ConditionType
QUEUED = ClusterObservation(ready=False, message="waiting for Kueue", queue="team-a")


def test_an_invalid_spec_fails_in_the_validators_words_and_does_nothing() -> None:
    d = decide(None, observe(problems=("spec.rollout.batchSize: bad",)), None)
    assert (d.status.phase, d.status.reason, d.status.message) == (
        Phase.FAILED,
        "InvalidSpec",
        "spec.rollout.batchSize: bad",
    )
    assert cond(d, C.VALIDATED) == ("False", "InvalidSpec") and d.actions == ()


@pytest.mark.parametrize(
    ("seen", "phase", "reason", "submits"),
    [
        ({}, Phase.PENDING, Reason.PROVISIONING, False),
        ({"cluster": ClusterObservation(False, "0/3 nodes")}, Phase.PROVISIONING, Reason.PROVISIONING, False),
        ({"cluster": READY}, Phase.PROVISIONING, Reason.SUBMITTING, True),
        ({"cluster": READY, "reward_required": True}, Phase.PROVISIONING, Reason.PROVISIONING, False),
        (
            {"cluster": READY, "reward_required": True, "reward": RewardObservation(True, Reason.READY, "1 ready")},
            Phase.PROVISIONING,
            Reason.SUBMITTING,
            True,
        ),
        ({"cluster": READY, "job": job(JobState.PENDING)}, Phase.PROVISIONING, Reason.WAITING_FOR_DRIVER, False),
        ({"cluster": QUEUED}, Phase.PENDING, Reason.QUEUED, False),
    ],
)
def test_before_the_job_runs(seen: dict[str, object], phase: Phase, reason: Reason, submits: bool) -> None:
    d = decide(None, observe(**seen), spec())
    assert (d.status.phase, d.status.reason) == (phase, reason)
    assert d.actions[0] == ApplyChildren()
    assert any(isinstance(a, Submit) for a in d.actions) is submits


def test_the_token_secret_is_made_before_any_child() -> None:
    d = decide(None, observe(token_secret=False), spec())
    assert d.actions == (CreateTokenSecret(), ApplyChildren())


def test_a_kueue_preemption_while_the_driver_is_still_pending_stops_the_job() -> None:
    s = spec()
    pending = run_through(s, observe(cluster=READY), observe(cluster=READY, job=job(JobState.PENDING)))
    assert pending.status.reason == Reason.WAITING_FOR_DRIVER
    d = decide(pending.status, observe(cluster=PREEMPTED_BY_KUEUE, job=job(JobState.PENDING)), s)
    assert (d.status.phase, d.status.reason) == (Phase.SUSPENDED, Reason.PREEMPTED)
    assert StopJob("grpo-x-1") in d.actions


def test_a_job_found_running_under_a_suspended_cluster_is_stopped_whatever_the_status_said() -> None:
    prev = GRPORunStatus(phase=Phase.PENDING, reason="Queued")
    d = decide(prev, observe(cluster=PREEMPTED_BY_KUEUE, job=job(JobState.RUNNING)), spec())
    assert d.status.reason == Reason.PREEMPTED and StopJob("grpo-x-1") in d.actions


def test_a_queued_run_that_never_ran_is_queued_not_preempted() -> None:
    d = run_through(spec(), observe(cluster=QUEUED), observe(cluster=QUEUED))
    assert (d.status.phase, d.status.reason) == (Phase.PENDING, Reason.QUEUED)
    assert cond(d, C.JOB_RUNNING) == ("False", "NotSubmitted")
