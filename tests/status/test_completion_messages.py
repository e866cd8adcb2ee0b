"""What a user reads when the job ends: the Failed message quotes the job's last line that says something (not
the launcher's bookkeeping), the exit code the launcher recorded, and an Unverified success says whether the
log had its end-of-run summary; a verified success sets Complete=True for `kubectl wait`."""

from __future__ import annotations

import pytest
from grpo_operator.api.status import ConditionType, Phase, Reason
from grpo_operator.status.observation import JobState, RunSummary

from tests.support.status import READY, at, healthy, intent, job, run_through, spec

ERROR = "ValueError: the dataset has no column 'prompt'"


def failed_message(message: str, summary: RunSummary | None = None) -> str:
    d = run_through(intent(), at(cluster=READY, job=job(JobState.FAILED, message), summary=summary))
    assert (d.status.phase, d.status.reason) == (Phase.FAILED, Reason.JOB_FAILED)
    return d.status.message or ""


@pytest.mark.parametrize(
    "tail",
    [
        "GRPO_RUN_SUMMARY {}",
        "--- last available logs ---",
        "[info] miles exited with code 1",
        "   ",
    ],
)
def test_a_failed_run_quotes_the_last_line_that_is_not_the_launchers_bookkeeping(tail: str) -> None:
    assert failed_message(f"Traceback (most recent call last):\n{ERROR}\n{tail}\n") == f"the Ray job failed: {ERROR}"


def test_a_failed_runs_quoted_line_is_cut_at_500_characters() -> None:
    assert failed_message("x" * 700) == "the Ray job failed: " + "x" * 500


def test_a_failed_run_names_the_exit_code_the_launcher_recorded_when_ray_gives_none() -> None:
    message = failed_message(ERROR, RunSummary(exit_code=137))
    assert message == f"the Ray job failed with exit code 137: {ERROR}"


@pytest.mark.parametrize(
    ("summary", "suffix"),
    [
        pytest.param(None, " and its log has no end-of-run summary", id="no summary in the log says so"),
        pytest.param(
            RunSummary(exit_code=0, last_rollout=7, rollouts=(healthy(7),)), "", id="a summary in the log adds nothing"
        ),
    ],
)
def test_an_unverified_success_says_whether_the_log_had_its_summary(summary: RunSummary | None, suffix: str) -> None:
    s = spec({"rollout": {"numRollout": 10}})
    d = run_through(
        intent(s),
        at(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(7)),
        at(cluster=READY, job=job(JobState.SUCCEEDED), summary=summary),
    )
    assert (d.status.phase, d.status.reason) == (Phase.FAILED, Reason.UNVERIFIED)
    assert d.status.message == (
        f"the Ray job succeeded but the end cannot be verified: the last rollout observed is 8/10{suffix}"
    )


def test_a_verified_success_sets_complete_true_for_kubectl_wait() -> None:
    s = spec({"rollout": {"numRollout": 10}})
    d = run_through(
        intent(s),
        at(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(9)),
        at(cluster=READY, job=job(JobState.SUCCEEDED)),
    )
    assert d.status.phase is Phase.SUCCEEDED
    complete = next(c for c in d.status.conditions if c.type == ConditionType.COMPLETE)
    assert (complete.status, complete.reason, complete.message) == ("True", Reason.SUCCEEDED, "10/10 rollouts")


def test_a_success_read_only_from_the_end_of_run_summary_is_healthy_at_its_last_rollout() -> None:
    s = spec({"rollout": {"numRollout": 10}})
    summary = RunSummary(exit_code=0, last_rollout=9, rollouts=(healthy(9),))
    d = run_through(intent(s), at(cluster=READY, job=job(JobState.SUCCEEDED), summary=summary))
    healthy_condition = next(c for c in d.status.conditions if c.type == ConditionType.HEALTHY)
    assert (healthy_condition.status, healthy_condition.reason, healthy_condition.message) == (
        "True",
        Reason.METRICS_HEALTHY,
        "rollout 10/10",
    )


def test_a_job_that_ended_without_a_summary_says_its_metrics_are_not_available() -> None:
    d = run_through(intent(), at(cluster=READY, job=job(JobState.FAILED, ERROR)))
    available = next(c for c in d.status.conditions if c.type == ConditionType.METRICS_AVAILABLE)
    assert (available.status, available.reason) == ("False", Reason.NO_RUN_SUMMARY)
