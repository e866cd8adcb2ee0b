"""Before the job runs: the spec's verdict, Kueue admission and preemption, readiness, submission, the driver."""

from __future__ import annotations

import pytest
from grpo_operator.api.status import ConditionType, GRPORunStatus, Phase, Reason
from grpo_operator.status.decision import ApplyChildren, CreateTokenSecret, StopJob, Submit
from grpo_operator.status.intent import Intent, NoPlan
from grpo_operator.status.lifecycle import decide, unplanned
from grpo_operator.status.observation import ClusterObservation, JobState, RewardObservation, Seen

from tests.support.status import PREEMPTED_BY_KUEUE, READY, REMOTE_REWARD, T0, at, cond, intent, job, run_through, spec

C = ConditionType
QUEUED = ClusterObservation(ready=False, message="waiting for Kueue", queue="team-a")


def test_an_invalid_spec_fails_in_the_validators_words_and_does_nothing() -> None:
    d = unplanned(None, NoPlan(1, problems=("spec.rollout.batchSize: bad",)), T0)
    assert (d.status.phase, d.status.reason, d.status.message) == (
        Phase.FAILED,
        "InvalidSpec",
        "spec.rollout.batchSize: bad",
    )
    assert cond(d, C.VALIDATED) == ("False", "InvalidSpec") and d.actions == ()


REMOTE = intent(spec(REMOTE_REWARD))


@pytest.mark.parametrize(
    ("want", "seen", "phase", "reason", "submits"),
    [
        pytest.param(intent(), Seen(), Phase.PENDING, Reason.PROVISIONING, False, id="nothing created yet"),
        pytest.param(
            intent(),
            Seen(cluster=ClusterObservation(False, "0/3 nodes")),
            Phase.PROVISIONING,
            Reason.PROVISIONING,
            False,
            id="a cluster not ready",
        ),
        pytest.param(intent(), Seen(cluster=READY), Phase.PROVISIONING, Reason.SUBMITTING, True, id="a ready cluster"),
        pytest.param(
            REMOTE,
            Seen(cluster=READY),
            Phase.PROVISIONING,
            Reason.PROVISIONING,
            False,
            id="a remote reward without its service",
        ),
        pytest.param(
            REMOTE,
            Seen(cluster=READY, reward=RewardObservation(True, Reason.READY, "1 ready")),
            Phase.PROVISIONING,
            Reason.SUBMITTING,
            True,
            id="a remote reward with its service ready",
        ),
        pytest.param(
            intent(),
            Seen(cluster=READY, job=job(JobState.PENDING)),
            Phase.PROVISIONING,
            Reason.WAITING_FOR_DRIVER,
            False,
            id="a pending driver",
        ),
        pytest.param(intent(), Seen(cluster=QUEUED), Phase.PENDING, Reason.QUEUED, False, id="queued in Kueue"),
    ],
)
def test_before_the_job_runs(want: Intent, seen: Seen, phase: Phase, reason: Reason, submits: bool) -> None:
    d = decide(None, seen, want, T0)
    assert (d.status.phase, d.status.reason) == (phase, reason)
    assert d.actions[0] == ApplyChildren()
    assert any(isinstance(a, Submit) for a in d.actions) is submits


def test_the_token_secret_is_made_before_any_child() -> None:
    d = decide(None, Seen(token_secret=False), intent(), T0)
    assert d.actions == (CreateTokenSecret(), ApplyChildren())


def test_a_kueue_preemption_while_the_driver_is_still_pending_stops_the_job() -> None:
    s = spec()
    pending = run_through(intent(s), at(cluster=READY), at(cluster=READY, job=job(JobState.PENDING)))
    assert pending.status.reason == Reason.WAITING_FOR_DRIVER
    d = decide(pending.status, Seen(cluster=PREEMPTED_BY_KUEUE, job=job(JobState.PENDING)), intent(s), T0)
    assert (d.status.phase, d.status.reason) == (Phase.SUSPENDED, Reason.PREEMPTED)
    assert StopJob("grpo-x-1") in d.actions


def test_a_job_found_running_under_a_suspended_cluster_is_stopped_whatever_the_status_said() -> None:
    prev = GRPORunStatus(phase=Phase.PENDING, reason="Queued")
    d = decide(prev, Seen(cluster=PREEMPTED_BY_KUEUE, job=job(JobState.RUNNING)), intent(), T0)
    assert d.status.reason == Reason.PREEMPTED and StopJob("grpo-x-1") in d.actions


def test_a_queued_run_that_never_ran_is_queued_not_preempted() -> None:
    d = run_through(intent(), at(cluster=QUEUED), at(cluster=QUEUED))
    assert (d.status.phase, d.status.reason) == (Phase.PENDING, Reason.QUEUED)
    assert cond(d, C.JOB_RUNNING) == ("False", "NotSubmitted")
