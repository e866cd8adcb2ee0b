"""The job ended: Succeeded only when verified; otherwise Failed with the reason; a terminal run winds down."""

from __future__ import annotations

import pytest
from grpo_operator.api.status import ConditionType, GRPORunStatus, Phase, Reason
from grpo_operator.status.completion import job_failure
from grpo_operator.status.decision import ApplyChildren, DeleteRayCluster, KeepLogs, StopJob
from grpo_operator.status.lifecycle import decide
from grpo_operator.status.observation import ClusterObservation, Failure, JobState, RunSummary, Seen, TrainerMetrics

from tests.support.status import LOGS, READY, T0, at, cond, healthy, intent, job, run_through, spec

C = ConditionType


def _end(
    scraped: TrainerMetrics | None, summary: RunSummary | None = None, **guards: object
) -> tuple[Phase | None, str | None]:
    s = spec({"rollout": {"numRollout": 10}, "guards": guards} if guards else {"rollout": {"numRollout": 10}})
    seen = [at(cluster=READY, job=job(JobState.RUNNING), metrics=scraped)] if scraped else []
    d = run_through(intent(s), *seen, at(cluster=READY, job=job(JobState.SUCCEEDED), summary=summary))
    return d.status.phase, d.status.reason


@pytest.mark.parametrize(
    ("scraped", "summary", "expected"),
    [
        pytest.param(
            healthy(9), None, (Phase.SUCCEEDED, "Succeeded"), id="the last rollout scraped: succeeded"
        ),  # the last rollout (0-based 9 of 10) was scraped
        pytest.param(
            healthy(8), None, (Phase.FAILED, "Unverified"), id="one short of numRollout: unverified"
        ),  # one short of numRollout
        pytest.param(None, None, (Phase.FAILED, "Unverified"), id="no rollout seen: unverified"),
        pytest.param(
            healthy(3),
            RunSummary(exit_code=0, last_rollout=9, rollouts=(healthy(9),)),
            (Phase.SUCCEEDED, "Succeeded"),
            id="the summary names the last rollout: succeeded",
        ),
        pytest.param(
            healthy(3),
            RunSummary(exit_code=0, last_rollout=8, rollouts=(healthy(8),)),
            (Phase.FAILED, "Unverified"),
            id="the summary one short: unverified",
        ),
    ],
)
def test_success_is_verified_by_the_final_rollout(
    scraped: TrainerMetrics | None, summary: RunSummary | None, expected: tuple[Phase, str]
) -> None:
    assert _end(scraped, summary) == expected


@pytest.mark.parametrize("action", ["Stop", "Warn"])
def test_a_degenerate_run_whose_job_succeeded_fails_under_either_guard_action(action: str) -> None:
    degenerate = RunSummary(exit_code=0, last_rollout=9, rollouts=(healthy(9, reward=0.0),))
    floor = {"value": 0.1, "afterRollouts": 1}
    assert _end(healthy(3), degenerate, action=action, minReward=floor) == (Phase.FAILED, "DegenerateOutput")


def test_success_keeps_the_log_tail_and_then_the_terminal_run_deletes_its_cluster() -> None:
    s = spec({"rollout": {"numRollout": 10}})
    summary = RunSummary(exit_code=0, last_rollout=9, rollouts=(healthy(9),))
    done = run_through(intent(s), at(cluster=READY, job=job(JobState.SUCCEEDED), summary=summary, logs=LOGS))
    assert done.status.phase is Phase.SUCCEEDED and done.status.logs == LOGS
    assert done.actions == (ApplyChildren(), KeepLogs("grpo-x-1"))
    assert [e.reason for e in done.events] == [Reason.LOGS_KEPT, Reason.ATTEMPT_ENDED]
    later = decide(done.status, Seen(cluster=READY, job=job(JobState.SUCCEEDED)), intent(s, generation=2), T0)
    assert later.actions == (DeleteRayCluster(),) and later.status.phase is Phase.SUCCEEDED
    assert {c.observed_generation for c in later.status.conditions} == {2}


def test_a_terminal_run_whose_job_still_runs_stops_it_before_deleting_anything() -> None:
    prev = GRPORunStatus(phase=Phase.FAILED, reason="Stalled", job_submission_id="grpo-x-1")
    d = decide(prev, Seen(cluster=READY, job=job(JobState.RUNNING)), intent(), T0)
    assert d.actions == (StopJob("grpo-x-1"),)
    gone = decide(prev, Seen(), intent(), T0)
    assert gone.actions == ()


def test_a_terminal_run_without_a_kept_log_keeps_it_then_deletes_the_cluster() -> None:
    prev = GRPORunStatus(phase=Phase.FAILED, reason="JobFailed", job_submission_id="grpo-x-1")
    d = decide(prev, Seen(cluster=ClusterObservation(True), job=job(JobState.FAILED), logs=LOGS), intent(), T0)
    assert d.actions == (KeepLogs("grpo-x-1"), DeleteRayCluster()) and d.status.logs == LOGS


@pytest.mark.parametrize(
    ("message", "summary", "expected"),
    [
        pytest.param(
            "x\npreflight failed: /fsx not mounted\n",
            None,
            ("PreflightFailed", "preflight failed: /fsx not mounted"),
            id="the preflight's own line",
        ),
        pytest.param(
            "Job entrypoint command failed with exit code 3\nboom",
            None,
            ("JobFailed", "the Ray job failed with exit code 3: boom"),
            id="the exit code and the last line",
        ),
        pytest.param(
            "",
            RunSummary(failure=Failure("RewardServiceFailed", "gave up")),
            ("RewardServiceFailed", "gave up"),
            id="the failure file's reason",
        ),
    ],
)
def test_a_failed_job_says_why_in_one_line(message: str, summary: RunSummary | None, expected: tuple[str, str]) -> None:
    assert job_failure(message, summary, None) == expected


def test_a_job_stopped_outside_the_operator_fails_as_job_stopped() -> None:
    d = decide(None, Seen(cluster=READY, job=job(JobState.STOPPED)), intent(), T0)
    assert (d.status.phase, d.status.reason) == (Phase.FAILED, "JobStopped")
    assert cond(d, C.JOB_RUNNING) == ("False", "Stopped")
