"""`decide` as one table: the observed state picks the concern, and the Decision lists every action the reconcile
takes, in order: suspend, guard stop, success and deletion among them."""

from __future__ import annotations

import pytest
from grpo_operator.api.status import GRPORunStatus, Phase, Reason, RunLogs
from grpo_operator.status.decision import (
    Action,
    ApplyChildren,
    CreateTokenSecret,
    DeleteRayCluster,
    KeepLogs,
    StopJob,
    Submit,
)
from grpo_operator.status.intent import NoPlan
from grpo_operator.status.lifecycle import decide, on_delete, unplanned
from grpo_operator.status.observation import JobState, RunSummary, Seen

from tests.support.status import READY, T0, healthy, intent, job, spec

LOGS = RunLogs(config_map="x-job-logs", key="log", submission_id="grpo-x-1", bytes=3, truncated=False)
DONE = RunSummary(exit_code=0, last_rollout=99, rollouts=(healthy(99),))
RUNNING = job(JobState.RUNNING)
S = {"storage": {"checkpointOnSuspend": False}}
LOW = {"guards": {"minReward": {"value": 0.1, "afterRollouts": 1}}}


@pytest.mark.parametrize(
    ("patch", "seen", "phase", "reason", "actions"),
    [
        pytest.param(
            {},
            Seen(token_secret=False),
            Phase.PENDING,
            Reason.PROVISIONING,
            (CreateTokenSecret(), ApplyChildren()),
            id="a run without its token Secret makes it before any child",
        ),
        pytest.param(
            {},
            Seen(cluster=READY),
            Phase.PROVISIONING,
            Reason.SUBMITTING,
            (ApplyChildren(), Submit("grpo-x-1")),
            id="a ready cluster gets the job submitted",
        ),
        pytest.param(
            {},
            Seen(cluster=READY, job=RUNNING, metrics=healthy(4)),
            Phase.RUNNING,
            Reason.RUNNING,
            (ApplyChildren(),),
            id="a running job keeps its children in place",
        ),
        pytest.param(
            {**S, "suspend": True},
            Seen(cluster=READY, job=RUNNING),
            Phase.SUSPENDED,
            Reason.SUSPENDED,
            (StopJob("grpo-x-1"), DeleteRayCluster()),
            id="a suspend stops the job and deletes the cluster",
        ),
        pytest.param(
            LOW,
            Seen(cluster=READY, job=RUNNING, metrics=healthy(4, reward=0.0)),
            Phase.FAILED,
            Reason.DEGENERATE_OUTPUT,
            (ApplyChildren(), StopJob("grpo-x-1")),
            id="a tripped guard stops the job",
        ),
        pytest.param(
            {},
            Seen(cluster=READY, job=job(JobState.SUCCEEDED), summary=DONE, logs=LOGS),
            Phase.SUCCEEDED,
            Reason.SUCCEEDED,
            (ApplyChildren(), KeepLogs("grpo-x-1")),
            id="a verified success keeps the job's log tail",
        ),
    ],
)
def test_the_decision_lists_every_action_in_order(
    patch: dict[str, object], seen: Seen, phase: Phase, reason: Reason, actions: tuple[Action, ...]
) -> None:
    d = decide(None, seen, intent(spec(patch)), T0)
    assert (d.status.phase, d.status.reason, d.actions) == (phase, reason, actions)


def test_deleting_a_run_stops_its_active_job_and_nothing_else() -> None:
    prev = GRPORunStatus(phase=Phase.RUNNING, job_submission_id="grpo-x-1")
    stop = on_delete(prev, RUNNING)
    assert stop is not None and stop.actions == (StopJob("grpo-x-1"),)
    ended = on_delete(prev, job(JobState.SUCCEEDED))
    assert ended is not None and ended.actions == ()
    assert on_delete(None, None) is None


def test_an_invalid_spec_takes_no_action_not_even_the_token_secret() -> None:
    d = unplanned(None, NoPlan(1, problems=("spec.x: bad",)), T0)
    assert d.actions == () and d.status.reason == Reason.INVALID_SPEC
