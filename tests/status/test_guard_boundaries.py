"""The guards' boundaries as a user sets them: a repetition fraction exactly at guards.maxRepetitionFrac is not
degenerate (the rule is "above"), and guards.minReward starts judging once afterRollouts rollouts are done."""

from __future__ import annotations

from datetime import timedelta

from grpo_operator.api.status import ConditionType, Phase, Reason
from grpo_operator.status.observation import JobState, RunSummary, TrainerMetrics

from tests.support.status import READY, T0, at, healthy, intent, job, run_through, spec


def test_rollouts_exactly_at_the_repetition_limit_keep_the_run_running() -> None:
    s = spec({"guards": {"maxRepetitionFrac": 0.5, "consecutiveRollouts": 2}})
    seen = [
        at(T0 + timedelta(seconds=10 * i), cluster=READY, job=job(JobState.RUNNING), metrics=healthy(i, 0.5))
        for i in range(4)
    ]
    d = run_through(intent(s), *seen)
    assert (d.status.phase, d.status.reason, d.status.guards.repetition_streak) == (Phase.RUNNING, Reason.RUNNING, 0)


def _with_reward_at_the_floor(rollout: int) -> tuple[Phase | None, str | None]:
    s = spec({"guards": {"minReward": {"value": 0.1, "afterRollouts": 5}}})
    d = run_through(intent(s), at(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(rollout, reward=0.1)))
    return d.status.phase, d.status.reason


def test_the_reward_floor_is_judged_from_the_rollout_that_completes_after_rollouts() -> None:
    assert _with_reward_at_the_floor(3) == (Phase.RUNNING, Reason.RUNNING)  # rollout 3 (0-based): 4 done
    assert _with_reward_at_the_floor(4) == (Phase.FAILED, Reason.DEGENERATE_OUTPUT)  # 5 done


def _idle_for(seconds: int) -> tuple[Phase | None, str | None]:
    s = spec({"guards": {"stallTimeoutSeconds": 60}})
    seen = [
        at(T0 + timedelta(seconds=t), cluster=READY, job=job(JobState.RUNNING), metrics=healthy(1))
        for t in (0, seconds)
    ]
    d = run_through(intent(s), *seen)
    return d.status.phase, d.status.reason


def test_a_run_stalls_only_once_it_has_made_no_progress_for_longer_than_the_stall_timeout() -> None:
    assert _idle_for(60) == (Phase.RUNNING, Reason.RUNNING)
    assert _idle_for(61) == (Phase.FAILED, Reason.STALLED)


def test_rollouts_the_scrapes_already_counted_are_not_counted_again_from_the_end_of_run_summary() -> None:
    s = spec({"rollout": {"numRollout": 2}, "guards": {"maxRepetitionFrac": 0.5, "consecutiveRollouts": 3}})
    scraped = [
        at(T0 + timedelta(seconds=10 * i), cluster=READY, job=job(JobState.RUNNING), metrics=healthy(i, 0.6))
        for i in range(2)
    ]
    summary = RunSummary(exit_code=0, last_rollout=1, rollouts=(healthy(0, 0.6), healthy(1, 0.6)))
    end = at(T0 + timedelta(seconds=30), cluster=READY, job=job(JobState.SUCCEEDED), summary=summary)
    d = run_through(intent(s), *scraped, end)
    assert (d.status.phase, d.status.reason) == (Phase.SUCCEEDED, Reason.SUCCEEDED)


def _scrape_failing_for(seconds: int) -> tuple[str, str]:
    s = spec({"guards": {"stallTimeoutSeconds": 60}})
    seen = [
        at(T0 + timedelta(seconds=t), cluster=READY, job=job(JobState.RUNNING), metrics_error="refused")
        for t in (0, seconds)
    ]
    d = run_through(intent(s), *seen)
    c = next(c for c in d.status.conditions if c.type == ConditionType.METRICS_AVAILABLE)
    return c.status, c.reason


def test_a_failing_scrape_becomes_an_outage_only_past_the_stall_timeout() -> None:
    assert _scrape_failing_for(60) == ("False", Reason.SCRAPE_FAILED)
    assert _scrape_failing_for(61) == ("False", Reason.SCRAPE_OUTAGE)


def test_a_stall_warned_about_stays_unhealthy_once_the_job_fails_without_a_summary() -> None:
    s = spec({"guards": {"stallTimeoutSeconds": 60, "action": "Warn"}})
    seen = [
        at(T0 + timedelta(seconds=t), cluster=READY, job=job(JobState.RUNNING), metrics=healthy(1)) for t in (0, 61)
    ]
    stalled = run_through(intent(s), *seen)
    assert (stalled.status.phase, stalled.status.reason) == (Phase.RUNNING, Reason.STALLED)
    failed = run_through(
        intent(s),
        at(T0 + timedelta(seconds=90), cluster=READY, job=job(JobState.FAILED, "killed")),
        prev=stalled.status,
    )
    c = next(c for c in failed.status.conditions if c.type == ConditionType.HEALTHY)
    assert (c.status, c.reason) == ("False", Reason.STALLED)


def test_a_trainer_that_has_logged_no_rollout_yet_is_not_yet_judged_healthy() -> None:
    d = run_through(intent(), at(cluster=READY, job=job(JobState.RUNNING), metrics=TrainerMetrics()))
    c = next(c for c in d.status.conditions if c.type == ConditionType.HEALTHY)
    assert (c.status, c.reason) == ("Unknown", Reason.NO_METRICS)


def test_a_run_the_guard_stopped_is_complete_with_the_guards_reason() -> None:
    s = spec({"guards": {"minReward": {"value": 0.1, "afterRollouts": 1}}})
    d = run_through(intent(s), at(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(3, reward=0.0)))
    c = next(c for c in d.status.conditions if c.type == ConditionType.COMPLETE)
    assert (c.status, c.reason) == ("True", Reason.DEGENERATE_OUTPUT)
